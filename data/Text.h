#pragma once
/// \file Character-level text for language models: the bytes of text files as ids, split
/// into a training and a held-out part by entries, and cut into windows of next-id pairs.

#include <cstdint>
#include <string>
#include <vector>

#include "backend/Tensor.h"

namespace tessera {

struct TextCorpusOptions {
    /// Ids are byte values below this (128: ASCII); other bytes are dropped (and counted).
    int64_t vocabulary = 128;
    /// Every `heldOutEvery`th entry (the 10th, 20th, ...) goes to the held-out part (0: none).
    int64_t heldOutEvery = 10;
};

/// A text corpus as byte ids. Entries are the pieces of the files between lines that hold
/// only `%` (the format of fortune(6)'s files), or, in a file without such lines, between
/// blank lines (paragraphs). Entry i (counted over all files in order, from 0) is held out
/// when (i + 1) % heldOutEvery == 0. Each part is its entries, each ending in one newline,
/// separated by a blank line.
struct TextCorpus {
    std::vector<int32_t> train, heldOut; ///< the ids of each part
    int64_t entries = 0;                 ///< entries read, both parts together
    int64_t files = 0;                   ///< files read
    int64_t dropped = 0;                 ///< bytes dropped for being outside the vocabulary
    std::string what;                    ///< for a log line: "2 files in /usr/share/games/fortunes"
};

/// Reads `path`: a text file, or a folder whose regular files (not links, not files with a
/// NUL byte, such as fortune's `.dat` indexes) are read in sorted order. IoError naming the
/// path for a missing path, a folder without text files, or a corpus with no entry.
TextCorpus readTextCorpus(const std::string& path, const TextCorpusOptions& options = {});

/// Next-id windows of `ids`: window w is x = ids[w T, w T + T) and y = ids[w T + 1, w T + T + 1),
/// for every whole window (floor((size - 1) / T) of them). Returns {x, y}, int32 [windows, T]
/// each, on the CPU. ShapeError when T < 1 or the ids make no window.
std::pair<Tensor, Tensor> nextIdWindows(const std::vector<int32_t>& ids, int64_t T);

/// Ids of a string (bytes; ShapeError naming the first byte at or over `vocabulary`).
std::vector<int32_t> textIds(const std::string& text, int64_t vocabulary = 128);

} // namespace tessera
