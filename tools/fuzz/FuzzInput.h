#pragma once
// Shared by the fuzz harnesses: each input is written to a file (the readers take paths),
// and a reader's clear error is the expected outcome for a bad file. Anything else (a
// crash, a sanitizer report, another exception type such as std::bad_alloc, a hang, a
// failed allocation of Tessera's own) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/Errors.h"

namespace tessera::fuzz {

// A file of the input's bytes, in a private directory (tmpfs when there is one), named
// with the given extension (some readers look at it).
class InputFile {
public:
    InputFile(const uint8_t* data, size_t size, const std::string& extension) {
        static const std::string dir = makeDir();
        path_ = dir + "/input" + extension;
        std::FILE* f = std::fopen(path_.c_str(), "wb");
        if (!f) std::abort();
        if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
        std::fclose(f);
    }
    ~InputFile() { std::remove(path_.c_str()); }
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;
    const std::string& path() const { return path_; }

private:
    // Made once per process, removed when it exits (empty by then).
    static std::string makeDir() {
        const char* base =
            ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
        static std::string dir;
        dir = std::string(base) + "/tessera-fuzz-XXXXXX";
        if (!::mkdtemp(dir.data())) std::abort();
        std::atexit([] { ::rmdir(dir.c_str()); });
        return dir;
    }
    std::string path_;
};

// Runs `read`; Tessera's own errors (what a bad file must give) are swallowed, every other
// exception escapes and aborts the run as a finding, as does a failed host allocation (the
// fuzzers cap single allocations at 1 GB: a reader asked for more, sized by the file).
template <class F> void expectCleanFailure(F&& read) {
    try {
        read();
    } catch (const tessera::BackendError& e) {
        if (std::string(e.what()).rfind("CpuBackend: out of host memory", 0) == 0) throw;
    } catch (const tessera::Error&) {}
}

} // namespace tessera::fuzz
