// Kiln's FusedQLinearConv (domain kiln, docs/quantization.md): ONNX QLinearConv whose
// quantised output also carries a Relu or a Clip. The qdq_folding pass makes it from
//   DequantizeLinear(x) -> Conv(., DequantizeLinear(w), b) -> Relu|Clip -> QuantizeLinear
// so an int8 kernel computes the whole chain with the activation in its epilogue.
//
// The activation needs no float step: quantisation is monotonic, so
//   Q(relu(v))       = max(Q(v), Q(0))          = max(Q(v), y_zero_point)
//   Q(clip(v, a, b)) = clamp(Q(v), Q(a), Q(b))
// exactly. The reference kernel is therefore QLinearConv's followed by that clamp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/lowp.h"
#include "ops/elementwise_common.h"
#include "ops/fused_activation.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// The activation of a FusedQLinearConv: none, Relu, or Clip with finite bounds.
Expected<FusedActivation> quantised_activation(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(FusedActivation act, parse_fused_activation(node));
  const bool ok = act.is_none() || act.kind == FusedActivationKind::kRelu ||
                  (act.kind == FusedActivationKind::kClip && act.p0 <= act.p1);
  if (!ok || act.has_post_affine())
    return invalid_argument("node %s: FusedQLinearConv takes no activation, Relu or Clip(lo <= hi), got '%s'",
                            node.label().c_str(), node.attr_string("activation", "").c_str());
  return act;
}

Status infer_fused_qlinear_conv(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(quantised_activation(ctx.node()).status());
  return run_onnx_inference(ctx, "QLinearConv");
}

// Q(v) for the output's scale and zero point, saturated to T.
template <typename T>
T quantise(double v, double scale, double zero_point) {
  const double q = std::nearbyint(v / scale) + zero_point;
  return static_cast<T>(std::clamp(q, double(std::numeric_limits<T>::lowest()), double(std::numeric_limits<T>::max())));
}

Status fused_qlinear_conv_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, quantised_activation(node));
  KILN_ASSIGN_OR_RETURN(Tensor y, run_onnx_reference(ctx, "QLinearConv", ctx.num_inputs()));
  if (act.is_none()) {
    ctx.set_output(0, std::move(y));
    return ok_status();
  }
  // QLinearConv's kernel has checked y_scale and y_zero_point (scalars, int8 / uint8).
  const Tensor& ys = *ctx.input(6);
  const Tensor& yz = *ctx.input(7);
  const double scale = lowp_to_double(ys.dtype(), ys.raw_data(), 0);
  const double zp = lowp_to_double(yz.dtype(), yz.raw_data(), 0);
  const bool clip = act.kind == FusedActivationKind::kClip;
  dispatch_numeric(y.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      const T lo = clip ? quantise<T>(act.p0, scale, zp) : quantise<T>(0.0, scale, zp);
      const T hi = clip ? quantise<T>(act.p1, scale, zp) : std::numeric_limits<T>::max();
      T* p = y.data<T>();
      for (int64_t i = 0; i < y.num_elements(); ++i) p[i] = std::clamp(p[i], lo, hi);
    }
  });
  ctx.set_output(0, std::move(y));
  return ok_status();
}

}  // namespace

// Inputs as QLinearConv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
// y_zero_point, B.
KILN_REGISTER_OP(OpSchema("FusedQLinearConv", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(8, 9)
                     .outputs(1, 1)
                     .attr("auto_pad", AttrKind::kString)
                     .attr("dilations", AttrKind::kInts)
                     .attr("group", AttrKind::kInt)
                     .attr("kernel_shape", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .attr("activation", AttrKind::kString)
                     .attr("activation_params", AttrKind::kFloats)
                     .infer(infer_fused_qlinear_conv)
                     .kernel(fused_qlinear_conv_kernel)
                     .doc("y = clamp(QLinearConv(...)) at the quantised Relu / Clip bounds (docs/quantization.md)"));

}  // namespace kiln::ops
