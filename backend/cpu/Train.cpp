// Costs and optimizer updates as fused OpenMP loops: one pass over the data per call.
#include <algorithm>
#include <cmath>

#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

namespace {
constexpr int64_t kParallelMin = 1 << 15;

void checkLabel(int32_t label, int64_t classes, int64_t at) {
    if (label < 0 || label >= classes) {
        throw ShapeError("label " + std::to_string(label) + " at position " + std::to_string(at) + " is outside [0, " +
                         std::to_string(classes) + ")");
    }
}
// One rule over n elements, in a loop of its own so that it vectorises.
template <UpdateRule R>
void updateAll(const element::UpdateScalars& k, float* w, const float* g, float* a, float* b, float* c, int64_t n) {
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) element::update<R>(k, w, g, a, b, c, i);
}
} // namespace

// scores: [N, C, *S], labels: [N, *S] -> grad, mean error, argmax hits
void CpuBackend::crossEntropy(const Tensor& scores, const Tensor& labels, const Tensor& weights, float smoothing,
                              const Tensor& grad, double& error, int64_t& correct) {
    const Shape& s = scores.shape();
    const int64_t n = s[0], c = s[1], inner = s.numel() / (n * c), samples = n * inner;
    const float* ps = scores.data<float>();
    const int32_t* pl = labels.data<int32_t>();
    const float* pw = weights.defined() ? weights.data<float>() : nullptr;
    float* pg = grad.defined() ? grad.data<float>() : nullptr;
    for (int64_t i = 0; i < samples; ++i) checkLabel(pl[i], c, i);
    double err = 0;
    int64_t hits = 0;
    const float norm = 1.0f / static_cast<float>(samples);
#pragma omp parallel for reduction(+ : err, hits) if (scores.numel() > kParallelMin)
    for (int64_t i = 0; i < samples; ++i) {
        const int64_t offset = i / inner * c * inner + i % inner;
        const int32_t y = pl[i];
        bool hit = false;
        err += element::crossEntropy(ps + offset, y, pw ? pw[y] : 1.0f, pg ? pg + offset : nullptr, c, inner, norm,
                                     smoothing, hit);
        hits += hit;
    }
    error = err / static_cast<double>(samples);
    correct = hits;
}

double CpuBackend::pointwiseCost(CostKind kind, const Tensor& pred, const Tensor& target, const Tensor& grad) {
    const int64_t total = pred.numel(), n = pred.shape()[0];
    const float* p = pred.data<float>();
    const float* t = target.data<float>();
    float* g = grad.data<float>();
    const float norm = 1.0f / static_cast<float>(n);
    double sum = 0;
    if (kind == CostKind::klDivergence || kind == CostKind::softCrossEntropy) { // softmax over dim 1
        const int64_t c = pred.shape()[1], inner = total / (n * c);
        const bool ce = kind == CostKind::softCrossEntropy;
#pragma omp parallel for reduction(+ : sum) if (total > kParallelMin)
        for (int64_t i = 0; i < n * inner; ++i) {
            const int64_t base = i / inner * c * inner + i % inner;
            sum += element::klDivergence(p + base, t + base, g + base, c, inner, norm, ce);
        }
        return sum / static_cast<double>(n);
    }
#pragma omp parallel for reduction(+ : sum) if (total > kParallelMin)
    for (int64_t i = 0; i < total; ++i) sum += element::pointwise(kind, p[i], t[i], norm, g[i]);
    return sum / static_cast<double>(n);
}

// scores: [N, C], labels: [N]
bool CpuBackend::scaleCheckFinite(const Tensor& t, float factor) {
    float* p = t.storageData<float>();
    const auto n = static_cast<int64_t>(t.nbytes() / sizeof(float));
    int bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float v = p[i] * factor;
        bad |= !(v - v == 0.0f); // Inf - Inf and NaN - NaN are NaN
        p[i] = v;
    }
    return bad == 0;
}

double CpuBackend::sumSquares(const Tensor& t) {
    const float* p = t.storageData<float>();
    const auto n = static_cast<int64_t>(t.nbytes() / sizeof(float));
    // In double throughout: the loop is bound by memory, not by the width of its adds.
    double sum = 0;
#pragma omp parallel for simd reduction(+ : sum) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]) * p[i];
    return sum;
}

double CpuBackend::svmCost(const Tensor& scores, const Tensor& labels, bool l2, const Tensor& grad) {
    const int64_t n = scores.shape()[0], c = scores.shape()[1];
    const float* s = scores.data<float>();
    const int32_t* l = labels.data<int32_t>();
    float* g = grad.data<float>();
    for (int64_t i = 0; i < n; ++i) checkLabel(l[i], c, i);
    const float norm = 1.0f / static_cast<float>(n);
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) if (scores.numel() > kParallelMin)
    for (int64_t i = 0; i < n; ++i) sum += element::svm(s + i * c, l[i], l2, g + i * c, c, norm);
    return sum / static_cast<double>(n);
}

// One fused pass of an update rule over param, grad and the rule's state.
void CpuBackend::optimizerUpdate(const UpdateParams& p, const Tensor& param, const Tensor& grad, const Tensor& s1,
                                 const Tensor& s2, const Tensor& s3) {
    const int64_t n = param.numel();
    float* w = param.data<float>();
    const float* gr = grad.data<float>();
    float* a = s1.defined() ? s1.data<float>() : nullptr;
    float* b = s2.defined() ? s2.data<float>() : nullptr;
    float* c = s3.defined() ? s3.data<float>() : nullptr;
    const element::UpdateScalars k = element::scalarsOf(p);
    // One loop per rule, so each vectorises without a branch.
    element::dispatchRule(p.rule, [&]<UpdateRule R>() { updateAll<R>(k, w, gr, a, b, c, n); });
}

} // namespace tessera
