#include "modules/Attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/AttentionSpec.h"
#include "backend/Backend.h"
#include "modules/BatchUtil.h"

namespace tessera {

using batch::matrices;
using batch::matrix;

AttentionKernel::AttentionKernel(const AttentionOptions& options) : options_(options) {
    if (!(options.scale >= 0.0f) || std::isinf(options.scale)) {
        throw ModuleError("attention: scale must be 0 (1 / sqrt(d)) or positive, got " + std::to_string(options.scale));
    }
    if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
        throw ModuleError("attention: dropout must be in [0, 1), got " + std::to_string(options.dropout));
    }
}

ScaledDotProductAttention::ScaledDotProductAttention(const AttentionOptions& options)
    : Module(options.name), kernel_(options), gen_(resolveSeed(options.seed)) {}

void ScaledDotProductAttention::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.size() != 3 && inShapes.size() != 4) {
        throw shapeError("expects 3 input tensors (q, k, v) or 4 (and a mask), got " + std::to_string(inShapes.size()));
    }
    const Shape &q = inShapes[0], &k = inShapes[1], &v = inShapes[2];
    const size_t r = q.rank();
    auto lead = [](const Shape& s) { return std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2); };
    if (r < 2 || k.rank() != r || v.rank() != r || lead(k) != lead(q) || lead(v) != lead(q)) {
        throw shapeError("expects q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] with the same leading dims, got " +
                         q.str() + ", " + k.str() + ", " + v.str());
    }
    if (k[r - 1] != q[r - 1] || v[r - 2] != k[r - 2]) {
        throw shapeError("q and k need one d and k and v one Tk: got q " + q.str() + ", k " + k.str() + ", v " +
                         v.str());
    }
    if (inShapes.size() == 4) {
        const Shape& m = inShapes[3];
        std::string why;
        std::vector<int64_t> broadcast = m.rank() >= 2 ? batch::of(q, m, why, false).dims : std::vector<int64_t>{};
        const int64_t rows = m.rank() >= 2 ? m[m.rank() - 2] : 0;
        if (m.rank() < 2 || m.rank() > r || (rows != q[r - 2] && rows != 1) || m[m.rank() - 1] != k[r - 2] ||
            !why.empty() || broadcast != lead(q)) {
            throw shapeError("expects a mask [..., " + std::to_string(q[r - 2]) + " or 1, " + std::to_string(k[r - 2]) +
                             "] whose leading dims broadcast to q's " + q.str() + ", got " + m.str());
        }
    }
}

Shapes ScaledDotProductAttention::dataShapeFrom(const Shapes& inShapes) const {
    std::vector<int64_t> d = inShapes[0].dims();
    d.back() = inShapes[2][inShapes[2].rank() - 1];
    return {Shape(d)};
}

Shapes ScaledDotProductAttention::gradShapeFrom(const Shapes&) const { return lastInShapes("gradShapeFrom"); }

float AttentionKernel::scaleFor(int64_t d) const {
    return options_.scale > 0.0f ? options_.scale : 1.0f / std::sqrt(static_cast<float>(d));
}

std::vector<int64_t> AttentionKernel::maskOfHead(const Tensors& in) {
    if (in.size() != 4) return {};
    std::string why;
    return batch::of(in[0].shape(), in[3].shape(), why).ofB;
}

// Heads h0 .. h0 + g - 1: their probabilities P = softmax(q k^T * scale + mask) into p
// [g, Tq, Tk], the scores in `scores` on the way.
void AttentionKernel::probabilities(const Tensors& in, int64_t h0, int64_t g, const std::vector<int64_t>& maskOf,
                                    const Tensor& scores, const Tensor& p) const {
    const Tensor q = matrices(in[0]).slice(h0, h0 + g), k = matrices(in[1]).slice(h0, h0 + g);
    const int64_t Tq = q.shape()[1], Tk = k.shape()[1];
    Backend& be = backendOf(q);
    be.gemmBatched(false, true, scaleFor(q.shape()[2]), q, k, 0.0f, scores);
    if (in.size() == 4) { // each head's mask matrix (a row for every query, or one for all)
        const Tensor m3 = matrices(in[3]);
        for (int64_t i = 0; i < g; ++i) {
            const Tensor s = matrix(scores, i);
            be.binaryBroadcast(BinaryOp::add, s, matrix(m3, maskOf[static_cast<size_t>(h0 + i)]), s);
        }
    }
    if (options_.causal) be.binaryBroadcast(BinaryOp::add, scores, causalMask(Tq, Tk, p.device()), scores);
    be.softmaxForward(scores.reshape({g * Tq, Tk}), p.reshape({g * Tq, Tk}));
}

Tensor AttentionKernel::causalTable(int64_t Tq, int64_t Tk) {
    std::vector<float> m(static_cast<size_t>(Tq * Tk), 0.0f);
    for (int64_t i = 0; i < Tq; ++i) {
        for (int64_t j = i + 1; j < Tk; ++j)
            m[static_cast<size_t>(i * Tk + j)] = -std::numeric_limits<float>::infinity();
    }
    return Tensor::fromVector({Tq, Tk}, m);
}

const Tensor& AttentionKernel::causalMask(int64_t Tq, int64_t Tk, Device device) const {
    if (!causalMask_.defined() || causalMask_.shape() != Shape{Tq, Tk} || causalMask_.device() != device) {
        causalMask_ = causalTable(Tq, Tk).to(device);
    }
    return causalMask_;
}

Tensor AttentionKernel::keep(const Stream& st) {
    const std::vector<int32_t> w = {static_cast<int32_t>(st.seed & 0xffffffffu), static_cast<int32_t>(st.seed >> 32),
                                    static_cast<int32_t>(st.at & 0xffffffffu), static_cast<int32_t>(st.at >> 32)};
    return Tensor::fromVector({4}, w);
}

AttentionKernel::Stream AttentionKernel::kept(const Tensor& t) {
    const std::vector<int32_t> w = t.toVector<int32_t>();
    auto word = [&](size_t i) { return static_cast<uint64_t>(static_cast<uint32_t>(w[i])); };
    return {word(0) | word(1) << 32, word(2) | word(3) << 32};
}

namespace {
// Heads go through in blocks whose [g, Tq, Tk] scores take at most the backend's
// attentionBlockBytes each (a few such buffers exist at once): the memory stays bounded
// whatever the batch, and short sequences still make products big enough to run fast.
int64_t headsPerBlock(const Backend& be, int64_t heads, int64_t Tq, int64_t Tk) {
    const int64_t one = std::max<int64_t>(1, Tq * Tk * static_cast<int64_t>(sizeof(float)));
    return std::clamp<int64_t>(be.attentionBlockBytes() / one, 1, std::max<int64_t>(heads, 1));
}
} // namespace

int64_t AttentionKernel::blockBytes(const Backend& be, int64_t heads, int64_t Tq, int64_t Tk) {
    return headsPerBlock(be, heads, Tq, Tk) * Tq * Tk * static_cast<int64_t>(sizeof(float));
}

namespace {
// [heads, T, d] of a [..., T, d] shape.
Shape matrixShape(const Shape& s) {
    const size_t r = s.rank();
    return Shape{s.numel() / (s[r - 2] * s[r - 1]), s[r - 2], s[r - 1]};
}
} // namespace

AttentionSpec AttentionKernel::specFor(const Shapes& in, const Stream* stream) const {
    AttentionSpec spec{.scale = scaleFor(in[0][in[0].rank() - 1]), .causal = options_.causal};
    if (stream) spec.dropout = options_.dropout, spec.seed = stream->seed, spec.first = stream->at;
    if (in.size() == 4) spec.maskShape = matrixShape(in[3]);
    return spec;
}

DType AttentionKernel::fusedType(DType compute, Device device) {
    return is16Bit(compute) && !device.isCpu() ? compute : DType::float32;
}

bool AttentionKernel::fuses(const Shapes& in, bool dropout, DType compute, Device device, bool backward) const {
    if (in.size() != 3 && in.size() != 4) return false;
    const Stream any;
    return backendFor(device).fusesAttention(specFor(in, dropout ? &any : nullptr), matrixShape(in[0]),
                                             matrixShape(in[1]), matrixShape(in[2]), fusedType(compute, device),
                                             backward);
}

int64_t AttentionKernel::fusedScratchBytes(const Backend& be, const Shapes& in, DType compute, bool dropout,
                                           bool backward, bool stats) const {
    const DType t = fusedType(compute, be.device());
    const Shape q = matrixShape(in[0]), k = matrixShape(in[1]), v = matrixShape(in[2]);
    const Shape y{q[0], q[1], v[2]};
    const Stream any;
    auto bytes = [&](const Shape& s) { return be.allocationBytes(s.numel() * static_cast<int64_t>(sizeOf(t))); };
    // In 16 bits, forward: q, k, v, and y where it is not kept; backward: q, k, v, dy, dq,
    // dk, dv. In float32 the kernel reads and writes the float32 tensors themselves.
    const int64_t copies = t == DType::float32 ? 0
                                               : bytes(q) + bytes(k) + bytes(v) +
                                                     (backward ? bytes(y) + bytes(q) + bytes(k) + bytes(v)
                                                      : stats  ? 0
                                                               : bytes(y));
    return copies + be.allocationBytes(be.fusedAttentionScratchBytes(specFor(in, dropout ? &any : nullptr), q, k, v, t,
                                                                     backward, stats));
}

int64_t AttentionKernel::fusedKeptBytes(const Backend& be, const Shapes& in, DType compute) {
    const DType t = fusedType(compute, be.device());
    const Shape q = matrixShape(in[0]), v = matrixShape(in[2]);
    const int64_t stats = be.allocationBytes(q[0] * q[1] * static_cast<int64_t>(sizeof(float)));
    return keepsOutput(be.device()) ? be.allocationBytes(q[0] * q[1] * v[2] * static_cast<int64_t>(sizeOf(t))) + stats
                                    : stats;
}

bool AttentionKernel::keepsOutput(Device device) { return !device.isCpu(); }

// For each block of heads: P = softmax(q k^T s + mask), with dropout P <- P * mask, y = P v.
// The dropout masks are drawn head after head in order, whatever the blocks. Fused where
// the backend takes it (fuses).
Tensor AttentionKernel::forward(const Tensors& in, const Stream* stream, uint64_t* used, DType compute,
                                Fused* fused) const {
    const Shape& qs = in[0].shape();
    if (fused) *fused = Fused{};
    Shapes shapes;
    for (const Tensor& t : in) shapes.push_back(t.shape());
    if (fuses(shapes, stream != nullptr, compute, in[0].device())) {
        const bool keep = fused && fuses(shapes, stream != nullptr, compute, in[0].device(), true); // for its backward
        const DType t = fusedType(compute, in[0].device());
        const Tensor q = matrices(in[0]).convertedTo(t), k = matrices(in[1]).convertedTo(t),
                     v = matrices(in[2]).convertedTo(t);
        Tensor y = Tensor::empty({q.shape()[0], q.shape()[1], v.shape()[2]}, t, q.device());
        Tensor stats = keep ? Tensor::empty({q.shape()[0], q.shape()[1]}, DType::float32, q.device()) : Tensor();
        AttentionSpec spec = specFor(shapes, stream);
        if (in.size() == 4) spec.mask = matrices(in[3]).convertedTo(DType::float32), spec.maskOf = maskOfHead(in);
        if (backendOf(q).fusedAttentionForward(spec, q, k, v, y, stats)) {
            if (keep) *fused = Fused{keepsOutput(q.device()) ? y : Tensor(), stats};
            if (used) *used = stream ? static_cast<uint64_t>(q.shape()[0] * q.shape()[1] * k.shape()[1]) : 0;
            std::vector<int64_t> yd = qs.dims();
            yd.back() = v.shape()[2];
            return y.convertedTo(DType::float32).reshape(Shape(yd));
        }
    }
    const int64_t Tq = qs[qs.rank() - 2], Tk = in[1].shape()[qs.rank() - 2];
    std::vector<int64_t> yd = qs.dims();
    yd.back() = in[2].shape()[qs.rank() - 1];
    Tensor y = Tensor::empty(Shape(yd), DType::float32, in[0].device());
    const Tensor y3 = matrices(y), v3 = matrices(in[2]);
    Backend& be = backendOf(y);
    const int64_t heads = y3.shape()[0], G = headsPerBlock(be, heads, Tq, Tk);
    Tensor scores = Tensor::empty({G, Tq, Tk}, DType::float32, in[0].device());
    Tensor p = Tensor::empty({G, Tq, Tk}, DType::float32, in[0].device());
    const std::vector<int64_t> masks = maskOfHead(in);
    Generator gen(stream ? stream->seed : 0);
    if (stream) gen.advance(stream->at);
    for (int64_t h0 = 0; h0 < heads; h0 += G) {
        const int64_t g = std::min(G, heads - h0);
        const Tensor s = scores.slice(0, g), pb = p.slice(0, g);
        probabilities(in, h0, g, masks, s, pb);
        if (stream) be.dropoutForward(pb, options_.dropout, gen, s, pb); // s <- the mask
        be.gemmBatched(false, false, 1.0f, pb, v3.slice(h0, h0 + g), 0.0f, y3.slice(h0, h0 + g));
    }
    if (used) *used = stream ? gen.offset() - stream->at : 0;
    return y;
}

// Per block of heads, P recomputed (and with dropout Pd = P * mask): dv = Pd^T dy,
// dPd = dy v^T, dP = dPd * mask, dS = P (dP - rowsum(P dP)) (softmax's backward),
// dq = s dS k, dk = s dS^T q, dmask = dS summed to the mask's shape.
Tensors AttentionKernel::backward(const Tensors& in, const Tensor& dyIn, const Stream* stream,
                                  const Fused* fused) const {
    if (fused && fused->stats.defined()) {
        const DType t = fused->y.defined() ? fused->y.dtype() : DType::float32;
        const Tensor q = matrices(in[0]).convertedTo(t), k = matrices(in[1]).convertedTo(t),
                     v = matrices(in[2]).convertedTo(t), dy = matrices(dyIn).convertedTo(t);
        Tensor dq = Tensor::empty(q.shape(), t, q.device()), dk = Tensor::empty(k.shape(), t, q.device()),
               dv = Tensor::empty(v.shape(), t, q.device());
        Shapes shapes;
        for (const Tensor& x : in) shapes.push_back(x.shape());
        AttentionSpec spec = specFor(shapes, stream);
        Tensor dmask; // the mask's gradient, as the scores' (the mask was added to them)
        if (in.size() == 4) {
            dmask = Tensor::empty(in[3].shape(), DType::float32, q.device());
            spec.mask = matrices(in[3]).convertedTo(DType::float32), spec.maskOf = maskOfHead(in);
            spec.dmask = matrices(dmask);
        }
        if (backendOf(q).fusedAttentionBackward(spec, q, k, v, fused->y, dy, fused->stats, dq, dk, dv)) {
            Tensors out{dq.convertedTo(DType::float32).reshape(in[0].shape()),
                        dk.convertedTo(DType::float32).reshape(in[1].shape()),
                        dv.convertedTo(DType::float32).reshape(in[2].shape())};
            if (dmask.defined()) out.push_back(dmask);
            return out;
        }
    }
    const Tensor dy3 = matrices(dyIn);
    const Tensor q3 = matrices(in[0]), k3 = matrices(in[1]), v3 = matrices(in[2]);
    const int64_t Tq = q3.shape()[1], Tk = k3.shape()[1], heads = q3.shape()[0];
    const Device device = in[0].device();
    Backend& be = backendFor(device);
    const int64_t G = headsPerBlock(be, heads, Tq, Tk);
    const float s = scaleFor(q3.shape()[2]);
    Tensor dq = Tensor::empty(in[0].shape(), DType::float32, device);
    Tensor dk = Tensor::empty(in[1].shape(), DType::float32, device);
    Tensor dv = Tensor::empty(in[2].shape(), DType::float32, device);
    const Tensor dq3 = matrices(dq), dk3 = matrices(dk), dv3 = matrices(dv);
    Tensor p = Tensor::empty({G, Tq, Tk}, DType::float32, device);
    Tensor dp = Tensor::empty({G, Tq, Tk}, DType::float32, device);
    Tensor ds = Tensor::empty({G, Tq, Tk}, DType::float32, device);
    Tensor dropped, mask; // with dropout: P * mask and the mask
    if (stream) {
        dropped = Tensor::empty({G, Tq, Tk}, DType::float32, device);
        mask = Tensor::empty({G, Tq, Tk}, DType::float32, device);
    }
    Tensor dmask, dmask3; // a float mask's gradient: the scores', as the mask was added to them
    const std::vector<int64_t> masks = maskOfHead(in);
    if (in.size() == 4) {
        dmask = Tensor::zeros(in[3].shape(), DType::float32, device);
        dmask3 = matrices(dmask);
    }
    Generator gen(stream ? stream->seed : 0);
    if (stream) gen.advance(stream->at);
    for (int64_t h0 = 0; h0 < heads; h0 += G) {
        const int64_t g = std::min(G, heads - h0), h1 = h0 + g;
        const Tensor pb = p.slice(0, g), dpb = dp.slice(0, g), dsb = ds.slice(0, g);
        probabilities(in, h0, g, masks, dsb, pb); // ds holds the scores until softmax's backward overwrites them
        const Tensor dyb = dy3.slice(h0, h1), vb = v3.slice(h0, h1);
        if (stream) {
            const Tensor db = dropped.slice(0, g), mb = mask.slice(0, g);
            be.dropoutForward(pb, options_.dropout, gen, mb, db);
            be.gemmBatched(true, false, 1.0f, db, dyb, 0.0f, dv3.slice(h0, h1));
            be.gemmBatched(false, true, 1.0f, dyb, vb, 0.0f, db); // dPd
            be.binaryBroadcast(BinaryOp::mul, db, mb, dpb);
        } else {
            be.gemmBatched(true, false, 1.0f, pb, dyb, 0.0f, dv3.slice(h0, h1));
            be.gemmBatched(false, true, 1.0f, dyb, vb, 0.0f, dpb);
        }
        be.softmaxBackward(pb.reshape({g * Tq, Tk}), dpb.reshape({g * Tq, Tk}), dsb.reshape({g * Tq, Tk}));
        be.gemmBatched(false, false, s, dsb, k3.slice(h0, h1), 0.0f, dq3.slice(h0, h1));
        be.gemmBatched(true, false, s, dsb, q3.slice(h0, h1), 0.0f, dk3.slice(h0, h1));
        if (dmask.defined()) { // the scores' gradient, summed over what the mask was broadcast along
            for (int64_t i = 0; i < g; ++i) {
                const Tensor dm = matrix(dmask3, masks[static_cast<size_t>(h0 + i)]);
                if (dm.shape()[0] == Tq) {
                    be.axpby(1.0f, matrix(dsb, i), 1.0f, dm);
                } else {
                    be.sumRows(matrix(dsb, i), 1.0f, 1.0f, dm.reshape({Tk}));
                }
            }
        }
    }
    Tensors out{dq, dk, dv};
    if (dmask.defined()) out.push_back(dmask);
    return out;
}

Tensors ScaledDotProductAttention::updateData(const Tensors& data) {
    Tensors in;
    for (const Tensor& t : data) in.push_back(t.plain());
    stream_ = Tensor();
    fused_ = AttentionKernel::Fused{};
    if (!isTrain() || options().dropout == 0.0f) {
        return {kernel_.forward(in, nullptr, nullptr, computeDType(), isTrain() ? &fused_ : nullptr)};
    }
    const AttentionKernel::Stream st{gen_.seed(), gen_.offset()};
    uint64_t used = 0;
    Tensor y = kernel_.forward(in, &st, &used, computeDType(), &fused_);
    gen_.advance(used);
    stream_ = AttentionKernel::keep(st);
    return {y};
}

Tensors ScaledDotProductAttention::updateGrad(const Tensors& grad) {
    Tensors in;
    for (const Tensor& t : inDataList()) in.push_back(t.plain());
    if (!stream_.defined()) return kernel_.backward(in, grad[0].plain(), nullptr, &fused_);
    const AttentionKernel::Stream st = AttentionKernel::kept(stream_);
    return kernel_.backward(in, grad[0].plain(), &st, &fused_);
}

// Forward: the scores and probabilities of a block of heads; backward: three such blocks
// (five with dropout); with dropout, the stream kept (a host tensor).
MemoryUse ScaledDotProductAttention::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                               Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    const Backend& be = backendFor(device);
    const Shape& q = inShapes[0];
    const int64_t Tq = q[q.rank() - 2], Tk = inShapes[1][q.rank() - 2], heads = q.numel() / (Tq * q[q.rank() - 1]);
    const int64_t block = be.allocationBytes(AttentionKernel::blockBytes(be, heads, Tq, Tk));
    const bool dropout = train && options().dropout > 0.0f;
    // Fused (AttentionKernel::fuses): a fused backward reads each row's statistics (and on a
    // GPU the 16-bit y), kept from the forward; an unfused one recomputes blocks of scores.
    const bool fusedForward = kernel_.fuses(inShapes, dropout, computeDType(), device);
    const bool fusedBackward = train && fusedForward && kernel_.fuses(inShapes, dropout, computeDType(), device, true);
    use.forwardScratchBytes =
        fusedForward ? kernel_.fusedScratchBytes(be, inShapes, computeDType(), dropout, false, fusedBackward)
                     : 2 * block;
    use.backwardScratchBytes = fusedBackward
                                   ? kernel_.fusedScratchBytes(be, inShapes, computeDType(), dropout, true, true)
                                   : (dropout ? 5 : 3) * block;
    if (fusedBackward) use.keptBytes += AttentionKernel::fusedKeptBytes(be, inShapes, computeDType());
    if (dropout && device.isCpu()) use.keptBytes += 4 * static_cast<int64_t>(sizeof(int32_t));
    return use;
}

Blueprint ScaledDotProductAttention::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("causal", options().causal);
    bp.scheme.emplace_back("scale", static_cast<double>(options().scale));
    bp.scheme.emplace_back("dropout", static_cast<double>(options().dropout));
    return bp;
}

} // namespace tessera
