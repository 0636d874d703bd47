#include "modules/Module.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "backend/Backend.h"

namespace tessera {

std::shared_ptr<Variable> Variable::of(Tensor data) {
    auto var = std::make_shared<Variable>();
    var->grad = Tensor::zeros(data.shape(), data.dtype(), data.device());
    var->data = std::move(data);
    return var;
}

Module::Module(std::string name) : name_(std::move(name)), packs_(std::make_shared<LayerState>()) {}
Module::~Module() = default;

std::string Module::str() const { return name_.empty() ? classname() : classname() + " '" + name_ + "'"; }

ShapeError Module::shapeError(const std::string& what) const { return ShapeError(str() + ": " + what); }
ModuleError Module::moduleError(const std::string& what) const { return ModuleError(str() + ": " + what); }

Shapes Module::lastInShapes(const char* what) const {
    if (inData_.empty()) {
        throw moduleError(std::string(what) + " needs the input shapes of a forward; run forward first, or pass them: "
                                              "gradShapeFrom(inShapes, outGradShapes)");
    }
    return shapesOf(inData_);
}

void Module::requireCount(const Shapes& shapes, size_t count, const char* what) const {
    if (shapes.size() != count) {
        throw shapeError("expects " + std::to_string(count) + " " + what + " tensor" + (count == 1 ? "" : "s") +
                         ", got " + std::to_string(shapes.size()));
    }
}

// ---- numerics check -------------------------------------------------------------------

namespace {
std::atomic<bool> numericsChecked{false};

// What a float tensor holds: its first non-finite element and some statistics.
struct Scan {
    int64_t first = -1, nonFinite = 0;
    float firstValue = 0;
    double min = 0, max = 0, mean = 0;
};

Scan scan(const Tensor& t) {
    Scan s;
    if (!t.defined() || !isFloating(t.dtype()) || t.numel() == 0) return s;
    const std::vector<float> v = t.toHost().plain().toVector<float>();
    double sum = 0;
    int64_t finite = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        const float x = v[i];
        if (!std::isfinite(x)) {
            if (s.first < 0) s.first = static_cast<int64_t>(i), s.firstValue = x;
            ++s.nonFinite;
            continue;
        }
        s.min = finite ? std::min(s.min, static_cast<double>(x)) : x;
        s.max = finite ? std::max(s.max, static_cast<double>(x)) : x;
        sum += x;
        ++finite;
    }
    s.mean = finite ? sum / static_cast<double>(finite) : 0.0;
    return s;
}

std::string number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

// "[2, 3]": the coordinates of flat index i of shape.
std::string coordinates(int64_t i, const Shape& shape) {
    std::vector<int64_t> c(shape.rank());
    for (size_t d = shape.rank(); d-- > 0;) {
        const int64_t n = shape.dims()[d];
        c[d] = n ? i % n : 0;
        i = n ? i / n : 0;
    }
    return Shape(c).str();
}

std::string stats(const std::string& what, const Tensors& tensors) {
    std::string s;
    for (size_t k = 0; k < tensors.size(); ++k) {
        const Tensor& t = tensors[k];
        if (!t.defined()) continue;
        s += (s.empty() ? "" : "; ") + what + " " + std::to_string(k) + " " + t.shape().str();
        if (!isFloating(t.dtype())) {
            s += " of " + str(t.dtype());
            continue;
        }
        const Scan sc = scan(t);
        s += ": min " + number(sc.min) + ", max " + number(sc.max) + ", mean " + number(sc.mean) +
             (sc.nonFinite ? ", " + std::to_string(sc.nonFinite) + " NaN or infinite" : ", all finite");
    }
    return s.empty() ? "no " + what + "s" : s;
}
} // namespace

void Module::setCheckNumerics(bool on) { numericsChecked = on; }

namespace {
// The hooks of the backwards running on this thread, outermost first (setGradientHook).
thread_local std::vector<const std::function<void(const Module&)>*> activeHooks;

struct HookScope {
    explicit HookScope(const std::function<void(const Module&)>& hook) : on(static_cast<bool>(hook)) {
        if (on) activeHooks.push_back(&hook);
    }
    ~HookScope() {
        if (on) activeHooks.pop_back();
    }
    HookScope(const HookScope&) = delete;
    HookScope& operator=(const HookScope&) = delete;
    bool on;
};
} // namespace

void Module::setGradientHook(std::function<void(const Module&)> hook) { gradientHook_ = std::move(hook); }

namespace {
thread_local Module::CallObserver* callObserver = nullptr;
} // namespace

Module::CallObserver* Module::setCallObserver(CallObserver* observer) { return std::exchange(callObserver, observer); }
bool Module::checkNumerics() { return numericsChecked; }

namespace {
// Whether every element of `t` is finite: one vectorised pass over a float32 host tensor's
// storage (the padding of blocked layouts is zeros); other tensors through a host copy.
bool allFinite(const Tensor& t) {
    if (!t.defined() || !isFloating(t.dtype()) || t.numel() == 0) return true;
    if (!t.device().isCpu() || t.dtype() != DType::float32) return scan(t).first < 0;
    const float* p = t.storageData<float>();
    const auto n = static_cast<int64_t>(t.nbytes() / sizeof(float));
    int bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) bad |= !(p[i] - p[i] == 0.0f); // Inf - Inf and NaN - NaN are NaN
    return bad == 0;
}
} // namespace

void Module::requireFinite(const char* phase, const std::string& what, const Tensor& t, const std::string& given,
                           const Tensors& givenTensors) const {
    if (allFinite(t)) return;
    const Scan sc = scan(t);
    if (sc.first < 0) return;
    throw NumericsError(str() + ": " + phase + ": " + what + " " + t.shape().str() + " has " +
                        (std::isnan(sc.firstValue) ? std::string("NaN") : number(sc.firstValue)) + " at index " +
                        std::to_string(sc.first) + " " + coordinates(sc.first, t.shape()) + " (" +
                        std::to_string(sc.nonFinite) + " of " + std::to_string(t.numel()) +
                        " elements are NaN or infinite); " + stats(given, givenTensors));
}

// ---- forward ------------------------------------------------------------------------

Shapes Module::inferDataShape(const Shapes& inShapes) const {
    for (size_t i = 0; i < inShapes.size(); ++i) {
        if (inShapes[i].rank() == 0 || inShapes[i].numel() == 0) {
            throw shapeError("input " + std::to_string(i) + " is empty (" + inShapes[i].str() +
                             "); a batch needs at least one element in every dim");
        }
    }
    checkDataShape(inShapes);
    Shapes out = dataShapeFrom(inShapes);
    // Sizes past 64 bits (a Tile of 2^62 copies, a Linear of 1e11 x 1e11 features) are
    // errors here, not wrapped counts later.
    for (size_t i = 0; i < out.size(); ++i) {
        bool negative = false;
        for (int64_t d : out[i].dims()) negative = negative || d < 0;
        if (negative) throw shapeError("output " + std::to_string(i) + " " + out[i].str() + " overflows 64 bits");
        try {
            out[i].numel();
        } catch (const ShapeError& e) {
            throw shapeError("output " + std::to_string(i) + ": " + e.what());
        }
    }
    return out;
}

const Tensors& Module::operator()(const Tensors& data) {
    for (size_t i = 0; i < data.size(); ++i) {
        if (!data[i].defined()) throw shapeError("input " + std::to_string(i) + " is an undefined tensor");
    }
    inferDataShape(shapesOf(data));
    runChecked(data);
    return data_;
}

const Tensors& Module::runPlanned(const Tensors& data) {
    runChecked(data);
    return data_;
}

namespace {
bool any16Bit(const Tensors& ts) {
    for (const Tensor& t : ts) {
        if (t.defined() && is16Bit(t.dtype())) return true;
    }
    return false;
}
} // namespace

bool Module::takes16Bit(const Tensors&) const { return false; }

bool Module::backendCarries(const Tensors& data) {
    if (data.empty() || !data[0].defined()) return false;
    const Backend& be = backendOf(data[0]);
    for (const Tensor& t : data) {
        if (t.defined() && is16Bit(t.dtype()) && !be.carries16Bit(t.dtype())) return false;
    }
    return true;
}

// While alive, this thread runs `m`: a module keeps its last inputs and outputs for backward,
// so a second thread running it at the same time (two Python threads on one model) is a
// ModuleError instead of a silent mix of their data. Nested calls in one thread are fine.
class RunGuard {
public:
    explicit RunGuard(Module& m) : m_(m) {
        static thread_local const char self = 0;
        const void* expected = nullptr;
        if (!m.runner_.compare_exchange_strong(expected, &self) && expected != &self) {
            throw m.moduleError("is running in another thread: a module keeps its last run for backward, so each "
                                "thread needs its own (copyModule, or Module.copy() in Python)");
        }
        ++m.runDepth_;
    }
    ~RunGuard() {
        if (--m_.runDepth_ == 0) m_.runner_.store(nullptr);
    }
    RunGuard(const RunGuard&) = delete;
    RunGuard& operator=(const RunGuard&) = delete;

private:
    Module& m_;
};

void Module::runChecked(const Tensors& data) {
    const RunGuard running(*this);
    std::vector<DType> dtypes;
    dtypes.reserve(data.size());
    for (const Tensor& t : data) dtypes.push_back(t.dtype());
    checkDataType(dtypes);
    CallObserver* const observer = callObserver;
    if (observer) observer->begin(*this, false);
    took16Bit_ = !any16Bit(data) || takes16Bit(data);
    const Tensors converted = took16Bit_ ? Tensors() : float32All(data);
    const Tensors& in = took16Bit_ ? data : converted;
    if (handlesLayouts()) {
        data_ = updateData(in);
        inData_ = in;
    } else {
        Tensors plain = plainAll(in);
        data_ = updateData(plain);
        inData_ = std::move(plain);
    }
    inDTypes_ = std::move(dtypes);
    if (observer) observer->end(*this, false);
    if (numericsChecked && namedChildren().empty()) { // containers: their layers were checked
        for (size_t i = 0; i < data_.size(); ++i) {
            requireFinite("forward", "output " + std::to_string(i), data_[i], "input", inData_);
        }
    }
}

Tensor Module::operator()(const Tensor& data) {
    const Tensors& out = (*this)(Tensors{data});
    if (out.size() != 1) {
        throw shapeError("has " + std::to_string(out.size()) + " outputs; call it with a list to get them all");
    }
    return out[0];
}

// ---- backward -----------------------------------------------------------------------

const Tensors& Module::backward(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    const RunGuard running(*this);
    const HookScope hooked(gradientHook_);
    if (data_.empty()) throw moduleError("backward called before forward (no output to differentiate)");
    if (grad.size() != data_.size()) {
        throw shapeError("backward expects " + std::to_string(data_.size()) + " gradient tensor(s), got " +
                         std::to_string(grad.size()));
    }
    for (size_t i = 0; i < grad.size(); ++i) {
        if (!grad[i].defined()) throw shapeError("gradient " + std::to_string(i) + " is an undefined tensor");
        if (grad[i].shape() != data_[i].shape()) {
            throw shapeError("gradient " + std::to_string(i) + " has shape " + grad[i].shape().str() +
                             ", expected the output shape " + data_[i].shape().str());
        }
        // A float16 output (Cast's, or a CUDA layer's under setCuda16BitActivations) takes
        // its gradient in float16 too.
        const DType gt = grad[i].dtype(), yt = data_[i].dtype();
        if (gt != DType::float32 && gt != DType::bfloat16 && !(gt == yt && isFloating(yt))) {
            const bool other = isFloating(yt) && yt != DType::float32 && yt != DType::bfloat16;
            throw shapeError("gradient " + std::to_string(i) + " has dtype " + tessera::str(gt) +
                             ", expected float32 or bfloat16" + (other ? " or the output's " + tessera::str(yt) : ""));
        }
    }
    checkGradShape(shapesOf(grad));
    CallObserver* const observer = callObserver;
    if (observer) observer->begin(*this, true);
    const Tensors converted = took16Bit_ ? Tensors() : float32All(grad);
    const Tensors& g = took16Bit_ ? grad : converted;
    grad_ = backwardFrom(handlesLayouts() ? g : plainAll(g), updParamGrads, updGrad, scale, momentum);
    // Each input's gradient in that input's dtype.
    for (size_t i = 0; i < grad_.size() && i < inDTypes_.size(); ++i) {
        const DType want = inDTypes_[i];
        if (grad_[i].defined() && grad_[i].dtype() != want && isFloating(want) && isFloating(grad_[i].dtype())) {
            grad_[i] = grad_[i].convertedTo(want);
        }
    }
    if (observer) observer->end(*this, true);
    if (updParamGrads && train_ && !vars_.empty()) {
        for (const auto* hook : activeHooks) (*hook)(*this);
    }
    if (numericsChecked && namedChildren().empty()) { // containers: their layers were checked
        for (size_t i = 0; i < grad_.size(); ++i) {
            requireFinite("backward", "input gradient " + std::to_string(i), grad_[i], "output gradient", grad);
        }
        if (updParamGrads && train_) {
            for (const auto& [name, v] : namedParams()) {
                requireFinite("backward", "gradient of parameter '" + name + "'", v->grad, "output gradient", grad);
            }
        }
    }
    return grad_;
}

Tensor Module::backward(const Tensor& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    const Tensors& g = backward(Tensors{grad}, updParamGrads, updGrad, scale, momentum);
    if (g.empty()) return {};
    if (g.size() != 1) throw shapeError("has " + std::to_string(g.size()) + " inputs; call backward with a list");
    return g[0];
}

Tensors Module::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    Tensors inGrad;
    if (updGrad) inGrad = updateGrad(grad);
    if (updParamGrads && train_) accGradParams(grad, scale, momentum);
    return inGrad;
}

void Module::accGradParams(const Tensors&, float, float) {}

namespace {
const Tensor& single(const Module& m, const Tensors& list, const char* what) {
    if (list.size() != 1) {
        throw ShapeError(m.str() + ": holds " + std::to_string(list.size()) + " " + what +
                         " tensors; use the list accessor");
    }
    return list[0];
}
} // namespace

const Tensor& Module::inData() const { return single(*this, inData_, "input"); }
const Tensor& Module::data() const { return single(*this, data_, "output"); }
const Tensor& Module::grad() const { return single(*this, grad_, "gradient"); }

// ---- shapes -------------------------------------------------------------------------

Shape Module::dataShapeFrom(const Shape& inShape) const {
    Shapes out = inferDataShape(Shapes{inShape}); // the user's door: checked
    if (out.size() != 1) throw shapeError("has " + std::to_string(out.size()) + " outputs; pass a list of shapes");
    return out[0];
}

Shape Module::gradShapeFrom(const Shape& outGradShape) const {
    checkGradShape(Shapes{outGradShape});
    Shapes in = gradShapeFrom(Shapes{outGradShape});
    if (in.size() != 1) throw shapeError("has " + std::to_string(in.size()) + " inputs; pass a list of shapes");
    return in[0];
}

Shapes Module::gradShapeFrom(const Shapes& inShapes, const Shapes& outGradShapes) const {
    const Shapes out = dataShapeFrom(inShapes);
    if (outGradShapes.size() != out.size()) {
        throw shapeError("expects " + std::to_string(out.size()) + " output-gradient shape(s), got " +
                         std::to_string(outGradShapes.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
        if (outGradShapes[i] != out[i]) {
            throw shapeError("gradient " + std::to_string(i) + " has shape " + outGradShapes[i].str() +
                             ", expected the output shape " + out[i].str());
        }
    }
    checkGradShape(outGradShapes);
    return inShapes;
}

void Module::checkDataShape(const Shapes&) const {}
void Module::checkGradShape(const Shapes&) const {}

void Module::checkDataType(const std::vector<DType>& dtypes) const {
    for (size_t i = 0; i < dtypes.size(); ++i) {
        if (!isFloating(dtypes[i])) {
            throw shapeError("input " + std::to_string(i) + " has dtype " + tessera::str(dtypes[i]) +
                             ", expected float32, bfloat16 or float16");
        }
    }
}

// ---- parameters ---------------------------------------------------------------------

void Module::setVar(const std::string& name, VariablePtr var) {
    for (auto& [n, v] : vars_) {
        if (n == name) {
            v = std::move(var);
            noteParameterChange();
            return;
        }
    }
    vars_.emplace_back(name, std::move(var));
}

bool Module::hasVar(const std::string& name) const {
    for (const auto& [n, v] : vars_) {
        if (n == name) return true;
    }
    return false;
}

const VariablePtr& Module::getVar(const std::string& name) const {
    for (const auto& [n, v] : vars_) {
        if (n == name) return v;
    }
    throw ContainerError(str() + ": no parameter named '" + name + "'");
}

void Module::setAttr(const std::string& name, Tensor value) {
    for (auto& [n, t] : attrs_) {
        if (n == name) {
            t = std::move(value);
            noteParameterChange(); // a batch norm's statistics, which folded weights are made from
            return;
        }
    }
    attrs_.emplace_back(name, std::move(value));
}

const Tensor& Module::getAttr(const std::string& name) const {
    for (const auto& [n, t] : attrs_) {
        if (n == name) return t;
    }
    throw ContainerError(str() + ": no attribute named '" + name + "'");
}

NamedVariables Module::namedParams() const {
    NamedVariables out = vars_;
    for (const auto& [childName, child] : namedChildren()) {
        for (auto& [n, v] : child->namedParams()) out.emplace_back(childName + "." + n, std::move(v));
    }
    return out;
}

void Module::shareVarAt(const std::string& dottedName, VariablePtr var) {
    if (hasVar(dottedName)) return setVar(dottedName, std::move(var));
    for (const auto& [childName, child] : namedChildren()) {
        const std::string prefix = childName + ".";
        if (dottedName.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string rest = dottedName.substr(prefix.size());
        const NamedVariables inside = child->namedParams();
        if (std::any_of(inside.begin(), inside.end(), [&](const auto& nv) { return nv.first == rest; })) {
            return child->shareVarAt(rest, std::move(var));
        }
    }
    throw ContainerError(str() + ": no parameter named '" + dottedName + "'");
}

void Module::shareVarsAs(const Module& from) {
    std::unordered_map<const Variable*, std::string> first;  // each Variable's first name in `from`
    std::vector<std::pair<std::string, std::string>> shared; // name, the first name of its Variable
    for (const auto& [name, v] : from.namedParams()) {
        auto [it, fresh] = first.emplace(v.get(), name);
        if (!fresh) shared.emplace_back(name, it->second);
    }
    if (shared.empty()) return;
    std::unordered_map<std::string, VariablePtr> mine;
    for (auto& [name, v] : namedParams()) mine.emplace(name, std::move(v));
    for (const auto& [name, firstName] : shared) {
        const auto it = mine.find(firstName);
        if (it == mine.end()) throw ContainerError(str() + ": no parameter named '" + firstName + "'");
        const auto at = mine.find(name);
        if (at == mine.end()) throw ContainerError(str() + ": no parameter named '" + name + "'");
        if (at->second != it->second) shareVarAt(name, it->second);
    }
}

std::vector<std::pair<std::string, int64_t*>> Module::namedCounters() {
    std::vector<std::pair<std::string, int64_t*>> out = trainingCounters();
    for (const auto& [childName, child] : namedChildren()) {
        for (auto& [n, c] : child->namedCounters()) out.emplace_back(childName + "." + n, c);
    }
    return out;
}

NamedTensors Module::namedAttrs() const {
    NamedTensors out = attrs_;
    for (const auto& [childName, child] : namedChildren()) {
        for (auto& [n, t] : child->namedAttrs()) out.emplace_back(childName + "." + n, std::move(t));
    }
    return out;
}

namespace {
// Each distinct Variable once, even when several modules share it.
std::vector<Variable*> uniqueParams(const Module& m) {
    std::vector<Variable*> out;
    std::unordered_set<Variable*> seen;
    for (const auto& [n, v] : m.namedParams()) {
        if (seen.insert(v.get()).second) out.push_back(v.get());
    }
    return out;
}
} // namespace

int64_t Module::numOfParams() const {
    int64_t n = 0;
    for (Variable* v : uniqueParams(*this)) n += v->data.numel();
    return n;
}

size_t Module::paramSize() const {
    size_t n = 0;
    for (Variable* v : uniqueParams(*this)) n += v->data.nbytes();
    return n;
}

void Module::zeroGradParams() {
    for (Variable* v : uniqueParams(*this)) backendOf(v->grad).fill(v->grad, 0.0f);
}

void Module::updateParams(float lr) {
    for (Variable* v : uniqueParams(*this)) backendOf(v->data).axpby(-lr, v->grad, 1.0f, v->data);
    noteParameterChange();
}

// ---- modes --------------------------------------------------------------------------

void Module::setTrain(bool train) {
    train_ = train;
    if (train) packs_->data.reset(); // train-mode forwards read the weights as they are
    for (const auto& [n, child] : namedChildren()) child->setTrain(train);
}

void Module::reset() {
    inData_.clear();
    data_.clear();
    grad_.clear();
    inDTypes_.clear();
    took16Bit_ = true;
    for (Tensor* t : keptTensors()) *t = Tensor();
    for (const auto& [n, child] : namedChildren()) child->reset();
}

void Module::releaseSaved() {
    Tensors grad = std::move(grad_);
    reset();
    grad_ = std::move(grad);
}

Module::RunState Module::takeRunState() {
    if (!namedChildren().empty()) throw moduleError("a container's run state belongs to its children");
    RunState state{std::move(inData_), std::move(data_), std::move(grad_), {}, std::move(inDTypes_), took16Bit_};
    inData_.clear();
    data_.clear();
    grad_.clear();
    inDTypes_.clear();
    took16Bit_ = true;
    for (Tensor* t : keptTensors()) {
        state.kept.push_back(std::move(*t));
        *t = Tensor();
    }
    return state;
}

void Module::putRunState(RunState state) {
    const std::vector<Tensor*> kept = keptTensors();
    if (state.kept.size() != kept.size()) {
        throw moduleError("a run state with " + std::to_string(state.kept.size()) + " kept tensors, expected " +
                          std::to_string(kept.size()));
    }
    inData_ = std::move(state.inData);
    data_ = std::move(state.data);
    grad_ = std::move(state.grad);
    inDTypes_ = std::move(state.inDTypes);
    took16Bit_ = state.took16Bit;
    for (size_t i = 0; i < kept.size(); ++i) *kept[i] = std::move(state.kept[i]);
}

void Module::optimizeForShape(const Shapes&, size_t) {}

MemoryUse Module::viewMemoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    use.outputViews = {0};
    use.gradViews = {0};
    return use;
}

MemoryUse Module::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool /*train*/,
                            Device /*device*/) const {
    MemoryUse use;
    const size_t outs = dataShapeFrom(inShapes).size();
    const Layout layout = handlesLayouts() && !inLayouts.empty() ? inLayouts[0] : Layout::plain;
    use.outLayouts.assign(outs, layout);
    use.outputViews.assign(outs, -1);
    use.gradViews.assign(inShapes.size(), -1);
    return use;
}

std::vector<DType> Module::outputDTypes(const Shapes& inShapes, const std::vector<DType>&, Device) const {
    return std::vector<DType>(dataShapeFrom(inShapes).size(), DType::float32);
}

void Module::calcMode(DType dtype) {
    if (dtype == DType::int32) {
        throw moduleError("calcMode(" + tessera::str(dtype) + ") is not supported; layers compute in float32, " +
                          "bfloat16 or float16");
    }
    compute_ = dtype;
    for (const auto& [name, child] : namedChildren()) child->calcMode(dtype);
    noteParameterChange(); // packed weights follow the new type
}

void Module::packWeights(bool on) {
    packed_ = on;
    if (!on) packs_->data.reset();
    for (const auto& [name, child] : namedChildren()) child->packWeights(on);
    noteParameterChange(); // packWeights() again after a write through memory packs anew
}

Blueprint Module::blueprint() const {
    Blueprint bp;
    bp.classname = classname();
    if (!name_.empty()) bp.scheme.emplace_back("name", name_);
    return bp;
}

void Module::to(Device device) {
    for (Variable* v : uniqueParams(*this)) {
        if (v->data.defined() && v->data.device() != device) v->data = v->data.to(device);
        if (v->grad.defined() && v->grad.device() != device) v->grad = v->grad.to(device);
    }
    moveAttrsTo(device);
    reset();
}

void Module::moveAttrsTo(Device device) {
    for (auto& [name, t] : attrs_) {
        if (t.defined() && t.device() != device) t = t.to(device);
    }
    for (const auto& [name, child] : namedChildren()) child->moveAttrsTo(device);
}

Device Module::device() const {
    for (const auto& [name, v] : namedParams()) {
        if (v->data.defined()) return v->data.device();
    }
    for (const auto& [name, t] : namedAttrs()) {
        if (t.defined()) return t.device();
    }
    return Device::cpu();
}

} // namespace tessera
