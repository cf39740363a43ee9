// Unary element-wise math ops (Abs, Exp, Sqrt, Sin, Round, Sign, IsNaN, ...): one table of
// entries, one shared kernel and inference; a new op is a functor plus one table row.
#include <cmath>
#include <type_traits>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// ---- reference functions -------------------------------------------------------------
// Each functor says which element kinds it takes (kTypes) and how one element maps.

#define KILN_FLOAT_UNARY(Name, expr)                   \
  struct Name {                                        \
    static constexpr TypeSet kTypes = kTypeFloats;     \
    template <typename T>                              \
    static T apply(T x) {                              \
      return expr;                                     \
    }                                                  \
  };

KILN_FLOAT_UNARY(ExpFn, std::exp(x))
KILN_FLOAT_UNARY(LogFn, std::log(x))
KILN_FLOAT_UNARY(SqrtFn, std::sqrt(x))
KILN_FLOAT_UNARY(ReciprocalFn, T(1) / x)
KILN_FLOAT_UNARY(FloorFn, std::floor(x))
KILN_FLOAT_UNARY(CeilFn, std::ceil(x))
// nearbyint in the default rounding mode rounds halves to even, as ONNX asks.
KILN_FLOAT_UNARY(RoundFn, std::nearbyint(x))
KILN_FLOAT_UNARY(TanhFn, std::tanh(x))
// Split at 0 so that exp never overflows.
KILN_FLOAT_UNARY(SigmoidFn, x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)))
KILN_FLOAT_UNARY(SinFn, std::sin(x))
KILN_FLOAT_UNARY(CosFn, std::cos(x))
KILN_FLOAT_UNARY(TanFn, std::tan(x))
KILN_FLOAT_UNARY(AsinFn, std::asin(x))
KILN_FLOAT_UNARY(AcosFn, std::acos(x))
KILN_FLOAT_UNARY(AtanFn, std::atan(x))
KILN_FLOAT_UNARY(SinhFn, std::sinh(x))
KILN_FLOAT_UNARY(CoshFn, std::cosh(x))
KILN_FLOAT_UNARY(AsinhFn, std::asinh(x))
KILN_FLOAT_UNARY(AcoshFn, std::acosh(x))
KILN_FLOAT_UNARY(AtanhFn, std::atanh(x))
#undef KILN_FLOAT_UNARY

struct AbsFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T>
  static T apply(T x) {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else if constexpr (std::is_integral_v<T>) {
      // Through the unsigned type so that abs(INT_MIN) wraps instead of overflowing.
      using U = std::make_unsigned_t<T>;
      return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
    } else {
      return std::abs(x);
    }
  }
};

struct NegFn {
  static constexpr TypeSet kTypes = kTypeFloats | kTypeSigned;
  template <typename T>
  static T apply(T x) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(U(0) - static_cast<U>(x));
    } else {
      return -x;
    }
  }
};

struct SignFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T>
  static T apply(T x) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
    }
    return x > T(0) ? T(1) : (x < T(0) ? static_cast<T>(-1) : T(0));
  }
};

// ONNX lists integer types for Erf; they go through double and truncate back.
struct ErfFn {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T>
  static T apply(T x) {
    if constexpr (std::is_floating_point_v<T>)
      return std::erf(x);
    else
      return static_cast<T>(std::erf(static_cast<double>(x)));
  }
};

// ---- the shared kernel -----------------------------------------------------------------

template <typename Op>
Status unary_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), x.dtype(), Op::kTypes));
  if (dtype_is_half(x.dtype())) {
    Tensor xf = half_to_float(x);
    Tensor yf = Tensor::make(DataType::kFloat32, x.dims());
    map_elements(xf.data<float>(), yf.data<float>(), x.num_elements(), [](float v) { return Op::apply(v); });
    ctx.set_output(0, float_to_half(yf, x.dtype()));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_types<Op::kTypes & ~kTypeHalf>(x.dtype(), [&]<typename T>() {
    map_elements(x.data<T>(), y->data<T>(), x.num_elements(), [](T v) { return Op::apply(v); });
  });
  return ok_status();
}

// IsNaN and IsInf: float in, bool out.
struct PredicateParams {
  bool detect_negative = true;
  bool detect_positive = true;
};

struct IsNaNFn {
  template <typename T>
  static bool apply(T x, const PredicateParams&) {
    return std::isnan(x);
  }
};

struct IsInfFn {
  template <typename T>
  static bool apply(T x, const PredicateParams& p) {
    return std::isinf(x) && (x > 0 ? p.detect_positive : p.detect_negative);
  }
};

template <typename Op>
Status predicate_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), x.dtype(), kTypeFloats));
  PredicateParams p;
  p.detect_negative = ctx.node().attr_int("detect_negative", 1) != 0;
  p.detect_positive = ctx.node().attr_int("detect_positive", 1) != 0;
  Tensor xf = half_to_float(x);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kBool, x.dims()));
  dispatch_types<kTypeFloat>(xf.dtype(), [&]<typename T>() {
    map_elements(xf.data<T>(), y->data<bool>(), x.num_elements(), [&](T v) { return Op::apply(v, p); });
  });
  return ok_status();
}

// ---- the table -------------------------------------------------------------------------

struct UnaryEntry {
  const char* name;
  int64_t since;
  TypeSet types;
  bool bool_output;
  KernelFn kernel;
};

template <typename Op>
UnaryEntry entry(const char* name, int64_t since) {
  return UnaryEntry{name, since, Op::kTypes, false, &unary_kernel<Op>};
}

template <typename Op>
UnaryEntry predicate(const char* name, int64_t since) {
  return UnaryEntry{name, since, kTypeFloats, true, &predicate_kernel<Op>};
}

// `since` is the first opset of the op's current semantics (later versions only widened
// the type lists; opsets 1-5 differ only by consumed_inputs, a memory hint ignored here).
const UnaryEntry kUnaryOps[] = {
    entry<AbsFn>("Abs", 1),         entry<NegFn>("Neg", 1),
    entry<ExpFn>("Exp", 1),         entry<LogFn>("Log", 1),
    entry<SqrtFn>("Sqrt", 1),       entry<ReciprocalFn>("Reciprocal", 1),
    entry<FloorFn>("Floor", 1),     entry<CeilFn>("Ceil", 1),
    entry<RoundFn>("Round", 11),    entry<SignFn>("Sign", 9),
    entry<ErfFn>("Erf", 9),         entry<TanhFn>("Tanh", 1),
    entry<SigmoidFn>("Sigmoid", 1), entry<SinFn>("Sin", 7),
    entry<CosFn>("Cos", 7),         entry<TanFn>("Tan", 7),
    entry<AsinFn>("Asin", 7),       entry<AcosFn>("Acos", 7),
    entry<AtanFn>("Atan", 7),       entry<SinhFn>("Sinh", 9),
    entry<CoshFn>("Cosh", 9),       entry<AsinhFn>("Asinh", 9),
    entry<AcoshFn>("Acosh", 9),     entry<AtanhFn>("Atanh", 9),
    predicate<IsNaNFn>("IsNaN", 9), predicate<IsInfFn>("IsInf", 10),
};

int register_unary_ops() {
  for (const UnaryEntry& e : kUnaryOps) {
    OpSchema s(e.name);
    s.since(e.since).inputs(1, 1).outputs(1, 1);
    if (std::string(e.name) == "IsInf")
      s.attr("detect_negative", ir::AttrKind::kInt).attr("detect_positive", ir::AttrKind::kInt);
    const TypeSet types = e.types;
    const bool bool_output = e.bool_output;
    s.infer([types, bool_output](InferContext& ctx) -> Status {
       if (!ctx.has_input(0)) return ok_status();
       const ir::TensorType& in = ctx.input_type(0);
       KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), in.dtype, types));
       ctx.set_output(0, bool_output ? DataType::kBool : in.dtype, in.shape);
       return ok_status();
     }).kernel(e.kernel);
    OpRegistry::instance().add(std::move(s));
  }
  return static_cast<int>(std::size(kUnaryOps));
}

[[maybe_unused]] const int kRegistered = register_unary_ops();

}  // namespace
}  // namespace kiln::ops
