#pragma once
// The activations the CPU computes through the C library's functions (tan, the inverse and
// hyperbolic functions, erf) and sign, and powers: glibc's vector math library (libmvec's AVX2 forms,
// found at run time) where the CPU and the C library have them, each element through its
// scalar function otherwise. Private to the CPU backend.
#include <cstdint>

#include "backend/ActivationParams.h"

namespace tessera::cpu_libm {

/// Whether `kind` is one of these (tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh,
/// erf, sign).
bool computes(ActivationKind kind);
/// y = f(x) over n floats (y may be x).
void forward(ActivationKind kind, const float* x, float* y, int64_t n);
/// dx = dy f'(x) over n floats (dx may be dy; sign's is 0).
void backward(ActivationKind kind, const float* x, const float* dy, float* dx, int64_t n);
/// y = pow(x, p) over n floats (y may be x): libmvec's powf (of |x| for a whole p, the sign
/// given back for an odd one) where the others are in use and the C library has it (within
/// 1 ulp of powf, whose values it keeps at zeros, infinities, NaN and negative bases), else
/// powf for each element.
void power(const float* x, float p, float* y, int64_t n);
/// Whether libmvec's functions are in use (false: the scalar ones; TESSERA_LIBMVEC=0 asks
/// for those).
bool vectorised();

} // namespace tessera::cpu_libm
