// Kiln's FusedElementwise (domain kiln, docs/fused-ops.md): a chain of elementwise ONNX
// ops held as the `body` graph attribute. Inference checks the body and broadcasts the
// inputs; the reference kernel runs the body through the runtime's subgraph runner, so
// it computes exactly what the unfused chain computes.
#include <set>
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// The ops a body may hold. Constant is allowed too: it is how an exporter writes the
// scalar operands of the chain (x * 0.5, Clip's bounds).
const std::set<std::string>& allowed_ops() {
  static const std::set<std::string> ops = {
      "Relu",       "LeakyRelu", "Sigmoid", "Tanh",        "Exp",      "Log",   "Abs",  "Neg",      "Sqrt",
      "Reciprocal", "Erf",       "Clip",    "HardSigmoid", "Softplus", "Floor", "Ceil", "Round",    "Sign",
      "Add",        "Sub",       "Mul",     "Div",         "Pow",      "Max",   "Min",  "Constant",
  };
  return ops;
}

// The body graph after checking it against the node: one input per node input, one
// output, only allowed ops of the default domain.
Expected<const ir::Graph*> checked_body(const ir::Node& node) {
  const std::string label = node.label();
  const ir::Attribute* a = node.attr("body");
  if (!a || a->kind != AttrKind::kGraph || !a->g)
    return invalid_argument("node %s has no graph attribute 'body'", label.c_str());
  const ir::Graph& body = *a->g;
  for (int i = 0; i < node.num_inputs(); ++i)
    if (!node.inputs()[static_cast<size_t>(i)])
      return invalid_argument("node %s: input %d is omitted; every input is required", label.c_str(), i);
  if (static_cast<int>(body.inputs().size()) != node.num_inputs())
    return invalid_argument("node %s has %d inputs but its body takes %zu", label.c_str(), node.num_inputs(),
                            body.inputs().size());
  if (body.outputs().size() != 1)
    return invalid_argument("node %s: the body has %zu outputs, expected 1", label.c_str(), body.outputs().size());
  for (const auto& n : body.nodes()) {
    if (n->domain() == kKilnDomain && n->op_type() == "DslElementwise") continue;  // a custom op (docs/dsl.md)
    if (!n->domain().empty() || !allowed_ops().count(n->op_type()))
      return invalid_argument("node %s: body node %s is not one of the elementwise ops FusedElementwise may hold",
                              label.c_str(), n->label().c_str());
  }
  return &body;
}

// Shapes of the constants the body itself holds (initializers, Constant values): they
// take part in the broadcast like the inputs.
std::vector<Shape> body_constant_shapes(const ir::Graph& body) {
  std::vector<Shape> shapes;
  for (const auto& v : body.values())
    if (v->has_initializer()) shapes.push_back(v->initializer()->shape());
  for (const auto& n : body.nodes()) {
    if (n->op_type() != "Constant") continue;
    const ir::Attribute* t = n->attr("value");
    const ir::Attribute* floats = n->attr("value_floats");
    const ir::Attribute* ints = n->attr("value_ints");
    if (t && t->kind == AttrKind::kTensor) {
      shapes.push_back(t->t.shape());
    } else if (floats && floats->kind == AttrKind::kFloats) {
      shapes.push_back(Shape{static_cast<int64_t>(floats->floats.size())});
    } else if (ints && ints->kind == AttrKind::kInts) {
      shapes.push_back(Shape{static_cast<int64_t>(ints->ints.size())});
    } else {
      shapes.push_back(Shape(std::vector<Dim>()));  // value_float / value_int: a scalar
    }
  }
  return shapes;
}

Status infer_fused_elementwise(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, checked_body(node));
  const ir::TensorType& declared = body->outputs()[0]->type();
  DataType dt = declared.dtype;
  if (dt == DataType::kUndefined && ctx.has_input(0)) dt = ctx.input_type(0).dtype;
  Shape out = Shape(std::vector<Dim>());  // rank 0: the identity of broadcasting
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input_type(i).shape;
    if (!s.has_rank()) {
      ctx.set_output(0, dt, Shape::unknown_rank());
      return ok_status();
    }
    KILN_ASSIGN_OR_RETURN(out, broadcast_shapes(node, out, s));
  }
  for (const Shape& s : body_constant_shapes(*body)) {
    KILN_ASSIGN_OR_RETURN(out, broadcast_shapes(node, out, s));
  }
  ctx.set_output(0, dt, std::move(out));
  return ok_status();
}

Status fused_elementwise_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, checked_body(node));
  if (!ctx.subgraphs())
    return failed_precondition("node %s needs a runtime that executes subgraphs", node.label().c_str());
  std::vector<RuntimeValue> inputs;
  std::vector<int64_t> dims;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    if (!t) return invalid_argument("node %s: input %d is not a tensor", node.label().c_str(), i);
    KILN_ASSIGN_OR_RETURN(dims, broadcast_dims(node, dims, t->dims()));
    inputs.push_back(*ctx.value(i));
  }
  for (const Shape& s : body_constant_shapes(*body)) {
    if (!s.is_static()) continue;
    KILN_ASSIGN_OR_RETURN(dims, broadcast_dims(node, dims, s.static_dims()));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<RuntimeValue> outs, ctx.subgraphs()->run(*body, inputs), "in the body of node %s",
                        node.label().c_str());
  if (outs.size() != 1 || !outs[0].is_tensor())
    return invalid_argument("node %s: the body gave %zu values, expected one tensor", node.label().c_str(),
                            outs.size());
  if (outs[0].tensor().dims() != dims)
    return invalid_argument("node %s: the body gave %s, expected the broadcast of the inputs %s", node.label().c_str(),
                            dims_to_string(outs[0].tensor().dims()).c_str(), dims_to_string(dims).c_str());
  ctx.set_output_value(0, std::move(outs[0]));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("FusedElementwise", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, -1)
                     .outputs(1, 1)
                     .required_attr("body", AttrKind::kGraph)
                     .infer(infer_fused_elementwise)
                     .kernel(fused_elementwise_kernel)
                     .doc("A chain of elementwise ops run as one node (docs/fused-ops.md)"));

}  // namespace kiln::ops
