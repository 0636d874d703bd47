#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <thread>

#include "GradCheck.h"
#include "SourceDir.h"
#include "containers/Sequential.h"
#include "io/Checksum.h"
#include "io/Factory.h"
#include "io/Hdf5.h"
#include "modules/Activation.h"
#include "modules/BatchNormND.h"
#include "modules/Conv.h"
#include "modules/Flatten.h"
#include "modules/Linear.h"

namespace tessera {
namespace {
using namespace testing;

std::string tempFile(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "tessera_h5";
    std::filesystem::create_directories(dir);
    return dir + "/" + name;
}

// conv -> batch norm -> relu -> flatten -> fc1 -> fc2, where fc2 shares fc1's weights.
std::shared_ptr<Sequential> model(uint64_t seed, int64_t hidden = 6) {
    manualSeed(seed);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Conv2D>(1, 2, 3, ConvOptions{.pad = {1}, .name = "conv"}));
    net->append(std::make_shared<BatchNorm2D>(2, BatchNormOptions{.name = "bn"}));
    net->append(std::make_shared<Activation>(ActivationKind::relu));
    net->append(std::make_shared<Flatten>());
    auto fc1 = std::make_shared<Linear>(2 * 3 * 3, hidden, LinearOptions{.name = "fc1"});
    auto fc2 = std::make_shared<Linear>(hidden, hidden, LinearOptions{.name = "fc2"});
    net->append(fc1);
    net->append(fc2);
    return net;
}

TEST(Hdf5, SaveLoadRoundTripWithAttributesAndSharedParameters) {
    auto a = model(1);
    // Share one weight between two modules: the file stores it once.
    auto shared = Variable::of(randomTensor({6, 6}, 3));
    a->getByName("fc2").setVar("W", shared);
    a->getByName("fc2").setVar("b", a->getByName("fc1").getVar("b"));
    (*a)(randomTensor({4, 1, 3, 3}, 4)); // a train-mode forward updates the running statistics
    const std::string path = tempFile("roundtrip.h5");
    saveModel(*a, path);
    EXPECT_TRUE(isHdf5File(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

    auto b = model(2);
    b->getByName("fc2").setVar("W", Variable::of(Tensor::zeros({6, 6})));
    loadModel(*b, path);
    const auto pa = a->namedParams(), pb = b->namedParams();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
        SCOPED_TRACE(pa[i].first);
        EXPECT_EQ(pb[i].second->data.toVector<float>(), pa[i].second->data.toVector<float>());
    }
    EXPECT_EQ(b->getByName("bn").getAttr("mean").toVector<float>(),
              a->getByName("bn").getAttr("mean").toVector<float>());
    // What the file stores once is one Variable again in the model it is loaded into, though
    // that model had two.
    EXPECT_EQ(b->getByName("fc2").getVar("b"), b->getByName("fc1").getVar("b"));
    EXPECT_EQ(b->numOfParams(), a->numOfParams());
    // The blueprint alone rebuilds the model, and loading shares its weights as saved.
    ModulePtr rebuilt = buildModule(blueprintFromJson(readBlueprint(path)));
    EXPECT_EQ(rebuilt->blueprint().toJson(), a->blueprint().toJson());
    EXPECT_NE(rebuilt->numOfParams(), a->numOfParams());
    loadModel(*rebuilt, path);
    EXPECT_EQ(rebuilt->numOfParams(), a->numOfParams());
}

// HDF5 stamps objects with their times by default; saves leave them out, so the same
// model saved a second later (times have whole seconds) is the same file, byte for byte.
TEST(Hdf5, TheSameModelSavesToTheSameBytes) {
    auto net = model(1);
    auto bytes = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string first = tempFile("same1.h5"), second = tempFile("same2.h5");
    saveModel(*net, first);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    saveModel(*net, second);
    const std::string a = bytes(first), b = bytes(second);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << "the two files differ (" << a.size() << " and " << b.size() << " bytes)";
}

// Saved in bfloat16 or float16: about half the file, and loading gives each float32
// parameter and attribute rounded to that type (to nearest even), exactly. h5py reads the
// float16 file as numpy's float16.
TEST(Hdf5, ClassNamesRoundTrip) {
    auto a = model(1);
    const std::string named = tempFile("named.h5"), plain = tempFile("plain.h5");
    const std::vector<std::string> names{"cat", "dog", "T-shirt/top", "\"quoted\", with, commas"};
    saveModel(*a, named, {.classes = names});
    saveModel(*a, plain);
    EXPECT_EQ(readClassNames(named), names);
    EXPECT_TRUE(readClassNames(plain).empty());
    auto b = model(2);
    loadModel(*b, named); // the names do not get in the weights' way
}

TEST(Hdf5, TransformsRoundTrip) {
    auto a = model(1);
    const std::string with = tempFile("transforms.h5"), without = tempFile("no_transforms.h5");
    const std::string text = "resize:32x32,center:28,normalize:0.5/0.5/0.5:0.25/0.25/0.25";
    saveModel(*a, with, {.classes = {"a", "b"}, .transforms = text});
    saveModel(*a, without);
    EXPECT_EQ(readTransforms(with), text);
    EXPECT_EQ(readClassNames(with), (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(readTransforms(without).empty());
    auto b = model(2);
    loadModel(*b, with); // they do not get in the weights' way
}

TEST(Hdf5, SavesInBfloat16AndFloat16) {
    auto a = model(1, 512); // mostly fc2's 512 x 512 weights, so the metadata does not count
    (*a)(randomTensor({4, 1, 3, 3}, 4));
    const std::string full = tempFile("full.h5");
    saveModel(*a, full);
    for (DType t : {DType::bfloat16, DType::float16}) {
        SCOPED_TRACE(str(t));
        const std::string path = tempFile("half_" + str(t) + ".h5");
        saveModel(*a, path, {.dtype = t, .inputs = {}});
        EXPECT_LT(std::filesystem::file_size(path), std::filesystem::file_size(full) * 0.6);
        auto b = model(2, 512);
        loadModel(*b, path);
        const auto pa = a->namedParams(), pb = b->namedParams();
        for (size_t i = 0; i < pa.size(); ++i) {
            EXPECT_EQ(pb[i].second->data.toVector<float>(), pa[i].second->data.astype(t).toVector<float>())
                << pa[i].first;
            EXPECT_EQ(pb[i].second->data.dtype(), DType::float32);
        }
        EXPECT_EQ(b->getByName("bn").getAttr("var").toVector<float>(),
                  a->getByName("bn").getAttr("var").astype(t).toVector<float>());
        // A parameter held in the file's 16-bit type loads into that type (the reader sends
        // float32; the value is the one saved).
        auto c = model(2, 512);
        c->getByName("fc2").setVar("W", Variable::of(Tensor::zeros({512, 512}).astype(t)));
        loadModel(*c, path);
        const Tensor w = c->getByName("fc2").getVar("W")->data;
        EXPECT_EQ(w.dtype(), t);
        EXPECT_EQ(w.toVector<float>(), a->getByName("fc2").getVar("W")->data.astype(t).toVector<float>());
    }
    if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") == 0) {
        const std::string cmd = "/usr/bin/python3 -c \"import h5py, sys; f = h5py.File(sys.argv[1]); "
                                "assert str(f['params/0'].dtype) == 'float16', f['params/0'].dtype\" '" +
                                tempFile("half_float16.h5") + "'";
        EXPECT_EQ(std::system(cmd.c_str()), 0);
    }
    EXPECT_THROW(saveModel(*a, tempFile("int.h5"), {.dtype = DType::int32, .inputs = {}}), IoError);
}

TEST(Hdf5, StrictLoadReportsEveryMismatchAndCopiesNothing) {
    auto a = model(1);
    const std::string path = tempFile("strict.h5");
    saveModel(*a, path, {.blueprint = false, .dtype = DType::float32, .inputs = {}});
    auto wider = model(2, 8); // fc1 [18, 8], fc2 [8, 8]: three shape mismatches
    const std::vector<float> before = wider->getByName("conv").getVar("W")->data.toVector<float>();
    const std::string msg = errorOf([&] { loadModel(*wider, path); });
    EXPECT_NE(msg.find("nothing was loaded"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter fc1.W: file has [18, 6], model has [18, 8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter fc2.W: file has [6, 6], model has [8, 8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter fc2.b: file has [6], model has [8]"), std::string::npos) << msg;
    EXPECT_EQ(wider->getByName("conv").getVar("W")->data.toVector<float>(), before);
    EXPECT_NE(errorOf([&] { readBlueprint(path); }).find("holds no blueprint"), std::string::npos);
}

TEST(Hdf5, LenientLoadSkipsNamesOnOneSide) {
    auto a = model(1);
    const std::string path = tempFile("lenient.h5");
    saveModel(*a, path);
    auto extra = model(2);
    extra->append(std::make_shared<Linear>(6, 2, LinearOptions{.name = "head"}));
    EXPECT_NE(errorOf([&] { loadModel(*extra, path); }).find("parameter head.W: not in the file"), std::string::npos);
    loadModel(*extra, path, LoadMode::lenient);
    EXPECT_EQ(extra->getByName("fc1").getVar("W")->data.toVector<float>(),
              a->getByName("fc1").getVar("W")->data.toVector<float>());
}

TEST(Hdf5, BadFilesAreClearErrors) {
    auto a = model(1);
    EXPECT_NE(errorOf([&] { loadModel(*a, tempFile("missing.h5")); }).find("no such file"), std::string::npos);
    const std::string text = tempFile("text.h5");
    std::ofstream(text) << "not a model";
    EXPECT_NE(errorOf([&] { loadModel(*a, text); }).find("not an HDF5 file"), std::string::npos);
    const std::string good = tempFile("good.h5");
    saveModel(*a, good);
    const auto size = std::filesystem::file_size(good);
    const std::string cut = tempFile("truncated.h5");
    std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, size / 2);
    const std::string msg = errorOf([&] { loadModel(*a, cut); });
    EXPECT_NE(msg.find("model file " + cut), std::string::npos) << msg;
}

// A save that fails leaves no temporary behind and the old file untouched.
TEST(Hdf5, FailedSaveLeavesNoTemporary) {
    auto a = model(1);
    const std::string dir = tempFile("a_directory.h5");
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / std::filesystem::path("inside")); // a non-empty directory
    const std::string e = errorOf([&] { saveModel(*a, dir); });
    EXPECT_NE(e.find("model file " + dir + " is a directory"), std::string::npos) << e;
    EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
    EXPECT_TRUE(std::filesystem::is_directory(dir + "/inside"));
    EXPECT_NE(errorOf([&] { saveModel(*a, "/nonexistent/dir/model.h5"); }).find("cannot create"), std::string::npos);
    const std::string good = tempFile("kept.h5");
    saveModel(*a, good);
    saveModel(*model(2), good); // replaced whole
    auto b = model(3);
    loadModel(*b, good);
    EXPECT_EQ(b->namedParams()[0].second->data.toVector<float>(),
              model(2)->namedParams()[0].second->data.toVector<float>());
    EXPECT_FALSE(std::filesystem::exists(good + ".tmp"));
}

// A variable-length blueprint string (files of earlier versions, and h5py's strings) is
// read through HDF5's global heap, whose reader crashes on a corrupt heap index: the read
// runs in a child process, so the crash becomes an error naming the file. The same file
// uncorrupted reads. (tests/data/corrupt_heap_blueprint.h5: one byte of
// vlen_blueprint.h5's heap changed, found by mutating it.)
TEST(Hdf5, CorruptHeapIsAnErrorNotACrash) {
    const std::string dir = tessera::testing::sourceDir() + "/tests/data/";
    const std::string bp = readBlueprint(dir + "vlen_blueprint.h5");
    EXPECT_NE(bp.find("\"Sequential\""), std::string::npos) << bp;
    // The reader process crashes or fails on it, or (after other reads in that process left
    // libhdf5's heap caches in another state) reads the blueprint as empty: an error each way.
    const std::string e = errorOf([&] { readBlueprint(dir + "corrupt_heap_blueprint.h5"); });
    EXPECT_TRUE(e.find("corrupt_heap_blueprint.h5: is unreadable: the HDF5 library ") != std::string::npos ||
                e.find("corrupt_heap_blueprint.h5: is unreadable: its blueprint is empty") != std::string::npos)
        << e;
}

// The reader is a program of its own (tessera-child, started by posix_spawn), not a fork of
// this process, whose other threads might hold locks the fork would wait on forever.
TEST(Hdf5, TheReaderIsTheChildProgramNotAFork) {
    const std::string dir = tessera::testing::sourceDir() + "/tests/data/";
    ASSERT_NE(readBlueprint(dir + "vlen_blueprint.h5").find("\"Sequential\""), std::string::npos);
    std::vector<std::string> children;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string pid = entry.path().filename().string();
        if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream stat(entry.path() / "stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const size_t close = text.rfind(')'); // "pid (comm) state ppid ..."
        if (close == std::string::npos) continue;
        char state = 0;
        long ppid = 0;
        if (std::sscanf(text.c_str() + close + 1, " %c %ld", &state, &ppid) != 2 || ppid != getpid()) continue;
        std::error_code ec;
        children.push_back(std::filesystem::read_symlink(entry.path() / "exe", ec).filename().string());
    }
    EXPECT_NE(std::find(children.begin(), children.end(), "tessera-child"), children.end())
        << "children of this process: " << ::testing::PrintToString(children);
}

// h5py reads what Tessera writes, and Tessera reads what h5py writes.
// The input shapes a model was saved for come back; files without them give none; a
// malformed entry (written by another tool) is an IoError naming the file.
TEST(Hdf5, InputShapesRoundTrip) {
    auto a = model(1);
    const std::string path = tempFile("with_inputs.h5");
    saveModel(*a, path, {.inputs = {Shape{1, 1, 8, 8}, Shape{4, 7}}});
    EXPECT_EQ(readInputShapes(path), (Shapes{Shape{1, 1, 8, 8}, Shape{4, 7}}));
    const std::string plain = tempFile("without_inputs.h5");
    saveModel(*a, plain);
    EXPECT_TRUE(readInputShapes(plain).empty());
    if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) {
        GTEST_SKIP() << "/usr/bin/python3 cannot import h5py (Debian's python3-h5py; tools/setup.sh installs it)";
    }
    for (const char* bad : {"1x-3", "1xx2", "2x3;", "abc"}) {
        const std::string cmd = "/usr/bin/python3 -c \"import h5py; f = h5py.File('" + path +
                                "', 'a'); del f['inputs']; f['inputs'] = '" + bad + "'\"";
        ASSERT_EQ(std::system(cmd.c_str()), 0);
        try {
            (void)readInputShapes(path);
            ADD_FAILURE() << bad << " read";
        } catch (const IoError& e) {
            EXPECT_NE(std::string(e.what()).find("with_inputs.h5"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("malformed"), std::string::npos) << e.what();
        }
    }
}

// Batch norm's batches seen (which sets its running-average factor) travel with the model:
// training on from a model file updates the running statistics exactly as training on
// without the file would, instead of restarting the average at the next batch.
TEST(Hdf5, TrainingCountersRoundTrip) {
    auto trained = model(1);
    auto* bn = dynamic_cast<BatchNorm2D*>(&trained->getByName("bn"));
    ASSERT_NE(bn, nullptr);
    const Tensor x = randomTensor({4, 1, 3, 3}, 2), y = randomTensor({4, 1, 3, 3}, 3, 5.0f, 9.0f);
    for (int i = 0; i < 3; ++i) trained->getByName("bn")(trained->getByName("conv")(x));
    ASSERT_EQ(*bn->namedCounters().at(0).second, 3);
    const std::string path = tempFile("counters.h5");
    saveModel(*trained, path);

    auto loaded = model(7); // other weights, no batches seen
    loadModel(*loaded, path);
    ASSERT_EQ(loaded->namedCounters().size(), 1u);
    EXPECT_EQ(loaded->namedCounters()[0].first, "bn.batches");
    EXPECT_EQ(*loaded->namedCounters()[0].second, 3);
    // One more batch, of other statistics, on both: the same running mean and variance. Had
    // the count restarted, the loaded model's mean would be this batch's alone.
    for (auto* net : {trained.get(), loaded.get()}) net->getByName("bn")(net->getByName("conv")(y));
    for (const char* attr : {"mean", "var"}) {
        const std::vector<float> want = trained->getByName("bn").getAttr(attr).toVector<float>();
        EXPECT_TRUE(allClose(loaded->getByName("bn").getAttr(attr), want, 0.0f)) << attr;
    }

    // A file without counters (as written before they were saved) leaves the model's own.
    if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) {
        GTEST_SKIP() << "/usr/bin/python3 cannot import h5py (Debian's python3-h5py; tools/setup.sh installs it)";
    }
    auto edit = [&](const std::string& statement) {
        const std::string cmd =
            "/usr/bin/python3 -c \"import h5py; f = h5py.File('" + path + "', 'a'); " + statement + "\"";
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    };
    edit("del f['counters']");
    auto older = model(7);
    *older->namedCounters()[0].second = 11;
    loadModel(*older, path);
    EXPECT_EQ(*older->namedCounters()[0].second, 11);
    // Malformed counters are errors naming the file and the counter; nothing is loaded.
    for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
             {"{\\\"bn.batches\\\": -1}", "counter bn.batches: file has -1, not a count"},
             {"{\\\"bn.batches\\\": 2.5}", "counter bn.batches: file has 2.5, not a count"},
             {"{\\\"bn.count\\\": 4}", "counter bn.count: in the file but not in the model"},
             {"[3]", "training counters are not a JSON object"},
             {"{3", "training counters are not a JSON object"}}) {
        edit("f.pop('counters', None); f['counters'] = '" + text + "'");
        auto fresh = model(7);
        const std::string error = errorOf([&] { loadModel(*fresh, path); });
        EXPECT_NE(error.find("counters.h5"), std::string::npos) << error;
        EXPECT_NE(error.find(expected), std::string::npos) << text << ": " << error;
        EXPECT_EQ(*fresh->namedCounters()[0].second, 0) << text;
    }
    // Lenient loading skips a counter the model does not have.
    edit("f.pop('counters', None); f['counters'] = '{\\\"bn.count\\\": 4}'");
    auto fresh = model(7);
    loadModel(*fresh, path, LoadMode::lenient);
    EXPECT_EQ(*fresh->namedCounters()[0].second, 0);
}

TEST(Hdf5, InteroperatesWithH5py) {
    const std::string script = tessera::testing::sourceDir() + "/tests/io/h5py_interop.py";
    if (!std::filesystem::exists(script)) GTEST_SKIP() << script << " not found; set TESSERA_SOURCE_DIR";
    if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) {
        GTEST_SKIP() << "/usr/bin/python3 cannot import h5py (Debian's python3-h5py; tools/setup.sh installs it)";
    }
    auto a = model(1);
    a->getByName("fc2").setVar("b", a->getByName("fc1").getVar("b")); // shared: stored once
    const std::string ours = tempFile("for_h5py.h5");
    saveModel(*a, ours);
    const std::string listing = tempFile("h5py_listing.txt");
    ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " verify " + ours + " > " + listing).c_str()), 0);
    std::ifstream in(listing);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(all.find("conv.W 0 2x1x3x3"), std::string::npos) << all;
    EXPECT_NE(all.find("fc1.b 5 6"), std::string::npos) << all;
    EXPECT_NE(all.find("fc2.b 5 6"), std::string::npos) << all; // the same dataset
    EXPECT_NE(all.find("fc2.W 6 6x6"), std::string::npos) << all;
    EXPECT_NE(all.find("attr bn.mean 2"), std::string::npos) << all;
    EXPECT_NE(all.find("blueprint {\"classname\": \"Sequential\""), std::string::npos) << all;

    const std::string theirs = tempFile("from_h5py.h5");
    ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " write " + theirs).c_str()), 0);
    Linear fc(3, 2, {.name = "fc"});
    Sequential net;
    net.append(std::shared_ptr<Linear>(&fc, [](Linear*) {}));
    loadModel(net, theirs);
    EXPECT_EQ(fc.getVar("W")->data.toVector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(fc.getVar("b")->data.toVector<float>(), (std::vector<float>{10, 20}));
}

// Every array carries a Fletcher-32 checksum: one flipped sign bit in a stored weight (a
// bit rot that keeps the file valid HDF5) is an error naming the array, not a model that
// quietly computes something else.
TEST(Hdf5, AFlippedBitInAnArrayIsAChecksumError) {
    auto a = model(1);
    Tensor w = a->getByName("fc1").getVar("W")->data;
    std::vector<float> values(static_cast<size_t>(w.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f + 0.001f * static_cast<float>(i); // a findable run
    a->getByName("fc1").setVar("W", Variable::of(Tensor::fromVector(w.shape(), values)));
    const std::string path = tempFile("checksummed.h5");
    saveModel(*a, path);
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::string run(reinterpret_cast<const char*>(values.data()), 16 * sizeof(float));
    const size_t at = bytes.find(run);
    ASSERT_NE(at, std::string::npos) << "fc1.W's bytes are stored as they are";
    bytes[at + 5 * sizeof(float) + 3] = static_cast<char>(bytes[at + 5 * sizeof(float) + 3] ^ 0x80); // a sign bit
    const std::string flipped = tempFile("flipped.h5");
    std::ofstream(flipped, std::ios::binary) << bytes;
    auto b = model(2);
    const std::string e = errorOf([&] { loadModel(*b, flipped); });
    EXPECT_NE(e.find("model file " + flipped), std::string::npos) << e;
    EXPECT_NE(e.find("checksum"), std::string::npos) << e;
    EXPECT_NE(e.find("params/"), std::string::npos) << e; // the array by its place in the file
    loadModel(*b, path);                                  // the untouched file loads
    EXPECT_EQ(b->getByName("fc1").getVar("W")->data.toVector<float>(), values);
}

// The reader checks the chunks Tessera saved with its own Fletcher-32 (and reads them
// without libhdf5's buffer): it must give the bits libhdf5's filter stores after each chunk,
// at the lengths where its blocks of 360 words end and with words that make its sums wrap.
TEST(Hdf5, ChecksumsMatchTheOnesLibhdf5Stores) {
    // Bytes whose words are the largest a word can be, as floats NaN (saved, but refused at
    // load), then finite ones: large words, then noise.
    auto pattern = [state = uint32_t{7}](int64_t n, bool ones) mutable {
        std::string bytes(static_cast<size_t>(n) * 4, '\0');
        for (size_t i = 0; i < bytes.size(); ++i) {
            state = state * 1664525u + 1013904223u;
            const char noise = static_cast<char>(i % 4 == 3 ? (state >> 24) & 0xbf : state >> 24); // no NaN
            bytes[i] = ones ? '\xff' : i < bytes.size() / 2 ? "\xff\xff\x7f\x7f"[i % 4] : noise;
        }
        return bytes;
    };
    auto save = [](const std::vector<std::string>& patterns, const std::string& path) {
        FileExtras extras;
        extras.record = "{}";
        for (const std::string& bytes : patterns) {
            Tensor t = Tensor::empty(Shape({static_cast<int64_t>(bytes.size() / 4)}), DType::float32);
            std::memcpy(t.raw(), bytes.data(), bytes.size());
            extras.tensors.emplace_back("t" + std::to_string(extras.tensors.size()), t);
        }
        saveModel(*model(1), path, SaveOptions{}, extras);
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    std::vector<std::string> finite;
    for (int64_t n : {1, 2, 89, 90, 91, 179, 180, 181, 1000, 5000}) finite.push_back(pattern(n, false)); // 2 words each
    const std::vector<std::string> ones = {pattern(180, true), pattern(5000, true)};
    for (const auto& patterns : {finite, ones}) {
        const std::string file = save(patterns, tempFile("checksums.h5"));
        for (const std::string& bytes : patterns) {
            const size_t at = file.find(bytes);
            ASSERT_NE(at, std::string::npos) << bytes.size() << " bytes are stored as they are";
            ASSERT_LE(at + bytes.size() + 4, file.size());
            const auto* b = reinterpret_cast<const unsigned char*>(file.data() + at + bytes.size());
            const uint32_t stored = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
            EXPECT_EQ(io_detail::fletcher32(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()), stored)
                << bytes.size() << " bytes";
        }
    }
    // Read back (the last file saved holds NaN, refused): every bit as saved.
    save(finite, tempFile("checksums.h5"));
    const FileExtras back = loadExtras(tempFile("checksums.h5"));
    ASSERT_EQ(back.tensors.size(), finite.size());
    for (const auto& [name, t] : back.tensors) {
        const std::string& bytes = finite.at(std::stoul(name.substr(1)));
        ASSERT_EQ(static_cast<size_t>(t.numel()) * 4, bytes.size()) << name;
        EXPECT_EQ(std::memcmp(t.raw(), bytes.data(), bytes.size()), 0) << name;
    }
}

// A NaN or an infinity in a stored parameter is refused at load, naming the array: such a
// model gives NaN for every input.
TEST(Hdf5, NonFiniteParametersAreRefusedOnLoad) {
    auto a = model(1);
    a->getByName("conv").getVar("W")->data.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
    const std::string path = tempFile("nan.h5");
    saveModel(*a, path);
    auto b = model(2);
    const std::string e = errorOf([&] { loadModel(*b, path); });
    EXPECT_NE(e.find("1 non-finite value (NaN or infinity)"), std::string::npos) << e;
    a->getByName("conv").getVar("W")->data.data<float>()[2] = 0.5f;
    saveModel(*a, path);
    loadModel(*b, path);
}

// A save writes through a symbolic link to the file it names (the link stays a link), and
// never replaces a device, a directory or a pipe.
TEST(Hdf5, SavesWriteThroughLinksAndRefuseDevices) {
    auto a = model(1);
    const std::string real = tempFile("real.h5"), link = tempFile("link.h5");
    std::filesystem::remove(link);
    saveModel(*model(3), real);
    std::filesystem::create_symlink(real, link);
    saveModel(*a, link);
    EXPECT_TRUE(std::filesystem::is_symlink(link));
    EXPECT_FALSE(std::filesystem::exists(link + ".tmp"));
    EXPECT_FALSE(std::filesystem::exists(real + ".tmp"));
    auto b = model(2);
    loadModel(*b, real);
    EXPECT_EQ(b->getByName("fc1").getVar("W")->data.toVector<float>(),
              a->getByName("fc1").getVar("W")->data.toVector<float>());
    const std::string e = errorOf([&] { saveModel(*a, "/dev/null"); });
    EXPECT_NE(e.find("model file /dev/null is a character device"), std::string::npos) << e;
    EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

} // namespace
} // namespace tessera
