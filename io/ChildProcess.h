#pragma once
/// \file Child processes the readers run libraries in (io/Hdf5.cpp: libhdf5; io/Onnx.cpp:
/// ONNX's shape inference): a crash or a hang there is the parent's to report, never the
/// parent's own. Private to io/.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace tessera::io_detail {

/// In a forked child: crashes take the default action (the parent sees the signal), not
/// the handlers the process installed (a sanitizer's or a fuzzer's would report the
/// crash as their own, and a fuzzer would write it down as a finding).
void defaultCrashHandling();

/// A helper process, forked on the first call and kept, so that a call costs a round trip
/// rather than a fork. `call` sends a request; the child runs the handler on it (in the
/// memory it was forked with: the request must carry everything) and sends its answer
/// back. A child that crashed, exited or ran past the call's timeout is reaped (killed)
/// and replaced at the next call. Calls are serialised.
class ChildServer {
public:
    /// Runs in the child, one request at a time; its exceptions end the child (exit status
    /// 1), so handlers answer their own errors.
    using Handler = std::function<std::string(const std::string& request)>;

    explicit ChildServer(Handler handler) : handler_(std::move(handler)) {}
    ChildServer(const ChildServer&) = delete;
    ChildServer& operator=(const ChildServer&) = delete;
    ~ChildServer();

    /// The child's answer, or why there is none.
    struct Result {
        enum class Failure { none, cannotStart, timedOut, crashed, exited };
        std::optional<std::string> answer;
        Failure failure = Failure::none;
        /// Without an answer: "signal 11", "exit status 1", "fork: <reason>", "".
        std::string detail;
    };
    Result call(const std::string& request, std::chrono::milliseconds timeout);

private:
    std::optional<std::string> spawn();
    int stop();
    [[noreturn]] void serve(int fd);

    Handler handler_;
    std::mutex mutex_;
    pid_t pid_ = -1;
    int fd_ = -1;
};

} // namespace tessera::io_detail
