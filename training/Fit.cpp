#include "training/Fit.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/Errors.h"
#include "backend/Files.h"
#include "training/Average.h"
#include "training/Checkpoint.h"
#include "training/CrossEntropy.h"

namespace tessera {

std::string formatRate(float rate) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", static_cast<double>(rate));
    return text;
}

namespace {

// The model selection of a validation set: the best validation accuracy so far, the epoch
// (from 1) that reached it, and the epochs since. Kept in checkpoints as their notes.
struct Selection {
    double best = -1.0;
    int64_t bestEpoch = 0, since = 0;

    std::string text() const {
        return nlohmann::json{{"bestValidation", best}, {"bestEpoch", bestEpoch}, {"epochsSinceBest", since}}.dump();
    }
    static Selection parse(const std::string& notes, const std::string& path) {
        Selection s;
        if (notes.empty()) return s;
        try {
            const nlohmann::json j = nlohmann::json::parse(notes);
            s.best = j.at("bestValidation").get<double>();
            s.bestEpoch = j.at("bestEpoch").get<int64_t>();
            s.since = j.at("epochsSinceBest").get<int64_t>();
        } catch (const nlohmann::json::exception& e) {
            throw IoError("checkpoint " + path + ": unreadable validation notes: " + e.what());
        }
        return s;
    }
};

void say(const FitOptions& o, const std::string& text) {
    if (o.write) {
        o.write(text);
        return;
    }
    if (!o.out) return;
    std::fputs(text.c_str(), o.out);
    std::fflush(o.out);
}

} // namespace

FitResult fit(Trainer& trainer, Loader& train, const FitOptions& o, const FitCallbacks& callbacks) {
    const auto t0 = std::chrono::steady_clock::now();
    if (o.epochs < 0) throw ModuleError("fit: epochs must be >= 0, got " + std::to_string(o.epochs));
    if (o.warmup < 0) throw ModuleError("fit: warmup must be >= 0 steps, got " + std::to_string(o.warmup));
    if (o.checkpointEpochs < 1) {
        throw ModuleError("fit: checkpointEpochs must be >= 1, got " + std::to_string(o.checkpointEpochs));
    }
    if (o.checkpointSteps < 0) {
        throw ModuleError("fit: checkpointSteps must be >= 0, got " + std::to_string(o.checkpointSteps));
    }
    if (!o.validation && !o.saveBest.empty()) {
        throw ModuleError("fit: saveBest keeps the model of the best validation accuracy: it needs validation data");
    }
    if (!o.validation && o.earlyStop > 0) {
        throw ModuleError("fit: earlyStop watches the validation accuracy: it needs validation data");
    }
    Module& net = trainer.net();
    Optimizer& optimizer = trainer.optimizer();
    const float baseRate = optimizer.learnRate();
    // The rate of a step: the schedule's for the epoch, ramped up linearly over the first
    // warm-up steps. A function of the position alone, so a resumed run gets the same.
    auto rateAt = [&](int64_t epoch, int64_t step) {
        float rate = o.schedule ? o.schedule->at(epoch) : baseRate;
        if (step < o.warmup) rate *= static_cast<float>(step + 1) / static_cast<float>(o.warmup);
        return rate;
    };
    // The weight average starts from the weights the model has now (every rank's the same
    // after a DataParallel's broadcast).
    FitResult result;
    WeightAverage* average = trainer.weightAverage();
    if (o.ema > 0.0f && !average) {
        result.average = std::make_shared<WeightAverage>(net, o.ema);
        average = result.average.get();
        trainer.setWeightAverage(average); // kept: the result holds it
    }
    struct Restore { // the trainer's own batch callback again when fit returns
        Trainer& t;
        std::function<void(const BatchInfo&)> onBatch;
        ~Restore() { t.onBatchFinish = std::move(onBatch); }
    } restore{trainer, trainer.onBatchFinish};

    Selection selection;
    if (!o.resume.empty()) {
        std::string notes;
        loadCheckpoint(o.resume, net, optimizer, trainer, average, &notes);
        if (o.validation) selection = Selection::parse(notes, o.resume);
        result.resumed = true;
        say(o, "resumed from " + o.resume + " at epoch " + std::to_string(trainer.position().epoch + 1) + ", batch " +
                   std::to_string(trainer.position().batch) + " (step " + std::to_string(optimizer.steps()) + ")\n");
    }
    // The rows are kept here and the whole file written again after each epoch (through a
    // temporary renamed over it): a full disk or a kill leaves the previous epoch's file.
    const bool metrics = !o.metrics.empty() && o.writer;
    std::string metricsText;
    if (metrics) {
        const bool append = !o.resume.empty() && std::filesystem::exists(o.metrics);
        if (append) {
            std::ifstream in(o.metrics, std::ios::binary);
            metricsText.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
            if (!in.good() && !in.eof()) throw IoError("metrics: cannot read " + o.metrics + " to append to it");
            if (!metricsText.empty() && metricsText.back() != '\n') metricsText += '\n';
        } else {
            metricsText = std::string("epoch,train_loss,") + (o.validation ? "validation_accuracy_percent," : "") +
                          "test_accuracy_percent,seconds,images_per_second\n";
        }
        writeFileAtomically(o.metrics, "metrics", metricsText);
    }
    auto checkpoint = [&] {
        if (!o.checkpoint.empty() && o.writer) {
            saveCheckpoint(o.checkpoint, net, optimizer, trainer, average, o.validation ? selection.text() : "");
        }
    };
    // Evaluation and saving with the averaged weights, when they are kept.
    auto withAverage = [&](const auto& work) { withAverages(average, work); };
    CrossEntropy validationCost;
    Validator validator(net, validationCost, trainer.options());
    auto accuracyOf = [&](Loader& data) {
        double accuracy = 0.0;
        withAverage([&] { accuracy = 1.0 - validator.validate(data); });
        return accuracy;
    };
    trainer.onBatchFinish = [&](const BatchInfo& info) {
        if (o.warmup > 0) optimizer.setLearnRate(rateAt(info.epoch, optimizer.steps()));
        // A checkpoint holds no accumulated gradients: only after an update.
        if (info.updated && o.checkpointSteps > 0 && optimizer.steps() % o.checkpointSteps == 0) checkpoint();
        if (restore.onBatch) restore.onBatch(info);
        if (callbacks.onBatch) callbacks.onBatch(info);
        if (callbacks.stop && callbacks.stop()) trainer.requestStop();
    };
    auto finish = [&] {
        result.position = trainer.position();
        if (selection.bestEpoch > 0) {
            result.bestValidationAccuracy = selection.best;
            result.bestEpoch = selection.bestEpoch;
        }
        return result;
    };
    const bool stoppedBefore = o.earlyStop > 0 && selection.since >= o.earlyStop;
    if (trainer.position().epoch >= o.epochs || stoppedBefore) { // a resumed run that had finished: just report
        say(o, stoppedBefore ? "the checkpoint stopped early at epoch " + std::to_string(trainer.position().epoch) +
                                   ": no training left\n"
                             : "the checkpoint is past epoch " + std::to_string(trainer.position().epoch) + " of " +
                                   std::to_string(o.epochs) + ": no training left\n");
        result.stoppedEarly = stoppedBefore;
        if (o.test) result.testAccuracy = accuracyOf(*o.test);
        return finish();
    }
    const bool scheduled = o.schedule || o.warmup > 0;
    for (int64_t e = trainer.position().epoch; e < o.epochs; ++e) {
        optimizer.setLearnRate(rateAt(e, optimizer.steps()));
        const double loss = trainer.train(train);
        // Stopped in the middle of the epoch: checkpoint and go. (Stopped at its last
        // batch, the epoch ends as usual first.)
        if (trainer.stopRequested() && trainer.position().batch != 0) {
            checkpoint();
            result.stopped = true;
            return finish();
        }
        EpochReport r;
        r.epoch = e + 1;
        r.loss = loss;
        // Validation first, so that the epoch's checkpoint holds its outcome.
        std::string validText, bestText;
        bool stopNow = false;
        if (o.validation) {
            r.validationAccuracy = accuracyOf(*o.validation);
            char text[64];
            std::snprintf(text, sizeof text, ", validation accuracy %.2f%%", 100.0 * r.validationAccuracy);
            validText = text;
            if (r.validationAccuracy > selection.best) {
                selection = {r.validationAccuracy, e + 1, 0};
                r.best = true;
                bestText = "; best so far";
                if (!o.saveBest.empty() && o.writer) {
                    withAverage([&] { saveModel(net, o.saveBest, o.save); });
                    bestText += ", saved to " + o.saveBest;
                }
            } else {
                ++selection.since;
                stopNow = o.earlyStop > 0 && selection.since >= o.earlyStop;
            }
        }
        std::string testText = ", no test data";
        if (o.test) {
            r.testAccuracy = accuracyOf(*o.test);
            result.testAccuracy = r.testAccuracy;
            char text[64];
            std::snprintf(text, sizeof text, ", test accuracy %.2f%%", 100.0 * r.testAccuracy);
            testText = text;
        }
        r.checkpointed = !o.checkpoint.empty() && ((e + 1) % o.checkpointEpochs == 0 || e + 1 == o.epochs || stopNow);
        if (r.checkpointed) checkpoint();
        r.learnRate = optimizer.learnRate();
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.imagesPerSecond = trainer.samplesPerSecond();
        if (o.out || o.write) {
            char line[1024];
            std::snprintf(line, sizeof line,
                          "epoch %lld/%lld: train loss %.4f%s%s%s (%.0f images/s, %.1f%% of the time waiting for "
                          "data%s)%s%s\n",
                          static_cast<long long>(e + 1), static_cast<long long>(o.epochs), loss, validText.c_str(),
                          testText.c_str(), average ? " with the averaged weights" : "", trainer.samplesPerSecond(),
                          100.0 * trainer.dataSeconds() / trainer.epochSeconds(),
                          scheduled ? (", learning rate " + formatRate(r.learnRate)).c_str() : "", bestText.c_str(),
                          r.checkpointed ? "; checkpoint saved" : "");
            say(o, line);
        }
        if (metrics) {
            char row[160];
            std::snprintf(row, sizeof row, "%lld,%.6f,", static_cast<long long>(e + 1), loss);
            metricsText += row;
            if (o.validation) {
                std::snprintf(row, sizeof row, "%.4f,", 100.0 * r.validationAccuracy);
                metricsText += row;
            }
            std::snprintf(row, sizeof row, "%.4f,%.3f,%.1f\n", 100.0 * (o.test ? r.testAccuracy : 0.0), r.seconds,
                          r.imagesPerSecond);
            metricsText += row;
            writeFileAtomically(o.metrics, "metrics", metricsText);
        }
        result.epochs.push_back(r);
        if (callbacks.onEpoch) callbacks.onEpoch(r);
        if (stopNow && e + 1 < o.epochs) {
            say(o, "stopping early: no better validation accuracy in " + std::to_string(o.earlyStop) + " epoch" +
                       (o.earlyStop == 1 ? "" : "s") + "\n");
            result.stoppedEarly = true;
            break;
        }
        if (trainer.stopRequested()) {
            checkpoint();
            result.stopped = true;
            return finish();
        }
    }
    return finish();
}

} // namespace tessera
