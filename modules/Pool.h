#pragma once
/// \file MaxPool1D/2D/3D and AvgPool1D/2D/3D: pooling over 1, 2 and 3 spatial dims (see
/// PoolND for shapes and options).

#include "modules/PoolND.h"

namespace tessera {

class MaxPool1D : public PoolND {
public:
    explicit MaxPool1D(std::vector<int64_t> size, const PoolOptions& options = {})
        : PoolND(1, PoolKind::max, std::move(size), options) {}
    explicit MaxPool1D(int64_t size = 2, const PoolOptions& options = {}) : PoolND(1, PoolKind::max, {size}, options) {}
    std::string classname() const override { return "MaxPool1D"; }
};

class MaxPool2D : public PoolND {
public:
    explicit MaxPool2D(std::vector<int64_t> size, const PoolOptions& options = {})
        : PoolND(2, PoolKind::max, std::move(size), options) {}
    explicit MaxPool2D(int64_t size = 2, const PoolOptions& options = {}) : PoolND(2, PoolKind::max, {size}, options) {}
    std::string classname() const override { return "MaxPool2D"; }
};

class MaxPool3D : public PoolND {
public:
    explicit MaxPool3D(std::vector<int64_t> size, const PoolOptions& options = {})
        : PoolND(3, PoolKind::max, std::move(size), options) {}
    explicit MaxPool3D(int64_t size = 2, const PoolOptions& options = {}) : PoolND(3, PoolKind::max, {size}, options) {}
    std::string classname() const override { return "MaxPool3D"; }
};

class AvgPool1D : public PoolND {
public:
    explicit AvgPool1D(std::vector<int64_t> size, const PoolOptions& options = {})
        : PoolND(1, PoolKind::avgWithPad, std::move(size), options) {}
    explicit AvgPool1D(int64_t size = 2, const PoolOptions& options = {})
        : PoolND(1, PoolKind::avgWithPad, {size}, options) {}
    std::string classname() const override { return "AvgPool1D"; }
};

class AvgPool2D : public PoolND {
public:
    explicit AvgPool2D(std::vector<int64_t> size, const PoolOptions& options = {})
        : PoolND(2, PoolKind::avgWithPad, std::move(size), options) {}
    explicit AvgPool2D(int64_t size = 2, const PoolOptions& options = {})
        : PoolND(2, PoolKind::avgWithPad, {size}, options) {}
    std::string classname() const override { return "AvgPool2D"; }
};

class AvgPool3D : public PoolND {
public:
    explicit AvgPool3D(std::vector<int64_t> size, const PoolOptions& options = {})
        : PoolND(3, PoolKind::avgWithPad, std::move(size), options) {}
    explicit AvgPool3D(int64_t size = 2, const PoolOptions& options = {})
        : PoolND(3, PoolKind::avgWithPad, {size}, options) {}
    std::string classname() const override { return "AvgPool3D"; }
};

} // namespace tessera
