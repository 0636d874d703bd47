#pragma once
/// \file PerDim: a setting per spatial dim (stride, pad, dilation, ...), given as one number
/// for every dim or as one per dim.

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace tessera {

/// One number for every spatial dim (`.pad = 1`) or one per dim (`.pad = {1, 2}`); the
/// layer expands a single number to its dims.
struct PerDim : std::vector<int64_t> {
    PerDim() = default;
    PerDim(int64_t v) : std::vector<int64_t>{v} {} // implicit: `.pad = 1` reads as it says
    PerDim(std::initializer_list<int64_t> v) : std::vector<int64_t>(v) {}
    PerDim(std::vector<int64_t> v) : std::vector<int64_t>(std::move(v)) {}
};

} // namespace tessera
