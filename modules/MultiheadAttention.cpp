#include "modules/MultiheadAttention.h"

#include <cmath>

#include "backend/Backend.h"
#include "modules/AxisUtil.h"
#include "modules/Init.h"

namespace tessera {

namespace {
AttentionOptions kernelOptions(const MultiheadAttentionOptions& o) {
    return {.causal = o.causal, .scale = 0.0f, .dropout = o.dropout, .seed = 0, .name = {}};
}

// [N, T, H, d] <-> [N, H, T, d]
Tensor swap12(const Tensor& x) {
    const Shape& s = x.shape();
    Tensor y = Tensor::empty({s[0], s[2], s[1], s[3]}, DType::float32, x.device());
    backendOf(x).permute(x, {0, 2, 1, 3}, y);
    return y;
}
} // namespace

using axis::swap01;

MultiheadAttention::MultiheadAttention(int64_t embedDim, int64_t numHeads, const MultiheadAttentionOptions& options)
    : Module(options.name), embedDim_(embedDim), numHeads_(numHeads), options_(options),
      kernel_(kernelOptions(options)), gen_(resolveSeed(options.seed)) {
    if (embedDim <= 0 || numHeads <= 0 || embedDim % numHeads != 0) {
        throw ModuleError("MultiheadAttention: embedDim and numHeads must be positive and numHeads must divide "
                          "embedDim, got " +
                          std::to_string(embedDim) + " and " + std::to_string(numHeads));
    }
    if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
        throw ModuleError("MultiheadAttention: dropout must be in [0, 1), got " + std::to_string(options.dropout));
    }
    const int64_t E = embedDim;
    Tensor inW = Tensor::empty({3 * E, E});
    initTensor(inW, InitScheme::xavierUniform, E, 3 * E);
    setVar("in_proj_weight", Variable::of(inW));
    if (options.bias) setVar("in_proj_bias", Variable::of(Tensor::zeros({3 * E})));
    Tensor outW = Tensor::empty({E, E});
    initTensor(outW, InitScheme::uniform, E, E, 1.0f / std::sqrt(static_cast<float>(E)));
    setVar("out_proj_weight", Variable::of(outW));
    if (options.bias) setVar("out_proj_bias", Variable::of(Tensor::zeros({E})));
}

size_t MultiheadAttention::sequenceCount(size_t inputs) const {
    const size_t masks = (options_.keyPaddingMask ? 1 : 0) + (options_.attnMask ? 1 : 0);
    return inputs >= masks ? inputs - masks : 0;
}

void MultiheadAttention::checkDataShape(const Shapes& inShapes) const {
    const size_t masks = (options_.keyPaddingMask ? 1 : 0) + (options_.attnMask ? 1 : 0);
    const size_t seqs = sequenceCount(inShapes.size());
    if (inShapes.size() < masks || (seqs != 1 && seqs != 3)) {
        throw shapeError("expects [x] or [query, key, value]" +
                         std::string(options_.keyPaddingMask ? ", then key_padding_mask" : "") +
                         (options_.attnMask ? ", then attn_mask" : "") + ": " + std::to_string(1 + masks) + " or " +
                         std::to_string(3 + masks) + " inputs, got " + std::to_string(inShapes.size()));
    }
    const std::string layout = options_.batchFirst ? "[N, T, " : "[T, N, ";
    const size_t nDim = options_.batchFirst ? 0 : 1, tDim = 1 - nDim;
    for (size_t i = 0; i < seqs; ++i) {
        const Shape& s = inShapes[i];
        if (s.rank() != 3 || s[2] != embedDim_) {
            throw shapeError("expects " +
                             std::string(seqs == 1 ? "x"
                                         : i == 0  ? "query"
                                         : i == 1  ? "key"
                                                   : "value") +
                             " " + layout + std::to_string(embedDim_) + "], got " + s.str());
        }
    }
    const Shape& q = inShapes[0];
    const Shape& k = inShapes[seqs == 3 ? 1 : 0];
    if (seqs == 3) {
        const Shape& v = inShapes[2];
        if (k[nDim] != q[nDim] || v[nDim] != q[nDim] || v[tDim] != k[tDim]) {
            throw shapeError("expects one batch size for query, key and value and one length for key and value, got " +
                             q.str() + ", " + k.str() + ", " + v.str());
        }
    }
    const int64_t N = q[nDim], L = q[tDim], S = k[tDim];
    size_t at = seqs;
    if (options_.keyPaddingMask) {
        const Shape& m = inShapes[at++];
        if (m != Shape{N, S}) {
            throw shapeError("expects key_padding_mask [N, S] = " + Shape{N, S}.str() + ", got " + m.str());
        }
    }
    if (options_.attnMask) {
        const Shape& m = inShapes[at];
        if (m != Shape{L, S} && m != Shape{N * numHeads_, L, S}) {
            throw shapeError("expects attn_mask [L, S] = " + Shape{L, S}.str() +
                             " or [N * numHeads, L, S] = " + Shape{N * numHeads_, L, S}.str() + ", got " + m.str());
        }
    }
}

Shapes MultiheadAttention::gradShapeFrom(const Shapes&) const { return lastInShapes("gradShapeFrom"); }

// Sequences of the compute type, where the backend carries it; masks in float32.
bool MultiheadAttention::takes16Bit(const Tensors& data) const {
    const size_t seqs = sequenceCount(data.size());
    for (size_t i = 0; i < data.size(); ++i) {
        if (is16Bit(data[i].dtype()) && (i >= seqs || data[i].dtype() != computeDType())) return false;
    }
    return backendCarries(data);
}

std::vector<DType> MultiheadAttention::outputDTypes(const Shapes&, const std::vector<DType>&, Device device) const {
    return {backendFor(device).gemmOutputDType(computeDType())};
}

Tensor MultiheadAttention::rowsOf(const Tensor& x) const {
    const Tensor b = options_.batchFirst ? x : swap01(x);
    return b.reshape({b.numel() / embedDim_, embedDim_});
}

Tensors MultiheadAttention::updateData(const Tensors& data) {
    Tensors in;
    for (const Tensor& t : data) in.push_back(t.plain());
    const size_t seqs = sequenceCount(in.size());
    const int64_t E = embedDim_, H = numHeads_, d = E / H;
    const size_t nDim = options_.batchFirst ? 0 : 1;
    const int64_t N = in[0].shape()[nDim], L = in[0].shape()[1 - nDim], S = in[seqs == 3 ? 1 : 0].shape()[1 - nDim];
    Backend& be = backendOf(in[0]);
    const Tensor& W = getVar("in_proj_weight")->data;
    // q, k, v = x_i W_i^T + b_i, as heads [N, H, T, d]. One at a time: each projection's
    // output is still in cache when it is permuted (one [N T, 3E] product and one permute
    // were slower: tools/bench/results/cpu-attention-backward-memory-emerald-rapids.txt).
    Tensor heads[3];
    Tensor rows[3];
    for (int i = 0; i < 3; ++i) {
        rows[i] = seqs == 3 || i == 0 ? rowsOf(in[seqs == 3 ? static_cast<size_t>(i) : 0]) : rows[0];
        Tensor p = Tensor::empty({rows[i].shape()[0], E}, DType::float32, in[0].device()); // the kernel's float32
        be.gemmWeights(false, true, 1.0f, rows[i], W.slice(i * E, (i + 1) * E),
                       options_.bias ? getVar("in_proj_bias")->data.slice(i * E, (i + 1) * E) : Tensor(), 0.0f, p,
                       computeDType(), nullptr);
        heads[i] = swap12(p.reshape({N, i == 0 ? L : S, H, d}));
    }
    q_ = heads[0];
    k_ = heads[1];
    v_ = heads[2];
    // the masks as one additive mask the kernel broadcasts over [N, H, L, S]
    mask_ = Tensor();
    size_t at = seqs;
    Tensor padding, attn;
    if (options_.keyPaddingMask) padding = in[at++].reshape({N, 1, 1, S});
    if (options_.attnMask) attn = in[at].shape().rank() == 3 ? in[at].reshape({N, H, L, S}) : in[at];
    if (padding.defined() && attn.defined()) {
        mask_ = Tensor::empty({N, attn.shape().rank() == 4 ? H : 1, L, S}, DType::float32, in[0].device());
        be.binaryBroadcast(BinaryOp::add, padding, attn, mask_);
    } else {
        mask_ = padding.defined() ? padding : attn;
    }
    Tensors kin{q_, k_, v_};
    if (mask_.defined()) kin.push_back(mask_);
    Tensor y;
    stream_ = Tensor();
    fused_ = AttentionKernel::Fused{};
    if (isTrain() && options_.dropout > 0.0f) {
        const AttentionKernel::Stream st{gen_.seed(), gen_.offset()};
        uint64_t used = 0;
        y = kernel_.forward(kin, &st, &used, computeDType(), &fused_);
        gen_.advance(used);
        stream_ = AttentionKernel::keep(st);
    } else {
        y = kernel_.forward(kin, nullptr, nullptr, computeDType(), isTrain() ? &fused_ : nullptr);
    }
    joined_ = swap12(y).reshape({N * L, E});
    Tensor out = Tensor::empty({N * L, E}, be.gemmOutputDType(computeDType()), in[0].device());
    be.gemmWeights(false, true, 1.0f, joined_, getVar("out_proj_weight")->data,
                   options_.bias ? getVar("out_proj_bias")->data : Tensor(), 0.0f, out, computeDType(), nullptr);
    out = out.reshape({N, L, E});
    if (!isTrain()) { // nothing to keep for a backward
        q_ = k_ = v_ = mask_ = joined_ = fused_.y = fused_.stats = Tensor();
    }
    return {options_.batchFirst ? out : swap01(out)};
}

Tensors MultiheadAttention::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

void MultiheadAttention::accGradParams(const Tensors& grad, float scale, float momentum) {
    backwardFrom(grad, true, false, scale, momentum);
}

// dJ = dy Wo (dWo = dy^T J, dbo = sum dy); the kernel's dq, dk, dv (and dmask); per
// projection i: dx_i = dP_i W_i, dW_i = dP_i^T x_i, db_i = sum dP_i (self-attention: the
// three at once, dx = sum_i dP_i W_i).
Tensors MultiheadAttention::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale,
                                         float momentum) {
    if (!q_.defined()) throw moduleError("backward needs a forward in train mode (it keeps the projected heads)");
    const Tensors& inData = inDataList();
    const size_t seqs = sequenceCount(inData.size());
    const int64_t E = embedDim_, H = numHeads_, d = E / H;
    const int64_t N = q_.shape()[0], L = q_.shape()[2], S = k_.shape()[2];
    const bool params = updParamGrads && isTrain();
    const Tensor dy = rowsOf(grad[0].plain());
    Backend& be = backendOf(dy);
    if (params) {
        be.gemm(true, false, scale, dy, joined_, momentum, getVar("out_proj_weight")->grad, computeDType());
        if (options_.bias) be.sumRows(dy, scale, momentum, getVar("out_proj_bias")->grad);
    }
    Tensor dJ = Tensor::empty({N * L, E}, DType::float32, dy.device());
    be.gemm(false, false, 1.0f, dy, getVar("out_proj_weight")->data, 0.0f, dJ, computeDType());
    dJ = swap12(dJ.reshape({N, L, H, d})); // as heads; the rows are released before the kernel runs
    Tensors kin{q_, k_, v_};
    if (mask_.defined()) kin.push_back(mask_);
    const AttentionKernel::Stream st = stream_.defined() ? AttentionKernel::kept(stream_) : AttentionKernel::Stream{};
    Tensors dk = kernel_.backward(kin, dJ, stream_.defined() ? &st : nullptr, &fused_);
    dJ = Tensor();
    const Tensor& W = getVar("in_proj_weight")->data;
    Tensors dx(seqs);
    if (seqs == 1) {
        // Self-attention: the three projections' gradients side by side, [N L, 3E], so that
        // dx = dP W, dW = dP^T x and db are one product each (dx written once, in x's dtype).
        const int64_t rows = N * L;
        const Tensor dP = Tensor::empty({rows, 3 * E}, DType::float32, dy.device());
        for (int64_t i = 0; i < 3; ++i) {
            be.copyStrided(swap12(dk[static_cast<size_t>(i)]), 0, E, dP, i * E, 3 * E, rows, E);
            dk[static_cast<size_t>(i)] = Tensor();
        }
        if (params) {
            be.gemm(true, false, scale, dP, rowsOf(inData[0].plain()), momentum, getVar("in_proj_weight")->grad,
                    computeDType());
            if (options_.bias) be.sumRows(dP, scale, momentum, getVar("in_proj_bias")->grad);
        }
        if (updGrad) {
            dx[0] = Tensor::empty({rows, E}, inData[0].dtype(), dy.device());
            be.gemm(false, false, 1.0f, dP, W, 0.0f, dx[0], computeDType());
        }
    } else {
        for (int i = 0; i < 3; ++i) {
            const Tensor dP = swap12(dk[static_cast<size_t>(i)]).reshape({N * (i == 0 ? L : S), E});
            dk[static_cast<size_t>(i)] = Tensor();
            const Tensor& x = inData[static_cast<size_t>(i)];
            if (params) {
                be.gemm(true, false, scale, dP, rowsOf(x.plain()), momentum,
                        getVar("in_proj_weight")->grad.slice(i * E, (i + 1) * E), computeDType());
                if (options_.bias) {
                    be.sumRows(dP, scale, momentum, getVar("in_proj_bias")->grad.slice(i * E, (i + 1) * E));
                }
            }
            if (!updGrad) continue;
            dx[static_cast<size_t>(i)] = Tensor::empty({dP.shape()[0], E}, x.dtype(), dy.device());
            be.gemm(false, false, 1.0f, dP, W.slice(i * E, (i + 1) * E), 0.0f, dx[static_cast<size_t>(i)],
                    computeDType());
        }
    }
    if (!updGrad) return {};
    Tensors out;
    for (const Tensor& g : dx) {
        const Tensor b = g.reshape({N, g.shape()[0] / N, E});
        out.push_back(options_.batchFirst ? b : swap01(b));
    }
    // the masks' gradients: the added mask's, summed over what each was broadcast along
    size_t at = seqs;
    if (options_.keyPaddingMask) {
        Tensor g = Tensor::empty({N, 1, 1, S}, DType::float32, dy.device());
        be.sumTo(dk[3], 1.0f, g);
        out.push_back(g.reshape({N, S}));
        ++at;
    }
    if (options_.attnMask) {
        const Shape& ms = inData[at].shape();
        Tensor g = Tensor::empty(ms.rank() == 3 ? Shape{N, H, L, S} : ms, DType::float32, dy.device());
        be.sumTo(dk[3], 1.0f, g);
        out.push_back(g.reshape(ms));
    }
    return out;
}

// Kept in training: the heads q, k, v and the joined heads (float32), and the mask the
// kernel added where two were combined. Scratch (allocated inside the calls, see
// updateData and backwardFrom): the heads, the kernel's output and blocks of scores (or a
// fused kernel's scratch and 16-bit copies, which keeps its statistics and a GPU's its
// 16-bit output); in
// backward the heads' gradients, the joined heads' and the projections'. Batch-first
// inputs: time-major ones are copied once more each way, which is not counted.
MemoryUse MultiheadAttention::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                        Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    const Backend& be = backendFor(device);
    auto B = [&](int64_t bytes) { return be.allocationBytes(bytes); };
    const size_t seqs = sequenceCount(inShapes.size());
    const int64_t E = embedDim_, f = static_cast<int64_t>(sizeof(float));
    const int64_t q = inShapes[0].numel(), kv = inShapes[seqs == 3 ? 1 : 0].numel();
    const int64_t N = inShapes[0][options_.batchFirst ? 0 : 1], L = q / (N * E), S = kv / (N * E);
    int64_t mask = 0; // the combined mask, [N, H or 1, L, S]
    if (options_.keyPaddingMask && options_.attnMask) {
        const Shape& a = inShapes[seqs + 1];
        mask = a.rank() == 3 ? a.numel() : N * a.numel();
    }
    const int64_t hq = B(q * f), hk = B(kv * f), block = B(AttentionKernel::blockBytes(be, N * numHeads_, L, S));
    // The kernel's scratch, in blocks of scores or fused (AttentionKernel::fuses)
    const int64_t d = E / numHeads_;
    const bool dropout = train && options_.dropout > 0.0f;
    Shapes kernelIn{Shape{N, numHeads_, L, d}, Shape{N, numHeads_, S, d}, Shape{N, numHeads_, S, d}};
    if (options_.keyPaddingMask || options_.attnMask) { // the mask the kernel gets (updateData)
        const Shape* a = options_.attnMask ? &inShapes[seqs + (options_.keyPaddingMask ? 1 : 0)] : nullptr;
        if (!a) {
            kernelIn.push_back(Shape{N, 1, 1, S});
        } else if (options_.keyPaddingMask) {
            kernelIn.push_back(Shape{N, a->rank() == 3 ? numHeads_ : 1, L, S});
        } else {
            kernelIn.push_back(a->rank() == 3 ? Shape{N, numHeads_, L, S} : *a);
        }
    }
    const bool fusedForward = kernel_.fuses(kernelIn, dropout, computeDType(), device);
    const bool fusedBackward = train && fusedForward && kernel_.fuses(kernelIn, dropout, computeDType(), device, true);
    const int64_t kernelForward =
        fusedForward ? kernel_.fusedScratchBytes(be, kernelIn, computeDType(), dropout, false, fusedBackward)
                     : 2 * block;
    const int64_t kernelBackward = fusedBackward
                                       ? kernel_.fusedScratchBytes(be, kernelIn, computeDType(), dropout, true, true)
                                       : (dropout ? 5 : 3) * block;
    const int64_t out = B(q * static_cast<int64_t>(sizeOf(be.gemmOutputDType(computeDType()))));
    const int64_t heads = hq + 2 * hk + (mask > 0 ? B(mask * f) : 0);
    // Forward, at its fullest: the last projection's output beside the heads; the kernel's
    // output and two blocks; the kernel's output, the joined heads and the output.
    const int64_t forward = std::max({hq + 3 * hk, heads + hq + kernelForward, heads + 2 * hq + out});
    const int64_t kept = train ? heads + hq : 0;
    if (train) use.keptBytes += f * (2 * q + 2 * kv + mask);
    if (fusedBackward) use.keptBytes += AttentionKernel::fusedKeptBytes(be, kernelIn, computeDType());
    if (train && options_.dropout > 0.0f && device.isCpu()) use.keptBytes += 4 * f; // the dropout stream (host)
    use.forwardScratchBytes = std::max<int64_t>(0, forward - out - kept);
    if (!train) return use;
    // Backward: dJ and the heads' gradients with three blocks (five with dropout) and the
    // added mask's gradient; then, dJ released, the projections' gradients side by side
    // (self-attention, each head's gradient released once copied) or one at a time (each
    // released once used), beside the input gradients.
    int64_t dmask = 0, maskGrads = 0;
    size_t at = seqs;
    if (options_.keyPaddingMask) maskGrads += B(N * S * f), ++at;
    if (options_.attnMask) maskGrads += B(inShapes[at].numel() * f);
    if (options_.keyPaddingMask || options_.attnMask) dmask = mask > 0 ? B(mask * f) : maskGrads;
    int64_t dheads = hq + 2 * hk, dx = 0, peak = hq + dheads + dmask + kernelBackward;
    if (seqs == 1) {
        dx = B(q * static_cast<int64_t>(sizeOf(DType::float32)));
        const int64_t dP = B(3 * q * f);
        peak = std::max({peak, dheads + dmask + dP + hq, dmask + dP + dx});
    } else {
        for (size_t i = 0; i < 3; ++i) {
            const int64_t rows = i == 0 ? hq : hk;
            peak = std::max(peak, dheads + dmask + dx + rows); // dP_i, then dx_i in dk_i's place
            dheads -= rows;
            dx += rows;
        }
    }
    peak = std::max(peak, dmask + dx + maskGrads);
    use.backwardScratchBytes = std::max<int64_t>(0, peak - dx - maskGrads);
    return use;
}

Blueprint MultiheadAttention::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("embedDim", embedDim_);
    bp.scheme.emplace_back("numHeads", numHeads_);
    bp.scheme.emplace_back("dropout", static_cast<double>(options_.dropout));
    bp.scheme.emplace_back("bias", options_.bias);
    bp.scheme.emplace_back("batchFirst", options_.batchFirst);
    bp.scheme.emplace_back("causal", options_.causal);
    bp.scheme.emplace_back("keyPaddingMask", options_.keyPaddingMask);
    bp.scheme.emplace_back("attnMask", options_.attnMask);
    return bp;
}

} // namespace tessera
