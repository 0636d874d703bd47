// The NCCL communicator: one rank per GPU, collectives on the rank's device tensors, queued
// on the CUDA backend's stream (so they follow the kernels that wrote their operands and
// precede the ones that read the results). libnccl.so.2 is opened when the first
// communicator is made, not linked: a CUDA build runs where NCCL is not installed until
// someone asks for it.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <string>
#include <type_traits>

#include "backend/Errors.h"
#include "cuda/CudaBackend.h"
#include "distributed/Communicator.h"
#include "distributed/NcclPlugin.h"

namespace tessera {

namespace {

// The NCCL functions Tessera calls, from the library opened at run time.
struct NcclLibrary {
    decltype(&ncclGetVersion) getVersion = nullptr;
    decltype(&ncclGetUniqueId) getUniqueId = nullptr;
    decltype(&ncclCommInitRank) commInitRank = nullptr;
    decltype(&ncclCommDestroy) commDestroy = nullptr;
    decltype(&ncclCommAbort) commAbort = nullptr;
    decltype(&ncclGetErrorString) getErrorString = nullptr;
    decltype(&ncclAllReduce) allReduce = nullptr;
    decltype(&ncclBroadcast) broadcast = nullptr;
    decltype(&ncclAllGather) allGather = nullptr;
    std::string path;
    int version = 0;
};

const NcclLibrary& nccl() {
    static std::mutex mutex;
    static NcclLibrary* lib = nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    if (lib) return *lib;
    const char* env = std::getenv("TESSERA_NCCL_LIBRARY");
    const std::string path = env && *env ? env : "libnccl.so.2";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
        throw BackendError("NCCL: cannot open " + path + " (" + dlerror() +
                           "); install NCCL (pip's nvidia-nccl puts it in site-packages/nvidia/nccl/lib, which the "
                           "bundle's launchers search) or set TESSERA_NCCL_LIBRARY to its path");
    }
    auto l = std::make_unique<NcclLibrary>();
    auto resolve = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
        if (!fn) throw BackendError("NCCL: " + path + " has no " + name);
    };
    resolve(l->getVersion, "ncclGetVersion");
    resolve(l->getUniqueId, "ncclGetUniqueId");
    resolve(l->commInitRank, "ncclCommInitRank");
    resolve(l->commDestroy, "ncclCommDestroy");
    resolve(l->commAbort, "ncclCommAbort");
    resolve(l->getErrorString, "ncclGetErrorString");
    resolve(l->allReduce, "ncclAllReduce");
    resolve(l->broadcast, "ncclBroadcast");
    resolve(l->allGather, "ncclAllGather");
    l->path = path;
    l->getVersion(&l->version);
    lib = l.release();
    return *lib;
}

void check(ncclResult_t status, const char* call) {
    if (status != ncclSuccess) {
        throw BackendError(std::string("NCCL call failed: ") + call + ": " + nccl().getErrorString(status));
    }
}

int envInt(const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > (1 << 20)) {
        throw BackendError(std::string(name) + "=" + v + ": expected a non-negative whole number");
    }
    return static_cast<int>(n);
}

class NcclWorld : public Communicator {
public:
    NcclWorld(Device device, const CommunicatorPtr& bootstrap) : device_(device), bootstrap_(bootstrap) {
        if (device.isCpu()) throw BackendError("NCCL communicator: needs a CUDA device, got " + device.str());
        const NcclLibrary& lib = nccl();
        if (bootstrap) {
            rank_ = bootstrap->rank();
            size_ = bootstrap->size();
        } else {
            rank_ = envInt("TESSERA_NCCL_RANK", 0);
            size_ = envInt("TESSERA_NCCL_SIZE", 1);
            if (size_ < 1 || rank_ >= size_) {
                throw BackendError("NCCL: TESSERA_NCCL_RANK=" + std::to_string(rank_) + " is not a rank of " +
                                   "TESSERA_NCCL_SIZE=" + std::to_string(size_) + " ranks");
            }
            if (size_ > 1 && !std::getenv("NCCL_COMM_ID")) {
                throw BackendError("NCCL: " + std::to_string(size_) +
                                   " ranks need NCCL_COMM_ID=host:port, the address where rank 0 listens (the "
                                   "same on every rank), or a launch under mpirun");
            }
        }
        CudaBackend& be = cudaBackend(device.index);
        stream_ = be.stream();
        // Rank 0's id reaches the others through the bootstrap; with NCCL_COMM_ID every
        // rank makes the same id from that address itself.
        ncclUniqueId id{};
        if (!bootstrap || rank_ == 0) check(lib.getUniqueId(&id), "ncclGetUniqueId");
        if (bootstrap && size_ > 1) {
            static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
            Tensor bytes = Tensor::empty({static_cast<int64_t>(sizeof id / sizeof(float))});
            std::memcpy(bytes.raw(), &id, sizeof id);
            bootstrap->broadcast(bytes, 0);
            std::memcpy(&id, bytes.raw(), sizeof id);
        }
        TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
        check(lib.commInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
        gather_ = Tensor::empty({2 * static_cast<int64_t>(size_)}, DType::float32, device); // size_ int64 slots
    }
    ~NcclWorld() override {
        if (comm_) nccl().commDestroy(comm_);
    }
    NcclWorld(const NcclWorld&) = delete;
    NcclWorld& operator=(const NcclWorld&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Device device() const override { return device_; }

    void allReduceSum(const Tensor& t) override {
        require(t, "allReduceSum");
        if (t.dtype() != DType::float32) throw BackendError("NCCL communicator: allReduceSum takes float32 tensors");
        TESSERA_CUDA_CHECK(cudaSetDevice(device_.index));
        check(nccl().allReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), ncclFloat32, ncclSum, comm_, stream_),
              "ncclAllReduce");
    }
    void broadcast(const Tensor& t, int root) override {
        require(t, "broadcast");
        TESSERA_CUDA_CHECK(cudaSetDevice(device_.index));
        check(nccl().broadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, comm_, stream_), "ncclBroadcast");
    }
    std::vector<int64_t> allGather(int64_t value) override {
        TESSERA_CUDA_CHECK(cudaSetDevice(device_.index));
        auto* slots = static_cast<int64_t*>(gather_.raw());
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(slots + rank_, &value, sizeof value, cudaMemcpyHostToDevice, stream_));
        check(nccl().allGather(slots + rank_, slots, 1, ncclInt64, comm_, stream_), "ncclAllGather");
        std::vector<int64_t> all(static_cast<size_t>(size_));
        TESSERA_CUDA_CHECK(
            cudaMemcpyAsync(all.data(), slots, all.size() * sizeof(int64_t), cudaMemcpyDeviceToHost, stream_));
        TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return all;
    }
    std::string describe() const override {
        const int v = nccl().version;
        // NCCL's version code: major * 10000 + minor * 100 + patch (since 2.9).
        return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
               std::to_string(v % 100) + " on " + device_.str() + (bootstrap_ ? ", started by MPI" : "");
    }
    [[noreturn]] void abort(int code) override {
        if (comm_) nccl().commAbort(comm_);
        comm_ = nullptr;
        if (bootstrap_) bootstrap_->abort(code);
        std::_Exit(code);
    }

private:
    void require(const Tensor& t, const char* what) const {
        if (t.device() != device_ || !t.isPlain()) {
            throw BackendError(std::string("NCCL communicator: ") + what + " takes plain tensors on " + device_.str() +
                               ", got one on " + t.device().str());
        }
    }

    Device device_;
    CommunicatorPtr bootstrap_;
    int rank_ = 0, size_ = 1;
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    Tensor gather_;
};

// Registered while the CUDA plugin loads (distributed/NcclPlugin.h).
const bool registered = [] {
    registerNcclFactory([](Device device, const CommunicatorPtr& bootstrap) -> CommunicatorPtr {
        return std::make_shared<NcclWorld>(device, bootstrap);
    });
    return true;
}();

} // namespace

} // namespace tessera
