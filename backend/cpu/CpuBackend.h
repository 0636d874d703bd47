#pragma once
/// \file The CPU backend: OpenBLAS for GEMM, oneDNN for activations and softmax, OpenMP
/// loops for the rest. Its definitions are split by op family over backend/cpu/*.cpp.

#include "backend/Backend.h"
#include "backend/Errors.h"

namespace tessera {

class CpuBackend final : public Backend {
public:
    Device device() const override { return Device::cpu(); }

    std::shared_ptr<Storage> allocate(size_t bytes) override;
    void copy(const Tensor& src, const Tensor& dst) override;
    void copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst, int64_t dstOffset,
                     int64_t dstStride, int64_t rows, int64_t width) override;
    MemoryStats memoryStats() const override;
    void resetPeak() override;

    void fill(const Tensor& t, float value) override;
    void fillUniform(const Tensor& t, float lo, float hi, Generator& gen) override;
    void fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) override;

    void gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
              const Tensor& C) override;
    void broadcastRows(const Tensor& row, const Tensor& y) override;
    void sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) override;

    void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) override;
    void mul(const Tensor& a, const Tensor& b, const Tensor& y) override;
    void activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) override;
    void activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y,
                            const Tensor& dy, const Tensor& dx) override;

    void softmaxForward(const Tensor& x, const Tensor& y) override;
    void softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;

    void dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask,
                        const Tensor& y) override;
};

} // namespace tessera
