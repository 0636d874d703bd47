// Recurrent layers through oneDNN's RNN primitives: vanilla RNN (relu, tanh), LSTM and
// GRU (linear-before-reset or not), one layer and one or two directions per call
// (bidirectional layers concatenate their outputs). Tessera keeps the weights in PyTorch's
// layout ([G H, I] per direction: oneDNN's ldgoi) and gate order; GRU's gates are reordered
// to oneDNN's (z, r, n) and its biases combined into lbr's four rows (b_hn on its own, inside
// the reset) or, without lbr, the plain GRU's three (every gate's two biases summed). The primitives are
// cached per shape; the weights are reordered into the primitives' formats each call.
#include <cstring>

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

namespace {

struct RnnDims {
    int64_t T, N, I, H, D, G;
};

RnnDims dimsOf(const RnnParams& p, const Shape& s) {
    if (s.rank() != 3) throw ShapeError("CpuBackend::rnn: expects x [T, N, I], got " + s.str());
    return {s[0], s[1], s[2], p.hidden, p.directions, rnnGates(p.mode)};
}

memory::desc f32(const std::vector<int64_t>& dims, tag t) { return memory::desc(dims, memory::data_type::f32, t); }
memory::desc anyOf(const std::vector<int64_t>& dims) { return memory::desc(dims, memory::data_type::f32, tag::any); }

dnnl::rnn_direction directionOf(const RnnParams& p) {
    return p.directions == 2 ? dnnl::rnn_direction::bidirectional_concat
                             : dnnl::rnn_direction::unidirectional_left2right;
}

// The user-side descriptors of one layer.
struct RnnDescs {
    memory::desc srcLayer, srcIter, srcIterC, wLayer, wIter, bias, dstLayer, dstIter, dstIterC;
};

// Whether the cell is the linear-before-reset GRU.
bool lbr(const RnnParams& p) { return p.mode == RnnMode::gru && p.linearBeforeReset; }

// The bias rows per direction: lbr GRU keeps b_hn apart from b_in (a fourth row).
int64_t biasRows(const RnnParams& p, const RnnDims& d) { return lbr(p) ? 4 : d.G; }

RnnDescs userDescs(const RnnParams& p, const RnnDims& d) {
    const RnnMode mode = p.mode;
    RnnDescs u;
    u.srcLayer = f32({d.T, d.N, d.I}, tag::tnc);
    u.srcIter = f32({1, d.D, d.N, d.H}, tag::ldnc);
    u.srcIterC = mode == RnnMode::lstm ? f32({1, d.D, d.N, d.H}, tag::ldnc) : memory::desc();
    u.wLayer = f32({1, d.D, d.I, d.G, d.H}, tag::ldgoi);
    u.wIter = f32({1, d.D, d.H, d.G, d.H}, tag::ldgoi);
    u.bias = f32({1, d.D, biasRows(p, d), d.H}, tag::ldgo);
    u.dstLayer = f32({d.T, d.N, d.D * d.H}, tag::tnc);
    u.dstIter = u.srcIter;
    u.dstIterC = u.srcIterC;
    return u;
}

std::vector<int64_t> keyOf(const RnnParams& p, const RnnDims& d, bool training) {
    return {static_cast<int64_t>(p.mode), p.linearBeforeReset ? 1 : 0, d.T, d.N, d.I, d.H, d.D, training ? 1 : 0};
}

// Weights with "any" format, for the primitives to pick.
RnnDescs primDescs(const RnnParams& p, const RnnDims& d) {
    RnnDescs u = userDescs(p, d);
    u.wLayer = anyOf({1, d.D, d.I, d.G, d.H});
    u.wIter = anyOf({1, d.D, d.H, d.G, d.H});
    return u;
}

dnnl::algorithm activationOf(RnnMode mode) {
    return mode == RnnMode::relu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_tanh;
}

struct FwdEntry {
    dnnl::primitive_desc pd;
    dnnl::primitive prim;
};
using BwdEntry = FwdEntry;

// A GRU's primitives (Fwd, Bwd: gru_ or lbr_gru_forward / _backward), which take the same arguments.
template <class Fwd> FwdEntry gruForward(dnnl::prop_kind prop, dnnl::rnn_direction dir, const RnnDescs& m) {
    typename Fwd::desc desc(prop, dir, m.srcLayer, m.srcIter, m.wLayer, m.wIter, m.bias, m.dstLayer, m.dstIter);
    typename Fwd::primitive_desc pd(desc, engine());
    return FwdEntry{pd, Fwd(pd)};
}

template <class Fwd, class Bwd> BwdEntry gruBackward(dnnl::rnn_direction dir, const RnnDescs& m, const FwdEntry& f) {
    typename Bwd::desc desc(dnnl::prop_kind::backward, dir, m.srcLayer, m.srcIter, m.wLayer, m.wIter, m.bias,
                            m.dstLayer, m.dstIter, m.srcLayer, m.srcIter, m.wLayer, m.wIter, m.bias, m.dstLayer,
                            m.dstIter);
    typename Bwd::primitive_desc pd(desc, engine(),
                                    typename Fwd::primitive_desc(const_cast<dnnl_primitive_desc_t>(f.pd.get())));
    return BwdEntry{pd, Bwd(pd)};
}

const FwdEntry& forwardEntry(const RnnParams& p, const RnnDims& d, bool training) {
    static thread_local PrimitiveCache<FwdEntry> cache;
    return cache.get(keyOf(p, d, training), [&] {
        return checkDnnl("rnn_forward", [&] {
            const auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
            const RnnDescs m = primDescs(p, d);
            const auto dir = directionOf(p);
            switch (p.mode) {
            case RnnMode::lstm: {
                dnnl::lstm_forward::desc desc(prop, dir, m.srcLayer, m.srcIter, m.srcIterC, m.wLayer, m.wIter, m.bias,
                                              m.dstLayer, m.dstIter, m.dstIterC);
                dnnl::lstm_forward::primitive_desc pd(desc, engine());
                return FwdEntry{pd, dnnl::lstm_forward(pd)};
            }
            case RnnMode::gru:
                return lbr(p) ? gruForward<dnnl::lbr_gru_forward>(prop, dir, m)
                              : gruForward<dnnl::gru_forward>(prop, dir, m);
            default: {
                dnnl::vanilla_rnn_forward::desc desc(prop, activationOf(p.mode), dir, m.srcLayer, m.srcIter, m.wLayer,
                                                     m.wIter, m.bias, m.dstLayer, m.dstIter);
                dnnl::vanilla_rnn_forward::primitive_desc pd(desc, engine());
                return FwdEntry{pd, dnnl::vanilla_rnn_forward(pd)};
            }
            }
        });
    });
}

memory::desc argDesc(const dnnl::primitive_desc& pd, int arg) { return pd.query_md(dnnl::query::exec_arg_md, arg); }

// GRU's gate g of PyTorch's order (r, z, n) sits at oneDNN's position (z, r, n).
int64_t onednnGate(RnnMode mode, int64_t g) {
    if (mode != RnnMode::gru) return g;
    return g == 0 ? 1 : g == 1 ? 0 : 2;
}

// The layer's weights packed in ldgoi (and ldgo for the biases), in oneDNN's gate order.
struct Packed {
    std::vector<float> wLayer, wIter, bias;
};

Packed pack(const RnnParams& p, const RnnDims& d, const RnnWeights& w) {
    Packed k;
    k.wLayer.resize(static_cast<size_t>(d.D * d.G * d.H * d.I));
    k.wIter.resize(static_cast<size_t>(d.D * d.G * d.H * d.H));
    const int64_t rows = biasRows(p, d);
    k.bias.assign(static_cast<size_t>(d.D * rows * d.H), 0.0f);
    for (int64_t dir = 0; dir < d.D; ++dir) {
        const float* wi = w.wIh.at(static_cast<size_t>(dir)).data<float>();
        const float* wh = w.wHh.at(static_cast<size_t>(dir)).data<float>();
        const float* bi = w.bIh.at(static_cast<size_t>(dir)).data<float>();
        const float* bh = w.bHh.at(static_cast<size_t>(dir)).data<float>();
        for (int64_t g = 0; g < d.G; ++g) {
            const int64_t to = onednnGate(p.mode, g);
            std::memcpy(&k.wLayer[static_cast<size_t>(((dir * d.G + to) * d.H) * d.I)], wi + g * d.H * d.I,
                        static_cast<size_t>(d.H * d.I) * sizeof(float));
            std::memcpy(&k.wIter[static_cast<size_t>(((dir * d.G + to) * d.H) * d.H)], wh + g * d.H * d.H,
                        static_cast<size_t>(d.H * d.H) * sizeof(float));
            float* b = &k.bias[static_cast<size_t>((dir * rows + to) * d.H)];
            const bool split = lbr(p) && g == 2; // lbr GRU's n gate: b_in here, b_hn in row 3
            for (int64_t h = 0; h < d.H; ++h) b[h] = bi[g * d.H + h] + (split ? 0.0f : bh[g * d.H + h]);
            if (split) {
                float* bn = &k.bias[static_cast<size_t>((dir * rows + 3) * d.H)];
                for (int64_t h = 0; h < d.H; ++h) bn[h] = bh[g * d.H + h];
            }
        }
    }
    return k;
}

// The packed gradients back in PyTorch's layout: a combined bias gradient goes to both biases.
void unpack(const RnnParams& p, const RnnDims& d, const Packed& k, const RnnWeights& g) {
    const int64_t rows = biasRows(p, d);
    for (int64_t dir = 0; dir < d.D; ++dir) {
        float* wi = g.wIh.at(static_cast<size_t>(dir)).data<float>();
        float* wh = g.wHh.at(static_cast<size_t>(dir)).data<float>();
        float* bi = g.bIh.at(static_cast<size_t>(dir)).data<float>();
        float* bh = g.bHh.at(static_cast<size_t>(dir)).data<float>();
        for (int64_t gate = 0; gate < d.G; ++gate) {
            const int64_t from = onednnGate(p.mode, gate);
            std::memcpy(wi + gate * d.H * d.I, &k.wLayer[static_cast<size_t>(((dir * d.G + from) * d.H) * d.I)],
                        static_cast<size_t>(d.H * d.I) * sizeof(float));
            std::memcpy(wh + gate * d.H * d.H, &k.wIter[static_cast<size_t>(((dir * d.G + from) * d.H) * d.H)],
                        static_cast<size_t>(d.H * d.H) * sizeof(float));
            const float* b = &k.bias[static_cast<size_t>((dir * rows + from) * d.H)];
            const bool split = lbr(p) && gate == 2;
            const float* bn = split ? &k.bias[static_cast<size_t>((dir * rows + 3) * d.H)] : b;
            for (int64_t h = 0; h < d.H; ++h) {
                bi[gate * d.H + h] = b[h];
                bh[gate * d.H + h] = bn[h];
            }
        }
    }
}

// `user` (in the user descriptor) as a memory of the primitive's descriptor, reordered when they differ.
memory toPrim(const memory::desc& prim, const memory::desc& user, void* data) {
    memory u(user, engine(), data);
    if (prim == user) return u;
    memory m(prim, engine());
    dnnl::reorder(u, m).execute(stream(), u, m);
    return m;
}

// The arguments forward and backward share: the data, states, weights (in the
// primitive's formats) and outputs of the forward.
std::unordered_map<int, memory> forwardArgs(const RnnParams& p, const dnnl::primitive_desc& pd, const RnnDescs& u,
                                            Packed& k, const Tensor& x, const Tensor& h0, const Tensor& c0,
                                            const Tensor& y, const Tensor& hN, const Tensor& cN) {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC_LAYER, wrap(u.srcLayer, x.raw())},
        {DNNL_ARG_SRC_ITER, wrap(u.srcIter, h0.raw())},
        {DNNL_ARG_WEIGHTS_LAYER, toPrim(argDesc(pd, DNNL_ARG_WEIGHTS_LAYER), u.wLayer, k.wLayer.data())},
        {DNNL_ARG_WEIGHTS_ITER, toPrim(argDesc(pd, DNNL_ARG_WEIGHTS_ITER), u.wIter, k.wIter.data())},
        {DNNL_ARG_BIAS, wrap(u.bias, k.bias.data())},
        {DNNL_ARG_DST_LAYER, wrap(u.dstLayer, y.raw())},
        {DNNL_ARG_DST_ITER, wrap(u.dstIter, hN.raw())}};
    if (p.mode == RnnMode::lstm) {
        args[DNNL_ARG_SRC_ITER_C] = wrap(u.srcIterC, c0.raw());
        args[DNNL_ARG_DST_ITER_C] = wrap(u.dstIterC, cN.raw());
    }
    return args;
}

void checkDims(const RnnParams& p, const RnnDims& d, const RnnWeights& w) {
    if (p.directions != 1 && p.directions != 2) throw BackendError("CpuBackend::rnn: directions must be 1 or 2");
    if (w.wIh.size() != static_cast<size_t>(d.D) || w.wHh.size() != w.wIh.size() || w.bIh.size() != w.wIh.size() ||
        w.bHh.size() != w.wIh.size()) {
        throw BackendError("CpuBackend::rnn: one set of weights per direction expected");
    }
    for (size_t k = 0; k < w.wIh.size(); ++k) {
        if (w.wIh[k].shape() != Shape{d.G * d.H, d.I} || w.wHh[k].shape() != Shape{d.G * d.H, d.H} ||
            w.bIh[k].numel() != d.G * d.H || w.bHh[k].numel() != d.G * d.H) {
            throw ShapeError("CpuBackend::rnn: weights " + w.wIh[k].shape().str() + ", " + w.wHh[k].shape().str() +
                             " do not fit input size " + std::to_string(d.I) + " and hidden size " +
                             std::to_string(d.H));
        }
    }
}

} // namespace

void CpuBackend::rnnForward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0,
                            const Tensor& c0, bool training, const Tensor& y, const Tensor& hN, const Tensor& cN,
                            Tensor& workspace) {
    const RnnDims d = dimsOf(p, x.shape());
    checkDims(p, d, w);
    const FwdEntry& e = forwardEntry(p, d, training);
    const RnnDescs u = userDescs(p, d);
    Packed k = pack(p, d, w);
    checkDnnl("rnn_forward::execute", [&] {
        std::unordered_map<int, memory> args = forwardArgs(p, e.pd, u, k, x, h0, c0, y, hN, cN);
        if (training) {
            const memory::desc ws = argDesc(e.pd, DNNL_ARG_WORKSPACE);
            workspace = Tensor::empty({static_cast<int64_t>((ws.get_size() + 3) / 4) + 1}, DType::int32, x.device());
            args[DNNL_ARG_WORKSPACE] = wrap(ws, workspace.raw());
        }
        e.prim.execute(stream(), args);
        stream().wait();
    });
}

int64_t CpuBackend::rnnWorkspaceBytes(const RnnParams& p, const Shape& x) {
    const RnnDims d = dimsOf(p, x);
    const FwdEntry& e = forwardEntry(p, d, true);
    const auto bytes = static_cast<int64_t>(argDesc(e.pd, DNNL_ARG_WORKSPACE).get_size());
    return allocationBytes(((bytes + 3) / 4 + 1) * 4);
}

void CpuBackend::rnnBackward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0,
                             const Tensor& c0, const Tensor& y, const Tensor& hN, const Tensor& cN, const Tensor& dy,
                             const Tensor& dhN, const Tensor& dcN, const Tensor& workspace, const Tensor& dx,
                             const Tensor& dh0, const Tensor& dc0, const RnnWeights& g) {
    const RnnDims d = dimsOf(p, x.shape());
    checkDims(p, d, w);
    checkDims(p, d, g);
    static thread_local PrimitiveCache<BwdEntry> cache;
    const BwdEntry& e = cache.get(keyOf(p, d, true), [&] {
        const FwdEntry& f = forwardEntry(p, d, true);
        return checkDnnl("rnn_backward", [&] {
            const RnnDescs m = primDescs(p, d);
            const auto dir = directionOf(p);
            const auto bwd = dnnl::prop_kind::backward;
            switch (p.mode) {
            case RnnMode::lstm: {
                dnnl::lstm_backward::desc desc(bwd, dir, m.srcLayer, m.srcIter, m.srcIterC, m.wLayer, m.wIter, m.bias,
                                               m.dstLayer, m.dstIter, m.dstIterC, m.srcLayer, m.srcIter, m.srcIterC,
                                               m.wLayer, m.wIter, m.bias, m.dstLayer, m.dstIter, m.dstIterC);
                dnnl::lstm_backward::primitive_desc pd(
                    desc, engine(), dnnl::lstm_forward::primitive_desc(const_cast<dnnl_primitive_desc_t>(f.pd.get())));
                return BwdEntry{pd, dnnl::lstm_backward(pd)};
            }
            case RnnMode::gru:
                return lbr(p) ? gruBackward<dnnl::lbr_gru_forward, dnnl::lbr_gru_backward>(dir, m, f)
                              : gruBackward<dnnl::gru_forward, dnnl::gru_backward>(dir, m, f);
            default: {
                dnnl::vanilla_rnn_backward::desc desc(bwd, activationOf(p.mode), dir, m.srcLayer, m.srcIter, m.wLayer,
                                                      m.wIter, m.bias, m.dstLayer, m.dstIter, m.srcLayer, m.srcIter,
                                                      m.wLayer, m.wIter, m.bias, m.dstLayer, m.dstIter);
                dnnl::vanilla_rnn_backward::primitive_desc pd(
                    desc, engine(),
                    dnnl::vanilla_rnn_forward::primitive_desc(const_cast<dnnl_primitive_desc_t>(f.pd.get())));
                return BwdEntry{pd, dnnl::vanilla_rnn_backward(pd)};
            }
            }
        });
    });
    const RnnDescs u = userDescs(p, d);
    Packed k = pack(p, d, w);
    Packed dk{std::vector<float>(k.wLayer.size(), 0.0f), std::vector<float>(k.wIter.size(), 0.0f),
              std::vector<float>(k.bias.size(), 0.0f)};
    checkDnnl("rnn_backward::execute", [&] {
        const memory::desc dwl = argDesc(e.pd, DNNL_ARG_DIFF_WEIGHTS_LAYER);
        const memory::desc dwi = argDesc(e.pd, DNNL_ARG_DIFF_WEIGHTS_ITER);
        memory dWLayer(dwl, engine()), dWIter(dwi, engine());
        std::memset(dWLayer.get_data_handle(), 0, dwl.get_size()); // the primitive accumulates into them
        std::memset(dWIter.get_data_handle(), 0, dwi.get_size());
        std::unordered_map<int, memory> args = forwardArgs(p, e.pd, u, k, x, h0, c0, y, hN, cN);
        args.insert({{DNNL_ARG_WORKSPACE, wrap(argDesc(e.pd, DNNL_ARG_WORKSPACE), workspace.raw())},
                     {DNNL_ARG_DIFF_SRC_LAYER, wrap(u.srcLayer, dx.raw())},
                     {DNNL_ARG_DIFF_SRC_ITER, wrap(u.srcIter, dh0.raw())},
                     {DNNL_ARG_DIFF_WEIGHTS_LAYER, dWLayer},
                     {DNNL_ARG_DIFF_WEIGHTS_ITER, dWIter},
                     {DNNL_ARG_DIFF_BIAS, wrap(u.bias, dk.bias.data())},
                     {DNNL_ARG_DIFF_DST_LAYER, wrap(u.dstLayer, dy.raw())},
                     {DNNL_ARG_DIFF_DST_ITER, wrap(u.dstIter, dhN.raw())}});
        if (p.mode == RnnMode::lstm) {
            args[DNNL_ARG_DIFF_SRC_ITER_C] = wrap(u.srcIterC, dc0.raw());
            args[DNNL_ARG_DIFF_DST_ITER_C] = wrap(u.dstIterC, dcN.raw());
        }
        e.prim.execute(stream(), args);
        // The weight gradients into the user layout (ldgoi).
        memory userWL(u.wLayer, engine(), dk.wLayer.data()), userWI(u.wIter, engine(), dk.wIter.data());
        dnnl::reorder(dWLayer, userWL).execute(stream(), dWLayer, userWL);
        dnnl::reorder(dWIter, userWI).execute(stream(), dWIter, userWI);
        stream().wait();
    });
    unpack(p, d, dk, g);
}

} // namespace tessera
