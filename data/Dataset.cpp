#include "data/Dataset.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "data/Idx.h"
#include "data/Npy.h"
#include "data/ReadFile.h"
#include "data/Tar.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

using data_detail::checkIndex;

// Images of one shape held in memory, as bytes (scaled by 1/255) or as float32 values.
class ArrayDataset : public Dataset {
public:
    struct File {
        int64_t first; // index of its first sample
        std::string path;
    };

    ArrayDataset(std::string name, int64_t c, int64_t h, int64_t w, std::vector<int32_t> labels, int64_t classes,
                 std::vector<File> files)
        : name_(std::move(name)), c_(c), h_(h), w_(w), labels_(std::move(labels)), classes_(classes),
          files_(std::move(files)) {}
    std::vector<uint8_t> bytes; // either these ...
    Tensor floats;              // ... or these, [N, C, H, W]

    int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
    int64_t classes() const override { return classes_; }
    std::string describe() const override { return name_; }
    int32_t label(int64_t index) const override {
        checkIndex(*this, index);
        return labels_[static_cast<size_t>(index)];
    }
    Sample get(int64_t index) const override {
        checkIndex(*this, index);
        Sample s{Image(c_, h_, w_), labels_[static_cast<size_t>(index)]};
        const size_t n = s.image.pixels.size(), at = static_cast<size_t>(index) * n;
        if (floats.defined()) {
            std::memcpy(s.image.pixels.data(), floats.data<float>() + at, n * sizeof(float));
        } else {
            const uint8_t* src = bytes.data() + at;
            for (size_t i = 0; i < n; ++i) s.image.pixels[i] = static_cast<float>(src[i]) * (1.0f / 255.0f);
        }
        return s;
    }
    std::string where(int64_t index) const override {
        if (files_.empty()) return name_ + " sample " + std::to_string(index);
        auto it =
            std::upper_bound(files_.begin(), files_.end(), index, [](int64_t i, const File& f) { return i < f.first; });
        const File& f = *(it - 1);
        return f.path + " (record " + std::to_string(index - f.first) + ")";
    }

private:
    std::string name_;
    int64_t c_, h_, w_;
    std::vector<int32_t> labels_;
    int64_t classes_;
    std::vector<File> files_;
};

// The directory holding `probe`: `dir` itself or its sub-folder `inner` (the archive's).
std::string cifarDir(const std::string& dir, const std::string& inner, const std::string& probe,
                     const std::string& what) {
    if (!fs::exists(dir)) throw IoError(what + ": " + dir + ": no such file or directory");
    if (fs::exists(fs::path(dir) / probe)) return dir;
    if (fs::exists(fs::path(dir) / inner / probe)) return (fs::path(dir) / inner).string();
    throw IoError(what + ": " + dir + " holds neither " + probe + " nor " + inner + "/" + probe);
}

// CIFAR's files, each with the name messages give it: files in a directory, or members of
// the tar (or .tar.gz) archive as distributed, read in one pass.
struct CifarFiles {
    std::vector<std::string> names;
    std::vector<std::vector<uint8_t>> bytes; // empty: read names[i] from disk when needed
};

// The most of an archive's members kept: three times CIFAR's largest split (154 MB).
constexpr uint64_t kMaxCifarBytes = uint64_t{512} << 20;

CifarFiles cifarFiles(const std::string& where, const std::string& inner, const std::vector<std::string>& wanted,
                      const std::string& what) {
    CifarFiles files;
    if (!fs::is_regular_file(where)) {
        const std::string root = cifarDir(where, inner, wanted.front(), what);
        for (const std::string& w : wanted) {
            const std::string p = root + "/" + w;
            if (!fs::exists(p)) throw IoError(what + " file " + p + " not found");
            files.names.push_back(p);
        }
        return files;
    }
    // A member counts by its last name, at the archive's top or in one folder.
    auto base = [](const std::string& name) {
        const std::vector<std::string> c = data_detail::pathComponents(name);
        return c.size() == 1 || c.size() == 2 ? c.back() : std::string();
    };
    auto members = data_detail::readTarMembers(
        where,
        [&](const std::string& name) { return std::find(wanted.begin(), wanted.end(), base(name)) != wanted.end(); },
        what + " archive", kMaxCifarBytes);
    for (const std::string& w : wanted) {
        int found = 0;
        for (auto& [name, bytes] : members) {
            if (base(name) != w) continue;
            if (++found > 1) throw IoError(what + " archive " + where + " holds " + w + " twice");
            files.names.push_back(where + ":" + name);
            files.bytes.push_back(std::move(bytes));
        }
        if (found == 0) {
            throw IoError(what + " archive " + where + " holds no " + w + " (expected " + inner + "/" + w +
                          ", as the binary version unpacks)");
        }
    }
    return files;
}

// Records of `labelBytes` label bytes (the one used at `labelAt`) and 3x32x32 pixels.
std::shared_ptr<ArrayDataset> readCifar(const std::string& what, CifarFiles files, int labelBytes, int labelAt,
                                        int64_t classes, const std::string& name) {
    constexpr int64_t kPixels = 3 * 32 * 32;
    const int64_t record = labelBytes + kPixels;
    std::vector<int32_t> labels;
    std::vector<ArrayDataset::File> parts;
    std::vector<uint8_t> pixels;
    for (size_t i = 0; i < files.names.size(); ++i) {
        const std::string& path = files.names[i];
        const std::vector<uint8_t> bytes =
            files.bytes.empty() ? data_detail::readFile(path, what + " file") : std::move(files.bytes[i]);
        const auto size = static_cast<int64_t>(bytes.size());
        if (size == 0 || size % record != 0) {
            throw IoError(what + " file " + path + ": " + std::to_string(size) + " bytes is not a whole number of " +
                          std::to_string(record) + "-byte records (truncated or not " + what + ")");
        }
        parts.push_back({static_cast<int64_t>(labels.size()), path});
        const int64_t n = size / record;
        pixels.reserve(pixels.size() + static_cast<size_t>(n * kPixels));
        for (int64_t r = 0; r < n; ++r) {
            const uint8_t* rec = bytes.data() + r * record;
            const int label = rec[labelAt];
            if (label >= classes) {
                throw IoError(what + " file " + path + ": record " + std::to_string(r) + " has label " +
                              std::to_string(label) + "; labels lie in [0, " + std::to_string(classes) + ")");
            }
            labels.push_back(label);
            pixels.insert(pixels.end(), rec + labelBytes, rec + record);
        }
    }
    auto d = std::make_shared<ArrayDataset>(name, 3, 32, 32, std::move(labels), classes, std::move(parts));
    d->bytes = std::move(pixels);
    return d;
}

void checkSplit(const std::string& what, const std::string& split) {
    if (split != "train" && split != "test") {
        throw IoError(what + ": split must be \"train\" or \"test\", got \"" + split + "\"");
    }
}

// Image files, each with its class, decoded when asked for.
class FileDataset : public Dataset {
public:
    FileDataset(std::string what, std::vector<std::pair<std::string, int32_t>> samples, std::vector<std::string> names,
                int channels)
        : what_(std::move(what)), channels_(channels), names_(std::move(names)), samples_(std::move(samples)) {}
    int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
    int64_t classes() const override { return static_cast<int64_t>(names_.size()); }
    std::string describe() const override { return what_; }
    std::vector<std::string> classNames() const override { return names_; }
    std::string where(int64_t index) const override { return samples_[static_cast<size_t>(index)].first; }
    Sample get(int64_t index) const override { return getScaled(index, {}); }
    Sample getScaled(int64_t index, const DecodeScale& shrink) const override {
        checkIndex(*this, index);
        const auto& [path, label] = samples_[static_cast<size_t>(index)];
        return {readImage(path, channels_, shrink), label};
    }
    int32_t label(int64_t index) const override {
        checkIndex(*this, index);
        return samples_[static_cast<size_t>(index)].second;
    }

private:
    std::string what_;
    int channels_;
    std::vector<std::string> names_;
    std::vector<std::pair<std::string, int32_t>> samples_;
};

std::shared_ptr<FileDataset> folderDataset(const std::string& dir, int channels) {
    if (!fs::is_directory(dir)) throw IoError("image folder " + dir + ": no such directory");
    std::vector<std::string> classes;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        // Hidden folders (.ipynb_checkpoints, .git) are not classes.
        if (e.is_directory() && !name.empty() && name[0] != '.') classes.push_back(name);
    }
    std::sort(classes.begin(), classes.end());
    if (classes.empty()) {
        throw IoError("image folder " + dir + ": no class sub-folders (expected " + dir +
                      "/<class>/<image>.png or .jpg)");
    }
    std::vector<std::pair<std::string, int32_t>> samples;
    std::vector<std::string> empty;
    for (size_t k = 0; k < classes.size(); ++k) {
        std::vector<std::string> found;
        for (const auto& e : fs::recursive_directory_iterator(fs::path(dir) / classes[k])) {
            if (e.is_regular_file() && data_detail::isImageName(e.path().filename().string()))
                found.push_back(e.path().string());
        }
        std::sort(found.begin(), found.end());
        if (found.empty()) empty.push_back(classes[k]);
        for (std::string& f : found) samples.push_back({std::move(f), static_cast<int32_t>(k)});
    }
    if (samples.empty()) {
        throw IoError("image folder " + dir + ": its " + std::to_string(classes.size()) +
                      " class folders hold no .jpg, .jpeg or .png file");
    }
    if (!empty.empty()) { // a class without images would still be one of the model's outputs
        std::string names;
        for (const std::string& e : empty) names += (names.empty() ? "" : ", ") + e;
        throw IoError("image folder " + dir + ": class folder" + (empty.size() > 1 ? "s " : " ") + names + " hold" +
                      (empty.size() > 1 ? "" : "s") + " no .jpg, .jpeg or .png file: add images or remove the folder");
    }
    return std::make_shared<FileDataset>("image folder " + dir, std::move(samples), std::move(classes), channels);
}

// Where a text's content starts: after a UTF-8 byte order mark, if it has one.
size_t afterByteOrderMark(const std::string& text) { return text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0; }

// The rows of a CSV text (RFC 4180: fields in double quotes may hold commas, line breaks and
// doubled quotes; CRLF or LF; a UTF-8 byte order mark skipped), each with its line number.
std::vector<std::pair<int64_t, std::vector<std::string>>> csvRows(const std::string& text, const std::string& what) {
    std::vector<std::pair<int64_t, std::vector<std::string>>> rows;
    size_t i = afterByteOrderMark(text);
    int64_t line = 1;
    while (i < text.size()) {
        const int64_t first = line;
        std::vector<std::string> fields(1);
        bool quoted = false, wasQuoted = false;
        for (; i < text.size(); ++i) {
            const char c = text[i];
            if (quoted) {
                if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
                    fields.back() += '"', ++i;
                } else if (c == '"') {
                    quoted = false;
                } else {
                    if (c == '\n') ++line;
                    fields.back() += c;
                }
            } else if (c == '"' && fields.back().empty() && !wasQuoted) {
                quoted = wasQuoted = true;
            } else if (c == ',') {
                fields.emplace_back(), wasQuoted = false;
            } else if (c == '\n' || c == '\r') {
                if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
                ++i, ++line;
                break;
            } else if (wasQuoted) {
                throw IoError(what + " line " + std::to_string(line) + ": text after a closing quote");
            } else {
                fields.back() += c;
            }
        }
        if (quoted) throw IoError(what + " line " + std::to_string(first) + ": a quote is never closed");
        if (fields.size() == 1 && fields[0].empty() && !wasQuoted) continue; // an empty line
        rows.emplace_back(first, std::move(fields));
    }
    return rows;
}

// The lines of a .txt list as rows of (file, class): the class is the last word, the file
// what comes before it (spaces included); a header row (file, class) first, as csvRows gives.
std::vector<std::pair<int64_t, std::vector<std::string>>> wordRows(const std::string& text, const std::string& what) {
    std::vector<std::pair<int64_t, std::vector<std::string>>> rows{{0, {"file", "class"}}};
    size_t from = afterByteOrderMark(text);
    for (int64_t line = 1; from < text.size(); ++line) {
        size_t end = text.find('\n', from);
        if (end == std::string::npos) end = text.size();
        std::string l = text.substr(from, end - from);
        from = end + 1;
        while (!l.empty() && std::isspace(static_cast<unsigned char>(l.back()))) l.pop_back();
        size_t start = 0;
        while (start < l.size() && std::isspace(static_cast<unsigned char>(l[start]))) ++start;
        l = l.substr(start);
        if (l.empty()) continue;
        size_t cut = l.size();
        while (cut > 0 && !std::isspace(static_cast<unsigned char>(l[cut - 1]))) --cut;
        if (cut == 0) throw IoError(what + " line " + std::to_string(line) + ": one word; expected FILE CLASS");
        std::string file = l.substr(0, cut);
        while (!file.empty() && std::isspace(static_cast<unsigned char>(file.back()))) file.pop_back();
        rows.push_back({line, {file, l.substr(cut)}});
    }
    if (rows.size() == 1) rows.clear();
    return rows;
}

// Whole-number classes of an image list, at most this many (0 .. 999,999).
constexpr int64_t kMaxListedClasses = 1000000;

bool isWholeNumber(const std::string& s) {
    return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

class FirstSamples : public Dataset {
public:
    FirstSamples(DatasetPtr data, int64_t count) : data_(std::move(data)), count_(std::min(count, data_->size())) {}
    int64_t size() const override { return count_; }
    int64_t classes() const override { return data_->classes(); }
    std::string describe() const override { return data_->describe(); }
    std::string where(int64_t index) const override { return data_->where(index); }
    std::vector<std::string> classNames() const override { return data_->classNames(); }
    Sample get(int64_t index) const override { return getScaled(index, {}); }
    Sample getScaled(int64_t index, const DecodeScale& shrink) const override {
        checkIndex(*this, index);
        return data_->getScaled(index, shrink);
    }
    int32_t label(int64_t index) const override {
        checkIndex(*this, index);
        return data_->label(index);
    }

private:
    DatasetPtr data_;
    int64_t count_;
};

// The samples of `data` at `indices`, in that order.
class Subset : public Dataset {
public:
    Subset(DatasetPtr data, std::vector<int64_t> indices) : data_(std::move(data)), indices_(std::move(indices)) {}
    int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
    int64_t classes() const override { return data_->classes(); }
    std::string describe() const override { return data_->describe(); }
    std::vector<std::string> classNames() const override { return data_->classNames(); }
    std::string where(int64_t index) const override {
        checkIndex(*this, index);
        return data_->where(indices_[static_cast<size_t>(index)]);
    }
    Sample get(int64_t index) const override { return getScaled(index, {}); }
    Sample getScaled(int64_t index, const DecodeScale& shrink) const override {
        checkIndex(*this, index);
        return data_->getScaled(indices_[static_cast<size_t>(index)], shrink);
    }
    int32_t label(int64_t index) const override {
        checkIndex(*this, index);
        return data_->label(indices_[static_cast<size_t>(index)]);
    }

private:
    DatasetPtr data_;
    std::vector<int64_t> indices_;
};

// `data` with names for its classes.
class NamedClasses : public Dataset {
public:
    NamedClasses(DatasetPtr data, std::vector<std::string> names) : data_(std::move(data)), names_(std::move(names)) {}
    int64_t size() const override { return data_->size(); }
    int64_t classes() const override { return data_->classes(); }
    std::string describe() const override { return data_->describe(); }
    std::string where(int64_t index) const override { return data_->where(index); }
    std::vector<std::string> classNames() const override { return names_; }
    Sample get(int64_t index) const override { return data_->get(index); }
    Sample getScaled(int64_t index, const DecodeScale& shrink) const override {
        return data_->getScaled(index, shrink);
    }
    int32_t label(int64_t index) const override { return data_->label(index); }

private:
    DatasetPtr data_;
    std::vector<std::string> names_;
};

int64_t classesOf(const std::vector<int32_t>& labels) {
    int32_t top = -1;
    for (int32_t l : labels) top = std::max(top, l);
    return top + 1;
}

} // namespace

DatasetPtr cifar10(const std::string& dir, const std::string& split) {
    checkSplit("CIFAR-10 " + dir, split);
    std::vector<std::string> wanted;
    if (split == "train") {
        for (int b = 1; b <= 5; ++b) wanted.push_back("data_batch_" + std::to_string(b) + ".bin");
    } else {
        wanted.push_back("test_batch.bin");
    }
    CifarFiles files = cifarFiles(dir, "cifar-10-batches-bin", wanted, "CIFAR-10");
    const std::string root = files.bytes.empty() ? fs::path(files.names.front()).parent_path().string() : dir;
    return withClassNames(readCifar("CIFAR-10", std::move(files), 1, 0, 10, "CIFAR-10 " + root + " (" + split + ")"),
                          {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"});
}

DatasetPtr cifar100(const std::string& dir, const std::string& split, bool fine) {
    checkSplit("CIFAR-100 " + dir, split);
    CifarFiles files = cifarFiles(dir, "cifar-100-binary", {split + ".bin"}, "CIFAR-100");
    const std::string root = files.bytes.empty() ? fs::path(files.names.front()).parent_path().string() : dir;
    return readCifar("CIFAR-100", std::move(files), 2, fine ? 1 : 0, fine ? 100 : 20,
                     "CIFAR-100 " + root + " (" + split + (fine ? "" : ", coarse labels") + ")");
}

DatasetPtr imageFolder(const std::string& dir, int channels) {
    if (channels != 1 && channels != 3) {
        throw IoError("image folder " + dir + ": channels must be 1 or 3, got " + std::to_string(channels));
    }
    return folderDataset(dir, channels);
}

DatasetPtr imageList(const std::string& csv, const ImageListOptions& options) {
    const std::string what = "image list " + csv;
    if (options.channels != 1 && options.channels != 3) {
        throw IoError(what + ": channels must be 1 or 3, got " + std::to_string(options.channels));
    }
    const std::vector<uint8_t> bytes = data_detail::readFile(csv, "image list");
    const std::string text(bytes.begin(), bytes.end());
    // A .txt list: "FILE CLASS" lines, the class the last word (mmcls's and many ImageNet
    // lists), read as a CSV with a header of its own.
    const bool words = fs::path(csv).extension() == ".txt";
    if (words && (!options.pathColumn.empty() || !options.labelColumn.empty())) {
        throw IoError(what + ": a .txt list has no named columns (FILE CLASS lines); pathColumn and labelColumn are "
                             "for CSV files");
    }
    const auto rows = words ? wordRows(text, what) : csvRows(text, what);
    if (rows.empty()) {
        throw IoError(what + (words ? ": empty (expected FILE CLASS lines)"
                                    : ": empty (expected a header row naming the columns, then a row per image)"));
    }
    const std::vector<std::string>& header = rows.front().second;
    auto column = [&](const std::string& name, size_t otherwise) {
        if (name.empty()) {
            if (header.size() <= otherwise) {
                throw IoError(what + ": its header names " + std::to_string(header.size()) +
                              " column(s); the file and the class need two");
            }
            return otherwise;
        }
        const auto it = std::find(header.begin(), header.end(), name);
        if (it == header.end()) {
            std::string names;
            for (const std::string& h : header) names += (names.empty() ? "" : ", ") + h;
            throw IoError(what + ": no column '" + name + "' (its header names " + names + ")");
        }
        return static_cast<size_t>(it - header.begin());
    };
    const size_t pathAt = column(options.pathColumn, 0), labelAt = column(options.labelColumn, 1);
    const fs::path base = fs::path(csv).parent_path();
    std::vector<std::pair<std::string, std::string>> listed; // file, class text
    std::vector<int64_t> lines;
    for (size_t r = 1; r < rows.size(); ++r) {
        const auto& [line, fields] = rows[r];
        const std::string where = what + " line " + std::to_string(line);
        if (fields.size() <= std::max(pathAt, labelAt)) {
            throw IoError(where + ": " + std::to_string(fields.size()) + " field(s), the header names " +
                          std::to_string(header.size()));
        }
        const std::string& file = fields[pathAt];
        const std::string& label = fields[labelAt];
        if (file.empty() || label.empty()) throw IoError(where + ": an empty file name or class");
        const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : base / file;
        std::error_code error; // a name too long, say: not found either
        if (!fs::is_regular_file(p, error)) {
            throw IoError(where + ": image " + p.string() + " not found" + (error ? " (" + error.message() + ")" : ""));
        }
        listed.emplace_back(p.string(), label);
        lines.push_back(line);
    }
    if (listed.empty()) throw IoError(what + ": lists no image");
    // The classes: those given; else 0..max when every class is a whole number, else the
    // names in sorted order (as imageFolder orders its folders).
    std::vector<std::string> names = options.classes;
    if (names.empty()) {
        if (std::all_of(listed.begin(), listed.end(), [](const auto& l) { return isWholeNumber(l.second); })) {
            int64_t top = 0;
            for (size_t i = 0; i < listed.size(); ++i) {
                top = std::max<int64_t>(top, std::stoll(listed[i].second));
                if (top >= kMaxListedClasses) {
                    throw IoError(what + " line " + std::to_string(lines[i]) + ": class " + listed[i].second +
                                  ": whole-number classes run from 0 to the largest, at most " +
                                  std::to_string(kMaxListedClasses - 1) + " (give names instead)");
                }
            }
            for (int64_t k = 0; k <= top; ++k) names.push_back(std::to_string(k));
        } else {
            for (const auto& l : listed) names.push_back(l.second);
            std::sort(names.begin(), names.end());
            names.erase(std::unique(names.begin(), names.end()), names.end());
        }
    }
    std::map<std::string, int32_t> index;
    for (size_t k = 0; k < names.size(); ++k) index.emplace(names[k], static_cast<int32_t>(k));
    std::vector<std::pair<std::string, int32_t>> samples;
    for (size_t i = 0; i < listed.size(); ++i) {
        const std::string& label = listed[i].second;
        auto it = index.find(label);
        if (it == index.end() && isWholeNumber(label)) it = index.find(std::to_string(std::stoll(label))); // 007: 7
        if (it == index.end()) {
            throw IoError(what + " line " + std::to_string(lines[i]) + ": class '" + listed[i].second +
                          "' is not one of the " + std::to_string(names.size()) + " classes given");
        }
        samples.emplace_back(std::move(listed[i].first), it->second);
    }
    return std::make_shared<FileDataset>(what, std::move(samples), std::move(names), options.channels);
}

DatasetPtr idxDataset(const std::string& dir, const std::string& split, int64_t limit) {
    const ImageSet set = loadMnistFormat(dir, split, limit);
    return tensorDataset(set.images, set.labels, 0, "IDX " + dir + " (" + split + ")");
}

DatasetPtr npyDataset(const std::string& imagesPath, const std::string& labelsPath) {
    // uint8 images are read as bytes, one per pixel, as the data set keeps them.
    Shape s;
    const std::string dtype = npyDtype(imagesPath, &s);
    std::vector<uint8_t> bytes;
    Tensor images;
    if (dtype == "uint8") {
        bytes = readNpyBytes(imagesPath, s);
    } else {
        images = readNpy(imagesPath);
        s = images.shape();
    }
    const Tensor labels = readNpy(labelsPath);
    if (s.rank() != 3 && s.rank() != 4) {
        throw IoError("npy file " + imagesPath + ": images must be [N, C, H, W] or [N, H, W], got " + s.str());
    }
    if (labels.dtype() != DType::int32 || labels.shape().rank() != 1) {
        throw IoError("npy file " + labelsPath + ": labels must be integers of shape [N], got " + labels.shape().str() +
                      " " + str(labels.dtype()));
    }
    if (labels.shape()[0] != s[0]) {
        throw IoError("npy files " + imagesPath + " and " + labelsPath + ": " + std::to_string(s[0]) + " images but " +
                      std::to_string(labels.shape()[0]) + " labels");
    }
    for (size_t d = 0; d < s.rank(); ++d) {
        if (s[d] == 0) throw IoError("npy file " + imagesPath + ": images of shape " + s.str() + " hold no pixels");
    }
    const std::vector<int32_t> l = labels.toVector<int32_t>();
    for (size_t i = 0; i < l.size(); ++i) {
        if (l[i] < 0) {
            throw IoError("npy file " + labelsPath + ": label " + std::to_string(i) + " is negative (" +
                          std::to_string(l[i]) + ")");
        }
    }
    const int64_t c = s.rank() == 4 ? s[1] : 1, h = s[s.rank() - 2], w = s[s.rank() - 1];
    auto d = std::make_shared<ArrayDataset>("npy " + imagesPath, c, h, w, l, classesOf(l),
                                            std::vector<ArrayDataset::File>{{0, imagesPath}});
    if (dtype == "uint8") {
        d->bytes = std::move(bytes);
    } else if (images.dtype() == DType::float32) {
        d->floats = images.reshape({s[0], c, h, w});
    } else {
        throw IoError("npy file " + imagesPath + ": images must be uint8, float32 or float64, got " + dtype);
    }
    return d;
}

DatasetPtr tensorDataset(const Tensor& images, const Tensor& labels, int64_t classes, const std::string& name) {
    if (!images.defined() || images.shape().rank() != 4 || images.dtype() != DType::float32 ||
        !images.device().isCpu()) {
        throw ShapeError("tensorDataset " + name + ": images must be a host float32 tensor [N, C, H, W], got " +
                         (images.defined() ? images.shape().str() + " " + str(images.dtype()) : "none"));
    }
    if (images.numel() == 0)
        throw ShapeError("tensorDataset " + name + ": images " + images.shape().str() + " hold no pixels");
    if (!labels.defined() || labels.shape().rank() != 1 || labels.dtype() != DType::int32 ||
        labels.shape()[0] != images.shape()[0]) {
        throw ShapeError("tensorDataset " + name + ": labels must be int32 [" + std::to_string(images.shape()[0]) +
                         "], got " + (labels.defined() ? labels.shape().str() + " " + str(labels.dtype()) : "none"));
    }
    const std::vector<int32_t> l = labels.toVector<int32_t>();
    const Shape& s = images.shape();
    auto d = std::make_shared<ArrayDataset>(name, s[1], s[2], s[3], l, classes > 0 ? classes : classesOf(l),
                                            std::vector<ArrayDataset::File>{});
    d->floats = images.plain();
    return d;
}

DatasetPtr firstSamples(DatasetPtr data, int64_t count) {
    if (count <= 0 || count >= data->size()) return data;
    return std::make_shared<FirstSamples>(std::move(data), count);
}

DatasetPtr firstOfEachClass(DatasetPtr data, int64_t count, std::vector<int64_t>* perClass) {
    const int64_t n = data->size(), classes = data->classes();
    std::vector<std::vector<int64_t>> byClass(static_cast<size_t>(std::max<int64_t>(classes, 1)));
    for (int64_t i = 0; i < n; ++i) {
        const int32_t label = data->label(i);
        if (label < 0 || label >= classes) {
            throw ShapeError("firstOfEachClass: " + data->where(i) + " has label " + std::to_string(label) +
                             ", outside [0, " + std::to_string(classes) + ")");
        }
        byClass[static_cast<size_t>(label)].push_back(i);
    }
    if (perClass) perClass->assign(byClass.size(), 0);
    if (count <= 0 || count >= n) {
        for (size_t c = 0; perClass && c < byClass.size(); ++c)
            (*perClass)[c] = static_cast<int64_t>(byClass[c].size());
        return data;
    }
    std::vector<int64_t> taken;
    for (size_t round = 0; static_cast<int64_t>(taken.size()) < count; ++round) {
        for (size_t c = 0; c < byClass.size() && static_cast<int64_t>(taken.size()) < count; ++c) {
            if (round >= byClass[c].size()) continue;
            taken.push_back(byClass[c][round]);
            if (perClass) ++(*perClass)[c];
        }
    }
    std::sort(taken.begin(), taken.end());
    return std::make_shared<Subset>(std::move(data), std::move(taken));
}

DatasetPtr withClassNames(DatasetPtr data, std::vector<std::string> names) {
    if (static_cast<int64_t>(names.size()) != data->classes()) {
        throw ShapeError("data set " + data->describe() + ": " + std::to_string(names.size()) + " class names for " +
                         std::to_string(data->classes()) + " classes");
    }
    return std::make_shared<NamedClasses>(std::move(data), std::move(names));
}

std::pair<DatasetPtr, DatasetPtr> holdOut(DatasetPtr data, int64_t count, uint64_t seed) {
    const int64_t n = data->size();
    if (count <= 0 || count >= n) {
        throw ShapeError("holdOut: the held-out count must lie in [1, " + std::to_string(n - 1) + "] for " +
                         std::to_string(n) + " samples, got " + std::to_string(count));
    }
    // The first `count` of a seeded Fisher-Yates shuffle are held out (salted: not the batch order).
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    const uint64_t stream = randomBits(seed ^ 0x7A11D47E5EEDull, 0);
    for (int64_t i = 0; i < count; ++i) {
        const auto j =
            i + static_cast<int64_t>(randomBits(stream, static_cast<uint64_t>(i)) % static_cast<uint64_t>(n - i));
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
    std::vector<int64_t> held(order.begin(), order.begin() + count), rest(order.begin() + count, order.end());
    std::sort(held.begin(), held.end());
    std::sort(rest.begin(), rest.end());
    return {std::make_shared<Subset>(data, std::move(rest)), std::make_shared<Subset>(data, std::move(held))};
}

} // namespace tessera
