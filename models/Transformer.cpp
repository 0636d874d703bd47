#include "models/Transformer.h"

#include <cmath>

#include "backend/Random.h"
#include "data/Text.h"

#include "modules/Add.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/DropPath.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MultiheadAttention.h"
#include "modules/Pool.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Slice.h"
#include "modules/Transpose.h"

namespace tessera {

namespace {
NodePtr layerNorm(const NodePtr& x, int64_t dim, const std::string& name) {
    return node(std::make_shared<LayerNorm>(std::vector<int64_t>{dim}, LayerNormOptions{.epsilon = 1e-6f}), x, name);
}

NodePtr dropout(const NodePtr& x, float p, const std::string& name) {
    return p > 0.0f ? node(std::make_shared<Dropout>(DropoutOptions{.p = p}), x, name) : x;
}

// x [N, T, dim] -> [N, T, dim]: x + attention(norm(x)), then + mlp(norm(.)) (torchvision's EncoderBlock).
NodePtr encoderBlock(const NodePtr& x, int64_t dim, int64_t heads, int64_t mlp, float p, float attentionP, bool causal,
                     const std::string& name) {
    auto h = layerNorm(x, dim, name + "_ln_1");
    h = node(std::make_shared<MultiheadAttention>(dim, heads,
                                                  MultiheadAttentionOptions{.dropout = attentionP, .causal = causal}),
             h, name + "_attention");
    h = dropout(h, p, name + "_dropout");
    auto x1 = node(std::make_shared<Add>(), {x, h}, name + "_residual_1");
    auto m = layerNorm(x1, dim, name + "_ln_2");
    m = node(std::make_shared<Linear>(dim, mlp), m, name + "_mlp_0");
    m = node(std::make_shared<Gelu>(), m, name + "_mlp_gelu");
    m = dropout(m, p, name + "_mlp_dropout_1");
    m = node(std::make_shared<Linear>(mlp, dim), m, name + "_mlp_3");
    m = dropout(m, p, name + "_mlp_dropout_2");
    return node(std::make_shared<Add>(), {x1, m}, name + "_residual_2");
}
} // namespace

ViTConfig vitB16() { return {}; }

ViTConfig vitTiny(int64_t image, int64_t channels) {
    return {.image = image,
            .channels = channels,
            .patch = 4,
            .dim = 64,
            .depth = 6,
            .heads = 4,
            .mlp = 256,
            .classes = 10,
            .name = channels == 1 ? "vit-tiny" : "vit-tiny-cifar"};
}

std::shared_ptr<Graph> loadViT(const ViTConfig& c) {
    if (c.image <= 0 || c.patch <= 0 || c.image % c.patch != 0) {
        throw ModuleError("loadViT: the image size must be a positive multiple of the patch size, got image " +
                          std::to_string(c.image) + " and patch " + std::to_string(c.patch));
    }
    const int64_t D = c.dim, T = (c.image / c.patch) * (c.image / c.patch);
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto x =
        node(std::make_shared<Conv2D>(c.channels, D, c.patch, ConvOptions{.stride = {c.patch}}), data, "conv_proj");
    x = node(std::make_shared<Reshape>(Shape{0, D, T}), x, "patches");
    x = node(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1}), x, "tokens");
    auto cls = node(std::make_shared<Parameter>(std::vector<int64_t>{1, D}), x, "class_token");
    x = node(std::make_shared<Concat>(1), {cls, x}, "with_class_token");
    auto pos = node(std::make_shared<Parameter>(std::vector<int64_t>{T + 1, D}, ParameterOptions{.std = 0.02f}), x,
                    "pos_embedding");
    x = node(std::make_shared<Add>(), {x, pos}, "positioned");
    x = dropout(x, c.dropout, "encoder_dropout");
    for (int64_t i = 0; i < c.depth; ++i) {
        x = encoderBlock(x, D, c.heads, c.mlp, c.dropout, c.attentionDropout, false,
                         "encoder_layer_" + std::to_string(i));
    }
    x = layerNorm(x, D, "encoder_ln");
    x = node(std::make_shared<Slice>(1, 0, 1), x, "class_token_out");
    x = node(std::make_shared<Reshape>(Shape{0, D}), x, "features");
    x = node(std::make_shared<Linear>(D, c.classes), x, "head");
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{x}, c.name);
}

namespace {
// LayerNorm over the channels of [N, C, H, W] (torchvision's LayerNorm2d): to channels-last and back.
NodePtr layerNorm2d(const NodePtr& x, int64_t C, const std::string& name) {
    auto h = node(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 3, 1}), x, name + "_nhwc");
    h = layerNorm(h, C, name);
    return node(std::make_shared<Transpose>(std::vector<int64_t>{0, 3, 1, 2}), h, name + "_nchw");
}

NodePtr convNeXtBlock(const NodePtr& x, int64_t C, float dropPath, float layerScale, const std::string& name) {
    auto h = node(std::make_shared<Conv2D>(C, C, 7, ConvOptions{.pad = {3}, .groups = C}), x, name + "_dwconv");
    h = node(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 3, 1}), h, name + "_nhwc");
    h = layerNorm(h, C, name + "_norm");
    h = node(std::make_shared<Linear>(C, 4 * C), h, name + "_pwconv1");
    h = node(std::make_shared<Gelu>(), h, name + "_gelu");
    h = node(std::make_shared<Linear>(4 * C, C), h, name + "_pwconv2");
    h = node(std::make_shared<Scale>(std::vector<int64_t>{C}, ScaleOptions{.init = layerScale}), h,
             name + "_layer_scale");
    h = node(std::make_shared<Transpose>(std::vector<int64_t>{0, 3, 1, 2}), h, name + "_nchw");
    if (dropPath > 0.0f) h = node(std::make_shared<DropPath>(DropPathOptions{.p = dropPath}), h, name + "_drop_path");
    return node(std::make_shared<Add>(), {x, h}, name + "_residual");
}
} // namespace

std::shared_ptr<Graph> loadConvNeXt(int64_t classes, float dropPath, float layerScale) {
    const int64_t depths[] = {3, 3, 9, 3}, dims[] = {96, 192, 384, 768};
    const int64_t blocks = 3 + 3 + 9 + 3;
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto x = node(std::make_shared<Conv2D>(3, dims[0], 4, ConvOptions{.stride = {4}}), data, "stem");
    x = layerNorm2d(x, dims[0], "stem_norm");
    int64_t b = 0;
    for (int s = 0; s < 4; ++s) {
        const std::string stage = "stage" + std::to_string(s + 1);
        if (s > 0) {
            x = layerNorm2d(x, dims[s - 1], stage + "_downsample_norm");
            x = node(std::make_shared<Conv2D>(dims[s - 1], dims[s], 2, ConvOptions{.stride = {2}}), x,
                     stage + "_downsample");
        }
        for (int64_t i = 0; i < depths[s]; ++i, ++b) {
            const float p = dropPath * static_cast<float>(b) / static_cast<float>(blocks - 1);
            x = convNeXtBlock(x, dims[s], p, layerScale, stage + "_block" + std::to_string(i));
        }
    }
    x = node(std::make_shared<GlobalAvgPool>(), x, "avgpool");
    x = node(std::make_shared<Flatten>(), x, "flatten");
    x = layerNorm(x, dims[3], "head_norm");
    x = node(std::make_shared<Linear>(dims[3], classes), x, "head");
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{x}, "convnext-tiny");
}

std::shared_ptr<Graph> loadGPT(const GptConfig& c) {
    const int64_t D = c.dim;
    auto ids = node(std::make_shared<Identity>(), {}, "ids");
    auto x = node(std::make_shared<Embedder>(c.vocabulary, c.context, D,
                                             EmbedderOptions{.initscheme = InitScheme::gaussian, .wscale = 0.02f}),
                  ids, "token_embedding");
    auto pos = node(std::make_shared<Parameter>(std::vector<int64_t>{c.context, D}, ParameterOptions{.std = 0.02f}), x,
                    "pos_embedding");
    x = node(std::make_shared<Add>(), {x, pos}, "positioned");
    x = dropout(x, c.dropout, "embedding_dropout");
    for (int64_t i = 0; i < c.depth; ++i) {
        x = encoderBlock(x, D, c.heads, 4 * D, c.dropout, c.dropout, true, "block_" + std::to_string(i));
    }
    x = layerNorm(x, D, "final_ln");
    x = node(std::make_shared<Linear>(D, c.vocabulary), x, "head");
    return std::make_shared<Graph>(std::vector<NodePtr>{ids}, std::vector<NodePtr>{x}, c.name);
}

std::string sampleText(Module& net, const std::string& prompt, int64_t context, const SampleTextOptions& options) {
    if (context < 1) throw ShapeError("sampleText: the context must be >= 1, got " + std::to_string(context));
    if (!(options.temperature > 0.0f)) {
        throw ShapeError("sampleText: the temperature must be > 0, got " + std::to_string(options.temperature));
    }
    const Shape out = net.dataShapeFrom(Shape{1, context});
    if (out.rank() != 3 || out[1] != context) {
        throw ShapeError("sampleText: expects a model of ids [1, " + std::to_string(context) + "] -> scores [1, " +
                         std::to_string(context) + ", vocabulary], got scores " + out.str());
    }
    const int64_t vocabulary = out[2];
    std::vector<int32_t> ids = textIds(prompt, vocabulary);
    if (ids.empty()) ids.push_back('\n'); // an empty prompt starts a new line
    const bool wasTrain = net.isTrain();
    net.evalMode();
    std::string text = prompt;
    std::vector<double> p(static_cast<size_t>(vocabulary));
    for (int64_t i = 0; i < options.count; ++i) {
        const int64_t k = std::min<int64_t>(context, static_cast<int64_t>(ids.size()));
        std::vector<int32_t> window(static_cast<size_t>(context), 0);
        std::copy(ids.end() - k, ids.end(), window.begin());
        const Tensor scores = // any floating dtype (a bfloat16 network's last Linear writes bfloat16)
            net(Tensor::fromVector({1, context}, window).to(net.device())).toHost().convertedTo(DType::float32);
        const float* row = scores.data<float>() + (k - 1) * vocabulary;
        const float top = *std::max_element(row, row + vocabulary);
        double sum = 0;
        for (int64_t v = 0; v < vocabulary; ++v) {
            p[static_cast<size_t>(v)] = std::exp((row[v] - top) / options.temperature);
            sum += p[static_cast<size_t>(v)];
        }
        // One uniform draw in [0, sum) from the seed's counter-based stream.
        double u = static_cast<double>(randomBits(options.seed, static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * sum;
        int64_t next = vocabulary - 1;
        for (int64_t v = 0; v < vocabulary; ++v) {
            u -= p[static_cast<size_t>(v)];
            if (u < 0) {
                next = v;
                break;
            }
        }
        ids.push_back(static_cast<int32_t>(next));
        text += static_cast<char>(next);
    }
    if (wasTrain) net.trainMode();
    return text;
}

} // namespace tessera
