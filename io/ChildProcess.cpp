#include "io/ChildProcess.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

extern char** environ;

// Sanitizer builds: what a sanitizer runs when it stops the process (a fuzzer's report).
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace tessera::io_detail {

namespace {

bool sendAll(int fd, const char* p, size_t n) {
    while (n > 0) {
        const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= static_cast<size_t>(k);
    }
    return true;
}

// Reads n bytes; false on end of file, an error or (deadline given) time running out.
bool recvAll(int fd, char* p, size_t n, std::optional<std::chrono::steady_clock::time_point> deadline, bool* timedOut) {
    while (n > 0) {
        if (deadline) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
            pollfd pfd{fd, POLLIN, 0};
            const int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
            if (ready < 0 && errno == EINTR) continue;
            if (ready == 0) *timedOut = true;
            if (ready <= 0) return false;
        }
        const ssize_t k = ::recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= static_cast<size_t>(k);
    }
    return true;
}

// A message on the socket: its length (8 bytes), then its bytes.
bool sendMessage(int fd, const std::string& m) {
    const uint64_t n = m.size();
    return sendAll(fd, reinterpret_cast<const char*>(&n), sizeof n) && sendAll(fd, m.data(), n);
}

bool recvMessage(int fd, std::string& m, std::optional<std::chrono::steady_clock::time_point> deadline,
                 bool* timedOut) {
    uint64_t n = 0;
    if (!recvAll(fd, reinterpret_cast<char*>(&n), sizeof n, deadline, timedOut)) return false;
    m.resize(n);
    return recvAll(fd, m.data(), n, deadline, timedOut);
}

} // namespace

bool Outgoing::write(const char* p, size_t n) { return sendAll(fd_, p, n); }

bool Incoming::read(char* p, size_t n) {
    if (timedOut_ || failed_) return false;
    char scratch[1 << 16];
    while (n > 0) {
        const size_t k = p ? n : std::min(n, sizeof scratch);
        if (!recvAll(fd_, p ? p : scratch, k, deadline_, &timedOut_)) {
            failed_ = true;
            return false;
        }
        n -= k;
        if (p) p += k;
    }
    return true;
}

Handler handlerNamed(const std::string& name) {
    if (name == "onnx-shape-inference") return &onnxShapeInference;
    if (name == "hdf5-read") return &hdf5Read;
    return nullptr;
}

std::string childProgram() {
    if (const char* path = std::getenv("TESSERA_CHILD_PROGRAM"); path && *path) return path;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&handlerNamed), &info) == 0 || !info.dli_fname) return "tessera-child";
    return (std::filesystem::path(info.dli_fname).parent_path() / "tessera-child").lexically_normal().string();
}

namespace {
void defaultCrashHandling() {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
        struct sigaction dfl = {};
        dfl.sa_handler = SIG_DFL;
        ::sigaction(sig, &dfl, nullptr);
    }
    if (&__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
}
} // namespace

ChildServer::~ChildServer() {
    // Killed, not only told by closing the socket: a helper forked later holds a copy of
    // this end of it, so the child might never see the socket close.
    if (pid_ >= 0) ::kill(pid_, SIGKILL);
    if (pid_ >= 0) stop();
}

ChildServer::Result ChildServer::call(const std::string& request, std::chrono::milliseconds timeout,
                                      const std::function<void(const std::string&, Incoming&)>& rest) {
    std::lock_guard<std::mutex> lock(mutex_);
    Result result;
    if (pid_ < 0) {
        if (std::optional<std::string> error = spawn()) {
            result.failure = Result::Failure::cannotStart;
            result.detail = *error;
            return result;
        }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string answer;
    bool timedOut = false;
    if (sendMessage(fd_, request) && recvMessage(fd_, answer, deadline, &timedOut)) {
        Incoming in(fd_, deadline);
        if (rest) {
            try {
                rest(answer, in);
            } catch (...) {
                ::kill(pid_, SIGKILL); // it may be streaming still: out of step with the next call
                stop();
                throw;
            }
        }
        if (!in.failed_) {
            result.answer = std::move(answer);
            return result;
        }
        timedOut = in.timedOut_;
    }
    if (timedOut) ::kill(pid_, SIGKILL);
    const int status = stop();
    if (timedOut) {
        result.failure = Result::Failure::timedOut;
    } else if (WIFSIGNALED(status)) {
        result.failure = Result::Failure::crashed;
        result.detail = "signal " + std::to_string(WTERMSIG(status));
    } else {
        result.failure = Result::Failure::exited;
        result.detail = "exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return result;
}

std::optional<std::string> ChildServer::spawn() {
    const std::string program = childProgram();
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
        return std::string("socketpair: ") + std::strerror(errno);
    }
    // The child's end becomes its descriptor 3 (dup2 clears close-on-exec; every other
    // descriptor of this process stays closed in the child, the socket's too).
    if (fds[1] == 3) {
        const int moved = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
        ::close(fds[1]);
        fds[1] = moved;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
    std::string name = "tessera-child", serve = "--serve", handler = handler_;
    char* argv[] = {name.data(), serve.data(), handler.data(), nullptr};
    pid_t pid = -1;
    const int e = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (e != 0) {
        ::close(fds[0]);
        return "cannot start " + program + ": " + std::strerror(e);
    }
    pid_ = pid;
    fd_ = fds[0];
    return std::nullopt;
}

// Closes the socket (a live child then leaves), reaps the child, returns its status.
int ChildServer::stop() {
    ::close(fd_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    pid_ = -1;
    fd_ = -1;
    return status;
}

void serveChild(Handler handler, int fd) {
    defaultCrashHandling();
    for (;;) {
        std::string request;
        bool unused = false;
        if (!recvMessage(fd, request, std::nullopt, &unused)) ::_exit(0);
        Answer answer("");
        bool sent = false;
        try {
            answer = handler(request);
            sent = sendMessage(fd, answer.bytes);
            if (sent && answer.rest) {
                Outgoing out(fd);
                sent = answer.rest(out);
            }
        } catch (...) {
            ::_exit(1);
        }
        if (!sent) ::_exit(0);
    }
}

} // namespace tessera::io_detail
