#include "examples/Spirals.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/Random.h"
#include "modules/Activation.h"
#include "modules/Linear.h"

namespace tessera::examples {

Dataset makeSpirals(int64_t perClass, int classes, float noise, uint64_t seed) {
    Dataset d;
    d.classes = classes;
    d.x = Tensor::empty({perClass * classes, 2});
    float* px = d.x.data<float>();
    uint64_t counter = 0;
    for (int c = 0; c < classes; ++c) {
        for (int64_t i = 0; i < perClass; ++i) {
            const float r = static_cast<float>(i) / static_cast<float>(perClass);
            const float t =
                4.0f * r + 2.0944f * static_cast<float>(c) + noise * (randomUniform(seed, counter++) - 0.5f);
            const int64_t row = c * perClass + i;
            px[2 * row] = r * std::sin(t);
            px[2 * row + 1] = r * std::cos(t);
            d.labels.push_back(c);
        }
    }
    return d;
}

LossResult softmaxCrossEntropy(const Tensor& logits, const int32_t* labels) {
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    const float* z = logits.data<float>();
    LossResult r;
    r.grad = Tensor::empty(logits.shape());
    float* g = r.grad.data<float>();
    double loss = 0.0;
    int64_t correct = 0;
    for (int64_t n = 0; n < N; ++n) {
        const float* row = z + n * C;
        const int64_t argmax = std::max_element(row, row + C) - row;
        const float m = row[argmax];
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - m);
        loss += std::log(sum) - (row[labels[n]] - m);
        correct += argmax == labels[n];
        for (int64_t c = 0; c < C; ++c) {
            const float p = static_cast<float>(std::exp(row[c] - m) / sum);
            g[n * C + c] = (p - (c == labels[n] ? 1.0f : 0.0f)) / static_cast<float>(N);
        }
    }
    r.loss = static_cast<float>(loss / static_cast<double>(N));
    r.accuracy = static_cast<float>(correct) / static_cast<float>(N);
    return r;
}

std::shared_ptr<Sequential> makeMlp(int64_t hidden, int classes) {
    auto net = std::make_shared<Sequential>("mlp");
    net->append(std::make_shared<Linear>(2, hidden, LinearOptions{.name = "fc1"}))
        .append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu1"}))
        .append(std::make_shared<Linear>(hidden, hidden, LinearOptions{.name = "fc2"}))
        .append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu2"}))
        .append(std::make_shared<Linear>(hidden, classes, LinearOptions{.name = "fc3"}));
    return net;
}

std::vector<float> trainMlpOnSpirals(const TrainConfig& config, float& finalAccuracy,
                                     const std::function<void(int, float, float)>& onEpoch) {
    manualSeed(config.seed);
    const Dataset data = makeSpirals(300, 3, 0.3f, config.seed);
    auto net = makeMlp(config.hidden, data.classes);
    const int64_t n = data.x.shape()[0];

    // A fixed shuffled order, so every batch mixes the classes.
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = n - 1; i > 0; --i) {
        std::swap(order[static_cast<size_t>(i)],
                  order[randomBits(config.seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1)]);
    }
    Tensor xs = Tensor::empty(data.x.shape());
    std::vector<int32_t> ys(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t src = order[static_cast<size_t>(i)];
        std::copy_n(data.x.data<float>() + 2 * src, 2, xs.data<float>() + 2 * i);
        ys[static_cast<size_t>(i)] = data.labels[static_cast<size_t>(src)];
    }

    std::vector<float> losses;
    for (int epoch = 0; epoch < config.epochs; ++epoch) {
        net->trainMode();
        double sum = 0.0;
        int batches = 0;
        for (int64_t b = 0; b < n; b += config.batch) {
            const int64_t e = std::min(n, b + config.batch);
            LossResult r = softmaxCrossEntropy((*net)(xs.slice(b, e)), ys.data() + b);
            net->backward(r.grad);
            net->updateParams(config.lr);
            sum += r.loss;
            ++batches;
        }
        losses.push_back(static_cast<float>(sum / batches));
        net->evalMode();
        finalAccuracy = softmaxCrossEntropy((*net)(xs), ys.data()).accuracy;
        if (onEpoch) onEpoch(epoch, losses.back(), finalAccuracy);
    }
    return losses;
}

} // namespace tessera::examples
