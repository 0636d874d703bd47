// Connectionist temporal classification: the forward-backward recursions of one sample at
// a time in log space (float64), samples in parallel. The recursion steps are the shared
// ones of backend/ElementMath.h.
#include <cmath>
#include <vector>

#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

void CpuBackend::ctc(const Tensor& scores, const Tensor& labels, const Tensor& labelLengths, const Tensor& inputLengths,
                     int32_t blank, const std::vector<float>& gradScale, const Tensor& grad,
                     std::vector<double>& losses) {
    const Shape& sh = scores.shape();
    const int64_t T = sh[0], N = sh[1], V = sh[2], S = labels.shape()[1];
    const float* ps = scores.data<float>();
    const int32_t* pl = labels.data<int32_t>();
    const int32_t* labelLen = labelLengths.data<int32_t>();
    const int32_t* inputLen = inputLengths.data<int32_t>();
    float* pg = grad.defined() ? grad.data<float>() : nullptr;
    losses.assign(static_cast<size_t>(N), 0.0);
#pragma omp parallel for schedule(dynamic)
    for (int64_t n = 0; n < N; ++n) {
        const int32_t* l = pl + n * S;
        const int64_t Tn = inputLen[n], ext = 2 * int64_t{labelLen[n]} + 1;
        auto row = [&](int64_t t) { return ps + (t * N + n) * V; };
        std::vector<double> lse(static_cast<size_t>(Tn));
        for (int64_t t = 0; t < Tn; ++t) lse[static_cast<size_t>(t)] = element::logSumExp(row(t), V, 1);
        auto lp = [&](int64_t t, int64_t s) {
            return static_cast<double>(row(t)[element::ctcLabel(l, s, blank)]) - lse[static_cast<size_t>(t)];
        };
        std::vector<double> alpha(static_cast<size_t>(Tn * ext), -INFINITY), beta(alpha.size(), -INFINITY);
        auto at = [ext](std::vector<double>& v, int64_t t) { return v.data() + t * ext; };
        at(alpha, 0)[0] = lp(0, 0);
        if (ext > 1) at(alpha, 0)[1] = lp(0, 1);
        for (int64_t t = 1; t < Tn; ++t) {
            for (int64_t s = 0; s < ext; ++s) at(alpha, t)[s] = element::ctcAlpha(at(alpha, t - 1), l, s, lp(t, s));
        }
        at(beta, Tn - 1)[ext - 1] = lp(Tn - 1, ext - 1);
        if (ext > 1) at(beta, Tn - 1)[ext - 2] = lp(Tn - 1, ext - 2);
        for (int64_t t = Tn - 2; t >= 0; --t) {
            for (int64_t s = 0; s < ext; ++s) at(beta, t)[s] = element::ctcBeta(at(beta, t + 1), l, s, ext, lp(t, s));
        }
        const double* last = at(alpha, Tn - 1);
        const double logLik = ext > 1 ? element::logAdd(last[ext - 1], last[ext - 2]) : last[0];
        losses[static_cast<size_t>(n)] = -logLik;
        if (!pg) continue;
        const float k = gradScale[static_cast<size_t>(n)];
        for (int64_t t = 0; t < T; ++t) {
            float* g = pg + (t * N + n) * V;
            if (t >= Tn) { // past the input's end
                for (int64_t v = 0; v < V; ++v) g[v] = 0.0f;
                continue;
            }
            // softmax - the share of the alignments through each label at step t
            for (int64_t v = 0; v < V; ++v) {
                g[v] = k * static_cast<float>(std::exp(static_cast<double>(row(t)[v]) - lse[static_cast<size_t>(t)]));
            }
            for (int64_t s = 0; s < ext; ++s) {
                const double share = std::exp(at(alpha, t)[s] + at(beta, t)[s] - lp(t, s) - logLik);
                g[element::ctcLabel(l, s, blank)] -= k * static_cast<float>(share);
            }
        }
    }
}

} // namespace tessera
