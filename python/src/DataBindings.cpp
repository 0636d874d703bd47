// Data sets, transforms and the background Loader; training checkpoints.
#include "Bindings.h"
#include "backend/Errors.h"
#include "data/Dataset.h"
#include "data/Image.h"
#include "data/Loader.h"
#include "data/Text.h"
#include "data/Transform.h"
#include "models/Transformer.h"
#include "training/Average.h"
#include "training/Checkpoint.h"
#include "training/Handlers.h"

namespace tessera::python {

std::string transformsText(const py::handle& transforms) {
    if (transforms.is_none()) return {};
    if (py::isinstance<Transforms>(transforms)) return transforms.cast<const Transforms&>().str();
    if (py::isinstance<py::str>(transforms)) {
        const std::string text = transforms.cast<std::string>();
        return text.empty() ? text : Transforms::parse(text).str();
    }
    throw py::type_error("transforms must be a tessera.Transforms or its text, got " +
                         std::string(py::str(transforms.get_type().attr("__name__"))));
}

namespace {

// An image as a [C, H, W] float32 array of its own.
py::array imageArray(const Image& image) {
    py::array_t<float> a({image.channels, image.height, image.width});
    std::copy(image.pixels.begin(), image.pixels.end(), a.mutable_data());
    return a;
}

// An array [C, H, W] as an image; ShapeError naming `what` for another rank.
Image imageOf(const py::array_t<float, py::array::c_style | py::array::forcecast>& image, const std::string& what) {
    if (image.ndim() != 3) {
        throw ShapeError(what + ": expects an image [C, H, W], got " + std::to_string(image.ndim()) + " dimensions");
    }
    Image in(image.shape(0), image.shape(1), image.shape(2));
    std::copy(image.data(), image.data() + image.size(), in.pixels.begin());
    return in;
}

// Data sets are const; pybind11 holds them through a non-const shared pointer.
using DatasetHolder = std::shared_ptr<Dataset>;
DatasetHolder held(DatasetPtr p) { return std::const_pointer_cast<Dataset>(std::move(p)); }

} // namespace

void bindData(py::module_& m) {
    py::class_<Dataset, DatasetHolder>(m, "Dataset", "Samples (an image and a class label) by index; docs/data.md.")
        .def("__len__", &Dataset::size)
        .def(
            "__getitem__",
            [](const Dataset& d, int64_t i) {
                if (i < 0) i += d.size();
                if (i < 0 || i >= d.size()) {
                    throw py::index_error(d.describe() + ": no sample " + std::to_string(i) + " (it has " +
                                          std::to_string(d.size()) + ")");
                }
                Sample s;
                {
                    py::gil_scoped_release nogil;
                    s = d.get(i);
                }
                return py::make_tuple(imageArray(s.image), s.label);
            },
            py::arg("index"), "(image [C, H, W] float32 array, label) of one sample.")
        .def_property_readonly("classes", &Dataset::classes)
        .def_property_readonly("classNames", &Dataset::classNames,
                               "The classes' names in label order (an image folder's sub-folders); [] if unnamed.")
        .def("where", &Dataset::where, py::arg("index"), "The file (and record) sample `index` comes from.")
        .def("__repr__", &Dataset::describe);

    m.def(
        "cifar10", [](const std::string& dir, const std::string& split) { return held(cifar10(dir, split)); },
        py::arg("dir"), py::arg("split") = "train",
        "CIFAR-10's binary files (data_batch_*.bin / test_batch.bin) in dir, or in the archive dir as "
        "distributed (cifar-10-binary.tar.gz, read without unpacking); split 'train' or 'test'.");
    m.def(
        "cifar100",
        [](const std::string& dir, const std::string& split, bool fine) { return held(cifar100(dir, split, fine)); },
        py::arg("dir"), py::arg("split") = "train", py::arg("fine") = true,
        "CIFAR-100's binary files (train.bin / test.bin) in dir or in the archive dir "
        "(cifar-100-binary.tar.gz); fine: the 100 fine labels, else the 20 coarse ones.");
    m.def(
        "imageFolder", [](const std::string& dir, int channels) { return held(imageFolder(dir, channels)); },
        py::arg("dir"), py::arg("channels") = 3,
        "JPEG and PNG files in one sub-folder per class (classes in sorted order), decoded on demand.");
    m.def(
        "imageList",
        [](const std::string& csv, int channels, const std::string& pathColumn, const std::string& labelColumn,
           const std::vector<std::string>& classes) {
            return held(imageList(
                csv, {.channels = channels, .pathColumn = pathColumn, .labelColumn = labelColumn, .classes = classes}));
        },
        py::arg("csv"), py::arg("channels") = 3, py::arg("pathColumn") = "", py::arg("labelColumn") = "",
        py::arg("classes") = std::vector<std::string>(),
        "Images listed in a CSV file with a header row: each row's file (relative to the CSV's folder) and class "
        "(by default the first two columns; classes: the names in label order, else whole numbers 0..max or the "
        "sorted names). A .txt file holds FILE CLASS lines instead, without a header.");
    m.def(
        "imageArchive",
        [](const std::string& path, const std::string& split, int channels) {
            return held(imageArchive(path, split, channels));
        },
        py::arg("path"), py::arg("split"), py::arg("channels") = 3,
        "An image folder inside a tar or zip archive: the images under <split>/<class>/, read on demand.");
    m.def(
        "idxDataset",
        [](const std::string& dir, const std::string& split, int64_t limit) {
            return held(idxDataset(dir, split, limit));
        },
        py::arg("dir"), py::arg("split") = "train", py::arg("limit") = 0);
    py::class_<TextCorpus>(m, "TextCorpus",
                           "Byte ids of text files (readTextCorpus): train and heldOut as int32 arrays.")
        .def_property_readonly("train",
                               [](const TextCorpus& c) { return py::array_t<int32_t>(c.train.size(), c.train.data()); })
        .def_property_readonly(
            "heldOut", [](const TextCorpus& c) { return py::array_t<int32_t>(c.heldOut.size(), c.heldOut.data()); })
        .def_readonly("entries", &TextCorpus::entries)
        .def_readonly("files", &TextCorpus::files)
        .def_readonly("dropped", &TextCorpus::dropped)
        .def_readonly("what", &TextCorpus::what)
        .def("__repr__", [](const TextCorpus& c) {
            return "tessera.TextCorpus(" + c.what + ": " + std::to_string(c.train.size()) + " training and " +
                   std::to_string(c.heldOut.size()) + " held-out ids)";
        });
    m.def(
        "readTextCorpus",
        [](const std::string& path, int64_t vocabulary, int64_t heldOutEvery) {
            return readTextCorpus(path, {.vocabulary = vocabulary, .heldOutEvery = heldOutEvery});
        },
        py::arg("path"), py::arg("vocabulary") = 128, py::arg("heldOutEvery") = 10,
        "A text file, or a folder of them, as byte ids: entries split at lines of only '%' (fortune files) "
        "or at blank lines, every heldOutEvery-th entry held out, bytes at or over vocabulary dropped.");
    m.def(
        "nextIdWindows",
        [](const py::handle& ids, int64_t length) {
            const Tensor t = toTensor(ids).convertedTo(DType::int32);
            const std::vector<int32_t> v = t.toVector<int32_t>();
            auto [x, y] = nextIdWindows(v, length);
            return py::make_tuple(x, y);
        },
        py::arg("ids"), py::arg("length"),
        "(x, y), int32 [windows, length] each: x = ids[w L, w L + L), y the same one further, for a language "
        "model's next-id training.");
    m.def(
        "sampleText",
        [](Module& net, const std::string& prompt, int64_t context, int64_t count, float temperature, uint64_t seed) {
            py::gil_scoped_release release;
            return sampleText(net, prompt, context, {.count = count, .temperature = temperature, .seed = seed});
        },
        py::arg("net"), py::arg("prompt"), py::arg("context"), py::arg("count") = 200, py::arg("temperature") = 0.8f,
        py::arg("seed") = 1,
        "The prompt continued by `count` characters that a language model over byte ids (gpt-mini) draws, "
        "one at a time, from the softmax of its scores divided by `temperature`.");
    m.def(
        "npyDataset",
        [](const std::string& images, const std::string& labels) { return held(npyDataset(images, labels)); },
        py::arg("images"), py::arg("labels"));
    m.def(
        "tensorDataset",
        [](const py::handle& images, const py::handle& labels, int64_t classes, const std::string& name) {
            return held(tensorDataset(toTensor(images), toTensor(labels), classes, name));
        },
        py::arg("images"), py::arg("labels"), py::arg("classes") = 0, py::arg("name") = "tensors",
        "Images [N, C, H, W] float32 and labels [N] int32 (arrays or tensors) as a data set.");
    m.def(
        "firstSamples", [](const DatasetHolder& data, int64_t count) { return held(firstSamples(data, count)); },
        py::arg("data"), py::arg("count"));
    m.def(
        "firstOfEachClass",
        [](const DatasetHolder& data, int64_t count) {
            std::vector<int64_t> perClass;
            DatasetPtr part = firstOfEachClass(data, count, &perClass);
            return py::make_tuple(held(std::move(part)), perClass);
        },
        py::arg("data"), py::arg("count"),
        "(part, per_class): `count` samples taken from the classes in turn (each class's first, then each "
        "one's second, ...), in the data's order, and how many of each class.");
    m.def(
        "holdOut",
        [](const DatasetHolder& data, int64_t count, uint64_t seed) {
            auto [rest, heldOut] = holdOut(data, count, seed);
            return py::make_tuple(held(rest), held(heldOut));
        },
        py::arg("data"), py::arg("count"), py::arg("seed") = 0,
        "(rest, held_out): `count` samples drawn by `seed` held out for validation, each part in the data's order.");

    py::class_<Transforms>(m, "Transforms", R"(Seeded image transforms, applied in order:
Transforms("crop:32:4,flip,normalize:cifar10") or Transforms().randomCrop(32, 32, 4).flip().)")
        .def(py::init([](const std::string& spec) { return spec.empty() ? Transforms() : Transforms::parse(spec); }),
             py::arg("spec") = "")
        .def("resize", &Transforms::resize, py::arg("height"), py::arg("width") = 0, py::return_value_policy::reference)
        .def("randomCrop", &Transforms::randomCrop, py::arg("height"), py::arg("width"), py::arg("pad") = 0,
             py::return_value_policy::reference)
        .def("centerCrop", &Transforms::centerCrop, py::arg("height"), py::arg("width"),
             py::return_value_policy::reference)
        .def("flip", &Transforms::flip, py::arg("p") = 0.5, py::return_value_policy::reference)
        .def("normalize", &Transforms::normalize, py::arg("mean"), py::arg("std"), py::return_value_policy::reference)
        .def("randomResizedCrop", &Transforms::randomResizedCrop, py::arg("height"), py::arg("width"),
             py::arg("scale") = 0.08, py::return_value_policy::reference)
        .def("rotate", &Transforms::rotate, py::arg("degrees"), py::return_value_policy::reference)
        .def(
            "affine",
            [](Transforms& t, double degrees, double translate, std::pair<double, double> scale,
               double shear) -> Transforms& { return t.affine(degrees, translate, scale.first, scale.second, shear); },
            py::arg("degrees"), py::arg("translate") = 0.0, py::arg("scale") = std::make_pair(1.0, 1.0),
            py::arg("shear") = 0.0, py::return_value_policy::reference,
            "torchvision's RandomAffine: rotation up to degrees, shift up to translate of the size, zoom in "
            "scale=(lo, hi), x-shear up to shear degrees.")
        .def_static(
            "warp",
            [](const py::array_t<float, py::array::c_style | py::array::forcecast>& image, double degrees,
               std::pair<double, double> translate, double scale, double shear) {
                return imageArray(Transforms::warped(imageOf(image, "Transforms.warp"), degrees, translate.first,
                                                     translate.second, scale, shear));
            },
            py::arg("image"), py::arg("degrees") = 0.0, py::arg("translate") = std::make_pair(0.0, 0.0),
            py::arg("scale") = 1.0, py::arg("shear") = 0.0,
            "An image [C, H, W] warped as the affine step does (torchvision's affine with angle=-degrees).")
        .def("trivialAugment", &Transforms::trivialAugment, py::return_value_policy::reference,
             "torchvision's TrivialAugmentWide: one of 14 operations at one of 31 magnitudes per image.")
        .def("randAugment", &Transforms::randAugment, py::arg("ops") = 2, py::arg("magnitude") = 9,
             py::return_value_policy::reference,
             "torchvision's RandAugment: ops operations per image at magnitude bin magnitude (0..30).")
        .def_static("augmentMagnitudes", &Transforms::augmentMagnitudes, py::arg("policy"), py::arg("op"),
                    py::arg("height"), py::arg("width"),
                    "The 31 magnitudes of op in policy (trivial or randaugment) for an image of height x width, and "
                    "whether it takes a sign.")
        .def_static(
            "augmentOp",
            [](const py::array_t<float, py::array::c_style | py::array::forcecast>& image, const std::string& op,
               double magnitude) {
                return imageArray(Transforms::augmentOp(imageOf(image, "Transforms.augmentOp"), op, magnitude));
            },
            py::arg("image"), py::arg("op"), py::arg("magnitude") = 0.0,
            "One of torchvision's automatic-augmentation operations (ShearX, ..., Equalize) on an image [C, H, W] "
            "with values in [0, 1], on 8-bit levels as torchvision applies it to uint8 images.")
        .def("erase", &Transforms::erase, py::arg("p") = 0.5, py::arg("minScale") = 0.02, py::arg("maxScale") = 0.33,
             py::return_value_policy::reference,
             "Random erasing: with probability p, a box of [minScale, maxScale] of the area set to zero.")
        .def("jitter", &Transforms::jitter, py::arg("brightness"), py::arg("contrast") = 0.0,
             py::arg("saturation") = 0.0, py::arg("hue") = 0.0, py::return_value_policy::reference)
        .def(
            "apply",
            [](const Transforms& t, const py::object& image, bool train, int channels, uint64_t seed, int64_t epoch,
               int64_t index) {
                Image in;
                if (py::isinstance<py::str>(image)) {
                    const std::string path = image.cast<std::string>();
                    if (channels != 1 && channels != 3) {
                        throw ShapeError("Transforms.apply: channels must be 1 or 3, got " + std::to_string(channels));
                    }
                    py::gil_scoped_release nogil;
                    // decoded smaller where the transforms allow, as the Loader and tessera predict decode it
                    in = readImage(path, channels, t.decodeScale(train, seed, epoch, index));
                } else {
                    in = imageOf(image.cast<py::array_t<float, py::array::c_style | py::array::forcecast>>(),
                                 "Transforms.apply");
                }
                return imageArray(t.apply(std::move(in), seed, epoch, index, train));
            },
            py::arg("image"), py::arg("train") = false, py::arg("channels") = 3, py::arg("seed") = 0,
            py::arg("epoch") = 0, py::arg("index") = 0,
            R"(The transforms applied to one image: an array [C, H, W] (pixels in 0..1, as the
data sets give them) or an image file (JPEG, PNG; decoded as `channels` channels).
train=False applies them as to a test set (random crops centred, no flips or other random
steps), as tessera predict and eval do; train=True draws the random ones from (seed,
epoch, index). Returns an array [C, H, W].)")
        .def("__len__", [](const Transforms& t) { return t.steps().size(); })
        .def("__repr__", [](const Transforms& t) { return "tessera.Transforms('" + t.str() + "')"; });

    py::class_<Loader>(m, "Loader", R"(Batches of a data set, made by worker threads while steps run, in the same
order for any number of workers. loader.epoch(e) iterates over (images, labels) batches.
mixup=A and cutmix=A (Beta alphas; 0: off) mix each training batch with itself reversed; its
labels are then float32 probabilities [B, classes] (classes: 0 for the data set's, or a
model's wider score count), which CrossEntropy takes as targets. scaledDecode=True decodes
JPEGs at M/8 of their size where the first transform (a resize, a random-resized crop)
shrinks them anyway: several times faster on large photos; False decodes every image whole.
balanced=True draws each epoch's samples with replacement, every class equally likely.)")
        .def(py::init([](const DatasetHolder& data, const py::object& transforms, int64_t batchsize, bool shuffle,
                         uint64_t seed, bool train, int workers, int prefetch, bool flatten, bool pinned, int rank,
                         int ranks, float mixup, float cutmix, int64_t classes, bool scaledDecode, bool balanced) {
                 if (batchsize <= 0)
                     throw ModuleError("Loader: batchsize must be positive, got " + std::to_string(batchsize));
                 Transforms t = transforms.is_none() ? Transforms() : transforms.cast<Transforms>();
                 return std::make_unique<Loader>(data, std::move(t),
                                                 LoaderOptions{.batchsize = batchsize,
                                                               .shuffle = shuffle,
                                                               .seed = seed,
                                                               .train = train,
                                                               .workers = workers,
                                                               .prefetch = prefetch,
                                                               .flatten = flatten,
                                                               .pinned = pinned,
                                                               .rank = rank,
                                                               .ranks = ranks,
                                                               .mixup = mixup,
                                                               .cutmix = cutmix,
                                                               .classes = classes,
                                                               .scaledDecode = scaledDecode,
                                                               .balanced = balanced});
             }),
             py::arg("data"), py::arg("transforms") = py::none(), py::kw_only(), py::arg("batchsize") = 128,
             py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("train") = true, py::arg("workers") = 0,
             py::arg("prefetch") = 0, py::arg("flatten") = false, py::arg("pinned") = false, py::arg("rank") = 0,
             py::arg("ranks") = 1, py::arg("mixup") = 0.0f, py::arg("cutmix") = 0.0f, py::arg("classes") = 0,
             py::arg("scaledDecode") = true, py::arg("balanced") = false, py::keep_alive<1, 2>())
        .def("__len__", &Loader::batches, "Batches per epoch.")
        .def_property_readonly("samples", &Loader::size)
        .def_property_readonly("sampleShape", [](const Loader& l) { return fromShape(l.sampleShape()); })
        .def("start", &Loader::start, py::arg("epoch"), py::arg("first") = 0,
             "Begin epoch `epoch` at batch `first`; next() then hands its batches out in order.")
        .def(
            "next",
            [](Loader& l) -> py::object {
                std::optional<DataBatch> b;
                {
                    py::gil_scoped_release nogil;
                    b = l.next();
                }
                if (!b) return py::none();
                return py::make_tuple(b->images, b->labels);
            },
            "The next batch (images, labels) of the epoch begun, or None after its last.")
        .def_property_readonly("waitingSeconds", &Loader::waitingSeconds);

    py::class_<WeightAverage, std::shared_ptr<WeightAverage>>(
        m, "WeightAverage",
        "An exponential moving average of a model's weights: update() after each step; swap() to evaluate or save "
        "the averaged model, swap() again to go on training.")
        .def(py::init<Module&, float>(), py::arg("net"), py::arg("decay") = 0.999f, py::keep_alive<1, 2>())
        .def("update", &WeightAverage::update, py::call_guard<py::gil_scoped_release>())
        .def("swap", &WeightAverage::swap, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("swapped", &WeightAverage::swapped)
        .def_property_readonly("decay", &WeightAverage::decay)
        .def_property_readonly("currentDecay", &WeightAverage::currentDecay)
        .def_property_readonly("updates", &WeightAverage::updates);
    m.def(
        "saveCheckpoint",
        [](const std::string& path, const Module& net, const Optimizer& optimizer, const Trainer* trainer,
           const WeightAverage* average, const std::string& notes) {
            py::gil_scoped_release nogil;
            if (trainer) {
                saveCheckpoint(path, net, optimizer, *trainer, average, notes);
            } else {
                saveCheckpoint(path, net, optimizer, average, notes);
            }
        },
        py::arg("path"), py::arg("net"), py::arg("optimizer"), py::arg("trainer") = nullptr,
        py::arg("average") = nullptr, py::arg("notes") = "",
        "Everything a run needs to continue bit-identically, in one HDF5 file written atomically; without a "
        "trainer (a loop of your own) no position is kept; `notes`: text of your own, which loadCheckpoint "
        "returns.");
    m.def(
        "loadCheckpoint",
        [](const std::string& path, Module& net, Optimizer& optimizer, Trainer* trainer, WeightAverage* average) {
            std::string notes;
            {
                py::gil_scoped_release nogil;
                if (trainer) {
                    loadCheckpoint(path, net, optimizer, *trainer, average, &notes);
                } else {
                    loadCheckpoint(path, net, optimizer, average, &notes);
                }
            }
            return notes;
        },
        py::arg("path"), py::arg("net"), py::arg("optimizer"), py::arg("trainer") = nullptr,
        py::arg("average") = nullptr,
        "Restores a checkpoint (without a trainer: all but a trainer's position); returns the notes saved with it "
        "(\"\" when none).");
}

} // namespace tessera::python
