// A pre-norm transformer encoder block built node by node from Tessera's layers (the C++
// twin of docs/examples/transformer_block.py), its shape check, and training steps of a
// small regression through it. The test suite compiles and runs this file.
#include <cstdio>

#include "backend/Random.h"
#include "containers/Graph.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Attention.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Split.h"
#include "modules/Transpose.h"
#include "training/Optimizer.h"
#include "training/PointwiseCosts.h"

using namespace tessera;

constexpr int64_t D = 32, HEADS = 4, DH = D / HEADS, FF = 64, T = 10;

// x [N, T, D] -> [N, T, D]: LayerNorm, multi-head self-attention, residual; LayerNorm,
// GELU feed-forward, residual.
NodePtr encoderBlock(const NodePtr& x, const std::string& name) {
    auto h = node(std::make_shared<LayerNorm>(std::vector<int64_t>{D}), x, name + "_norm1");
    auto qkv = node(std::make_shared<Linear>(D, 3 * D), h, name + "_in_proj");
    auto parts = node(std::make_shared<Split>(2, std::vector<int64_t>{D, D, D}), qkv, name + "_qkv");
    std::vector<NodePtr> heads; // q, k, v: [N, T, D] -> [N, HEADS, T, DH]
    for (int i = 0; i < 3; ++i) {
        const std::string part = name + "_" + "qkv"[i];
        auto r = node(std::make_shared<Reshape>(Shape{0, 0, HEADS, DH}), Parent(parts, i), part + "_heads");
        heads.push_back(node(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1, 3}), r, part + "_t"));
    }
    auto a = node(std::make_shared<ScaledDotProductAttention>(), {heads[0], heads[1], heads[2]}, name + "_attention");
    a = node(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1, 3}), a, name + "_join_t");
    a = node(std::make_shared<Reshape>(Shape{0, 0, D}), a, name + "_join");
    a = node(std::make_shared<Linear>(D, D), a, name + "_out_proj");
    auto x1 = node(std::make_shared<Add>(), {x, a}, name + "_residual1");
    auto f = node(std::make_shared<LayerNorm>(std::vector<int64_t>{D}), x1, name + "_norm2");
    f = node(std::make_shared<Linear>(D, FF), f, name + "_linear1");
    f = node(std::make_shared<Gelu>(), f, name + "_gelu");
    f = node(std::make_shared<Linear>(FF, D), f, name + "_linear2");
    return node(std::make_shared<Add>(), {x1, f}, name + "_residual2");
}

int main() {
    manualSeed(1);
    // 1. Build: tokens [N, T, D] -> two blocks -> the mean over the tokens -> one number.
    auto tokens = node(std::make_shared<Identity>(), {}, "tokens");
    auto body = encoderBlock(encoderBlock(tokens, "block1"), "block2");
    auto pooled = node(std::make_shared<ReduceMean>(std::vector<int64_t>{1}, false), body, "pool");
    auto head = node(std::make_shared<Linear>(D, 1), pooled, "head");
    Graph net({tokens}, {head}, "transformer");
    std::printf("%zu nodes, %lld parameters\n", net.order().size(), static_cast<long long>(net.numOfParams()));

    // 2. Shape-check the whole graph before allocating anything.
    std::printf("output %s\n", net.dataShapeFrom(Shape{16, T, D}).str().c_str());
    try {
        net.dataShapeFrom(Shape{16, T, D + 1}); // a width the blocks do not take
        return 1;
    } catch (const ShapeError& e) {
        std::printf("caught: %s\n", e.what());
    }

    // 3. Train: the output should be the mean of the first feature over the tokens.
    Tensor x = Tensor::randn({16, T, D}), target = Tensor::empty({16, 1});
    for (int n = 0; n < 16; ++n) {
        float sum = 0.0f;
        for (int t = 0; t < T; ++t) sum += x.data<float>()[(n * T + t) * D];
        target.data<float>()[n] = sum / T;
    }
    MSE cost;
    Adam adam(3e-3f);
    adam.setupOn(net);
    double first = 0.0, last = 0.0;
    for (int step = 0; step < 60; ++step) {
        const CostResult r = cost(net(x), target);
        net.zeroGradParams();
        net.backward(r.grad[0]);
        adam.update();
        if (step == 0) first = r.error;
        last = r.error;
    }
    std::printf("mean squared error %.4f -> %.4f\n", first, last);
    return last < 0.25 * first ? 0 : 1;
}
