#include "io/Onnx.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include "GradCheck.h"
#include "SourceDir.h"
#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "models/LeNet.h"
#include "models/Zoo.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Attention.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/DropPath.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/GatherElements.h"
#include "modules/Gelu.h"
#include "modules/GridSample.h"
#include "modules/Identity.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MatMul.h"
#include "modules/MulAddConst.h"
#include "modules/MultiheadAttention.h"
#include "modules/NoiseInjector.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/PoolND.h"
#include "modules/PositionalEncoding.h"
#include "modules/Pow.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Replicate.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/Tile.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera {
namespace {
using namespace testing;
namespace fs = std::filesystem;

const char* kTestData = "/usr/share/libonnx-testdata/data";

// Whether /usr/bin/python3 imports onnx: the tests that write their models with it skip
// where it does not.
bool pythonHasOnnx() {
    static const bool has = std::system("/usr/bin/python3 -c 'import onnx' > /dev/null 2>&1") == 0;
    return has;
}
#define SKIP_WITHOUT_PYTHON_ONNX()                                                                                     \
    if (!pythonHasOnnx()) GTEST_SKIP() << "/usr/bin/python3 cannot import onnx (tools/setup.sh installs python3-onnx)"

// Runs `script` (Python that saves ONNX models to its arguments) as `name`.py, with one
// path in the test's directory per name in `files` as its arguments: those paths, or none
// when the script failed.
std::vector<std::string> writtenModels(const std::string& name, const std::string& script,
                                       const std::vector<std::string>& files) {
    const fs::path dir = fs::path(::testing::TempDir()), path = dir / (name + ".py");
    std::ofstream(path) << script;
    std::string command = "/usr/bin/python3 '" + path.string() + "'";
    std::vector<std::string> paths;
    for (const std::string& file : files) {
        paths.push_back((dir / file).string());
        command += " '" + paths.back() + "'";
    }
    if (std::system(command.c_str()) != 0) return {};
    return paths;
}

// The message of the IoError importing `path` throws ("" when it imports).
std::string importRefusalOf(const std::string& path) {
    try {
        importOnnx(path);
        return {};
    } catch (const IoError& e) {
        return e.what();
    }
}

// Runs `script` (Python that saves an ONNX model to sys.argv[1]) as `name`.py and imports the
// model it writes: the message of the IoError the import throws ("" when it imports).
std::string importRefusal(const std::string& name, const std::string& script) {
    const std::vector<std::string> model = writtenModels(name, script, {name + ".onnx"});
    if (model.empty()) return "the script " + name + ".py failed";
    return importRefusalOf(model[0]);
}

// Each of `parts` is in `msg`.
void expectParts(const std::string& msg, std::initializer_list<const char*> parts) {
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << part << " not in:\n" << msg;
}

// tests/io/onnx_expected_failures.txt: `suite/case: reason` lines.
std::map<std::string, std::string> expectedFailures() {
    std::map<std::string, std::string> out;
    std::ifstream file(tessera::testing::sourceDir() + "/tests/io/onnx_expected_failures.txt");
    std::string line;
    while (std::getline(file, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t colon = line.find(':');
        out[line.substr(0, colon)] = colon == std::string::npos ? "" : line.substr(colon + 1);
    }
    return out;
}

std::string sanitized(std::string name) {
    for (char& c : name) {
        if (c == '.' || c == ':' || c == '/') c = '_';
    }
    return name;
}

// The case's result: "" when every output of every test data set matches (rtol 1e-3, atol
// 1e-7, ONNX's defaults), else what went wrong. The inputs an op needs as constants (ONNX's
// node tests give weights as inputs) are taken from the data set.
// ONNX's checker (Debian's python3-onnx), full check, accepts the file at `path`.
::testing::AssertionResult checkerAccepts(const std::string& path) {
    const std::string cmd =
        "/usr/bin/python3 -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)' '" +
        path + "'";
    if (std::system(cmd.c_str()) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "onnx.checker rejects " << path;
}

std::string runCase(const fs::path& model, const fs::path& dir) {
    const std::vector<std::string> names = onnxInputNames(model.string());
    std::string unreadable; // an input of a type Tessera does not read (uint8, int8, a sequence)
    for (const auto& set : fs::directory_iterator(dir)) {
        if (!set.is_directory() || set.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
        OnnxImportOptions options;
        for (size_t k = 0; k < names.size(); ++k) {
            const fs::path p = set.path() / ("input_" + std::to_string(k) + ".pb");
            try {
                if (fs::exists(p)) options.inputValues[names[k]] = readOnnxTensor(p.string());
            } catch (const IoError&) { // a type Tessera does not read: an input it must not need
                unreadable = names[k];
            }
        }
        std::shared_ptr<Graph> g;
        try {
            g = importOnnx(model.string(), options);
        } catch (const IoError& e) {
            if (unreadable.empty()) throw;
            throw IoError("tensor data type of input '" + unreadable + "' is not one Tessera reads (" + e.what() + ")");
        }
        g->evalMode(); // ONNX's test outputs are inference outputs
        Tensors inputs;
        for (const NodePtr& in : g->inputs()) {
            bool found = false;
            for (const std::string& n : names) {
                if (!found && sanitized(n) == in->name() && options.inputValues.count(n)) {
                    inputs.push_back(options.inputValues.at(n));
                    found = true;
                }
            }
            if (!found && !unreadable.empty()) {
                throw IoError("tensor data type of input '" + unreadable + "' is not one Tessera reads");
            }
            if (!found) return "no data for input " + in->name();
        }
        const Tensors outputs = (*g)(inputs);
        for (size_t k = 0; k < outputs.size(); ++k) {
            const fs::path p = set.path() / ("output_" + std::to_string(k) + ".pb");
            if (!fs::exists(p)) return "no expected output " + std::to_string(k);
            const Tensor expected = readOnnxTensor(p.string());
            if (expected.shape() != outputs[k].shape() && !(expected.shape().rank() == 0 && outputs[k].numel() == 1)) {
                return "output " + std::to_string(k) + " has shape " + outputs[k].shape().str() + ", expected " +
                       expected.shape().str();
            }
            if ((expected.dtype() == DType::int32) != (outputs[k].dtype() == DType::int32)) {
                return "output " + std::to_string(k) + " is " + str(outputs[k].dtype()) + ", expected " +
                       str(expected.dtype());
            }
            auto floats = [](const Tensor& t) { // integer indices compared as the floats they equal
                return (t.dtype() == DType::int32 ? t.convertedTo(DType::float32) : t).toVector<float>();
            };
            const std::vector<float> got = floats(outputs[k]), want = floats(expected);
            for (size_t i = 0; i < got.size(); ++i) {
                if (std::isnan(got[i]) && std::isnan(want[i])) continue; // NaN where ONNX has NaN (sqrt of -1)
                if (!(std::fabs(got[i] - want[i]) <= 1e-7f + 1e-3f * std::fabs(want[i]))) {
                    std::ostringstream s;
                    s << "output " << k << " element " << i << ": " << got[i] << ", expected " << want[i];
                    return s.str();
                }
            }
        }
    }
    return "";
}

// ONNX's own backend test cases (Debian's libonnx-testdata): every case that imports runs
// and matches, or is listed in tests/io/onnx_expected_failures.txt with its reason; a case
// whose ops are all imported but that does not import must be listed too. A listed case
// that passes fails the test, so the list stays true.
TEST(Onnx, ConformanceWithOnnxsOwnTestCases) {
    if (!fs::exists(kTestData)) GTEST_SKIP() << kTestData << " is missing (tools/setup.sh installs libonnx-testdata)";
    const auto listed = expectedFailures();
    int imported = 0, passed = 0, notImported = 0, listedFailures = 0;
    std::vector<std::string> problems;
    std::map<std::string, std::pair<int, int>> perPrefix; // op family -> (passed, imported)
    for (const char* suite : {"node", "pytorch-converted", "pytorch-operator"}) {
        const fs::path root = fs::path(kTestData) / suite;
        if (!fs::exists(root)) continue;
        std::vector<fs::path> cases;
        for (const auto& c : fs::directory_iterator(root)) cases.push_back(c.path());
        std::sort(cases.begin(), cases.end());
        for (const fs::path& dir : cases) {
            const std::string name = std::string(suite) + "/" + dir.filename().string();
            const fs::path model = dir / "model.onnx";
            if (!fs::exists(model)) continue;
            std::string result;
            try {
                result = runCase(model, dir);
                ++imported;
            } catch (const Error& e) {
                const std::string msg = e.what();
                // Not one of ours: some op is not one Tessera imports, or the case's data
                // type is not one Tessera computes in.
                const bool unsupportedOp =
                    msg.find(": op ") != std::string::npos && msg.find(" is not supported") != std::string::npos;
                if (unsupportedOp || msg.find("opset") != std::string::npos ||
                    msg.find("tensor data type") != std::string::npos ||
                    msg.find("int64 values outside the int32 range") != std::string::npos) {
                    ++notImported;
                    if (listed.count(name)) problems.push_back(name + " is listed but is not an imported op's case");
                    continue;
                }
                result = msg;
            }
            std::string family = dir.filename().string();
            family = family.substr(0, family.find('_', 5));
            auto& [ok, all] = perPrefix[family];
            ++all;
            if (result.empty()) {
                ++ok;
                ++passed;
                if (listed.count(name)) problems.push_back(name + " passes but is listed as an expected failure");
            } else if (listed.count(name)) {
                ++listedFailures;
                // The listed reason must still be why: "Op: what" is node '...' (Op): what.
                std::string reason = listed.at(name);
                reason.erase(0, reason.find_first_not_of(' '));
                const size_t colon = reason.find(": ");
                const std::string op = colon == std::string::npos ? "" : reason.substr(0, colon);
                const bool isOp = !op.empty() && op.find(' ') == std::string::npos;
                const std::string want = isOp ? "(" + op + "): " + reason.substr(colon + 2) : reason;
                if (result.find(want) == std::string::npos) {
                    problems.push_back(name + " fails for another reason than the listed one: " + result +
                                       " (listed: " + reason + ")");
                }
            } else {
                problems.push_back(name + ": " + result);
            }
        }
    }
    std::printf("ONNX conformance: %d cases of imported ops (%d imported), %d pass, %d listed failures; %d cases "
                "use ops Tessera does not import\n",
                passed + listedFailures + static_cast<int>(problems.size()), imported, passed, listedFailures,
                notImported);
    for (const auto& [family, counts] : perPrefix) {
        std::printf("  %-40s %d / %d\n", family.c_str(), counts.first, counts.second);
    }
    EXPECT_GT(passed, 50);
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    EXPECT_TRUE(problems.empty()) << problems.size() << " problem(s):" << all;
}

// Op forms ONNX's data has no passing case of (Resize/Upsample nearest, Tile along one dim)
// and the forms exporters write (computed shapes, gates, scalar arithmetic: see the script),
// with expected outputs computed by NumPy from the operator definitions
// (tests/io/onnx_extra_cases.py, with Debian's python3-onnx).
TEST(Onnx, ExtraCasesAgainstNumpy) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string script = tessera::testing::sourceDir() + "/tests/io/onnx_extra_cases.py";
    const fs::path root = fs::path(::testing::TempDir()) / "onnx_extra_cases";
    fs::remove_all(root);
    ASSERT_EQ(std::system(("/usr/bin/python3 '" + script + "' '" + root.string() + "'").c_str()), 0);
    int cases = 0;
    for (const auto& c : fs::directory_iterator(root)) {
        ++cases;
        std::string result;
        try {
            result = runCase(c.path() / "model.onnx", c.path());
        } catch (const Error& e) {
            result = e.what();
        }
        EXPECT_EQ(result, "") << c.path().filename().string();
        // Attention (onnx_attention_cases.py): one ScaledDotProductAttention where the name
        // says fused (causal where it says so), none where it says separate.
        const std::string name = c.path().filename().string();
        if (name.rfind("attention_", 0) != 0) continue;
        int fused = 0, causal = 0;
        const std::shared_ptr<Graph> g = importOnnx((c.path() / "model.onnx").string());
        for (const auto& [n, m] : g->namedChildren()) {
            if (const auto* a = dynamic_cast<const ScaledDotProductAttention*>(m)) {
                ++fused;
                causal += a->options().causal ? 1 : 0;
            }
        }
        const bool wantFused = name.rfind("attention_fused_", 0) == 0;
        EXPECT_EQ(fused, wantFused ? 1 : 0) << name;
        EXPECT_EQ(causal, wantFused && name.find("causal") != std::string::npos ? 1 : 0) << name;
        const bool bias = name.find("learned_bias") != std::string::npos;
        const bool through = name.find("over_positions") != std::string::npos ||
                             name.find("transposed_in") != std::string::npos ||
                             name.find("baddbmm") != std::string::npos || name.find("einsum") != std::string::npos;
        if (!bias && !through) continue;
        // A learned bias trains in the fused layer as in the separate ones (an Add of a
        // Parameter): the same input gradients and the same gradient of the bias; so do the
        // forms read through transposes or Einsums and baddbmm's scores plus zeros.
        Tensors x;
        for (int i = 0; i < 3; ++i) {
            x.push_back(
                readOnnxTensor((c.path() / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")).string()));
        }
        std::vector<std::vector<float>> grads[2];
        for (bool one : {true, false}) {
            OnnxImportOptions options;
            options.attention = one;
            const std::shared_ptr<Graph> net = importOnnx((c.path() / "model.onnx").string(), options);
            net->trainMode();
            const Tensor y = (*net)(x)[0];
            std::vector<float> dy(static_cast<size_t>(y.numel()));
            for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::sin(0.7f * static_cast<float>(i));
            const Tensors dx = net->backward(Tensors{Tensor::fromVector(y.shape(), dy)});
            const NamedVariables params = net->namedParams();
            ASSERT_EQ(params.size(), bias ? 1u : 0u) << name; // the bias, as a Parameter either way
            auto& r = grads[one ? 0 : 1];
            ASSERT_EQ(dx.size(), 3u) << name;
            for (const Tensor& g : dx) r.push_back(g.toVector<float>());
            if (bias) r.push_back(params.begin()->second->grad.toVector<float>());
        }
        for (size_t i = 0; i < grads[0].size(); ++i) {
            const Tensor a = Tensor::fromVector({static_cast<int64_t>(grads[0][i].size())}, grads[0][i]);
            EXPECT_TRUE(allClose(a, grads[1][i], 1e-5f)) << name << ": gradient " << i;
        }
    }
    EXPECT_EQ(cases, 145);
}

TEST(Onnx, BadFilesAreIoErrorsNamingThem) {
    const std::string dir = ::testing::TempDir();
    const std::string junk = dir + "junk.onnx";
    std::ofstream(junk) << "not a protobuf at all \x01\x02\x03";
    EXPECT_THROW(importOnnx(dir + "missing.onnx"), IoError);
    try {
        importOnnx(junk);
        FAIL() << "junk imported";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("junk.onnx"), std::string::npos) << e.what();
    }
    EXPECT_THROW(readOnnxTensor(junk), IoError);
    // A directory, and a model cut short (its last weights' bytes missing): errors naming
    // the file, from the import and from the readers of inputs and metadata alike.
    const std::string msg = errorOf([&] { importOnnx(dir); });
    EXPECT_NE(msg.find(dir), std::string::npos) << msg;
    manualSeed(3);
    ModulePtr net = loadLeNet();
    const std::string whole = dir + "lenet-whole.onnx", cut = dir + "lenet-cut.onnx";
    exportOnnx(*net, {{1, 1, 28, 28}}, whole);
    std::filesystem::copy_file(whole, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, std::filesystem::file_size(whole) - 1000);
    for (const auto& read :
         std::vector<std::function<void()>>{[&] { importOnnx(cut); }, [&] { onnxInputShapes(cut); },
                                            [&] { onnxInputNames(cut); }, [&] { onnxClassNames(cut); }}) {
        const std::string what = errorOf(read);
        EXPECT_NE(what.find("lenet-cut.onnx: not a valid ONNX"), std::string::npos) << what;
    }
    EXPECT_EQ(onnxInputShapes(whole), (std::vector<std::vector<int64_t>>{{-1, 1, 28, 28}}));
    EXPECT_TRUE(isOnnxPath("a/b.onnx"));
    EXPECT_FALSE(isOnnxPath("a/b.h5"));
}

// A model read from a pipe (not mapped: read whole) imports as from its file.
TEST(Onnx, ModelFromAPipeImportsAsFromItsFile) {
    manualSeed(4);
    ModulePtr net = loadLeNet();
    net->evalMode();
    const std::string dir = ::testing::TempDir();
    const std::string path = dir + "lenet-piped.onnx", fifo = dir + "lenet.fifo";
    exportOnnx(*net, {{1, 1, 28, 28}}, path);
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::signal(SIGPIPE, SIG_IGN); // a reader that stops early fails the test, not the process
    std::thread writer([&] {
        std::ifstream in(path, std::ios::binary);
        std::ofstream out(fifo, std::ios::binary);
        out << in.rdbuf();
    });
    std::shared_ptr<Graph> back;
    try {
        back = importOnnx(fifo);
    } catch (...) {
        writer.join();
        throw;
    }
    writer.join();
    std::filesystem::remove(fifo);
    back->evalMode();
    const Tensor x = randomTensor({2, 1, 28, 28}, 5);
    EXPECT_EQ((*back)(x).toVector<float>(), (*net)(x).toVector<float>());
}

// ONNX's shape inference runs in a process of its own: a model it crashes on is an
// IoError naming the file and saying so, and the next import (a fresh inference process)
// works; shapes still come back for models with large initializers, whose data inference
// does not get.
TEST(Onnx, ShapeInferenceCrashIsAnErrorAndTheNextImportWorks) {
    const std::string crash = tessera::testing::sourceDir() +
                              "/tests/data/fuzz/onnx/conv-weights-rank-differs-from-input-crashes-shape-inference.onnx";
    for (int round = 0; round < 2; ++round) {
        try {
            importOnnx(crash);
            FAIL() << "a model ONNX's shape inference crashes on imported";
        } catch (const IoError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("conv-weights-rank-differs"), std::string::npos) << what;
            EXPECT_NE(what.find("shape inference crashes on it"), std::string::npos) << what;
        }
        // LeNet's weights (a 500x800 Linear among them) go over the 1,024-element threshold.
        manualSeed(2);
        ModulePtr net = loadLeNet();
        net->evalMode();
        const std::string path = ::testing::TempDir() + "lenet-after-crash.onnx";
        exportOnnx(*net, {{1, 1, 28, 28}}, path);
        std::shared_ptr<Graph> back = importOnnx(path);
        back->evalMode();
        const Tensor x = randomTensor({1, 1, 28, 28}, 3);
        EXPECT_EQ((*back)(x).toVector<float>(), (*net)(x).toVector<float>());
    }
}

// Constant inputs of the wrong kind (kept fuzz findings: an empty Clip bound, a float
// Slice start of a shape...) are errors naming the node and what its input should hold.
TEST(Onnx, BadConstantInputsAreErrorsNamingTheNode) {
    const std::string dir = tessera::testing::sourceDir() + "/tests/data/fuzz/onnx/";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"clip-min-of-no-values.onnx", "(Clip): min must hold one value; it holds 0"},
        {"dropout-ratio-of-no-values.onnx", "(Dropout): the ratio must hold one value; it holds 0"},
        {"pad-value-of-no-values.onnx", "(Pad): the constant value must hold one value; it holds 0"},
        {"slice-of-a-shape-by-float-start.onnx", "(Slice): the starts must be integers; input 1 is not"},
        {"constant-of-shape-value-of-no-values.onnx", "(ConstantOfShape): ConstantOfShape's value must hold one value"},
    };
    for (const auto& [file, message] : cases) {
        try {
            importOnnx(dir + file);
            ADD_FAILURE() << file << " imported";
        } catch (const IoError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(file), std::string::npos) << what;
            EXPECT_NE(what.find(message), std::string::npos) << what;
        }
    }
}

// Every unsupported node is listed, not only the first; nodes that only miss an input from
// one of them are counted.
TEST(Onnx, EveryUnsupportedNodeIsListed) {
    SKIP_WITHOUT_PYTHON_ONNX();
    // x -> RandomUniformLike -> Bernoulli (reads it) -> Cast: neither of the first two imports, and
    // the second is reported for its op, not for its missing input.
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
nodes = [helper.make_node("RandomUniformLike", ["x"], ["r"]), helper.make_node("Bernoulli", ["r"], ["k"]),
         helper.make_node("Cast", ["k"], ["y"], to=TensorProto.FLOAT)]
g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
)";
    const std::string msg = importRefusal("unsupported_chain", script);
    ASSERT_FALSE(msg.empty()) << "imported";
    expectParts(msg, {"2 node(s) cannot be imported", "(RandomUniformLike): op RandomUniformLike is not supported",
                      "(Bernoulli): op Bernoulli is not supported",
                      "(1 node(s) after these take their outputs and were not imported)"});
    EXPECT_EQ(msg.find("comes from a node that was not imported"), std::string::npos) << msg;
}

// A file's computations on constants count in all against OnnxImportOptions::foldLimit
// (inputs read and outputs written): past it, the import stops at the node that passes it,
// named, and no constant computation runs after it; under a larger limit the same file
// imports and computes.
TEST(Onnx, ConstantComputationsStopAtTheFoldLimit) {
    SKIP_WITHOUT_PYTHON_ONNX();
    // ones [64, 64] (4,096 values) -> Neg -> eight ReduceSums of it -> Sum -> added to x:
    // the fill counts 2 + 4,096, the Neg 8,192, each ReduceSum 4,097 (28,678 after the fourth);
    // then 2 * 2 (a fold of 3 values that fits, but comes after the limit was passed), times that.
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
one = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="fill", value=one),
         helper.make_node("Neg", ["ones"], ["minus"], name="neg")]
for i in range(8):
    nodes.append(helper.make_node("ReduceSum", ["minus"], ["s%d" % i], name="sum_%d" % i, keepdims=0))
nodes += [helper.make_node("Sum", ["s%d" % i for i in range(8)], ["total"], name="total"),
          helper.make_node("Mul", ["two", "two"], ["four"], name="late"),
          helper.make_node("Add", ["x", "total"], ["t"], name="add"),
          helper.make_node("Mul", ["t", "four"], ["y"], name="times")]
shape = helper.make_tensor("shape", TensorProto.INT64, [2], [64, 64])
two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
g = helper.make_graph(nodes, "folds", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape, two])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
)";
    const std::vector<std::string> written = writtenModels("fold_limit", script, {"fold_limit.onnx"});
    ASSERT_FALSE(written.empty()) << "the script writing the model failed";
    const std::string& model = written[0];

    std::shared_ptr<Graph> g = importOnnx(model); // the default limit
    const Tensor x = randomTensor({2, 3}, 5);
    const std::vector<float> y = (*g)(x).toVector<float>(), xs = x.toVector<float>();
    ASSERT_EQ(y.size(), xs.size());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], 4 * (xs[i] - 8 * 4096.0f));

    const std::vector<std::tuple<int64_t, std::string, std::string>> cases = {
        {30000, "'sum_4' (ReduceSum): computations on constants of over 30000 values in all", "'sum_3'"},
        {30000, "'late' (Mul): computations on constants of over 30000 values in all", "'sum_3'"}, // after it
        {4000, "'fill' (ConstantOfShape): computations on constants of over 4000 values in all", "'neg'"},
    };
    for (const auto& [limit, message, notNamed] : cases) {
        OnnxImportOptions options;
        options.foldLimit = limit;
        try {
            importOnnx(model, options);
            ADD_FAILURE() << "imported under a limit of " << limit;
        } catch (const IoError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(message), std::string::npos) << what;
            EXPECT_NE(what.find("OnnxImportOptions::foldLimit"), std::string::npos) << what;
            EXPECT_EQ(what.find(notNamed), std::string::npos) << what;
        }
    }
}

TEST(Onnx, NamedFreeDimsTakeTheSizesGiven) {
    SKIP_WITHOUT_PYTHON_ONNX();
    // ids [batch, seq] -> rows of a table [10, 4] -> time-major -> [T, 2B, 2] by its computed
    // shape (as nn.MultiheadAttention's export splits heads) -> batch-major [2B, T, 2]. A
    // token table takes ids [N, L] with L known: the file's free length stops the import.
    const std::string script = R"(
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper
nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
         helper.make_node("Transpose", ["e"], ["et"], perm=[1, 0, 2]),
         helper.make_node("Shape", ["et"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["t"], axis=0),
         helper.make_node("Gather", ["s", "one"], ["b"], axis=0),
         helper.make_node("Mul", ["b", "two"], ["b2"]),
         helper.make_node("Concat", ["t", "b2", "two"], ["to"], axis=0),
         helper.make_node("Reshape", ["et", "to"], ["r"], name="heads"),
         helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2])]
inits = [helper.make_tensor("table", TensorProto.FLOAT, [10, 4], np.arange(40, dtype=np.float32)),
         helper.make_tensor("zero", TensorProto.INT64, [1], [0]), helper.make_tensor("one", TensorProto.INT64, [1], [1]),
         helper.make_tensor("two", TensorProto.INT64, [1], [2])]
g = helper.make_graph(nodes, "free", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
# Two inputs naming a length; the second's first dim "n" and its last "batch" are batches.
g = helper.make_graph([helper.make_node("Identity", ["a"], ["ya"]), helper.make_node("Identity", ["b"], ["yb"])], "two",
                      [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", "seq", "batch"])],
                      [helper.make_tensor_value_info("ya", TensorProto.FLOAT, None),
                       helper.make_tensor_value_info("yb", TensorProto.FLOAT, None)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[2])
)";
    const std::vector<std::string> written =
        writtenModels("free_dims", script, {"free_dims.onnx", "free_dims_two.onnx"});
    ASSERT_FALSE(written.empty()) << "the script writing the models failed";
    const std::string &model = written[0], &two = written[1];
    // The sizes inputs give the dims besides the batch.
    using Sizes = std::map<std::string, int64_t>;
    EXPECT_EQ(onnxDimSizes(model, Shapes{{3, 5}}), (Sizes{{"seq", 5}}));
    EXPECT_EQ(onnxDimSizes(model, Shapes{}), Sizes{});
    EXPECT_EQ(onnxDimSizes(two, Shapes{{2, 3}, {2, 3, 4}}), (Sizes{{"seq", 3}}));
    try {
        onnxDimSizes(two, Shapes{{2, 3}, {2, 4, 2}});
        ADD_FAILURE() << "two sizes for 'seq' were taken";
    } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find("give the model's dim 'seq' two sizes, 3 and 4"), std::string::npos)
            << e.what();
    }

    auto failure = [&](const OnnxImportOptions& options) {
        try {
            importOnnx(model, options);
        } catch (const IoError& e) {
            return std::string(e.what());
        }
        return std::string("imported");
    };
    // Without the length: the table's ids, and which dims to give.
    const std::string free = failure({});
    EXPECT_NE(free.find("'embed' (Gather): ids whose shape the model does not declare as [N, L]"), std::string::npos)
        << free;
    EXPECT_NE(free.find("the inputs' dims 'seq' have no size in the file"), std::string::npos) << free;
    EXPECT_EQ(free.find("'batch'"), std::string::npos) << free; // the batch stays free
    // With it: the graph takes that length, the batch still free.
    OnnxImportOptions options;
    options.dims = {{"seq", 5}};
    std::shared_ptr<Graph> g = importOnnx(model, options);
    for (int64_t batch : {3, 1}) {
        std::vector<int32_t> ids(static_cast<size_t>(batch * 5));
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % 10);
        const Tensor y = (*g)(Tensor::fromVector({batch, 5}, ids));
        ASSERT_EQ(y.shape(), (Shape{2 * batch, 5, 2}));
        const std::vector<float> ys = y.toVector<float>();
        for (int64_t b2 = 0; b2 < 2 * batch; ++b2) {
            for (int64_t t = 0; t < 5; ++t) {
                for (int64_t k = 0; k < 2; ++k) { // r[t, b2, k] is element b2 * 2 + k of et[t] ([B, 4])
                    const int64_t b = (b2 * 2 + k) / 4, c = (b2 * 2 + k) % 4;
                    EXPECT_EQ(ys[static_cast<size_t>((b2 * 5 + t) * 2 + k)],
                              static_cast<float>(ids[static_cast<size_t>(b * 5 + t)] * 4 + c));
                }
            }
        }
    }
    EXPECT_THROW(g->dataShapeFrom(Shapes{{3, 6}}), ShapeError); // another length
    // A name no input has, and a size below 1.
    options.dims = {{"sq", 5}};
    const std::string unknown = failure(options);
    EXPECT_NE(unknown.find("OnnxImportOptions::dims names 'sq', which no input's dim is named (they name batch, seq)"),
              std::string::npos)
        << unknown;
    options.dims = {{"seq", 0}};
    const std::string zero = failure(options);
    EXPECT_NE(zero.find("OnnxImportOptions::dims gives 'seq' the size 0 (at least 1)"), std::string::npos) << zero;
}

// ReduceMax over several axes it cannot take: one IoError naming each node and why (axes
// with a gap; a run of axes one of whose sizes the file leaves free).
TEST(Onnx, ReductionsItCannotTakeAreNamed) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
nodes = [helper.make_node("ReduceMax", ["x"], ["gap"], axes=[1, 3]),
         helper.make_node("ReduceMin", ["x"], ["run"], axes=[1, 2], keepdims=0)]
g = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "T", 5])],
                      [helper.make_tensor_value_info("gap", TensorProto.FLOAT, None),
                       helper.make_tensor_value_info("run", TensorProto.FLOAT, None)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
)";
    const std::string msg = importRefusal("reductions_refused", script);
    ASSERT_FALSE(msg.empty()) << "imported";
    expectParts(msg, {"2 node(s) cannot be imported",
                      "(ReduceMax): a reduction over several dims that are not one run of adjacent dims",
                      "(ReduceMin): a reduction over several dims whose sizes are not all known at import"});
}

// A Range up to the free batch imports only as offsets of integer data (x[torch.arange(N), last]):
// one from 1, one multiplied by data and one added to itself are named.
TEST(Onnx, RangesOverAFreeBatchItCannotTakeAreNamed) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
i = TensorProto.INT64
nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "zero"], ["n"]),
         helper.make_node("Range", ["one", "n", "one"], ["from_one"]), helper.make_node("Add", ["ids", "from_one"], ["y1"]),
         helper.make_node("Range", ["zero", "n", "one"], ["rows"]), helper.make_node("Mul", ["ids", "rows"], ["y2"]),
         helper.make_node("Add", ["rows", "rows"], ["y3"])]
g = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                                         helper.make_tensor_value_info("ids", i, ["N"])],
                      [helper.make_tensor_value_info("y1", i, None), helper.make_tensor_value_info("y2", i, None),
                       helper.make_tensor_value_info("y3", i, None)],
                      [helper.make_tensor("zero", i, [], [0]), helper.make_tensor("one", i, [], [1])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
)";
    const std::string msg = importRefusal("ranges_refused", script);
    ASSERT_FALSE(msg.empty()) << "imported";
    expectParts(msg, {"3 node(s) cannot be imported",
                      "(Range): a Range up to a dim not known at import ('N') other than from 0 by 1",
                      "(Mul): a Range up to a dim not known at import ('N') read by Mul",
                      "(Add): a Range up to a dim not known at import ('N') read by Add"});
}

// fmod of float data: fmod 0 (which ONNX forbids for floats), a divisor of 0 and one of
// integer data are named.
TEST(Onnx, FloatRemaindersItCannotTakeAreNamed) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
f = TensorProto.FLOAT
nodes = [helper.make_node("Mod", ["x", "two"], ["y1"]), helper.make_node("Mod", ["x", "zero"], ["y2"], fmod=1),
         helper.make_node("Mod", ["x", "ids"], ["y3"], fmod=1)]
g = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", f, ["N", 4]),
                                         helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
                      [helper.make_tensor_value_info(y, f, None) for y in ("y1", "y2", "y3")],
                      [helper.make_tensor("two", f, [], [2.0]), helper.make_tensor("zero", f, [], [0.0])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
)";
    const std::string msg = importRefusal("float_mod_refused", script);
    ASSERT_FALSE(msg.empty()) << "imported";
    expectParts(msg, {"3 node(s) cannot be imported", "(Mod): a Mod of float data with fmod 0",
                      "(Mod): a Mod of float data by the constant 0 (a finite nonzero number is supported)",
                      "(Mod): a Mod of float data by int64 data"});
}

// ScatterND imports as a slice assignment over every sample; one writing part of the batch, a
// slice with steps, data of a free batch and a reduction are named.
TEST(Onnx, ScattersItCannotTakeAreNamed) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
f, i = TensorProto.FLOAT, TensorProto.INT64
nodes = [helper.make_node("ScatterND", ["x", "first", "u1"], ["y1"]),
         helper.make_node("ScatterND", ["x", "stepped", "u2"], ["y2"]),
         helper.make_node("ScatterND", ["free", "rows", "u2"], ["y3"]),
         helper.make_node("ScatterND", ["x", "rows", "u2"], ["y4"], reduction="add")]
g = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", f, [2, 4]),
                                         helper.make_tensor_value_info("free", f, ["N", 4]),
                                         helper.make_tensor_value_info("u1", f, [1]),
                                         helper.make_tensor_value_info("u2", f, [2, 2])],
                      [helper.make_tensor_value_info(y, f, None) for y in ("y1", "y2", "y3", "y4")],
                      [helper.make_tensor("first", i, [1, 2], [0, 1]),
                       helper.make_tensor("stepped", i, [2, 2, 2], [0, 0, 0, 2, 1, 0, 1, 2]),
                       helper.make_tensor("rows", i, [2, 1], [0, 1])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)]), sys.argv[1])
)";
    const std::string msg = importRefusal("scatters_refused", script);
    ASSERT_FALSE(msg.empty()) << "imported";
    expectParts(msg, {"4 node(s) cannot be imported", "(ScatterND): indices that write part of the batch",
                      "(ScatterND): indices that do not write one box of whole ranges",
                      "(ScatterND): data whose dims are not all known at import", "(ScatterND): reduction 'add'"});
}

// Losses as ops: what the import cannot take is named at import; a target outside the classes
// that is not ignored fails when the graph runs, naming it.
TEST(Onnx, LossesItCannotTakeAreNamed) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string script = R"(
import sys
import onnx
from onnx import TensorProto, helper
f, i = TensorProto.FLOAT, TensorProto.INT64
out = [helper.make_tensor_value_info("loss", f, None), helper.make_tensor_value_info("map", f, None)]
nodes = [helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["loss"]),
         helper.make_node("SoftmaxCrossEntropyLoss", ["m", "mt"], ["map"], reduction="none")]
g = helper.make_graph(nodes, "refused", [helper.make_tensor_value_info("x", f, ["N", 5]),
                                         helper.make_tensor_value_info("t", i, ["N"]),
                                         helper.make_tensor_value_info("w", f, [5]),
                                         helper.make_tensor_value_info("m", f, ["N", 5, "H", "W"]),
                                         helper.make_tensor_value_info("mt", i, ["N", "H", "W"])], out)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"], ignore_index=-100)
g = helper.make_graph([node], "ok", [helper.make_tensor_value_info("x", f, ["N", 5]),
                                     helper.make_tensor_value_info("t", i, ["N"])], out[:1])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[2])
)";
    const std::vector<std::string> written = writtenModels("losses", script, {"losses_refused.onnx", "losses_ok.onnx"});
    ASSERT_FALSE(written.empty()) << "the script writing the models failed";
    const std::string msg = importRefusalOf(written[0]);
    ASSERT_FALSE(msg.empty()) << "imported";
    expectParts(msg,
                {"2 node(s) cannot be imported", "(NegativeLogLikelihoodLoss): the class weights must be a constant",
                 "(SoftmaxCrossEntropyLoss): an input with more than one dim after [N, C] not known"});
    std::shared_ptr<Graph> g = importOnnx(written[1]);
    const Tensor x = Tensor::fromVector({2, 5}, std::vector<float>(10, -1.0f));
    // -100 is ignored: the mean over the one target kept.
    const Tensors loss = (*g)({x, Tensor::fromVector({2}, std::vector<int32_t>{-100, 3})});
    EXPECT_FLOAT_EQ(loss[0].toVector<float>().at(0), 1.0f);
    try {
        (*g)({x, Tensor::fromVector({2}, std::vector<int32_t>{7, 3})});
        FAIL() << "ran with target 7 of 5 classes";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("index 7 outside [0, 5)"), std::string::npos) << e.what();
    }
}

// Export then import: the same parameters, the same outputs, for every zoo model (they
// cover convolutions, deconvolutions, pools, batch norm, LRN, concat, residual adds,
// dropout, softmax, and gpt-mini's int32 ids into an Embedder...).
TEST(Onnx, ZooModelsRoundTripWithEqualOutputs) {
    const std::string dir = ::testing::TempDir();
    for (const ZooEntry& e : zooModels()) { // every zoo model
        const std::string name = e.name;
        SCOPED_TRACE(name);
        manualSeed(3);
        ModulePtr net = loadZooModel(name);
        std::vector<int64_t> dims = parseShape(e.input).dims();
        dims[0] = 2;
        // Smaller inputs where the network takes them (global pooling), one image for VGG.
        if (name == "unet") dims = {1, 1, 64, 64};
        if (name.rfind("resnet", 0) == 0 && name.find("cifar") == std::string::npos) dims = {1, 3, 64, 64};
        if (name.rfind("vgg", 0) == 0) dims[0] = 1;
        const Shape in(dims);
        // Running statistics away from their initial values, so batch norm's export is tested.
        for (auto [n, t] : net->namedAttrs())
            t.copyFrom(randomTensor(t.shape(), 5, 0.5f, 1.5f)); // handles: storage shared
        const std::string path = dir + name + ".onnx";
        exportOnnx(*net, {in}, path);
        std::shared_ptr<Graph> back = importOnnx(path);
        EXPECT_EQ(back->numOfParams(), net->numOfParams()) << name;
        net->evalMode();
        back->evalMode();
        Tensor x = randomTensor(in, 9);
        if (name == "gpt-mini") { // ids, declared int32 in the file
            std::vector<int32_t> ids(static_cast<size_t>(in.numel()));
            for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % 96);
            x = Tensor::fromVector(in, ids);
        }
        const std::vector<float> a = (*net)(Tensors{x})[0].toVector<float>();
        const std::vector<float> b = (*back)(Tensors{x})[0].toVector<float>();
        ASSERT_EQ(a.size(), b.size()) << name;
        size_t bad = 0;
        for (size_t i = 0; i < a.size(); ++i) bad += std::fabs(a[i] - b[i]) > 1e-5f + 1e-4f * std::fabs(a[i]);
        EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << a.size() << " outputs differ";
        std::filesystem::remove(path);
    }
}

// The layers no zoo model has: resizes, pads (reflect, edge), split, tile, upsample, transpose, PRelu, LRN, instance
// norm, clip, leaky relu, noise and channel dropout (inference form), copies, axis swaps,
// gelu, the hard activations, a gate, a difference, scalar arithmetic, a slice, softmax,
// through export and back (at opset 13 and 14).
// A module in two nodes (a siamese tower) is written once (one set of initializers, read by
// both ONNX nodes) and read back as one module in two nodes: its parameters count once, the
// outputs are the same, and a training step sums both nodes' gradients into the one weight,
// as in the graph that was exported.
TEST(Onnx, ModuleInTwoNodesRoundTripsShared) {
    manualSeed(9);
    auto a = node(std::make_shared<Identity>(), {}, "a");
    auto b = node(std::make_shared<Identity>(), {}, "b");
    auto tower = std::make_shared<Conv2D>(3, 4, 3, ConvOptions{.pad = {1}});
    auto ta = node(tower, a, "ta");
    auto tb = node(tower, b, "tb");
    auto head = std::make_shared<Linear>(4, 2);
    auto ha =
        node(head, node(std::make_shared<Flatten>(), node(std::make_shared<GlobalAvgPool>(), ta, "pa"), "fa"), "ha");
    auto hb =
        node(head, node(std::make_shared<Flatten>(), node(std::make_shared<GlobalAvgPool>(), tb, "pb"), "fb"), "hb");
    auto sum = node(std::make_shared<Add>(), {ha, hb}, "sum");
    Graph g({a, b}, {sum}, "siamese");
    const std::string path = ::testing::TempDir() + "siamese.onnx";
    exportOnnx(g, {{2, 3, 5, 5}, {2, 3, 5, 5}}, path);
    std::shared_ptr<Graph> back = importOnnx(path);
    EXPECT_EQ(back->numOfParams(), g.numOfParams());
    ASSERT_EQ(back->namedParams().size(), g.namedParams().size());
    const Tensors in = {randomTensor({2, 3, 5, 5}, 1), randomTensor({2, 3, 5, 5}, 2)};
    const Tensor dy = randomTensor({2, 2}, 3);
    g.trainMode();
    back->trainMode();
    const std::vector<float> want = g(in)[0].toVector<float>();
    EXPECT_TRUE(allClose(back->operator()(in)[0], want, 1e-5f));
    g.zeroGradParams();
    back->zeroGradParams();
    g.backward(Tensors{dy});
    back->backward(Tensors{dy});
    std::vector<float> wantGrads, gotGrads;
    for (const auto& [n, v] : g.namedParams()) {
        const std::vector<float> x = v->grad.toVector<float>();
        wantGrads.insert(wantGrads.end(), x.begin(), x.end());
    }
    for (const auto& [n, v] : back->namedParams()) {
        const std::vector<float> x = v->grad.toVector<float>();
        gotGrads.insert(gotGrads.end(), x.begin(), x.end());
    }
    ASSERT_EQ(gotGrads.size(), wantGrads.size());
    for (size_t k = 0; k < wantGrads.size(); ++k) EXPECT_NEAR(gotGrads[k], wantGrads[k], 1e-4f) << k;
    std::filesystem::remove(path);
}

TEST(Onnx, EveryExportedLayerRoundTrips) {
    manualSeed(6);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    // Resized to sizes that are not whole multiples (linear, corners aligned; nearest-exact),
    // smoothed (cubic) and back (nearest): Resize with sizes from the input's shape, the batch
    // free.
    auto aligned = node(std::make_shared<Resize2D>(std::vector<int64_t>{7, 4},
                                                   UpsampleOptions{.mode = ResampleMode::linear, .alignCorners = true}),
                        x, "aligned");
    auto resized = node(
        std::make_shared<Resize2D>(std::vector<int64_t>{9, 3}, UpsampleOptions{.mode = ResampleMode::nearestExact}),
        aligned, "resized");
    auto smooth =
        node(std::make_shared<Resize2D>(std::vector<int64_t>{9, 3}, UpsampleOptions{.mode = ResampleMode::cubic}),
             resized, "smooth");
    auto restored = node(std::make_shared<Resize2D>(std::vector<int64_t>{5, 6}), smooth, "restored");
    auto reflect = node(std::make_shared<Pad2D>(std::vector<int64_t>{1, 0, 2, 1}, PadOptions{.mode = PadMode::reflect}),
                        restored, "reflect");
    auto pad = node(std::make_shared<Pad2D>(std::vector<int64_t>{0, 2, 1, 0}, PadOptions{.mode = PadMode::edge}),
                    reflect, "pad");
    auto split = node(std::make_shared<Split>(1, std::vector<int64_t>{2, 2}), pad, "split");
    auto up = node(std::make_shared<Upsample2D>(2), Parent(split, 0), "up");
    auto lrn = node(std::make_shared<CrossMapLRN>(LRNOptions{.N = 3}), Parent(split, 1), "lrn");
    auto lrnUp = node(std::make_shared<Upsample2D>(2, UpsampleOptions{.mode = ResampleMode::linear}), lrn, "lrnUp");
    auto cat = node(std::make_shared<Concat>(1), {up, lrnUp}, "cat");
    auto inorm = node(std::make_shared<InstanceNorm2D>(4), cat, "inorm");
    auto prelu = node(std::make_shared<PRelu>(4), inorm, "prelu");
    // A deconvolution with postpad: ConvTranspose's output_padding, read back as postpad.
    auto deconv = node(std::make_shared<Deconv2D>(4, 4, 3, ConvOptions{.stride = {2}, .pad = {1}, .postpad = {1, 0}}),
                       prelu, "deconv");
    auto tile = node(std::make_shared<Tile>(2, 2), deconv, "tile");
    auto tr = node(std::make_shared<Transpose>(std::vector<int64_t>{0, 1, 3, 2}), tile, "tr");
    auto clip = node(std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = -0.5f, .max = 0.7f}),
                     tr, "clip");
    auto leaky =
        node(std::make_shared<Activation>(ActivationKind::leakyRelu, ActivationOptions{.slope = 0.2f}), tr, "leaky");
    auto sum = node(std::make_shared<Add>(), {clip, leaky}, "sum");
    // The forms exporters write that the import maps: gelu (its erf form), the hard
    // activations, a squeeze-and-excitation gate, a difference, scalar arithmetic, a slice.
    // Train-time noise (written in its inference form, as Identity), copies, axis swaps.
    auto noisy = node(std::make_shared<NoiseInjector>(), sum, "noisy");
    auto drop2 = node(std::make_shared<Dropout2D>(), noisy, "drop2");
    auto copies = node(std::make_shared<Replicate>(2), drop2, "copies");
    auto both = node(std::make_shared<Add>(), {Parent(copies, 0), Parent(copies, 1)}, "both");
    auto swapped = node(std::make_shared<SwapAxes>(2, 3), both, "swapped");
    auto back2 = node(std::make_shared<MoveAxis>(3, 2), swapped, "back2");
    auto gelu = node(std::make_shared<Gelu>(), back2, "gelu");
    auto hsig = node(std::make_shared<Activation>(ActivationKind::hardSigmoid, ActivationOptions{.hardSlope = 0.3f}),
                     gelu, "hsig");
    auto hswish = node(std::make_shared<Activation>(ActivationKind::hardSwish), gelu, "hswish");
    auto gate = node(std::make_shared<GlobalAvgPool>(), hsig, "gate");
    auto gated = node(std::make_shared<Mul>(), {gate, hswish}, "gated");
    auto diff = node(std::make_shared<Add>(std::vector<float>{1.0f, -1.0f}), {gated, gelu}, "diff");
    auto affine = node(std::make_shared<MulAddConst>(1.5f, -0.25f), diff, "affine");
    auto squared = node(std::make_shared<Pow>(2.0f, 0.5f), affine, "squared"); // Pow, then Mul
    auto perChannel = node(std::make_shared<MulAddConst>(randomTensor({4, 1, 1}, 11), randomTensor({1, 4, 1, 1}, 12)),
                           squared, "perChannel");
    auto slice =
        node(std::make_shared<Slice>(std::vector<int>{2, 3}, std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, -1}),
             perChannel, "slice"); // two axes: one ONNX Slice, read back as one
    auto strided = node(std::make_shared<Slice>(std::vector<int>{2}, std::vector<int64_t>{0}, std::vector<int64_t>{0},
                                                SliceOptions{.steps = {2}}),
                        slice, "strided"); // x[:, :, 0::2]: its steps go out and come back
    auto flipped = node(std::make_shared<Slice>(std::vector<int>{3}, std::vector<int64_t>{-1}, std::vector<int64_t>{0},
                                                SliceOptions{.steps = {-1}}),
                        strided, "flipped"); // x[:, :, :, ::-1]: "through index 0" as ONNX writes it
    auto half = node(std::make_shared<Cast>(DType::float32, DType::float16), flipped, "half"); // rounded,
    auto full = node(std::make_shared<Cast>(DType::float16, DType::float32), half, "full");    // then float again
    auto flat = node(std::make_shared<Flatten>(), full, "flat");
    auto soft = node(std::make_shared<SoftMax>(), flat, "soft");
    Graph g({x}, {soft}, "layers");
    for (const auto& [n, v] : g.namedParams()) v->data.copyFrom(randomTensor(v->data.shape(), 3, 0.5f, 1.5f));
    const Shape in{2, 4, 5, 6};
    for (int64_t opset : {13, 14}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "layers.onnx";
        exportOnnx(g, {in}, path, {.opset = opset});
        std::shared_ptr<Graph> back = importOnnx(path);
        EXPECT_EQ(back->namedParams().size(), g.namedParams().size());
        g.evalMode();
        back->evalMode();
        const Tensor input = randomTensor(in, 8);
        const std::vector<float> a = g(input).toVector<float>(), b = (*back)(input).toVector<float>();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-5f * std::fabs(a[i])) << i;
        if (pythonHasOnnx()) { // and ONNX's checker takes it
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::filesystem::remove(path);
    }
}

// LayerNorm, RMSNorm, GroupNorm, SiLU and Mish: exported as ONNX ops where the opset has
// them (LayerNormalization from 17) and otherwise in the decomposed forms PyTorch writes,
// which the import reads back as the same layers with their weights.
TEST(Onnx, NormalisationsAndNewActivationsRoundTrip) {
    manualSeed(9);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto gn = node(std::make_shared<GroupNorm>(3, 6, GroupNormOptions{.epsilon = 1e-4f}), x, "gn");
    auto silu = node(std::make_shared<Activation>(ActivationKind::silu), gn, "silu");
    auto ln = node(std::make_shared<LayerNorm>(std::vector<int64_t>{4, 5}), silu, "ln");
    auto mish = node(std::make_shared<Activation>(ActivationKind::mish), ln, "mish");
    auto rms = node(std::make_shared<RMSNorm>(std::vector<int64_t>{5}, RMSNormOptions{.epsilon = 1e-6f}), mish, "rms");
    auto plainGn = node(std::make_shared<GroupNorm>(2, 6, GroupNormOptions{.affine = false}), rms, "plainGn");
    auto plainLn = node(std::make_shared<LayerNorm>(std::vector<int64_t>{5}, LayerNormOptions{.affine = false}),
                        plainGn, "plainLn");
    auto noBias = node(std::make_shared<LayerNorm>(std::vector<int64_t>{5}, LayerNormOptions{.useBias = false}),
                       plainLn, "noBias");
    auto scaled = node(std::make_shared<Scale>(std::vector<int64_t>{6, 1, 1}), noBias, "scaled");
    auto dropped = node(std::make_shared<DropPath>(), scaled, "dropped");
    Graph g({x}, {dropped}, "norms");
    for (const auto& [n, v] : g.namedParams()) v->data.copyFrom(randomTensor(v->data.shape(), 3, 0.5f, 1.5f));
    const Shape in{2, 6, 4, 5};
    for (int64_t opset : {13, 17}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "norms.onnx";
        exportOnnx(g, {in}, path, {.opset = opset});
        std::shared_ptr<Graph> back = importOnnx(path);
        std::map<std::string, int> classes;
        for (const auto& [n, m] : back->namedChildren()) ++classes[m->classname()];
        EXPECT_EQ(classes["GroupNorm"], 2);
        EXPECT_EQ(classes["LayerNorm"], 3);
        EXPECT_EQ(classes["RMSNorm"], 1);
        EXPECT_EQ(classes["Activation"], 2);
        // LayerNormalization always has a Scale: the affine-free LayerNorm comes back with a
        // weight of ones from opset 17. The Scale (a Mul by an initializer) comes back a Scale.
        EXPECT_EQ(back->namedParams().size(), g.namedParams().size() + (opset >= 17 ? 1 : 0));
        EXPECT_EQ(classes["Scale"], 1);
        const Tensor input = randomTensor(in, 8, -2.0f, 2.0f);
        g.evalMode(); // DropPath exports its inference form
        const std::vector<float> a = g(input).toVector<float>(), b = (*back)(input).toVector<float>();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f + 1e-5f * std::fabs(a[i])) << i;
        if (pythonHasOnnx()) {
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::filesystem::remove(path);
    }
}

// Linear over the last axis of [N, T, C] (MatMul + Add in ONNX, read back as one Linear with
// its bias) and SoftMax over the last axis and over an inner one.
TEST(Onnx, LinearOnTokensAndSoftMaxOnAnyAxisRoundTrip) {
    manualSeed(10);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto up = node(std::make_shared<Linear>(5, 6), x, "up");
    auto last = node(std::make_shared<SoftMax>(-1), up, "last");
    auto down = node(std::make_shared<Linear>(6, 4, LinearOptions{.useBias = false}), last, "down");
    auto inner = node(std::make_shared<SoftMax>(1), down, "inner");
    auto scores =
        node(std::make_shared<MatMul>(MatMulOptions{.transB = true, .alpha = 0.5f}), {inner, inner}, "scores");
    auto mixed = node(std::make_shared<MatMul>(), {scores, up}, "mixed");
    auto attended = node(std::make_shared<ScaledDotProductAttention>(AttentionOptions{.causal = true}),
                         {mixed, mixed, up}, "attended");
    Graph g({x}, {attended}, "tokens");
    for (const auto& [n, v] : g.namedParams()) v->data.copyFrom(randomTensor(v->data.shape(), 3));
    const Shape in{2, 7, 5};
    for (int64_t opset : {13, 17}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "tokens.onnx";
        exportOnnx(g, {in}, path, {.opset = opset});
        std::shared_ptr<Graph> back = importOnnx(path);
        std::map<std::string, int> classes;
        for (const auto& [n, m] : back->namedChildren()) ++classes[m->classname()];
        EXPECT_EQ(classes["Linear"], 2);
        EXPECT_EQ(classes["SoftMax"], 2);
        EXPECT_EQ(classes["MatMul"], 2);
        EXPECT_EQ(classes["ScaledDotProductAttention"], 1);            // its parts read back as one layer
        EXPECT_EQ(back->namedParams().size(), g.namedParams().size()); // the bias is the Linear's
        const Tensor input = randomTensor(in, 8);
        const std::vector<float> a = g(input).toVector<float>(), b = (*back)(input).toVector<float>();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-5f * std::fabs(a[i])) << i;
        std::filesystem::remove(path);
    }
}

// LogSoftMax over the channels and over the last axis, and the exp, log, abs, sin, cos, tan,
// inverse and hyperbolic, erf and sign activations: exported as LogSoftmax, Exp, Log, Abs,
// Sin, Cos, Tan, ..., Erf and Sign, read back as the same layers, equal outputs, and
// ONNX's checker takes the file.
TEST(Onnx, LogSoftMaxAndElementaryFunctionsRoundTrip) {
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto logp = node(std::make_shared<LogSoftMax>(), x, "logp");
    auto mag = node(std::make_shared<Activation>(ActivationKind::abs), logp, "mag");
    auto grown = node(std::make_shared<Activation>(ActivationKind::exp), mag, "grown");
    auto back1 = node(std::make_shared<Activation>(ActivationKind::log), grown, "back1");
    auto wave = node(std::make_shared<Activation>(ActivationKind::sin), back1, "wave");
    auto shifted = node(std::make_shared<Activation>(ActivationKind::cos), wave, "shifted");
    // Then each function in its domain: cos's [0.54, 1] through erf, acos, asin, tan, atan,
    // sinh, asinh, cosh, acosh, tanh and atanh; and the sign of sin's values, of both signs.
    NodePtr chain = shifted;
    for (ActivationKind k : {ActivationKind::erf, ActivationKind::acos, ActivationKind::asin, ActivationKind::tan,
                             ActivationKind::atan, ActivationKind::sinh, ActivationKind::asinh, ActivationKind::cosh,
                             ActivationKind::acosh, ActivationKind::tanh, ActivationKind::atanh}) {
        chain = node(std::make_shared<Activation>(k), chain, str(k));
    }
    auto last = node(std::make_shared<LogSoftMax>(-1), chain, "last");
    auto sign = node(std::make_shared<Activation>(ActivationKind::sign), wave, "sign");
    Graph g({x}, {last, sign}, "logs");
    const Shape in{2, 3, 5};
    const Tensor input = randomTensor(in, 8, -3.0f, 3.0f);
    const Tensors ys = g(Tensors{input});
    std::vector<float> a = ys[0].toVector<float>();
    const std::vector<float> signs = ys[1].toVector<float>();
    a.insert(a.end(), signs.begin(), signs.end());
    EXPECT_NE(std::find(signs.begin(), signs.end(), -1.0f), signs.end());
    EXPECT_NE(std::find(signs.begin(), signs.end(), 1.0f), signs.end());
    for (int64_t opset : {13, 17}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "logs.onnx";
        exportOnnx(g, {in}, path, {.opset = opset});
        std::shared_ptr<Graph> back = importOnnx(path);
        std::map<std::string, int> classes;
        for (const auto& [n, m] : back->namedChildren()) ++classes[m->classname()];
        EXPECT_EQ(classes["LogSoftMax"], 2);
        EXPECT_EQ(classes["Activation"], 17);
        const Tensors yb = (*back)(Tensors{input});
        ASSERT_EQ(yb.size(), 2u);
        std::vector<float> b = yb[0].toVector<float>();
        const std::vector<float> backSigns = yb[1].toVector<float>();
        b.insert(b.end(), backSigns.begin(), backSigns.end());
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-5f * std::fabs(a[i])) << i;
        if (pythonHasOnnx()) {
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::filesystem::remove(path);
    }
}

// ReduceSum (over the batch and a length, and over everything to [1], ONNX's scalar and a
// Reshape) and ReduceMean: exported as ONNX's ReduceSum (axes an input) and ReduceMean, read
// back as the same layers, equal outputs
// at the export's batch and another (the sum over the batch takes the batch at run time), and
// ONNX's checker takes the file.
TEST(Onnx, ReductionsRoundTrip) {
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto overBatch = node(std::make_shared<ReduceSum>(std::vector<int64_t>{0, 1}, true), x, "over_batch");
    auto mean = node(std::make_shared<ReduceMean>(std::vector<int64_t>{1}, true), x, "mean");
    auto all = node(std::make_shared<ReduceSum>(std::vector<int64_t>{}, false), x, "all");
    Graph g({x}, {overBatch, mean, all}, "reductions");
    for (int64_t opset : {13, 17}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "reductions.onnx";
        exportOnnx(g, {Shape{2, 3, 5}}, path, {.opset = opset});
        std::shared_ptr<Graph> back = importOnnx(path);
        std::map<std::string, int> classes;
        for (const auto& [n, m] : back->namedChildren()) ++classes[m->classname()];
        EXPECT_EQ(classes["ReduceSum"], 2);
        EXPECT_EQ(classes["ReduceMean"], 1);
        for (int64_t batch : {2, 4}) {
            const Tensor input = randomTensor({batch, 3, 5}, 8);
            const Tensors a = g(Tensors{input}), b = (*back)(Tensors{input});
            ASSERT_EQ(a.size(), b.size());
            for (size_t k = 0; k < a.size(); ++k) {
                EXPECT_EQ(a[k].shape(), b[k].shape()) << k;
                EXPECT_TRUE(allClose(a[k], b[k].toVector<float>(), 1e-6f)) << k;
            }
        }
        if (pythonHasOnnx()) {
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::filesystem::remove(path);
    }
}

// GatherElements: exported as ONNX's, its positions an int32 input, read back as the same
// layer; the same outputs; the checker takes the file.
TEST(Onnx, GatherElementsRoundTrips) {
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto at = node(std::make_shared<Identity>(), {}, "at");
    auto taken = node(std::make_shared<GatherElements>(1), {x, at}, "taken");
    Graph g({x, at}, {taken}, "gather");
    const Tensor input = randomTensor({2, 5, 3}, 4);
    std::vector<int32_t> positions(24);
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>((i * 7) % 5);
    const Tensor idx = Tensor::fromVector({2, 4, 3}, positions);
    const std::vector<float> a = g(Tensors{input, idx})[0].toVector<float>();
    const std::string path = ::testing::TempDir() + "gather.onnx";
    exportOnnx(g, {Shape{2, 5, 3}, Shape{2, 4, 3}}, path);
    std::shared_ptr<Graph> back = importOnnx(path);
    int gathers = 0;
    for (const auto& [n, m] : back->namedChildren()) gathers += m->classname() == "GatherElements";
    EXPECT_EQ(gathers, 1);
    EXPECT_EQ((*back)(Tensors{input, idx})[0].toVector<float>(), a);
    if (pythonHasOnnx()) {
        EXPECT_TRUE(checkerAccepts(path));
    }
    std::filesystem::remove(path);
}

// ArgMax and ArgMin (int32 indices out): exported as ONNX's ArgMax and ArgMin (int64) with a
// Cast to int32 (lastIndex as select_last_index), read back as the same layers and an
// Identity, the same indices; the checker takes the file.
TEST(Onnx, ArgMaxAndArgMinRoundTrip) {
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto scores = node(std::make_shared<Linear>(5, 6), x, "scores");
    auto best = node(std::make_shared<ArgMax>(-1, false), scores, "best");
    auto worst = node(std::make_shared<ArgMin>(1, true), scores, "worst");
    auto lastBest = node(std::make_shared<ArgMax>(1, ArgMaxOptions{.lastIndex = true}), scores, "last_best");
    Graph g({x}, {best, worst, lastBest}, "picks");
    const Shape in{3, 4, 5};
    const Tensor input = randomTensor(in, 9);
    const Tensors want = g(Tensors{input});
    for (int64_t opset : {13, 17}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "picks.onnx";
        exportOnnx(g, {in}, path, {.opset = opset});
        std::shared_ptr<Graph> back = importOnnx(path);
        std::map<std::string, int> classes;
        int last = 0;
        for (const auto& [n, m] : back->namedChildren()) {
            ++classes[m->classname()];
            if (const auto* a = dynamic_cast<const ArgMax*>(m)) last += a->lastIndex() ? 1 : 0;
        }
        EXPECT_EQ(classes["ArgMax"], 2);
        EXPECT_EQ(classes["ArgMin"], 1);
        EXPECT_EQ(last, 1); // select_last_index 1 and back
        const Tensors got = (*back)(Tensors{input});
        ASSERT_EQ(got.size(), 3u);
        for (size_t k = 0; k < 3; ++k) {
            EXPECT_EQ(got[k].dtype(), DType::int32);
            EXPECT_EQ(got[k].shape(), want[k].shape());
            EXPECT_EQ(got[k].toVector<int32_t>(), want[k].toVector<int32_t>());
        }
        if (pythonHasOnnx()) {
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::filesystem::remove(path);
    }
}

// Masks of int32 0 and 1 (a padding mask given as data): an int32 input behind a Reshape and
// a Tile is declared int32 in the file (float is refused there: the Cast of int32 behind them
// says so), Casts between int32 and float export as ONNX's Cast and come back as the same
// layers, with equal outputs; the checker takes the file.
TEST(Onnx, IntegerMasksAndCastsRoundTrip) {
    auto pad = node(std::make_shared<Identity>(), {}, "pad");
    auto wide = node(std::make_shared<Reshape>(Shape{0, 1, 4}), pad, "wide");
    auto heads = node(std::make_shared<Tile>(1, 2), wide, "heads");
    auto padded = node(std::make_shared<Cast>(DType::int32, DType::float32), heads, "padded");
    auto keep = node(std::make_shared<MulAddConst>(-1.0f, 1.0f), padded, "keep");
    auto mask = node(std::make_shared<Cast>(DType::float32, DType::int32), keep, "mask");
    auto kept = node(std::make_shared<Cast>(DType::int32, DType::float32), mask, "kept");
    Graph g({pad}, {kept}, "masks");
    EXPECT_TRUE(throwsShapeError([&] { g.checkDataType({DType::float32}); },
                                 {"pad -> wide -> heads -> padded", "float32", "int32"}));
    EXPECT_NO_THROW(g.checkDataType({DType::int32}));
    // A Tile computes 16-bit floats in float32: what follows it is checked with float32.
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto copies = node(std::make_shared<Tile>(1, 2), x, "copies");
    auto rounded = node(std::make_shared<Cast>(DType::float32, DType::int32), copies, "rounded");
    Graph halves({x}, {rounded}, "halves");
    EXPECT_NO_THROW(halves.checkDataType({DType::bfloat16}));
    EXPECT_TRUE(throwsShapeError([&] { halves.checkDataType({DType::int32}); }, {"x -> copies -> rounded", "int32"}));
    const Tensor input = Tensor::fromVector({2, 4}, std::vector<int32_t>{0, 0, 1, 1, 0, 1, 0, 0});
    const Tensor want = g(input);
    const std::string path = ::testing::TempDir() + "masks.onnx";
    exportOnnx(g, {Shape{2, 4}}, path);
    std::shared_ptr<Graph> back = importOnnx(path);
    std::map<std::string, int> classes;
    for (const auto& [n, m] : back->namedChildren()) ++classes[m->classname()];
    EXPECT_EQ(classes["Cast"], 3);
    EXPECT_EQ(classes["Tile"], 1);
    const Tensor got = (*back)(input);
    EXPECT_EQ(got.shape(), (Shape{2, 2, 4}));
    EXPECT_EQ(got.toVector<float>(), want.toVector<float>());
    if (pythonHasOnnx()) {
        EXPECT_TRUE(checkerAccepts(path));
    }
    std::filesystem::remove(path);
}

// MultiheadAttention (self-attention batch-first with a causal and a key-padding mask;
// cross-attention time-major with a per-head attn_mask), a learned token table
// (Parameter) joined to the tokens and PositionalEncoding: export as their parts (MatMul
// and Add projections, reshapes, the attention nodes; Expand over the batch; Add of the
// table), import, equal outputs and parameter counts, at opsets 13 and 17.
TEST(Onnx, MultiheadAttentionAndTokenTablesRoundTrip) {
    manualSeed(11);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto pad = node(std::make_shared<Identity>(), {}, "pad");
    auto mem = node(std::make_shared<Identity>(), {}, "mem");
    auto attn = node(std::make_shared<Identity>(), {}, "attn");
    auto cls = node(std::make_shared<Parameter>(std::vector<int64_t>{1, 8}, ParameterOptions{.std = 1.0f}), x, "cls");
    auto tokens = node(std::make_shared<Concat>(1), {cls, x}, "tokens");
    auto pe = node(std::make_shared<PositionalEncoding>(), tokens, "pe");
    auto self = node(
        std::make_shared<MultiheadAttention>(8, 2, MultiheadAttentionOptions{.causal = true, .keyPaddingMask = true}),
        {pe, pad}, "self");
    auto selfT = node(std::make_shared<Transpose>(std::vector<int64_t>{1, 0, 2}), self, "self_t");
    auto cross = node(std::make_shared<MultiheadAttention>(
                          8, 4, MultiheadAttentionOptions{.bias = false, .batchFirst = false, .attnMask = true}),
                      {selfT, mem, mem, attn}, "cross");
    Graph g({x, pad, mem, attn}, {cross}, "attention");
    for (const auto& [n, v] : g.namedParams()) v->data.copyFrom(randomTensor(v->data.shape(), 3));
    const Shapes in{{2, 4, 8}, {2, 5}, {6, 2, 8}, {8, 5, 6}};
    std::vector<float> padding(10, 0.0f);
    padding[9] = -1e9f; // the last token of sample 1 is padding
    const Tensors inputs{randomTensor(in[0], 4), Tensor::fromVector({2, 5}, padding), randomTensor(in[2], 5),
                         randomTensor(in[3], 6)};
    g.evalMode();
    const std::vector<float> a = g(inputs)[0].toVector<float>();
    for (int64_t opset : {13, 17}) {
        SCOPED_TRACE(opset);
        const std::string path = ::testing::TempDir() + "attention.onnx";
        exportOnnx(g, in, path, {.opset = opset});
        if (pythonHasOnnx()) { // ONNX's checker takes it
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::shared_ptr<Graph> back = importOnnx(path);
        std::map<std::string, int> classes;
        int causal = 0;
        for (const auto& [n, m] : back->namedChildren()) {
            ++classes[m->classname()];
            if (const auto* att = dynamic_cast<const ScaledDotProductAttention*>(m)) causal += att->options().causal;
        }
        EXPECT_EQ(classes["Parameter"], 1);
        // The self-attention's nodes read back as one layer (causal, its padding mask an input);
        // the cross-attention's stay separate layers: its keys come from a time-major input
        // whose free dim is time (this graph takes no other batch, its attention mask holding
        // the batch times the heads, so the export frees every input's dim 0 and declares its
        // values' ranks alone), so their batch dim is the 2 exported, not known equal to the
        // queries' free one.
        EXPECT_EQ(classes["ScaledDotProductAttention"], 1);
        EXPECT_EQ(causal, 1);
        EXPECT_EQ(back->numOfParams(), g.numOfParams());
        back->evalMode();
        const std::vector<float> b = (*back)(inputs)[0].toVector<float>();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f + 1e-4f * std::fabs(a[i])) << i;
        // Training: the gradients of every input (the masks too) are the exported graph's.
        g.trainMode();
        back->trainMode();
        const Tensor dy = randomTensor(g(inputs)[0].shape(), 7);
        const Tensors want = g.backward(Tensors{dy});
        (*back)(inputs);
        const Tensors got = back->backward(Tensors{dy});
        ASSERT_EQ(got.size(), want.size());
        for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(allClose(got[k], want[k].toVector<float>(), 1e-4f)) << k;
        g.evalMode();
        std::filesystem::remove(path);
    }
}

// An Embedder's paddingIdx, which ONNX's Gather has no place for, round-trips in the model's
// metadata ("padding_idx", by table): the imported table's padding row gets no gradient, as
// the exported one's did; a tied head keeps the tie. Malformed metadata is an IoError naming it.
TEST(Onnx, EmbedderPaddingIdxRoundTrips) {
    manualSeed(12);
    auto ids = node(std::make_shared<Identity>(), {}, "ids");
    auto emb = node(std::make_shared<Embedder>(7, 5, 4, EmbedderOptions{.paddingIdx = -1}), ids, "emb"); // id 6
    auto plain = node(std::make_shared<Embedder>(7, 5, 4), ids, "plain");
    auto sum = node(std::make_shared<Add>(), {emb, plain}, "sum");
    auto head = node(std::make_shared<Linear>(4, 3), sum, "head");
    Graph g({ids}, {head}, "padded");
    const Tensor x = Tensor::fromVector({2, 5}, std::vector<int32_t>{1, 2, 6, 6, 6, 3, 4, 5, 0, 6});
    g.evalMode();
    const std::vector<float> want = g(x).toVector<float>();
    const std::string path = ::testing::TempDir() + "padding_idx.onnx";
    exportOnnx(g, {{2, 5}}, path);
    if (pythonHasOnnx()) {
        EXPECT_TRUE(checkerAccepts(path));
    }
    std::shared_ptr<Graph> back = importOnnx(path);
    int padded = 0, unpadded = 0;
    for (const auto& [n, m] : back->namedChildren()) {
        if (m->classname() != "Embedder") continue;
        const bool has = m->blueprint().toJson().find("\"paddingIdx\": -1") != std::string::npos;
        (has ? padded : unpadded) += 1;
    }
    EXPECT_EQ(padded, 1);
    EXPECT_EQ(unpadded, 1);
    back->evalMode();
    const std::vector<float> got = (*back)(x).toVector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << i;
    // A training step: the padded table's row 6 gets no gradient, the plain one's does.
    back->trainMode();
    back->zeroGradParams();
    (*back)(x);
    back->backward(Tensor::full({2, 5, 3}, 1.0f));
    for (const auto& [n, m] : back->namedChildren()) {
        if (m->classname() != "Embedder") continue;
        const bool has = m->blueprint().toJson().find("paddingIdx") != std::string::npos;
        const std::vector<float> dW = m->getVar("W")->grad.toVector<float>();
        float row6 = 0.0f, row1 = 0.0f;
        for (size_t j = 0; j < 4; ++j) {
            row6 += std::fabs(dW[6 * 4 + j]);
            row1 += std::fabs(dW[1 * 4 + j]);
        }
        EXPECT_GT(row1, 0.0f) << n;
        if (has) {
            EXPECT_EQ(row6, 0.0f) << n;
        } else {
            EXPECT_GT(row6, 0.0f) << n;
        }
    }
    // Malformed metadata: an IoError naming it.
    if (pythonHasOnnx()) {
        const std::string bad = ::testing::TempDir() + "padding_idx_bad.onnx";
        const std::string edit = "/usr/bin/python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1]); "
                                 "m.metadata_props[0].value = 'not json'; onnx.save(m, sys.argv[2])\" '" +
                                 path + "' '" + bad + "'";
        ASSERT_EQ(std::system(edit.c_str()), 0);
        try {
            importOnnx(bad);
            ADD_FAILURE() << "imported";
        } catch (const IoError& e) {
            const std::string what = e.what();
            for (const std::string& part : {bad, std::string("metadata 'padding_idx'"), std::string("malformed")}) {
                EXPECT_NE(what.find(part), std::string::npos) << part << " not in " << what;
            }
        }
        std::filesystem::remove(bad);
    }
    std::filesystem::remove(path);
}

// Recurrent layers with initial states as inputs and final states as outputs: export (one
// ONNX op per layer, its states sliced out of the inputs and concatenated into the
// outputs), import, the same outputs; and the form onnx.checker accepts.
TEST(Onnx, RecurrentStatesRoundTrip) {
    struct RnnCase {
        RNNOptions options;
        int64_t layers;
    };
    const RnnCase cases[] = {
        {{.layers = 2,
          .mode = RnnMode::lstm,
          .bidirectional = true,
          .getSequences = true,
          .initialStates = true,
          .finalStates = true},
         2},
        {{.mode = RnnMode::gru, .batchFirst = true, .initialStates = true, .finalStates = true}, 1},
        {{.layers = 2,
          .mode = RnnMode::gru,
          .linearBeforeReset = false,
          .bidirectional = true,
          .getSequences = true,
          .finalStates = true},
         2},
        {{.layers = 3, .mode = RnnMode::tanh, .getSequences = true, .finalStates = true}, 3},
    };
    const bool checker = pythonHasOnnx();
    for (const RnnCase& c : cases) {
        const bool lstm = c.options.mode == RnnMode::lstm, bi = c.options.bidirectional;
        SCOPED_TRACE(str(c.options.mode) + (c.options.linearBeforeReset ? "" : " reset before"));
        manualSeed(2);
        const int64_t T = 5, N = 3, I = 4, H = 6, S = c.layers * (bi ? 2 : 1);
        std::vector<NodePtr> ins{node(std::make_shared<Identity>(), {}, "x")};
        Shapes shapes{c.options.batchFirst ? Shape{N, T, I} : Shape{T, N, I}};
        for (int k = 0; k < (c.options.initialStates ? (lstm ? 2 : 1) : 0); ++k) {
            ins.push_back(node(std::make_shared<Identity>(), {}, k ? "c0" : "h0"));
            shapes.push_back(Shape{S, N, H});
        }
        Parents parents;
        for (const NodePtr& n : ins) parents.push_back(n);
        auto rnn = node(std::make_shared<RNN>(I, H, c.options), parents, "rnn");
        Graph g(ins, {rnn}, "recurrent");
        g.evalMode();
        const std::string path = ::testing::TempDir() + "recurrent.onnx";
        exportOnnx(g, shapes, path);
        std::shared_ptr<Graph> back = importOnnx(path);
        back->evalMode();
        EXPECT_EQ(back->namedParams().size(), g.namedParams().size());
        Tensors inputs;
        for (size_t i = 0; i < shapes.size(); ++i) inputs.push_back(randomTensor(shapes[i], 20 + i));
        const Tensors a = g(inputs), b = (*back)(inputs);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_EQ(a.size(), 1u + (lstm ? 2u : 1u));
        for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(allClose(b[k], a[k].toVector<float>(), 1e-5f)) << k;
        if (checker) {
            EXPECT_TRUE(checkerAccepts(path));
        }
        std::filesystem::remove(path);
    }
    // A lengths input is not exported: a clear error.
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto lens = node(std::make_shared<Identity>(), {}, "lengths");
    Graph g({x, lens}, {node(std::make_shared<RNN>(4, 6, RNNOptions{.lengths = true}), {x, lens}, "rnn")});
    EXPECT_NE(errorOf([&] {
                  exportOnnx(g, {{5, 3, 4}, {3}}, ::testing::TempDir() + "lengths.onnx");
              }).find("lengths input is not exported"),
              std::string::npos);
}

// A spatial transformer (a localisation net's transform and the sampler): GridSample on an
// affine grid at opset 16 and back as one SpatialTf; a clear error at earlier opsets and
// for a GridSample whose grid is not such an affine grid.
TEST(Onnx, SpatialTransformerRoundTripsAtOpset16) {
    manualSeed(3);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto loc = node(std::make_shared<Linear>(3 * 7 * 8, 6), node(std::make_shared<Flatten>(), x, "flat"), "loc");
    auto theta = node(std::make_shared<Reshape>(Shape{-1, 2, 3}), loc, "theta");
    auto stn = node(std::make_shared<SpatialTf>(SpatialTfOptions{.height = 5, .width = 6}), {x, theta}, "stn");
    Graph g({x}, {stn}, "stn");
    g.evalMode();
    const Shape in{2, 3, 7, 8};
    const std::string path = ::testing::TempDir() + "stn.onnx";
    exportOnnx(g, {in}, path, {.opset = 16});
    std::shared_ptr<Graph> back = importOnnx(path);
    back->evalMode();
    int samplers = 0;
    for (Node* n : back->order()) samplers += n->module().classname() == "SpatialTf";
    EXPECT_EQ(samplers, 1);
    EXPECT_EQ(back->namedParams().size(), g.namedParams().size());
    const Tensor input = randomTensor(in, 5);
    const Tensor a = g(input), b = (*back)(input);
    ASSERT_EQ(a.shape(), (Shape{2, 3, 5, 6}));
    EXPECT_TRUE(allClose(b, a.toVector<float>(), 1e-5f));
    const bool python = pythonHasOnnx();
    if (python) {
        EXPECT_TRUE(checkerAccepts(path));
    }
    EXPECT_NE(
        errorOf([&] { exportOnnx(g, {in}, path, {.opset = 15}); }).find("SpatialTf needs GridSample, in opsets 16"),
        std::string::npos);
    std::filesystem::remove(path);
    if (!python) return;
    // A GridSample on a grid that is a graph input: a GridSample, which exports from opset 16.
    const std::string free = ::testing::TempDir() + "gridsample_free.onnx";
    const std::string make =
        "/usr/bin/python3 -c 'import onnx, sys; from onnx import helper as h, TensorProto as T; "
        "v = lambda n, s: h.make_tensor_value_info(n, T.FLOAT, s); "
        "g = h.make_graph([h.make_node(\"GridSample\", [\"x\", \"grid\"], [\"y\"], align_corners=1)], \"gs\", "
        "[v(\"x\", [1, 1, 4, 4]), v(\"grid\", [1, 3, 3, 2])], [v(\"y\", [1, 1, 3, 3])]); "
        "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid(\"\", 16)]), sys.argv[1])' '" +
        free + "'";
    ASSERT_EQ(std::system(make.c_str()), 0);
    std::shared_ptr<Graph> warp = importOnnx(free);
    int grids = 0;
    for (Node* n : warp->order()) grids += n->module().classname() == "GridSample";
    EXPECT_EQ(grids, 1);
    const Tensors xg{randomTensor({1, 1, 4, 4}, 6), randomTensor({1, 3, 3, 2}, 7)};
    GridSample aligned({.alignCorners = true});
    EXPECT_TRUE(allClose((*warp)(xg)[0], aligned(xg)[0].toVector<float>(), 0.0f));
    EXPECT_NE(errorOf([&] {
                  exportOnnx(*warp, {{1, 1, 4, 4}, {1, 3, 3, 2}}, free, {.opset = 15});
              }).find("GridSample needs opset 16 or later (exporting at 15)"),
              std::string::npos);
    std::filesystem::remove(free);
}

// onnx.checker (Debian's python3-onnx) accepts what Tessera writes.
TEST(Onnx, ExportPassesOnnxsChecker) {
    SKIP_WITHOUT_PYTHON_ONNX();
    const std::string dir = ::testing::TempDir();
    for (const char* name : {"inception-bn", "unet", "resnet18-cifar", "gpt-mini"}) { // gpt-mini: int32 ids
        manualSeed(4);
        ModulePtr net = loadZooModel(name);
        const Shape in = std::string(name) == "unet"             ? Shape{1, 1, 64, 64}
                         : std::string(name) == "resnet18-cifar" ? Shape{1, 3, 32, 32}
                         : std::string(name) == "gpt-mini"       ? Shape{1, 64}
                                                                 : Shape{1, 3, 224, 224};
        const std::string path = dir + name + "_checked.onnx";
        // The CIFAR network with its classes' names in the metadata, which the checker accepts too.
        const std::vector<std::string> classes =
            std::string(name) == "resnet18-cifar"
                ? std::vector<std::string>{"plane", "car",  "bird",  "cat",  "deer",
                                           "dog",   "frog", "horse", "ship", "truck \"lorry\""}
                : std::vector<std::string>{};
        exportOnnx(*net, {in}, path, {.classes = classes});
        EXPECT_EQ(onnxClassNames(path), classes) << name;
        EXPECT_TRUE(checkerAccepts(path)) << name;
        std::filesystem::remove(path);
    }
    // A layer with no ONNX counterpart is an IoError naming it.
    Sequential seq("s");
    seq.append(std::make_shared<Linear>(4, 4, LinearOptions{.name = "fc"}))
        .append(std::make_shared<Replicate>(2, "copies"))
        .append(std::make_shared<Add>(std::vector<float>{0.5f, 2.0f}, "weighted"));
    EXPECT_THROW(exportOnnx(seq, {Shape{2, 4}}, dir + "weighted.onnx"), IoError);
    const std::string msg = errorOf([&] { exportOnnx(seq, {Shape{2, 4}}, dir + "weighted.onnx"); });
    EXPECT_NE(msg.find("(Add): weighted sums are not exported"), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir + "weighted.onnx")); // nothing half-written
}

// A user's layer whose class name begins like one of Tessera's (ConvBlock, BatchNormish) is
// reported as having no counterpart, with every other such layer, not taken for Tessera's.
class ConvBlock : public Identity {
public:
    using Identity::Identity;
    std::string classname() const override { return "ConvBlock"; }
};
class BatchNormish : public Identity {
public:
    using Identity::Identity;
    std::string classname() const override { return "BatchNormish"; }
};

TEST(Onnx, EveryUnexportableLayerIsReportedTogether) {
    const std::string path = ::testing::TempDir() + "user_layers.onnx";
    Sequential seq("s");
    seq.append(std::make_shared<ConvBlock>("block"))
        .append(std::make_shared<Linear>(4, 4, LinearOptions{.name = "fc"}))
        .append(std::make_shared<BatchNormish>("norm"))
        .append(std::make_shared<Replicate>(2, "copies"))
        .append(std::make_shared<Add>(std::vector<float>{0.5f, 2.0f}, "weighted"));
    const std::string msg = errorOf([&] { exportOnnx(seq, {Shape{2, 4}}, path); });
    EXPECT_NE(msg.find("3 layer(s) have no ONNX counterpart"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer block (ConvBlock): no ONNX counterpart is exported for ConvBlock"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("layer norm (BatchNormish): no ONNX counterpart is exported for BatchNormish"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("(Add): weighted sums are not exported"), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Onnx, MalformedClassNamesAreAnErrorNamingTheFile) {
    const std::string path = ::testing::TempDir() + "bad_classes.onnx";
    Linear fc(3, 2);
    exportOnnx(fc, {Shape{1, 3}}, path, {.classes = {"a", "b"}});
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t at = bytes.find("[\"a\",\"b\"]");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 9, "{\"a\":123}"); // the same length: the protobuf stays well-formed
    std::ofstream(path, std::ios::binary) << bytes;
    const std::string msg = errorOf([&] { onnxClassNames(path); });
    EXPECT_NE(msg.find("bad_classes.onnx: its class names (metadata 'classes') are malformed"), std::string::npos)
        << msg;
    exportOnnx(fc, {Shape{1, 3}}, path);
    EXPECT_TRUE(onnxClassNames(path).empty());
}

} // namespace
} // namespace tessera
