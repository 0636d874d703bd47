#pragma once
/// \file Model files in HDF5, in PuzzleLib's layout:
///   params/<index>              one dataset per parameter tensor (shared ones once)
///   links/<module path>.<param> a scalar int64 dataset: the index in params/
///   attrs/<module path>.<attr>  non-trained state (batch-norm running statistics)
///   blueprint                   optional: the model's blueprint JSON as a string
///   inputs                      optional: the input shapes it was saved for, as text
///                               ("1x3x224x224", several joined by ";")
///   counters                    optional: training counters as a JSON object
///                               ({"bn1.batches": 938}: batch norm's batches seen)
/// Files open in h5py and other HDF5 tools.

#include <string>
#include <vector>

#include "modules/Module.h"

namespace tessera {

struct SaveOptions {
    bool blueprint = true; ///< store the blueprint, so the file alone rebuilds the model
    /// The type floating parameters and attributes are stored in: float32, or bfloat16 or
    /// float16 (rounded to nearest even; half the file). loadModel reads any of them back
    /// into float32 tensors.
    DType dtype = DType::float32;
    /// The shapes of the model's inputs (one per graph input), stored so that tools can
    /// check or export the file without being told them (readInputShapes); none when empty.
    Shapes inputs = {};
    /// The names of the classes a classifier's outputs score, in order (a data set's
    /// folder names, say), stored so that tools can print them (readClassNames); none when
    /// empty.
    std::vector<std::string> classes = {};
    /// The transforms that make an image the model's input, in tessera train --augment's
    /// form ("resize:32x32,normalize:cifar10"; random ones act as on a test set: centre
    /// crops, no flips), stored so that tools and Python apply them to new images
    /// (readTransforms); none when empty.
    std::string transforms = {};
};

/// Writes `module`'s parameters and attributes (plain, in options.dtype) to `path`. The data goes to
/// a temporary file beside it, renamed over `path` only when complete: a crash never
/// leaves a half-written model. No time stamps are stored (HDF5 stamps objects by default),
/// so the same model and options always give the same bytes. Throws IoError naming the
/// file on failure.
void saveModel(const Module& module, const std::string& path, const SaveOptions& options = {});

/// What a training checkpoint (training/Checkpoint.h) adds to a model file: named float32
/// tensors (an optimizer's state) and a text record (where training is, as JSON). Stored
/// under the file's "extra" group and "extra_record" string; loadModel ignores them.
struct FileExtras {
    NamedTensors tensors;
    std::string record;
};
/// saveModel with `extras` in the same file, written in the same single atomic step.
void saveModel(const Module& module, const std::string& path, const SaveOptions& options, const FileExtras& extras);
/// The extras of a file saved with them: IoError naming the file when it has none or one
/// is unreadable.
FileExtras loadExtras(const std::string& path);

enum class LoadMode {
    strict,  ///< every parameter and attribute of the module and of the file must match
    lenient, ///< names present on only one side are skipped; matching names must still fit
};

/// Loads parameters and attributes from `path` into `module`, and the training counters
/// the file has (files written before counters were saved have none: the module keeps its
/// own). Every name, shape and dtype is checked before anything is copied; all mismatches
/// are reported in one IoError. A missing, truncated or corrupt file is a IoError
/// naming it. Parameters the file stores once (one Variable in the saved model: a head tied
/// to its token table) become one Variable in `module` too (Module::shareVarAt), so that a
/// model rebuilt from the file's blueprint trains them as one; load before setting up an
/// optimizer on it.
void loadModel(Module& module, const std::string& path, LoadMode mode = LoadMode::strict);

/// The blueprint JSON stored in `path` (IoError when there is none).
std::string readBlueprint(const std::string& path);

/// The input shapes stored in `path` (SaveOptions::inputs); empty when it holds none (files
/// saved without them). IoError for an unreadable file or malformed shapes.
Shapes readInputShapes(const std::string& path);

/// The class names saved with the model in `path` (SaveOptions::classes); empty when none
/// were. IoError as readBlueprint's, and for a malformed list.
std::vector<std::string> readClassNames(const std::string& path);

/// The transforms saved with the model in `path` (SaveOptions::transforms); empty when none
/// were. IoError as readBlueprint's.
std::string readTransforms(const std::string& path);

/// True when `path` starts with the HDF5 signature.
bool isHdf5File(const std::string& path);

} // namespace tessera
