#pragma once
/// \file Child processes the readers run libraries in (io/Hdf5.cpp: libhdf5;
/// io/onnx/ShapeInference.cpp: ONNX's shape inference): a crash or a hang there is the
/// parent's to report, never the parent's own. The child is a fresh program, `tessera-child`
/// beside libtessera, started by posix_spawn: never a fork of a process whose other threads
/// (a Loader's workers, OpenMP's pool) may hold locks the child would then wait on forever.
/// Private to io/.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace tessera::io_detail {

/// Bytes a child streams after its answer: written straight to the socket, in as many
/// pieces as suit it (the parent reads them as the pieces it expects).
class Outgoing {
public:
    explicit Outgoing(int fd) : fd_(fd) {}
    /// False when the parent is gone.
    bool write(const char* p, std::size_t n);

private:
    int fd_;
};

/// A handler's answer: its bytes, and optionally `rest`, which streams more after them (a
/// large answer that then needs no second copy on either side). `rest` returns false when a
/// write failed.
struct Answer {
    Answer(std::string b) : bytes(std::move(b)) {}
    Answer(std::string b, std::function<bool(Outgoing&)> r) : bytes(std::move(b)), rest(std::move(r)) {}
    std::string bytes;
    std::function<bool(Outgoing&)> rest;
};

/// The work a child can do, by name: a request in, an answer out. Runs in the child, one
/// request at a time; its exceptions end the child (exit status 1), so handlers answer
/// their own errors.
using Handler = Answer (*)(const std::string& request);
/// The handlers (defined beside their readers): ONNX's shape inference, an HDF5 file's read.
Answer onnxShapeInference(const std::string& request);
Answer hdf5Read(const std::string& request);

/// "onnx-shape-inference" and "hdf5-read"; nullptr for another name.
Handler handlerNamed(const std::string& name);

/// The child program's loop (tools/child/main.cpp): serves `handler`'s requests on the
/// socket `fd` until it closes; crashes take the default action (the parent sees the
/// signal), not handlers a sanitizer or fuzzer runtime installed.
[[noreturn]] void serveChild(Handler handler, int fd);

/// The child program: `tessera-child` in libtessera's directory, or the file
/// TESSERA_CHILD_PROGRAM names.
std::string childProgram();

/// The bytes a child streams after its answer, read by the caller of ChildServer::call in
/// the pieces it expects, under the call's deadline.
class Incoming {
public:
    /// Reads n bytes into p (null: reads and drops them). False when the child failed or
    /// the call's time ran out; the call then reports why.
    bool read(char* p, std::size_t n);

private:
    friend class ChildServer;
    Incoming(int fd, std::chrono::steady_clock::time_point deadline) : fd_(fd), deadline_(deadline) {}
    int fd_;
    std::chrono::steady_clock::time_point deadline_;
    bool timedOut_ = false;
    bool failed_ = false;
};

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
    /// With `rest`, the call reads what the child streams after its answer: `rest(answer,
    /// in)` reads exactly the bytes the answer announces. If it throws, the child (now out of
    /// step) is stopped and the exception goes on to the caller.
    Result call(const std::string& request, std::chrono::milliseconds timeout,
                const std::function<void(const std::string& answer, Incoming& in)>& rest = nullptr);

private:
    std::optional<std::string> spawn();
    int stop();

    std::string handler_;
    std::mutex mutex_;
    pid_t pid_ = -1;
    int fd_ = -1;
};

} // namespace tessera::io_detail
