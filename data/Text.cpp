#include "data/Text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/Errors.h"

namespace tessera {

namespace {

std::string readWhole(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw IoError("text corpus: cannot read " + p.string());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The file's entries: split at lines holding only '%', else at blank lines; each entry
// without its leading and trailing blank lines, and ending in one newline.
std::vector<std::string> entriesOf(const std::string& text) {
    std::vector<std::string> lines;
    size_t at = 0;
    while (at < text.size()) {
        const size_t end = text.find('\n', at);
        lines.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
        at = end == std::string::npos ? text.size() : end + 1;
    }
    for (std::string& l : lines) {
        if (!l.empty() && l.back() == '\r') l.pop_back();
    }
    const bool percent = std::find(lines.begin(), lines.end(), "%") != lines.end();
    std::vector<std::string> entries;
    std::string cur;
    auto flush = [&] {
        while (!cur.empty() && cur.front() == '\n') cur.erase(cur.begin());
        while (cur.size() >= 2 && cur[cur.size() - 1] == '\n' && cur[cur.size() - 2] == '\n') cur.pop_back();
        if (!cur.empty()) entries.push_back(cur);
        cur.clear();
    };
    for (const std::string& l : lines) {
        const bool blank = l.find_first_not_of(" \t") == std::string::npos;
        if (percent ? l == "%" : blank) {
            flush();
            continue;
        }
        cur += l;
        cur += '\n';
    }
    flush();
    return entries;
}

} // namespace

TextCorpus readTextCorpus(const std::string& path, const TextCorpusOptions& options) {
    namespace fs = std::filesystem;
    if (options.vocabulary < 1 || options.vocabulary > 256) {
        throw ShapeError("text corpus: the vocabulary must be 1 to 256 byte values, got " +
                         std::to_string(options.vocabulary));
    }
    if (options.heldOutEvery < 0) throw ShapeError("text corpus: heldOutEvery must be >= 0");
    std::error_code ec;
    if (!fs::exists(path, ec)) throw IoError("text corpus: no such file or folder " + path);
    std::vector<fs::path> files;
    if (fs::is_directory(path, ec)) {
        for (const auto& e : fs::directory_iterator(path)) {
            if (e.is_symlink() || !e.is_regular_file()) continue;
            files.push_back(e.path());
        }
        std::sort(files.begin(), files.end());
    } else {
        files.push_back(path);
    }
    TextCorpus c;
    std::vector<std::string> all;
    for (const fs::path& f : files) {
        const std::string text = readWhole(f);
        if (text.find('\0') != std::string::npos) continue; // binary (fortune's .dat indexes)
        ++c.files;
        for (std::string& e : entriesOf(text)) all.push_back(std::move(e));
    }
    if (c.files == 0) throw IoError("text corpus: " + path + " holds no text file");
    if (all.empty()) throw IoError("text corpus: " + path + " holds no text");
    c.entries = static_cast<int64_t>(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
        const bool held = options.heldOutEvery > 0 && (static_cast<int64_t>(i) + 1) % options.heldOutEvery == 0;
        std::vector<int32_t>& part = held ? c.heldOut : c.train;
        if (!part.empty()) part.push_back('\n'); // a blank line between entries
        for (unsigned char ch : all[i]) {
            if (ch >= options.vocabulary) {
                ++c.dropped;
                continue;
            }
            part.push_back(ch);
        }
    }
    c.what = std::to_string(c.files) + (c.files == 1 ? " file " : " files ") +
             (fs::is_directory(path, ec) ? "in " : "") + path;
    return c;
}

std::pair<Tensor, Tensor> nextIdWindows(const std::vector<int32_t>& ids, int64_t T) {
    if (T < 1) throw ShapeError("nextIdWindows: the window length must be >= 1, got " + std::to_string(T));
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t windows = n > 0 ? (n - 1) / T : 0;
    if (windows < 1) {
        throw ShapeError("nextIdWindows: " + std::to_string(n) + " ids make no window of " + std::to_string(T) +
                         " (it needs " + std::to_string(T + 1) + ")");
    }
    std::vector<int32_t> x(static_cast<size_t>(windows * T)), y(x.size());
    for (int64_t w = 0; w < windows; ++w) {
        std::copy_n(ids.begin() + w * T, T, x.begin() + w * T);
        std::copy_n(ids.begin() + w * T + 1, T, y.begin() + w * T);
    }
    return {Tensor::fromVector({windows, T}, x), Tensor::fromVector({windows, T}, y)};
}

std::vector<int32_t> textIds(const std::string& text, int64_t vocabulary) {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const auto ch = static_cast<unsigned char>(text[i]);
        if (ch >= vocabulary) {
            throw ShapeError("textIds: byte " + std::to_string(ch) + " at position " + std::to_string(i) +
                             " is outside the vocabulary of " + std::to_string(vocabulary));
        }
        ids.push_back(ch);
    }
    return ids;
}

} // namespace tessera
