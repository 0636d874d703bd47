// The CUDA backend's gathers, scatters, top-k and permutations.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

using namespace cuda_util;

namespace {
struct Axis3 {
    int64_t outer, along, inner;
};
Axis3 axis3(const Tensor& t, const char* op) {
    const Shape& s = t.shape();
    if (s.rank() != 3)
        throw ShapeError(std::string("CudaBackend::") + op + ": expects a [O, A, I] view, got " + s.str());
    return {s[0], s[1], s[2]};
}
} // namespace

void CudaBackend::gatherAxis(const Tensor& x, const Tensor& idx, const Tensor& y) {
    const Axis3 xs = axis3(x, "gatherAxis"), is = axis3(idx, "gatherAxis");
    checkIndexRange("gatherAxis", idx, xs.along);
    cudak::gatherAxis(fp(x), ip(idx), fp(y), is.outer, xs.along, is.along, is.inner, s());
}

void CudaBackend::scatterAddAxis(const Tensor& src, const Tensor& idx, const Tensor& dst) {
    const Axis3 ds = axis3(dst, "scatterAddAxis"), is = axis3(idx, "scatterAddAxis");
    checkIndexRange("scatterAddAxis", idx, ds.along);
    cudak::scatterAddAxis(fp(src), ip(idx), fp(dst), is.outer, ds.along, is.along, is.inner, s());
}

void CudaBackend::topKIndices(const Tensor& x, int64_t k, const Tensor& idx) {
    const Axis3 xs = axis3(x, "topKIndices");
    if (k < 1 || k > xs.along) {
        throw ShapeError("CudaBackend::topKIndices: k = " + std::to_string(k) + " outside [1, " +
                         std::to_string(xs.along) + "]");
    }
    cudak::topKIndices(fp(x), ip(idx), xs.outer, xs.along, xs.inner, k, s());
}

void CudaBackend::gatherRows(const Tensor& table, const Tensor& idx, const Tensor& y) {
    checkIndexRange("gatherRows", idx, table.shape()[0]);
    cudak::gatherRows(fp(table), ip(idx), fp(y), idx.numel(), table.shape()[1], s());
}

void CudaBackend::scatterAddRows(const Tensor& src, const Tensor& idx, float scale, const Tensor& table) {
    checkIndexRange("scatterAddRows", idx, table.shape()[0]);
    cudak::scatterAddRows(fp(src), ip(idx), scale, fp(table), idx.numel(), table.shape()[1], s());
}

void CudaBackend::permute(const Tensor& x, const std::vector<int64_t>& perm, const Tensor& y) {
    const Shape& xs = x.shape();
    const size_t r = xs.rank();
    if (perm.size() != r || r > 8) {
        throw ShapeError("CudaBackend::permute: needs a permutation of rank " + std::to_string(r) +
                         " (at most 8) for " + xs.str());
    }
    cudak::PermuteDims p{};
    p.rank = static_cast<int>(r);
    std::vector<int64_t> xStride(r, 1);
    for (size_t i = r - 1; i-- > 0;) xStride[i] = xStride[i + 1] * xs[i + 1];
    for (size_t i = 0; i < r; ++i) {
        p.ydims[i] = y.shape()[i];
        p.xstride[i] = xStride[static_cast<size_t>(perm[i])];
    }
    cudak::permute(fp(x), fp(y), p, y.numel(), s());
}

} // namespace tessera
