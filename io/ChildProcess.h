#pragma once
/// \file For the child processes readers run libraries in (io/Hdf5.cpp, io/Onnx.cpp):
/// a crash there is the parent's to report. Private to io/.

#include <signal.h>

// Sanitizer builds: what a sanitizer runs when it stops the process (a fuzzer's report).
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace tessera::io_detail {

/// In a forked child: crashes take the default action (the parent sees the signal), not
/// the handlers the process installed (a sanitizer's or a fuzzer's would report the
/// crash as their own, and a fuzzer would write it down as a finding).
inline void defaultCrashHandling() {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
        struct sigaction dfl = {};
        dfl.sa_handler = SIG_DFL;
        ::sigaction(sig, &dfl, nullptr);
    }
    if (&__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
}

} // namespace tessera::io_detail
