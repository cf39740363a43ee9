// Shared matching and rewriting helpers of the fusion passes.
#include "compiler/passes/fusion_util.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "ops/custom_expr.h"
#include "ops/registry.h"

namespace kiln::compiler::fusion {

bool fusable_dtype(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

bool known_float_tensor(const ir::Value* v) {
  if (!v || !v->type().is_tensor() || !fusable_dtype(v->dtype()) || !v->shape().has_rank())
    return false;
  for (const Dim& d : v->shape().dims())
    if (!d.is_static() && d.symbol.empty()) return false;
  return true;
}

bool f32_4d_known_channels(const ir::Value* v) {
  return v && v->type().is_tensor() && v->dtype() == DataType::kFloat32 && v->shape().has_rank() &&
         v->shape().rank() == 4 && v->shape()[1].is_static();
}

bool constant(const ir::Graph& g, const ir::Value* v) {
  if (!v || !v->has_initializer() || v->is_outer_scope()) return false;
  return std::find(g.inputs().begin(), g.inputs().end(), v) == g.inputs().end();
}

bool scalar_constant(const ir::Graph& g, const ir::Value* v, double* out) {
  if (!constant(g, v)) return false;
  const Tensor& t = *v->initializer();
  if (!fusable_dtype(t.dtype()) || t.num_elements() != 1) return false;
  *out = t.element_as_double(0);
  return true;
}

bool kiln_op_available(const std::string& op) {
  return ops::OpRegistry::instance().find(ops::kKilnDomain, op, ops::kKilnOpset) != nullptr;
}

bool clip_bounds(const ir::Graph& g, const ir::Node& clip, float* lo, float* hi) {
  if (clip.opset() < 11) {
    // Clip-6: bounds are attributes, defaulting to the float range.
    *lo = clip.attr_float("min", -std::numeric_limits<float>::max());
    *hi = clip.attr_float("max", std::numeric_limits<float>::max());
    return true;
  }
  *lo = -std::numeric_limits<float>::infinity();
  *hi = std::numeric_limits<float>::infinity();
  double v = 0;
  if (clip.input(1)) {
    if (!scalar_constant(g, clip.input(1), &v)) return false;
    *lo = static_cast<float>(v);
  }
  if (clip.input(2)) {
    if (!scalar_constant(g, clip.input(2), &v)) return false;
    *hi = static_cast<float>(v);
  }
  return true;
}

bool fusable_intermediate(const GraphUses& uses, const ir::Value* v) {
  if (!v || uses.pinned(v) || uses.num_consumers(v) != 1) return false;
  const ir::Node* p = v->producer();
  if (!p) return false;
  for (const ir::Value* o : p->outputs())
    if (o && o != v && !uses.unused(o)) return false;
  return true;
}

bool is_op(const ir::Node& n, const char* op_type, const char* domain) {
  return n.op_type() == op_type && n.domain() == domain && n.num_outputs() >= 1 && n.output(0);
}

namespace {

// Whether `n` is a unary activation reading `x` as input 0, and which one.
bool unary_activation(const ir::Graph& g, const ir::Node& n, const ir::Value* x, Activation* act) {
  if (n.input(0) != x) return false;
  // Only the first output of a node with one output in use is replaced.
  for (int i = 1; i < n.num_outputs(); ++i)
    if (n.output(static_cast<size_t>(i))) return false;
  act->params.clear();
  if (n.domain().empty()) {
    const std::string& op = n.op_type();
    if (n.num_inputs() != 1 && op != "Clip") return false;
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh") {
      act->name = op;
      return true;
    }
    if (op == "LeakyRelu") {
      act->name = op;
      act->params = {n.attr_float("alpha", 0.01f)};
      return true;
    }
    if (op == "HardSigmoid") {
      act->name = op;
      act->params = {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)};
      return true;
    }
    if (op == "HardSwish") {
      act->name = op;
      act->params = {1.0f / 6.0f, 0.5f};
      return true;
    }
    if (op == "Clip") {
      float lo = 0, hi = 0;
      if (!clip_bounds(g, n, &lo, &hi)) return false;
      act->name = op;
      act->params = {lo, hi};
      return true;
    }
    if (op == "Gelu") {  // ai.onnx Gelu-20
      std::string a = n.attr_string("approximate", "none");
      if (a != "none" && a != "tanh") return false;
      act->name = a == "tanh" ? "GeluTanh" : "Gelu";
      return true;
    }
    return false;
  }
  if (n.domain() != ops::kKilnDomain || n.num_inputs() != 1) return false;
  if (n.op_type() == "DslElementwise") {
    // A custom op (docs/dsl.md) whose compute is one of the table's activations of x0, as
    // x0 * sigmoid(beta * x0): the epilogue runs it as that activation (oneDNN's post-op), as
    // it would the built-in one. KILN_CUSTOM_OP_EPILOGUE=0 keeps it a DSL kernel.
    static const bool enabled = [] {
      const char* e = std::getenv("KILN_CUSTOM_OP_EPILOGUE");
      return !(e && std::string(e) == "0");
    }();
    if (!enabled) return false;
    Expected<ops::CustomExpr> e = ops::parse_custom_expr(n.attr_string("compute", ""));
    std::string name;
    if (!e.ok() || !ops::custom_expr_activation(*e, &name, &act->params)) return false;
    act->name = name == "Swish" ? "Silu" : name;  // Silu's parameter is Swish's beta
    return true;
  }
  if (n.op_type() == "HardSwish") {
    act->name = "HardSwish";
    act->params = {n.attr_float("alpha", 1.0f / 6.0f), n.attr_float("beta", 0.5f)};
    return true;
  }
  if (n.op_type() == "Gelu") {
    std::string a = n.attr_string("approximate", "none");
    if (a != "none" && a != "tanh") return false;
    act->name = a == "tanh" ? "GeluTanh" : "Gelu";
    return true;
  }
  return false;
}

}  // namespace

bool match_activation(const ir::Graph& g, const GraphUses& uses, ir::Value* x, Activation* act) {
  if (!x || uses.pinned(x)) return false;
  const auto& users = uses.consumers(x);
  if (users.size() == 1) {
    ir::Node* n = users[0];
    if (!unary_activation(g, *n, x, act)) return false;
    act->nodes = {n};
    act->output = n->output(0);
    return true;
  }
  // Silu: Mul(x, Sigmoid(x)) in either operand order; x feeds nothing else.
  if (users.size() != 2) return false;
  ir::Node* sig = nullptr;
  ir::Node* mul = nullptr;
  for (ir::Node* n : users) {
    if (is_op(*n, "Sigmoid") && n->num_inputs() == 1 && n->num_outputs() == 1)
      sig = n;
    else if (is_op(*n, "Mul") && n->num_inputs() == 2 && n->num_outputs() == 1)
      mul = n;
  }
  if (!sig || !mul || sig->input(0) != x) return false;
  ir::Value* s = sig->output(0);
  if (!fusable_intermediate(uses, s) || uses.consumers(s)[0] != mul) return false;
  bool operands =
      (mul->input(0) == x && mul->input(1) == s) || (mul->input(0) == s && mul->input(1) == x);
  if (!operands) return false;
  act->name = "Silu";
  act->params.clear();
  act->nodes = {sig, mul};
  act->output = mul->output(0);
  return true;
}

void set_activation(ir::Node& n, const Activation& act) {
  if (act.name.empty()) return;
  n.attrs()["activation"] = ir::Attribute::from_string(act.name);
  if (!act.params.empty()) n.attrs()["activation_params"] = ir::Attribute::from_floats(act.params);
}

std::string fused_name(const std::vector<ir::Node*>& nodes) {
  if (nodes.empty()) return "fused";
  auto name = [](const ir::Node* n) { return n->name().empty() ? n->op_type() : n->name(); };
  if (nodes.size() > 4)
    return name(nodes.front()) + "+" + std::to_string(nodes.size() - 2) + "_more+" +
           name(nodes.back());
  std::string s;
  for (const ir::Node* n : nodes) s += (s.empty() ? "" : "+") + name(n);
  return s;
}

ir::Node* add_replacing_node(ir::Graph& g, GraphUses& uses, const std::string& op, const std::string& domain,
                             int64_t opset, const std::vector<ir::Node*>& replaced, std::vector<ir::Value*> inputs,
                             ir::Value* output, std::unordered_set<const ir::Node*>& removed) {
  for (ir::Node* n : replaced) {
    uses.forget_node(n);
    removed.insert(n);
    // The intermediate values lose their producer; `output` gets the new node below.
    for (ir::Value* v : n->outputs())
      if (v) v->set_producer(nullptr, -1);
  }
  ir::Node* node = g.add_node(fused_name(replaced), op, domain, opset, std::vector<ir::Value*>(inputs.size(), nullptr),
                              {output});
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) uses.set_input(node, i, inputs[i]);
  return node;
}

ir::Node* add_fused_node(ir::Graph& g, GraphUses& uses, const std::string& op,
                         const std::vector<ir::Node*>& replaced, std::vector<ir::Value*> inputs,
                         ir::Value* output, std::unordered_set<const ir::Node*>& removed) {
  ir::Node* node = add_replacing_node(g, uses, op, ops::kKilnDomain, ops::kKilnOpset, replaced, std::move(inputs),
                                      output, removed);
  g.opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  return node;
}

Status finish(ir::Graph& g, const std::unordered_set<const ir::Node*>& removed) {
  if (removed.empty()) return ok_status();
  g.remove_nodes_if([&](const ir::Node& n) { return removed.count(&n) > 0; });
  return g.topological_sort();
}

}  // namespace kiln::compiler::fusion
