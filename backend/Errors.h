#pragma once
/// \file The exception types Tessera throws. Every message says what was expected, what
/// was found and where.

#include <stdexcept>
#include <string>

namespace tessera {

/// Base of every Tessera exception.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A tensor's shape or dtype does not fit what a module or operation accepts.
class ShapeError : public Error {
public:
    using Error::Error;
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

} // namespace tessera
