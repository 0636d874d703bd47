#pragma once
/// \file Seeded, counter-based random numbers. Element i of a draw depends only on
/// (seed, offset + i), so results are the same for any thread count and on any backend.

#include <atomic>
#include <cstdint>

// The hash below also runs in CUDA kernels, so that every backend draws the same numbers.
#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera {

/// A seed and a running offset. Each draw of n values consumes n counters. `advance` is
/// atomic, so threads drawing from one generator (models built in two threads from the
/// global one) each get counters no other draw gets; reseeding while another thread draws
/// is the caller's to avoid.
class Generator {
public:
    explicit Generator(uint64_t seed = 0) : seed_(seed) {}
    Generator(const Generator& other) : seed_(other.seed_), offset_(other.offset()) {}
    Generator& operator=(const Generator& other) {
        seed_ = other.seed_;
        offset_.store(other.offset(), std::memory_order_relaxed);
        return *this;
    }

    /// Restart the stream at `seed`.
    void manualSeed(uint64_t seed) {
        seed_ = seed;
        offset_.store(0, std::memory_order_relaxed);
    }
    uint64_t seed() const { return seed_; }
    uint64_t offset() const { return offset_.load(std::memory_order_relaxed); }
    /// Reserve `n` counters; returns the first.
    uint64_t advance(uint64_t n) { return offset_.fetch_add(n, std::memory_order_relaxed); }

private:
    uint64_t seed_;
    std::atomic<uint64_t> offset_{0};
};

/// A 64-bit hash of (seed, counter) with good avalanche (splitmix64 finaliser).
TESSERA_HOST_DEVICE inline uint64_t randomBits(uint64_t seed, uint64_t counter) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// Uniform float in [0, 1) from (seed, counter), 24 bits of mantissa (converted from 32
/// bits, exactly, so that loops over it vectorise on CPUs without 64-bit conversions).
TESSERA_HOST_DEVICE inline float randomUniform(uint64_t seed, uint64_t counter) {
    return static_cast<float>(static_cast<uint32_t>(randomBits(seed, counter) >> 40)) * (1.0f / 16777216.0f);
}

/// The generator used by parameter initialisation and by modules that own no generator.
Generator& globalGenerator();
/// Seed the global generator (model construction after this call is reproducible).
void manualSeed(uint64_t seed);

/// A module's seed option: itself when >= 0, else a fresh draw from the global generator
/// (so `manualSeed` makes module construction reproducible).
inline uint64_t resolveSeed(int64_t seed) {
    if (seed >= 0) return static_cast<uint64_t>(seed);
    Generator& g = globalGenerator();
    return randomBits(g.seed(), g.advance(1));
}

} // namespace tessera
