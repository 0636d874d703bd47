// The zoo's transformers: parameter counts worked out by hand for the models with no
// published count (vit-tiny, gpt-mini), the shapes, gpt-mini's causality, and a few
// training steps of each through the whole graph.
#include "models/Transformer.h"

#include <cmath>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "data/Text.h"
#include "models/Zoo.h"
#include "modules/Init.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {
using namespace testing;

// One pre-norm block of width D with an MLP of M: two LayerNorms, the attention's in- and
// out-projections, the MLP's two Linears.
int64_t blockParams(int64_t D, int64_t M) {
    return 2 * 2 * D + (3 * D * D + 3 * D) + (D * D + D) + (D * M + M) + (M * D + D);
}

TEST(Transformers, ParameterCountsByHand) {
    // vit-tiny: a 4x4 patch convolution of 1 channel to 64, a class token, 50 positions, six
    // blocks, the final LayerNorm, a head of 10.
    const int64_t D = 64;
    const int64_t vitTiny = (16 * D + D) + D + 50 * D + 6 * blockParams(D, 256) + 2 * D + (D * 10 + 10);
    EXPECT_EQ(loadZooModel("vit-tiny")->numOfParams(), vitTiny);
    EXPECT_EQ(vitTiny, 305034); // torchvision's VisionTransformer(28, 4, 6, 4, 64, 256, 10) less its 2 channels more
    // gpt-mini: a 128 x 128 token table, 64 positions, four blocks 128 wide with MLPs of 512,
    // the final LayerNorm, a head back to the 128 ids.
    const int64_t G = 128;
    const int64_t gpt = 128 * G + 64 * G + 4 * blockParams(G, 4 * G) + 2 * G + (G * 128 + 128);
    EXPECT_EQ(loadZooModel("gpt-mini")->numOfParams(), gpt);
    EXPECT_EQ(gpt, 834432);
}

TEST(Transformers, Shapes) {
    ShapeOnlyBuild noInit;
    EXPECT_EQ(loadZooModel("vit")->dataShapeFrom(Shape{2, 3, 224, 224}), (Shape{2, 1000}));
    EXPECT_EQ(loadZooModel("vit-tiny-cifar")->dataShapeFrom(Shape{8, 3, 32, 32}), (Shape{8, 10}));
    EXPECT_EQ(loadZooModel("convnext-tiny")->dataShapeFrom(Shape{1, 3, 224, 224}), (Shape{1, 1000}));
    EXPECT_EQ(loadZooModel("gpt-mini")->dataShapeFrom(Shape{4, 64}), (Shape{4, 64, 128}));
    EXPECT_THROW(loadViT({.image = 30, .patch = 4}), ModuleError);
    // a ViT takes only its own image size: the positional table has one row per patch
    EXPECT_THROW(loadZooModel("vit-tiny")->dataShapeFrom(Shape{2, 1, 32, 32}), ShapeError);
}

// gpt-mini's graph input is a named Identity: the Embedder behind it still states the
// dtype it takes, so tools that make inputs (tessera profile) give it int32 ids.
TEST(Transformers, GptStatesItsInputDtype) {
    ShapeOnlyBuild noInit;
    auto gpt = loadZooModel("gpt-mini");
    EXPECT_NO_THROW(gpt->checkDataType({DType::int32}));
    EXPECT_TRUE(
        throwsShapeError([&] { gpt->checkDataType({DType::float32}); }, {"input ids -> token_embedding", "int32"}));
}

TEST(Transformers, GptIsCausal) {
    manualSeed(3);
    auto gpt = loadGPT({.context = 12, .dim = 16, .depth = 2, .heads = 2, .dropout = 0.0f});
    gpt->evalMode();
    std::vector<int32_t> ids(24);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % 128);
    const std::vector<float> a = (*gpt)(Tensor::fromVector({2, 12}, ids)).toVector<float>();
    ids[7] = 5; // position 7 of sample 0 changes: positions 0..6 must not see it
    const std::vector<float> b = (*gpt)(Tensor::fromVector({2, 12}, ids)).toVector<float>();
    for (size_t t = 0; t < 12; ++t) {
        float diff = 0.0f;
        for (size_t v = 0; v < 128; ++v) diff = std::max(diff, std::fabs(a[t * 128 + v] - b[t * 128 + v]));
        if (t < 7) {
            EXPECT_EQ(diff, 0.0f) << t;
        } else {
            EXPECT_GT(diff, 0.0f) << t;
        }
    }
}

// A small ViT learns to tell images by their mean brightness through every layer, in
// float32 and in bfloat16.
TEST(Transformers, SmallViTLearns) {
    for (DType compute : {DType::float32, DType::bfloat16}) {
        SCOPED_TRACE(str(compute));
        manualSeed(4);
        auto vit = loadViT({.image = 8,
                            .channels = 1,
                            .patch = 4,
                            .dim = 16,
                            .depth = 2,
                            .heads = 2,
                            .mlp = 32,
                            .classes = 2,
                            .name = "vit-8"});
        vit->calcMode(compute);
        Tensor x = Tensor::randn({32, 1, 8, 8});
        std::vector<int32_t> labels(32);
        std::vector<float> xs = x.toVector<float>();
        for (int n = 0; n < 32; ++n) {
            labels[n] = n % 2;
            for (int i = 0; i < 64; ++i) xs[n * 64 + i] += labels[n] ? 0.7f : -0.7f;
        }
        x = Tensor::fromVector({32, 1, 8, 8}, xs);
        const Tensor y = Tensor::fromVector({32}, labels);
        CrossEntropy cost;
        Adam adam(3e-3f);
        adam.setupOn(*vit);
        double first = 0.0, last = 0.0;
        for (int step = 0; step < 40; ++step) {
            const CostResult r = cost((*vit)(x), y);
            if (step == 0 && compute == DType::bfloat16) {
                // Attention and the MLP write bfloat16 (where the CPU has bfloat16 kernels);
                // the residual stream stays float32 (its embeddings are float32, and a sum
                // of float32 and bfloat16 is float32), as under PyTorch's autocast.
                const DType low = backendFor(Device::cpu()).gemmOutputDType(DType::bfloat16);
                for (const char* layer : {"encoder_layer_0_attention", "encoder_layer_0_mlp_0",
                                          "encoder_layer_0_mlp_gelu", "encoder_layer_1_mlp_3"}) {
                    EXPECT_EQ(vit->getNodeByName(layer).outputs().at(0).dtype(), low) << layer;
                }
                for (const char* layer : {"encoder_layer_0_ln_1", "encoder_layer_1_residual_2", "encoder_ln"}) {
                    EXPECT_EQ(vit->getNodeByName(layer).outputs().at(0).dtype(), DType::float32) << layer;
                }
            }
            vit->zeroGradParams();
            vit->backward(r.grad[0]);
            adam.update();
            if (step == 0) first = r.error;
            last = r.error;
        }
        EXPECT_LT(last, 0.3 * first);
        vit->evalMode();
        const std::vector<float> scores = (*vit)(x).toVector<float>();
        int right = 0;
        for (int n = 0; n < 32; ++n) right += (scores[n * 2 + 1] > scores[n * 2]) == (labels[n] == 1);
        EXPECT_GE(right, 30);
    }
}

// A small GPT learns a repeating text through the trainer with classesLast cross entropy
// over its [N, T, V] scores (in float32 and in bfloat16); sampleText then continues the
// pattern, keeps the prompt, gives the same text for the same seed, and refuses bytes
// outside the vocabulary.
TEST(Transformers, SmallGptLearnsAPatternAndSamplesIt) {
    std::string text;
    while (text.size() < 8 * 64 + 1) text += "tessera, "; // period 9: windows start at every phase
    auto [x, y] = nextIdWindows(textIds(text), 8);
    ASSERT_EQ(x.shape(), (Shape{64, 8}));
    CrossEntropy cost({.classesLast = true});
    // The model trained in `compute`: the loss falls and it continues the pattern.
    auto trained = [&](DType compute) {
        SCOPED_TRACE(str(compute));
        manualSeed(5);
        auto gpt = loadGPT({.context = 8, .dim = 32, .depth = 1, .heads = 2, .dropout = 0.0f});
        gpt->calcMode(compute);
        Adam adam(1e-2f);
        adam.setupOn(*gpt, true);
        Trainer trainer(*gpt, cost, adam, {.batchsize = 16, .seed = 1, .progress = false});
        const double first = trainer.train(x, y);
        double last = first;
        for (int epoch = 0; epoch < 14; ++epoch) last = trainer.train(x, y);
        EXPECT_LT(last, 0.05 * first) << first << " -> " << last;
        EXPECT_EQ(sampleText(*gpt, "tes", 8, {.count = 13, .temperature = 0.1f, .seed = 3}), "tessera, tessera");
        return gpt;
    };
    trained(DType::bfloat16);
    const auto gpt = trained(DType::float32);
    EXPECT_EQ(sampleText(*gpt, "", 8, {.count = 16, .temperature = 1.0f, .seed = 9}),
              sampleText(*gpt, "", 8, {.count = 16, .temperature = 1.0f, .seed = 9}));
    EXPECT_EQ(sampleText(*gpt, "", 8, {.count = 5}).size(), 5u);
    EXPECT_TRUE(throwsShapeError([&] { sampleText(*gpt, "caf\xc3\xa9", 8); }, {"byte 195", "position 3"}));
    EXPECT_TRUE(throwsShapeError([&] { sampleText(*gpt, "a", 9); }, {"[1, 9]"}));
    EXPECT_TRUE(throwsShapeError([&] { sampleText(*gpt, "a", 8, {.temperature = 0.0f}); }, {"temperature"}));
}

} // namespace
} // namespace tessera
