#pragma once
/// \file Child processes the readers run libraries in (io/Hdf5.cpp: libhdf5;
/// io/onnx/ShapeInference.cpp: ONNX's shape inference): a crash or a hang there is the
/// parent's to report, never the parent's own. The child is a fresh program, `tessera-child`
/// beside libtessera, started by posix_spawn: never a fork of a process whose other threads
/// (a Loader's workers, OpenMP's pool) may hold locks the child would then wait on forever.
/// Private to io/.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace tessera::io_detail {

/// The work a child can do, by name: a request in, an answer out. Runs in the child, one
/// request at a time; its exceptions end the child (exit status 1), so handlers answer
/// their own errors.
using Handler = std::string (*)(const std::string& request);
/// The handlers (defined beside their readers): ONNX's shape inference, an HDF5 file's read.
std::string onnxShapeInference(const std::string& request);
std::string hdf5Read(const std::string& request);
/// "onnx-shape-inference" and "hdf5-read"; nullptr for another name.
Handler handlerNamed(const std::string& name);

/// The child program's loop (tools/child/main.cpp): serves `handler`'s requests on the
/// socket `fd` until it closes; crashes take the default action (the parent sees the
/// signal), not handlers a sanitizer or fuzzer runtime installed.
[[noreturn]] void serveChild(Handler handler, int fd);

/// The child program: `tessera-child` in libtessera's directory, or the file
/// TESSERA_CHILD_PROGRAM names.
std::string childProgram();

/// A helper process, started on the first call and kept, so that a call costs a round
/// trip rather than a start. `call` sends a request; the child runs the named handler on it
/// and sends its answer back. A child that crashed, exited or ran past the call's timeout
/// is reaped (killed) and replaced at the next call. Calls are serialised.
class ChildServer {
public:
    /// `handler`: a name handlerNamed knows.
    explicit ChildServer(std::string handler) : handler_(std::move(handler)) {}
    ChildServer(const ChildServer&) = delete;
    ChildServer& operator=(const ChildServer&) = delete;
    ~ChildServer();

    /// The child's answer, or why there is none.
    struct Result {
        enum class Failure { none, cannotStart, timedOut, crashed, exited };
        std::optional<std::string> answer;
        Failure failure = Failure::none;
        /// Without an answer: "signal 11", "exit status 1", "cannot start <program>: <reason>".
        std::string detail;
    };
    Result call(const std::string& request, std::chrono::milliseconds timeout);

private:
    std::optional<std::string> spawn();
    int stop();

    std::string handler_;
    std::mutex mutex_;
    pid_t pid_ = -1;
    int fd_ = -1;
};

} // namespace tessera::io_detail
