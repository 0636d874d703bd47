#pragma once
/// \file RNN: recurrent layers (vanilla relu/tanh, LSTM, GRU), several layers, one or two
/// directions. PuzzleLib's RNN.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

struct RNNOptions {
    int64_t layers = 1;
    RnnMode mode = RnnMode::lstm;
    bool bidirectional = false;
    /// true: y holds every step; false: only the last step's output.
    bool getSequences = false;
    /// Data [N, T, C] instead of [T, N, C].
    bool batchFirst = false;
    std::string name = {};
};

/// x: [T, N, insize] ([N, T, insize] with batchFirst) -> y: [T, N, D hsize] with
/// getSequences ([N, T, D hsize] with batchFirst), else the last step's [N, D hsize]
/// (D = 2 when bidirectional: the forward direction's features first). The initial states
/// are zero.
///
/// Parameters, per layer k and direction (suffix `_reverse` for the backward one), in
/// PyTorch's names, layout and gate order (LSTM i, f, g, o; GRU r, z, n; G gates):
/// `weight_ih_l{k}` [G hsize, in_k], `weight_hh_l{k}` [G hsize, hsize], `bias_ih_l{k}` and
/// `bias_hh_l{k}` [G hsize]; in_0 = insize, in_k = D hsize after. PyTorch's `nn.LSTM` /
/// `nn.GRU` / `nn.RNN` state dicts load into them name for name. Initialised as PyTorch
/// does: U(-1/sqrt(hsize), 1/sqrt(hsize)). The GRU is the linear-before-reset one
/// (n = tanh(W_in x + b_in + r (W_hn h + b_hn)), as cuDNN and PyTorch compute it).
/// CPU: oneDNN's RNN primitives; CUDA: not yet (a BackendError says so).
class RNN : public Module {
public:
    RNN(int64_t insize, int64_t hsize, const RNNOptions& options = {});
    std::string classname() const override { return "RNN"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input [T, N, insize] ([N, T, insize] with batchFirst), T and N at least 1.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
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
    RnnParams paramsOf() const;
    RnnWeights weightsOf(int64_t layer) const;
    int64_t directions() const { return options_.bidirectional ? 2 : 1; }

    int64_t insize_, hsize_;
    RNNOptions options_;
    // Kept from a training forward, per layer: its input [T, N, in], output, final states,
    // the zero initial states and oneDNN's workspace.
    std::vector<Tensor> layerIn_, layerOut_, hN_, cN_, h0_, c0_, workspace_;
};

/// "lstm" <-> RnnMode::lstm (relu, tanh, lstm, gru). fromString throws ModuleError listing names.
std::string str(RnnMode mode);
RnnMode rnnModeFromString(const std::string& name);

} // namespace tessera
