#pragma once
/// \file Graph: a module made of nodes, with several inputs and outputs.

#include <mutex>
#include <unordered_set>

#include "containers/Container.h"
#include "containers/Node.h"

namespace tessera {

/// A directed acyclic graph of nodes from `inputs` to `outputs`; itself a Module, so it
/// nests in a Sequential and the other way round.
///
/// Built once: the constructor checks that inputs have no parents, outputs have no
/// children, every node reaches back to the inputs, every input leads to an output, node
/// names are unique (unnamed nodes get `<classname>_<k>`), slots are in range and there is
/// no cycle; each failure is a GraphError naming the nodes. The execution order is
/// computed then, without recursion.
///
/// One module may run in several nodes (shared weights: siamese towers, a layer applied
/// twice): each such node keeps its own run between forward and backward
/// (`Node::sharesModule`), so the module may see other shapes in each, and its parameter
/// gradients sum over the nodes, as they do for modules given one Variable with setVar.
/// A container runs in one node only (a GraphError names both nodes).
///
/// Shapes are checked once per set of input shapes (and mode): the first forward or
/// dataShapeFrom at those shapes runs whole-graph inference, later forwards run the nodes
/// without checks.
///
/// Inputs: one tensor per input node, in order. Outputs: the output nodes' outputs, in
/// order. In eval mode a node's output is released as soon as its last consumer has run,
/// so inference holds only the live values; backward then needs train mode.
class Graph : public Container {
public:
    Graph(std::vector<NodePtr> inputs, std::vector<NodePtr> outputs, std::string name = {});

    std::string classname() const override { return "Graph"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    const std::vector<NodePtr>& inputs() const { return inputs_; }
    const std::vector<NodePtr>& outputs() const { return outputs_; }
    /// Every node in execution order.
    const std::vector<Node*>& order() const { return order_; }
    /// Modules in execution order plus the nodes (names, parents with slots), inputs and
    /// outputs: enough to rebuild the graph (io/Factory.h).
    Blueprint blueprint() const override;
    /// The node called `name`; throws GraphError when there is none.
    Node& getNodeByName(const std::string& name) const;
    /// Wraps `module` in the node `name` instead of its module (a head swap), on the graph's
    /// device; returns the module it replaced. The children's slots must exist in it; the
    /// next forward checks the shapes again. GraphError otherwise, or for a null module.
    ModulePtr replace(const std::string& name, ModulePtr module) override;

    /// One [shape] per input node.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Each input node's module checks the dtype of its input.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    /// Whole-graph inference: every node's checks and dataShapeFrom, in order, nothing
    /// allocated. Throws one ShapeError listing every failing node with its path from an
    /// input (`data -> conv1 -> fc1: Linear 'fc1': expects ...`); nodes below a failure are
    /// skipped.
    /// Shape queries (this, gradShapeFrom, the checks) may come from several threads at once;
    /// they take turns. Forward and backward may not run beside them on the same graph.
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Every node's module, at the shapes whole-graph inference gives it.
    void optimizeForShape(const Shapes& inShapes, size_t memlimit) override;
    /// Whole-graph gradient-shape inference, in reverse order, failures listed the same
    /// way. Needs the output shapes of a dataShapeFrom (or forward) on the same input.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    size_t outputCount() const override;
    void reset() override;

    /// `data -> conv1 -> fc1`: the path by first parents from an input to `node`.
    std::string pathTo(const Node& node) const;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;

private:
    void build();

    std::vector<NodePtr> inputs_, outputs_;
    std::vector<NodePtr> nodes_; // owning, in execution order
    std::vector<Node*> order_;
    std::unordered_set<const Node*> withParams_; // nodes whose modules hold parameters
    // Which nodes share their module with another (Node::sharesModule); GraphError for a
    // container in two nodes.
    void markSharedModules(const std::string& where);
    std::unordered_map<std::string, Node*> byName_;
    std::unordered_map<const Node*, size_t> consumers_; // fwd edges inside the graph
    std::unordered_map<const Node*, size_t> inputIndex_;
    std::unordered_map<const Node*, size_t> outputIndex_;
    // By position in order_: parents and children inside the graph, and the index of an
    // input or output node (-1 for the others), so shape inference walks without maps.
    std::vector<std::vector<size_t>> parentPos_, childPos_;
    std::vector<std::ptrdiff_t> inputPos_, outputPos_;
    bool released_ = false; // an eval-mode forward dropped intermediate values
    // The plan: the input shapes, mode and structure the nodes' shapes were last checked
    // at; a forward at the same ones runs the nodes without re-checking them.
    // Shape queries from several threads take turns: they write the nodes' shapes.
    mutable std::recursive_mutex planMutex_;
    mutable bool planned_ = false;
    mutable Shapes planIn_, planOut_;
    mutable bool planTrain_ = true;
    mutable uint64_t planVersion_ = 0;
};

} // namespace tessera
