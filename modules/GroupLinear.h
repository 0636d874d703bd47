#pragma once
/// \file GroupLinear: one independent linear map per group.

#include "modules/Init.h"
#include "modules/Module.h"

namespace tessera {

struct GroupLinearOptions {
    int64_t batchDim = 0; ///< 0: x is [N, groups, insize]; 1: x is [groups, N, insize]
    /// "full": a group of data per weight group; "one": one group of data ([N, 1, insize],
    /// batchDim 1: [1, N, insize]) that every weight group reads (PuzzleLib's inmode).
    std::string inmode = "full";
    /// "full": a weight (and bias) per group; "one": one weight [1, insize, outsize] and
    /// bias [1, outsize] that every group shares (PuzzleLib's wmode).
    std::string wmode = "full";
    bool useBias = true;
    InitScheme initscheme = InitScheme::xavier;
    float wscale = 1.0f;
    std::string name = {};
};

/// x: [N, groups, insize] -> y: [N, groups, outsize] (batchDim 1: groups first),
/// y[n, g] = x[n, g] W[g] + b[g]. Parameters `W`: [groups, insize, outsize] and, with
/// useBias, `b`: [groups, outsize] (zeros). With inmode "one" x is [N, 1, insize] and
/// y[n, g] = x[n, 0] W[g] + b[g]; with wmode "one" `W` is [1, insize, outsize], `b`
/// [1, outsize], and y[n, g] = x[n, g] W[0] + b[0].
class GroupLinear : public Module {
public:
    GroupLinear(int64_t groups, int64_t insize, int64_t outsize, const GroupLinearOptions& options = {});
    std::string classname() const override { return "GroupLinear"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    void checkGradShape(const Shapes& outGradShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override { return {&xg_}; }

private:
    /// t in groups-first order ([groups, N, k]), permuting when batchDim is 0.
    Tensor groupsFirst(const Tensor& t) const;
    Tensor fromGroupsFirst(const Tensor& t) const;
    std::string layoutOf(int64_t last) const;

    int64_t groups_, insize_, outsize_;
    GroupLinearOptions options_;
    Tensor xg_; // the last input, groups first
    bool oneInput_ = false, oneWeight_ = false;
    /// Input group g ([N, insize]) of a groups-first tensor, and weight group g.
    Tensor inputGroup(const Tensor& xg, int64_t g, int64_t n) const;
    Tensor weightGroup(const Tensor& t, int64_t g, int64_t last) const;
};

} // namespace tessera
