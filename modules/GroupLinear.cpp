#include "modules/GroupLinear.h"

#include <stdexcept>

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

GroupLinear::GroupLinear(int64_t groups, int64_t insize, int64_t outsize, const GroupLinearOptions& options)
    : Module(options.name), groups_(groups), insize_(insize), outsize_(outsize), options_(options) {
    if (groups <= 0 || insize <= 0 || outsize <= 0) {
        throw ModuleError("GroupLinear: groups, insize and outsize must be positive");
    }
    if (options.batchDim != 0 && options.batchDim != 1) {
        throw ModuleError("GroupLinear: batchDim must be 0 or 1, got " + std::to_string(options.batchDim));
    }
    for (const auto& [what, mode] : {std::pair{"inmode", &options.inmode}, std::pair{"wmode", &options.wmode}}) {
        if (*mode != "full" && *mode != "one") {
            throw ModuleError(std::string("GroupLinear: ") + what + " must be 'full' or 'one', got '" + *mode + "'");
        }
    }
    oneInput_ = options.inmode == "one";
    oneWeight_ = options.wmode == "one";
    const int64_t wgroups = oneWeight_ ? 1 : groups;
    Tensor w = newWeights({wgroups, insize, outsize}, options.initscheme, insize, outsize, options.wscale);
    setVar("W", Variable::of(w));
    if (options.useBias) setVar("b", Variable::of(Tensor::zeros({wgroups, outsize})));
}

Tensor GroupLinear::inputGroup(const Tensor& xg, int64_t g, int64_t n) const {
    const int64_t k = oneInput_ ? 0 : g;
    return xg.slice(k, k + 1).reshape({n, xg.shape()[2]});
}

Tensor GroupLinear::weightGroup(const Tensor& t, int64_t g, int64_t last) const {
    const int64_t k = oneWeight_ ? 0 : g;
    return t.shape().rank() == 3 ? t.slice(k, k + 1).reshape({t.shape()[1], last}) : t.slice(k, k + 1).reshape({last});
}

std::string GroupLinear::layoutOf(int64_t last) const {
    const std::string g = std::to_string(groups_), k = std::to_string(last);
    return options_.batchDim == 0 ? "[N, " + g + ", " + k + "]" : "[" + g + ", N, " + k + "]";
}

void GroupLinear::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const int64_t groups = oneInput_ ? 1 : groups_;
    if (s.rank() != 3 || s[1 - options_.batchDim] != groups || s[2] != insize_) {
        const std::string g = std::to_string(groups), k = std::to_string(insize_);
        throw shapeError("expects input " +
                         (options_.batchDim == 0 ? "[N, " + g + ", " + k + "]" : "[" + g + ", N, " + k + "]") +
                         (oneInput_ ? " (inmode 'one')" : "") + ", got " + s.str());
    }
}

void GroupLinear::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    if (s.rank() != 3 || s[1 - options_.batchDim] != groups_ || s[2] != outsize_) {
        throw shapeError("expects gradient " + layoutOf(outsize_) + ", got " + s.str());
    }
}

Shapes GroupLinear::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    y[1 - options_.batchDim] = groups_;
    y[2] = outsize_;
    return {y};
}

Shapes GroupLinear::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape x = outGradShapes[0];
    if (oneInput_) x[1 - options_.batchDim] = 1;
    x[2] = insize_;
    return {x};
}

Tensor GroupLinear::groupsFirst(const Tensor& t) const { return options_.batchDim == 1 ? t : axis::swap01(t); }

Tensor GroupLinear::fromGroupsFirst(const Tensor& t) const { return groupsFirst(t); } // the swap is its own inverse

// x: [N, G, in] -> y: [N, G, out], one GEMM per group on the groups-first copy
Tensors GroupLinear::updateData(const Tensors& data) {
    xg_ = groupsFirst(data[0]);
    const int64_t n = xg_.shape()[1];
    Tensor yg = Tensor::empty({groups_, n, outsize_}, DType::float32, xg_.device());
    Backend& be = backendOf(yg);
    const Tensor& w = getVar("W")->data;
    for (int64_t g = 0; g < groups_; ++g) {
        Tensor yv = yg.slice(g, g + 1).reshape({n, outsize_});
        float beta = 0.0f;
        if (options_.useBias) {
            be.broadcastRows(weightGroup(getVar("b")->data, g, outsize_), yv);
            beta = 1.0f;
        }
        be.gemm(false, false, 1.0f, inputGroup(xg_, g, n), weightGroup(w, g, outsize_), beta, yv, computeDType());
    }
    return {fromGroupsFirst(yg)};
}

// dy -> dx[g] = dy[g] W[g]^T
Tensors GroupLinear::updateGrad(const Tensors& grad) {
    Tensor dyg = groupsFirst(grad[0]);
    const int64_t n = dyg.shape()[1];
    Tensor dxg = Tensor::empty({oneInput_ ? 1 : groups_, n, insize_}, DType::float32, dyg.device());
    const Tensor& w = getVar("W")->data;
    for (int64_t g = 0; g < groups_; ++g) {
        // inmode "one": every group's gradient adds into the one input group
        const float beta = oneInput_ && g > 0 ? 1.0f : 0.0f;
        backendOf(dxg).gemm(false, true, 1.0f, dyg.slice(g, g + 1).reshape({n, outsize_}), weightGroup(w, g, outsize_),
                            beta, inputGroup(dxg, g, n), computeDType());
    }
    return {fromGroupsFirst(dxg)};
}

// dW[g] = scale * x[g]^T dy[g] + momentum * dW[g]; db[g] = scale * sum_n dy[g] + momentum * db[g]
void GroupLinear::accGradParams(const Tensors& grad, float scale, float momentum) {
    Tensor dyg = groupsFirst(grad[0]);
    const int64_t n = dyg.shape()[1];
    Backend& be = backendOf(dyg);
    for (int64_t g = 0; g < groups_; ++g) {
        Tensor dy = dyg.slice(g, g + 1).reshape({n, outsize_});
        // wmode "one": every group's gradient adds into the one weight
        const float beta = oneWeight_ && g > 0 ? 1.0f : momentum;
        be.gemm(true, false, scale, inputGroup(xg_, g, n), dy, beta, weightGroup(getVar("W")->grad, g, outsize_),
                computeDType());
        if (options_.useBias) be.sumRows(dy, scale, beta, weightGroup(getVar("b")->grad, g, outsize_));
    }
}

Blueprint GroupLinear::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("groups", groups_);
    bp.scheme.emplace_back("insize", insize_);
    bp.scheme.emplace_back("outsize", outsize_);
    bp.scheme.emplace_back("batchDim", options_.batchDim);
    bp.scheme.emplace_back("useBias", options_.useBias);
    bp.scheme.emplace_back("initscheme", tessera::str(options_.initscheme));
    bp.scheme.emplace_back("wscale", static_cast<double>(options_.wscale));
    if (oneInput_) bp.scheme.emplace_back("inmode", options_.inmode);
    if (oneWeight_) bp.scheme.emplace_back("wmode", options_.wmode);
    return bp;
}

} // namespace tessera
