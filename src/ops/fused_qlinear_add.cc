// kiln FusedQLinearAdd (domain kiln, docs/quantization.md): the residual Add of a quantised
// network with its quantised output, made by the qdq_folding pass from
//
//   DequantizeLinear(A), DequantizeLinear(B) -> Add [-> Relu | Clip] -> QuantizeLinear
//
// Inputs, in the order of com.microsoft QLinearAdd:
//   0 A             uint8 or int8, any shape
//   1 A_scale       float32, one value (per tensor)
//   2 A_zero_point  A's dtype, one value; optional (0)
//   3 B             A's dtype, NumPy-broadcastable with A
//   4 B_scale       float32, one value
//   5 B_zero_point  A's dtype, one value; optional (0)
//   6 C_scale       float32, one value
//   7 C_zero_point  A's dtype, one value; optional (0)
// Attributes: `activation` ("" | "Relu" | "Clip") and `activation_params` (Clip's lo, hi),
// as every fused op reads them (ops/fused_activation.h).
// Output C: A's dtype, the broadcast shape of A and B.
//
// What it computes is what the unfused float graph computes, each step in float32:
//
//   fa = float32((A - A_zero_point) * A_scale)         DequantizeLinear (one rounding)
//   fb = float32((B - B_zero_point) * B_scale)
//   s  = act(fa + fb)                                  Add in float32, then Relu / Clip
//   C  = saturate(round_half_to_even(s / C_scale) + C_zero_point)   QuantizeLinear
//
// QuantizeLinear divides by C_scale (it does not multiply by a reciprocal), and a NaN
// (possible only from non-finite scales) quantises to the type's lowest value, as the
// QuantizeLinear reference does. The products are formed in double, where they are exact
// (an integer of 9 bits times a float32), and rounded once to float32: written as float32
// products they would let the compiler contract one of them with the sum into an FMA,
// which the float graph does not do.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/lowp.h"
#include "ops/elementwise_common.h"
#include "ops/fused_activation.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

constexpr int kA = 0, kAScale = 1, kAZeroPoint = 2, kB = 3, kBScale = 4, kBZeroPoint = 5, kCScale = 6,
              kCZeroPoint = 7;

// None, Relu or Clip, without a post-affine; error naming the node otherwise.
Expected<FusedActivation> add_activation(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(FusedActivation act, parse_fused_activation(node));
  const FusedActivationKind k = act.kind;
  if ((k != FusedActivationKind::kNone && k != FusedActivationKind::kRelu && k != FusedActivationKind::kClip) ||
      act.has_post_affine())
    return invalid_argument("node %s: FusedQLinearAdd takes no activation, Relu or Clip, got '%s'",
                            node.label().c_str(), node.attr_string("activation", "").c_str());
  return act;
}

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

Status infer_fused_qlinear_add(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_RETURN_IF_ERROR(add_activation(node).status());
  for (int i : {kA, kAScale, kB, kBScale, kCScale})
    if (!ctx.has_input(i)) return invalid_argument("node %s: input %d is required", node.label().c_str(), i);
  const ir::TensorType& a = ctx.input_type(kA);
  const ir::TensorType& b = ctx.input_type(kB);
  if (a.dtype == DataType::kUndefined) return ok_status();
  if (!is_x8(a.dtype) || (b.dtype != DataType::kUndefined && b.dtype != a.dtype))
    return invalid_argument("node %s: A and B must both be uint8 or both int8, got %s and %s", node.label().c_str(),
                            dtype_name(a.dtype), dtype_name(b.dtype));
  for (int i : {kAZeroPoint, kBZeroPoint, kCZeroPoint})
    if (ctx.has_input(i) && ctx.input_type(i).dtype != DataType::kUndefined && ctx.input_type(i).dtype != a.dtype)
      return invalid_argument("node %s: zero point (input %d) must be %s, got %s", node.label().c_str(), i,
                              dtype_name(a.dtype), dtype_name(ctx.input_type(i).dtype));
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(node, a.shape, b.shape));
  ctx.set_output(0, a.dtype, shape);
  return ok_status();
}

// One operand's per-tensor quantisation, checked: a float32 scale and an optional zero
// point of dtype `t`, one element each.
struct QuantParams {
  double scale = 1;
  int32_t zero_point = 0;
};

Expected<QuantParams> quant_params(const KernelContext& ctx, int scale_input, int zp_input, DataType t) {
  const ir::Node& node = ctx.node();
  const Tensor* s = ctx.input(scale_input);
  const Tensor* z = ctx.input(zp_input);
  if (!s || s->dtype() != DataType::kFloat32 || s->num_elements() != 1)
    return invalid_argument("node %s: input %d (a scale) must be one float32 value, got %s", node.label().c_str(),
                            scale_input, s ? s->description().c_str() : "nothing");
  if (z && (z->dtype() != t || z->num_elements() != 1))
    return invalid_argument("node %s: input %d (a zero point) must be one %s value, got %s", node.label().c_str(),
                            zp_input, dtype_name(t), z->description().c_str());
  QuantParams q;
  q.scale = *s->data<float>();
  q.zero_point = z ? static_cast<int32_t>(z->element_as_int64(0)) : 0;
  return q;
}

// C for one pair of quantised elements (the formula of the header).
template <typename T>
struct QAddElement {
  QuantParams a, b, c;
  FusedActivation act;

  T operator()(T qa, T qb) const {
    const float fa = static_cast<float>(static_cast<double>(static_cast<int32_t>(qa) - a.zero_point) * a.scale);
    const float fb = static_cast<float>(static_cast<double>(static_cast<int32_t>(qb) - b.zero_point) * b.scale);
    const float s = fused_activation_value<float>(act, fa + fb);
    const float v = s / static_cast<float>(c.scale);
    constexpr double lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if (std::isnan(v)) return static_cast<T>(lo);
    return static_cast<T>(std::clamp(std::nearbyint(static_cast<double>(v)) + c.zero_point, lo, hi));
  }
};

Status fused_qlinear_add_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, add_activation(node));
  const Tensor* a = ctx.input(kA);
  const Tensor* b = ctx.input(kB);
  if (!a || !b) return invalid_argument("node %s: A and B are required", node.label().c_str());
  const DataType t = a->dtype();
  if (!is_x8(t) || b->dtype() != t)
    return invalid_argument("node %s: A and B must both be uint8 or both int8, got %s and %s", node.label().c_str(),
                            a->description().c_str(), b->description().c_str());
  KILN_ASSIGN_OR_RETURN(QuantParams qa, quant_params(ctx, kAScale, kAZeroPoint, t));
  KILN_ASSIGN_OR_RETURN(QuantParams qb, quant_params(ctx, kBScale, kBZeroPoint, t));
  KILN_ASSIGN_OR_RETURN(QuantParams qc, quant_params(ctx, kCScale, kCZeroPoint, t));
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {a->dims(), b->dims()}));
  KILN_ASSIGN_OR_RETURN(Tensor * c, ctx.allocate_output(0, t, plan.out_dims, TensorInit::kUninitialized));
  auto run = [&]<typename T>() {
    broadcast_binary(plan, a->data<T>(), b->data<T>(), c->data<T>(), QAddElement<T>{qa, qb, qc, act});
  };
  if (t == DataType::kUInt8)
    run.template operator()<uint8_t>();
  else
    run.template operator()<int8_t>();
  return ok_status();
}

}  // namespace

// The zero points are optional in the middle of the list, so the schema requires only A and
// A_scale; inference and the kernel name any other missing input.
KILN_REGISTER_OP(OpSchema("FusedQLinearAdd", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(2, 8)
                     .outputs(1, 1)
                     .attr("activation", AttrKind::kString)
                     .attr("activation_params", AttrKind::kFloats)
                     .infer(infer_fused_qlinear_add)
                     .kernel(fused_qlinear_add_kernel)
                     .doc("C = Q(act(DQ(A) + DQ(B))), each step in float32 as the QDQ graph (docs/quantization.md)"));

}  // namespace kiln::ops
