#!/usr/bin/python3
"""Networks exported by PyTorch's torch.onnx.export import into Tessera, pass `tessera
check`, and `tessera run` gives PyTorch's outputs.

  torchvision_onnx.py TESSERA WORKDIR [MODEL ...]

TESSERA is the tessera binary. Each model (torchvision, random weights, eval mode) is
exported at opset 13 with a free batch dim, checked at batch 2, run on the same random
input as PyTorch, and compared: every output within 1e-4 of PyTorch's, relative to the
largest. Without arguments it takes ResNet-18, VGG-11, MobileNet V2 (depthwise), MobileNet
V3 small (hard-swish, squeeze-and-excitation gates), DenseNet-121 (concatenations),
ShuffleNet V2 (channel shuffles from computed shapes), SqueezeNet 1.1 and GoogLeNet (max
pools with ceil_mode), LR-ASPP MobileNet V3 (segmentation: Resize by sizes), 2-layer
bidirectional nn.LSTM, nn.GRU and nn.RNN networks, and a small network of GroupNorm, SiLU,
Mish and LayerNorm, a transformer's feed-forward block (Linear on [N, T, C], GELU,
LayerNorm, softmax over the last axis), an nn.TransformerEncoder
text classifier, small torchvision ViT, ConvNeXt, Swin and MaxViT networks, and a character-level
GPT in nanoGPT's form (masked_fill of a causal mask buffer, positions by arange, ids in), each
exported at opsets 13 and 17, a GPT-2 as Hugging Face writes it (Conv1D's addmm, torch.where of
a bool mask buffer, a head tied to the token table) at 13 and 17, a LLaMA in small (rotary embeddings from buffers, a triu
causal mask, RMSNorm, a gated MLP) at opsets 14 and 17, and a BERT encoder as Hugging Face writes it
(three inputs: ids, an int64 attention mask made additive, token types) at 13 and 17, again
exported with its length free as well as its batch (imported with the length --input gives), and a
text classifier over a padded batch (ids and a bool padding mask: nn.TransformerEncoder's
src_key_padding_mask, masked_fill and torch.where of the mask) and one that makes its mask from
its ids (ids == 0, ~mask) at 13 and 17, and one that reads each sequence's last real token
(h[torch.arange(N), lengths - 1] over the free batch, and Hugging Face's argmax of ids == pad) at 13 and 17, and an nn.Transformer over padded batches (four inputs:
source and target ids and their bool padding masks; a causal target mask) at 14 and 17, and a
diffusion denoiser (two inputs: images and float timesteps, embedded by Sin and Cos of data;
GroupNorm, SiLU, attention over positions) at 13 and 17, and a VAE's attention as diffusers
writes it (scores by torch.baddbmm of an empty tensor at beta 0) at 13 and 17, and a ViT
block as einops-style code writes it (attention by Einsums) at 13 and 17. Named only: torchvision's full-size vit_b_16, convnext_tiny, swin_t and maxvit_t
at opsets 13 and 17 (vit_b_16_opset13, ...: weights drawn from N(0, 0.02); minutes each).
The attentions of the transformers among them (q k^T scaled, masked, softmax, times v) must
import as one ScaledDotProductAttention layer each (FUSED_ATTENTION), causal where the mask
is the causal one. Exits 1 on the first mismatch.
Needs Debian's python3-torch and python3-torchvision.
"""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision

class SegmentationOut(torch.nn.Module):
    """A torchvision segmentation network's "out" map (they return a dict)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


MODELS = {
    # upsampled with F.interpolate(size=...): Resize by sizes, whole multiples of the input's
    "lraspp_mobilenet_v3_large": lambda: SegmentationOut(
        torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)),
    "resnet18": torchvision.models.resnet18,
    "vgg11": torchvision.models.vgg11,
    "mobilenet_v2": torchvision.models.mobilenet_v2,
    "mobilenet_v3_small": torchvision.models.mobilenet_v3_small,
    "densenet121": torchvision.models.densenet121,
    "shufflenet_v2_x0_5": torchvision.models.shufflenet_v2_x0_5,
    "squeezenet1_1": torchvision.models.squeezenet1_1,
    "googlenet": lambda: torchvision.models.googlenet(aux_logits=False, init_weights=True),
}


class Recurrent(torch.nn.Module):
    """A 2-layer bidirectional nn.LSTM / nn.GRU / nn.RNN on [T, N, 8] and a linear head on its last step."""

    def __init__(self, cls):
        super().__init__()
        self.rnn = cls(8, 16, num_layers=2, bidirectional=True)
        self.fc = torch.nn.Linear(32, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[-1])


# Recurrent networks: PyTorch writes their zero initial states as Expand(0, computed
# shape) and y[-1] as a Gather; inputs [T, N, C] with a fixed batch.
SEQUENCE_MODELS = {
    "lstm_bi2": lambda: Recurrent(torch.nn.LSTM),
    "gru_bi2": lambda: Recurrent(torch.nn.GRU),
    "rnn_tanh_bi2": lambda: Recurrent(torch.nn.RNN),
}


class Norms(torch.nn.Module):
    """GroupNorm, SiLU, Mish and LayerNorm (over the last three dims and over the
    features), with weights drawn so that every one matters. (PyTorch 1.13 cannot export a
    LayerNorm without affine parameters at opset 17: it writes LayerNormalization without
    its Scale.)"""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.ln = torch.nn.LayerNorm([8, 8, 8])
        self.fc = torch.nn.Linear(512, 10)
        self.head = torch.nn.LayerNorm(10)
        for m in (self.gn, self.ln, self.head):
            torch.nn.init.uniform_(m.weight, 0.5, 1.5)
            torch.nn.init.uniform_(m.bias, -0.5, 0.5)

    def forward(self, x):
        y = torch.nn.functional.silu(self.gn(self.conv1(x)))
        y = self.ln(torch.nn.functional.mish(self.conv2(y)))
        return self.head(self.fc(y.flatten(1)))


class Tokens(torch.nn.Module):
    """A transformer's feed-forward block on [N, T, C]: Linear over the last axis of 3-D
    data (PyTorch writes MatMul + Add), GELU, LayerNorm, and a softmax over the last axis.
    Two biases start at zero, as torchvision's do: PyTorch then writes one initializer for
    both and an Identity for the other, which the import must see through."""

    def __init__(self):
        super().__init__()
        self.up, self.ln, self.down = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)
        self.mid = torch.nn.Linear(32, 32)
        torch.nn.init.uniform_(self.ln.weight, 0.5, 1.5)
        torch.nn.init.zeros_(self.ln.bias)
        torch.nn.init.zeros_(self.mid.bias)

    def forward(self, x):
        h = self.ln(torch.nn.functional.gelu(self.up(x)))
        return torch.softmax(self.down(self.mid(h)), dim=-1)


class TextEncoder(torch.nn.Module):
    """An nn.TransformerEncoder text classifier: tokens [N, T, 8] projected to 32 wide, two
    encoder layers (nn.MultiheadAttention with 4 heads, which PyTorch writes as shape
    arithmetic, slices, reshapes and matmuls), the mean over the tokens, a linear head."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


def small_vit():
    """torchvision's VisionTransformer, small: 32x32 images in 8x8 patches, 2 blocks of 4
    heads (a class token expanded over the batch, a learned positional table)."""
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64,
                             num_classes=10)


def small_swin():
    """torchvision's SwinTransformer, small: 36x36 images in 4x4 patches, windows of 4 that
    the 9x9 and 5x5 maps are padded to, shifted windows and their masks (computed from the
    shape, folded at import), patch merging of an odd map (strided slices of a padded map)."""
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           stochastic_depth_prob=0.0, num_classes=10)


def small_maxvit():
    """torchvision's MaxVit, small: two stages of one block (MBConv, window and grid attention
    written as Einsum, relative position biases)."""
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


def small_convnext():
    """torchvision's ConvNeXt, small: two stages of one block (7x7 depthwise convolutions,
    channels-last LayerNorm, layer scale) and a downsampling step between them."""
    from torchvision.models.convnext import ConvNeXt, CNBlockConfig
    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], layer_scale=0.5, num_classes=10)


def conv_relu(i, o):
    """A U-Net's 3x3 convolution (same size) and ReLU."""
    return torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.ReLU())


class UNet(torch.nn.Module):
    """A small U-Net whose up steps are ConvTranspose2d(3, stride 2, padding 1, output_padding 1), which
    doubles a size exactly (and one ConvTranspose2d(2, stride 2)), with skips by concatenation."""

    def __init__(self):
        super().__init__()
        self.down1, self.down2, self.bottom = conv_relu(3, 8), conv_relu(8, 16), conv_relu(16, 32)
        self.pool = torch.nn.MaxPool2d(2)
        self.up2 = torch.nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1)
        self.dec2 = conv_relu(32, 16)
        self.up1 = torch.nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec1 = conv_relu(16, 8)
        self.out = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        b = self.bottom(self.pool(d2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], 1))
        return self.out(self.dec1(torch.cat([self.up1(u2), d1], 1)))


class UNetResized(torch.nn.Module):
    """A U-Net whose up step is nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True), as many
    PyTorch U-Nets write it, with a nearest resize to a size that is no whole multiple (7x9 from 5x5) and a
    head resized back to the input's size by F.interpolate(size=x.shape[-2:], mode='bilinear')."""

    def __init__(self):
        super().__init__()
        self.down1, self.down2, self.dec = conv_relu(3, 8), conv_relu(8, 16), conv_relu(24, 8)
        self.pool = torch.nn.MaxPool2d(2)
        self.up = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.out = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        d1 = self.down1(x)
        h = self.dec(torch.cat([self.up(self.down2(self.pool(d1))), d1], 1))
        h = torch.nn.functional.interpolate(self.pool(self.pool(h)), size=(7, 9), mode="nearest")
        return torch.nn.functional.interpolate(self.out(h), size=x.shape[-2:], mode="bilinear", align_corners=False)


class Audio(torch.nn.Module):
    """A 1-D audio network: strided Conv1d, GroupNorm, GELU, LayerNorm over channels-last features and a
    2-layer bidirectional batch-first LSTM, exported with a free batch (its zero initial states are a
    ConstantOfShape over the batch, sliced per layer)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(1, 16, 5, stride=2, padding=2)
        self.gn = torch.nn.GroupNorm(4, 16)
        self.conv2 = torch.nn.Conv1d(16, 24, 3, stride=2, padding=1)
        self.ln = torch.nn.LayerNorm(24)
        self.lstm = torch.nn.LSTM(24, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.gn(self.conv1(x)))
        h = self.ln(self.conv2(h).transpose(1, 2))
        y, _ = self.lstm(h)
        return self.fc(y[:, -1])


class Heads(torch.nn.Module):
    """Ops of vision heads and embedding models: a bicubic upsampling, a channel-mean map
    broadcast by expand_as, a sum over the spatial dims and F.normalize of the embedding
    (ReduceL2, Clip, Expand and Div in the export)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x):
        h = torch.nn.functional.interpolate(torch.relu(self.conv(x)), scale_factor=2, mode="bicubic")
        h = h * h.mean(dim=1, keepdim=True).expand_as(h)
        return torch.nn.functional.normalize(self.fc(h.sum(dim=(2, 3)) / 100.0), dim=1)


class ConvAttention(torch.nn.Module):
    """A convolutional block attention module (CBAM): channel attention from average and max
    pooled maps through a shared MLP, spatial attention from the channel mean and maximum
    (torch.max(h, dim=1)[0]: ReduceMax), and a head of spatial maxima and minima (amax, amin)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mlp = torch.nn.Sequential(torch.nn.Conv2d(8, 4, 1), torch.nn.ReLU(), torch.nn.Conv2d(4, 8, 1))
        self.spatial = torch.nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        pools = (torch.nn.functional.adaptive_avg_pool2d(h, 1), torch.nn.functional.adaptive_max_pool2d(h, 1))
        h = h * torch.sigmoid(self.mlp(pools[0]) + self.mlp(pools[1]))
        maps = torch.cat([h.mean(dim=1, keepdim=True), torch.max(h, dim=1, keepdim=True)[0]], 1)
        h = h * torch.sigmoid(self.spatial(maps))
        return h.amax(dim=(2, 3)) - h.amin(dim=-1).mean(dim=-1)


class CausalSelfAttention(torch.nn.Module):
    """A GPT's attention as nanoGPT and minGPT write it: one projection to q, k and v, heads by
    view and transpose, scores masked with masked_fill(bias == 0, -inf) from a tril buffer."""

    def __init__(self, width, heads, context):
        super().__init__()
        self.c_attn, self.c_proj, self.heads = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width), heads
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = torch.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class MiniGpt(torch.nn.Module):
    """A character-level GPT in nanoGPT's form: token and learned positional embeddings (the
    positions an arange over the input's length), pre-norm blocks, a head without bias; its
    input is ids (int64), its context longer than the sequence it is exported with."""

    VOCAB, CONTEXT, LENGTH = 40, 24, 16

    def __init__(self, width=32, heads=4, blocks=2):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(self.VOCAB, width), torch.nn.Embedding(self.CONTEXT, width)
        self.h = torch.nn.ModuleList(torch.nn.ModuleDict({
            "ln_1": torch.nn.LayerNorm(width), "attn": CausalSelfAttention(width, heads, self.CONTEXT),
            "ln_2": torch.nn.LayerNorm(width), "mlp": torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))})
            for _ in range(blocks))
        self.ln_f, self.lm_head = torch.nn.LayerNorm(width), torch.nn.Linear(width, self.VOCAB, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(0, idx.size(1), dtype=torch.long))
        for b in self.h:
            x = x + b["attn"](b["ln_1"](x))
            x = x + b["mlp"](b["ln_2"](x))
        return self.lm_head(self.ln_f(x))


class Conv1D(torch.nn.Module):
    """Hugging Face's GPT-2 linear layer: addmm of the rows of x, weight [in, out]."""

    def __init__(self, inputs, outputs):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(torch.randn(inputs, outputs)), torch.nn.Parameter(torch.randn(outputs))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(x.size()[:-1] + (self.bias.numel(),))


class MiniGpt2(torch.nn.Module):
    """A GPT-2 as Hugging Face's code writes it: Conv1D (addmm over the batch's rows merged), a
    bool tril buffer sliced and torch.where(mask, scores, finfo.min), the tanh GELU written
    out, positions by arange, and the head tied to the token table (wte.weight.t())."""

    VOCAB, CONTEXT, LENGTH, WIDTH, HEADS = 40, 24, 16, 32, 4

    def __init__(self, blocks=2):
        super().__init__()
        w = self.WIDTH
        self.wte, self.wpe, self.ln_f = torch.nn.Embedding(self.VOCAB, w), torch.nn.Embedding(self.CONTEXT, w), \
            torch.nn.LayerNorm(w)
        self.h = torch.nn.ModuleList(torch.nn.ModuleDict({
            "ln_1": torch.nn.LayerNorm(w), "c_attn": Conv1D(w, 3 * w), "c_proj": Conv1D(w, w),
            "ln_2": torch.nn.LayerNorm(w), "c_fc": Conv1D(w, 4 * w), "mlp_proj": Conv1D(4 * w, w)})
            for _ in range(blocks))
        self.register_buffer("bias", torch.tril(torch.ones(self.CONTEXT, self.CONTEXT, dtype=torch.bool))
                             .view(1, 1, self.CONTEXT, self.CONTEXT))

    def attention(self, b, x):
        heads = lambda t: t.view(t.size()[:-1] + (self.HEADS, self.WIDTH // self.HEADS)).permute(0, 2, 1, 3)  # noqa
        q, k, v = (heads(t) for t in b["c_attn"](x).split(self.WIDTH, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5)
        T = q.size(-2)
        scores = torch.where(self.bias[:, :, :T, :T], scores, torch.full([], torch.finfo(scores.dtype).min))
        y = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return b["c_proj"](y.view(y.size()[:-2] + (self.WIDTH,)))

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(0, ids.size(-1), dtype=torch.long).unsqueeze(0))
        for b in self.h:
            x = x + self.attention(b, b["ln_1"](x))
            h = b["c_fc"](b["ln_2"](x))
            h = 0.5 * h * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (h + 0.044715 * torch.pow(h, 3.0))))
            x = x + b["mlp_proj"](h)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())


class RmsNorm(torch.nn.Module):
    """RMSNorm as LLaMA's code writes it (PyTorch 1.13 has none)."""

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MiniLlama(torch.nn.Module):
    """A LLaMA in small: RMSNorm, rotary position embeddings from cos and sin buffers sliced
    to the length (rotate_half by slices and a concatenation), a causal mask
    torch.full((T, T), -inf).triu(1) added to the scores (Trilu: opset 14 and later), a
    SiLU-gated MLP, no biases; ids in."""

    VOCAB, CONTEXT, LENGTH, WIDTH, HEADS = 40, 24, 16, 32, 4

    def __init__(self, blocks=2):
        super().__init__()
        w, d = self.WIDTH, self.WIDTH // self.HEADS
        self.embed, self.norm = torch.nn.Embedding(self.VOCAB, w), RmsNorm(w)
        self.head = torch.nn.Linear(w, self.VOCAB, bias=False)
        self.blocks = torch.nn.ModuleList(torch.nn.ModuleDict({
            "n1": RmsNorm(w), "n2": RmsNorm(w), **{p: torch.nn.Linear(w, w, bias=False) for p in "qkvo"},
            "gate": torch.nn.Linear(w, 2 * w, bias=False), "up": torch.nn.Linear(w, 2 * w, bias=False),
            "down": torch.nn.Linear(2 * w, w, bias=False)}) for _ in range(blocks))
        angles = torch.outer(torch.arange(self.CONTEXT).float(), 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin())

    @staticmethod
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)

    def attention(self, b, x):
        B, T, C = x.shape
        q, k, v = (b[p](x).view(B, T, self.HEADS, C // self.HEADS).transpose(1, 2) for p in "qkv")
        cos, sin = self.cos[:T], self.sin[:T]
        q, k = q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / (C // self.HEADS) ** 0.5 + torch.full((T, T), float("-inf")).triu(1)
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return b["o"](y)

    def forward(self, idx):
        x = self.embed(idx)
        for b in self.blocks:
            x = x + self.attention(b, b["n1"](x))
            h = b["n2"](x)
            x = x + b["down"](torch.nn.functional.silu(b["gate"](h)) * b["up"](h))
        return self.head(self.norm(x))


class MiniBert(torch.nn.Module):
    """A BERT encoder as Hugging Face's code writes it, of three inputs: token ids, an attention
    mask of ones and zeros (int64, padding at the end of the second sequence) made additive by
    (1 - mask) * finfo.min, and token types; word, token-type and position embeddings (a sliced
    int64 position_ids buffer) summed and normalised, post-norm blocks with the exact GELU."""

    VOCAB, CONTEXT, LENGTH, WIDTH, HEADS, TYPES = 40, 24, 16, 32, 4, 2
    INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

    def __init__(self, blocks=2):
        super().__init__()
        w = self.WIDTH
        self.word, self.position = torch.nn.Embedding(self.VOCAB, w), torch.nn.Embedding(self.CONTEXT, w)
        self.token_type, self.ln = torch.nn.Embedding(self.TYPES, w), torch.nn.LayerNorm(w, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(self.CONTEXT).expand((1, -1)))
        self.layers = torch.nn.ModuleList(torch.nn.ModuleDict({
            "q": torch.nn.Linear(w, w), "k": torch.nn.Linear(w, w), "v": torch.nn.Linear(w, w),
            "o": torch.nn.Linear(w, w), "ln1": torch.nn.LayerNorm(w, eps=1e-12), "up": torch.nn.Linear(w, 4 * w),
            "down": torch.nn.Linear(4 * w, w), "ln2": torch.nn.LayerNorm(w, eps=1e-12)}) for _ in range(blocks))

    @classmethod
    def example_inputs(cls, batch):
        ids = torch.randint(0, cls.VOCAB, (batch, cls.LENGTH))
        mask = torch.ones(batch, cls.LENGTH, dtype=torch.long)
        mask[1:, cls.LENGTH - 5:] = 0
        types = torch.zeros(batch, cls.LENGTH, dtype=torch.long)
        types[:, cls.LENGTH // 2:] = 1
        return ids, mask, types

    def forward(self, input_ids, attention_mask, token_type_ids):
        B, T = input_ids.shape
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(self.position_ids[:, :T])
        x = self.ln(x)
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        d = self.WIDTH // self.HEADS
        for b in self.layers:
            q, k, v = (b[p](x).view(B, T, self.HEADS, d).permute(0, 2, 1, 3) for p in "qkv")
            scores = torch.matmul(q, k.transpose(-1, -2)) / d ** 0.5 + additive
            y = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous().view(B, T, self.WIDTH)
            x = b["ln1"](x + b["o"](y))
            x = b["ln2"](x + b["down"](torch.nn.functional.gelu(b["up"](x))))
        return x


class MiniBertFreeLength(MiniBert):
    """MiniBert exported with its length free as well as its batch (dynamic axes {0: "batch",
    1: "seq"} on every input, as Hugging Face's exports write them): its reshapes to heads need
    the length, so the import is given it (--input's sizes bind the file's named dims)."""

    FREE_DIMS = {1: "seq"}


class PaddedText(torch.nn.Module):
    """A text classifier over a padded batch, of two inputs: token ids and a bool padding mask
    (True at padding, the end of the second sequence on). nn.TransformerEncoder with
    src_key_padding_mask (a Where of the mask, -inf and zeros shaped like it), then attention
    written by hand whose scores are masked by masked_fill(pad[:, None, None, :], -inf) (a Where
    of the mask, a constant and data), torch.where(pad[..., None], x, y) of two data operands,
    and a mean over the tokens of the output with the padding zeroed by masked_fill(..., 0.0)."""

    VOCAB, LENGTH, WIDTH, HEADS = 50, 12, 32, 4
    INPUT_NAMES = ("ids", "pad")

    def __init__(self):
        super().__init__()
        w = self.WIDTH
        self.embedding = torch.nn.Embedding(self.VOCAB, w)
        layer = torch.nn.TransformerEncoderLayer(w, self.HEADS, 2 * w, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.q, self.k, self.v = (torch.nn.Linear(w, w) for _ in range(3))
        self.head = torch.nn.Linear(w, 3)

    @classmethod
    def example_inputs(cls, batch):
        ids = torch.randint(0, cls.VOCAB, (batch, cls.LENGTH))
        pad = torch.zeros(batch, cls.LENGTH, dtype=torch.bool)
        pad[1:, cls.LENGTH - 4:] = True
        return ids, pad

    def forward(self, ids, pad):
        x = self.encoder(self.embedding(ids), src_key_padding_mask=pad)
        B, T, W = x.shape
        d = W // self.HEADS
        q, k, v = (p(x).view(B, T, self.HEADS, d).transpose(1, 2) for p in (self.q, self.k, self.v))
        scores = (q @ k.transpose(-1, -2) / d ** 0.5).masked_fill(pad[:, None, None, :], float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, W)
        y = torch.where(pad[..., None], x, y)
        return self.head(y.mean(1) + y.masked_fill(pad[..., None], 0.0).mean(1))


class MaskedTextBase(torch.nn.Module):
    """The layers of the text classifiers that make their padding masks: a token table, a
    2-layer nn.TransformerEncoder (batch first) and a 3-way head."""

    VOCAB, LENGTH, WIDTH = 50, 12, 32
    PADDING_IDX = None

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(self.VOCAB, self.WIDTH, padding_idx=self.PADDING_IDX)
        layer = torch.nn.TransformerEncoderLayer(self.WIDTH, 4, 2 * self.WIDTH, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(self.WIDTH, 3)


class IdsMaskedText(MaskedTextBase):
    """A text classifier that makes its padding mask from its ids (id 0 is padding): pad =
    ids == 0 (Equal of data), src_key_padding_mask=pad, and a mean over the real tokens by the
    float of ~pad (Not)."""

    PADDING_IDX = 0

    @classmethod
    def example_inputs(cls, batch):
        ids = torch.randint(1, cls.VOCAB, (batch, cls.LENGTH))
        ids[1:, cls.LENGTH - 5:] = 0
        return (ids,)

    def forward(self, ids):
        pad = ids == 0
        h = self.encoder(self.embedding(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


class LengthsText(MaskedTextBase):
    """A text classifier given its ids and each sequence's length: the padding mask made in the
    model from the lengths, in the forms people write it: arange(T)[None, :] >= lengths[:, None]
    (GreaterOrEqual of a constant [1, T] and data [N, 1]), the sequence_mask idiom
    arange(T).expand(N, T) < lengths.unsqueeze(1) (an Expand of a constant, Less), Greater of
    lengths - 1, and pad tokens too (Or with ids == 0, And with ids != 0, Xor); a mean over the
    real tokens divided by the lengths; integer divisions, (lengths - 3) // 2 + 1 and
    torch.div(lengths - 10, 4, rounding_mode="floor") (Div, Mod, Less, Xor, Where of integers)."""

    INPUT_NAMES = ("ids", "lengths")

    @classmethod
    def example_inputs(cls, batch):
        ids = torch.randint(1, cls.VOCAB, (batch, cls.LENGTH))
        lengths = torch.tensor([cls.LENGTH] + [cls.LENGTH - 3 - k for k in range(batch - 1)])
        ids[0, 4] = 0  # a pad token inside the first sequence
        return ids, lengths

    def forward(self, ids, lengths):
        N, T = ids.shape
        positions = torch.arange(T)
        past = positions[None, :] >= lengths[:, None]
        valid = positions.expand(N, T) < lengths.unsqueeze(1)
        late = positions[None, :] > lengths[:, None] - 1
        pad = (past | (ids == 0)) & (late | ~valid | (ids == 0))
        real = valid & (ids != 0)
        h = self.encoder(self.embedding(ids), src_key_padding_mask=pad)
        odd = (real ^ (positions[None, :] < 1)).unsqueeze(-1).float()
        pooled = (h * real.unsqueeze(-1).float()).sum(1) / lengths[:, None].float()
        strided = ((lengths - 3) // 2 + 1)[:, None].float()  # a strided convolution's output lengths
        floored = torch.div(lengths - 10, 4, rounding_mode="floor")[:, None].float()  # some negative
        return self.head(pooled + 0.1 * (h * odd).sum(1) + 0.05 * strided + 0.03 * floored)


class LastTokenText(LengthsText):
    """A text classifier that reads each sequence's last real token, as sequence classifiers
    pool: h[torch.arange(N), lengths - 1], which PyTorch exports over a free batch as a Range up
    to the batch, times T, plus lengths - 1, and a Gather of h flattened to [N T, C]; and the
    token before each sequence's first pad id as Hugging Face's GPT2ForSequenceClassification
    finds it, (torch.eq(ids, 0).int().argmax(-1) - 1) % T (ArgMax of integer data)."""

    def forward(self, ids, lengths):
        T = ids.shape[1]
        pad = torch.arange(T)[None, :] >= lengths[:, None]
        h = self.encoder(self.embedding(ids), src_key_padding_mask=pad)
        ends = (torch.eq(ids, 0).int().argmax(-1) - 1) % T
        rows = torch.arange(h.shape[0])
        return self.head(h[rows, lengths - 1] + 0.5 * h[rows, ends])


class ResBlock(torch.nn.Module):
    """A diffusion denoiser's residual block: GroupNorm, SiLU, 3x3 convolutions, the timestep
    embedding projected and added per channel, a 1x1 convolution on the skip where widths differ."""

    def __init__(self, i, o, e):
        super().__init__()
        self.n1, self.c1 = torch.nn.GroupNorm(4, i), torch.nn.Conv2d(i, o, 3, padding=1)
        self.t, self.n2 = torch.nn.Linear(e, o), torch.nn.GroupNorm(4, o)
        self.c2 = torch.nn.Conv2d(o, o, 3, padding=1)
        self.skip = torch.nn.Conv2d(i, o, 1) if i != o else torch.nn.Identity()

    def forward(self, x, e):
        silu = torch.nn.functional.silu
        h = self.c1(silu(self.n1(x))) + self.t(silu(e))[:, :, None, None]
        return self.skip(x) + self.c2(silu(self.n2(h)))


class Diffusion(torch.nn.Module):
    """A diffusion model's denoiser in small, as DDPM-style code writes it, of two inputs: noisy
    images and their timesteps (float). The timesteps' sinusoidal embedding is computed in
    forward (frequencies from exp of an arange, which folds; Sin and Cos of data), then an MLP
    with SiLU; residual blocks take it per channel; a self-attention block over the positions
    (GroupNorm, q, k and v from a 1x1 convolution, softmax), a strided down step, a nearest up
    step and a skip concatenated."""

    CHANNELS, EMBED = 16, 32
    INPUT_NAMES = ("x", "t")

    def __init__(self):
        super().__init__()
        c, e = self.CHANNELS, self.EMBED
        self.time = torch.nn.Sequential(torch.nn.Linear(c, e), torch.nn.SiLU(), torch.nn.Linear(e, e))
        self.stem, self.block1 = torch.nn.Conv2d(3, c, 3, padding=1), ResBlock(c, c, e)
        self.down, self.mid = torch.nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), ResBlock(2 * c, 2 * c, e)
        self.norm, self.qkv = torch.nn.GroupNorm(4, 2 * c), torch.nn.Conv2d(2 * c, 6 * c, 1)
        self.proj, self.up = torch.nn.Conv2d(2 * c, 2 * c, 1), torch.nn.Conv2d(2 * c, c, 3, padding=1)
        self.block2 = ResBlock(2 * c, c, e)
        self.out = torch.nn.Sequential(torch.nn.GroupNorm(4, c), torch.nn.SiLU(), torch.nn.Conv2d(c, 3, 3, padding=1))

    @classmethod
    def example_inputs(cls, batch):
        return torch.randn(batch, 3, 16, 16), torch.tensor([3.0, 917.0, 250.0, 41.0][:batch])

    def forward(self, x, t):
        half = self.CHANNELS // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None] * freqs[None, :]
        e = self.time(torch.cat([torch.sin(args), torch.cos(args)], dim=-1))
        h1 = self.block1(self.stem(x), e)
        h = self.mid(self.down(h1), e)
        N, C, H, W = h.shape
        q, k, v = self.qkv(self.norm(h)).reshape(N, 3, C, H * W).unbind(1)
        w = torch.softmax(q.transpose(1, 2) @ k / C ** 0.5, dim=-1)  # [N, HW, HW]
        h = h + self.proj((v @ w.transpose(1, 2)).reshape(N, C, H, W))
        h = self.up(torch.nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(self.block2(torch.cat([h, h1], dim=1), e))


class EinsumVit(torch.nn.Module):
    """A ViT block as einops-style code writes it (vit-pytorch's Attention): patches by a
    strided convolution, LayerNorm, one bias-free projection to q, k and v, heads by reshape
    and transpose, einsum("b h i d, b h j d -> b h i j") scaled, softmax, einsum("b h i j,
    b h j d -> b h i d"), the heads joined, the output Linear, the residual, a mean over the
    tokens and a head."""

    C, HEADS = 32, 4

    def __init__(self):
        super().__init__()
        self.patches, self.norm = torch.nn.Conv2d(3, self.C, 4, stride=4), torch.nn.LayerNorm(self.C)
        self.to_qkv, self.to_out = torch.nn.Linear(self.C, 3 * self.C, bias=False), torch.nn.Linear(self.C, self.C)
        self.head = torch.nn.Linear(self.C, 10)

    def forward(self, x):
        t = self.patches(x).flatten(2).transpose(1, 2)  # [N, T, C]
        N, T, C = t.shape
        q, k, v = (u.reshape(N, T, self.HEADS, -1).transpose(1, 2) for u in self.to_qkv(self.norm(t)).chunk(3, dim=-1))
        dots = torch.einsum("b h i d, b h j d -> b h i j", q, k) * (C // self.HEADS) ** -0.5
        y = torch.einsum("b h i j, b h j d -> b h i d", dots.softmax(dim=-1), v)
        t = t + self.to_out(y.transpose(1, 2).reshape(N, T, C))
        return self.head(t.mean(dim=1))


class VaeAttention(torch.nn.Module):
    """A VAE's mid-block attention as diffusers writes it: GroupNorm, tokens [N, HW, C], q, k and
    v by Linear, heads moved into the batch (head_to_batch_dim; its last size written -1, as
    hand-written code often has it: a Reshape to the batch times the heads and a -1), the
    scores by torch.baddbmm of an empty tensor at beta 0 (get_attention_scores: a
    ConstantOfShape of the computed shape times 0 in the export), softmax, bmm, the heads
    back, the output Linear and the residual."""

    C, HEADS = 32, 2

    def __init__(self):
        super().__init__()
        self.stem, self.norm = torch.nn.Conv2d(3, self.C, 3, padding=1), torch.nn.GroupNorm(8, self.C, eps=1e-6)
        self.to_q, self.to_k, self.to_v, self.to_out = (torch.nn.Linear(self.C, self.C) for _ in range(4))
        self.out = torch.nn.Conv2d(self.C, 3, 3, padding=1)

    def heads(self, t):
        N, T, C = t.shape
        return t.reshape(N, T, self.HEADS, C // self.HEADS).permute(0, 2, 1, 3).reshape(N * self.HEADS, T, -1)

    def forward(self, x):
        h = self.stem(x)
        N, C, H, W = h.shape
        t = self.norm(h).view(N, C, H * W).transpose(1, 2)
        q, k, v = self.heads(self.to_q(t)), self.heads(self.to_k(t)), self.heads(self.to_v(t))
        empty = torch.empty(q.shape[0], q.shape[1], k.shape[1], dtype=q.dtype)
        scores = torch.baddbmm(empty, q, k.transpose(-1, -2), beta=0, alpha=(C // self.HEADS) ** -0.5)
        y = torch.bmm(scores.softmax(dim=-1), v).reshape(N, self.HEADS, H * W, C // self.HEADS).permute(0, 2, 1, 3)
        y = self.to_out(y.reshape(N, H * W, C)).transpose(-1, -2).reshape(N, C, H, W)
        return self.out(h + y)


class Seq2Seq(torch.nn.Module):
    """nn.Transformer (an encoder and a decoder layer) over padded batches of ids, four inputs:
    source and target ids and their bool padding masks. The decoder's causal mask, a triu of
    -inf, is filled with -inf where the target padding is set (attn_mask.masked_fill of the
    key padding mask: a Where of data and a constant tensor, [T, T] over [N H, 1, T]); the
    source padding masks the encoder and the decoder's cross-attention."""

    VOCAB, SOURCE, TARGET, WIDTH = 30, 9, 7, 32
    INPUT_NAMES = ("src", "tgt", "src_pad", "tgt_pad")

    def __init__(self):
        super().__init__()
        w = self.WIDTH
        self.source, self.target = torch.nn.Embedding(self.VOCAB, w), torch.nn.Embedding(self.VOCAB, w)
        self.transformer = torch.nn.Transformer(w, 4, 1, 1, 2 * w, dropout=0.0, batch_first=True)
        self.out = torch.nn.Linear(w, self.VOCAB)

    @classmethod
    def example_inputs(cls, batch):
        src, tgt = torch.randint(0, cls.VOCAB, (batch, cls.SOURCE)), torch.randint(0, cls.VOCAB, (batch, cls.TARGET))
        src_pad = torch.zeros(batch, cls.SOURCE, dtype=torch.bool)
        tgt_pad = torch.zeros(batch, cls.TARGET, dtype=torch.bool)
        src_pad[1:, cls.SOURCE - 3:] = True
        tgt_pad[1:, cls.TARGET - 2:] = True
        return src, tgt, src_pad, tgt_pad

    def forward(self, src, tgt, src_pad, tgt_pad):
        T = tgt.shape[1]
        causal = torch.triu(torch.full((T, T), float("-inf")), 1)
        h = self.transformer(self.source(src), self.target(tgt), tgt_mask=causal, src_key_padding_mask=src_pad,
                             tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.out(h)


# Layers of networks since 2020, at the opset before ONNX had LayerNormalization (PyTorch
# writes it decomposed) and at the one that has it: name -> (model, opset, input shape).
# Their weights are drawn anew (torchvision zeroes ViT's head), so that every block matters.
NORM_MODELS = {
    "norms_opset13": (Norms, 13, (2, 3, 8, 8)),
    "norms_opset17": (Norms, 17, (2, 3, 8, 8)),
    "tokens_opset13": (Tokens, 13, (2, 7, 16)),
    "tokens_opset17": (Tokens, 17, (2, 7, 16)),
    "text_encoder_opset13": (TextEncoder, 13, (2, 7, 8)),
    "text_encoder_opset17": (TextEncoder, 17, (2, 7, 8)),
    "vit_opset13": (small_vit, 13, (2, 3, 32, 32)),
    "vit_opset17": (small_vit, 17, (2, 3, 32, 32)),
    "convnext_opset13": (small_convnext, 13, (2, 3, 32, 32)),
    "convnext_opset17": (small_convnext, 17, (2, 3, 32, 32)),
    "swin_opset13": (small_swin, 13, (2, 3, 36, 36)),
    "swin_opset17": (small_swin, 17, (2, 3, 36, 36)),
    "maxvit_opset13": (small_maxvit, 13, (2, 3, 32, 32)),
    "maxvit_opset17": (small_maxvit, 17, (2, 3, 32, 32)),
    "unet_output_padding_opset13": (UNet, 13, (2, 3, 16, 16)),
    "unet_output_padding_opset17": (UNet, 17, (2, 3, 16, 16)),
    "unet_resized_opset13": (UNetResized, 13, (2, 3, 20, 20)),
    "unet_resized_opset17": (UNetResized, 17, (2, 3, 20, 20)),
    "audio_lstm_free_batch_opset13": (Audio, 13, (2, 1, 64)),
    "audio_lstm_free_batch_opset17": (Audio, 17, (2, 1, 64)),
    "heads_opset13": (Heads, 13, (2, 3, 8, 8)),
    "heads_opset17": (Heads, 17, (2, 3, 8, 8)),
    "cbam_opset13": (ConvAttention, 13, (2, 3, 8, 8)),
    "cbam_opset17": (ConvAttention, 17, (2, 3, 8, 8)),
    "gpt_masked_fill_opset13": (MiniGpt, 13, (2, MiniGpt.LENGTH)),
    "gpt_masked_fill_opset17": (MiniGpt, 17, (2, MiniGpt.LENGTH)),
    "bert_three_inputs_opset13": (MiniBert, 13, (2, MiniBert.LENGTH)),
    "bert_three_inputs_opset17": (MiniBert, 17, (2, MiniBert.LENGTH)),
    "bert_free_length_opset13": (MiniBertFreeLength, 13, (2, MiniBert.LENGTH)),
    "bert_free_length_opset17": (MiniBertFreeLength, 17, (2, MiniBert.LENGTH)),
    "padded_text_bool_mask_opset13": (PaddedText, 13, (2, PaddedText.LENGTH)),
    "padded_text_bool_mask_opset17": (PaddedText, 17, (2, PaddedText.LENGTH)),
    "text_mask_from_ids_opset13": (IdsMaskedText, 13, (2, IdsMaskedText.LENGTH)),
    "text_mask_from_ids_opset17": (IdsMaskedText, 17, (2, IdsMaskedText.LENGTH)),
    "text_mask_from_lengths_opset13": (LengthsText, 13, (3, LengthsText.LENGTH)),
    "text_mask_from_lengths_opset17": (LengthsText, 17, (3, LengthsText.LENGTH)),
    "text_last_token_opset13": (LastTokenText, 13, (3, LastTokenText.LENGTH)),
    "text_last_token_opset17": (LastTokenText, 17, (3, LastTokenText.LENGTH)),
    "transformer_seq2seq_masks_opset14": (Seq2Seq, 14, (2, Seq2Seq.SOURCE)),
    "transformer_seq2seq_masks_opset17": (Seq2Seq, 17, (2, Seq2Seq.SOURCE)),
    "gpt2_where_opset13": (MiniGpt2, 13, (2, MiniGpt2.LENGTH)),
    "gpt2_where_opset17": (MiniGpt2, 17, (2, MiniGpt2.LENGTH)),
    "llama_rotary_opset14": (MiniLlama, 14, (2, MiniLlama.LENGTH)),
    "llama_rotary_opset17": (MiniLlama, 17, (2, MiniLlama.LENGTH)),
    "diffusion_timesteps_opset13": (Diffusion, 13, (2, 3, 16, 16)),
    "diffusion_timesteps_opset17": (Diffusion, 17, (2, 3, 16, 16)),
    "einsum_vit_opset13": (EinsumVit, 13, (2, 3, 16, 16)),
    "einsum_vit_opset17": (EinsumVit, 17, (2, 3, 16, 16)),
    "vae_attention_baddbmm_opset13": (VaeAttention, 13, (2, 3, 8, 8)),
    "vae_attention_baddbmm_opset17": (VaeAttention, 17, (2, 3, 8, 8)),
}
# Models of ids (int64 in [0, vocabulary)): name -> vocabulary.
ID_INPUTS = {"gpt_masked_fill_opset13": MiniGpt.VOCAB, "gpt_masked_fill_opset17": MiniGpt.VOCAB,
             "gpt2_where_opset13": MiniGpt2.VOCAB, "gpt2_where_opset17": MiniGpt2.VOCAB,
             "llama_rotary_opset14": MiniLlama.VOCAB, "llama_rotary_opset17": MiniLlama.VOCAB}
# Parameters PyTorch has that the exported graph does not read: the GPTs' positional rows past
# the length they were exported at (the arange folds to known indices; the rows read become a
# learned table of their own). GPT-2's head, tied to its token table (which the export writes
# as a transposed copy), is tied again by the import: its count is PyTorch's, the table once.
UNREAD = {name: -(MiniGpt.CONTEXT - MiniGpt.LENGTH) * 32 for name in ID_INPUTS if name.startswith("gpt")}
UNREAD.update({f"bert_{m}_opset{o}": -(MiniBert.CONTEXT - MiniBert.LENGTH) * MiniBert.WIDTH
               for m in ("three_inputs", "free_length") for o in (13, 17)})
REDRAWN = {"text_encoder_opset13", "text_encoder_opset17", "vit_opset13", "vit_opset17", "convnext_opset13",
           "convnext_opset17", "unet_output_padding_opset13", "unet_output_padding_opset17", "unet_resized_opset13",
           "unet_resized_opset17",
           "audio_lstm_free_batch_opset13", "audio_lstm_free_batch_opset17", "swin_opset13", "swin_opset17",
           "maxvit_opset13", "maxvit_opset17", "gpt_masked_fill_opset13", "gpt_masked_fill_opset17",
           "llama_rotary_opset14", "llama_rotary_opset17", "gpt2_where_opset13", "gpt2_where_opset17",
           "bert_three_inputs_opset13", "bert_three_inputs_opset17", "bert_free_length_opset13",
           "bert_free_length_opset17", "padded_text_bool_mask_opset13",
           "padded_text_bool_mask_opset17", "text_mask_from_ids_opset13", "text_mask_from_ids_opset17",
           "text_mask_from_lengths_opset13", "text_mask_from_lengths_opset17", "text_last_token_opset13",
           "text_last_token_opset17", "transformer_seq2seq_masks_opset14", "transformer_seq2seq_masks_opset17"}
# PyTorch's export computes their relative position biases into constants ([heads, window^2,
# window^2], gathered from each block's table) and folds MaxViT's batch norms into its
# convolutions, so their parameters are the file's, not the PyTorch model's.
# Full-size, run only when named (their time): weights from N(0, 0.02), the file's parameters.
FULL_MODELS = {f"{m}_opset{o}": (getattr(torchvision.models, m), o, (2, 3, 224, 224))
               for m in ("vit_b_16", "convnext_tiny", "swin_t", "maxvit_t") for o in (13, 17)}
NORM_MODELS.update(FULL_MODELS)
FOLDED_BY_EXPORT = {"swin_opset13", "swin_opset17", "maxvit_opset13", "maxvit_opset17"} | set(FULL_MODELS)
RTOL = 1e-4
# Attentions the import reads back as one ScaledDotProductAttention, and how many of them causal:
# every one of these models'; Swin's (its relative position bias, folded by the export, a
# learned Parameter added to the scores; where a window is shifted, its mask added through
# reshapes to [B, nW, nH, N, N] and back: q, k, v viewed so per window), the diffusion
# denoiser's over positions (softmax(q^T k) read as the attention of k's and v's transposes, its
# output v @ w^T transposed back), the VAE attention's (torch.baddbmm at beta 0: the scores plus
# zeros, no mask), the einops-style ViT's (Einsums), none of MaxViT's (Einsums too, but its
# relative position bias, a weight of a lower rank than its scores, stays a constant Add).
FUSED_ATTENTION = {f"{m}_opset{o}": fused for m, fused in (
    ("text_encoder", (2, 0)), ("vit", (2, 0)), ("gpt_masked_fill", (2, 2)), ("bert_three_inputs", (2, 0)),
    ("bert_free_length", (2, 0)),
    ("padded_text_bool_mask", (3, 0)), ("text_mask_from_ids", (2, 0)), ("text_mask_from_lengths", (2, 0)), ("text_last_token", (2, 0)),
    ("gpt2_where", (2, 2)), ("vit_b_16", (12, 0)), ("swin", (4, 0)), ("swin_t", (12, 0)),
    ("diffusion_timesteps", (1, 0)), ("vae_attention_baddbmm", (1, 0)), ("einsum_vit", (1, 0))) for o in (13, 17)}
FUSED_ATTENTION.update({f"{m}_opset{o}": fused for m, fused in (
    ("transformer_seq2seq_masks", (3, 0)), ("llama_rotary", (2, 2))) for o in (14, 17)})


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.stdout.write(p.stderr)
        sys.exit(f"FAILED: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout


def main():
    tessera, work = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(MODELS) + list(SEQUENCE_MODELS) + [m for m in NORM_MODELS if m not in FULL_MODELS]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    images, sequences = torch.randn(2, 3, 224, 224), torch.randn(7, 3, 8)
    for name in names:
        sequence = name in SEQUENCE_MODELS
        x = sequences if sequence else torch.randn(*NORM_MODELS[name][2]) if name in NORM_MODELS else images
        if name in ID_INPUTS:
            x = torch.randint(0, ID_INPUTS[name], NORM_MODELS[name][2])
        opset = NORM_MODELS[name][1] if name in NORM_MODELS else 13
        make = SEQUENCE_MODELS[name] if sequence else NORM_MODELS[name][0] if name in NORM_MODELS else MODELS[name]
        # One input, x; or the model's own (example_inputs, INPUT_NAMES).
        xs = make.example_inputs(NORM_MODELS[name][2][0]) if hasattr(make, "example_inputs") else (x,)
        input_names = list(getattr(make, "INPUT_NAMES", ["x"]))
        xpaths = [os.path.join(work, f"{n}_{name}.npy") for n in input_names]
        for xpath, t in zip(xpaths, xs):
            np.save(xpath, t.numpy())
        model = make().eval()
        if name in REDRAWN or name in FULL_MODELS:
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0, 0.02 if name in FULL_MODELS else 0.2)
        with torch.no_grad():
            want = model(*xs).numpy()
        path = os.path.join(work, name + ".onnx")
        free = getattr(make, "FREE_DIMS", {})  # dims named free besides the batch
        axes = {} if sequence else {**{n: {0: "batch", **free} for n in input_names}, "y": {0: "batch", **free}}
        torch.onnx.export(model, xs, path, opset_version=opset, input_names=input_names, output_names=["y"],
                          dynamic_axes=axes)
        del model
        shapes = [a for t in xs for a in ("--input", "x".join(str(d) for d in t.shape))]
        checked = run([tessera, "check", path] + shapes)
        if name in NORM_MODELS and name not in FOLDED_BY_EXPORT:  # every weight comes back a parameter
            count = sum(p.numel() for p in make().parameters()) + UNREAD.get(name, 0)
            if f"{count:,} parameters" not in checked:
                sys.exit(f"FAILED: {name}: PyTorch has {count:,} parameters; tessera check says {checked.strip()}")
        dot = os.path.join(work, name + ".dot")
        run([tessera, "draw", path, "-o", dot] + shapes)
        with open(dot) as f:
            drawn = f.read()
        os.remove(dot)
        fused = (drawn.count("\\nScaledDotProductAttention"), drawn.count("\\nScaledDotProductAttention\\ncausal"))
        if fused != FUSED_ATTENTION.get(name, (0, 0)):
            sys.exit(f"FAILED: {name}: {fused[0]} attentions imported as one layer ({fused[1]} causal), "
                     f"expected {FUSED_ATTENTION.get(name, (0, 0))}")
        ypath = os.path.join(work, name + "_y.npy")
        run([tessera, "run", path, "--input"] + xpaths + ["-o", ypath])
        for xpath in xpaths:
            os.remove(xpath)
        got = np.load(ypath)
        if got.shape != want.shape:
            sys.exit(f"FAILED: {name}: output {got.shape}, PyTorch's {want.shape}")
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        print(f"{name}: {want.shape}, largest difference {err:.2e} of the largest output")
        if not err <= RTOL:
            sys.exit(f"FAILED: {name}: outputs differ by {err:.2e} > {RTOL:g} relative")
        os.remove(path)
    print(f"all {len(names)} models match PyTorch")


if __name__ == "__main__":
    main()
