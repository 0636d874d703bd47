#pragma once
/// \file Conv1D, Conv2D, Conv3D: convolution over 1, 2 and 3 spatial dims
/// (see ConvND for shapes, parameters and options).

#include "modules/ConvND.h"

namespace tessera {

/// x: [N, inmaps, L] -> y: [N, outmaps, ...].
class Conv1D : public ConvND {
public:
    Conv1D(int64_t inmaps, int64_t outmaps, std::vector<int64_t> size, const ConvOptions& options = {})
        : ConvND(1, false, inmaps, outmaps, std::move(size), options) {}
    Conv1D(int64_t inmaps, int64_t outmaps, int64_t size, const ConvOptions& options = {})
        : ConvND(1, false, inmaps, outmaps, {size}, options) {}
    std::string classname() const override { return "Conv1D"; }
};

/// x: [N, inmaps, H, W] -> y: [N, outmaps, ...].
class Conv2D : public ConvND {
public:
    Conv2D(int64_t inmaps, int64_t outmaps, std::vector<int64_t> size, const ConvOptions& options = {})
        : ConvND(2, false, inmaps, outmaps, std::move(size), options) {}
    Conv2D(int64_t inmaps, int64_t outmaps, int64_t size, const ConvOptions& options = {})
        : ConvND(2, false, inmaps, outmaps, {size}, options) {}
    std::string classname() const override { return "Conv2D"; }
};

/// x: [N, inmaps, D, H, W] -> y: [N, outmaps, ...].
class Conv3D : public ConvND {
public:
    Conv3D(int64_t inmaps, int64_t outmaps, std::vector<int64_t> size, const ConvOptions& options = {})
        : ConvND(3, false, inmaps, outmaps, std::move(size), options) {}
    Conv3D(int64_t inmaps, int64_t outmaps, int64_t size, const ConvOptions& options = {})
        : ConvND(3, false, inmaps, outmaps, {size}, options) {}
    std::string classname() const override { return "Conv3D"; }
};

} // namespace tessera
