#include "training/CTC.h"

#include <algorithm>

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

namespace {
// Levenshtein distance between two label sequences.
int64_t editDistance(const std::vector<int32_t>& a, const int32_t* b, int64_t nb) {
    std::vector<int64_t> row(static_cast<size_t>(nb + 1));
    for (int64_t j = 0; j <= nb; ++j) row[static_cast<size_t>(j)] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        int64_t diag = row[0];
        row[0] = static_cast<int64_t>(i);
        for (int64_t j = 1; j <= nb; ++j) {
            const int64_t up = row[static_cast<size_t>(j)];
            row[static_cast<size_t>(j)] =
                std::min({up + 1, row[static_cast<size_t>(j - 1)] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[static_cast<size_t>(nb)];
}

std::string sample(int64_t n) { return "sample " + std::to_string(n) + ": "; }
} // namespace

CTC::CTC(const CTCOptions& options) : options_(options) {
    if (options.blank < 0) throw ModuleError("CTC: blank must not be negative, got " + std::to_string(options.blank));
    if (options.vocabsize < 0) throw ModuleError("CTC: vocabsize must not be negative");
    if (options.vocabsize && options.blank >= options.vocabsize) {
        throw ModuleError("CTC: blank " + std::to_string(options.blank) + " is outside the vocabulary [0, " +
                          std::to_string(options.vocabsize) + ")");
    }
}

void CTC::checkInputs(const Tensors& pred, const Tensors& target) const {
    if (pred.size() != 1 || (target.size() != 2 && target.size() != 3)) {
        throw error("expects one score tensor and targets (labels, labelLengths[, inputLengths]), got " +
                    std::to_string(pred.size()) + " and " + std::to_string(target.size()) + " tensor(s)");
    }
    const Shape& s = pred[0].shape();
    const char* layout = options_.batchFirst ? "[N, T, V]" : "[T, N, V]";
    if (pred[0].dtype() != DType::float32) throw error("expects float32 scores, got " + str(pred[0].dtype()));
    if (s.rank() != 3) throw error(std::string("expects scores ") + layout + ", got " + s.str());
    const int64_t T = s[options_.batchFirst ? 1 : 0], N = s[options_.batchFirst ? 0 : 1], V = s[2];
    if (options_.vocabsize && V != options_.vocabsize) {
        throw error("expects " + std::to_string(options_.vocabsize) + " classes, got scores " + s.str());
    }
    if (options_.blank >= V) {
        throw error("blank " + std::to_string(options_.blank) + " is outside the " + std::to_string(V) +
                    " classes of scores " + s.str());
    }
    const char* names[] = {"labels", "labelLengths", "inputLengths"};
    for (size_t i = 0; i < target.size(); ++i) {
        if (!target[i].defined() || target[i].dtype() != DType::int32) {
            throw error(std::string("expects int32 ") + names[i] + ", got " +
                        (target[i].defined() ? str(target[i].dtype()) : std::string("an undefined tensor")));
        }
        if (i == 0 ? (target[0].shape().rank() != 2 || target[0].shape()[0] != N) : target[i].shape() != Shape{N}) {
            throw error(std::string(names[i]) + " must be " + (i == 0 ? "[N, S]" : "[N]") +
                        " with N = " + std::to_string(N) + " (scores " + s.str() + "), got " + target[i].shape().str());
        }
    }
    const int64_t S = target[0].shape()[1];
    const std::vector<int32_t> labels = target[0].toVector<int32_t>(), lengths = target[1].toVector<int32_t>();
    const std::vector<int32_t> steps =
        target.size() == 3 ? target[2].toVector<int32_t>() : std::vector<int32_t>(static_cast<size_t>(N), int32_t(T));
    for (int64_t n = 0; n < N; ++n) {
        const int64_t L = lengths[static_cast<size_t>(n)], Tn = steps[static_cast<size_t>(n)];
        if (L < 0 || L > S) {
            throw error(sample(n) + "label length " + std::to_string(L) + " is outside [0, " + std::to_string(S) +
                        "] (S, the labels' width)");
        }
        if (Tn < 1 || Tn > T) {
            throw error(sample(n) + "input length " + std::to_string(Tn) + " is outside [1, " + std::to_string(T) +
                        "] (T, the scores' steps)");
        }
        const int32_t* l = labels.data() + n * S;
        int64_t repeats = 0;
        for (int64_t k = 0; k < L; ++k) {
            if (l[k] < 0 || l[k] >= V || l[k] == options_.blank) {
                throw error(sample(n) + "label " + std::to_string(l[k]) + " at position " + std::to_string(k) +
                            " is outside [0, " + std::to_string(V) + ") or the blank (" +
                            std::to_string(options_.blank) + ")");
            }
            repeats += k > 0 && l[k] == l[k - 1];
        }
        if (L + repeats > Tn) {
            throw error(sample(n) + "its " + std::to_string(L) + " labels (" + std::to_string(repeats) +
                        " repeated) need at least " + std::to_string(L + repeats) + " steps, its input has " +
                        std::to_string(Tn) + ": the target is longer than the input");
        }
    }
}

Tensor CTC::timeMajor(const Tensor& scores) const { return options_.batchFirst ? axis::swap01(scores) : scores; }

CostResult CTC::compute(const Tensors& pred, const Tensors& target) {
    const Tensor scores = timeMajor(pred[0]);
    const int64_t T = scores.shape()[0], N = scores.shape()[1];
    const Device dev = scores.device();
    const Tensor inputLengths = target.size() == 3
                                    ? target[2]
                                    : Tensor::fromVector({N}, std::vector<int32_t>(static_cast<size_t>(N), int32_t(T)));
    const std::vector<int32_t> lengths = target[1].toVector<int32_t>();
    std::vector<float> weight(static_cast<size_t>(N));
    for (size_t n = 0; n < weight.size(); ++n) {
        const float per = options_.normalized ? 1.0f / static_cast<float>(std::max(lengths[n], 1)) : 1.0f;
        weight[n] = per / static_cast<float>(N);
    }
    const Tensor grad = Tensor::empty(scores.shape(), DType::float32, dev);
    std::vector<double> losses;
    backendOf(scores).ctc(scores, target[0].to(dev), target[1].to(dev), inputLengths.to(dev), options_.blank, weight,
                          grad, losses);
    double err = 0;
    for (size_t n = 0; n < losses.size(); ++n) err += losses[n] * weight[n];
    return {err, {timeMajor(grad)}}; // with batchFirst the swap takes it back to [N, T, V]
}

std::vector<std::vector<int32_t>> CTC::decodeGreedy(const Tensor& scores, const Tensor& inputLengths) const {
    // Scores of any floating dtype (a bfloat16 network's), read as float32.
    const Tensor host = timeMajor(scores.plain().convertedTo(DType::float32)).toHost();
    const int64_t T = host.shape()[0], N = host.shape()[1], V = host.shape()[2];
    const std::vector<int32_t> steps = inputLengths.defined()
                                           ? inputLengths.toVector<int32_t>()
                                           : std::vector<int32_t>(static_cast<size_t>(N), int32_t(T));
    const float* p = host.data<float>();
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
        int32_t prev = -1;
        for (int64_t t = 0; t < std::min<int64_t>(steps[static_cast<size_t>(n)], T); ++t) {
            const float* row = p + (t * N + n) * V;
            const auto best = static_cast<int32_t>(std::max_element(row, row + V) - row);
            if (best != prev && best != options_.blank) out[static_cast<size_t>(n)].push_back(best);
            prev = best;
        }
    }
    return out;
}

double CTC::validationError(const Tensors& pred, const Tensors& target) {
    const auto decoded = decodeGreedy(pred[0], target.size() == 3 ? target[2] : Tensor());
    const std::vector<int32_t> labels = target[0].toVector<int32_t>(), lengths = target[1].toVector<int32_t>();
    const int64_t S = target[0].shape()[1];
    int64_t errors = 0, total = 0;
    for (size_t n = 0; n < decoded.size(); ++n) {
        errors += editDistance(decoded[n], labels.data() + static_cast<int64_t>(n) * S, lengths[n]);
        total += lengths[n];
    }
    return static_cast<double>(errors) / static_cast<double>(std::max<int64_t>(total, 1));
}

} // namespace tessera
