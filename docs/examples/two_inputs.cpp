// The example of docs/guide.md's "A network with two inputs": a two-input residual network,
// shape-checked, trained through Trainer on generated data, saved and reloaded. It includes
// only the umbrella header. The test suite compiles and runs this file.
#include <tessera/tessera.h>

#include <cstdio>

using namespace tessera;

int main() {
    manualSeed(1);

    // 1. Two inputs: a [N, 16] signal and [N, 4] side information; three classes.
    auto signal = node(std::make_shared<Identity>(), {}, "signal");
    auto side = node(std::make_shared<Identity>(), {}, "side");
    auto fcA = node(std::make_shared<Linear>(16, 24), signal, "fcA");
    auto fcB = node(std::make_shared<Linear>(4, 8), side, "fcB");
    auto joined = node(std::make_shared<Concat>(1), {fcA, fcB}, "joined"); // [N, 32]
    auto act = node(std::make_shared<Activation>(ActivationKind::relu), joined, "act");
    auto fc = node(std::make_shared<Linear>(32, 32), act, "fc");
    auto sum = node(std::make_shared<Add>(), {act, fc}, "sum"); // the residual connection
    auto head = node(std::make_shared<Linear>(32, 3), sum, "head");
    Graph net({signal, side}, {head}, "twoInputs");

    // 2. Shape-check before anything is allocated: one shape per input.
    std::printf("output %s\n", str(net.dataShapeFrom(Shapes{{64, 16}, {64, 4}})).c_str());

    // 3. Data: the class is the argmax of three sums of the inputs, so it can be learnt.
    const int64_t n = 512;
    Tensor a = Tensor::randn({n, 16}), b = Tensor::randn({n, 4});
    std::vector<int32_t> labels(n);
    for (int64_t i = 0; i < n; ++i) {
        const float* pa = a.data<float>() + i * 16;
        const float* pb = b.data<float>() + i * 4;
        const float s0 = pa[0] + pa[1] + pb[0], s1 = pa[2] + pa[3] + pb[1], s2 = pa[4] + pa[5] + pb[2];
        labels[i] = s0 > s1 && s0 > s2 ? 0 : (s1 > s2 ? 1 : 2);
    }
    Tensor y = Tensor::fromVector({n}, labels);

    // 4. Train: Trainer takes one data set per input, sample i of each in the same batch.
    CrossEntropy cost;
    Adam adam(1e-2f);
    adam.setupOn(net);
    HandlerOptions options{.batchsize = 32, .progress = false};
    Trainer trainer(net, cost, adam, options);
    Validator validator(net, cost, options);
    const double before = validator.validate({a, b}, {y});
    for (int epoch = 0; epoch < 10; ++epoch) trainer.train({a, b}, {y});
    const double after = validator.validate({a, b}, {y});
    std::printf("error %.3f -> %.3f\n", before, after);

    // 5. Save with the blueprint, and rebuild from the file alone.
    saveModel(net, "two_inputs.h5");
    ModulePtr loaded = buildModule(blueprintFromJson(readBlueprint("two_inputs.h5")));
    loadModel(*loaded, "two_inputs.h5");
    loaded->evalMode();
    net.evalMode();
    const Tensor p = net(Tensors{a, b})[0], q = (*loaded)(Tensors{a, b})[0];
    const bool same = p.toVector<float>() == q.toVector<float>();
    std::printf("reloaded model gives the same outputs: %s\n", same ? "yes" : "no");
    return after < 0.1 && same ? 0 : 1;
}
