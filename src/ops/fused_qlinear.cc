// Kiln's quantised fused ops (domain kiln, docs/quantization.md), made by the qdq_folding
// pass so that an int8 kernel computes a whole QDQ chain with its epilogue:
//
// FusedQLinearConv: ONNX QLinearConv whose quantised output also carries a Relu or a Clip,
//   from DequantizeLinear(x) -> Conv(., DequantizeLinear(w), b) -> Relu|Clip -> QuantizeLinear.
// FusedQLinearMatMul: QLinearMatMul with an int32 bias over N (at scale a_scale * b_scale[n]),
//   the same activations, and a float32 output when y_scale / y_zero_point are absent (a
//   product whose consumers are float: its DequantizeLinear folded in), from
//   DequantizeLinear(a) -> MatMul|Gemm(., DequantizeLinear(b)) [+ bias] [-> Relu|Clip] [-> Q].
//
// FusedQLinearConv's X and Y may be stored channels-last (x_format / y_format "NC1HWC0" with
// one block of all channels, C0 = C: [N, 1, H, W, C], NHWC's bytes), the layout of oneDNN's
// int8 kernels, which the int8_layout pass keeps between int8 operators.
//
// The activation needs no float step: quantisation is monotonic, so
//   Q(relu(v))       = max(Q(v), Q(0))          = max(Q(v), y_zero_point)
//   Q(clip(v, a, b)) = clamp(Q(v), Q(a), Q(b))
// exactly. The reference kernel is therefore QLinearConv's followed by that clamp.
//
// FusedQLinearConv with a residual (inputs 9..13: R, R_scale, R_zero_point, C_scale,
// C_zero_point; made by the qlinear_residual_fusion pass from a convolution whose quantised
// output C only a FusedQLinearAdd reads) adds R in the epilogue:
//
//   v = (acc + B[c]) * x_scale * w_scale[c]                     the convolution, unrounded
//   u = clamp(v, (C_min - C_zero_point) C_scale, (C_max - C_zero_point) C_scale)
//   y = saturate(round_half_even(act(u + (R - R_zero_point) R_scale) / y_scale) + y_zero_point)
//
// C_min, C_max: the range of C_zero_point's dtype. The QDQ graph rounds v to a multiple of
// C_scale before the addition; this does not (only C's saturation is kept), so y differs from
// the graph's by at most one step when C_scale < 2 y_scale (docs/quantization.md derives it;
// the pass fuses only then). R has Y's shape and layout.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/lowp.h"
#include "ops/elementwise_common.h"
#include "ops/fused_activation.h"
#include "ops/layout.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// The activation of a FusedQLinearConv: none, Relu, or Clip with finite bounds.
Expected<FusedActivation> quantised_activation(const ir::Node& node) {
  const std::string& op = node.op_type();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, parse_fused_activation(node));
  const bool ok = act.is_none() || act.kind == FusedActivationKind::kRelu ||
                  (act.kind == FusedActivationKind::kClip && act.p0 <= act.p1);
  if (!ok || act.has_post_affine())
    return invalid_argument("node %s: %s takes no activation, Relu or Clip(lo <= hi), got '%s'", node.label().c_str(),
                            op.c_str(), node.attr_string("activation", "").c_str());
  return act;
}

// The channel blocks of X (input 0) and Y: 0 when plain, else the whole channel count (of X's
// blocked shape [N, 1, H, W, C], and W's output channels for Y).
struct ChannelsLast {
  int64_t x_c0 = 0, y_c0 = 0;
};

Expected<ChannelsLast> channels_last(const ir::Node& node, const Shape& x, const Shape& w) {
  ChannelsLast c;
  for (const char* attr : {"x_format", "y_format"}) {
    const std::string f = node.attr_string(attr, kFormatPlain);
    if (!valid_format(f))
      return invalid_argument("node %s: %s '%s': expected %s or %s", node.label().c_str(), attr, f.c_str(), kFormatPlain,
                              kFormatBlocked);
    if (!is_blocked_format(f)) continue;
    const bool is_x = attr[0] == 'x';
    const Shape& s = is_x ? x : w;
    const Dim d = !s.has_rank() ? Dim() : is_x ? (s.rank() == 5 ? s[4] : Dim()) : (s.rank() >= 1 ? s[0] : Dim());
    if (!d.is_static() || d.value <= 0)
      return invalid_argument("node %s: %s %s needs a known channel count (%s)", node.label().c_str(), attr, f.c_str(),
                              is_x ? "X [N, 1, H, W, C]" : "W's first dim");
    (is_x ? c.x_c0 : c.y_c0) = d.value;
  }
  return c;
}

constexpr int kResidual = 9, kResidualScale = 10, kResidualZeroPoint = 11, kConvScale = 12, kConvZeroPoint = 13;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

// Inputs 9..13 all present or all absent; R int8 / uint8 with Y's shape (and layout), the
// zero points of their operands' dtypes. Called after Y's type is inferred.
Status check_residual_types(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  int present = 0;
  for (int i = kResidual; i <= kConvZeroPoint; ++i) present += ctx.has_input(i) ? 1 : 0;
  if (present == 0) return ok_status();
  if (present != 5)
    return invalid_argument("node %s: a residual takes inputs 9..13 (R, R_scale, R_zero_point, C_scale, C_zero_point)",
                            node.label().c_str());
  const ir::TensorType& r = ctx.input_type(kResidual);
  const ir::TensorType& y = ctx.output(0);
  if (r.dtype == DataType::kUndefined || y.dtype == DataType::kUndefined) return ok_status();
  if (!is_x8(r.dtype) || ctx.input_type(kResidualZeroPoint).dtype != r.dtype ||
      !is_x8(ctx.input_type(kConvZeroPoint).dtype))
    return invalid_argument("node %s: R and the zero points of R and C must be int8 or uint8, R's zero point R's dtype",
                            node.label().c_str());
  if (r.shape.has_rank() && y.shape.has_rank() && r.shape.is_static() && y.shape.is_static() &&
      r.shape.static_dims() != y.shape.static_dims())
    return invalid_argument("node %s: R %s must have Y's shape %s", node.label().c_str(), r.shape.to_string().c_str(),
                            y.shape.to_string().c_str());
  return ok_status();
}

Status infer_fused_qlinear_conv(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(quantised_activation(ctx.node()).status());
  KILN_ASSIGN_OR_RETURN(ChannelsLast c, channels_last(ctx.node(), ctx.input_type(0).shape, ctx.input_type(3).shape));
  if (!c.x_c0 && !c.y_c0) {
    KILN_RETURN_IF_ERROR(run_onnx_inference(ctx, "QLinearConv"));
  } else {
    KILN_RETURN_IF_ERROR(infer_on_plain_view(ctx, {c.x_c0}, c.y_c0, [](InferContext& inner) {
      return run_onnx_inference(inner, "QLinearConv");
    }));
  }
  return check_residual_types(ctx);
}

// Q(v) for the output's scale and zero point, saturated to T.
template <typename T>
T quantise(double v, double scale, double zero_point) {
  const double q = std::nearbyint(v / scale) + zero_point;
  return static_cast<T>(std::clamp(q, double(std::numeric_limits<T>::lowest()), double(std::numeric_limits<T>::max())));
}

// Clamps the quantised `y` (of y_scale, y_zero_point) to the activation's quantised bounds.
void clamp_to_activation(const FusedActivation& act, double y_scale, double y_zero_point, Tensor& y) {
  if (act.is_none()) return;
  const bool clip = act.kind == FusedActivationKind::kClip;
  dispatch_numeric(y.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      const T lo = quantise<T>(clip ? act.p0 : 0.0, y_scale, y_zero_point);
      const T hi = clip ? quantise<T>(act.p1, y_scale, y_zero_point) : std::numeric_limits<T>::max();
      T* p = y.data<T>();
      for (int64_t i = 0; i < y.num_elements(); ++i) p[i] = std::clamp(p[i], lo, hi);
    }
  });
}

double scalar(const Tensor& t) { return lowp_to_double(t.dtype(), t.raw_data(), 0); }

Status fused_qlinear_conv_plain(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(FusedActivation act, quantised_activation(ctx.node()));
  KILN_ASSIGN_OR_RETURN(Tensor y, run_onnx_reference(ctx, "QLinearConv", ctx.num_inputs()));
  // QLinearConv's kernel has checked y_scale and y_zero_point (scalars, int8 / uint8).
  clamp_to_activation(act, scalar(*ctx.input(6)), scalar(*ctx.input(7)), y);
  ctx.set_output(0, std::move(y));
  return ok_status();
}

// One scalar input of a residual convolution, checked: float32 for a scale, int8 / uint8 (of
// `dtype` unless undefined) for a zero point.
Expected<double> residual_scalar(const KernelContext& ctx, int i, bool scale, DataType dtype) {
  const Tensor* t = ctx.input(i);
  const bool ok = t && t->num_elements() == 1 &&
                  (scale ? t->dtype() == DataType::kFloat32
                         : is_x8(t->dtype()) && (dtype == DataType::kUndefined || t->dtype() == dtype));
  if (!ok)
    return invalid_argument("node %s: input %d must be one %s value, got %s", ctx.node().label().c_str(), i,
                            scale ? "float32" : "int8 / uint8", t ? t->description().c_str() : "nothing");
  return scalar(*t);
}

template <typename T>
double type_min() { return static_cast<double>(std::numeric_limits<T>::lowest()); }
template <typename T>
double type_max() { return static_cast<double>(std::numeric_limits<T>::max()); }

// The header's residual formula on plain tensors, in double from the exact int32 sums (the
// factors rounded to float32 as the fast kernel's and QLinearConv's reference round them).
Status fused_qlinear_conv_residual_plain(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, quantised_activation(node));
  for (int i : {0, 1, 3, 4, 6, 7, kResidual})
    if (!ctx.input(i)) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
  const Tensor& w_scale = *ctx.input(4);
  const Tensor& r = *ctx.input(kResidual);
  const Tensor* b = ctx.input(8);
  KILN_ASSIGN_OR_RETURN(double sx, residual_scalar(ctx, 1, true, DataType::kUndefined));
  KILN_ASSIGN_OR_RETURN(double sy, residual_scalar(ctx, 6, true, DataType::kUndefined));
  KILN_ASSIGN_OR_RETURN(double zy, residual_scalar(ctx, 7, false, DataType::kUndefined));
  KILN_ASSIGN_OR_RETURN(double sr, residual_scalar(ctx, kResidualScale, true, DataType::kUndefined));
  KILN_ASSIGN_OR_RETURN(double zr, residual_scalar(ctx, kResidualZeroPoint, false, r.dtype()));
  KILN_ASSIGN_OR_RETURN(double sc, residual_scalar(ctx, kConvScale, true, DataType::kUndefined));
  KILN_ASSIGN_OR_RETURN(double zc, residual_scalar(ctx, kConvZeroPoint, false, DataType::kUndefined));
  const DataType y_dtype = ctx.input(7)->dtype();
  const bool c_u8 = ctx.input(kConvZeroPoint)->dtype() == DataType::kUInt8;
  const double c_lo = ((c_u8 ? type_min<uint8_t>() : type_min<int8_t>()) - zc) * sc / sy;
  const double c_hi = ((c_u8 ? type_max<uint8_t>() : type_max<int8_t>()) - zc) * sc / sy;
  // The exact int32 sums (acc), as ConvInteger computes them.
  KILN_ASSIGN_OR_RETURN(Tensor acc, run_onnx_reference(ctx, "ConvInteger", 4,
                                                       {ctx.value(0), ctx.value(3), ctx.value(2), ctx.value(5)}));
  if (acc.dims() != r.dims())
    return invalid_argument("node %s: R %s must have Y's shape %s", node.label().c_str(), r.description().c_str(),
                            dims_to_string(acc.dims()).c_str());
  const int64_t channels = acc.dims()[1];
  const int64_t inner = acc.num_elements() / std::max<int64_t>(1, acc.dims()[0] * channels);
  if (w_scale.num_elements() != 1 && w_scale.num_elements() != channels)
    return invalid_argument("node %s: w_scale must be a scalar or have C_out values", node.label().c_str());
  if (b && (b->dtype() != DataType::kInt32 || b->num_elements() != channels))
    return invalid_argument("node %s: B must be int32 [C_out]", node.label().c_str());
  const double act_lo = act.kind == FusedActivationKind::kClip ? act.p0 / sy
                        : act.kind == FusedActivationKind::kRelu ? 0.0
                                                                 : -std::numeric_limits<double>::infinity();
  const double act_hi = act.kind == FusedActivationKind::kClip ? act.p1 / sy : std::numeric_limits<double>::infinity();
  Tensor y = Tensor::make(y_dtype, acc.dims());
  const int32_t* a = acc.data<int32_t>();
  dispatch_numeric(y_dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      T* py = y.data<T>();
      for (int64_t i = 0; i < acc.num_elements(); ++i) {
        const int64_t c = (i / inner) % channels;
        const double sw = lowp_to_double(w_scale.dtype(), w_scale.raw_data(), w_scale.num_elements() == 1 ? 0 : c);
        const double ratio = static_cast<float>(static_cast<double>(static_cast<float>(sx * sw)) / sy);
        const double v = (static_cast<double>(a[i]) + (b ? b->data<int32_t>()[c] : 0)) * ratio;
        const double rq = lowp_to_double(r.dtype(), r.raw_data(), i);
        const double t = std::clamp(std::clamp(v, c_lo, c_hi) + (rq - zr) * sr / sy, act_lo, act_hi);
        py[i] = static_cast<T>(std::clamp(std::nearbyint(t) + zy, type_min<T>(), type_max<T>()));
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return ok_status();
}

Status fused_qlinear_conv_kernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(3);
  if (!x || !w) return invalid_argument("node %s: X and W are required", ctx.node().label().c_str());
  KILN_ASSIGN_OR_RETURN(ChannelsLast c, channels_last(ctx.node(), x->shape(), w->shape()));
  const bool residual = ctx.num_inputs() > kResidual && ctx.input(kResidual);
  const KernelFn plain = residual ? KernelFn(fused_qlinear_conv_residual_plain) : KernelFn(fused_qlinear_conv_plain);
  if (!c.x_c0 && !c.y_c0) return plain(ctx);
  // R is laid out as Y.
  std::vector<int64_t> input_c0{c.x_c0};
  if (residual) {
    input_c0.resize(kResidual + 1, 0);
    input_c0[kResidual] = c.y_c0;
  }
  return run_on_plain_view(ctx, input_c0, c.y_c0, plain);
}

// ---- FusedQLinearMatMul -----------------------------------------------------------------

// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, bias.
// a per tensor, b 2-D [K, N] per tensor or per column; y_scale / y_zero_point both present
// (quantised output) or both absent (float32 output).
Status check_fused_qlinear_matmul(const ir::Node& node, const std::vector<int64_t>* b_dims,
                                  const Tensor* b_scale, const Tensor* bias) {
  if (b_dims && b_dims->size() != 2)
    return invalid_argument("node %s: FusedQLinearMatMul takes a 2-D b, got %s", node.label().c_str(),
                            dims_to_string(*b_dims).c_str());
  const int64_t n = b_dims ? (*b_dims)[1] : -1;
  if (b_scale && n >= 0 && b_scale->num_elements() != 1 && b_scale->num_elements() != n)
    return invalid_argument("node %s: b_scale %s must be a scalar or have N = %lld values", node.label().c_str(),
                            b_scale->description().c_str(), (long long)n);
  if (bias && (bias->dtype() != DataType::kInt32 || (n >= 0 && bias->num_elements() != n)))
    return invalid_argument("node %s: bias must be int32 with N values, got %s", node.label().c_str(),
                            bias->description().c_str());
  return ok_status();
}

Status infer_fused_qlinear_matmul(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_RETURN_IF_ERROR(quantised_activation(node).status());
  const bool quantised_y = ctx.has_input(7);
  if (ctx.has_input(6) != ctx.has_input(7))
    return invalid_argument("node %s: y_scale and y_zero_point come together", node.label().c_str());
  if (!ctx.has_input(0) || !ctx.has_input(3))
    return invalid_argument("node %s: a and b are required", node.label().c_str());
  const Shape& a = ctx.input_type(0).shape;
  const Shape& b = ctx.input_type(3).shape;
  if (b.has_rank() && b.rank() != 2)
    return invalid_argument("node %s: FusedQLinearMatMul takes a 2-D b, got %s", node.label().c_str(),
                            b.to_string().c_str());
  Shape out = Shape::unknown_rank();
  if (a.has_rank() && a.rank() >= 1 && b.has_rank()) {
    std::vector<Dim> dims = a.dims();
    dims.back() = b[1];
    out = Shape(dims);
  }
  ctx.set_output(0, quantised_y ? ctx.input_type(7).dtype : DataType::kFloat32, out);
  return ok_status();
}

Status fused_qlinear_matmul_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, quantised_activation(node));
  for (int i : {0, 1, 3, 4})
    if (!ctx.input(i)) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
  const Tensor& a_scale = *ctx.input(1);
  const Tensor& b = *ctx.input(3);
  const Tensor& b_scale = *ctx.input(4);
  const Tensor* y_scale = ctx.input(6);
  const Tensor* y_zp = ctx.input(7);
  const Tensor* bias = ctx.input(8);
  if (!y_scale != !y_zp) return invalid_argument("node %s: y_scale and y_zero_point come together", node.label().c_str());
  KILN_RETURN_IF_ERROR(check_fused_qlinear_matmul(node, &b.dims(), &b_scale, bias));
  if (a_scale.num_elements() != 1 || (y_scale && (y_scale->num_elements() != 1 || y_zp->num_elements() != 1)))
    return invalid_argument("node %s: a and y are quantised per tensor", node.label().c_str());
  // The exact int32 products, as MatMulInteger computes them.
  KILN_ASSIGN_OR_RETURN(Tensor acc, run_onnx_reference(ctx, "MatMulInteger", 4,
                                                       {ctx.value(0), ctx.value(3), ctx.value(2), ctx.value(5)}));
  const int64_t n = b.dims()[1];
  const double sa = scalar(a_scale);
  const DataType st = a_scale.dtype();
  auto acc_scale = [&](int64_t col) {  // float32(sa * sb[col]), as QLinearMatMul rounds it
    const double sb = lowp_to_double(b_scale.dtype(), b_scale.raw_data(), b_scale.num_elements() == 1 ? 0 : col);
    return st == DataType::kFloat32 ? static_cast<double>(static_cast<float>(sa * sb)) : sa * sb;
  };
  const int32_t* c = acc.data<int32_t>();
  auto value = [&](int64_t i) {
    const int64_t col = i % n;
    return static_cast<double>(static_cast<int64_t>(c[i]) + (bias ? bias->data<int32_t>()[col] : 0));
  };
  if (!y_scale) {
    Tensor y = Tensor::make(DataType::kFloat32, acc.dims());
    float* py = y.data<float>();
    for (int64_t i = 0; i < y.num_elements(); ++i) py[i] = static_cast<float>(value(i) * acc_scale(i % n));
    apply_fused_activation(act, py, y.num_elements());
    ctx.set_output(0, std::move(y));
    return ok_status();
  }
  const double sy = scalar(*y_scale), zy = scalar(*y_zp);
  Tensor y = Tensor::make(y_zp->dtype(), acc.dims());
  Status st_ok = ok_status();
  dispatch_numeric(y.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      T* py = y.data<T>();
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        const double ratio = st == DataType::kFloat32 ? static_cast<double>(static_cast<float>(acc_scale(i % n) / sy))
                                                      : acc_scale(i % n) / sy;
        const double q = std::nearbyint(value(i) * ratio) + zy;
        py[i] = static_cast<T>(std::clamp(q, double(std::numeric_limits<T>::lowest()), double(std::numeric_limits<T>::max())));
      }
    } else {
      st_ok = invalid_argument("node %s: y_zero_point must be int8 or uint8", node.label().c_str());
    }
  });
  KILN_RETURN_IF_ERROR(st_ok);
  clamp_to_activation(act, sy, zy, y);
  ctx.set_output(0, std::move(y));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("FusedQLinearMatMul", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(6, 9)
                     .outputs(1, 1)
                     .attr("activation", AttrKind::kString)
                     .attr("activation_params", AttrKind::kFloats)
                     .infer(infer_fused_qlinear_matmul)
                     .kernel(fused_qlinear_matmul_kernel)
                     .doc("y = act(QLinearMatMul(...) + bias), quantised or float32 (docs/quantization.md)"));

// Inputs as QLinearConv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
// y_zero_point, B; then optionally R, R_scale, R_zero_point, C_scale, C_zero_point (a residual
// added in the epilogue, see the header; B may then be absent, an empty input 8).
KILN_REGISTER_OP(OpSchema("FusedQLinearConv", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(8, 14)
                     .outputs(1, 1)
                     .attr("auto_pad", AttrKind::kString)
                     .attr("dilations", AttrKind::kInts)
                     .attr("group", AttrKind::kInt)
                     .attr("kernel_shape", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .attr("activation", AttrKind::kString)
                     .attr("activation_params", AttrKind::kFloats)
                     .attr("x_format", AttrKind::kString)
                     .attr("y_format", AttrKind::kString)
                     .infer(infer_fused_qlinear_conv)
                     .kernel(fused_qlinear_conv_kernel)
                     .doc("y = clamp(QLinearConv(...)) at the quantised Relu / Clip bounds, or with a residual "
                          "y = Q(act(clamp_C(conv) + DQ(R))) (docs/quantization.md)"));

}  // namespace kiln::ops
