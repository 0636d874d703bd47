#include "GradCheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Conv.h"
#include "modules/Flatten.h"
#include "modules/Linear.h"
#include "modules/Pool.h"

namespace tessera::testing {

Tensor randomTensor(const Shape& shape, uint64_t seed, float lo, float hi) {
    Tensor t = Tensor::empty(shape);
    Generator gen(seed);
    backendOf(t).fillUniform(t, lo, hi, gen);
    return t;
}

namespace {

double projectedLoss(const Tensors& outs, const Tensors& weights) {
    double loss = 0.0;
    for (size_t i = 0; i < outs.size(); ++i) {
        Tensor o = outs[i].toHost().plain();
        const float* po = o.data<float>();
        const float* pw = weights[i].data<float>();
        for (int64_t e = 0; e < o.numel(); ++e) loss += static_cast<double>(po[e]) * pw[e];
    }
    return loss;
}

std::vector<int64_t> sampleIndices(int64_t n, int maxElements) {
    std::vector<int64_t> idx;
    if (n <= maxElements) {
        for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    } else {
        for (int i = 0; i < maxElements; ++i) idx.push_back(static_cast<int64_t>(i) * n / maxElements);
    }
    return idx;
}

} // namespace

::testing::AssertionResult checkGradients(Module& module, const Tensors& inputs, const GradCheckOptions& opts) {
    auto forward = [&] {
        if (opts.beforeForward) opts.beforeForward();
        return module(inputs); // a copy of the output handles
    };
    Tensors outs = forward();
    Tensors weights;
    for (size_t i = 0; i < outs.size(); ++i) weights.push_back(randomTensor(outs[i].shape(), opts.seed + i));

    // The weights live on the outputs' device for backward; the loss reads them on the host.
    Tensors deviceWeights;
    for (size_t i = 0; i < outs.size(); ++i) deviceWeights.push_back(weights[i].to(outs[i].device()));
    module.zeroGradParams();
    Tensors inGrads;
    for (const Tensor& g : module.backward(deviceWeights, true, opts.checkInputs, 1.0f, 0.0f)) {
        inGrads.push_back(g.defined() ? g.toHost().plain() : g);
    }

    std::ostringstream failures;
    int failed = 0, checked = 0;
    // `value` (an input or a parameter, on any device and in any layout) is perturbed
    // through a plain host copy written back with copyFrom, so the module sees the same
    // storage; `analytic` is a plain host tensor.
    auto compare = [&](const std::string& what, const Tensor& value, const Tensor& analytic, bool isInput) {
        Tensor host = value.toHost().plain();
        float* v = host.data<float>();
        const float* a = analytic.data<float>();
        Tensor target = value; // a handle on the same storage
        auto set = [&](int64_t e, float x) {
            v[e] = x;
            target.copyFrom(host);
        };
        for (int64_t e : sampleIndices(value.numel(), opts.maxElements)) {
            const float saved = v[e];
            if (isInput && opts.kink && std::fabs(saved - *opts.kink) < opts.kinkRange) continue;
            set(e, saved + opts.eps);
            const double plus = projectedLoss(forward(), weights);
            set(e, saved - opts.eps);
            const double minus = projectedLoss(forward(), weights);
            set(e, saved);
            const double numeric = (plus - minus) / (2.0 * opts.eps);
            const double err = std::fabs(numeric - a[e]);
            ++checked;
            if (err > opts.atol + opts.rtol * std::max(std::fabs(numeric), std::fabs(static_cast<double>(a[e])))) {
                if (++failed <= 5) {
                    failures << "\n  " << what << "[" << e << "]: analytic " << a[e] << ", numeric " << numeric;
                }
            }
        }
    };

    if (opts.checkInputs) {
        if (inGrads.size() != inputs.size()) {
            return ::testing::AssertionFailure() << module.str() << ": backward returned " << inGrads.size()
                                                 << " input gradients for " << inputs.size() << " inputs";
        }
        for (size_t i = 0; i < inputs.size(); ++i) {
            if (inputs[i].dtype() != DType::float32) { // integer inputs (ids, lengths) have no gradient
                if (inGrads[i].defined()) {
                    return ::testing::AssertionFailure()
                           << module.str() << ": a gradient for integer input " << i << " (expected none)";
                }
                continue;
            }
            compare("input " + std::to_string(i), inputs[i], inGrads[i], true);
        }
    }
    if (opts.checkParams) {
        for (const auto& [name, var] : module.namedParams()) {
            Tensor analytic = var->grad.toHost().plain();
            compare("param " + name, var->data, analytic, false);
        }
    }
    forward(); // leave the module's state as it was for the unperturbed inputs
    if (checked == 0) return ::testing::AssertionFailure() << module.str() << ": no element was checked";
    if (failed) {
        return ::testing::AssertionFailure()
               << module.str() << ": " << failed << " of " << checked << " gradient elements differ" << failures.str();
    }
    return ::testing::AssertionSuccess() << checked << " elements checked";
}

::testing::AssertionResult checkShapes(Module& module, const Tensors& inputs) {
    const Shapes inShapes = shapesOf(inputs);
    const Shapes predicted = module.dataShapeFrom(inShapes);
    const Tensors& outs = module(inputs);
    if (predicted != shapesOf(outs)) {
        return ::testing::AssertionFailure() << module.str() << ": dataShapeFrom gives " << str(predicted)
                                             << ", forward gives " << str(shapesOf(outs));
    }
    Tensors grads;
    for (const Tensor& o : outs) grads.push_back(Tensor::full(o.shape(), 1.0f));
    const Shapes predictedGrad = module.gradShapeFrom(shapesOf(grads));
    const Tensors& inGrads = module.backward(grads);
    Shapes actualGrad = shapesOf(inGrads);
    bool integerOutputs = true; // nothing differentiable flows back (ArgMax's indices)
    for (const Tensor& o : outs) integerOutputs = integerOutputs && o.dtype() == DType::int32;
    for (size_t i = 0; i < inputs.size() && i < actualGrad.size(); ++i) {
        // an integer input (ids, lengths) gets no gradient, nor does any input of integer
        // outputs; its "gradient shape" is its own
        if ((inputs[i].dtype() != DType::float32 || integerOutputs) && !inGrads[i].defined()) {
            actualGrad[i] = inShapes[i];
        }
    }
    if (predictedGrad != actualGrad) {
        return ::testing::AssertionFailure() << module.str() << ": gradShapeFrom gives " << str(predictedGrad)
                                             << ", backward gives " << str(actualGrad);
    }
    if (predictedGrad != inShapes) {
        return ::testing::AssertionFailure() << module.str() << ": input gradient " << str(predictedGrad)
                                             << " differs from the input " << str(inShapes);
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult throwsShapeError(const std::function<void()>& f, const std::vector<std::string>& parts) {
    return throwsError<ShapeError>(f, parts);
}

::testing::AssertionResult throwsModuleError(const std::function<void()>& f, const std::vector<std::string>& parts) {
    return throwsError<ModuleError>(f, parts);
}

MeasuredPeaks measurePeaks(Module& net, const Shape& inShape, Device device) {
    return measurePeaks(net, Shapes{inShape}, device);
}

MeasuredPeaks measurePeaks(Module& net, const Shapes& inShapes, Device device) {
    net.to(device);
    Tensors x;
    for (const Shape& s : inShapes) x.push_back(Tensor::full(s, 0.5f).to(device));
    const Tensor dy = Tensor::full(net.dataShapeFrom(inShapes)[0], 0.01f).to(device); // from outside, like x
    Backend& be = backendFor(device);
    MeasuredPeaks m;
    for (int rep = 0; rep < 2; ++rep) {
        for (bool train : {false, true}) {
            train ? net.trainMode() : net.evalMode();
            net.reset();
            be.synchronize();
            const size_t before = be.memoryStats().current;
            be.resetPeak();
            net(x);
            const auto forward = static_cast<int64_t>(be.memoryStats().peak - before);
            if (!train) {
                m.inference = forward;
                continue;
            }
            m.trainForward = forward;
            net.backward(dy, true, false);
            be.synchronize();
            m.training = static_cast<int64_t>(be.memoryStats().peak - before);
        }
    }
    net.reset();
    return m;
}

::testing::AssertionResult within10Percent(const char* what, int64_t planned, int64_t measured) {
    const double ratio = static_cast<double>(planned) / static_cast<double>(measured);
    std::printf("%-14s planned %10.3f MiB, measured %10.3f MiB (%.3f)\n", what,
                static_cast<double>(planned) / 1048576.0, static_cast<double>(measured) / 1048576.0, ratio);
    if (measured > 0 && std::fabs(ratio - 1.0) <= 0.10) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": planned " << planned << " bytes, measured " << measured;
}

std::string errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "no error";
}

double relL2(const Tensor& actual, const Tensor& expected) {
    const std::vector<float> x = actual.toVector<float>(), y = expected.toVector<float>();
    double d = 0, n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        d += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        n += static_cast<double>(y[i]) * y[i];
    }
    return std::sqrt(d / n);
}

::testing::AssertionResult allClose(const Tensor& actual, const std::vector<float>& expected, float tol) {
    if (actual.numel() != static_cast<int64_t>(expected.size())) {
        return ::testing::AssertionFailure() << "size " << actual.numel() << " vs expected " << expected.size();
    }
    const std::vector<float> a = actual.toVector<float>();
    for (size_t i = 0; i < a.size(); ++i) {
        if (!(std::fabs(a[i] - expected[i]) <= tol * std::max(1.0f, std::fabs(expected[i])))) {
            return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs expected " << expected[i];
        }
    }
    return ::testing::AssertionSuccess();
}

std::pair<Tensor, Tensor> quadrantTask(int64_t n) {
    Tensor x = Tensor::randn({n, 1, 8, 8}, 0.0f, 0.3f);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    float* px = x.data<float>();
    for (int64_t i = 0; i < n; ++i) {
        const int32_t label = static_cast<int32_t>(i % 4);
        labels[static_cast<size_t>(i)] = label;
        const int64_t r = (label / 2) * 4 + 1 + i % 3, c = (label % 2) * 4 + 1 + (i / 4) % 3;
        px[i * 64 + r * 8 + c] += 3.0f;
    }
    return {x, Tensor::fromVector({n}, labels)};
}

ModulePtr quadrantNet() {
    auto net = std::make_shared<Sequential>();
    net->append(std::make_shared<Conv2D>(1, 8, 3, ConvOptions{.pad = {1}}))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<MaxPool2D>(2))
        .append(std::make_shared<Flatten>())
        .append(std::make_shared<Linear>(8 * 16, 4));
    return net;
}

std::pair<Tensor, Tensor> pixelTask(int64_t n) {
    Generator gen(17);
    Tensor x = Tensor::empty({n, 1, 28, 28});
    backendOf(x).fillUniform(x, 0.0f, 1.0f, gen);
    std::vector<int32_t> y(static_cast<size_t>(n));
    const float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = p[i * 784] > 0.5f ? 1 : (p[i * 784 + 1] > 0.5f ? 2 : 0);
    return {x, Tensor::fromVector({n}, y)};
}

} // namespace tessera::testing
