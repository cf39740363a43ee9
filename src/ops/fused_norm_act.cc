// Kiln's fused LayerNorm, Gelu and HardSwish (domain kiln, docs/fused-ops.md): schemas,
// inference and reference kernels. LayerNorm is ONNX LayerNormalization's first output
// (its reference kernel runs on the fused node); Gelu and HardSwish use the formulas of
// the fused-activation table, which are those of the ONNX ops.
#include <string>
#include <vector>

#include "ops/fused_activation.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

Status check_float_dtype(const ir::Node& node, DataType t, const char* what) {
  if (t == DataType::kUndefined || t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
      t == DataType::kBFloat16)
    return ok_status();
  return invalid_argument("node %s: %s has dtype %s; float32, float64, float16 or bfloat16 expected",
                          node.label().c_str(), what, dtype_name(t));
}

// ---- LayerNorm ---------------------------------------------------------------------------

Status infer_layer_norm(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const ir::TensorType& xt = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_float_dtype(node, xt.dtype, "input X"));
  const char* names[3] = {"X", "Scale", "Bias"};
  for (int i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    const ir::TensorType& t = ctx.input_type(i);
    KILN_RETURN_IF_ERROR(check_float_dtype(node, t.dtype, names[i]));
    if (t.dtype != DataType::kUndefined && xt.dtype != DataType::kUndefined && t.dtype != xt.dtype)
      return invalid_argument("node %s: %s has dtype %s, X has %s", node.label().c_str(), names[i], dtype_name(t.dtype),
                              dtype_name(xt.dtype));
    if (!xt.shape.has_rank() || !t.shape.has_rank()) continue;
    // Scale and Bias broadcast (right-aligned) to the normalised dims X[axis:].
    KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -1), xt.shape.rank()));
    const int norm_rank = xt.shape.rank() - axis;
    bool fits = t.shape.rank() <= norm_rank;
    for (int d = 0; fits && d < t.shape.rank(); ++d) {
      const Dim& td = t.shape[d];
      const Dim& xd = xt.shape[xt.shape.rank() - t.shape.rank() + d];
      if (td.is_static() && xd.is_static() && td.value != 1 && td.value != xd.value) fits = false;
    }
    if (!fits)
      return invalid_argument("node %s: %s %s does not broadcast to the normalised dims of X %s (axis %lld)",
                              node.label().c_str(), names[i], t.shape.to_string().c_str(), xt.shape.to_string().c_str(),
                              (long long)node.attr_int("axis", -1));
  }
  if (xt.shape.has_rank())
    KILN_RETURN_IF_ERROR(normalize_axis(node, node.attr_int("axis", -1), xt.shape.rank()).status());
  ctx.set_output(0, xt.dtype, xt.shape);
  return ok_status();
}

Status layer_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  if (!ctx.input(0) || !ctx.input(1))
    return invalid_argument("node %s: inputs X and Scale are required", node.label().c_str());
  KILN_RETURN_IF_ERROR(check_float_input(node, *ctx.input(0), "input X", 1));
  KILN_ASSIGN_OR_RETURN(Tensor y, run_onnx_reference(ctx, "LayerNormalization", 3));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

// ---- Gelu and HardSwish ----------------------------------------------------------------------

Status infer_float_unary(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_float_dtype(ctx.node(), xt.dtype, "input X"));
  ctx.set_output(0, xt.dtype, xt.shape);
  return ok_status();
}

Expected<FusedActivation> gelu_activation(const ir::Node& node) {
  const std::string a = node.attr_string("approximate", "none");
  if (a != "none" && a != "tanh")
    return invalid_argument("node %s: approximate must be \"none\" or \"tanh\", got \"%s\"", node.label().c_str(),
                            a.c_str());
  FusedActivation act;
  act.kind = a == "tanh" ? FusedActivationKind::kGeluTanh : FusedActivationKind::kGelu;
  return act;
}

Expected<FusedActivation> hard_swish_activation(const ir::Node& node) {
  FusedActivation act;
  act.kind = FusedActivationKind::kHardSwish;
  act.p0 = node.attr_float("alpha", 1.0f / 6.0f);
  act.p1 = node.attr_float("beta", 0.5f);
  return act;
}

template <Expected<FusedActivation> (*kRead)(const ir::Node&)>
Status infer_unary_act(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(kRead(ctx.node()).status());
  return infer_float_unary(ctx);
}

template <Expected<FusedActivation> (*kRead)(const ir::Node&)>
Status unary_act_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, kRead(node));
  if (!ctx.input(0)) return invalid_argument("node %s: input X is missing", node.label().c_str());
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 0));
  Tensor y = x.clone();
  KILN_RETURN_IF_ERROR(apply_fused_activation(node, act, y));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("LayerNorm", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .attr("axis", AttrKind::kInt)
                     .attr("epsilon", AttrKind::kFloat)
                     .infer(infer_layer_norm)
                     .kernel(with_half_as_float(layer_norm_kernel))
                     .doc("ONNX LayerNormalization's Y (docs/fused-ops.md)"));
KILN_REGISTER_OP(OpSchema("Gelu", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("approximate", AttrKind::kString)
                     .infer(infer_unary_act<gelu_activation>)
                     .kernel(with_half_as_float(unary_act_kernel<gelu_activation>))
                     .doc("GELU, erf or tanh form (docs/fused-ops.md)"));
KILN_REGISTER_OP(OpSchema("HardSwish", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("alpha", AttrKind::kFloat)
                     .attr("beta", AttrKind::kFloat)
                     .infer(infer_unary_act<hard_swish_activation>)
                     .kernel(with_half_as_float(unary_act_kernel<hard_swish_activation>))
                     .doc("X * HardSigmoid(X; alpha, beta) (docs/fused-ops.md)"));

}  // namespace kiln::ops
