// Costs, optimizers, schedules and the handlers (Trainer, Validator, Calculator).
#include "Bindings.h"
#include "distributed/DataParallel.h"
#include <pybind11/functional.h>

#include "backend/Errors.h"
#include "data/Idx.h"
#include "data/Loader.h"
#include "training/Average.h"
#include "training/CTC.h"
#include "training/CrossEntropy.h"
#include "training/Fit.h"
#include "training/Handlers.h"
#include "training/L1Hinge.h"
#include "training/Multi.h"
#include "training/PointwiseCosts.h"
#include "training/SVM.h"
#include "training/Schedule.h"

namespace tessera::python {

namespace {

// A Python callable as a handler callback. It runs with the GIL taken (the handler runs
// without it); its exception propagates out of train().
std::function<void(const BatchInfo&)> callback(const py::object& f) {
    if (f.is_none()) return {};
    if (!PyCallable_Check(f.ptr()))
        throw py::type_error("tessera: a callback must be callable, got " + std::string(py::repr(f)));
    std::shared_ptr<py::object> held(new py::object(f), [](py::object* p) {
        py::gil_scoped_acquire gil;
        delete p;
    });
    return [held](const BatchInfo& info) {
        py::gil_scoped_acquire gil;
        (*held)(info);
    };
}

// Writes text to Python's sys.<stream> (with the GIL; from any thread).
std::function<void(const std::string&)> pythonStream(const char* stream) {
    return [stream](const std::string& text) {
        py::gil_scoped_acquire gil;
        const py::object s = py::module_::import("sys").attr(stream);
        s.attr("write")(text);
        s.attr("flush")();
    };
}

HandlerOptions handlerOptions(int64_t batchsize, bool shuffle, uint64_t seed, bool progress,
                              const std::string& device) {
    if (batchsize <= 0) throw ModuleError("tessera: batchsize must be positive, got " + std::to_string(batchsize));
    HandlerOptions o{
        .batchsize = batchsize, .shuffle = shuffle, .seed = seed, .progress = progress, .device = toDevice(device)};
    // Progress goes through Python's sys.stderr unless that is the process's own terminal
    // (where the line is rewritten in place): a notebook, or a redirected sys.stderr, shows it.
    if (progress) {
        const py::object err = py::module_::import("sys").attr("stderr");
        bool terminal = false;
        try {
            terminal = err.attr("fileno")().cast<int>() == 2 && err.attr("isatty")().cast<bool>();
        } catch (const py::error_already_set&) { // no fileno: a notebook's stream
        }
        if (!terminal) o.write = pythonStream("stderr");
    }
    return o;
}

} // namespace

void bindTraining(py::module_& m) {
    // ---- costs --------------------------------------------------------------------------
    py::class_<Cost, std::shared_ptr<Cost>>(m, "Cost", "Base of the costs: cost(pred, target) -> (error, grad).")
        .def(
            "__call__",
            [](Cost& c, const py::handle& pred, const py::handle& target) {
                Tensors p = toTensors(pred), t = toTensors(target);
                CostResult r;
                {
                    py::gil_scoped_release nogil;
                    r = c(p, t);
                }
                return py::make_tuple(r.error, outputs(r.grad, isList(pred)));
            },
            py::arg("pred"), py::arg("target"),
            "The error of pred against target and its gradient with respect to pred.")
        .def(
            "validate",
            [](Cost& c, const py::handle& pred, const py::handle& target) {
                Tensors p = toTensors(pred), t = toTensors(target);
                py::gil_scoped_release nogil;
                return c.validate(p, t);
            },
            py::arg("pred"), py::arg("target"), "The validation error (for CrossEntropy: 1 - accuracy).")
        .def("getMeanError", &Cost::getMeanError)
        .def("resetAccumulator", &Cost::resetAccumulator)
        .def_property_readonly("classname", &Cost::classname)
        .def("__repr__", [](const Cost& c) { return "tessera." + c.classname() + "()"; });

    py::class_<CrossEntropy, Cost, std::shared_ptr<CrossEntropy>>(m, "CrossEntropy")
        .def(py::init([](int64_t maxlabels, const std::vector<float>& weights, float labelSmoothing, bool classesLast) {
                 return std::make_shared<CrossEntropy>(CrossEntropyOptions{.maxlabels = maxlabels,
                                                                           .weights = weights,
                                                                           .labelSmoothing = labelSmoothing,
                                                                           .classesLast = classesLast});
             }),
             py::arg("maxlabels") = 0, py::arg("weights") = std::vector<float>{}, py::arg("labelSmoothing") = 0.0f,
             py::arg("classesLast") = false,
             "Softmax cross-entropy of scores [N, C, ...] against int32 labels [N, ...] or float32 probabilities "
             "of the scores' shape (mixup, CutMix); labelSmoothing e makes the target (1 - e) target + e / C; "
             "classesLast: scores [N, ..., C] against labels [N, ...] (a language model's [N, T, V] and [N, T]).");
    py::class_<MSE, Cost, std::shared_ptr<MSE>>(m, "MSE").def(py::init<>());
    py::class_<Abs, Cost, std::shared_ptr<Abs>>(m, "Abs").def(py::init<>());
    py::class_<SmoothL1, Cost, std::shared_ptr<SmoothL1>>(m, "SmoothL1").def(py::init<>());
    py::class_<BCE, Cost, std::shared_ptr<BCE>>(m, "BCE").def(py::init<>());
    py::class_<Hinge, Cost, std::shared_ptr<Hinge>>(m, "Hinge").def(py::init<>());
    py::class_<KLDivergence, Cost, std::shared_ptr<KLDivergence>>(m, "KLDivergence").def(py::init<>());
    py::class_<SVM, Cost, std::shared_ptr<SVM>>(m, "SVM").def(
        py::init([](const std::string& mode) {
            if (mode != "l1" && mode != "l2") throw ModuleError("SVM: mode must be l1 or l2, got '" + mode + "'");
            return std::make_shared<SVM>(mode == "l2");
        }),
        py::arg("mode") = "l1");
    py::class_<L1Hinge, Cost, std::shared_ptr<L1Hinge>>(m, "L1Hinge").def(py::init<float>(), py::arg("margin") = 1.0f);
    py::class_<CTC, Cost, std::shared_ptr<CTC>>(m, "CTC")
        .def(py::init([](int32_t blank, int64_t vocabsize, bool normalized, bool batchFirst) {
                 return std::make_shared<CTC>(CTCOptions{
                     .blank = blank, .vocabsize = vocabsize, .normalized = normalized, .batchFirst = batchFirst});
             }),
             py::arg("blank") = 0, py::arg("vocabsize") = 0, py::arg("normalized") = false,
             py::arg("batchFirst") = false)
        .def(
            "decodeGreedy",
            [](const CTC& c, const py::handle& scores, const py::handle& lengths) {
                return c.decodeGreedy(toTensor(scores), lengths.is_none() ? Tensor() : toTensor(lengths));
            },
            py::arg("scores"), py::arg("lengths") = py::none());
    py::class_<Multi, Cost, std::shared_ptr<Multi>>(m, "Multi")
        .def(py::init<std::vector<std::shared_ptr<Cost>>>(), py::arg("costs"), "One cost per network output.")
        .def_property_readonly("costs", &Multi::costs)
        .def_property_readonly("errors", &Multi::errors,
                               "Each cost's error in the last call (PuzzleLib's per-cost errors).")
        .def_property_readonly("validationErrors", &Multi::validationErrors,
                               "Each cost's validation error in the last validate.");

    // ---- optimizers ---------------------------------------------------------------------
    py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
        .def("setupOn", &Optimizer::setupOn, py::arg("net"), py::arg("useGlobalState") = false,
             "Binds the optimizer to the network's parameters (after moving it to its device).")
        .def("update", &Optimizer::update, py::call_guard<py::gil_scoped_release>(),
             "One step over the accumulated gradients; False when loss scaling skipped it. Releases the GIL.")
        .def("zeroGradParams", &Optimizer::zeroGradParams, py::call_guard<py::gil_scoped_release>())
        .def_property("learnRate", &Optimizer::learnRate, &Optimizer::setLearnRate)
        .def_property_readonly("steps", &Optimizer::steps)
        .def_property_readonly("classname", &Optimizer::classname)
        .def(
            "setWeightDecay",
            [](Optimizer& o, float decay, const py::object& applies) {
                if (applies.is_none()) return o.setWeightDecay(decay);
                // Called here, once per bound parameter, with the GIL held.
                o.setWeightDecay(decay, [&](const std::string& name) { return applies(name).cast<bool>(); });
            },
            py::arg("decay"), py::arg("applies") = py::none(),
            "L2 weight decay; `applies(name)` (optional, after setupOn) picks the parameters by dotted name.")
        .def("setGradientClipping", &Optimizer::setGradientClipping, py::arg("maxNorm"),
             "Clip the gradients to this global L2 norm in each update (0: off).")
        .def_property("gradientClipping", &Optimizer::gradientClipping, &Optimizer::setGradientClipping)
        .def_property_readonly("lastGradientNorm", &Optimizer::lastGradientNorm,
                               "The global gradient norm the last update measured (NaN without clipping).")
        .def("setLearnRateFactor", &Optimizer::setLearnRateFactor, py::arg("name"), py::arg("factor"))
        .def(
            "enableLossScaling",
            [](Optimizer& o, float initialScale, float growthFactor, int64_t growthInterval, float backoffFactor) {
                o.enableLossScaling(LossScaling{.initialScale = initialScale,
                                                .growthFactor = growthFactor,
                                                .growthInterval = growthInterval,
                                                .backoffFactor = backoffFactor});
            },
            py::arg("initialScale") = 65536.0f, py::arg("growthFactor") = 2.0f, py::arg("growthInterval") = 2000,
            py::arg("backoffFactor") = 0.5f)
        .def_property_readonly("lossScale", &Optimizer::lossScale)
        .def(
            "state",
            [](const Optimizer& o) {
                const Optimizer::State st = o.state();
                py::dict tensors;
                for (const auto& [name, t] : st.tensors) tensors[py::str(name)] = t;
                py::dict d;
                d["tensors"] = tensors;
                d["steps"] = st.steps;
                d["lossScale"] = st.lossScale;
                d["cleanSteps"] = st.cleanSteps;
                d["skippedSteps"] = st.skippedSteps;
                return d;
            },
            R"(What an update depends on besides the parameters and gradients: {"tensors": {"<dotted
parameter name>#<k>": Tensor} (the rule's running averages, the optimizer's own memory:
writes into them change the next update), "steps", "lossScale", "cleanSteps",
"skippedSteps"}. Empty tensors before setupOn; none for SGD.)")
        .def(
            "setState",
            [](Optimizer& o, const py::dict& d) {
                Optimizer::State st;
                for (const auto& [name, t] : d["tensors"].cast<py::dict>()) {
                    st.tensors.emplace_back(name.cast<std::string>(), toTensor(t, /*copy=*/true));
                }
                st.steps = d["steps"].cast<int64_t>();
                if (d.contains("lossScale")) st.lossScale = d["lossScale"].cast<float>();
                if (d.contains("cleanSteps")) st.cleanSteps = d["cleanSteps"].cast<int64_t>();
                if (d.contains("skippedSteps")) st.skippedSteps = d["skippedSteps"].cast<int64_t>();
                o.setState(st);
            },
            py::arg("state"),
            "Restores a state() of an optimizer of the same class bound to the same parameters (copies "
            "the tensors in); a ModuleError names what does not match.")
        .def("__repr__", [](const Optimizer& o) {
            return "tessera." + o.classname() + "(learnRate=" + std::to_string(o.learnRate()) + ")";
        });
    py::class_<SGD, Optimizer, std::shared_ptr<SGD>>(m, "SGD").def(py::init<float>(), py::arg("learnRate") = 0.01f);
    py::class_<MomentumSGD, Optimizer, std::shared_ptr<MomentumSGD>>(m, "MomentumSGD")
        .def(py::init<float, float>(), py::arg("learnRate") = 0.01f, py::arg("momRate") = 0.9f);
    py::class_<NesterovSGD, Optimizer, std::shared_ptr<NesterovSGD>>(m, "NesterovSGD")
        .def(py::init<float, float>(), py::arg("learnRate") = 0.01f, py::arg("momRate") = 0.9f);
    py::class_<Adam, Optimizer, std::shared_ptr<Adam>>(m, "Adam").def(
        py::init<float, float, float, float>(), py::arg("alpha") = 1e-3f, py::arg("beta1") = 0.9f,
        py::arg("beta2") = 0.999f, py::arg("epsilon") = 1e-8f);
    py::class_<AdamW, Optimizer, std::shared_ptr<AdamW>>(m, "AdamW")
        .def(py::init<float, float, float, float, float>(), py::arg("alpha") = 1e-3f, py::arg("beta1") = 0.9f,
             py::arg("beta2") = 0.999f, py::arg("epsilon") = 1e-8f, py::arg("weightDecay") = 0.01f,
             "Adam with decoupled weight decay.");
    py::class_<AdaGrad, Optimizer, std::shared_ptr<AdaGrad>>(m, "AdaGrad")
        .def(py::init<float, float>(), py::arg("learnRate") = 0.01f, py::arg("epsilon") = 1e-8f);
    py::class_<AdaDelta, Optimizer, std::shared_ptr<AdaDelta>>(m, "AdaDelta")
        .def(py::init<float, float, float>(), py::arg("rho") = 0.95f, py::arg("epsilon") = 1e-6f,
             py::arg("learnRate") = 1.0f);
    py::class_<RMSProp, Optimizer, std::shared_ptr<RMSProp>>(m, "RMSProp")
        .def(py::init<float, float, float>(), py::arg("learnRate") = 1e-3f, py::arg("rho") = 0.9f,
             py::arg("epsilon") = 1e-8f);
    py::class_<RMSPropGraves, Optimizer, std::shared_ptr<RMSPropGraves>>(m, "RMSPropGraves")
        .def(py::init<float, float, float, float>(), py::arg("learnRate") = 1e-4f, py::arg("rho") = 0.95f,
             py::arg("momRate") = 0.9f, py::arg("epsilon") = 1e-4f);
    py::class_<SMORMS3, Optimizer, std::shared_ptr<SMORMS3>>(m, "SMORMS3")
        .def(py::init<float, float>(), py::arg("learnRate") = 1e-3f, py::arg("epsilon") = 1e-16f);

    // ---- schedules ----------------------------------------------------------------------
    py::class_<Schedule, std::shared_ptr<Schedule>>(m, "Schedule", "A learning rate per epoch: schedule.at(epoch).")
        .def("at", &Schedule::at, py::arg("epoch"))
        .def("__call__", &Schedule::at, py::arg("epoch"));
    py::class_<StepSchedule, Schedule, std::shared_ptr<StepSchedule>>(m, "StepSchedule")
        .def(py::init<float, int64_t, float>(), py::arg("base"), py::arg("stepSize"), py::arg("gamma"));
    py::class_<ExponentialSchedule, Schedule, std::shared_ptr<ExponentialSchedule>>(m, "ExponentialSchedule")
        .def(py::init<float, float>(), py::arg("base"), py::arg("gamma"));
    py::class_<CosineSchedule, Schedule, std::shared_ptr<CosineSchedule>>(m, "CosineSchedule")
        .def(py::init<float, int64_t, float>(), py::arg("base"), py::arg("epochs"), py::arg("min") = 0.0f);
    m.def(
        "parseSchedule",
        [](const std::string& text, float base, int64_t epochs) {
            return std::shared_ptr<Schedule>(parseSchedule(text, base, epochs));
        },
        py::arg("text"), py::arg("base"), py::arg("epochs"),
        "A schedule from its text, as tessera train --schedule reads it: step:N:G, exp:G, cosine or cosine:MIN.");

    // ---- handlers -----------------------------------------------------------------------
    py::class_<BatchInfo>(m, "BatchInfo", "Where a handler is: what a callback receives.")
        .def_readonly("epoch", &BatchInfo::epoch)
        .def_readonly("batch", &BatchInfo::batch)
        .def_readonly("batches", &BatchInfo::batches)
        .def_readonly("error", &BatchInfo::error)
        .def_readonly("meanError", &BatchInfo::meanError)
        .def_readonly("seconds", &BatchInfo::seconds)
        .def_readonly("samples", &BatchInfo::samples)
        .def_readonly("updated", &BatchInfo::updated)
        .def("__repr__", [](const BatchInfo& b) {
            return "tessera.BatchInfo(epoch=" + std::to_string(b.epoch) + ", batch=" + std::to_string(b.batch) + "/" +
                   std::to_string(b.batches) + ", error=" + std::to_string(b.error) + ")";
        });

    py::class_<Trainer>(m, "Trainer", R"(One training pass per train() call: for each batch, forward, cost, zeroed
gradients, backward and the optimizer's update, with the GIL released.)")
        .def(py::init([](Module& net, Cost& cost, Optimizer& optimizer, int64_t batchsize, bool shuffle, uint64_t seed,
                         bool progress, const std::string& device, int64_t accumulate) {
                 HandlerOptions options = handlerOptions(batchsize, shuffle, seed, progress, device);
                 options.accumulate = accumulate;
                 return std::make_unique<Trainer>(net, cost, optimizer, options);
             }),
             py::arg("net"), py::arg("cost"), py::arg("optimizer"), py::kw_only(), py::arg("batchsize") = 128,
             py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("progress") = true, py::arg("device") = "cpu",
             py::arg("accumulate") = 1, py::keep_alive<1, 2>(), py::keep_alive<1, 3>(), py::keep_alive<1, 4>())
        .def("setWeightAverage", &Trainer::setWeightAverage, py::arg("average"), py::keep_alive<1, 2>(),
             "Update this WeightAverage after each applied optimizer update (None: none).")
        .def(
            "train",
            [](Trainer& t, const py::handle& data, const py::handle& targets) {
                Loader* loader = py::isinstance<Loader>(data) ? &data.cast<Loader&>() : nullptr;
                if (!loader && targets.is_none()) {
                    throw py::type_error("Trainer.train: give (data, targets), or a tessera.Loader alone");
                }
                Tensors d, y;
                if (!loader) {
                    d = toTensors(data);
                    y = toTensors(targets);
                }
                // After every batch, with the GIL: Ctrl-C (or any pending signal's
                // exception) ends the epoch there instead of at its end.
                struct Restore {
                    Trainer& t;
                    std::function<void(const BatchInfo&)> user;
                    ~Restore() { t.onBatchFinish = std::move(user); }
                } restore{t, t.onBatchFinish};
                t.onBatchFinish = [user = restore.user](const BatchInfo& info) {
                    if (user) user(info);
                    py::gil_scoped_acquire gil;
                    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                };
                py::gil_scoped_release nogil;
                return loader ? t.train(*loader) : t.train(d, y);
            },
            py::arg("data"), py::arg("targets") = py::none(),
            R"(One epoch of (data, targets), or of a Loader's batches (its batch size, order and seed
rule); returns the mean training error. Ctrl-C stops it after the batch in progress.)")
        .def_property(
            "onBatchFinish", [](const Trainer&) { return py::none(); },
            [](Trainer& t, const py::object& f) { t.onBatchFinish = callback(f); },
            "A callable taking a BatchInfo, called after every batch (None: none).")
        .def_property(
            "onEpochFinish", [](const Trainer&) { return py::none(); },
            [](Trainer& t, const py::object& f) { t.onEpochFinish = callback(f); })
        .def(
            "setDataParallel", [](Trainer& t, DataParallel* parallel) { t.setDataParallel(parallel); },
            py::arg("parallel"), py::keep_alive<1, 2>(),
            "Train data-parallel through a tessera.DataParallel (None: alone): each rank's gradients are "
            "averaged over the ranks between backward and the update.")
        .def_property_readonly("epoch", &Trainer::epoch)
        .def_property_readonly("samplesPerSecond", &Trainer::samplesPerSecond)
        .def_property_readonly("epochSeconds", &Trainer::epochSeconds)
        .def("requestStop", &Trainer::requestStop,
             "Stop after the batch in progress (from a callback); stays set until clearStop().")
        .def("clearStop", &Trainer::clearStop)
        .def_property_readonly("stopRequested", &Trainer::stopRequested)
        .def_property_readonly(
            "position", [](const Trainer& t) { return py::make_tuple(t.position().epoch, t.position().batch); },
            "(epoch, next batch): where the next train() starts.");

    py::class_<EpochReport>(m, "EpochReport", "One epoch of fit(): accuracies in [0, 1], NaN without that data.")
        .def_readonly("epoch", &EpochReport::epoch)
        .def_readonly("loss", &EpochReport::loss)
        .def_readonly("validationAccuracy", &EpochReport::validationAccuracy)
        .def_readonly("testAccuracy", &EpochReport::testAccuracy)
        .def_readonly("best", &EpochReport::best)
        .def_readonly("checkpointed", &EpochReport::checkpointed)
        .def_readonly("learnRate", &EpochReport::learnRate)
        .def_readonly("seconds", &EpochReport::seconds)
        .def_readonly("imagesPerSecond", &EpochReport::imagesPerSecond)
        .def("__repr__", [](const EpochReport& r) {
            return "tessera.EpochReport(epoch=" + std::to_string(r.epoch) + ", loss=" + std::to_string(r.loss) +
                   ", testAccuracy=" + std::to_string(r.testAccuracy) + ")";
        });
    py::class_<FitResult>(m, "FitResult", "What fit() did.")
        .def_readonly("epochs", &FitResult::epochs)
        .def_readonly("testAccuracy", &FitResult::testAccuracy)
        .def_readonly("bestValidationAccuracy", &FitResult::bestValidationAccuracy)
        .def_readonly("bestEpoch", &FitResult::bestEpoch)
        .def_readonly("stoppedEarly", &FitResult::stoppedEarly)
        .def_readonly("stopped", &FitResult::stopped)
        .def_readonly("resumed", &FitResult::resumed)
        .def_readonly("average", &FitResult::average)
        .def_property_readonly("position",
                               [](const FitResult& r) { return py::make_tuple(r.position.epoch, r.position.batch); });
    m.def(
        "fit",
        [](Trainer& trainer, Loader& train, int64_t epochs, const std::shared_ptr<Schedule>& schedule, int64_t warmup,
           float ema, Loader* validation, Loader* test, int64_t earlyStop, const std::string& saveBest,
           const std::string& checkpoint, int64_t checkpointEpochs, int64_t checkpointSteps, const std::string& resume,
           const std::string& metrics, const py::object& inputs, const std::vector<std::string>& classes, bool verbose,
           const py::object& onEpoch, const py::object& onBatch) {
            FitOptions o{.epochs = epochs,
                         .schedule = schedule.get(),
                         .warmup = warmup,
                         .ema = ema,
                         .validation = validation,
                         .test = test,
                         .earlyStop = earlyStop,
                         .saveBest = saveBest,
                         .save = {.inputs = inputs.is_none() ? Shapes{} : toShapes(inputs), .classes = classes},
                         .checkpoint = checkpoint,
                         .checkpointEpochs = checkpointEpochs,
                         .checkpointSteps = checkpointSteps,
                         .resume = resume,
                         .metrics = metrics,
                         .out = verbose ? stdout : nullptr};
            if (verbose) o.write = pythonStream("stdout"); // notebooks show it
            FitCallbacks c;
            c.onBatch = callback(onBatch);
            if (!onEpoch.is_none()) {
                if (!PyCallable_Check(onEpoch.ptr())) throw py::type_error("fit: onEpoch must be callable");
                c.onEpoch = [onEpoch](const EpochReport& r) {
                    py::gil_scoped_acquire gil;
                    onEpoch(r);
                };
            }
            // Ctrl-C stops after the batch in progress: fit writes its checkpoint, then the
            // KeyboardInterrupt is raised.
            c.stop = [] {
                py::gil_scoped_acquire gil;
                return PyErr_CheckSignals() != 0;
            };
            FitResult r;
            {
                py::gil_scoped_release nogil;
                r = fit(trainer, train, o, c);
            }
            if (PyErr_Occurred()) throw py::error_already_set();
            return r;
        },
        py::arg("trainer"), py::arg("train"), py::kw_only(), py::arg("epochs") = 10, py::arg("schedule") = nullptr,
        py::arg("warmup") = 0, py::arg("ema") = 0.0f, py::arg("validation") = nullptr, py::arg("test") = nullptr,
        py::arg("earlyStop") = 0, py::arg("saveBest") = "", py::arg("checkpoint") = "", py::arg("checkpointEpochs") = 1,
        py::arg("checkpointSteps") = 0, py::arg("resume") = "", py::arg("metrics") = "", py::arg("inputs") = py::none(),
        py::arg("classes") = std::vector<std::string>{}, py::arg("verbose") = true, py::arg("onEpoch") = py::none(),
        py::arg("onBatch") = py::none(),
        R"(The whole recipe of `tessera train` on a Trainer and a training Loader: a schedule per
epoch and a linear warm-up over the first steps, a weight average (ema) used for evaluation and
saving, validation accuracy for saveBest and earlyStop, the test accuracy after each epoch,
checkpoints (every checkpointEpochs epochs, every checkpointSteps steps, the last epoch, and
on Ctrl-C) that resume bit for bit (resume=path), and a metrics CSV rewritten after each epoch.
Saved models carry `inputs` (shapes) and `classes`. Returns a FitResult.)");

    py::class_<Validator>(m, "Validator")
        .def(py::init([](Module& net, Cost& cost, int64_t batchsize, bool progress, const std::string& device) {
                 return std::make_unique<Validator>(net, cost, handlerOptions(batchsize, false, 0, progress, device));
             }),
             py::arg("net"), py::arg("cost"), py::kw_only(), py::arg("batchsize") = 128, py::arg("progress") = false,
             py::arg("device") = "cpu", py::keep_alive<1, 2>(), py::keep_alive<1, 3>())
        .def(
            "validate",
            [](Validator& v, const py::handle& data, const py::handle& targets) {
                if (py::isinstance<Loader>(data)) {
                    Loader& loader = data.cast<Loader&>();
                    py::gil_scoped_release nogil;
                    return v.validate(loader);
                }
                if (targets.is_none())
                    throw py::type_error("Validator.validate: give (data, targets), or a tessera.Loader alone");
                Tensors d = toTensors(data), y = toTensors(targets);
                py::gil_scoped_release nogil;
                return v.validate(d, y);
            },
            py::arg("data"), py::arg("targets") = py::none(),
            "The cost's mean validation error (CrossEntropy: 1 - accuracy) over (data, targets) or a Loader.")
        .def_property_readonly("errors", &Validator::errors,
                               "The last validate's mean error of each output: one per cost of a Multi, else the "
                               "one error validate returned.");

    py::class_<Calculator>(m, "Calculator")
        .def(py::init([](Module& net, int64_t batchsize, const std::string& device) {
                 return std::make_unique<Calculator>(net, handlerOptions(batchsize, false, 0, false, device));
             }),
             py::arg("net"), py::kw_only(), py::arg("batchsize") = 128, py::arg("device") = "cpu",
             py::keep_alive<1, 2>())
        .def(
            "calc",
            [](Calculator& c, const py::handle& data) -> py::object {
                Tensors d = toTensors(data);
                Tensors out;
                {
                    py::gil_scoped_release nogil;
                    out = c.calc(d);
                }
                return outputs(out, isList(data));
            },
            py::arg("data"), "The network's outputs for every sample, in eval mode.");

    // The C++ twin of the training loop tools/bench/python_loop.py times in Python: the
    // same calls, in the same order, on the same batches.
    m.def(
        "_trainSteps",
        [](Module& net, Cost& cost, Optimizer& optimizer, const Tensor& data, const Tensor& labels, int64_t batchsize,
           int64_t steps) {
            const int64_t n = data.shape().rank() ? data.shape()[0] : 0;
            if (batchsize <= 0 || n < batchsize || labels.shape().rank() == 0 || labels.shape()[0] != n) {
                throw ModuleError("_trainSteps: needs batchsize in [1, " + std::to_string(n) +
                                  "] and as many labels as samples, got batchsize " + std::to_string(batchsize) +
                                  ", data " + data.shape().str() + ", labels " + labels.shape().str());
            }
            py::gil_scoped_release nogil;
            double error = 0.0;
            for (int64_t s = 0; s < steps; ++s) {
                const int64_t begin = (s * batchsize) % (n - batchsize + 1);
                const Tensor& out = net(data.slice(begin, begin + batchsize));
                CostResult r = cost(out, labels.slice(begin, begin + batchsize));
                optimizer.zeroGradParams();
                net.backward(r.grad[0]);
                optimizer.update();
                error = r.error;
            }
            return error;
        },
        py::arg("net"), py::arg("cost"), py::arg("optimizer"), py::arg("data"), py::arg("labels"), py::arg("batchsize"),
        py::arg("steps"));

    // ---- data ---------------------------------------------------------------------------
    m.attr("fashionMnistDir") = kFashionMnistDir;
    m.def(
        "loadMnist",
        [](const std::string& dir, const std::string& split, int64_t limit) {
            ImageSet s;
            {
                py::gil_scoped_release nogil;
                s = loadMnistFormat(dir, split, limit);
            }
            return py::make_tuple(s.images, s.labels);
        },
        py::arg("dir") = kFashionMnistDir, py::arg("split") = "train", py::arg("limit") = 0,
        R"(MNIST-format IDX files of one split ("train" or "t10k"): (images [N, 1, 28, 28] float32 in
[0, 1], labels [N] int32). The default directory is Fashion-MNIST's.)");
}

} // namespace tessera::python
