// The example of docs/guide.md: build an MLP, shape-check it, run one training step.
// The test suite compiles and runs this file.
#include <cstdio>

#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Dropout.h"
#include "modules/Flatten.h"
#include "modules/Linear.h"

using namespace tessera;

int main() {
    manualSeed(1);

    // 1. Build: images [N, 1, 28, 28] -> 10 scores.
    auto net = std::make_shared<Sequential>("mlp");
    net->append(std::make_shared<Flatten>("flat"))
        .append(std::make_shared<Linear>(784, 256, LinearOptions{.name = "fc1"}))
        .append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu1"}))
        .append(std::make_shared<Dropout>(DropoutOptions{.p = 0.2f, .name = "drop"}))
        .append(std::make_shared<Linear>(256, 10, LinearOptions{.name = "fc2"}));
    std::printf("%lld parameters\n", static_cast<long long>(net->numOfParams()));

    // 2. Shape-check before allocating anything.
    const Shape out = net->dataShapeFrom(Shape{64, 1, 28, 28});
    std::printf("output shape %s\n", out.str().c_str());
    try {
        net->dataShapeFrom(Shape{64, 3, 32, 32}); // wrong image size
        return 1;
    } catch (const ShapeError& e) {
        std::printf("caught: %s\n", e.what());
    }

    // 3. One training step: forward, backward with a gradient of the loss, update.
    Tensor x = Tensor::full({64, 1, 28, 28}, 0.5f);
    Tensor y = (*net)(x);
    Tensor dy = Tensor::full(y.shape(), 1.0f / 64); // d(mean of all scores) / dy
    net->zeroGradParams();
    net->backward(dy);
    net->updateParams(0.01f);

    for (const auto& [name, var] : net->namedParams()) {
        std::printf("%-8s %s\n", name.c_str(), var->data.shape().str().c_str());
    }
    return y.shape() == out ? 0 : 1;
}
