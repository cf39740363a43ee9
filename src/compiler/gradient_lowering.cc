// Lowers the training op Gradient (domain ai.onnx.preview.training) into ordinary ops by
// reverse-mode differentiation of the forward graph between its `xs` and `y`, so the
// runtime needs no autodiff. Supported along the path: Add, Sub, Mul, Div, Neg, Identity
// on operands of equal shape; anything else is a clear error naming the node.
#include <unordered_map>
#include <unordered_set>

#include "compiler/compiler.h"

namespace kiln::compiler {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

class GradientBuilder {
 public:
  GradientBuilder(ir::Graph& g, const ir::Node& grad) : g_(g), grad_(grad) {}

  Status build() {
    std::vector<std::string> xs = strings_attr("xs");
    std::string y_name = grad_.attr_string("y", "");
    ir::Value* y = g_.find_value(y_name);
    if (!y) return invalid_argument("node %s: y '%s' is not a value of the graph", grad_.label().c_str(), y_name.c_str());
    if (xs.size() != static_cast<size_t>(grad_.num_outputs()))
      return invalid_argument("node %s: %zu xs but %d outputs", grad_.label().c_str(), xs.size(), grad_.num_outputs());
    // Seed dy/dy = 1 with y's shape.
    grads_[y] = add("ConstantOfShape", {add("Shape", {y})}, one_attr(y->dtype()));
    // Walk the forward nodes from y back to the inputs, in reverse execution order.
    std::vector<const ir::Node*> order;
    for (const auto& n : g_.nodes())
      if (n.get() != &grad_ && !created_.count(n.get())) order.push_back(n.get());
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const ir::Node& n = **it;
      if (n.num_outputs() != 1 || !grads_.count(n.output(0))) continue;
      KILN_RETURN_IF_ERROR(backprop(n, grads_[n.output(0)]));
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      ir::Value* x = g_.find_value(xs[i]);
      if (!x) return invalid_argument("node %s: xs '%s' is not a value of the graph", grad_.label().c_str(), xs[i].c_str());
      ir::Value* gx = grads_.count(x) ? grads_[x] : add("ConstantOfShape", {add("Shape", {x})}, zero_attr(x->dtype()));
      ir::Value* out = grad_.output(i);
      if (out) node("Identity", {gx}, out);
    }
    return ok_status();
  }

 private:
  std::vector<std::string> strings_attr(const char* name) const {
    const ir::Attribute* a = grad_.attr(name);
    return a && a->kind == ir::AttrKind::kStrings ? a->strings : std::vector<std::string>{};
  }

  static ir::AttributeMap scalar_attr(DataType dt, double v) {
    Tensor t = Tensor::make(dt, {1});
    if (dt == DataType::kFloat64) t.data<double>()[0] = v;
    else t.data<float>()[0] = static_cast<float>(v);
    return {{"value", ir::Attribute::from_tensor(std::move(t))}};
  }
  static ir::AttributeMap one_attr(DataType dt) { return scalar_attr(dt, 1.0); }
  static ir::AttributeMap zero_attr(DataType dt) { return scalar_attr(dt, 0.0); }

  ir::Node* node(const std::string& op, std::vector<ir::Value*> inputs, ir::Value* out, ir::AttributeMap attrs = {}) {
    ir::Node* n = g_.add_node(grad_.name() + "/" + op + "_" + std::to_string(counter_++), op, "",
                              g_.opset_imports().count("") ? g_.opset_imports().at("") : 13, std::move(inputs), {out});
    n->attrs() = std::move(attrs);
    created_.insert(n);
    return n;
  }

  ir::Value* add(const std::string& op, std::vector<ir::Value*> inputs, ir::AttributeMap attrs = {}) {
    ir::Value* out = g_.get_or_add_value(grad_.name() + "/grad_" + std::to_string(counter_++));
    node(op, std::move(inputs), out, std::move(attrs));
    return out;
  }

  void accumulate(ir::Value* v, ir::Value* g) {
    auto it = grads_.find(v);
    grads_[v] = it == grads_.end() ? g : add("Add", {it->second, g});
  }

  Status same_shapes(const ir::Node& n) const {
    const Shape* first = nullptr;
    for (const ir::Value* v : n.inputs()) {
      if (!v || !v->shape().is_static())
        return unsupported("node %s: Gradient needs static operand shapes of %s", grad_.label().c_str(), n.label().c_str());
      if (first && !(*first == v->shape()))
        return unsupported("node %s: Gradient through the broadcasting node %s is not supported", grad_.label().c_str(),
                           n.label().c_str());
      first = &v->shape();
    }
    return ok_status();
  }

  Status backprop(const ir::Node& n, ir::Value* g) {
    const std::string& op = n.op_type();
    ir::Value* a = n.input(0);
    ir::Value* b = n.input(1);
    if (!n.domain().empty()) return unsupported("node %s: Gradient through %s", grad_.label().c_str(), n.label().c_str());
    KILN_RETURN_IF_ERROR(same_shapes(n));
    if (op == "Identity") {
      accumulate(a, g);
    } else if (op == "Neg") {
      accumulate(a, add("Neg", {g}));
    } else if (op == "Add") {
      accumulate(a, g);
      accumulate(b, g);
    } else if (op == "Sub") {
      accumulate(a, g);
      accumulate(b, add("Neg", {g}));
    } else if (op == "Mul") {
      accumulate(a, add("Mul", {g, b}));
      accumulate(b, add("Mul", {g, a}));
    } else if (op == "Div") {
      // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2
      accumulate(a, add("Div", {g, b}));
      accumulate(b, add("Neg", {add("Mul", {g, add("Div", {add("Div", {a, b}), b})})}));
    } else {
      return unsupported("node %s: Gradient through %s is not supported (Add, Sub, Mul, Div, Neg, Identity are)",
                         grad_.label().c_str(), n.label().c_str());
    }
    return ok_status();
  }

  ir::Graph& g_;
  const ir::Node& grad_;
  std::unordered_map<const ir::Value*, ir::Value*> grads_;
  std::unordered_set<const ir::Node*> created_;
  int counter_ = 0;
};

}  // namespace

Expected<int> lower_gradient_nodes(ir::Graph& graph) {
  std::vector<const ir::Node*> grads;
  for (const auto& n : graph.nodes())
    if (n->op_type() == "Gradient" && n->domain() == kTrainingDomain) grads.push_back(n.get());
  for (const ir::Node* n : grads) {
    // The Gradient node's outputs are re-produced by the lowered nodes.
    for (ir::Value* v : n->outputs())
      if (v) v->set_producer(nullptr, -1);
    GradientBuilder builder(graph, *n);
    KILN_RETURN_IF_ERROR(builder.build());
  }
  std::unordered_set<const ir::Node*> done(grads.begin(), grads.end());
  graph.remove_nodes_if([&](const ir::Node& n) { return done.count(&n) > 0; });
  if (!grads.empty()) KILN_RETURN_IF_ERROR(graph.topological_sort());
  return static_cast<int>(grads.size());
}

}  // namespace kiln::compiler
