// Binary and variadic arithmetic with NumPy broadcasting: Add, Sub, Mul, Div, Mod, BitShift,
// Max, Min, Sum, Mean (one table, one shared kernel) and Pow (mixed base/exponent dtypes).
#include <cmath>
#include <string>
#include <type_traits>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// Attribute values some functors read (Mod's fmod, BitShift's direction).
struct BinaryParams {
  bool fmod = false;
  bool shift_left = true;
};

// Integer wrap-around arithmetic without signed-overflow UB.
template <typename T>
T wrap(uint64_t v) {
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
}

// ---- reference functions -------------------------------------------------------------
// kTypes: element kinds; kIntDivisor: integer right operands must be non-zero.

struct AddFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = false;
  template <typename T>
  static T apply(T a, T b, const BinaryParams&) {
    if constexpr (std::is_integral_v<T>)
      return wrap<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    else
      return a + b;
  }
};

struct SubFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = false;
  template <typename T>
  static T apply(T a, T b, const BinaryParams&) {
    if constexpr (std::is_integral_v<T>)
      return wrap<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    else
      return a - b;
  }
};

struct MulFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = false;
  template <typename T>
  static T apply(T a, T b, const BinaryParams&) {
    if constexpr (std::is_integral_v<T>)
      return wrap<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else
      return a * b;
  }
};

// Integer division truncates toward zero (C semantics, as ONNX Runtime does).
struct DivFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = true;
  template <typename T>
  static T apply(T a, T b, const BinaryParams&) {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      if (b == T(-1)) return wrap<T>(uint64_t(0) - static_cast<uint64_t>(a));  // INT_MIN / -1 wraps
    }
    return static_cast<T>(a / b);
  }
};

// fmod=0: the result takes the divisor's sign (NumPy mod); fmod=1: the dividend's (C fmod).
struct ModFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = true;
  template <typename T>
  static T apply(T a, T b, const BinaryParams& p) {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      if (!p.fmod && r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
      return r;
    } else if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return T(0);
      T r = static_cast<T>(a % b);
      if (!p.fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(a % b);
    }
  }
};

struct BitShiftFn {
  static constexpr TypeSet kTypes = kTypeUnsigned;
  static constexpr bool kIntDivisor = false;
  template <typename T>
  static T apply(T a, T b, const BinaryParams& p) {
    if constexpr (std::is_integral_v<T>) {
      if (b >= static_cast<T>(sizeof(T) * 8)) return T(0);
      return p.shift_left ? static_cast<T>(a << b) : static_cast<T>(a >> b);
    } else {
      return a;
    }
  }
};

// Max and Min propagate NaN, as NumPy's maximum/minimum do.
struct MaxFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = false;
  template <typename T>
  static T apply(T a, T b, const BinaryParams&) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    return a < b ? b : a;
  }
};

struct MinFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  static constexpr bool kIntDivisor = false;
  template <typename T>
  static T apply(T a, T b, const BinaryParams&) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    return b < a ? b : a;
  }
};

struct SumFn : AddFn {
  static constexpr TypeSet kTypes = kTypeFloats;
};

// ---- the shared kernel ---------------------------------------------------------------------

Expected<BinaryParams> read_params(const ir::Node& node) {
  BinaryParams p;
  p.fmod = node.attr_int("fmod", 0) != 0;
  if (node.op_type() == "BitShift") {
    std::string dir = node.attr_string("direction", "");
    if (dir != "LEFT" && dir != "RIGHT")
      return invalid_argument("node %s: direction must be \"LEFT\" or \"RIGHT\", got \"%s\"",
                              node.label().c_str(), dir.c_str());
    p.shift_left = dir == "LEFT";
  }
  return p;
}

// out = op(a, b) with broadcasting; a and b have the same dtype (float32 for halves).
template <typename Op>
Status apply_pair(const ir::Node& node, const Tensor& a, const Tensor& b, const BinaryParams& p, Tensor* out) {
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {a.dims(), b.dims()}));
  Status st;
  Tensor y = Tensor::make(a.dtype(), plan.out_dims);
  dispatch_types<Op::kTypes & ~kTypeHalf>(a.dtype(), [&]<typename T>() {
    if constexpr (Op::kIntDivisor && std::is_integral_v<T>) {
      const T* pb = b.data<T>();
      for (int64_t i = 0; i < b.num_elements(); ++i)
        if (pb[i] == T(0)) {
          st = invalid_argument("node %s: integer division by zero", node.label().c_str());
          return;
        }
    }
    broadcast_binary(plan, a.data<T>(), b.data<T>(), y.data<T>(), [&](T u, T v) { return Op::apply(u, v, p); });
  });
  KILN_RETURN_IF_ERROR(st);
  *out = std::move(y);
  return ok_status();
}

// Two inputs for the binary ops, one or more for Max/Min/Sum/Mean (folded left to right).
template <typename Op>
Status binary_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(BinaryParams p, read_params(node));
  const Tensor* first = ctx.input(0);
  if (!first) return invalid_argument("node %s: input 0 is missing", node.label().c_str());
  const DataType dtype = first->dtype();
  KILN_RETURN_IF_ERROR(check_dtype(node, dtype, Op::kTypes));
  if (p.fmod == false && node.op_type() == "Mod" && type_in(dtype, kTypeFloats))
    return invalid_argument("node %s: fmod must be 1 for floating-point inputs", node.label().c_str());
  Tensor acc = half_to_float(*first);
  int count = 1;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    if (!t) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
    if (t->dtype() != dtype)
      return invalid_argument("node %s: input %d is %s but input 0 is %s", node.label().c_str(), i,
                              dtype_name(t->dtype()), dtype_name(dtype));
    Tensor rhs = half_to_float(*t);
    if (ctx.num_inputs() == 2 && node.opset() < 7) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> b_dims, legacy_broadcast_dims(node, first->dims(), t->dims()));
      rhs = rhs.reshaped(std::move(b_dims));
    }
    KILN_RETURN_IF_ERROR(apply_pair<Op>(node, acc, rhs, p, &acc));
    ++count;
  }
  if (count == 1) acc = acc.clone();
  if (node.op_type() == "Mean") {
    dispatch_types<kTypeFloat>(acc.dtype(), [&]<typename T>() {
      T* d = acc.data<T>();
      const T n = static_cast<T>(count);
      map_elements(d, d, acc.num_elements(), [n](T v) { return v / n; });
    });
  }
  ctx.set_output(0, dtype_is_half(dtype) ? float_to_half(acc, dtype) : acc);
  return ok_status();
}

// Output shape of a two-input op before opset 7 (B broadcast onto A by the legacy
// broadcast/axis attributes), else NumPy broadcasting of all inputs.
Status infer_legacy_broadcast(InferContext& ctx, DataType dtype) {
  if (ctx.node().opset() >= 7 || ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return infer_broadcast(ctx);
  const Shape& a = ctx.input_type(0).shape;
  KILN_ASSIGN_OR_RETURN(Shape b, legacy_broadcast_shape(ctx.node(), a, ctx.input_type(1).shape));
  KILN_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(ctx.node(), a, b));
  ctx.set_output(0, dtype, std::move(out));
  return ok_status();
}

// Broadcast shape of all inputs, dtype of input 0; all inputs share one dtype.
Status infer_same_type_broadcast(InferContext& ctx, TypeSet types) {
  DataType dtype = ctx.has_input(0) ? ctx.input_type(0).dtype : DataType::kUndefined;
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), dtype, types));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    DataType t = ctx.input_type(i).dtype;
    if (dtype != DataType::kUndefined && t != DataType::kUndefined && t != dtype)
      return invalid_argument("node %s: input %d is %s but input 0 is %s", ctx.node().label().c_str(), i,
                              dtype_name(t), dtype_name(dtype));
  }
  return infer_legacy_broadcast(ctx, dtype);
}

// ---- Pow --------------------------------------------------------------------------------

// Exact integer power; negative exponents give what truncating 1 / base^n gives.
template <typename T>
T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (e % 2 == 0) ? T(1) : T(-1);
    return T(0);
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  while (e > 0) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(result));
}

// A copy of `t` as T2 (element-wise conversion through double or int64).
template <typename T2>
Tensor convert_to(const Tensor& t) {
  Tensor out = Tensor::make(DataTypeOf<T2>::value, t.dims());
  T2* d = out.data<T2>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if constexpr (std::is_floating_point_v<T2>)
      d[i] = static_cast<T2>(t.element_as_double(i));
    else
      d[i] = static_cast<T2>(t.element_as_int64(i));
  }
  return out;
}

// Y has the base's dtype. Float exponents on integer bases go through double.
Status pow_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> e_dims, legacy_broadcast_dims(node, x.dims(), ctx.input(1)->dims()));
  const Tensor e = ctx.input(1)->reshaped(std::move(e_dims));
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeNumeric, "base"));
  KILN_RETURN_IF_ERROR(check_dtype(node, e.dtype(), kTypeNumeric, "exponent"));
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {x.dims(), e.dims()}));
  Tensor xf = half_to_float(x);
  Tensor yf = Tensor::make(xf.dtype(), plan.out_dims);
  if (xf.dtype() == DataType::kFloat32 && (e.dtype() == DataType::kFloat32 || dtype_is_half(e.dtype()))) {
    Tensor ef = half_to_float(e);
    broadcast_binary(plan, xf.data<float>(), ef.data<float>(), yf.data<float>(),
                     [](float a, float b) { return std::pow(a, b); });
  } else {
    const bool int_exponent = type_in(e.dtype(), kTypeInts | kTypeBool);
    dispatch_types<kTypeNumeric & ~kTypeHalf>(xf.dtype(), [&]<typename T>() {
      if constexpr (std::is_integral_v<T>) {
        if (int_exponent) {
          Tensor ei = convert_to<int64_t>(e);
          broadcast_binary(plan, xf.data<T>(), ei.data<int64_t>(), yf.data<T>(),
                           [](T a, int64_t b) { return int_pow<T>(a, b); });
          return;
        }
      }
      Tensor ed = convert_to<double>(e);
      broadcast_binary(plan, xf.data<T>(), ed.data<double>(), yf.data<T>(), [](T a, double b) {
        double r = std::pow(static_cast<double>(a), b);
        if constexpr (std::is_integral_v<T>)
          return double_to_int<T>(r);
        else
          return static_cast<T>(r);
      });
    });
  }
  ctx.set_output(0, dtype_is_half(x.dtype()) ? float_to_half(yf, x.dtype()) : yf);
  return ok_status();
}

Status infer_pow(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), ctx.input_type(0).dtype, kTypeNumeric, "base"));
  if (ctx.has_input(1))
    KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), ctx.input_type(1).dtype, kTypeNumeric, "exponent"));
  return infer_legacy_broadcast(ctx, ctx.input_type(0).dtype);
}

// ---- the table -------------------------------------------------------------------------

struct BinaryEntry {
  const char* name;
  int64_t since;
  int max_inputs;  // 2, or -1 for the variadic ops
  TypeSet types;
  KernelFn kernel;
  const char* int_attr;     // "fmod" for Mod
  const char* string_attr;  // "direction" for BitShift
};

template <typename Op>
BinaryEntry entry(const char* name, int64_t since, int max_inputs = 2, const char* int_attr = nullptr,
                  const char* string_attr = nullptr) {
  return BinaryEntry{name, since, max_inputs, Op::kTypes, &binary_kernel<Op>, int_attr, string_attr};
}

// Opset 7 introduced multidirectional broadcasting for the binary ops (the kernel and
// inference apply the older broadcast/axis attributes below 7; consumed_inputs, opset 1-5,
// is only a memory hint). The variadic ops gained it at 8, and their older form (equal
// shapes) is a special case of it.
const BinaryEntry kBinaryOps[] = {
    entry<AddFn>("Add", 1),
    entry<SubFn>("Sub", 1),
    entry<MulFn>("Mul", 1),
    entry<DivFn>("Div", 1),
    entry<ModFn>("Mod", 10, 2, "fmod"),
    entry<BitShiftFn>("BitShift", 11, 2, nullptr, "direction"),
    entry<MaxFn>("Max", 1, -1),
    entry<MinFn>("Min", 1, -1),
    entry<SumFn>("Sum", 1, -1),
    entry<SumFn>("Mean", 1, -1),
};

int register_binary_ops() {
  for (const BinaryEntry& e : kBinaryOps) {
    OpSchema s(e.name);
    s.since(e.since).inputs(e.max_inputs == 2 ? 2 : 1, e.max_inputs).outputs(1, 1);
    if (e.int_attr) s.attr(e.int_attr, ir::AttrKind::kInt);
    if (e.string_attr) s.required_attr(e.string_attr, ir::AttrKind::kString);
    const TypeSet types = e.types;
    s.infer([types](InferContext& ctx) { return infer_same_type_broadcast(ctx, types); }).kernel(e.kernel);
    OpRegistry::instance().add(std::move(s));
  }
  OpRegistry::instance().add(OpSchema("Pow").since(1).inputs(2, 2).outputs(1, 1).infer(infer_pow).kernel(pow_kernel));
  return static_cast<int>(std::size(kBinaryOps)) + 1;
}

[[maybe_unused]] const int kRegistered = register_binary_ops();

}  // namespace
}  // namespace kiln::ops
