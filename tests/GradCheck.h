#pragma once
// The shared numerical gradient checker and the shape/error helpers every module test uses.

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {
void setCudaDeterministic(bool on); // backend/Backend.h
} // namespace tessera

namespace tessera::testing {

struct GradCheckOptions {
    float eps = 1e-2f;  // central-difference step
    float atol = 2e-3f; // |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|)
    float rtol = 2e-2f;
    int maxElements = 64; // per tensor; evenly spaced when the tensor is larger
    // Input elements within kinkRange of kink are skipped (the function is not smooth there).
    std::optional<float> kink;
    float kinkRange = 0.03f;
    bool checkInputs = true;
    bool checkParams = true;
    std::function<void()> beforeForward; // restores state that a forward consumes (RNG)
    uint64_t seed = 7;
};

// Compares the module's backward (input and parameter gradients) with central differences
// of L = sum_i <output_i, r_i> for a fixed random r. Inputs and parameters are float32
// tensors on the module's device (host or GPU); each perturbation is written through a
// host copy, so the check runs unchanged on a CUDA module.
::testing::AssertionResult checkGradients(Module& module, const Tensors& inputs, const GradCheckOptions& opts = {});

// dataShapeFrom(input shapes) equals the real output shapes, and gradShapeFrom(output
// shapes) equals the real input-gradient shapes.
::testing::AssertionResult checkShapes(Module& module, const Tensors& inputs);

// A tensor of `shape` with seeded values in [lo, hi).
Tensor randomTensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// Runs f; passes when it throws an E whose message contains every one of `parts` (another
// exception, or none, fails and says what happened).
template <class E>
::testing::AssertionResult throwsError(const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
        f();
    } catch (const E& e) {
        const std::string msg = e.what();
        for (const std::string& p : parts) {
            if (msg.find(p) == std::string::npos) {
                return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
            }
        }
        return ::testing::AssertionSuccess() << msg;
    } catch (const std::exception& e) {
        return ::testing::AssertionFailure() << "threw another exception: " << e.what();
    }
    return ::testing::AssertionFailure() << "did not throw";
}

// Runs f; passes when it throws ShapeError whose message contains every one of `parts`.
::testing::AssertionResult throwsShapeError(const std::function<void()>& f, const std::vector<std::string>& parts);

// Runs f; passes when it throws ModuleError (a ShapeError included: it is one) whose
// message contains every one of `parts`. For bad arguments and bad state.
::testing::AssertionResult throwsModuleError(const std::function<void()>& f, const std::vector<std::string>& parts);

// Peaks of allocated bytes beyond what is live before each run (what the static memory
// plan predicts): an eval-mode forward, a train-mode forward, and a training step
// (forward, then backward for parameter gradients). Each is the second of two runs from a
// reset model on `device` (the model is moved there), so caches are warm.
struct MeasuredPeaks {
    int64_t inference = 0, trainForward = 0, training = 0;
};
MeasuredPeaks measurePeaks(Module& net, const Shape& inShape, Device device = Device::cpu());
/// The same for a model of several inputs, each filled with 0.5.
MeasuredPeaks measurePeaks(Module& net, const Shapes& inShapes, Device device = Device::cpu());
// Passes when planned is within 10% of measured; prints both.
::testing::AssertionResult within10Percent(const char* what, int64_t planned, int64_t measured);

// The message of what f throws ("no error" when it does not), for checking any exception's text.
std::string errorOf(const std::function<void()>& f);
// ||actual - expected|| / ||expected|| (Euclidean norms over the elements as float).
double relL2(const Tensor& actual, const Tensor& expected);
// Element-wise comparison with a message naming the first mismatch.
::testing::AssertionResult allClose(const Tensor& actual, const std::vector<float>& expected, float tol = 1e-5f);

// Learning tasks for training tests. quadrantTask: n 1x8x8 images of noise (from the global
// generator) with a bright spot in one quadrant, labelled by the quadrant (4 classes), on
// the host; a small convolutional network learns it in a few dozen steps.
std::pair<Tensor, Tensor> quadrantTask(int64_t n);
// The network for it: 3x3 convolution to 8 maps, ReLU, 2x2 max pooling, a linear layer.
ModulePtr quadrantNet();
// n random 1x28x28 host images with labels in {0, 1, 2} that depend on their first pixels
// (LeNet's input; seeded, the same in every process).
std::pair<Tensor, Tensor> pixelTask(int64_t n);

// While it lives, CUDA convolutions use deterministic cuDNN algorithms only (tests that
// compare two GPU runs bit for bit).
struct CudaDeterministic {
    CudaDeterministic() { setCudaDeterministic(true); }
    ~CudaDeterministic() { setCudaDeterministic(false); }
    CudaDeterministic(const CudaDeterministic&) = delete;
    CudaDeterministic& operator=(const CudaDeterministic&) = delete;
};

} // namespace tessera::testing
