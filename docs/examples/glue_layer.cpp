// The example of docs/layers.md's "Your own layer": a Swish activation with a learnable
// slope, y = x * sigmoid(beta x), written as a Glue layer (no subclass of Module), put in
// a graph, shape-checked, trained, saved and rebuilt from the file. The test suite
// compiles and runs this file.
#include <tessera/tessera.h>

#include <cmath>
#include <cstdio>

using namespace tessera;

// The layer: its shapes, forward, backward, parameter gradient and parameter. It works on
// host copies for brevity; a layer for the GPU would call backend ops instead.
GlueSpec swish() {
    GlueSpec s;
    s.shapes = [](const Shapes& in) {
        if (in.size() != 1) throw ShapeError("expects one input, got " + std::to_string(in.size()));
        return in;
    };
    auto sigmoid = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
    s.forward = [sigmoid](Glue& self, const Tensors& in) {
        const float beta = self.getVar("beta")->data.toVector<float>()[0];
        std::vector<float> y = in[0].toVector<float>();
        for (float& v : y) v = v * sigmoid(beta * v);
        return Tensors{Tensor::fromVector(in[0].shape(), y)};
    };
    s.backward = [sigmoid](Glue& self, const Tensors& grads) {
        const float beta = self.getVar("beta")->data.toVector<float>()[0];
        const std::vector<float> x = self.inData().toVector<float>(), g = grads[0].toVector<float>();
        std::vector<float> dx(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            const float sg = sigmoid(beta * x[i]);
            dx[i] = g[i] * (sg + beta * x[i] * sg * (1 - sg));
        }
        return Tensors{Tensor::fromVector(self.inData().shape(), dx)};
    };
    s.paramGrads = [sigmoid](Glue& self, const Tensors& grads, float scale, float momentum) {
        const float beta = self.getVar("beta")->data.toVector<float>()[0];
        const std::vector<float> x = self.inData().toVector<float>(), g = grads[0].toVector<float>();
        double dbeta = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const float sg = sigmoid(beta * x[i]);
            dbeta += g[i] * x[i] * x[i] * sg * (1 - sg);
        }
        Tensor& grad = self.getVar("beta")->grad;
        const float old = grad.toVector<float>()[0];
        grad.copyFrom(Tensor::fromVector({1}, std::vector<float>{static_cast<float>(scale * dbeta + momentum * old)}));
    };
    s.params = {{"beta", Tensor::fromVector({1}, std::vector<float>{1.0f})}};
    return s;
}

int main() {
    manualSeed(1);
    registerGlue("swish", swish); // blueprints and model files now know the kind

    // 1. A graph with the layer between two linear layers.
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto fc1 = node(std::make_shared<Linear>(4, 16), x, "fc1");
    auto act = node(std::make_shared<Glue>("swish"), fc1, "act");
    auto fc2 = node(std::make_shared<Linear>(16, 1), act, "fc2");
    Graph net({x}, {fc2}, "swishNet");

    // 2. Shape-check the whole graph, and see what a bad input says.
    std::printf("%s -> %s\n", str(Shapes{{32, 4}}).c_str(), str(net.dataShapeFrom(Shapes{{32, 4}})).c_str());
    try {
        net.dataShapeFrom(Shapes{{32, 5}});
    } catch (const ShapeError& e) {
        std::printf("a bad input: %s\n", e.what());
    }

    // 3. Train it to fit y = sum of squares of x, with Adam on every parameter (beta too).
    const Tensor in = Tensor::randn({256, 4});
    std::vector<float> target;
    const std::vector<float> xv = in.toVector<float>();
    for (int64_t n = 0; n < 256; ++n) {
        float t = 0;
        for (int64_t k = 0; k < 4; ++k) t += xv[n * 4 + k] * xv[n * 4 + k];
        target.push_back(t);
    }
    const Tensor y = Tensor::fromVector({256, 1}, target);
    Adam adam(1e-2f);
    adam.setupOn(net);
    MSE mse;
    double first = 0, last = 0;
    for (int step = 0; step < 400; ++step) {
        adam.zeroGradParams();
        const CostResult r = mse(net(in), y);
        net.backward(r.grad[0]);
        adam.update();
        if (step == 0) first = r.error;
        last = r.error;
    }
    const float beta = net.getByName("act").getVar("beta")->data.toVector<float>()[0];
    std::printf("loss %.4f -> %.4f, beta %.3f\n", first, last, beta);

    // 4. Save, and rebuild from the file alone: the blueprint names the Glue kind.
    saveModel(net, "swish.h5");
    ModulePtr loaded = buildModule(blueprintFromJson(readBlueprint("swish.h5")));
    loadModel(*loaded, "swish.h5");
    const bool same = (*loaded)(in).toVector<float>() == net(in).toVector<float>();
    std::printf("reloaded model gives the same outputs: %s\n", same ? "yes" : "no");
    return last < first / 10 && same ? 0 : 1;
}
