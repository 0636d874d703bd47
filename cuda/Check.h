#pragma once
/// \file The one status checker for CUDA, cuBLAS and cuDNN calls: a failing call throws
/// BackendError with the call's text, the library's status text, and the source position.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace tessera::cuda {

[[noreturn]] void throwStatus(const char* library, const char* call, const char* status, const char* file, int line);

inline void check(cudaError_t status, const char* call, const char* file, int line) {
    if (status != cudaSuccess) throwStatus("CUDA", call, cudaGetErrorString(status), file, line);
}
inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) throwStatus("cuBLAS", call, cublasGetStatusString(status), file, line);
}
inline void check(cudnnStatus_t status, const char* call, const char* file, int line) {
    if (status != CUDNN_STATUS_SUCCESS) throwStatus("cuDNN", call, cudnnGetErrorString(status), file, line);
}

} // namespace tessera::cuda

#define TESSERA_CUDA_CHECK(call) ::tessera::cuda::check((call), #call, __FILE__, __LINE__)
