// Kiln's DslElementwise (domain kiln, docs/dsl.md): a custom op's element-wise compute, as
// the compile rewrote it from the plugin's definition (`compute`: the expression of
// ops/custom_expr.h with attributes bound; `custom_op`: "domain::OpType" of the original
// node, for reports). Inference broadcasts the float32 inputs; the reference kernel
// evaluates the expression per element. The fast kernel (kernels/cpu/fused_elementwise.cc)
// runs the DSL-generated code.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/custom_expr.h"
#include "ops/op_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

Expected<CustomExpr> checked_compute(const ir::Node& node) {
  const std::string label = node.label();
  const ir::Attribute* a = node.attr("compute");
  if (!a || a->kind != AttrKind::kString) return invalid_argument("node %s has no string attribute 'compute'", label.c_str());
  KILN_ASSIGN_OR_RETURN(CustomExpr e, parse_custom_expr(a->s), "node %s", label.c_str());
  KILN_RETURN_IF_ERROR(check_custom_expr_attrs(e, {}), "node %s (attributes are bound at compile time)", label.c_str());
  const int reads = custom_expr_inputs(e);
  if (reads > node.num_inputs())
    return invalid_argument("node %s: its compute reads x%d, but the node has %d inputs", label.c_str(), reads - 1,
                            node.num_inputs());
  for (int i = 0; i < node.num_inputs(); ++i)
    if (!node.input(static_cast<size_t>(i)))
      return invalid_argument("node %s: input %d is omitted; every input is required", label.c_str(), i);
  return e;
}

Status infer_dsl_elementwise(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_RETURN_IF_ERROR(checked_compute(node).status());
  Shape out = Shape(std::vector<Dim>());
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const ir::TensorType& t = ctx.input_type(i);
    if (t.dtype != DataType::kFloat32 && t.dtype != DataType::kUndefined)
      return invalid_argument("node %s: input %d is %s; custom element-wise ops take float32", node.label().c_str(),
                              i, dtype_name(t.dtype));
    if (!t.shape.has_rank()) {
      ctx.set_output(0, DataType::kFloat32, Shape::unknown_rank());
      return ok_status();
    }
    KILN_ASSIGN_OR_RETURN(out, broadcast_shapes(node, out, t.shape));
  }
  ctx.set_output(0, DataType::kFloat32, std::move(out));
  return ok_status();
}

}  // namespace

// The reference of a custom element-wise op: `e` (attributes bound) per element of the
// NumPy broadcast of the node's float32 inputs. Shared with the plugin-registered schemas
// (compiler/custom_op_plugin.cc), which run it before the rewrite.
Status run_custom_elementwise(KernelContext& ctx, const CustomExpr& e) {
  const ir::Node& node = ctx.node();
  const int n = ctx.num_inputs();
  std::vector<const float*> data;
  std::vector<int64_t> dims;
  for (int i = 0; i < n; ++i) {
    const Tensor* t = ctx.input(i);
    if (!t || t->dtype() != DataType::kFloat32)
      return invalid_argument("node %s: input %d must be a float32 tensor", node.label().c_str(), i);
    KILN_ASSIGN_OR_RETURN(dims, broadcast_dims(node, dims, t->dims()));
    data.push_back(t->data<float>());
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, dims, TensorInit::kUninitialized));
  std::vector<std::vector<int64_t>> strides;
  for (int i = 0; i < n; ++i) strides.push_back(broadcast_strides(ctx.input(i)->dims(), dims));
  const int rank = static_cast<int>(dims.size());
  const int64_t total = num_elements(dims);
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0), off(static_cast<size_t>(n), 0);
  std::vector<float> x(static_cast<size_t>(std::max(n, 1)), 0.f);
  float* out = y->data<float>();
  for (int64_t o = 0; o < total; ++o) {
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = data[static_cast<size_t>(i)][off[static_cast<size_t>(i)]];
    out[o] = eval_custom_expr(e, x.data());
    for (int d = rank - 1; d >= 0; --d) {
      const size_t du = static_cast<size_t>(d);
      if (++idx[du] < dims[du]) {
        for (int i = 0; i < n; ++i) off[static_cast<size_t>(i)] += strides[static_cast<size_t>(i)][du];
        break;
      }
      for (int i = 0; i < n; ++i) off[static_cast<size_t>(i)] -= strides[static_cast<size_t>(i)][du] * (dims[du] - 1);
      idx[du] = 0;
    }
  }
  return ok_status();
}

std::string custom_op_pattern_note(const std::vector<ir::Node*>& nodes) {
  std::string names;
  for (const ir::Node* n : nodes)
    if (n->domain() == kKilnDomain && n->op_type() == "DslElementwise") {
      const std::string name = n->attr_string("custom_op", "custom");
      if (names.find(name) == std::string::npos) names += (names.empty() ? "" : ", ") + name;
    }
  return names.empty() ? "" : " (custom " + names + ")";
}

namespace {

Status dsl_elementwise_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(CustomExpr e, checked_compute(ctx.node()));
  return run_custom_elementwise(ctx, e);
}

}  // namespace

KILN_REGISTER_OP(OpSchema("DslElementwise", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, 8)
                     .outputs(1, 1)
                     .required_attr("compute", AttrKind::kString)
                     .attr("custom_op", AttrKind::kString)
                     .attr("dsl_split", AttrKind::kInt)  // tuned schedule (docs/dsl.md): 0 = default
                     .infer(infer_dsl_elementwise)
                     .kernel(dsl_elementwise_kernel)
                     .doc("A custom op's element-wise compute from a plugin's DSL definition (docs/dsl.md)"));

}  // namespace kiln::ops
