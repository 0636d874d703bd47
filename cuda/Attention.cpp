// The CUDA backend's fused attention: cuDNN's scaled dot-product attention operations
// (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR, cuDNN 9.17 or later) through its graph
// API. One execution plan per problem (forward or backward, with or without statistics,
// type and shapes), built on its first use and kept; a problem cuDNN refuses is remembered
// and runs in AttentionKernel's blocks of heads. On under setCudaFusedAttention.
#include "cuda/CudaBackend.h"

#include <cudnn.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/AttentionSpec.h"
#include "backend/Errors.h"
#include "cuda/Check.h"
#include "cuda/Dnn.h"

namespace tessera {

using cudnn_util::dnnType;

namespace {

// cuDNN's SDPA operations came with 9.17.
constexpr size_t kFirstSdpaVersion = 91700;

// The tensors of a graph, by unique id.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kDO, kDQ, kDK, kDV };

} // namespace

// One problem's execution plan (null where cuDNN refused it) with every descriptor it
// rests on, destroyed in reverse order of making.
struct CudaBackend::AttentionPlan {
    std::vector<cudnnBackendDescriptor_t> owned;
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t workspaceBytes = 0;
    std::string refusal; // why there is no plan

    AttentionPlan() = default;
    AttentionPlan(const AttentionPlan&) = delete;
    AttentionPlan& operator=(const AttentionPlan&) = delete;
    ~AttentionPlan() {
        for (auto it = owned.rbegin(); it != owned.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
    }
};

struct CudaBackend::AttentionPlans {
    std::mutex mutex;
    std::map<std::vector<int64_t>, std::unique_ptr<AttentionPlan>> plans;
    bool told = false; // a refusal was said (once per backend)
};

#if CUDNN_VERSION >= 91700

namespace {

// Builds a graph step by step; the first failing call's status and cuDNN's last error
// message end the building.
class GraphBuilder {
public:
    explicit GraphBuilder(CudaBackend::AttentionPlan& out) : out_(out) {}
    bool ok() const { return status_ == CUDNN_STATUS_SUCCESS; }
    std::string why() const {
        char message[512] = {0};
        cudnnGetLastErrorString(message, sizeof message);
        return std::string(what_) + ": " + cudnnGetErrorString(status_) +
               (message[0] ? std::string(" (") + message + ")" : "");
    }

    cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what) {
        cudnnBackendDescriptor_t d = nullptr;
        if (ok() && note(cudnnBackendCreateDescriptor(type, &d), what)) out_.owned.push_back(d);
        return d;
    }
    void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
             int64_t count, const void* values, const char* what) {
        if (ok()) note(cudnnBackendSetAttribute(d, name, type, count, values), what);
    }
    void link(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
              const char* what) {
        set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
    }
    void finalize(cudnnBackendDescriptor_t d, const char* what) {
        if (ok()) note(cudnnBackendFinalize(d), what);
    }
    // A finalized tensor: [B, 1, T, w] rows of one sequence each (packed), or the scale, a
    // float passed by value.
    cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, int64_t B, int64_t T, int64_t w,
                                    bool byValue = false) {
        const int64_t dims[4] = {B, 1, T, w}, strides[4] = {T * w, T * w, w, 1}, alignment = 16;
        const bool isVirtual = false;
        cudnnBackendDescriptor_t d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor descriptor");
        set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "its id");
        set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "its type");
        set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "its dims");
        set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "its strides");
        set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "its alignment");
        set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual, "its virtuality");
        if (byValue) set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue, "by value");
        finalize(d, "a tensor");
        return d;
    }
    // The graph of the one operation `op`, and the first plan that finalizes among the
    // engine configurations of cuDNN's heuristics (mode A, then its fallback list), with its
    // workspace size.
    void plan(cudnnHandle_t handle, cudnnBackendDescriptor_t op) {
        cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the graph");
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "the graph's handle");
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "the graph's operation");
        finalize(graph, "the graph");
        int64_t offered = 0;
        for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
            if (!ok() || out_.plan) break;
            cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the heuristics");
            link(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "the heuristics' graph");
            set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristics' mode");
            if (!ok() || cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) continue; // this mode has nothing
            int64_t count = 0;
            if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                         nullptr) != CUDNN_STATUS_SUCCESS) {
                continue;
            }
            std::vector<cudnnBackendDescriptor_t> configs;
            for (int64_t i = 0; i < count && ok(); ++i) {
                configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine configuration"));
            }
            if (!ok() || count == 0 ||
                cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                         &count, configs.data()) != CUDNN_STATUS_SUCCESS) {
                continue;
            }
            offered += count;
            for (int64_t i = 0; i < count && ok() && !out_.plan; ++i) {
                cudnnBackendDescriptor_t candidate = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "a plan");
                set(candidate, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "the plan's handle");
                link(candidate, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<size_t>(i)],
                     "the plan's engine configuration");
                if (ok() && cudnnBackendFinalize(candidate) == CUDNN_STATUS_SUCCESS) out_.plan = candidate;
            }
        }
        if (ok() && !out_.plan) {
            status_ = CUDNN_STATUS_NOT_SUPPORTED;
            what_ = offered == 0 ? "no engine for it on this GPU" : "no offered engine's plan finalized";
        }
        if (ok()) {
            note(cudnnBackendGetAttribute(out_.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                          nullptr, &out_.workspaceBytes),
                 "the plan's workspace size");
        }
        if (!ok()) out_.plan = nullptr;
    }

private:
    bool note(cudnnStatus_t status, const char* what) {
        if (status != CUDNN_STATUS_SUCCESS && ok()) status_ = status, what_ = what;
        return status == CUDNN_STATUS_SUCCESS;
    }
    CudaBackend::AttentionPlan& out_;
    cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
    const char* what_ = "";
};

} // namespace

// key: {backward, statistics, dtype, B, Tq, Tk, d, dv}
CudaBackend::AttentionPlan& CudaBackend::attentionPlan(const std::vector<int64_t>& key) const {
    std::call_once(attentionPlansMade_, [&] { attentionPlans_ = std::make_shared<AttentionPlans>(); });
    AttentionPlans& all = *attentionPlans_;
    std::lock_guard<std::mutex> lock(all.mutex);
    std::unique_ptr<AttentionPlan>& slot = all.plans[key];
    if (slot) return *slot;
    slot = std::make_unique<AttentionPlan>();
    AttentionPlan& out = *slot;
    const bool backward = key[0] != 0, stats = key[1] != 0;
    const auto dtype = static_cast<DType>(key[2]);
    const int64_t B = key[3], Tq = key[4], Tk = key[5], d = key[6], dv = key[7];
    if (cudnnGetVersion() < kFirstSdpaVersion) {
        out.refusal = "cuDNN " + std::to_string(cudnnGetVersion()) + " has no SDPA operation (9.17 and later have)";
    } else {
        s();
        GraphBuilder g(out);
        const cudnnDataType_t t = dnnType(dtype), f = CUDNN_DATA_FLOAT;
        const cudnnBackendDescriptor_t q = g.tensor(kQ, t, B, Tq, d), k = g.tensor(kK, t, B, Tk, d),
                                       v = g.tensor(kV, t, B, Tk, dv), o = g.tensor(kO, t, B, Tq, dv),
                                       scale = g.tensor(kScale, f, 1, 1, 1, true);
        cudnnBackendDescriptor_t op = nullptr;
        if (!backward) {
            op = g.make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "the SDPA forward operation");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q, "q");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k, "k");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v, "v");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o, "o");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, "the scale");
            if (stats) g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, g.tensor(kStats, f, B, Tq, 1), "stats");
        } else {
            op = g.make(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "the SDPA backward operation");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, q, "q");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, k, "k");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, v, "v");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, o, "o");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, scale, "the scale");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, g.tensor(kStats, f, B, Tq, 1), "stats");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, g.tensor(kDO, t, B, Tq, dv), "do");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, g.tensor(kDQ, t, B, Tq, d), "dq");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, g.tensor(kDK, t, B, Tk, d), "dk");
            g.link(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, g.tensor(kDV, t, B, Tk, dv), "dv");
        }
        g.finalize(op, "the SDPA operation");
        g.plan(cudnn_, op);
        if (!g.ok()) out.refusal = g.why();
    }
    if (!out.plan && !all.told) {
        all.told = true;
        std::fprintf(stderr,
                     "tessera: cuDNN's fused attention%s refused q [%lld, %lld, %lld], k [%lld, %lld, %lld] %s: %s; "
                     "such problems run in blocks of heads\n",
                     backward ? " backward" : "", static_cast<long long>(B), static_cast<long long>(Tq),
                     static_cast<long long>(d), static_cast<long long>(B), static_cast<long long>(Tk),
                     static_cast<long long>(d), str(dtype).c_str(), out.refusal.c_str());
    }
    return out;
}

namespace {

std::vector<int64_t> keyOf(bool backward, bool stats, DType dtype, const Shape& q, const Shape& k, const Shape& v) {
    return {backward ? 1 : 0, stats ? 1 : 0, static_cast<int64_t>(dtype), q[0], q[1], k[1], q[2], v[2]};
}

// q [B, Tq, d], k [B, Tk, d], v [B, Tk, dv] of one 16-bit type (what the forward checks of
// its arguments, less their memory).
bool fusable(const Shape& q, const Shape& k, const Shape& v, DType dtype) {
    return is16Bit(dtype) && q.rank() == 3 && k.rank() == 3 && v.rank() == 3 && k[0] == q[0] && v[0] == q[0] &&
           k[2] == q[2] && v[1] == k[1] && q.numel() > 0 && k.numel() > 0 && v.numel() > 0;
}

// Only softmax(q k^T scale) v: cuDNN's SDPA operation as built here takes no causal mask
// or dropout.
bool plain(const AttentionSpec& spec) { return !spec.causal && spec.dropout == 0.0f && spec.maskShape.rank() == 0; }

bool packed16(const Tensor& t, DType dtype) {
    return t.dtype() == dtype && t.layout() == Layout::plain && !t.device().isCpu();
}

} // namespace

bool CudaBackend::fusesAttention(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v, DType dtype,
                                 bool backward) const {
    if (!fusedAttention_ || !plain(spec) || !fusable(q, k, v, dtype)) return false;
    if (!backward) return attentionPlan(keyOf(false, false, dtype, q, k, v)).plan != nullptr;
    return attentionPlan(keyOf(false, true, dtype, q, k, v)).plan != nullptr &&
           attentionPlan(keyOf(true, true, dtype, q, k, v)).plan != nullptr;
}

int64_t CudaBackend::fusedAttentionScratchBytes(const AttentionSpec& spec, const Shape& q, const Shape& k,
                                                const Shape& v, DType dtype, bool backward, bool stats) const {
    if (!fusedAttention_ || !plain(spec) || !fusable(q, k, v, dtype)) return 0;
    return attentionPlan(keyOf(backward, stats || backward, dtype, q, k, v)).workspaceBytes;
}

// Runs `plan` on the tensors of `uids` at `ptrs` (the scale, by value, among them).
void CudaBackend::runAttentionPlan(const AttentionPlan& plan, const std::vector<int64_t>& uids,
                                   const std::vector<void*>& ptrs, bool zeroWorkspace) {
    void* work = plan.workspaceBytes > 0 ? workspace(static_cast<size_t>(plan.workspaceBytes)) : nullptr;
    if (zeroWorkspace && work)
        TESSERA_CUDA_CHECK(cudaMemsetAsync(work, 0, static_cast<size_t>(plan.workspaceBytes), s()));
    cudnnBackendDescriptor_t pack = nullptr;
    TESSERA_CUDA_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    const std::unique_ptr<void, void (*)(void*)> owner(
        pack, [](void* p) { cudnnBackendDestroyDescriptor(static_cast<cudnnBackendDescriptor_t>(p)); });
    TESSERA_CUDA_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                                static_cast<int64_t>(uids.size()), uids.data()));
    TESSERA_CUDA_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                                static_cast<int64_t>(ptrs.size()), ptrs.data()));
    TESSERA_CUDA_CHECK(
        cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &work));
    TESSERA_CUDA_CHECK(cudnnBackendFinalize(pack));
    s();
    TESSERA_CUDA_CHECK(cudnnBackendExecute(cudnn_, plan.plan, pack));
}

bool CudaBackend::fusedAttentionForward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& y, const Tensor& stats) {
    const DType t = q.dtype();
    if (!fusedAttention_ || !plain(spec) || !fusable(q.shape(), k.shape(), v.shape(), t)) return false;
    float scale = spec.scale;
    if (!packed16(q, t) || !packed16(k, t) || !packed16(v, t) || !packed16(y, t) ||
        y.shape() != Shape{q.shape()[0], q.shape()[1], v.shape()[2]}) {
        return false;
    }
    const bool training = stats.defined();
    if (training && (stats.dtype() != DType::float32 || stats.shape() != Shape{q.shape()[0], q.shape()[1]})) {
        return false;
    }
    const AttentionPlan& plan = attentionPlan(keyOf(false, training, t, q.shape(), k.shape(), v.shape()));
    if (!plan.plan) return false;
    std::vector<int64_t> uids = {kQ, kK, kV, kO, kScale};
    std::vector<void*> ptrs = {q.raw(), k.raw(), v.raw(), y.raw(), &scale};
    if (training) uids.push_back(kStats), ptrs.push_back(stats.raw());
    runAttentionPlan(plan, uids, ptrs, false);
    return true;
}

bool CudaBackend::fusedAttentionBackward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& y, const Tensor& dy, const Tensor& stats, const Tensor& dq,
                                         const Tensor& dk, const Tensor& dv) {
    const DType t = q.dtype();
    if (!fusedAttention_ || !plain(spec) || !fusable(q.shape(), k.shape(), v.shape(), t) || !stats.defined()) {
        return false;
    }
    float scale = spec.scale;
    for (const Tensor* x : {&q, &k, &v, &y, &dy, &dq, &dk, &dv}) {
        if (!packed16(*x, t)) return false;
    }
    if (y.shape() != dy.shape() || dq.shape() != q.shape() || dk.shape() != k.shape() || dv.shape() != v.shape()) {
        return false;
    }
    const AttentionPlan& plan = attentionPlan(keyOf(true, true, t, q.shape(), k.shape(), v.shape()));
    if (!plan.plan) return false;
    runAttentionPlan(plan, {kQ, kK, kV, kO, kScale, kStats, kDO, kDQ, kDK, kDV},
                     {q.raw(), k.raw(), v.raw(), y.raw(), &scale, stats.raw(), dy.raw(), dq.raw(), dk.raw(), dv.raw()},
                     true);
    return true;
}

#else // cuDNN headers before 9.17: no SDPA operation to build on

bool CudaBackend::fusesAttention(const AttentionSpec&, const Shape&, const Shape&, const Shape&, DType, bool) const {
    return false;
}
int64_t CudaBackend::fusedAttentionScratchBytes(const AttentionSpec&, const Shape&, const Shape&, const Shape&, DType,
                                                bool, bool) const {
    return 0;
}
bool CudaBackend::fusedAttentionForward(const AttentionSpec&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&) {
    return false;
}
bool CudaBackend::fusedAttentionBackward(const AttentionSpec&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&) {
    return false;
}

#endif

} // namespace tessera
