#include "io/Summary.h"

#include <stdexcept>

#include "GradCheck.h"
#include "containers/Graph.h"
#include "models/Zoo.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Concat.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/Linear.h"
#include "modules/MultiheadAttention.h"

namespace tessera {
namespace {
using namespace testing;

std::shared_ptr<Graph> twoInputs() {
    auto a = node(std::make_shared<Identity>(), {}, "a");
    auto b = node(std::make_shared<Identity>(), {}, "b");
    auto fa = node(std::make_shared<Linear>(16, 8), a, "fa");
    auto fb = node(std::make_shared<Linear>(4, 8), b, "fb");
    auto cat = node(std::make_shared<Concat>(1), {fa, fb}, "cat");
    auto sum = node(std::make_shared<Add>(), {fa, fb}, "sum");
    return std::make_shared<Graph>(std::vector<NodePtr>{a, b}, std::vector<NodePtr>{cat, sum}, "two");
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

const SummaryRow& rowNamed(const std::vector<SummaryRow>& rows, const std::string& name) {
    for (const SummaryRow& r : rows) {
        if (r.name == name) return r;
    }
    throw std::runtime_error("no row " + name);
}

// Attention counts its products' multiply-adds: q k^T and P v per head, and
// MultiheadAttention's four projections on top.
TEST(Summary, AttentionFlops) {
    ShapeOnlyBuild noInit;
    // cross-attention, time-major: query [L=5, N=2, E=8], key and value [S=7, 2, 8]
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto mem = node(std::make_shared<Identity>(), {}, "mem");
    auto att = node(std::make_shared<MultiheadAttention>(8, 2, MultiheadAttentionOptions{.batchFirst = false}),
                    {x, mem, mem}, "att");
    Graph g({x, mem}, {att});
    const std::vector<SummaryRow> rows = summarize(g, {Shape{5, 2, 8}, Shape{7, 2, 8}});
    const SummaryRow& r = rowNamed(rows, "att");
    const double projections = 2.0 * 8 * 8 * (2 * 10 + 2 * 14), products = 2 * (2.0 * 2 * 5 * 7 * 4) * 2;
    EXPECT_EQ(r.flops, projections + products);
}

TEST(Summary, RowsOfATwoInputGraph) {
    auto g = twoInputs();
    const std::vector<SummaryRow> rows = summarize(*g, {Shape{4, 16}, Shape{4, 4}});
    ASSERT_EQ(rows.size(), 6u);
    EXPECT_EQ(rows[0].name, "a"); // execution order
    const SummaryRow &a = rowNamed(rows, "a"), &b = rowNamed(rows, "b"), &fa = rowNamed(rows, "fa");
    const SummaryRow &cat = rowNamed(rows, "cat"), &sum = rowNamed(rows, "sum");
    EXPECT_TRUE(a.isInput && b.isInput && !fa.isInput);
    EXPECT_EQ(fa.trainable, 16 * 8 + 8);
    EXPECT_EQ(fa.flops, 2.0 * 4 * 16 * 8);
    EXPECT_EQ(a.flops, 0); // inputs cost nothing
    EXPECT_EQ(cat.out, (Shapes{Shape{4, 16}}));
    ASSERT_EQ(cat.from.size(), 2u);
    EXPECT_EQ(cat.from[0].first, "fa");
    EXPECT_EQ(b.from[0].first, "input:1");
    EXPECT_TRUE(cat.isOutput && sum.isOutput && !fa.isOutput);

    // The drawing: two input ellipses with their shapes, each drawn once (the Identity input
    // nodes are the ellipses), two outputs named with their shapes.
    const std::string dot = toDot(rows, "two");
    EXPECT_EQ(count(dot, "fillcolor=\"#dbe8f5\""), 2u) << dot;
    EXPECT_NE(dot.find("\"a\" [shape=ellipse, style=filled, fillcolor=\"#dbe8f5\", label=\"a\\n[4, 16]\"]"),
              std::string::npos)
        << dot;
    EXPECT_NE(dot.find("label=\"b\\n[4, 4]\""), std::string::npos) << dot;
    EXPECT_EQ(count(dot, "Identity"), 0u) << dot;
    EXPECT_EQ(count(dot, ": cat\\n[4, 16]\""), 1u) << dot;
    EXPECT_EQ(count(dot, ": sum\\n[4, 8]\""), 1u) << dot;
    EXPECT_NE(dot.find("\"fa\" -> \"cat\" [label=\"[4, 8]\"]"), std::string::npos) << dot;
    EXPECT_NE(dot.find("\"a\" -> \"fa\""), std::string::npos) << dot;

    const std::string table = summaryTable(rows, true);
    EXPECT_NE(table.find("fa, fb"), std::string::npos) << table; // connected to
    EXPECT_NE(table.find("total: 176 trainable parameters"), std::string::npos) << table;
}

TEST(Summary, DrawingNamesTheActivationKind) {
    auto x = node(std::make_shared<Linear>(4, 3), {}, "fc");
    auto act = node(std::make_shared<Activation>(ActivationKind::tanh), x, "act");
    auto g = std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{act}, "g");
    const std::string dot = toDot(summarize(*g, {Shape{2, 4}}), "g");
    EXPECT_NE(dot.find("act\\nActivation (tanh)"), std::string::npos) << dot;
    EXPECT_NE(dot.find("output 0: act\\n[2, 3]"), std::string::npos) << dot;
}

TEST(Summary, GroupsByNamePrefixWithTrainableAndBufferCounts) {
    ShapeOnlyBuild noInit;
    ModulePtr net = loadZooModel("resnet50");
    const std::vector<SummaryRow> rows = summarize(*net, {Shape{1, 3, 224, 224}});
    const std::vector<SummaryRow> depth1 = groupRows(rows, 1), depth2 = groupRows(rows, 2);
    EXPECT_GT(rows.size(), 170u);
    // depth 1: data, stem, layer1..4, then the head's layers.
    ASSERT_GE(depth1.size(), 6u);
    EXPECT_EQ(depth1[1].name, "stem");
    EXPECT_EQ(depth1[2].name, "layer1");
    EXPECT_LT(depth1.size(), 12u);
    EXPECT_GT(depth2.size(), depth1.size());
    int64_t trainable = 0, buffers = 0, trainable2 = 0;
    double flops = 0, flops2 = 0;
    for (const SummaryRow& r : rows) trainable += r.trainable, buffers += r.nonTrainable, flops += r.flops;
    for (const SummaryRow& r : depth2) trainable2 += r.trainable, flops2 += r.flops;
    EXPECT_EQ(trainable, 25557032); // the published count
    EXPECT_EQ(trainable2, trainable);
    EXPECT_DOUBLE_EQ(flops2, flops);
    EXPECT_GT(buffers, 0); // batch-norm running statistics
    bool layer1_0 = false;
    for (const SummaryRow& r : depth2) layer1_0 = layer1_0 || (r.name == "layer1_0" && r.module == "12 layers");
    EXPECT_TRUE(layer1_0);
    const std::string table = summaryTable(depth2, true);
    EXPECT_NE(table.find("25,557,032 trainable"), std::string::npos) << table;
    EXPECT_NE(table.find("k7x7 s2 p3"), std::string::npos) << table; // the stem convolution
}

TEST(Summary, NumbersReadable) {
    EXPECT_EQ(thousands(0), "0");
    EXPECT_EQ(thousands(838858), "838,858");
    EXPECT_EQ(thousands(-1234567), "-1,234,567");
    EXPECT_EQ(flopsText(12), "12 FLOPs");
    EXPECT_EQ(flopsText(2.29e6), "2.29 MFLOPs");
    EXPECT_EQ(flopsText(3.63e9), "3.63 GFLOPs");
}

TEST(Summary, BadShapesGiveTheModelsReportAndThePartialRows) {
    auto g = twoInputs();
    std::vector<SummaryRow> partial;
    EXPECT_TRUE(throwsShapeError(
        [&] {
            summarize(*g, {Shape{4, 16}, Shape{4, 5}}, &partial);
        },
        {"Linear 'fb'", "expects input [..., 4]"}));
    ASSERT_EQ(partial.size(), 3u); // a, fa and b ran before fb failed
    EXPECT_EQ(partial[2].name, "b");
}

} // namespace
} // namespace tessera
