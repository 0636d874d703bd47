#pragma once
/// \file A small synthetic classification task (interleaved spirals) and the training
/// loop the first example runs on it. Shared by examples/train_mlp and its test.

#include <functional>
#include <vector>

#include "backend/Tensor.h"
#include "containers/Sequential.h"

namespace tessera::examples {

/// Points in 2-D, `classes` interleaved spiral arms of `perClass` points each.
struct Dataset {
    Tensor x;                    ///< [classes * perClass, 2]
    std::vector<int32_t> labels; ///< class of each row
    int classes = 0;
};

Dataset makeSpirals(int64_t perClass, int classes, float noise, uint64_t seed);

/// Mean softmax cross-entropy of `logits` [N, C] against `labels`, the fraction of rows
/// whose arg-max is the label, and the gradient of the loss with respect to the logits.
struct LossResult {
    float loss = 0.0f;
    float accuracy = 0.0f;
    Tensor grad;
};
LossResult softmaxCrossEntropy(const Tensor& logits, const int32_t* labels);

/// An MLP 2 -> hidden -> hidden -> classes with ReLUs.
std::shared_ptr<Sequential> makeMlp(int64_t hidden, int classes);

struct TrainConfig {
    int epochs = 60;
    int64_t batch = 32;
    float lr = 0.1f;
    int64_t hidden = 64;
    uint64_t seed = 1;
};

/// Train by mini-batch SGD; `onEpoch(epoch, mean loss, accuracy on the whole set)` runs
/// after every epoch. Returns the per-epoch mean losses; `finalAccuracy` gets the last accuracy.
std::vector<float> trainMlpOnSpirals(const TrainConfig& config, float& finalAccuracy,
                                     const std::function<void(int, float, float)>& onEpoch = {});

} // namespace tessera::examples
