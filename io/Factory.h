#pragma once

#include <functional>
/// \file Blueprints back to modules: JSON parsing and the one explicit factory table that
/// rebuilds any module, container or graph from its blueprint.

#include <string>
#include <vector>

#include "modules/Module.h"

namespace tessera {

/// Parses blueprint JSON (what `Blueprint::toJson` writes). Throws IoError
/// naming the position of bad JSON or the field that does not fit.
Blueprint blueprintFromJson(const std::string& json);

/// A fresh module (parameters initialised from the global generator) built from `bp`.
/// Throws ModuleError naming the class and the argument when the class is not
/// in the table or an argument has the wrong type; `where` prefixes the message (the
/// path of the module inside its parents). An argument the class does not take is a
/// ModuleError naming the nearest one it takes ("strides": did you mean "stride"?) and
/// listing them all: a misspelled key would otherwise build a model that differs from its
/// JSON. `strictArguments` false ignores such arguments (for blueprints of a later version).
ModulePtr buildModule(const Blueprint& bp, const std::string& where = {}, bool strictArguments = true);

/// Builds the modules whose class name starts with `prefix` when the table has no such
/// class (the Python package registers "python:" for layers written in Python, whose
/// blueprints name their Python class). Registering a prefix again replaces it.
void registerClassResolver(const std::string& prefix, std::function<ModulePtr(const Blueprint& bp)> build);

/// A fresh module (parameters from the global generator, not the file's) built from the
/// blueprint an HDF5 model file holds (io/Hdf5.h saves one). IoError naming the file when
/// it has none or it does not parse; loadModel then reads the file's weights into it.
ModulePtr buildModuleFromFile(const std::string& path);

/// A copy of `module` that shares nothing with it: rebuilt from its blueprint, then given
/// its parameters, attributes, training counters, random streams, compute types and
/// train/eval modes, on its device. For one model per thread (docs/python.md). A parameter
/// that several modules share stays shared in the copy where its blueprint says so (one
/// module at several graph nodes), as after saving and loading. The rebuild draws (and
/// then overwrites) initial weights from the global generator, as building any model does.
/// ModuleError naming the parameter or attribute when the blueprint does not rebuild the
/// module as it is (a MaxUnpool2D, a layer changed after it was built).
ModulePtr copyModule(const Module& module);

/// The class names the factory knows.
std::vector<std::string> factoryClassnames();

/// The arguments `classname` takes, in its order, with their defaults, written as Python
/// writes a signature: "insize, outsize, wscale=1.0, useBias=True, initscheme='xavier',
/// name=None". A name without a default is required; None means the class decides (a
/// pool's stride is its size). This is the one place a layer's defaults are written:
/// the factory fills every argument a blueprint leaves out from it, Python's layer
/// classes are made from it, `tessera layers` prints it (the table in docs/layers.md),
/// and a test checks each C++ options struct against it. ModuleError for an unknown class.
std::string factorySignature(const std::string& classname);

} // namespace tessera
