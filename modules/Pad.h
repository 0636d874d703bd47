#pragma once
/// \file Pad1D and Pad2D: constant, reflection or edge padding of the spatial dims.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

/// "constant", "reflect", "edge".
std::string str(PadMode mode);
/// PadMode by its name (str's inverse); ModuleError listing the names otherwise.
PadMode padModeFromString(const std::string& name);

struct PadOptions {
    PadMode mode = PadMode::constant; ///< edge repeats the border value (PyTorch's "replicate")
    float fillValue = 0.0f;           ///< constant mode
    std::string name = {};
};

/// x: [N, C, *spatial] -> y: [N, C, *(spatial + lo + hi)]. `pad` holds one value (every
/// side), or (lo, hi) per spatial dim: Pad1D (left, right), Pad2D (top, bottom, left,
/// right). Reflect mirrors without repeating the edge and needs each pad below its dim.
class PadND : public Module {
public:
    PadND(size_t spatialDims, std::vector<int64_t> pad, const PadOptions& options);
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    void checkGradShape(const Shapes& outGradShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    size_t spatialDims_;
    std::vector<int64_t> lo_, hi_;
    PadOptions options_;
};

class Pad1D : public PadND {
public:
    explicit Pad1D(std::vector<int64_t> pad, const PadOptions& options = {}) : PadND(1, std::move(pad), options) {}
    std::string classname() const override { return "Pad1D"; }
};

class Pad2D : public PadND {
public:
    explicit Pad2D(std::vector<int64_t> pad, const PadOptions& options = {}) : PadND(2, std::move(pad), options) {}
    std::string classname() const override { return "Pad2D"; }
};

} // namespace tessera
