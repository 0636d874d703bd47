// The example of docs/sequences.md: an LSTM classifies sequences by what it saw at their
// start. Each sequence is 20 steps of 2 features of noise; its class is whether the sum of
// the first feature over the first 5 steps is positive, so the network has to carry that
// through 15 more steps. The test suite compiles and runs this file.
#include <tessera/tessera.h>

#include <cstdio>

using namespace tessera;

int main() {
    manualSeed(1);
    const int64_t n = 1024, steps = 20, features = 2;

    // 1. Data: [N, T, C] sequences (batch first) and their labels.
    Tensor x = Tensor::randn({n, steps, features});
    std::vector<int32_t> labels(n);
    for (int64_t i = 0; i < n; ++i) {
        float sum = 0;
        for (int64_t t = 0; t < 5; ++t) sum += x.data<float>()[(i * steps + t) * features];
        labels[i] = sum > 0 ? 1 : 0;
    }
    Tensor y = Tensor::fromVector({n}, labels);

    // 2. The network: an LSTM of 32 units that hands on its last step, and a linear head.
    Sequential net("reader");
    net.append(std::make_shared<RNN>(features, 32, RNNOptions{.mode = RnnMode::lstm, .batchFirst = true}))
        .append(std::make_shared<Linear>(32, 2));
    std::printf("%s -> %s\n", str(Shapes{{64, steps, features}}).c_str(),
                str(net.dataShapeFrom(Shapes{{64, steps, features}})).c_str());

    // 3. Train with Adam; the weights are ordinary parameters (PyTorch's names).
    CrossEntropy cost;
    Adam adam(1e-2f);
    adam.setupOn(net);
    HandlerOptions options{.batchsize = 64, .progress = false};
    Trainer trainer(net, cost, adam, options);
    Validator validator(net, cost, options);
    const double before = validator.validate(x, y);
    for (int epoch = 0; epoch < 30; ++epoch) trainer.train(x, y);
    const double after = validator.validate(x, y);
    std::printf("error %.3f -> %.3f; parameters:", before, after);
    for (const auto& [name, v] : net.namedParams()) std::printf(" %s %s", name.c_str(), v->data.shape().str().c_str());
    std::printf("\n");
    return after < 0.1 ? 0 : 1;
}
