#pragma once
/// \file Node: a module wrapped as a vertex of a graph, with PuzzleLib's Node API.
///
/// A node's parents feed its module: the module's input list is the concatenation of the
/// parents' selected outputs (slots), in parent order. `bwds` lists (parent, slots taken
/// from it); `fwds` lists (child, slots of this node the child takes).

#include <functional>
#include <unordered_map>

#include "modules/Module.h"

namespace tessera {

class Node;
using NodePtr = std::shared_ptr<Node>;

/// One parent: a node and the indices of its outputs taken (all of them when empty).
struct Parent {
    NodePtr node;
    std::vector<int> slots;

    Parent(NodePtr n) : node(std::move(n)) {} // NOLINT: implicit by design, `node(mod, x)`
    Parent(NodePtr n, int slot) : node(std::move(n)), slots{slot} {}
    Parent(NodePtr n, std::vector<int> s) : node(std::move(n)), slots(std::move(s)) {}
};

/// None, one parent, or a list of parents: `{}`, `x`, `Parent{split, 1}`, `{a, b}`.
class Parents : public std::vector<Parent> {
public:
    Parents() = default;
    Parents(NodePtr n) { // NOLINT: implicit by design
        if (n) emplace_back(std::move(n));
    }
    Parents(Parent p) { emplace_back(std::move(p)); } // NOLINT
    Parents(std::initializer_list<Parent> ps) : std::vector<Parent>(ps) {}
};

/// An edge: the node at the other end and the slots carried (slots of the parent).
struct Edge {
    Node* node;
    std::vector<int> slots;
};

/// Shapes per node, filled in by whole-graph shape inference.
using ShapeMap = std::unordered_map<const Node*, Shapes>;

class Node : public std::enable_shared_from_this<Node> {
public:
    /// Wrap `mod`; `name` defaults to the module's name, and names an unnamed module (a
    /// Graph names nodes left unnamed).
    /// Throws GraphError when a parent slot is out of range.
    explicit Node(ModulePtr mod, const Parents& parents = {}, std::string name = {});
    /// Releases its ancestors without recursion: a chain of a million nodes does not
    /// overflow the stack when its last node goes.
    ~Node();
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;

    Module& module() const { return *module_; }
    const ModulePtr& modulePtr() const { return module_; }
    /// Wraps `module` instead (Graph::replace does it with the graph's bookkeeping; a node
    /// of a graph changed here alone leaves that graph's plans stale). Not null.
    void setModule(ModulePtr module);
    const std::string& name() const { return name_; }
    void setName(std::string name) { name_ = std::move(name); }
    /// `fc1 (Linear)`.
    std::string str() const;

    const std::vector<Edge>& fwds() const { return fwds_; }
    const std::vector<Edge>& bwds() const { return bwds_; }
    /// True when children have routed gradient into this node since its last buildOutGrad.
    bool hasOutGrad() const { return !outGrad_.empty(); }
    /// The parent nodes, one per bwds entry.
    const std::vector<NodePtr>& parents() const { return parents_; }

    /// Whether this node's module runs in other nodes of its graph too (set by the Graph
    /// when built). The node then keeps its own run (Module::RunState: inputs, outputs,
    /// input gradients, kept tensors) between its forward and its backward, and the
    /// module holds it only while this node runs.
    bool sharesModule() const { return sharesModule_; }
    void setSharesModule(bool shares);
    /// This node's outputs (its module's dataList(), or its own run's when it shares the
    /// module).
    const Tensors& outputs() const;
    /// This node's input gradients from its last backward (likewise).
    const Tensors& inputGrads() const;
    /// Drop this node's outputs and what its module kept (eval-mode release).
    void releaseValues();
    /// Drop this node's input gradients (once every parent has taken them).
    void releaseInputGrads();
    /// Drop what this node's run kept for backward, keeping its input gradient (once its
    /// backward has run: Container::setReleaseInBackward).
    void releaseSaved();

    /// Add parents: this node's bwds and each parent's fwds. Throws GraphError (naming the
    /// nodes of the cycle) when a parent descends from this node, and when a slot is out
    /// of range.
    void addBackwards(const Parents& nodes);
    /// Add a child taking `slots` of this node's outputs (called by the child's addBackwards).
    void addForward(Node* node, std::vector<int> slots);

    // ---- data ---------------------------------------------------------------------------
    /// The parents' selected outputs, in order: this node's module input.
    Tensors gatherInputs() const;
    /// Run the module on `data`.
    void updateData(const Tensors& data);
    /// Run the module on `data` whose shapes a graph's plan has checked (no shape checks).
    void runPlanned(const Tensors& data);
    /// Run this node on `data`, then every descendant once all its parents have run. In
    /// eval mode a node's outputs are released once all its children have run, as in a
    /// Graph (nodes without children keep theirs).
    void forward(const Tensors& data);

    // ---- gradients ----------------------------------------------------------------------
    /// Back-propagate `grad` from this node through its ancestors, each once all its
    /// children have run backward (in this call or an earlier one). Runs as a Graph's
    /// backward does: a node computes nothing when neither it nor an ancestor holds
    /// parameters (with updParamGrads) and no entry gradient is asked for (updGrad), and a
    /// node's input gradient is released once every parent has taken it.
    void backward(const Tensors& grad, bool updParamGrads = true, bool updGrad = true, float scale = 1.0f,
                  float momentum = 0.0f);
    /// Run the module's backward on `grad`, then hand each parent its part (routeInGrad).
    void updateGrad(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum);
    /// The gradient of this node's outputs: `grad` when the node has no children, else the
    /// sum over consumers, per slot (zeros for a slot nobody consumed).
    Tensors buildOutGrad(const Tensors& grad);
    /// Hand each parent the gradient of the slots it provided (accumulated in the parent).
    void routeInGrad(const Tensors& grad);
    /// Add `grad` to the pending gradient of output `slot`.
    void accumulateGrad(int slot, const Tensor& grad);

    // ---- shapes -------------------------------------------------------------------------
    /// Output shapes of this node from `inshapes` (input nodes) or the parents' entries in
    /// `shapes`; runs the module's checks; stores the result in `shapes`. `onmodule`, when
    /// set, is called with the node and its input shapes.
    Shapes dataShapeFrom(const ShapeMap& inshapes, ShapeMap& shapes,
                         const std::function<void(Node&, const Shapes&)>& onmodule = {});
    /// Input-gradient shapes of this node (stored in `shapes`) from its children's entries,
    /// or from `outshapes` when it has no children.
    Shapes gradShapeFrom(const Shapes& outshapes, ShapeMap& shapes);
    /// The output-gradient shapes: `outshapes` without children, else from the children.
    Shapes buildOutGradShape(const Shapes& outshapes, const ShapeMap& shapes) const;
    /// The same without maps, for a Graph walking its plan: the parents' last outShapes()
    /// (or `in` for an input node) through the module's checks; stored as outShapes().
    const Shapes& inferShapes(const Shapes* in = nullptr);
    /// The same for gradients: from the children's last inGradShapes() (or `outshapes`
    /// without children); stored as inGradShapes(). With `inScope`, children it rejects
    /// (nodes outside the graph being checked, which this node also feeds) are passed over.
    const Shapes& inferGradShapes(const Shapes& outshapes, const std::function<bool(const Node*)>& inScope = nullptr);
    /// Input-gradient shapes of the last gradShapeFrom or inferGradShapes.
    const Shapes& inGradShapes() const { return inGradShapes_; }
    /// Output shapes of the last dataShapeFrom or forward.
    const Shapes& outShapes() const { return outShapes_; }
    /// Input shapes of the last dataShapeFrom or forward.
    const Shapes& inShapes() const { return inShapes_; }

    // ---- state --------------------------------------------------------------------------
    /// Drop the module's kept tensors, the pending gradients and the traverse flags.
    void reset();
    void clearTraverse() { fwdVisited = bwdVisited = false; }

    /// Call `func` on every descendant of `node` once all of its parents are fwdVisited,
    /// marking each visited. Iterative: depth is not limited by the stack.
    static void traverseForward(Node& node, const std::function<void(Node&)>& func);
    /// The same towards the ancestors, once all of a node's children are bwdVisited.
    static void traverseBackward(Node& node, const std::function<void(Node&)>& func);

    bool fwdVisited = false;
    bool bwdVisited = false;

private:
    ModulePtr module_;
    std::string name_;
    std::vector<Edge> fwds_, bwds_;
    std::vector<NodePtr> parents_; // keeps the parents alive
    /// Removes the edges to this node from its parents' fwds (before it goes).
    void detachFromParents();
    Tensors outGrad_; // pending gradient per output slot
    std::vector<bool> outGradOwned_;
    Shapes inShapes_, outShapes_, inGradShapes_;
    bool sharesModule_ = false;
    Module::RunState run_; // this node's run, when it shares its module
    void keepRun();        // move the module's run into run_ (sharing nodes only)

    // `childGrads(c)`: child c's input-gradient shapes, or nullptr for a child outside the
    // traversal (its edge passed over).
    Shapes outGradShapeFrom(const Shapes& outshapes, const std::function<const Shapes*(const Node*)>& childGrads) const;
};

/// `node(std::make_shared<Linear>(800, 10), pool2, "fc1")`: wrap a module as a node.
NodePtr node(ModulePtr mod, const Parents& parents = {}, std::string name = {});

} // namespace tessera
