// Cast and CastLike: conversion between every numeric dtype (float16 and bfloat16 through
// float32, bool as zero/non-zero) and between numbers and strings.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// Dtypes Cast converts between.
bool castable(DataType t) { return type_bit(t) != 0 || t == DataType::kString; }

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

// Converts `x` to `to`; the error names the node.
Expected<Tensor> cast_tensor(const ir::Node& node, const Tensor& x, DataType to) {
  if (!castable(x.dtype()))
    return unsupported("node %s: cannot cast from %s", node.label().c_str(), dtype_name(x.dtype()));
  if (!castable(to)) return unsupported("node %s: cannot cast to %s", node.label().c_str(), dtype_name(to));
  if (x.dtype() == to) return x.clone();
  if (dtype_is_half(to)) {
    // Through float32: exact for every half source, and the float -> half step rounds once.
    KILN_ASSIGN_OR_RETURN(Tensor f, cast_tensor(node, x, DataType::kFloat32));
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

Status cast_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType to, target_type(ctx.node()));
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_tensor(ctx.node(), *ctx.input(0), to));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

Status infer_cast(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType to, target_type(ctx.node()));
  ctx.set_output(0, to, ctx.has_input(0) ? ctx.input_type(0).shape : Shape());
  return ok_status();
}

Status cast_like_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_tensor(ctx.node(), *ctx.input(0), ctx.input(1)->dtype()));
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

// 'saturate' (opset 19) only affects float8 targets, which Kiln does not cast to.
KILN_REGISTER_OP(OpSchema("Cast")
                     .since(6, 18)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("to", ir::AttrKind::kInt)
                     .infer(infer_cast)
                     .kernel(cast_kernel));
KILN_REGISTER_OP(OpSchema("Cast")
                     .since(19)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("to", ir::AttrKind::kInt)
                     .attr("saturate", ir::AttrKind::kInt)
                     .infer(infer_cast)
                     .kernel(cast_kernel));
KILN_REGISTER_OP(OpSchema("CastLike")
                     .since(15, 18)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .infer(infer_cast_like)
                     .kernel(cast_like_kernel));
KILN_REGISTER_OP(OpSchema("CastLike")
                     .since(19)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("saturate", ir::AttrKind::kInt)
                     .infer(infer_cast_like)
                     .kernel(cast_like_kernel));

}  // namespace
}  // namespace kiln::ops
