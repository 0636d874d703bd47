#pragma once
/// \file Data sets: numbered samples (an image and a class label) read on demand, from
/// CIFAR-10/100 binary files, a folder of JPEG and PNG files per class, MNIST-format IDX
/// files, a pair of NumPy `.npy` files, or tensors in memory. `Loader` (data/Loader.h)
/// turns one into batches.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/Tensor.h"
#include "data/Image.h"

namespace tessera {

/// A sample: its image and its class.
struct Sample {
    Image image;
    int32_t label = 0;
};

/// Samples 0 .. size()-1. `get` may be called from several threads at once.
class Dataset {
public:
    virtual ~Dataset() = default;
    virtual int64_t size() const = 0;
    /// Sample `index` (0 <= index < size(), else ShapeError). IoError naming the file for a
    /// sample that cannot be read.
    virtual Sample get(int64_t index) const = 0;
    /// get(index), its image decoded smaller where `shrink` allows it (a JPEG's DCT
    /// scaling; see DecodeScale). What does not decode files ignores `shrink`.
    virtual Sample getScaled(int64_t index, const DecodeScale& shrink) const {
        (void)shrink;
        return get(index);
    }
    /// The class of sample `index`: get(index).label, without decoding an image where the
    /// data set knows it (files, archives, arrays).
    virtual int32_t label(int64_t index) const { return get(index).label; }
    /// The number of classes (labels lie in [0, classes())).
    virtual int64_t classes() const = 0;
    /// Where sample `index` comes from, for messages: a file, or a file and a record.
    virtual std::string where(int64_t index) const = 0;
    /// What this is, for a log line: "CIFAR-10 /data/cifar (train)".
    virtual std::string describe() const = 0;
    /// The classes' names in label order (an image folder's sub-folders, CIFAR-10's
    /// "airplane", ...); empty when the data does not name them.
    virtual std::vector<std::string> classNames() const { return {}; }
};

using DatasetPtr = std::shared_ptr<const Dataset>;

/// CIFAR-10's binary version: `<dir>/data_batch_1.bin` .. `data_batch_5.bin` (split
/// "train") or `<dir>/test_batch.bin` (split "test"), each a run of 3,073-byte records
/// (label, then 32x32 red, green and blue planes). The directory may also be the one
/// holding `cifar-10-batches-bin/`, or the archive as distributed: `dir` a tar file, gzip-
/// compressed or not (`cifar-10-binary.tar.gz`), whose members of those names (at its top or
/// in one folder) are read in one pass without unpacking. Read into memory at once; IoError
/// naming the file (or `archive:member`) for a missing file, a size that is not a whole
/// number of records, or a label over 9, and naming the archive for a damaged one.
DatasetPtr cifar10(const std::string& dir, const std::string& split);

/// CIFAR-100's binary version: `<dir>/train.bin` or `<dir>/test.bin` (or under
/// `<dir>/cifar-100-binary/`, or in the tar or `.tar.gz` archive `dir`, as cifar10 reads
/// it), 3,074-byte records (coarse label, fine label, pixels). `fine` picks the 100 fine
/// classes, else the 20 coarse ones.
DatasetPtr cifar100(const std::string& dir, const std::string& split, bool fine = true);

/// One sub-folder per class, named as the class; class k is the k-th name in sorted
/// order, and its samples are the folder's `.jpg`, `.jpeg` and `.png` files (any case),
/// in sorted order, searched recursively (torchvision's `ImageFolder` labels the same way).
/// Images are decoded when asked for, into `channels` channels (1 or 3). IoError for a
/// missing folder, a folder without class sub-folders, or one whose classes hold no image.
DatasetPtr imageFolder(const std::string& dir, int channels = 3);

/// Where imageList finds what it needs in its CSV file.
struct ImageListOptions {
    int channels = 3;                   ///< decode to 1 or 3 channels
    std::string pathColumn{};           ///< the column of image files, by its header name (empty: the first)
    std::string labelColumn{};          ///< the column of classes (empty: the second)
    std::vector<std::string> classes{}; ///< the class names in label order (empty: from the file)
};

/// Images listed in a CSV file (RFC 4180; a header row naming the columns first, as Kaggle's
/// `train.csv` files have): each row's image file (relative to the CSV file's folder, or
/// absolute; JPEG or PNG) and its class. A `.txt` file is a list of "FILE CLASS" lines
/// instead (no header; the class is the last word, the file what comes before it), as
/// mmcls and many ImageNet lists are written. The classes are `options.classes` when given
/// (labels of the file must be among them, by name); else 0 .. the largest when every
/// class is a whole number, else the class names in sorted order. Every file is checked to
/// exist at once; images are decoded when asked for. IoError naming the file and line for
/// a malformed row, a missing column, image or class.
DatasetPtr imageList(const std::string& csv, const ImageListOptions& options = {});

/// An image folder inside a tar or zip archive (told apart by their bytes): the images
/// under `<split>/<class>/` (at the archive's top, or under one top folder), classes and
/// images in sorted order as imageFolder takes them. The members are listed at once and
/// each image is read and decoded when asked for (stored or deflated zip members; plain
/// tar). A gzip-compressed tar (`.tar.gz`) is read in one pass instead, the split's image
/// files held in memory (8 GiB at most) and decoded when asked for. IoError naming the
/// archive for one that is malformed, truncated or holds no such images, and naming
/// the member for one that cannot be decoded.
DatasetPtr imageArchive(const std::string& path, const std::string& split, int channels = 3);

/// MNIST-format IDX files `<dir>/<split>-images-idx3-ubyte[.gz]` and labels (split "train"
/// or "t10k"), as data/Idx.h reads them; `limit` > 0 keeps the first `limit` samples.
DatasetPtr idxDataset(const std::string& dir, const std::string& split, int64_t limit = 0);

/// A pair of `.npy` files: images [N, C, H, W] or [N, H, W] (one channel) of uint8 (scaled
/// by 1/255) or float32/float64 (taken as they are), and labels [N] of integers. IoError
/// naming the file for a bad file, a rank other than 3 or 4, a count mismatch or a negative
/// label.
DatasetPtr npyDataset(const std::string& imagesPath, const std::string& labelsPath);

/// Host tensors already in memory: images [N, C, H, W] float32 and labels [N] int32.
/// `classes` 0: one more than the largest label.
DatasetPtr tensorDataset(const Tensor& images, const Tensor& labels, int64_t classes = 0,
                         const std::string& name = "tensors");

/// The first `count` samples of `data` (all when it has fewer).
DatasetPtr firstSamples(DatasetPtr data, int64_t count);

/// `count` samples of `data` taken from its classes in turn: each class's first sample (in
/// the data's order), then each class's second, ..., a class that has run out skipped; in
/// the data's order. A folder sorted by class thus gives every class its share (all of
/// `data` when it has no more than `count`). `perClass`, when given, gets the number taken
/// of each class.
DatasetPtr firstOfEachClass(DatasetPtr data, int64_t count, std::vector<int64_t>* perClass = nullptr);

/// `data` with these names for its classes (classNames); ShapeError unless there is one
/// per class.
DatasetPtr withClassNames(DatasetPtr data, std::vector<std::string> names);

/// The names of Fashion-MNIST's ten classes, in label order.
inline std::vector<std::string> fashionMnistClassNames() {
    return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
}

/// `data` split in two for validation: {the rest, `count` held-out samples}, the held-out
/// ones drawn at random by `seed` (the same for the same seed), each part in the data's
/// own order. ShapeError unless 0 < count < data->size().
std::pair<DatasetPtr, DatasetPtr> holdOut(DatasetPtr data, int64_t count, uint64_t seed);

} // namespace tessera
