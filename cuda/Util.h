#pragma once
// Checks and pointer casts every op file of the CUDA backend shares. Private to cuda/.

#include <cstdint>
#include <string>

#include "backend/Errors.h"
#include "backend/Tensor.h"

namespace tessera {

namespace cuda_util {

inline float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }
inline int32_t* ip(const Tensor& t) { return static_cast<int32_t*>(t.raw()); }

inline void requireDtype(const char* op, const Tensor& t, DType dtype, const char* name) {
    if (t.dtype() != dtype) {
        throw ShapeError(std::string("CudaBackend::") + op + ": " + name + " must be " + str(dtype) + ", got " +
                         str(t.dtype()) + " " + t.shape().str());
    }
}

inline void requireSameNumel(const char* op, const Tensor& a, const Tensor& b) {
    if (a.numel() != b.numel()) {
        throw ShapeError(std::string("CudaBackend::") + op + ": " + a.shape().str() + " and " + b.shape().str() +
                         " differ in size");
    }
}

// The leading-1 padded spatial dims of [N, C, *spatial] (1 to 3 spatial dims).
inline void spatial3(const char* op, const Shape& s, int64_t out[3]) {
    const size_t sp = s.rank() - 2;
    if (s.rank() < 3 || sp > 3) {
        throw ShapeError(std::string("CudaBackend::") + op + ": needs 1 to 3 spatial dims, got " + s.str());
    }
    out[0] = out[1] = out[2] = 1;
    for (size_t d = 0; d < sp; ++d) out[3 - sp + d] = s[2 + d];
}

} // namespace cuda_util

} // namespace tessera
