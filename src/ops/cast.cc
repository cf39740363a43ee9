// Cast and CastLike: conversion between every numeric dtype (float16 and bfloat16 through
// float32, bool as zero/non-zero), the low-precision types (float8 kinds, float4e2m1,
// float8e8m0, int4/uint4/int2/uint2) and between numbers and strings.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/lowp.h"
#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// Dtypes Cast converts between.
bool castable(DataType t) { return type_bit(t) != 0 || t == DataType::kString || dtype_is_lowp(t); }

// Attributes that shape conversion to the low-precision float types.
struct CastOptions {
  bool saturate = true;                           // float8 targets (opset 19)
  E8M0Rounding e8m0_rounding = E8M0Rounding::kUp;  // float8e8m0 targets (opset 24)
};

// One element from TI to TO: floats to integers truncate without undefined behaviour
// (see double_to_int), anything to bool is "not zero", integers wrap.
template <typename TI, typename TO>
TO convert_element(TI v) {
  if constexpr (std::is_same_v<TO, bool>) {
    return v != TI(0);
  } else if constexpr (std::is_floating_point_v<TO>) {
    return static_cast<TO>(v);
  } else if constexpr (std::is_floating_point_v<TI>) {
    return double_to_int<TO>(static_cast<double>(v));
  } else {
    return static_cast<TO>(v);
  }
}

// Numbers print as NumPy would read them back: enough digits to round-trip, and
// NaN / INF / -INF spelled as ONNX's string parsing accepts them.
template <typename T>
std::string to_text(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "1" : "0";
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
    char buf[40];
    std::snprintf(buf, sizeof(buf), std::is_same_v<T, float> ? "%.9g" : "%.17g", static_cast<double>(v));
    return buf;
  } else {
    return std::to_string(v);
  }
}

// Parses a string as T; integers exactly when written as integers, else through double.
template <typename T>
bool parse_text(const std::string& s, T* out) {
  const char* b = s.c_str();
  char* end = nullptr;
  errno = 0;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if constexpr (std::is_signed_v<T>) {
      long long v = std::strtoll(b, &end, 10);
      if (end != b && *end == '\0' && errno == 0) {
        *out = static_cast<T>(v);
        return true;
      }
    } else {
      unsigned long long v = std::strtoull(b, &end, 10);
      if (end != b && *end == '\0' && errno == 0 && s.find('-') == std::string::npos) {
        *out = static_cast<T>(v);
        return true;
      }
    }
  }
  errno = 0;
  double d = std::strtod(b, &end);
  if (end == b || *end != '\0') return false;
  *out = convert_element<double, T>(d);
  return true;
}

Expected<Tensor> cast_tensor(const ir::Node& node, const Tensor& x, DataType to, const CastOptions& opt);

// Low-precision source: decoded to float32 (float kinds, all exact) or int32 (packed
// integers), then cast on from there.
Expected<Tensor> cast_from_lowp(const ir::Node& node, const Tensor& x, DataType to, const CastOptions& opt) {
  const int64_t n = x.num_elements();
  const bool is_float = dtype_is_lowp_float(x.dtype());
  Tensor wide = Tensor::make(is_float ? DataType::kFloat32 : DataType::kInt32, x.dims());
  if (is_float) {
    float* d = wide.data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(lowp_to_double(x.dtype(), x.raw_data(), i));
  } else {
    int32_t* d = wide.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = packed_int_get(x.dtype(), x.raw_data(), i);
  }
  if (to == wide.dtype()) return wide;
  return cast_tensor(node, wide, to, opt);
}

// Low-precision target. Floats round once from float64 (exact for every source but
// 64-bit integers); float8e8m0 works on float32 bits as the ONNX reference does; the
// packed integers truncate toward zero like other integer targets, then wrap.
Expected<Tensor> cast_to_lowp(const ir::Node& node, const Tensor& x, DataType to, const CastOptions& opt) {
  const int64_t n = x.num_elements();
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(to, x.dims()), "node %s", node.label().c_str());
  if (dtype_is_packed_int(to)) {
    KILN_ASSIGN_OR_RETURN(Tensor wide, cast_tensor(node, x, DataType::kInt64, opt));
    const int64_t* s = wide.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) packed_int_set(to, out.raw_data(), i, s[i]);
    return out;
  }
  if (to == DataType::kFloat8E8M0) {
    KILN_ASSIGN_OR_RETURN(Tensor wide, cast_tensor(node, x, DataType::kFloat32, opt));
    const float* s = wide.data<float>();
    uint8_t* d = out.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_e8m0(s[i], opt.saturate, opt.e8m0_rounding);
    return out;
  }
  KILN_ASSIGN_OR_RETURN(Tensor wide, cast_tensor(node, x, DataType::kFloat64, opt));
  const double* s = wide.data<double>();
  if (to == DataType::kFloat4E2M1) {
    for (int64_t i = 0; i < n; ++i) packed_set_code(to, out.raw_data(), i, lowp_float_encode(to, s[i], true));
  } else {
    uint8_t* d = out.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = lowp_float_encode(to, s[i], opt.saturate);
  }
  return out;
}

// Converts `x` to `to`; the error names the node.
Expected<Tensor> cast_tensor(const ir::Node& node, const Tensor& x, DataType to, const CastOptions& opt) {
  if (!castable(x.dtype()))
    return unsupported("node %s: cannot cast from %s", node.label().c_str(), dtype_name(x.dtype()));
  if (!castable(to)) return unsupported("node %s: cannot cast to %s", node.label().c_str(), dtype_name(to));
  if (x.dtype() == to) return x.clone();
  if (dtype_is_lowp(x.dtype())) return cast_from_lowp(node, x, to, opt);
  if (dtype_is_lowp(to)) return cast_to_lowp(node, x, to, opt);
  if (dtype_is_half(to)) {
    // Through float32: exact for every half source, and the float -> half step rounds once.
    KILN_ASSIGN_OR_RETURN(Tensor f, cast_tensor(node, x, DataType::kFloat32, opt));
    return float_to_half(f, to);
  }
  const Tensor src = half_to_float(x);
  const int64_t n = x.num_elements();
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(to, x.dims()), "node %s", node.label().c_str());
  if (src.dtype() == DataType::kString) {
    const std::string* s = src.data<std::string>();
    Status st;
    dispatch_numeric(to, [&]<typename TO>() {
      TO* d = out.data<TO>();
      for (int64_t i = 0; i < n && st.ok(); ++i)
        if (!parse_text(s[i], &d[i]))
          st = invalid_argument("node %s: cannot parse \"%s\" as %s", node.label().c_str(), s[i].c_str(),
                                dtype_name(to));
    });
    KILN_RETURN_IF_ERROR(st);
    return out;
  }
  if (to == DataType::kString) {
    dispatch_numeric(src.dtype(), [&]<typename TI>() {
      const TI* p = src.data<TI>();
      std::string* d = out.data<std::string>();
      for (int64_t i = 0; i < n; ++i) d[i] = to_text(p[i]);
    });
    return out;
  }
  dispatch_numeric(src.dtype(), [&]<typename TI>() {
    dispatch_numeric(to, [&]<typename TO>() {
      map_elements(src.data<TI>(), out.data<TO>(), n, [](TI v) { return convert_element<TI, TO>(v); });
    });
  });
  return out;
}

Expected<DataType> target_type(const ir::Node& node) {
  const ir::Attribute* a = node.attr("to");
  if (!a) return invalid_argument("node %s is missing required attribute 'to'", node.label().c_str());
  if (!dtype_is_valid(static_cast<int32_t>(a->i)) || a->i == 0)
    return invalid_argument("node %s: 'to' is %lld, not a valid dtype", node.label().c_str(), (long long)a->i);
  DataType to = static_cast<DataType>(a->i);
  if (!castable(to)) return unsupported("node %s: cannot cast to %s", node.label().c_str(), dtype_name(to));
  return to;
}

// Reads saturate and round_mode; the error names the node.
Expected<CastOptions> cast_options(const ir::Node& node) {
  CastOptions opt;
  opt.saturate = node.attr_int("saturate", 1) != 0;
  const std::string mode = node.attr_string("round_mode", "up");
  if (!e8m0_rounding_from_name(mode.c_str(), &opt.e8m0_rounding))
    return invalid_argument("node %s: round_mode is \"%s\"; expected \"up\", \"down\" or \"nearest\"",
                            node.label().c_str(), mode.c_str());
  return opt;
}

Status cast_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType to, target_type(ctx.node()));
  KILN_ASSIGN_OR_RETURN(CastOptions opt, cast_options(ctx.node()));
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_tensor(ctx.node(), *ctx.input(0), to, opt));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

Status infer_cast(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType to, target_type(ctx.node()));
  ctx.set_output(0, to, ctx.has_input(0) ? ctx.input_type(0).shape : Shape());
  return ok_status();
}

Status cast_like_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(CastOptions opt, cast_options(ctx.node()));
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_tensor(ctx.node(), *ctx.input(0), ctx.input(1)->dtype(), opt));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

Status infer_cast_like(InferContext& ctx) {
  if (!ctx.has_input(1)) return ok_status();
  DataType to = ctx.input_type(1).dtype;
  if (to != DataType::kUndefined && !castable(to))
    return unsupported("node %s: cannot cast to %s", ctx.node().label().c_str(), dtype_name(to));
  ctx.set_output(0, to, ctx.has_input(0) ? ctx.input_type(0).shape : Shape());
  return ok_status();
}

// 'saturate' (opset 19) applies to float8 targets; 'round_mode' (opset 24) to float8e8m0.
KILN_REGISTER_OP(OpSchema("Cast")
                     .since(6, 18)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("to", ir::AttrKind::kInt)
                     .infer(infer_cast)
                     .kernel(cast_kernel));
KILN_REGISTER_OP(OpSchema("Cast")
                     .since(19, 23)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("to", ir::AttrKind::kInt)
                     .attr("saturate", ir::AttrKind::kInt)
                     .infer(infer_cast)
                     .kernel(cast_kernel));
KILN_REGISTER_OP(OpSchema("Cast")
                     .since(24)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("to", ir::AttrKind::kInt)
                     .attr("saturate", ir::AttrKind::kInt)
                     .attr("round_mode", ir::AttrKind::kString)
                     .infer(infer_cast)
                     .kernel(cast_kernel));
KILN_REGISTER_OP(OpSchema("CastLike")
                     .since(15, 18)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .infer(infer_cast_like)
                     .kernel(cast_like_kernel));
KILN_REGISTER_OP(OpSchema("CastLike")
                     .since(19, 23)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("saturate", ir::AttrKind::kInt)
                     .infer(infer_cast_like)
                     .kernel(cast_like_kernel));
KILN_REGISTER_OP(OpSchema("CastLike")
                     .since(24)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("saturate", ir::AttrKind::kInt)
                     .attr("round_mode", ir::AttrKind::kString)
                     .infer(infer_cast_like)
                     .kernel(cast_like_kernel));

}  // namespace
}  // namespace kiln::ops
