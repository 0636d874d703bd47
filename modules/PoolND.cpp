#include "modules/PoolND.h"

#include <stdexcept>

#include "modules/SpatialUtil.h"

namespace tessera {

namespace {
std::string classOf(size_t dims, PoolKind kind) {
    return (kind == PoolKind::max ? "MaxPool" : "AvgPool") + std::to_string(dims) + "D";
}
} // namespace

PoolND::PoolND(size_t spatialDims, PoolKind kind, std::vector<int64_t> size, const PoolOptions& options)
    : Module(options.name), spatialDims_(spatialDims), includePad_(options.includePad) {
    const std::string cls = classOf(spatialDims, kind);
    params_.kind = kind == PoolKind::max ? kind : options.includePad ? PoolKind::avgWithPad : PoolKind::avgNoPad;
    params_.kernel = spatial::expand(size, spatialDims, cls.c_str(), "size", 1);
    params_.stride = options.stride.empty() ? params_.kernel
                                            : spatial::expand(options.stride, spatialDims, cls.c_str(), "stride", 1);
    params_.padLo = spatial::expand(options.pad, spatialDims, cls.c_str(), "pad", 0);
    params_.padHi = params_.padLo;
    for (size_t d = 0; d < spatialDims; ++d) {
        if (params_.padLo[d] >= params_.kernel[d]) {
            throw ModuleError(cls + ": pad (" + std::to_string(params_.padLo[d]) + ") must be below the size (" +
                              std::to_string(params_.kernel[d]) + ")");
        }
    }
}

void PoolND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() != spatialDims_ + 2) {
        throw shapeError("expects input [N, C, ...] with " + std::to_string(spatialDims_) + " spatial dim(s), got " +
                         s.str());
    }
    for (size_t d = 0; d < spatialDims_; ++d) {
        if (s[2 + d] + 2 * params_.padLo[d] < params_.kernel[d]) {
            throw shapeError("input " + s.str() + " is smaller than the window " + spatial::str(params_.kernel) +
                             " in spatial dim " + std::to_string(d));
        }
    }
}

void PoolND::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    if (outGradShapes[0].rank() != spatialDims_ + 2) {
        throw shapeError("expects a gradient of rank " + std::to_string(spatialDims_ + 2) + ", got " +
                         outGradShapes[0].str());
    }
}

Shapes PoolND::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& s = inShapes[0];
    std::vector<int64_t> y{s[0], s[1]};
    for (size_t d = 0; d < spatialDims_; ++d) {
        y.push_back((s[2 + d] + params_.padLo[d] + params_.padHi[d] - params_.kernel[d]) / params_.stride[d] + 1);
    }
    return {Shape(y)};
}

Shapes PoolND::gradShapeFrom(const Shapes& outGradShapes) const {
    const Shape& g = outGradShapes[0];
    if (!inDataList().empty() && inDataList()[0].shape().rank() == g.rank()) {
        Shape in = inDataList()[0].shape();
        in[0] = g[0];
        if (dataShapeFrom(Shapes{in})[0] == g) return {in};
    }
    std::vector<int64_t> in{g[0], g[1]};
    for (size_t d = 0; d < spatialDims_; ++d) {
        in.push_back((g[2 + d] - 1) * params_.stride[d] - params_.padLo[d] - params_.padHi[d] + params_.kernel[d]);
    }
    return {Shape(in)};
}

// x: [N, C, *in] -> y: [N, C, *out]
Tensors PoolND::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    workspace_ = Tensor();
    return {backendOf(x).poolForward(params_, x, dataShapeFrom(Shapes{x.shape()})[0], isTrain(), workspace_)};
}

// dy: [N, C, *out] -> dx: [N, C, *in]
Tensors PoolND::updateGrad(const Tensors& grad) {
    if (params_.kind == PoolKind::max && !workspace_.defined()) {
        throw shapeError("backward after an eval-mode forward; max pooling keeps its argmax only in train mode");
    }
    // In the forward's dtype (a max pooling's workspace is its forward's).
    const Tensor& x = inData();
    const Tensor dy = grad[0].convertedTo(x.dtype());
    return {backendOf(dy).poolBackward(params_, dy, workspace_, x.shape(), x.layout())};
}

Blueprint PoolND::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("size", params_.kernel);
    bp.scheme.emplace_back("stride", params_.stride);
    bp.scheme.emplace_back("pad", params_.padLo);
    if (params_.kind != PoolKind::max) bp.scheme.emplace_back("includePad", includePad_);
    return bp;
}

// ---- GlobalAvgPool ----------------------------------------------------------------------

void GlobalAvgPool::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() < 3 || inShapes[0].rank() > 5) {
        throw shapeError("expects input [N, C, *spatial] with 1 to 3 spatial dims, got " + inShapes[0].str());
    }
}

Shapes GlobalAvgPool::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    for (size_t d = 2; d < y.rank(); ++d) y[d] = 1;
    return {y};
}

Shapes GlobalAvgPool::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape in = lastInShapes("gradShapeFrom")[0];
    in[0] = outGradShapes[0][0];
    return {in};
}

PoolParams GlobalAvgPool::paramsFor(const Shape& in) const {
    PoolParams p;
    p.kind = PoolKind::avgNoPad;
    p.kernel.assign(in.dims().begin() + 2, in.dims().end());
    p.stride = p.kernel;
    p.padLo.assign(p.kernel.size(), 0);
    p.padHi = p.padLo;
    return p;
}

Tensors GlobalAvgPool::updateData(const Tensors& data) {
    Tensor none;
    return {backendOf(data[0]).poolForward(paramsFor(data[0].shape()), data[0],
                                           dataShapeFrom(Shapes{data[0].shape()})[0], false, none)};
}

Tensors GlobalAvgPool::updateGrad(const Tensors& grad) {
    const Tensor& x = inData();
    const Tensor dy = grad[0].convertedTo(x.dtype());
    return {backendOf(dy).poolBackward(paramsFor(x.shape()), dy, Tensor(), x.shape(), x.layout())};
}

MemoryUse PoolND::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                            Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (train && params_.kind == PoolKind::max) {
        use.keptBytes = backendFor(device).poolWorkspaceBytes(params_, inShapes[0], dataShapeFrom(inShapes)[0],
                                                              inLayouts.empty() ? Layout::plain : inLayouts[0]);
    }
    return use;
}

} // namespace tessera
