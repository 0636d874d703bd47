#pragma once
/// \file AttentionSpec: what a backend's fused attention (Backend::fusedAttentionForward)
/// computes besides softmax(q k^T scale) v. Apart from Backend.h so that what it grows
/// touches only the backends' attention code and AttentionKernel.

#include <cstdint>
#include <vector>

#include "backend/Tensor.h"

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
    /// An additive float mask on the scores (0 keeps, -inf drops), for fusesAttention and
    /// the scratch: the shape [M, Tq or 1, Tk] of its matrices (rank 0: none).
    Shape maskShape = {};
    /// The passes' mask: plain float32 matrices of maskShape, problem b's being
    /// mask[maskOf[b]] (a row per query, or one for all). Backward writes its gradient to
    /// `dmask` (of maskShape; undefined: not wanted): the scores' gradient summed over the
    /// problems sharing each matrix (and over the queries where it has one row).
    Tensor mask = {}, dmask = {};
    std::vector<int64_t> maskOf = {};
};

} // namespace tessera
