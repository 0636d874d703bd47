// The MPI communicator (MPI_COMM_WORLD), or, in a build without MPI, the error saying so;
// and how a process tells it was started for data-parallel training.
#include <cstdlib>
#include <mutex>

#include "backend/Errors.h"
#include "distributed/Communicator.h"

#ifdef TESSERA_HAVE_MPI
#include <mpi.h>
#endif

namespace tessera {

bool ncclRequestedByEnvironment() { return std::getenv("TESSERA_NCCL_SIZE") != nullptr; }

bool launchedByMpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
        if (std::getenv(v)) return true;
    }
    return false;
}

#ifdef TESSERA_HAVE_MPI

bool mpiBuilt() { return true; }

namespace {

void check(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(code, text, &n);
    throw BackendError(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<size_t>(n)));
}

void requireHostFloat(const Tensor& t, const char* what) {
    if (!t.device().isCpu() || !t.isPlain()) {
        throw BackendError(std::string("MPI communicator: ") + what + " takes plain host tensors, got one on " +
                           t.device().str());
    }
}

class MpiWorld : public Communicator {
public:
    MpiWorld() {
        int initialised = 0;
        MPI_Initialized(&initialised);
        if (!initialised) {
            int provided = 0;
            check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
            if (provided < MPI_THREAD_SERIALIZED) {
                throw BackendError("MPI: this MPI library gives thread level " + std::to_string(provided) +
                                   "; Tessera needs MPI_THREAD_SERIALIZED");
            }
            std::atexit([] {
                int finalised = 0;
                MPI_Finalized(&finalised);
                if (!finalised) MPI_Finalize();
            });
        }
        // Errors come back as codes (check throws them) instead of ending the job at once.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int n = 0;
        MPI_Get_library_version(version, &n);
        std::string v(version, static_cast<size_t>(n));
        library_ = v.substr(0, v.find_first_of(",\n"));
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void allReduceSum(const Tensor& t) override {
        requireHostFloat(t, "allReduceSum");
        if (t.dtype() != DType::float32) throw BackendError("MPI communicator: allReduceSum takes float32 tensors");
        float* p = t.data<float>();
        for (int64_t at = 0; at < t.numel(); at += kChunk) { // MPI counts are int
            const auto n = static_cast<int>(std::min<int64_t>(kChunk, t.numel() - at));
            check(MPI_Allreduce(MPI_IN_PLACE, p + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        }
    }
    void broadcast(const Tensor& t, int root) override {
        requireHostFloat(t, "broadcast");
        auto* p = static_cast<char*>(t.raw());
        const auto bytes = static_cast<int64_t>(t.nbytes());
        for (int64_t at = 0; at < bytes; at += kChunk) {
            const auto n = static_cast<int>(std::min<int64_t>(kChunk, bytes - at));
            check(MPI_Bcast(p + at, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
        }
    }
    std::vector<int64_t> allGather(int64_t value) override {
        std::vector<int64_t> all(static_cast<size_t>(size_));
        check(MPI_Allgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD), "MPI_Allgather");
        return all;
    }
    std::string describe() const override { return "MPI (" + library_ + ")"; }
    [[noreturn]] void abort(int code) override {
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);
    }

private:
    static constexpr int64_t kChunk = int64_t{1} << 30;
    int rank_ = 0, size_ = 1;
    std::string library_;
};

} // namespace

CommunicatorPtr mpiWorld() {
    static std::mutex mutex;
    static CommunicatorPtr world;
    std::lock_guard<std::mutex> lock(mutex);
    if (!world) world = std::make_shared<MpiWorld>();
    return world;
}

#else

bool mpiBuilt() { return false; }

CommunicatorPtr mpiWorld() {
    throw BackendError("this build of Tessera has no MPI (install libopenmpi-dev, e.g. with tools/setup.sh, and "
                       "configure again)");
}

#endif

} // namespace tessera
