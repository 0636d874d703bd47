#pragma once
/// \file The one graph engine: runs nodes forward in a given order and backward in its
/// reverse, with eval-mode release of values and release of spent gradients. Graph's
/// forward and backward and Node's PuzzleLib doors (`Node::forward`, `Node::backward`) both
/// run through it; they differ only in how they choose the order (a Graph's precomputed
/// plan, or a traversal by visited flags). Internal: not installed.

#include <functional>
#include <optional>

#include "containers/Node.h"

namespace tessera::exec {

struct ForwardOptions {
    /// Shapes were checked by a plan: nodes run unchecked (Module::runPlanned).
    bool planned = false;
    /// Eval mode: a node's outputs are released once every child of the node has run.
    bool release = false;
    /// Nodes whose outputs are never released (a graph's outputs). Empty: none.
    std::function<bool(const Node&)> keep;
    /// Prefix for an error raised at a node (its path). Empty: the error as it is.
    std::function<std::string(const Node&)> where;
};

/// Run every node of `order` (parents before children), marking each fwdVisited. A node
/// for which `feed` gives tensors takes those, the others their parents' outputs.
void forward(const std::vector<Node*>& order, const std::function<std::optional<Tensors>(const Node&)>& feed,
             const ForwardOptions& options);

struct BackwardOptions {
    bool updParamGrads = true;
    bool updGrad = true;
    float scale = 1.0f;
    float momentum = 0.0f;
    std::function<std::string(const Node&)> where;
    /// Nodes whose kept values (inputs, outputs, masks) go once their backward has run
    /// (Container::setReleaseInBackward). Null: none.
    std::function<bool(const Node&)> release;
};

/// Whether a node's backward must run: it holds parameters to update, or an ancestor does,
/// or it is an entry node (no parents) whose input gradient is asked for. `order` lists
/// every ancestor of its nodes, parents first. `hasParams` says whether a node's module
/// holds parameters (a Graph knows it from its build).
std::unordered_map<const Node*, bool> needed(const std::vector<Node*>& order, bool updParamGrads, bool updGrad,
                                             const std::function<bool(const Node&)>& hasParams);

/// Run backward over `order` in reverse (children before parents), marking each
/// bwdVisited. A node for which `given` gives gradients takes those as its output
/// gradient, the others the sum of their children's contributions. Nodes that are not
/// `need`ed drop the contributions they got and compute nothing. A node's input gradient
/// is released once every parent has taken it (entry nodes keep theirs: they are the
/// result).
void backward(const std::vector<Node*>& order, const std::function<std::optional<Tensors>(const Node&)>& given,
              const std::unordered_map<const Node*, bool>& need, const std::function<bool(const Node&)>& hasParams,
              const BackwardOptions& options);

} // namespace tessera::exec
