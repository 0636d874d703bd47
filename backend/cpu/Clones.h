// Loops the compiler vectorises better with wider registers are compiled once per CPU level
// (AVX-512, AVX2, baseline) and the clone for the CPU is picked when the library loads.
// Every clone computes the same bits. Private to the CPU backend.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TESSERA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSERA_CPU_CLONES
#endif
