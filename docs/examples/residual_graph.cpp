// The example of docs/graphs.md: a small residual network built node by node, its shape
// check, and training steps. The test suite compiles and runs this file.
#include <cstdio>

#include "backend/Random.h"
#include "containers/Graph.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Identity.h"
#include "modules/Linear.h"

using namespace tessera;

// One residual block: x -> fc -> relu -> fc -> (+ x) -> relu.
NodePtr residualBlock(const NodePtr& x, int64_t width, const std::string& name) {
    auto fc1 = node(std::make_shared<Linear>(width, width), x, name + "_fc1");
    auto act = node(std::make_shared<Activation>(ActivationKind::relu), fc1, name + "_relu1");
    auto fc2 = node(std::make_shared<Linear>(width, width), act, name + "_fc2");
    auto sum = node(std::make_shared<Add>(), {x, fc2}, name + "_add");
    return node(std::make_shared<Activation>(ActivationKind::relu), sum, name + "_relu2");
}

int main() {
    manualSeed(1);

    // 1. Build: data [N, 20] -> stem -> two residual blocks -> head [N, 3].
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto stem = node(std::make_shared<Linear>(20, 32), data, "stem");
    auto block1 = residualBlock(stem, 32, "block1");
    auto block2 = residualBlock(block1, 32, "block2");
    auto head = node(std::make_shared<Linear>(32, 3), block2, "head");
    Graph net({data}, {head}, "resnet");
    std::printf("%zu nodes, %lld parameters\n", net.order().size(), static_cast<long long>(net.numOfParams()));

    // 2. Shape-check the whole graph before allocating anything.
    std::printf("output %s\n", net.dataShapeFrom(Shape{16, 20}).str().c_str());
    try {
        net.dataShapeFrom(Shape{16, 24}); // wrong feature count
        return 1;
    } catch (const ShapeError& e) {
        std::printf("caught: %s\n", e.what());
    }

    // 3. Train: make the first output follow the sum of the inputs (mean squared error).
    Tensor x = Tensor::empty({16, 20});
    float* px = x.data<float>();
    for (int i = 0; i < 16 * 20; ++i) px[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.5f;
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 50; ++step) {
        Tensor y = net(x);
        Tensor dy = Tensor::zeros(y.shape());
        float loss = 0.0f;
        for (int n = 0; n < 16; ++n) {
            float target = 0.0f;
            for (int k = 0; k < 20; ++k) target += px[n * 20 + k];
            const float diff = y.data<float>()[n * 3] - target;
            loss += diff * diff / 16;
            dy.data<float>()[n * 3] = 2 * diff / 16;
        }
        net.zeroGradParams();
        net.backward(dy);
        net.updateParams(0.01f);
        if (step == 0) first = loss;
        last = loss;
    }
    std::printf("loss %.4f -> %.4f\n", static_cast<double>(first), static_cast<double>(last));

    // 4. Inference in eval mode frees each value once its consumers have run.
    net.evalMode();
    std::printf("eval output %s\n", net(x).shape().str().c_str());
    return last < first ? 0 : 1;
}
