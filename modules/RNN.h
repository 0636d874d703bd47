#pragma once
/// \file RNN: recurrent layers (vanilla relu/tanh, LSTM, GRU), several layers, one or two
/// directions. PuzzleLib's RNN.

#include "backend/Backend.h"
#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {

/// The most layers an RNN stacks.
inline constexpr int64_t kMaxRnnLayers = 1024;

struct RNNOptions {
    int64_t layers = 1; ///< 1 to kMaxRnnLayers
    RnnMode mode = RnnMode::lstm;
    /// GRU only: true computes n = tanh(W_in x + b_in + r (W_hn h + b_hn)), as PyTorch and
    /// cuDNN do; false the GRU of the original paper, n = tanh(W_in x + b_in + W_hn (r h) +
    /// b_hn) (ONNX's linear_before_reset 0, Keras's reset_after=False). false runs on the CPU
    /// only: cuDNN has no such GRU (a CUDA forward is a BackendError saying so).
    bool linearBeforeReset = true;
    bool bidirectional = false;
    /// true: y holds every step; false: only the last step's output.
    bool getSequences = false;
    /// Data [N, T, C] instead of [T, N, C].
    bool batchFirst = false;
    /// Initial states as inputs after the data: h0 (and, for LSTM, c0) [layers D, N, hsize].
    /// Without, the states start at zero.
    bool initialStates = false;
    /// Final states as outputs after y: hN (and, for LSTM, cN) [layers D, N, hsize].
    bool finalStates = false;
    /// A last input, int32 lengths [N] in [1, T]: sequence n is its first lengths[n] steps.
    bool lengths = false;
    /// In training, dropout on each layer's output but the last, as the next layer reads it
    /// (probability in [0, 1); PuzzleLib's and PyTorch's `dropout`). Eval mode: none.
    float dropout = 0.0f;
    /// Seed of the dropout masks' generator; -1: drawn from the global generator when built
    /// (only when dropout > 0).
    int64_t seed = -1;
    std::string name = {};
};

/// x: [T, N, insize] ([N, T, insize] with batchFirst) -> y: [T, N, D hsize] with
/// getSequences ([N, T, D hsize] with batchFirst), else the last step's [N, D hsize]
/// (D = 2 when bidirectional: the forward direction's features first).
///
/// Inputs: x, then h0 (and c0) with `initialStates`, then lengths with `lengths`. Outputs:
/// y, then hN (and cN) with `finalStates`. States are [layers D, N, hsize] in PyTorch's
/// order (layer k, direction d at row k D + d), batch-first data or not. With lengths,
/// sequence n reads steps [0, lengths[n]) alone: its reverse direction starts at step
/// lengths[n] - 1, its final states are those after its last step, y is zero at the steps
/// past it, the last-step output (getSequences false) is y at lengths[n] - 1, and the
/// gradients of x there are zero. Padded batches give what each sequence gives alone;
/// sequences of equal length run together, so a batch of many distinct lengths runs as
/// many smaller ones.
///
/// Parameters, per layer k and direction (suffix `_reverse` for the backward one), in
/// PyTorch's names, layout and gate order (LSTM i, f, g, o; GRU r, z, n; G gates):
/// `weight_ih_l{k}` [G hsize, in_k], `weight_hh_l{k}` [G hsize, hsize], `bias_ih_l{k}` and
/// `bias_hh_l{k}` [G hsize]; in_0 = insize, in_k = D hsize after. PyTorch's `nn.LSTM` /
/// `nn.GRU` / `nn.RNN` state dicts load into them name for name. Initialised as PyTorch
/// does: U(-1/sqrt(hsize), 1/sqrt(hsize)). The GRU is the linear-before-reset one
/// (n = tanh(W_in x + b_in + r (W_hn h + b_hn)), as cuDNN and PyTorch compute it) unless
/// `linearBeforeReset` is false.
/// With `dropout` p > 0 and more than one layer, a training forward multiplies each layer's
/// output but the last by a fresh mask (0 with probability p, else 1 / (1 - p), drawn as
/// Dropout draws them) before the next layer reads it; the mask is kept for backward.
/// CPU: oneDNN's RNN primitives; CUDA: cuDNN's RNN API (one layer per call, so the masks
/// are the backend's dropout on both).
class RNN : public Module {
public:
    RNN(int64_t insize, int64_t hsize, const RNNOptions& options = {});
    std::string classname() const override { return "RNN"; }
    const RNNOptions& options() const { return options_; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// x [T, N, insize] ([N, T, insize] with batchFirst), T and N at least 1; the states
    /// and lengths the options ask for.
    void checkDataShape(const Shapes& inShapes) const override;
    void checkDataType(const std::vector<DType>& dtypes) const override;
    size_t outputCount() const override { return 1 + (options_.finalStates ? stateCount() : 0); }
    Blueprint blueprint() const override;
    /// The dropout masks' generator (checkpoints keep it); none without dropout.
    Generator* randomStream() override { return options_.dropout > 0.0f ? &gen_ : nullptr; }
    /// Outputs of their own; a training forward keeps every layer's output and states and
    /// the backend's workspace.
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override;

private:
    /// Sequences of one length, run together.
    struct Group {
        int64_t steps;
        std::vector<int64_t> members;
    };
    RnnParams paramsOf() const;
    RnnWeights weightsOf(int64_t layer) const;
    int64_t directions() const { return options_.bidirectional ? 2 : 1; }
    /// 2 for LSTM (h and c), else 1.
    int64_t stateCount() const { return options_.mode == RnnMode::lstm ? 2 : 1; }
    /// The batch split by length, longest first; empty without a lengths input. Checks the
    /// lengths' values against T.
    std::vector<Group> groupsOf(const Tensors& data, int64_t T) const;
    /// Each sequence's last step: last [N, F] <- seq [T, N, F] at step len_n - 1 (toLast),
    /// or the other way.
    static void lastSteps(const Tensor& seq, const std::vector<Group>& groups, const Tensor& last, bool toLast);
    /// One layer forward, over the whole batch or group by group.
    void layerForward(int64_t layer, const std::vector<Group>& groups, const Tensor& x, const Tensor& h0,
                      const Tensor& c0, const Tensor& y, const Tensor& hN, const Tensor& cN, bool keep);
    /// One layer backward from dy, dhN, dcN into dx, dh0, dc0 and the weight gradients.
    void layerBackward(int64_t layer, const std::vector<Group>& groups, const Tensor& dy, const Tensor& dhN,
                       const Tensor& dcN, const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const RnnWeights& g);

    int64_t insize_, hsize_;
    RNNOptions options_;
    // Kept from a training forward, per layer: its input [T, N, in], output, initial and
    // final states, the backend's workspace (the groups' workspaces one after another) and,
    // with lengths, where each group's workspace starts (int32 on the host).
    std::vector<Tensor> layerIn_, layerOut_, hN_, cN_, h0_, c0_, workspace_, wsOffsets_;
    // With dropout: the generator, and the mask applied to layer k's output (k < layers - 1)
    // in the last training forward.
    Generator gen_;
    std::vector<Tensor> masks_;
};

/// "lstm" <-> RnnMode::lstm (relu, tanh, lstm, gru). fromString throws ModuleError listing names.
std::string str(RnnMode mode);
RnnMode rnnModeFromString(const std::string& name);

} // namespace tessera
