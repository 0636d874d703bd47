#pragma once
/// \file The exception types Tessera throws. Every message says what was expected, what
/// was found and where.
///
///   Error                      the root: catch this to catch everything Tessera throws
///   ├── ModuleError            bad arguments or bad state of a module, cost, optimizer,
///   │   │                      schedule or model builder
///   │   └── ShapeError         a tensor's shape or dtype does not fit
///   ├── ContainerError         a container's structure does not allow the request
///   ├── GraphError             a malformed graph
///   ├── BackendError           a backend library failed, or a device is unavailable
///   ├── IoError                a file is missing, unreadable, malformed or cannot be written
///   └── NumericsError          a NaN or infinity appeared (with checkNumerics on)
///
/// Containers add the path to the failing child or node to any of them and rethrow the
/// same type (`rethrowWithContext`).

#include <stdexcept>
#include <string>

namespace tessera {

/// Base of every Tessera exception.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Bad arguments (a negative dropout rate, an unknown activation) or bad state (backward
/// before forward) of a module or of another library object (cost, optimizer, schedule).
class ModuleError : public Error {
public:
    using Error::Error;
};

/// A tensor's shape or dtype does not fit what a module or operation accepts.
class ShapeError : public ModuleError {
public:
    using ModuleError::ModuleError;
};

/// A container was asked for something its structure does not allow (bad position,
/// duplicate child name, unknown name).
class ContainerError : public Error {
public:
    using Error::Error;
};

/// A graph is malformed (cycle, unreachable output, duplicate name, bad slot, ...). The
/// message names the nodes involved.
class GraphError : public Error {
public:
    using Error::Error;
};

/// A backend library (oneDNN, BLAS, CUDA) reported a failure, or a device is unavailable.
class BackendError : public Error {
public:
    using Error::Error;
};

/// A file (model, blueprint, data set) is missing, unreadable, malformed, or cannot be
/// written. The message names the file.
class IoError : public Error {
public:
    using Error::Error;
};

/// A NaN or an infinity in a layer's output or gradient, found by the numerics check
/// (`setCheckNumerics`). The message names the layer (with its path in the model), the
/// phase, the first bad element and statistics of what the layer was given.
class NumericsError : public Error {
public:
    using Error::Error;
};

/// Inside a `catch`: rethrows the exception being handled as the same Tessera type with
/// `prefix` put before its message. Anything that is not a tessera::Error is rethrown
/// unchanged.
[[noreturn]] void rethrowWithContext(const std::string& prefix);

} // namespace tessera
