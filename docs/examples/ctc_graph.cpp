// The example of docs/sequences.md's "Variable lengths and CTC": a graph with two inputs,
// padded frames and their lengths, reads label sequences out of unsegmented frames with a
// bidirectional LSTM trained by CTC. The test suite compiles and runs this file.
#include <tessera/tessera.h>

#include <cstdio>
#include <random>

using namespace tessera;

constexpr int64_t T = 24, N = 32, C = 6, S = 5, H = 32; // frames, batch, features, labels, units
constexpr int64_t V = C;                                // classes: blank 0 and labels 1..5

// A padded batch: sample n holds 2 to 5 labels, each for 1 to 3 frames (one-hot, noisy),
// sometimes a silent frame between; its frames end there and noise fills the rest.
struct Batch {
    Tensor frames, lengths, labels, labelLengths;
};

Batch makeBatch(std::mt19937& rng) {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> x(T * N * C);
    std::vector<int32_t> labels(N * S, 0), labelLengths(N), lengths(N);
    for (float& v : x) v = 0.2f * (u(rng) - 0.5f);
    for (int64_t n = 0; n < N; ++n) {
        const auto count = static_cast<int32_t>(2 + u(rng) * 4);
        int64_t t = 0;
        for (int32_t k = 0, prev = 0; k < count; ++k) {
            int32_t l;
            do l = 1 + static_cast<int32_t>(u(rng) * 5);
            while (l == prev);
            labels[n * S + k] = prev = l;
            for (int64_t h = 1 + static_cast<int64_t>(u(rng) * 3); h > 0; --h, ++t) x[(t * N + n) * C + l] += 1.0f;
            if (u(rng) < 0.3f) ++t; // silence
        }
        labelLengths[n] = count;
        lengths[n] = static_cast<int32_t>(t);
        for (int64_t p = t; p < T; ++p) x[(p * N + n) * C + 1 + p % 5] += 1.0f; // padding: must not matter
    }
    return {Tensor::fromVector({T, N, C}, x), Tensor::fromVector({N}, lengths), Tensor::fromVector({N, S}, labels),
            Tensor::fromVector({N}, labelLengths)};
}

int main() {
    manualSeed(1);

    // 1. The graph: frames [T, N, C] and lengths [N] (int32) in, class scores [T, N, V] out.
    auto frames = node(std::make_shared<Identity>(), {}, "frames");
    auto lengths = node(std::make_shared<Identity>(), {}, "lengths");
    auto rnn =
        node(std::make_shared<RNN>(
                 C, H, RNNOptions{.mode = RnnMode::lstm, .bidirectional = true, .getSequences = true, .lengths = true}),
             {frames, lengths}, "rnn");
    auto flat = node(std::make_shared<Reshape>(Shape{T * N, 2 * H}), rnn, "flat");
    auto fc = node(std::make_shared<Linear>(2 * H, V), flat, "fc");
    auto scores = node(std::make_shared<Reshape>(Shape{T, N, V}), fc, "scores");
    Graph net({frames, lengths}, {scores}, "reader");
    std::printf("%s -> %s\n", str(Shapes{{T, N, C}, {N}}).c_str(),
                str(net.dataShapeFrom(Shapes{{T, N, C}, {N}})).c_str());

    // 2. Train: CTC reads the labels, their counts and the inputs' lengths.
    CTC ctc;
    Adam adam(1e-2f);
    adam.setupOn(net);
    std::mt19937 rng(7);
    for (int step = 1; step <= 200; ++step) {
        const Batch b = makeBatch(rng);
        adam.zeroGradParams();
        const CostResult r = ctc(net(Tensors{b.frames, b.lengths}), {b.labels, b.labelLengths, b.lengths});
        net.backward(r.grad);
        adam.update();
        if (step % 50 == 0) std::printf("step %d: CTC loss %.3f\n", step, r.error);
    }

    // 3. Read new batches: best-path decoding, and the label error rate (edit distance).
    net.evalMode();
    double rate = 0;
    for (int k = 0; k < 4; ++k) {
        const Batch b = makeBatch(rng);
        const Tensors out = net(Tensors{b.frames, b.lengths});
        rate += ctc.validate(out, {b.labels, b.labelLengths, b.lengths}) / 4;
        if (k == 0) {
            const auto read = ctc.decodeGreedy(out[0], b.lengths);
            std::printf("sample 0 reads");
            for (int32_t l : read[0]) std::printf(" %d", l);
            std::printf("; its labels are");
            for (int64_t i = 0; i < b.labelLengths.data<int32_t>()[0]; ++i)
                std::printf(" %d", b.labels.data<int32_t>()[i]);
            std::printf("\n");
        }
    }
    std::printf("label error rate %.4f\n", rate);
    return rate < 0.05 ? 0 : 1;
}
