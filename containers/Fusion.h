#pragma once
/// \file Fusion: adjacent layers a container runs as one backend call, without changing
/// what the model computes. A batch norm (BatchNorm1D/2D/3D, BatchNorm) whose only consumer
/// is a ReLU runs the ReLU inside the normalisation, forward and backward, where the
/// backend can (the CPU's oneDNN primitive; CUDA runs them apart): one pass over the
/// activations instead of two each way, and the ReLU's output and input gradient cost no
/// memory. A sum (`Add`, a residual block's end) whose only consumer is a ReLU applies it
/// in its own pass, on every backend (Backend::axpbyzRelu), and the ReLU's output costs no
/// memory; the ReLU's backward is its own (the layers implement modules/FusedRelu.h).
///
/// A `Linear` whose only consumer is a ReLU applies it to its GEMM's sums where the backend
/// can (Backend::gemmFusesActivation: the CPU's oneDNN post-op; CUDA runs them apart), in
/// train and eval mode; the ReLU's output costs no memory and its backward is its own. In
/// eval mode, with both layers in eval mode, any activation kind the backend's GEMM takes
/// fuses so (GELU after a transformer's first MLP layer: one pass over the activations
/// fewer); its output and input gradient cost no memory, and a backward after it (input
/// gradients) runs the activation's derivative in the Linear's, on its input computed
/// again. In bfloat16 the fused activation is rounded once, where the layers apart round
/// the GEMM's output first.
///
/// A batch norm whose only consumer is a sum of two (`Add`, coefficients 1: a residual
/// block's last batch norm) leaves its normalisation to the sum, which computes
/// relu(bn(x) + z) (the ReLU when it fuses one) in one backend call
/// (Backend::batchNormAddForward: the normalisation, then the sum in place on the CPU;
/// cuDNN's fused batch norm + add + ReLU on CUDA where it takes the tensors), and whose
/// backward differentiates the ReLU, the sum and the normalisation in one call
/// (Backend::batchNormAddBackward); the ReLU's and the batch norm's backwards pass their
/// gradients through. The batch norm's output costs no memory: its node's `data` is its
/// input. Graphs only.
///
/// In eval mode with packed weights (Module::packWeights), a convolution (Conv1D/2D/3D)
/// whose only consumer is a batch norm over its maps (BatchNorm1D/2D/3D) takes the
/// normalisation into its weights and bias, W' = a W and b' = a b + c per output channel
/// with the running statistics' a = scale / sqrt(var + eps) and c = bias - mean a, and
/// applies the batch norm's fused ReLU inside the convolution (a oneDNN post-op on the CPU):
/// the batch norm's pass over the activations is gone, and its output costs no memory (its
/// node's `data` is the convolution's output, which is normalised). The folded weights
/// are kept with the packed ones and made again after a parameter change
/// (parameterGeneration) or a train-mode forward of the batch norm; a write through a
/// tensor's memory is not seen, as for packed weights. The results differ from the
/// unfolded layers' in rounding only. A backward after such a forward (eval mode: input
/// gradients only; a Sequential's, as a Graph's eval forward releases its values)
/// differentiates the same function through the folded weights.
///
/// Graph and Sequential find the pairs among their own children at each forward and set
/// them up around it (and the memory plan does the same). The results equal the unfused
/// layers' (the same arithmetic); what differs is what is held: the batch norm's output
/// *is* the ReLU's (its node's `data` is the ReLU's output), and the ReLU holds its input.

#include <optional>
#include <vector>

namespace tessera {

class Activation;
class Add;
class ConvFoldedNorm;
class ConvND;
class FusedRelu;
class SumFusedNorm;
class Graph;
class Sequential;

/// Process-wide switch, on by default; `TESSERA_FUSION=0` in the environment starts it
/// off. Takes effect at the next forward.
void setFusion(bool on);
bool fusionEnabled();

namespace fusion {

struct Pair {
    FusedRelu* source;      ///< a batch norm, an Add or a Linear
    Activation* activation; ///< a ReLU, or another kind the source takes (eval mode)
};

/// A batch-norm, Add or Linear node whose one consumer is a ReLU node taking it alone (or,
/// both in eval mode, another activation the source takes: FusedRelu::takesActivation),
/// neither module running in another node and the source not an output of the graph.
/// `train`: the mode to take both layers in (a memory plan's), else their own. None while
/// Module::checkNumerics is on (each layer's own output is checked: a NaN the activation
/// would hide, oneDNN's ReLU making it 0, is found where it was made).
std::vector<Pair> pairsOf(const Graph& graph, std::optional<bool> train = std::nullopt);
/// A batch norm, an Add or a Linear directly followed by such an activation.
std::vector<Pair> pairsOf(const Sequential& seq, std::optional<bool> train = std::nullopt);

/// A batch norm and the sum it alone feeds, at input `slot` of two.
struct NormSum {
    SumFusedNorm* norm;
    Add* sum;
    int slot;
};

/// A batch-norm node, not an output of the graph, whose one consumer is an Add node of
/// two inputs with coefficients 1 taking it once; neither module running in another node.
/// One per sum (the first in the graph's order where both inputs are batch norms).
std::vector<NormSum> normSumsOf(const Graph& graph);

/// A convolution and the batch norm it alone feeds, which it folds in eval mode.
struct ConvNorm {
    ConvND* conv;
    ConvFoldedNorm* norm;
};

/// A convolution node, not an output of the graph, whose one consumer is a batch-norm node
/// taking it alone, neither module running in another node, where the convolution can fold
/// the norm (ConvND::canFold: packed weights among others). Whatever the modules' modes:
/// see evalOnly.
std::vector<ConvNorm> foldsOf(const Graph& graph);
/// A convolution directly followed by a batch norm it can fold.
std::vector<ConvNorm> foldsOf(const Sequential& seq);
/// Those whose convolution and batch norm are both in eval mode (what a forward folds).
std::vector<ConvNorm> evalOnly(std::vector<ConvNorm> folds);

/// Sets the pairs, sums and folds up for the scope's lifetime (nothing when fusion is off).
class Scope {
public:
    explicit Scope(std::vector<Pair> pairs, std::vector<NormSum> sums = {}, std::vector<ConvNorm> folds = {});
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    std::vector<Pair> pairs_;
    std::vector<NormSum> sums_;
    std::vector<ConvNorm> folds_;
};

} // namespace fusion
} // namespace tessera
