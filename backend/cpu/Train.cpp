// Costs and optimizer updates as fused OpenMP loops: one pass over the data per call.
#include <algorithm>
#include <cmath>

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
} // namespace

// scores: [N, C, *S], labels: [N, *S] -> grad, mean error, argmax hits
void CpuBackend::crossEntropy(const Tensor& scores, const Tensor& labels, const Tensor& weights, const Tensor& grad,
                              double& error, int64_t& correct) {
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
        const int64_t b = i / inner, at = i % inner;
        const float* row = ps + b * c * inner + at;
        float mx = row[0];
        int64_t arg = 0;
        for (int64_t k = 1; k < c; ++k) {
            if (row[k * inner] > mx) {
                mx = row[k * inner];
                arg = k;
            }
        }
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(row[k * inner] - mx));
        const int32_t y = pl[i];
        const float w = pw ? pw[y] : 1.0f;
        err += w * (std::log(sum) - (row[y * inner] - mx));
        hits += arg == y;
        if (!pg) continue;
        float* grow = pg + b * c * inner + at;
        for (int64_t k = 0; k < c; ++k) {
            const auto p = static_cast<float>(std::exp(static_cast<double>(row[k * inner] - mx)) / sum);
            grow[k * inner] = w * norm * (p - (k == y ? 1.0f : 0.0f));
        }
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
    if (kind == CostKind::klDivergence) {
        // Softmax over dim 1 per (sample, position).
        const int64_t c = pred.shape()[1], inner = total / (n * c);
#pragma omp parallel for reduction(+ : sum) if (total > kParallelMin)
        for (int64_t i = 0; i < n * inner; ++i) {
            const int64_t base = i / inner * c * inner + i % inner;
            float mx = p[base];
            for (int64_t k = 1; k < c; ++k) mx = std::max(mx, p[base + k * inner]);
            double z = 0;
            for (int64_t k = 0; k < c; ++k) z += std::exp(static_cast<double>(p[base + k * inner] - mx));
            const double logz = std::log(z);
            for (int64_t k = 0; k < c; ++k) {
                const int64_t at = base + k * inner;
                const double logq = p[at] - mx - logz;
                if (t[at] > 0) sum += t[at] * (std::log(static_cast<double>(t[at])) - logq);
                g[at] = norm * (static_cast<float>(std::exp(logq)) - t[at]);
            }
        }
        return sum / static_cast<double>(n);
    }
#pragma omp parallel for reduction(+ : sum) if (total > kParallelMin)
    for (int64_t i = 0; i < total; ++i) {
        const float d = p[i] - t[i];
        switch (kind) {
        case CostKind::mse:
            sum += 0.5 * static_cast<double>(d) * d;
            g[i] = norm * d;
            break;
        case CostKind::abs:
            sum += std::fabs(d);
            g[i] = norm * static_cast<float>((d > 0) - (d < 0));
            break;
        case CostKind::smoothL1:
            sum += std::fabs(d) < 1.0f ? 0.5 * d * d : std::fabs(d) - 0.5;
            g[i] = norm * (std::fabs(d) < 1.0f ? d : static_cast<float>((d > 0) - (d < 0)));
            break;
        case CostKind::bce: {
            // softplus(p) - t p, computed without overflow
            const double x = p[i];
            sum += std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))) - t[i] * x;
            g[i] = norm * (static_cast<float>(1.0 / (1.0 + std::exp(-x))) - t[i]);
            break;
        }
        case CostKind::hinge: {
            const float m = 1.0f - t[i] * p[i];
            sum += std::max(m, 0.0f);
            g[i] = m > 0 ? -norm * t[i] : 0.0f;
            break;
        }
        default: break;
        }
    }
    return sum / static_cast<double>(n);
}

// scores: [N, C], labels: [N]
double CpuBackend::svmCost(const Tensor& scores, const Tensor& labels, bool l2, const Tensor& grad) {
    const int64_t n = scores.shape()[0], c = scores.shape()[1];
    const float* s = scores.data<float>();
    const int32_t* l = labels.data<int32_t>();
    float* g = grad.data<float>();
    for (int64_t i = 0; i < n; ++i) checkLabel(l[i], c, i);
    const float norm = 1.0f / static_cast<float>(n);
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) if (scores.numel() > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float* row = s + i * c;
        float* grow = g + i * c;
        const int32_t y = l[i];
        float gy = 0;
        for (int64_t k = 0; k < c; ++k) {
            grow[k] = 0;
            if (k == y) continue;
            const float m = 1.0f + row[k] - row[y];
            if (m <= 0) continue;
            sum += l2 ? m * m : m;
            const float d = norm * (l2 ? 2.0f * m : 1.0f);
            grow[k] = d;
            gy -= d;
        }
        grow[y] = gy;
    }
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
    const float lr = p.lr, mom = p.momentum, rho = p.rho, eps = p.epsilon, wd = p.weightDecay;
    // Adam's bias correction folded into the step size.
    const auto t = static_cast<double>(p.step);
    const float adamLr = static_cast<float>(lr * std::sqrt(1.0 - std::pow(p.beta2, t)) / (1.0 - std::pow(p.beta1, t)));
    switch (p.rule) {
    case UpdateRule::sgd:
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) w[i] -= lr * (gr[i] + wd * w[i]);
        break;
    case UpdateRule::momentumSGD: // v = mom v + lr g; w -= v
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            a[i] = mom * a[i] + lr * (gr[i] + wd * w[i]);
            w[i] -= a[i];
        }
        break;
    case UpdateRule::nesterovSGD: // v' = mom v - lr g; w += -mom v + (1 + mom) v'
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float v = a[i];
            a[i] = mom * v - lr * (gr[i] + wd * w[i]);
            w[i] += -mom * v + (1.0f + mom) * a[i];
        }
        break;
    case UpdateRule::adam:
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float g = gr[i] + wd * w[i];
            a[i] = p.beta1 * a[i] + (1.0f - p.beta1) * g;
            b[i] = p.beta2 * b[i] + (1.0f - p.beta2) * g * g;
            w[i] -= adamLr * a[i] / (std::sqrt(b[i]) + eps);
        }
        break;
    case UpdateRule::adaGrad:
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float g = gr[i] + wd * w[i];
            a[i] += g * g;
            w[i] -= lr * g / (std::sqrt(a[i]) + eps);
        }
        break;
    case UpdateRule::adaDelta: // a: E[g^2], b: E[dx^2]
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float g = gr[i] + wd * w[i];
            a[i] = rho * a[i] + (1.0f - rho) * g * g;
            const float dx = std::sqrt(b[i] + eps) / std::sqrt(a[i] + eps) * g;
            b[i] = rho * b[i] + (1.0f - rho) * dx * dx;
            w[i] -= lr * dx;
        }
        break;
    case UpdateRule::rmsProp:
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float g = gr[i] + wd * w[i];
            a[i] = rho * a[i] + (1.0f - rho) * g * g;
            w[i] -= lr * g / (std::sqrt(a[i]) + eps);
        }
        break;
    case UpdateRule::rmsPropGraves: // a: E[g^2], b: E[g], c: momentum of the step
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float g = gr[i] + wd * w[i];
            a[i] = rho * a[i] + (1.0f - rho) * g * g;
            b[i] = rho * b[i] + (1.0f - rho) * g;
            c[i] = mom * c[i] - lr * g / std::sqrt(a[i] - b[i] * b[i] + eps);
            w[i] += c[i];
        }
        break;
    case UpdateRule::smorms3: // a: memory, b: E[g], c: E[g^2]
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float g = gr[i] + wd * w[i];
            const float r = 1.0f / (a[i] + 1.0f);
            b[i] = (1.0f - r) * b[i] + r * g;
            c[i] = (1.0f - r) * c[i] + r * g * g;
            const float x = b[i] * b[i] / (c[i] + eps);
            w[i] -= g * std::min(lr, x) / (std::sqrt(c[i]) + eps);
            a[i] = 1.0f + a[i] * (1.0f - x);
        }
        break;
    }
}

} // namespace tessera
