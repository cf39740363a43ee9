// elementwise_fusion: maximal trees of two or more elementwise ONNX ops (the list of
// docs/fused-ops.md) whose intermediate values each have one consumer and are not pinned
// become one kiln FusedElementwise whose `body` attribute holds the ops. The node's inputs
// are the tree's outside inputs (constants included, each once, in order of first use);
// the body's inputs are typed like them, its one output is the tree's result, and the
// node keeps the tree's output value. A tree is fused only when every value in it has a
// known float type and its result has the broadcast shape of all its inputs. Pattern
// names give the size: "Elementwise(3 ops)".
#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/custom_expr.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

bool unary_elementwise(const std::string& op) {
  static const std::unordered_set<std::string> kOps = {
      "Relu",        "LeakyRelu", "Sigmoid", "Tanh",       "Exp",   "Log",
      "Abs",         "Neg",       "Sqrt",    "Reciprocal", "Erf",   "Clip",
      "HardSigmoid", "Softplus",  "Floor",   "Ceil",       "Round", "Sign"};
  return kOps.count(op) > 0;
}

bool binary_elementwise(const std::string& op) {
  static const std::unordered_set<std::string> kOps = {"Add", "Sub", "Mul", "Div",
                                                       "Pow", "Max", "Min"};
  return kOps.count(op) > 0;
}

// numpy broadcast of two shapes with known extents (static or named); false if they clash.
bool broadcast(const Shape& a, const Shape& b, Shape* out) {
  int r = std::max(a.rank(), b.rank());
  std::vector<Dim> dims(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    Dim da = ia >= 0 ? a[ia] : Dim(1);
    Dim db = ib >= 0 ? b[ib] : Dim(1);
    if (da.is_static() && da.value == 1)
      dims[static_cast<size_t>(i)] = db;
    else if ((db.is_static() && db.value == 1) || da == db)
      dims[static_cast<size_t>(i)] = da;
    else
      return false;
  }
  *out = Shape(std::move(dims));
  return true;
}

class ElementwiseFuser {
 public:
  ElementwiseFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());
    for (size_t i = 0; i < order.size(); ++i) position_[order[i]] = i;
    // From the last node back: a tree's root is met before the nodes feeding it.
    for (size_t i = order.size(); i-- > 0;) {
      ir::Node* root = order[i];
      if (taken_.count(root) || !eligible(*root)) continue;
      std::vector<ir::Node*> tree = {root};
      taken_.insert(root);
      grow(*root, tree);
      if (tree.size() >= 2) fuse(tree);
    }
    return fusion::finish(g_, removed_);
  }

 private:
  bool eligible(const ir::Node& n) const {
    // Custom ops (kiln DslElementwise, docs/dsl.md) fuse as the built-in ones do.
    const bool custom = n.domain() == ops::kKilnDomain && n.op_type() == "DslElementwise";
    if ((!n.domain().empty() && !custom) || n.num_outputs() != 1 || !n.output(0)) return false;
    const std::string& op = n.op_type();
    if (custom) {
      if (n.num_inputs() < 1) return false;
    } else if (binary_elementwise(op)) {
      if (n.num_inputs() != 2) return false;
    } else if (unary_elementwise(op)) {
      if (op == "Clip") {
        float lo = 0, hi = 0;
        if (n.num_inputs() < 1 || n.num_inputs() > 3 || !fusion::clip_bounds(g_, n, &lo, &hi))
          return false;
      } else if (n.num_inputs() != 1) {
        return false;
      }
    } else {
      return false;
    }
    if (!fusion::known_float_tensor(n.output(0)) || !n.input(0)) return false;
    for (const ir::Value* v : n.inputs())
      if (v && !fusion::known_float_tensor(v)) return false;
    // Its inputs must provably broadcast to its output: an Add of two differently named dims
    // (equal only at run time) would make every tree through it fail the check in fuse(),
    // losing the fusable trees that feed it; left out, it is the boundary between them.
    Shape all = Shape::from_static({});
    for (const ir::Value* v : n.inputs())
      if (v && !broadcast(all, v->shape(), &all)) return false;
    return all == n.output(0)->shape();
  }

  // Adds the producers of `n`'s inputs that may join the tree, recursively.
  void grow(const ir::Node& n, std::vector<ir::Node*>& tree) {
    for (ir::Value* v : n.inputs()) {
      if (!v || !fusion::fusable_intermediate(uses_, v)) continue;
      ir::Node* p = v->producer();
      if (!p || taken_.count(p) || !eligible(*p)) continue;
      taken_.insert(p);
      tree.push_back(p);
      grow(*p, tree);
    }
  }

  void fuse(std::vector<ir::Node*> tree) {
    std::sort(tree.begin(), tree.end(),
              [&](const ir::Node* a, const ir::Node* b) { return position_[a] < position_[b]; });
    std::unordered_set<const ir::Value*> inside;
    for (const ir::Node* n : tree) inside.insert(n->output(0));
    ir::Value* y = tree.back()->output(0);
    // Outside inputs in order of first use.
    std::vector<ir::Value*> inputs;
    Shape all = Shape::from_static({});
    for (const ir::Node* n : tree)
      for (ir::Value* v : n->inputs()) {
        if (!v || inside.count(v)) continue;
        if (std::find(inputs.begin(), inputs.end(), v) != inputs.end()) continue;
        inputs.push_back(v);
        if (!broadcast(all, v->shape(), &all)) return;
      }
    if (!(all == y->shape())) return;

    auto body = std::make_shared<ir::Graph>(fusion::fused_name(tree) + "_body");
    if (g_.opset_imports().count("")) body->opset_imports()[""] = g_.opset_imports().at("");
    std::unordered_map<const ir::Value*, ir::Value*> map;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ir::Value* b = body->get_or_add_value("in" + std::to_string(i));
      b->type() = inputs[i]->type();
      body->inputs().push_back(b);
      map[inputs[i]] = b;
    }
    for (size_t k = 0; k < tree.size(); ++k) {
      const ir::Node* n = tree[k];
      ir::Value* out = n->output(0);
      ir::Value* b = body->get_or_add_value(out == y ? "out" : "t" + std::to_string(k));
      b->type() = out->type();
      map[out] = b;
      std::vector<ir::Value*> ins;
      for (ir::Value* v : n->inputs()) ins.push_back(v ? map.at(v) : nullptr);
      ir::Node* bn = body->add_node(n->name(), n->op_type(), n->domain(), n->opset(), std::move(ins), {b});
      if (!n->domain().empty()) body->opset_imports()[n->domain()] = n->opset();
      bn->attrs() = n->attrs();
    }
    body->outputs().push_back(map.at(y));

    int count = static_cast<int>(tree.size());
    ir::Node* fused =
        fusion::add_fused_node(g_, uses_, "FusedElementwise", tree, inputs, y, removed_);
    fused->attrs()["body"] = ir::Attribute::from_graph(std::move(body));
    ctx_.count_fusion("Elementwise(" + std::to_string(count) + " ops)" + ops::custom_op_pattern_note(tree));
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_map<const ir::Node*, size_t> position_;
  std::unordered_set<const ir::Node*> taken_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo elementwise_fusion_pass() {
  PassInfo p;
  p.name = "elementwise_fusion";
  p.min_level = 2;
  p.description = "trees of two or more elementwise ops -> kiln FusedElementwise with a body";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available("FusedElementwise")) {
      ctx.note("elementwise_fusion: kiln FusedElementwise is not registered; nothing fused");
      return ok_status();
    }
    ElementwiseFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
