#pragma once
/// \file Deconv1D, Deconv2D, Deconv3D: transposed convolution over 1, 2 and 3 spatial dims
/// (see ConvND for shapes, parameters and options).

#include "modules/ConvND.h"

namespace tessera {

/// x: [N, inmaps, L] -> y: [N, outmaps, ...].
class Deconv1D : public ConvND {
public:
    Deconv1D(int64_t inmaps, int64_t outmaps, std::vector<int64_t> size, const ConvOptions& options = {})
        : ConvND(1, true, inmaps, outmaps, std::move(size), options) {}
    Deconv1D(int64_t inmaps, int64_t outmaps, int64_t size, const ConvOptions& options = {})
        : ConvND(1, true, inmaps, outmaps, {size}, options) {}
    std::string classname() const override { return "Deconv1D"; }
};

/// x: [N, inmaps, H, W] -> y: [N, outmaps, ...].
class Deconv2D : public ConvND {
public:
    Deconv2D(int64_t inmaps, int64_t outmaps, std::vector<int64_t> size, const ConvOptions& options = {})
        : ConvND(2, true, inmaps, outmaps, std::move(size), options) {}
    Deconv2D(int64_t inmaps, int64_t outmaps, int64_t size, const ConvOptions& options = {})
        : ConvND(2, true, inmaps, outmaps, {size}, options) {}
    std::string classname() const override { return "Deconv2D"; }
};

/// x: [N, inmaps, D, H, W] -> y: [N, outmaps, ...].
class Deconv3D : public ConvND {
public:
    Deconv3D(int64_t inmaps, int64_t outmaps, std::vector<int64_t> size, const ConvOptions& options = {})
        : ConvND(3, true, inmaps, outmaps, std::move(size), options) {}
    Deconv3D(int64_t inmaps, int64_t outmaps, int64_t size, const ConvOptions& options = {})
        : ConvND(3, true, inmaps, outmaps, {size}, options) {}
    std::string classname() const override { return "Deconv3D"; }
};

} // namespace tessera
