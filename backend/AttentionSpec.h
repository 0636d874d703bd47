#pragma once
/// \file AttentionSpec: what a backend's fused attention (Backend::fusedAttentionForward)
/// computes besides softmax(q k^T scale) v. Apart from Backend.h so that what it grows
/// touches only the backends' attention code and AttentionKernel.

#include <cstdint>

namespace tessera {

struct AttentionSpec {
    float scale = 1.0f; ///< the scores' factor
    /// Query i attends keys j <= i only (PyTorch's is_causal: the mask's top-left corner
    /// aligned whatever Tq and Tk, so every row keeps key 0).
    bool causal = false;
    /// Train-mode dropout of the probabilities: each dropped with chance `dropout` (0: none)
    /// and the others scaled by 1 / (1 - dropout), as Backend::dropoutForward draws them over
    /// [B, Tq, Tk] from counter `first` of stream `seed`: probability (b, i, j)'s draw is
    /// randomUniform(seed, first + (b Tq + i) Tk + j), whatever the masking.
    float dropout = 0.0f;
    uint64_t seed = 0, first = 0;
};

} // namespace tessera
