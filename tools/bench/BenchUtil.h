#pragma once
// Shared helpers of the benchmark program.

#include <benchmark/benchmark.h>

// Report `gflop` (billions of floating-point operations per iteration) as a GFLOP/s rate.
inline void setGflops(benchmark::State& state, double gflop) {
    state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
}

// Report `gbytes` (billions of bytes moved per iteration) as a GB/s rate.
inline void setGbytes(benchmark::State& state, double gbytes) {
    state.counters["GB/s"] = benchmark::Counter(gbytes, benchmark::Counter::kIsIterationInvariantRate);
}
