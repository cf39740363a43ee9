// QuantizeLinear and DequantizeLinear (opsets 10..25: per-tensor, per-axis and blocked
// scales; 8/16-bit integers, int4/uint4/int2/uint2, the float8 kinds and float4e2m1) and
// DynamicQuantizeLinear. Arithmetic follows the ONNX reference implementation: x / scale
// in the NumPy type of the operands, round half to even, add the zero point, saturate.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/lowp.h"
#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// How a scale (and its zero point) maps onto the elements of x, viewed as
// [outer, axis_dim, inner]: one value (per tensor), one per index along the axis, or one
// per block of `block` indices along the axis (blocked, opset 21).
struct QuantLayout {
  bool per_tensor = true;
  int64_t axis_dim = 1, inner = 1;
  int64_t block = 0;       // > 0: blocked
  int64_t scale_axis = 1;  // the scale's extent along the axis (blocked)

  int64_t index(int64_t i) const {
    if (per_tensor) return 0;
    const int64_t a = (i / inner) % axis_dim;
    if (block == 0) return a;
    const int64_t o = i / (inner * axis_dim);
    return (o * scale_axis + a / block) * inner + i % inner;
  }
};

// Checks the scale against x and the axis / block_size attributes.
Expected<QuantLayout> quant_layout(const ir::Node& node, const Tensor& x, const Tensor& scale) {
  const std::string label = node.label();
  QuantLayout q;
  const int64_t block = node.opset() >= 21 ? node.attr_int("block_size", 0) : 0;
  if (block < 0) return invalid_argument("node %s: block_size %lld < 0", label.c_str(), (long long)block);
  if (scale.num_elements() == 1) return q;  // per tensor, whatever its rank
  if (node.opset() < 13)
    return invalid_argument("node %s: opset %lld takes a scalar scale, got %s", label.c_str(),
                            (long long)node.opset(), scale.description().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 1), x.rank()));
  q.per_tensor = false;
  q.axis_dim = x.dim(axis);
  for (int d = axis + 1; d < x.rank(); ++d) q.inner *= x.dim(d);
  if (block == 0) {
    if (scale.rank() != 1 || scale.dim(0) != q.axis_dim)
      return invalid_argument("node %s: per-axis scale must be 1-D of size %lld (x %s, axis %d), got %s",
                              label.c_str(), (long long)q.axis_dim, x.description().c_str(), axis,
                              scale.description().c_str());
    return q;
  }
  // Blocked: same rank as x, same dims except along the axis, where it counts the blocks.
  bool ok = scale.rank() == x.rank();
  for (int d = 0; ok && d < x.rank(); ++d)
    ok = d == axis ? scale.dim(d) == x.dim(d) / block + (x.dim(d) % block != 0) : scale.dim(d) == x.dim(d);
  if (!ok)
    return invalid_argument("node %s: blocked scale %s does not match x %s with axis %d and block_size %lld",
                            label.c_str(), scale.description().c_str(), x.description().c_str(), axis,
                            (long long)block);
  q.block = block;
  q.scale_axis = scale.dim(axis);
  return q;
}

// The zero point must have the scale's shape.
Status check_zero_point(const ir::Node& node, const Tensor* zp, const Tensor& scale) {
  if (zp && zp->dims() != scale.dims() && !(zp->num_elements() == 1 && scale.num_elements() == 1))
    return invalid_argument("node %s: zero point %s and scale %s must have the same shape",
                            node.label().c_str(), zp->description().c_str(), scale.description().c_str());
  return ok_status();
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = lowp_to_double(t.dtype(), t.raw_data(), i);
  return v;
}

// Rounds v to the precision of float type t (float64 keeps it).
double round_to(DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: return static_cast<float>(v);
    case DataType::kFloat16: return fp16_to_float(float_to_fp16(static_cast<float>(v)));
    case DataType::kBFloat16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    default: return v;
  }
}

// NumPy's result type of x / scale for the types QuantizeLinear takes.
DataType division_type(DataType x, DataType s) {
  if (x == s) return x == DataType::kInt32 ? DataType::kFloat64 : x;
  auto is_f32_or_half = [](DataType t) { return t == DataType::kFloat32 || dtype_is_half(t); };
  if (is_f32_or_half(x) && is_f32_or_half(s)) return DataType::kFloat32;
  return DataType::kFloat64;
}

bool is_quantized_int(DataType t) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kUInt4:
    case DataType::kInt4:
    case DataType::kUInt2:
    case DataType::kInt2: return true;
    default: return false;
  }
}

bool is_quantized_float(DataType t) { return dtype_is_lowp_float(t) && t != DataType::kFloat8E8M0; }

std::pair<double, double> int_range(DataType t) {
  if (dtype_is_packed_int(t)) return {packed_int_min(t), packed_int_max(t)};
  double lo = 0, hi = 0;
  dispatch_numeric(t, [&]<typename T>() {
    lo = static_cast<double>(std::numeric_limits<T>::lowest());
    hi = static_cast<double>(std::numeric_limits<T>::max());
  });
  return {lo, hi};
}

// Stores integer value v (already in range) as element i of t.
void store_int(Tensor& t, int64_t i, int64_t v) {
  if (dtype_is_packed_int(t.dtype())) {
    packed_int_set(t.dtype(), t.raw_data(), i, v);
    return;
  }
  dispatch_numeric(t.dtype(), [&]<typename T>() { t.data<T>()[i] = static_cast<T>(v); });
}

// ---- QuantizeLinear ------------------------------------------------------------------

// The output dtype: the zero point's, else output_dtype (opset 21), else uint8.
Expected<DataType> quantize_output_type(const ir::Node& node, DataType zp_type) {
  const int64_t attr = node.opset() >= 21 ? node.attr_int("output_dtype", 0) : 0;
  if (attr != 0 && !dtype_is_valid(static_cast<int32_t>(attr)))
    return invalid_argument("node %s: output_dtype %lld is not a dtype", node.label().c_str(), (long long)attr);
  DataType out = DataType::kUInt8;
  if (zp_type != DataType::kUndefined) {
    if (attr != 0 && attr != static_cast<int64_t>(zp_type))
      return invalid_argument("node %s: output_dtype %s differs from the zero point's %s", node.label().c_str(),
                              dtype_name(static_cast<DataType>(attr)), dtype_name(zp_type));
    out = zp_type;
  } else if (attr != 0) {
    out = static_cast<DataType>(attr);
  }
  if (!is_quantized_int(out) && !is_quantized_float(out))
    return unsupported("node %s: cannot quantize to %s", node.label().c_str(), dtype_name(out));
  return out;
}

Status quantize_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* zp = ctx.input(2);
  for (const Tensor* t : {&x, &scale})
    if (!dtype_is_float(t->dtype()) && t->dtype() != DataType::kInt32)
      return invalid_argument("node %s: x and scale must be float or int32, got %s", node.label().c_str(),
                              t->description().c_str());
  KILN_ASSIGN_OR_RETURN(DataType out_type, quantize_output_type(node, zp ? zp->dtype() : DataType::kUndefined));
  KILN_ASSIGN_OR_RETURN(QuantLayout layout, quant_layout(node, x, scale));
  KILN_RETURN_IF_ERROR(check_zero_point(node, zp, scale));
  const bool saturate = node.attr_int("saturate", 1) != 0;
  DataType ct = division_type(x.dtype(), scale.dtype());
  if (const int64_t p = node.attr_int("precision", 0); p != 0) {
    const DataType pt = static_cast<DataType>(p);
    if (pt != DataType::kFloat32 && pt != DataType::kFloat64 && !dtype_is_half(pt))
      return invalid_argument("node %s: precision %lld is not float32, float64, float16 or bfloat16",
                              node.label().c_str(), (long long)p);
    ct = static_cast<DataType>(p);
  }
  const std::vector<double> s = values_of(scale);
  const std::vector<double> z = zp ? values_of(*zp) : std::vector<double>(s.size(), 0.0);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, out_type, x.dims()));
  const auto [lo, hi] = is_quantized_int(out_type) ? int_range(out_type) : std::pair<double, double>{0, 0};
  const int64_t n = x.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(layout.index(i));
    const double xv = round_to(ct, lowp_to_double(x.dtype(), x.raw_data(), i));
    const double v = round_to(ct, xv / round_to(ct, s[k]));
    if (is_quantized_int(out_type)) {
      // NaN saturates low, as NumPy's int32 conversion of NaN does.
      double r = std::isnan(v) ? lo : std::nearbyint(v) + z[k];
      store_int(*y, i, static_cast<int64_t>(std::clamp(r, lo, hi)));
    } else if (out_type == DataType::kFloat4E2M1) {
      // The reference adds float4's zero point but not float8's (which must be 0).
      packed_set_code(out_type, y->raw_data(), i, lowp_float_encode(out_type, static_cast<float>(v + z[k]), true));
    } else {
      y->data<uint8_t>()[i] = lowp_float_encode(out_type, v, saturate);
    }
  }
  return ok_status();
}

Status infer_quantize(InferContext& ctx) {
  DataType zp_type = ctx.has_input(2) ? ctx.input_type(2).dtype : DataType::kUndefined;
  if (ctx.has_input(2) && zp_type == DataType::kUndefined) return ok_status();
  KILN_ASSIGN_OR_RETURN(DataType out, quantize_output_type(ctx.node(), zp_type));
  ctx.set_output(0, out, ctx.input_type(0).shape);
  return ok_status();
}

// ---- DequantizeLinear ----------------------------------------------------------------

Expected<DataType> dequantize_output_type(const ir::Node& node, DataType scale_type) {
  const int64_t attr = node.opset() >= 23 ? node.attr_int("output_dtype", 0) : 0;
  DataType out = attr != 0 ? static_cast<DataType>(attr) : scale_type;
  if (attr != 0 && !dtype_is_valid(static_cast<int32_t>(attr)))
    return invalid_argument("node %s: output_dtype %lld is not a dtype", node.label().c_str(), (long long)attr);
  if (out != DataType::kUndefined && out != DataType::kFloat32 && out != DataType::kFloat64 && !dtype_is_half(out))
    return unsupported("node %s: cannot dequantize to %s", node.label().c_str(), dtype_name(out));
  return out;
}

Status dequantize_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* zp = ctx.input(2);
  const bool x_float = is_quantized_float(x.dtype());
  if (!x_float && !is_quantized_int(x.dtype()) && x.dtype() != DataType::kInt32)
    return invalid_argument("node %s: cannot dequantize %s", node.label().c_str(), x.description().c_str());
  if (scale.dtype() != DataType::kFloat32 && scale.dtype() != DataType::kFloat64 && !dtype_is_half(scale.dtype()))
    return invalid_argument("node %s: scale must be float, got %s", node.label().c_str(),
                            scale.description().c_str());
  if (zp && !x_float && zp->dtype() != x.dtype())
    return invalid_argument("node %s: zero point %s and x %s differ in dtype", node.label().c_str(),
                            zp->description().c_str(), x.description().c_str());
  KILN_ASSIGN_OR_RETURN(DataType out_type, dequantize_output_type(node, scale.dtype()));
  KILN_ASSIGN_OR_RETURN(QuantLayout layout, quant_layout(node, x, scale));
  KILN_RETURN_IF_ERROR(check_zero_point(node, zp, scale));
  const std::vector<double> s = values_of(scale);
  // Float8 and float4 zero points are 0 by definition; the reference does not read them.
  const std::vector<double> z = zp && !x_float ? values_of(*zp) : std::vector<double>(s.size(), 0.0);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, out_type, x.dims()));
  const int64_t n = x.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(layout.index(i));
    // x goes to float32 first (lossy only for int32), as the reference's astype does.
    const double dx = static_cast<float>(lowp_to_double(x.dtype(), x.raw_data(), i)) - z[k];
    const double v = dx * s[k];
    switch (out_type) {
      case DataType::kFloat64: y->data<double>()[i] = v; break;
      case DataType::kFloat16: y->data<uint16_t>()[i] = float_to_fp16(static_cast<float>(v)); break;
      case DataType::kBFloat16: y->data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v)); break;
      default: y->data<float>()[i] = static_cast<float>(v); break;
    }
  }
  return ok_status();
}

Status infer_dequantize(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType out, dequantize_output_type(ctx.node(), ctx.input_type(1).dtype));
  ctx.set_output(0, out, ctx.input_type(0).shape);
  return ok_status();
}

// ---- DynamicQuantizeLinear -----------------------------------------------------------

Status dynamic_quantize_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.dtype() != DataType::kFloat32)
    return invalid_argument("node %s: x must be float32, got %s", node.label().c_str(), x.description().c_str());
  const float* p = x.data<float>();
  const int64_t n = x.num_elements();
  // The range always includes 0, so an all-zero (or empty) x gives scale 1 and zero point 0.
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kUInt8, x.dims()));
  uint8_t* q = y->data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(p[i] / scale) + zp;
    q[i] = std::isnan(v) ? 0 : static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
  }
  KILN_ASSIGN_OR_RETURN(Tensor * ys, ctx.allocate_output(1, DataType::kFloat32, {}));
  *ys->data<float>() = scale;
  KILN_ASSIGN_OR_RETURN(Tensor * yz, ctx.allocate_output(2, DataType::kUInt8, {}));
  *yz->data<uint8_t>() = static_cast<uint8_t>(zp);
  return ok_status();
}

Status infer_dynamic_quantize(InferContext& ctx) {
  ctx.set_output(0, DataType::kUInt8, ctx.input_type(0).shape);
  if (ctx.num_outputs() > 1) ctx.set_output(1, DataType::kFloat32, Shape({}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, DataType::kUInt8, Shape({}));
  return ok_status();
}

// One schema per op serves every opset: attributes of later opsets are read only where
// the node's opset defines them (block_size and output_dtype from 21, precision from 25).
KILN_REGISTER_OP(OpSchema("QuantizeLinear")
                     .since(10)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .attr("axis", AttrKind::kInt)
                     .attr("saturate", AttrKind::kInt)
                     .attr("block_size", AttrKind::kInt)
                     .attr("output_dtype", AttrKind::kInt)
                     .attr("precision", AttrKind::kInt)
                     .infer(infer_quantize)
                     .kernel(quantize_kernel));
KILN_REGISTER_OP(OpSchema("DequantizeLinear")
                     .since(10)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .attr("axis", AttrKind::kInt)
                     .attr("block_size", AttrKind::kInt)
                     .attr("output_dtype", AttrKind::kInt)
                     .infer(infer_dequantize)
                     .kernel(dequantize_kernel));
KILN_REGISTER_OP(OpSchema("DynamicQuantizeLinear")
                     .since(11)
                     .inputs(1, 1)
                     .outputs(3, 3)
                     .infer(infer_dynamic_quantize)
                     .kernel(dynamic_quantize_kernel));

}  // namespace
}  // namespace kiln::ops
