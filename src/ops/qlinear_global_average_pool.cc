// kiln QLinearGlobalAveragePool (domain kiln, docs/quantization.md): the global average pool
// of a quantised network on its int8 values, made by the qdq_folding pass from
//
//   DequantizeLinear(X) -> GlobalAveragePool -> QuantizeLinear
//
// Inputs, in the order of com.microsoft QLinearGlobalAveragePool:
//   0 X             uint8 or int8, [N, C, S...] (rank >= 3), or [N, 1, H, W, C] when x_format
//                   is NC1HWC0 (channels-last with one block of all channels, NHWC's bytes:
//                   what the int8_layout pass stores between int8 operators)
//   1 x_scale       float32, one value
//   2 x_zero_point  X's dtype, one value; optional (0)
//   3 y_scale       float32, one value
//   4 y_zero_point  X's dtype, one value; optional (0)
// Attribute x_format: NCHW (default) or NC1HWC0.
// Output Y: X's dtype, [N, C, 1...] (for a channels-last X [N, C, 1, 1]: the same bytes as
// NHWC's [N, 1, 1, C]).
//
// With P the number of positions and S[n, c] = sum_p (X[n, c, p] - x_zero_point), exact in
// int64:
//
//   Y = saturate(round_half_to_even(S * (x_scale / (P * y_scale))) + y_zero_point)
//
// the factor and the product in double. The QDQ graph computes the same mean in float32
// (each dequantised element rounded, the sum rounded) before it divides by y_scale; the two
// differ only where the mean lies within float32 rounding of a .5 tie: one step at most.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ops/layout.h"
#include "ops/op_util.h"
#include "ops/qlinear_global_average_pool.h"

namespace kiln::ops {

Expected<QGapShape> qgap_shape(const ir::Node& node, const std::vector<int64_t>& x_dims) {
  const std::string format = node.attr_string("x_format", kFormatPlain);
  if (!valid_format(format))
    return invalid_argument("node %s: x_format '%s', expected %s or %s", node.label().c_str(), format.c_str(),
                            kFormatPlain, kFormatBlocked);
  QGapShape s;
  s.channels_last = is_blocked_format(format);
  if (s.channels_last ? (x_dims.size() != 5 || x_dims[1] != 1) : x_dims.size() < 3)
    return invalid_argument("node %s: X %s: expected %s", node.label().c_str(), dims_to_string(x_dims).c_str(),
                            s.channels_last ? "[N, 1, H, W, C] (x_format NC1HWC0)" : "[N, C, S...] of rank >= 3");
  s.n = x_dims[0];
  s.c = s.channels_last ? x_dims[4] : x_dims[1];
  s.positions = 1;
  for (size_t i = 2; i < (s.channels_last ? 4 : x_dims.size()); ++i) s.positions *= x_dims[i];
  s.y_dims = {s.n, s.c};
  s.y_dims.resize(s.channels_last ? 4 : x_dims.size(), 1);
  return s;
}

Expected<QGapParams> qgap_params(const ir::Node& node, const Tensor* x_scale, const Tensor* x_zp,
                                 const Tensor* y_scale, const Tensor* y_zp, DataType x_dtype, int64_t positions) {
  for (const Tensor* s : {x_scale, y_scale})
    if (!s || s->dtype() != DataType::kFloat32 || s->num_elements() != 1)
      return invalid_argument("node %s: x_scale and y_scale must be one float32 value each, got %s",
                              node.label().c_str(), s ? s->description().c_str() : "nothing");
  for (const Tensor* z : {x_zp, y_zp})
    if (z && (z->dtype() != x_dtype || z->num_elements() != 1))
      return invalid_argument("node %s: zero points must be one %s value each, got %s", node.label().c_str(),
                              dtype_name(x_dtype), z->description().c_str());
  QGapParams p;
  p.x_zero_point = x_zp ? static_cast<int32_t>(x_zp->element_as_int64(0)) : 0;
  p.y_zero_point = y_zp ? static_cast<int32_t>(y_zp->element_as_int64(0)) : 0;
  p.factor = static_cast<double>(*x_scale->data<float>()) /
             (static_cast<double>(positions) * static_cast<double>(*y_scale->data<float>()));
  if (!std::isfinite(p.factor))
    return invalid_argument("node %s: x_scale / (positions * y_scale) is not finite", node.label().c_str());
  return p;
}

namespace {

using ir::AttrKind;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

Status infer_qlinear_global_average_pool(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  for (int i : {0, 1, 3})
    if (!ctx.has_input(i)) return invalid_argument("node %s: input %d is required", node.label().c_str(), i);
  const ir::TensorType& x = ctx.input_type(0);
  if (x.dtype != DataType::kUndefined && !is_x8(x.dtype))
    return invalid_argument("node %s: X must be uint8 or int8, got %s", node.label().c_str(), dtype_name(x.dtype));
  for (int i : {2, 4})
    if (ctx.has_input(i) && ctx.input_type(i).dtype != DataType::kUndefined && ctx.input_type(i).dtype != x.dtype)
      return invalid_argument("node %s: zero point (input %d) must be %s, got %s", node.label().c_str(), i,
                              dtype_name(x.dtype), dtype_name(ctx.input_type(i).dtype));
  const std::string format = node.attr_string("x_format", kFormatPlain);
  if (!valid_format(format))
    return invalid_argument("node %s: x_format '%s', expected %s or %s", node.label().c_str(), format.c_str(),
                            kFormatPlain, kFormatBlocked);
  if (!x.shape.has_rank()) {
    ctx.set_output(0, x.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const bool channels_last = is_blocked_format(format);
  const int rank = x.shape.rank();
  if (channels_last ? rank != 5 : rank < 3)
    return invalid_argument("node %s: X %s: expected %s", node.label().c_str(), x.shape.to_string().c_str(),
                            channels_last ? "[N, 1, H, W, C] (x_format NC1HWC0)" : "[N, C, S...] of rank >= 3");
  std::vector<Dim> dims{x.shape[0], channels_last ? x.shape[4] : x.shape[1]};
  dims.resize(static_cast<size_t>(channels_last ? 4 : rank), Dim(1));
  ctx.set_output(0, x.dtype, Shape(dims));
  return ok_status();
}

template <typename T>
void qgap_reference(const QGapShape& s, const QGapParams& q, const T* x, T* y) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c) {
      int64_t sum = 0;
      for (int64_t p = 0; p < s.positions; ++p)
        sum += s.channels_last ? x[(n * s.positions + p) * s.c + c] : x[(n * s.c + c) * s.positions + p];
      y[n * s.c + c] = qgap_quantize<T>(sum - q.x_zero_point * s.positions, q);
    }
}

Status qlinear_global_average_pool_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor* x = ctx.input(0);
  if (!x || !is_x8(x->dtype()))
    return invalid_argument("node %s: X must be uint8 or int8, got %s", node.label().c_str(),
                            x ? x->description().c_str() : "nothing");
  KILN_ASSIGN_OR_RETURN(QGapShape s, qgap_shape(node, x->dims()));
  KILN_ASSIGN_OR_RETURN(QGapParams q, qgap_params(node, ctx.input(1), ctx.input(2), ctx.input(3), ctx.input(4),
                                                  x->dtype(), s.positions));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x->dtype(), s.y_dims, TensorInit::kUninitialized));
  if (x->dtype() == DataType::kUInt8)
    qgap_reference<uint8_t>(s, q, x->data<uint8_t>(), y->data<uint8_t>());
  else
    qgap_reference<int8_t>(s, q, x->data<int8_t>(), y->data<int8_t>());
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("QLinearGlobalAveragePool", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(4, 5)
                     .outputs(1, 1)
                     .attr("x_format", AttrKind::kString)
                     .infer(infer_qlinear_global_average_pool)
                     .kernel(qlinear_global_average_pool_kernel)
                     .doc("Y = Q(GlobalAveragePool(DQ(X))) on the int8 values (docs/quantization.md)"));

}  // namespace kiln::ops
