#pragma once
/// \file Module: the base of every layer and container.
///
/// The base owns the workflow; a layer implements the compute:
///   operator()(data)  = generic checks + checkDataShape + checkDataType, then updateData.
///   backward(grad, …) = the gradient must match the last output, checkGradShape, then
///                       updateGrad (input gradient) and, in train mode, accGradParams.
/// dataShapeFrom / gradShapeFrom are pure shape functions: no allocation, no device.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/Errors.h"
#include "backend/Tensor.h"
#include "modules/Blueprint.h"

namespace tessera {

/// A trained parameter: its value and the gradient accumulated into it.
struct Variable {
    Tensor data;
    Tensor grad;

    /// A parameter of `data`'s shape with a zero gradient.
    static std::shared_ptr<Variable> of(Tensor data);
};
using VariablePtr = std::shared_ptr<Variable>;

/// Named parameters in registration order; containers prefix their children's names
/// (`fc1.W`).
using NamedVariables = std::vector<std::pair<std::string, VariablePtr>>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module;
class Generator;
struct LayerState;
using ModulePtr = std::shared_ptr<Module>;

/// What one run of a module allocates, for the static memory plan
/// (containers/MemoryPlan.h). Bytes are of tensor storage, as `memoryStats` counts them.
struct MemoryUse {
    /// Per output: its layout, and -1 when it has storage of its own, else the index of
    /// the input it is a view of (as the module sees its inputs: plain copies for modules
    /// that do not handle layouts).
    std::vector<Layout> outLayouts;
    std::vector<int> outputViews;
    /// Per input: -1 when its gradient has storage of its own (the input's size and
    /// layout), else the index of the output gradient it shares or views.
    std::vector<int> gradViews;
    /// Kept from a train-mode forward for backward (masks, argmax indices, statistics).
    int64_t keptBytes = 0;
    /// Kept from a train-mode forward until this module's backward, which releases it once
    /// its input gradients exist (a bfloat16 convolution's float32 input converted to
    /// bfloat16; the plan counts none when the input comes in bfloat16).
    int64_t keptUntilBackwardBytes = 0;
    /// Kept from a train-mode forward until this module's backward whatever the inputs'
    /// dtypes (the reserve of cuDNN's fused batch norm + add + ReLU).
    int64_t reservedUntilBackwardBytes = 0;
    /// Buffers a forward allocates and releases inside the call (attention's blocks of
    /// scores, its heads in eval mode): the most bytes they add, at any moment of the call,
    /// to what the plan already holds then (the inputs, the outputs and what is kept).
    int64_t forwardScratchBytes = 0;
    /// The same for a backward, beyond the output gradients, what is kept and the input
    /// gradients.
    int64_t backwardScratchBytes = 0;
};

class Module {
public:
    explicit Module(std::string name = {});
    virtual ~Module();
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    /// The class name used in blueprints and messages ("Linear").
    virtual std::string classname() const = 0;
    const std::string& name() const { return name_; }
    void setName(std::string name) { name_ = std::move(name); }
    /// `Linear 'fc1'`, or `Linear` when unnamed.
    std::string str() const;

    // ---- forward ----------------------------------------------------------------------
    /// Run the module on one tensor; returns its single output. Throws ShapeError on bad
    /// input (rank, sizes, dtype, empty batch) before touching any data.
    Tensor operator()(const Tensor& data);
    /// Run the module on a list of tensors; returns the output list.
    const Tensors& operator()(const Tensors& data);
    /// The forward for containers whose plan has already checked these input shapes (see
    /// docs/architecture.md): dtypes are checked, shapes are not. Users call operator().
    const Tensors& runPlanned(const Tensors& data);

    // ---- backward ---------------------------------------------------------------------
    /// Back-propagate `grad` (the gradient of the last output). `updGrad` computes the
    /// input gradient (returned; undefined when false); `updParamGrads` accumulates
    /// parameter gradients in train mode as `scale * new + momentum * old`.
    Tensor backward(const Tensor& grad, bool updParamGrads = true, bool updGrad = true, float scale = 1.0f,
                    float momentum = 0.0f);
    const Tensors& backward(const Tensors& grad, bool updParamGrads = true, bool updGrad = true, float scale = 1.0f,
                            float momentum = 0.0f);

    /// The last input, output and input gradient. The single-tensor accessors throw when
    /// the module has a different number of tensors there.
    const Tensor& inData() const;
    const Tensor& data() const;
    const Tensor& grad() const;
    const Tensors& inDataList() const { return inData_; }
    const Tensors& dataList() const { return data_; }
    const Tensors& gradList() const { return grad_; }

    // ---- shapes -----------------------------------------------------------------------
    /// Output shapes for input shapes (assumes the shapes passed checkDataShape).
    virtual Shapes dataShapeFrom(const Shapes& inShapes) const = 0;
    /// The single-shape form checks first (as inferDataShape does): a bad shape is a
    /// ShapeError, as in forward.
    Shape dataShapeFrom(const Shape& inShape) const;
    /// Input-gradient shapes for output-gradient shapes. Modules whose input shapes do not
    /// follow from the gradient's (Flatten, Concat, a strided convolution, ...) take them
    /// from the last forward, and throw ModuleError when there was none: the two-argument
    /// form needs no history.
    virtual Shapes gradShapeFrom(const Shapes& outGradShapes) const = 0;
    Shape gradShapeFrom(const Shape& outGradShape) const;
    /// The pure form containers use: the input-gradient shapes for the forward input shapes
    /// `inShapes` (which passed inferDataShape) and the output-gradient shapes. Throws
    /// ShapeError unless `outGradShapes` are the output shapes and checkGradShape accepts
    /// them; returns `inShapes` (a gradient has the shape of what it differentiates).
    Shapes gradShapeFrom(const Shapes& inShapes, const Shapes& outGradShapes) const;
    /// Throws ShapeError (naming this module, what it expects, what it got) when the
    /// input shapes do not fit. Default: accepts any shapes.
    virtual void checkDataShape(const Shapes& inShapes) const;
    /// Module-specific checks of output-gradient shapes. Default: none (backward already
    /// requires the gradient to match the last output).
    virtual void checkGradShape(const Shapes& outGradShapes) const;
    /// Throws ShapeError when an input dtype does not fit. Default: all float32.
    virtual void checkDataType(const std::vector<DType>& dtypes) const;
    /// The whole input check as containers run it: no input empty, then checkDataShape,
    /// then dataShapeFrom. Allocates nothing.
    Shapes inferDataShape(const Shapes& inShapes) const;

    // ---- parameters and attributes ----------------------------------------------------
    /// Register (or replace) parameter `name` of this module.
    void setVar(const std::string& name, VariablePtr var);
    /// This module's parameter `name`; throws ContainerError when absent.
    const VariablePtr& getVar(const std::string& name) const;
    bool hasVar(const std::string& name) const;
    /// Register (or replace) a non-trained state tensor (for example running statistics).
    void setAttr(const std::string& name, Tensor value);
    const Tensor& getAttr(const std::string& name) const;
    /// Parameters of this module and of every descendant, with dotted names.
    NamedVariables namedParams() const;
    /// Makes the parameter of `dottedName` (a name of namedParams: `block1.fc.W`) the Variable
    /// `var`, shared (how a model file or a copy restores the weights a model shares, a head
    /// tied to its token table); ContainerError naming it when no such parameter exists.
    void shareVarAt(const std::string& dottedName, VariablePtr var);
    /// Shares every group of namedParams' names that one Variable holds in `from` (a module of
    /// the same blueprint) the same way here: each name after a group's first gets the
    /// first's Variable.
    void shareVarsAs(const Module& from);
    NamedTensors namedAttrs() const;
    /// trainingCounters() of this module and of every descendant, with dotted names (model
    /// files and checkpoints save and restore them).
    std::vector<std::pair<std::string, int64_t*>> namedCounters();
    /// Total number of parameter elements (a parameter shared by several modules counts once).
    int64_t numOfParams() const;
    /// Total bytes of parameter data.
    size_t paramSize() const;
    /// Set every parameter gradient to zero.
    void zeroGradParams();
    /// Move every parameter (with its gradient) and every attribute of this module and its
    /// descendants to `device`; a shared parameter moves once, tensors already there stay.
    /// Kept inputs and outputs are dropped (`reset`). Set optimizers up after the move:
    /// their state lives on the parameters' device.
    void to(Device device);
    /// The device of the first parameter or attribute (CPU when there is none).
    Device device() const;
    /// Plain gradient step: param -= lr * grad.
    void updateParams(float lr);

    // ---- numerics check -----------------------------------------------------------------
    /// Process-wide: when on, every layer's outputs are checked after its forward, and its
    /// input gradients and parameter gradients after its backward, for NaN and infinity;
    /// the first one found throws NumericsError naming the layer (its path in the model
    /// added by the containers), the phase, the first bad element (flat index and
    /// coordinates) and the minimum, maximum, mean and non-finite count of what the layer
    /// was given. Off by default: then it costs one flag test per layer call. On, one pass
    /// over each tensor (host float32 tensors in place, others through a host copy).
    static void setCheckNumerics(bool on);
    static bool checkNumerics();

    // ---- gradient hook ------------------------------------------------------------------
    /// This model's hook: while a backward of this module runs, called after the backward of
    /// every module under it (itself included) that accumulated parameter gradients (train
    /// mode, updParamGrads), with that module; its ownParams() gradients then hold this
    /// backward's contribution (a module run at several nodes is called once per node).
    /// Data-parallel training (distributed/DataParallel.h) starts reducing a bucket of
    /// gradients as soon as all of its parameters are done. Each model's hook hears only its
    /// own modules, whichever threads the models run in; a hook set on a module inside
    /// another's tree is called too. Empty (the default): none.
    void setGradientHook(std::function<void(const Module&)> hook);
    /// This module's own parameters (not its children's), in registration order.
    const NamedVariables& ownParams() const { return vars_; }

    // ---- call observer ------------------------------------------------------------------
    /// Told when a module's forward and backward begin and end. A forward spans the input
    /// conversions (bfloat16 to float32, blocked to plain layouts) and the layer's own
    /// compute; a backward the same for the gradients, up to the input gradients in their
    /// inputs' dtypes (not the gradient hook, not the numerics check). A call that throws
    /// gets no end. The profiler (training/Profile.h) times layers with it.
    struct CallObserver {
        virtual ~CallObserver() = default;
        virtual void begin(const Module& module, bool backward) = 0;
        virtual void end(const Module& module, bool backward) = 0;
    };
    /// Per thread: the observer of the calls this thread makes (null: none, the default;
    /// then it costs one thread-local test per call). Returns the one it replaces.
    static CallObserver* setCallObserver(CallObserver* observer);

    // ---- modes ------------------------------------------------------------------------
    void trainMode() { setTrain(true); }
    void evalMode() { setTrain(false); }
    bool isTrain() const { return train_; }
    /// Drop the kept input, output and gradient (here and in every descendant).
    virtual void reset();
    /// Drop the kept input gradient only (`gradList()` is empty afterwards). A graph does
    /// this to a node once every parent has used its gradient.
    void releaseGrad() { grad_.clear(); }
    /// Drop what the last forward kept for backward (inputs, outputs, kept tensors), here
    /// and in every descendant, keeping the input gradient: a container does this to a
    /// child once the child's backward has run (Container::setReleaseInBackward).
    void releaseSaved();

    /// What one run leaves in a module for its backward: its inputs, outputs, input
    /// gradients and the tensors the layer keeps (keptTensors). A Graph moves it out of a
    /// module that runs in several nodes after each node's forward, and back in for that
    /// node's backward.
    struct RunState {
        Tensors inData, data, grad;
        std::vector<Tensor> kept;
        std::vector<DType> inDTypes; // the inputs' dtypes before any conversion
        bool took16Bit = true;       // whether the module ran on them as they came
    };
    /// Move this run's state out; the module is left as reset() leaves it. Containers
    /// throw ModuleError: their children's runs are not theirs to move.
    RunState takeRunState();
    /// Put back a state that takeRunState took from this module.
    void putRunState(RunState state);
    /// Let a module pick algorithms for `inShapes` within `memlimit` bytes of workspace.
    /// Modules without a choice of algorithms (every CPU module) do nothing.
    virtual void optimizeForShape(const Shapes& inShapes, size_t memlimit);
    /// What the compute-heavy layers (convolutions, deconvolutions, linear and group-linear
    /// layers) compute in, here and in every descendant: float32 (the default), bfloat16 or
    /// float16 (their inputs and weights rounded to the 16-bit type, products summed in
    /// float32, so the float32 parameters are the master weights). The other layers and the
    /// costs compute in float32, except that on the CPU batch norm, activations, sums and
    /// pooling run on the bfloat16 activations bfloat16 convolutions hand them
    /// (docs/precision.md). float16 runs on CUDA devices only (the CPU backend throws
    /// BackendError when such a layer runs); int32 throws ModuleError. PuzzleLib's name.
    void calcMode(DType dtype);
    /// The dtype calcMode set (float32 by default).
    DType computeDType() const { return compute_; }
    /// For inference with fixed weights, here and in every descendant: in eval mode the
    /// layers keep their weights in their forward kernels' layout and type between calls
    /// instead of converting them on every forward (on the CPU, convolutions and
    /// deconvolutions keep a copy in oneDNN's blocked layout, in bfloat16 under
    /// calcMode(bfloat16), and Linear a copy in its matmul's layout (bfloat16 under
    /// calcMode(bfloat16); none when float32 GEMMs run on OpenBLAS); other layers, and the
    /// CUDA backend, read their weights as they are). With fusion on (setFusion), a
    /// convolution whose output only a batch norm reads also folds that normalisation (and
    /// its ReLU) into a copy of its weights and bias, on every backend (containers/Fusion.h).
    /// The copies are counted in memoryStats, not in the memory plan. Train-mode forwards
    /// never use them (a backward after an eval-mode forward differentiates what it computed). Changes made through the
    /// library (optimizer updates, setVar, setAttr, loading weights, calcMode) make the layers pack again; a write
    /// through a tensor's memory (`data<T>()`, a NumPy view) is not seen: call packWeights() again after one. false,
    /// and train mode, drop the copies.
    virtual void packWeights(bool on = true);
    /// Whether packWeights is on here.
    bool weightsPacked() const { return packed_; }

    /// Class name and constructor arguments. Subclasses add their own arguments.
    virtual Blueprint blueprint() const;

    /// How many tensors the module outputs (known before it runs: graphs check slot
    /// indices with it). Default 1.
    virtual size_t outputCount() const { return 1; }

    /// True when the module's compute takes tensors in any layout (see `Layout`); the
    /// base hands every other module plain inputs and gradients, reordering once at the
    /// boundary. Containers and the layers that run on blocked data say true.
    virtual bool handlesLayouts() const { return false; }
    /// True when the module computes on the 16-bit (bfloat16 or float16) activations in
    /// `data` (and on their gradients) itself; the base hands every other module float32
    /// copies of 16-bit inputs and gradients, converting once at the boundary. Whatever a
    /// module computes in, the gradient it returns for an input has that input's dtype.
    /// Containers say true; convolutions, batch norms, activations, pooling and sums say
    /// what their backend carries (Backend::carries16Bit: bfloat16 on the CPU, both types
    /// on CUDA under setCuda16BitActivations).
    virtual bool takes16Bit(const Tensors& data) const;
    /// Whether the backend of `data[0]` carries the dtype of every 16-bit tensor in `data`
    /// (Backend::carries16Bit): what the layers that compute on 16-bit activations answer
    /// from takes16Bit.
    static bool backendCarries(const Tensors& data);
    /// What a forward (and backward) at `inShapes` allocates, given the inputs' layouts, on
    /// `device`. Default: outputs of their own (in the first input's layout when the module
    /// handles layouts, else plain), gradients of their own, nothing kept. Layers that
    /// return views or keep state say so.
    virtual MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                Device device) const;
    /// The dtypes of the outputs a forward makes from inputs of `inDTypes` as the module
    /// sees them (float32 copies where it does not take bfloat16), for the memory plan.
    /// Default float32 for each output; views and layers that keep their input's dtype
    /// say so.
    virtual std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                            Device device) const;
    /// memoryUse of a module whose one output is a view of its one input and whose input
    /// gradient is a view of the output gradient (Identity, Flatten, Reshape).
    MemoryUse viewMemoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                            Device device) const;
    /// Direct children with their names (containers only).
    virtual std::vector<std::pair<std::string, Module*>> namedChildren() const { return {}; }
    /// The module's own random stream (dropout masks, noise), which a checkpoint saves and
    /// restores; none for most modules.
    virtual Generator* randomStream() { return nullptr; }
    /// Counters the module keeps from batch to batch besides its attributes (batch norm's
    /// batches seen, which sets its running-average factor), by name, which a checkpoint
    /// saves and restores; none for most modules.
    virtual std::vector<std::pair<std::string, int64_t*>> trainingCounters() { return {}; }

protected:
    /// Compute the outputs for inputs that passed the checks.
    virtual Tensors updateData(const Tensors& data) = 0;
    /// Compute the input gradients for output gradients that passed the checks.
    virtual Tensors updateGrad(const Tensors& grad) = 0;
    /// Accumulate parameter gradients: param.grad = scale * new + momentum * param.grad.
    virtual void accGradParams(const Tensors& grad, float scale, float momentum);
    /// The tensors a layer keeps from its forward for its backward besides its inputs and
    /// outputs (dropout's mask, max pooling's workspace, batch norm's batch statistics):
    /// reset() drops them and takeRunState() moves them. Default: none.
    virtual std::vector<Tensor*> keptTensors() { return {}; }
    /// The backward step after the checks. Layers keep the default (updateGrad then
    /// accGradParams); containers override it to drive their children.
    virtual Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum);
    virtual void setTrain(bool train);

    /// Throws NumericsError (see setCheckNumerics) when `t` holds a NaN or an infinity.
    void requireFinite(const char* phase, const std::string& what, const Tensor& t, const std::string& given,
                       const Tensors& givenTensors) const;
    /// The layer's slot for its weights in its forward kernel's layout and type
    /// (ConvParams::packed, Backend::gemmWeights): set in eval mode with packWeights on,
    /// else null.
    std::shared_ptr<LayerState> packSlot() const { return !train_ && packed_ ? packs_ : nullptr; }
    /// A ShapeError prefixed with this module's str().
    ShapeError shapeError(const std::string& what) const;
    /// A ModuleError (bad argument or state) prefixed with this module's str().
    ModuleError moduleError(const std::string& what) const;
    /// The input shapes of the last forward, for gradShapeFrom(outGradShapes) of modules
    /// that cannot recover them from the gradient; throws ModuleError (naming `what`)
    /// when no forward has run since the last reset.
    Shapes lastInShapes(const char* what) const;
    /// Throws unless `shapes` has exactly `count` entries.
    void requireCount(const Shapes& shapes, size_t count, const char* what) const;

private:
    std::string name_;
    std::function<void(const Module&)> gradientHook_; // setGradientHook
    bool train_ = true;
    DType compute_ = DType::float32;
    bool packed_ = false;
    std::shared_ptr<LayerState> packs_; // see packSlot
    Tensors inData_, data_, grad_;
    std::vector<DType> inDTypes_; // the last forward's input dtypes, before any conversion
    bool took16Bit_ = true;       // whether it ran on them as they came
    // The thread running this module's forward or backward (a per-thread address; null when
    // none) and how deep its calls are nested there: another thread is refused (RunGuard).
    std::atomic<const void*> runner_{nullptr};
    int runDepth_ = 0;
    friend class RunGuard;
    void runChecked(const Tensors& data);
    void moveAttrsTo(Device device);

    NamedVariables vars_;
    NamedTensors attrs_;
};

} // namespace tessera
