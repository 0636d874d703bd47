#pragma once
/// \file The zoo's transformers and ConvNeXt, built graph-style from Tessera's layers:
/// ViT (Dosovitskiy et al., torchvision's VisionTransformer layer for layer), ConvNeXt
/// (Liu et al. 2022, torchvision's convnext_tiny) and a small causal character-level GPT.

#include <memory>
#include <string>
#include <vector>

#include "containers/Graph.h"

namespace tessera {

struct ViTConfig {
    int64_t image = 224, channels = 3, patch = 16; ///< square images of `image` pixels in patches of `patch`
    int64_t dim = 768, depth = 12, heads = 12, mlp = 3072;
    int64_t classes = 1000;
    float dropout = 0.0f;          ///< after attention and in the MLP (torchvision's dropout)
    float attentionDropout = 0.0f; ///< of the attention weights
    std::string name = "vit";
};

/// ViT-B/16 as torchvision's vit_b_16 (86,567,656 parameters).
ViTConfig vitB16();
/// A small ViT for 28x28 (channels 1: MNIST, Fashion-MNIST) or 32x32 (channels 3: CIFAR)
/// images: patches of 4, 64 wide, 6 blocks of 4 heads, MLPs 256 wide, 10 classes.
ViTConfig vitTiny(int64_t image, int64_t channels);

/// x [N, channels, image, image] -> class scores [N, classes]: a patch convolution (kernel
/// and stride `patch`) to [N, T, dim] tokens, a learned class token joined in front, a
/// learned positional table added, `depth` pre-norm encoder blocks (LayerNorm,
/// MultiheadAttention, residual; LayerNorm, Linear-GELU-Linear, residual), a final
/// LayerNorm, and a Linear head on the class token. LayerNorms take epsilon 1e-6, as
/// torchvision's; parameter names follow the blocks (`encoder_layer_0_attention`).
std::shared_ptr<Graph> loadViT(const ViTConfig& config);

/// ConvNeXt-T as torchvision's convnext_tiny (28,589,128 parameters) for 224x224 images:
/// a 4x4/4 stem, stages of 3, 3, 9, 3 blocks 96, 192, 384, 768 wide with a
/// LayerNorm-then-2x2/2-convolution between them; each block a 7x7 depthwise convolution,
/// channels-last LayerNorm, Linear to 4x, GELU, Linear back, layer scale (`layerScale`),
/// stochastic depth rising linearly to `dropPath`, and a residual; global average
/// pooling, LayerNorm and a Linear head.
std::shared_ptr<Graph> loadConvNeXt(int64_t classes = 1000, float dropPath = 0.1f, float layerScale = 1e-6f);

struct GptConfig {
    int64_t vocabulary = 128; ///< byte values 0..127 (ASCII text)
    int64_t context = 64;     ///< the sequence length the model reads
    int64_t dim = 128, depth = 4, heads = 4;
    float dropout = 0.1f;
    std::string name = "gpt-mini";
};

/// A causal transformer language model: ids [N, context] (int32) -> next-id scores
/// [N, context, vocabulary]: an Embedder plus a learned positional table, `depth`
/// pre-norm blocks with causal MultiheadAttention and a 4x GELU MLP, a final LayerNorm
/// and a Linear head. Position t's scores see ids 0..t only.
std::shared_ptr<Graph> loadGPT(const GptConfig& config = {});

struct SampleTextOptions {
    int64_t count = 200;      ///< characters to add
    float temperature = 0.8f; ///< scores divided by this before the softmax (> 0; small: likelier ids)
    uint64_t seed = 1;        ///< the draws' seed: the same seed gives the same text
};

/// Continues `prompt` with a causal language model over byte ids (gpt-mini's kind: ids
/// [1, context] -> scores [1, context, vocabulary]): each next id is drawn from the softmax
/// of the scores at the last position of the latest `context` ids (the window padded after
/// them, which a causal model does not see), in eval mode on the model's device. Returns
/// the prompt with the added text. ShapeError for a prompt byte outside the vocabulary or a
/// model whose outputs do not fit.
std::string sampleText(Module& net, const std::string& prompt, int64_t context, const SampleTextOptions& options = {});

} // namespace tessera
