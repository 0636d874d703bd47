#pragma once
/// \file Training checkpoints: one file with everything a run needs to continue exactly
/// where it was, so a resumed run is bit-identical to one never interrupted (on the same
/// device and thread count): the model's parameters and attributes and its blueprint (it
/// is an HDF5 model file, which loadModel and `tessera check` read like any other), the
/// optimizer's state (its per-parameter tensors, step count, loss scale), the Trainer's
/// position within its epoch (the batch order follows from the seed and epoch), the
/// global random generator and every module's own random stream (dropout, noise). Written atomically: beside the
/// target, synced, renamed over it, so a kill at any point leaves the previous checkpoint whole.

#include <string>

#include "modules/Module.h"
#include "training/Average.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera {

/// Writes a checkpoint of `net` trained by `trainer` with `optimizer` (bound to `net`), and
/// the weight average when one is kept (not swapped in: ModuleError). `notes`: the caller's
/// own state as text (tessera train keeps its best validation accuracy there), given back
/// by loadCheckpoint. IoError naming the file when it cannot be written.
void saveCheckpoint(const std::string& path, const Module& net, const Optimizer& optimizer, const Trainer& trainer,
                    const WeightAverage* average = nullptr, const std::string& notes = {});

/// The same for a loop of one's own, without a Trainer: no position is kept (the rest is).
void saveCheckpoint(const std::string& path, const Module& net, const Optimizer& optimizer,
                    const WeightAverage* average = nullptr, const std::string& notes = {});

/// Restores a checkpoint into `net` (same parameter names and shapes), `optimizer` (same
/// class, bound to `net`, set up as when it was saved), `trainer` (same batch size and
/// seed) and the global generator. IoError naming the file for an unreadable or
/// non-checkpoint file; ModuleError naming what does not match (a weight average saved and
/// none given, or the other way round, included). Nothing is changed when anything does
/// not match. `notes`, when given, receives the notes saved with it ("" when none).
void loadCheckpoint(const std::string& path, Module& net, Optimizer& optimizer, Trainer& trainer,
                    WeightAverage* average = nullptr, std::string* notes = nullptr);
/// The same without a Trainer (a loop of one's own): a position saved for one is ignored.
/// Loading a checkpoint saved without a Trainer into one is a ModuleError.
void loadCheckpoint(const std::string& path, Module& net, Optimizer& optimizer, WeightAverage* average = nullptr,
                    std::string* notes = nullptr);

} // namespace tessera
