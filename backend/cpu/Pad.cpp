// Constant, reflection and edge padding of the spatial dims, and its adjoint.
#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

namespace {

int64_t sourceOf(PadMode mode, int64_t o, int64_t lo, int64_t n) { return element::padSource(mode, o, lo, n); }

// Walks every padded position of a [planes, *spatial] tensor (up to 3 spatial dims),
// calling f(padded flat index, source flat index or -1).
template <class F>
void forEachPadded(const Shape& in, const Shape& out, PadMode mode, const std::vector<int64_t>& lo, F&& f) {
    const size_t sp = in.rank() - 2;
    int64_t n[3] = {1, 1, 1}, m[3] = {1, 1, 1}, l[3] = {0, 0, 0};
    for (size_t d = 0; d < sp; ++d) {
        n[3 - sp + d] = in[2 + d];
        m[3 - sp + d] = out[2 + d];
        l[3 - sp + d] = lo[d];
    }
    const int64_t planes = in[0] * in[1], inPlane = n[0] * n[1] * n[2], outPlane = m[0] * m[1] * m[2];
#pragma omp parallel for if (planes * outPlane > (1 << 15))
    for (int64_t p = 0; p < planes; ++p)
        for (int64_t a = 0; a < m[0]; ++a) {
            const int64_t sa = sourceOf(mode, a, l[0], n[0]);
            for (int64_t b = 0; b < m[1]; ++b) {
                const int64_t sb = sourceOf(mode, b, l[1], n[1]);
                for (int64_t c = 0; c < m[2]; ++c) {
                    const int64_t sc = sourceOf(mode, c, l[2], n[2]);
                    const int64_t at = p * outPlane + (a * m[1] + b) * m[2] + c;
                    f(at, sa < 0 || sb < 0 || sc < 0 ? -1 : p * inPlane + (sa * n[1] + sb) * n[2] + sc);
                }
            }
        }
}

void checkPads(PadMode mode, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi, const Shape& in) {
    const size_t sp = in.rank() - 2;
    if (sp < 1 || sp > 3 || lo.size() != sp || hi.size() != sp) {
        throw ShapeError("CpuBackend::pad: pads for " + std::to_string(sp) + " spatial dims expected for " + in.str());
    }
    for (size_t d = 0; d < sp; ++d) {
        if (mode == PadMode::edge && in[2 + d] == 0 && lo[d] + hi[d] > 0) {
            throw ShapeError("CpuBackend::pad: edge padding of an empty dim in " + in.str());
        }
        if (mode == PadMode::reflect && (lo[d] >= in[2 + d] || hi[d] >= in[2 + d])) {
            throw ShapeError("CpuBackend::pad: reflect padding must be smaller than the dim it mirrors, got pads " +
                             std::to_string(lo[d]) + ", " + std::to_string(hi[d]) + " for " + in.str());
        }
    }
}

} // namespace

// x: [N, C, *in] -> y: [N, C, *(in + lo + hi)]
void CpuBackend::padForward(PadMode mode, float value, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                            const Tensor& x, const Tensor& y) {
    checkPads(mode, lo, hi, x.shape());
    requirePadTypes("CpuBackend::padForward", mode, x, y);
    if (is16Bit(x.dtype())) { // the bits moved as they are; the value rounded once
        const uint16_t bits = x.dtype() == DType::bfloat16 ? toBfloat16(value).bits : toFloat16(value).bits;
        const auto* px = static_cast<const uint16_t*>(x.raw());
        auto* py = static_cast<uint16_t*>(y.raw());
        forEachPadded(x.shape(), y.shape(), mode, lo,
                      [&](int64_t at, int64_t src) { py[at] = src < 0 ? bits : px[src]; });
        return;
    }
    const float* px = x.data<float>();
    float* py = y.data<float>();
    forEachPadded(x.shape(), y.shape(), mode, lo, [&](int64_t at, int64_t src) { py[at] = src < 0 ? value : px[src]; });
}

// dy: padded -> dx: the adjoint (reflected and repeated positions add up)
void CpuBackend::padBackward(PadMode mode, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                             const Tensor& dy, const Tensor& dx) {
    checkPads(mode, lo, hi, dx.shape());
    requirePadTypes("CpuBackend::padBackward", mode, dy, dx);
    fill(dx, 0.0f);
    if (is16Bit(dy.dtype())) { // constant padding: each input position is read at most once
        const auto* pdy = static_cast<const uint16_t*>(dy.raw());
        auto* pdx = static_cast<uint16_t*>(dx.raw());
        forEachPadded(dx.shape(), dy.shape(), mode, lo, [&](int64_t at, int64_t src) {
            if (src >= 0) pdx[src] = pdy[at];
        });
        return;
    }
    const float* pdy = dy.data<float>();
    float* pdx = dx.data<float>();
    // Each plane is walked by one thread, and every write stays inside its own plane.
    forEachPadded(dx.shape(), dy.shape(), mode, lo, [&](int64_t at, int64_t src) {
        if (src >= 0) pdx[src] += pdy[at];
    });
}

} // namespace tessera
