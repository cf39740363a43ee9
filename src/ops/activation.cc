// Activation ops: the attribute-parameterised unary table (Relu, LeakyRelu, Elu, Selu,
// Celu, ThresholdedRelu, HardSigmoid, HardSwish, Softplus, Softsign, Gelu, Mish) plus
// Clip (attributes before opset 11, optional inputs from 11) and PRelu (broadcast slope).
#include <cfloat>
#include <cmath>
#include <string>
#include <type_traits>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// Attribute values of one node, read once per kernel call.
struct ActParams {
  float alpha = 0;
  float beta = 0;
  float gamma = 0;
  bool tanh_approximation = false;  // Gelu approximate="tanh"
};

// ---- reference functions -----------------------------------------------------------------

struct ReluFn {
  static constexpr TypeSet kTypes = kTypeFloats | kTypeSigned;
  template <typename T>
  static T apply(T x, const ActParams&) {
    return x > T(0) ? x : T(0);
  }
};

#define KILN_ACTIVATION(Name, expr)                     \
  struct Name {                                         \
    static constexpr TypeSet kTypes = kTypeFloats;      \
    template <typename T>                               \
    static T apply(T x, const ActParams& p) {           \
      const T alpha = static_cast<T>(p.alpha);          \
      const T beta = static_cast<T>(p.beta);            \
      const T gamma = static_cast<T>(p.gamma);          \
      (void)alpha, (void)beta, (void)gamma;             \
      return expr;                                      \
    }                                                   \
  };

KILN_ACTIVATION(LeakyReluFn, x >= T(0) ? x : alpha * x)
KILN_ACTIVATION(EluFn, x >= T(0) ? x : alpha * std::expm1(x))
KILN_ACTIVATION(SeluFn, x > T(0) ? gamma * x : gamma * alpha * std::expm1(x))
KILN_ACTIVATION(CeluFn, std::max(T(0), x) + std::min(T(0), alpha * std::expm1(x / alpha)))
KILN_ACTIVATION(ThresholdedReluFn, x > alpha ? x : T(0))
KILN_ACTIVATION(HardSigmoidFn, std::max(T(0), std::min(T(1), alpha * x + beta)))
KILN_ACTIVATION(HardSwishFn, x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))))
// log(1 + e^x) without overflow for large x.
KILN_ACTIVATION(SoftplusFn, x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))
KILN_ACTIVATION(SoftsignFn, x / (T(1) + std::abs(x)))
KILN_ACTIVATION(MishFn, x * std::tanh(x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))))
#undef KILN_ACTIVATION

struct GeluFn {
  static constexpr TypeSet kTypes = kTypeFloats;
  template <typename T>
  static T apply(T x, const ActParams& p) {
    if (p.tanh_approximation) {
      const T k = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }
    return T(0.5) * x * (T(1) + std::erf(x * static_cast<T>(0.7071067811865476)));
  }
};

// ---- the shared kernel ---------------------------------------------------------------------

struct FloatAttr {
  const char* name = nullptr;
  float fallback = 0;
};

struct ActivationEntry {
  const char* name;
  int64_t since;
  FloatAttr alpha, beta, gamma;  // attribute name and default of each parameter, if any
  bool has_approximate;          // Gelu's string attribute
  TypeSet types;
  Status (*kernel)(KernelContext&, const ActParams&);
};

Expected<ActParams> read_params(const ir::Node& node, const ActivationEntry& e) {
  ActParams p;
  if (e.alpha.name) p.alpha = node.attr_float(e.alpha.name, e.alpha.fallback);
  if (e.beta.name) p.beta = node.attr_float(e.beta.name, e.beta.fallback);
  if (e.gamma.name) p.gamma = node.attr_float(e.gamma.name, e.gamma.fallback);
  // Selu's opset-1 defaults were rounded to 4 decimals; opset 6 gave the exact constants.
  if (std::string(e.name) == "Selu" && node.opset() < 6) {
    p.alpha = node.attr_float("alpha", 1.6732f);
    p.gamma = node.attr_float("gamma", 1.0507f);
  }
  if (e.has_approximate) {
    std::string a = node.attr_string("approximate", "none");
    if (a != "none" && a != "tanh")
      return invalid_argument("node %s: approximate must be \"none\" or \"tanh\", got \"%s\"",
                              node.label().c_str(), a.c_str());
    p.tanh_approximation = a == "tanh";
  }
  if (std::string(e.name) == "Celu" && p.alpha == 0)
    return invalid_argument("node %s: alpha must not be 0", node.label().c_str());
  return p;
}

template <typename Op>
Status activation_kernel(KernelContext& ctx, const ActParams& p) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), x.dtype(), Op::kTypes));
  if (dtype_is_half(x.dtype())) {
    Tensor xf = half_to_float(x);
    Tensor yf = Tensor::make(DataType::kFloat32, x.dims());
    map_elements(xf.data<float>(), yf.data<float>(), x.num_elements(),
                 [&](float v) { return Op::apply(v, p); });
    ctx.set_output(0, float_to_half(yf, x.dtype()));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_types<Op::kTypes & ~kTypeHalf>(x.dtype(), [&]<typename T>() {
    map_elements(x.data<T>(), y->data<T>(), x.num_elements(), [&](T v) { return Op::apply(v, p); });
  });
  return ok_status();
}

template <typename Op>
ActivationEntry entry(const char* name, int64_t since, FloatAttr alpha = {}, FloatAttr beta = {},
                      FloatAttr gamma = {}, bool has_approximate = false) {
  return ActivationEntry{name, since, alpha, beta, gamma, has_approximate, Op::kTypes, &activation_kernel<Op>};
}

// Opsets 1-5 of Relu, LeakyRelu, Elu, Selu and HardSigmoid add only consumed_inputs (a
// memory hint, ignored).
const ActivationEntry kActivations[] = {
    entry<ReluFn>("Relu", 1),
    entry<LeakyReluFn>("LeakyRelu", 1, {"alpha", 0.01f}),
    entry<EluFn>("Elu", 1, {"alpha", 1.0f}),
    entry<SeluFn>("Selu", 1, {"alpha", 1.67326319217681884765625f}, {},
                  {"gamma", 1.05070102214813232421875f}),
    entry<CeluFn>("Celu", 12, {"alpha", 1.0f}),
    entry<ThresholdedReluFn>("ThresholdedRelu", 10, {"alpha", 1.0f}),
    entry<HardSigmoidFn>("HardSigmoid", 1, {"alpha", 0.2f}, {"beta", 0.5f}),
    entry<HardSwishFn>("HardSwish", 14),
    entry<SoftplusFn>("Softplus", 1),
    entry<SoftsignFn>("Softsign", 1),
    entry<GeluFn>("Gelu", 20, {}, {}, {}, true),
    entry<MishFn>("Mish", 18),
};

Status infer_activation(InferContext& ctx, TypeSet types) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::TensorType& in = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), in.dtype, types));
  ctx.set_output(0, in.dtype, in.shape);
  return ok_status();
}

// ---- Clip ---------------------------------------------------------------------------------

// Bounds from attributes (opset < 11) or from optional scalar inputs 1 and 2.
Status clip_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const ir::Node& node = ctx.node();
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeNumeric));
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool has_lo = false, has_hi = false;
  if (ctx.opset() < 11) {
    lo = node.attr_float("min", -FLT_MAX);
    hi = node.attr_float("max", FLT_MAX);
    has_lo = has_hi = true;
  } else {
    for (int i = 1; i <= 2; ++i) {
      const Tensor* b = ctx.input(i);
      if (!b) continue;
      if (b->num_elements() != 1)
        return invalid_argument("node %s: %s must be a scalar, got %s", node.label().c_str(),
                                i == 1 ? "min" : "max", b->description().c_str());
      if (b->dtype() != x.dtype())
        return invalid_argument("node %s: %s is %s but input is %s", node.label().c_str(), i == 1 ? "min" : "max",
                                dtype_name(b->dtype()), dtype_name(x.dtype()));
      (i == 1 ? lo : hi) = b->element_as_double(0);
      (i == 1 ? has_lo : has_hi) = true;
    }
  }
  Tensor xf = half_to_float(x);
  Tensor yf = Tensor::make(xf.dtype(), x.dims());
  Status st;
  dispatch_types<kTypeNumeric & ~kTypeHalf>(xf.dtype(), [&]<typename T>() {
    // Bounds read from integer tensors are exact in double only up to 2^53; read them
    // again as integers so int64 extremes clip exactly.
    T tlo = std::numeric_limits<T>::lowest(), thi = std::numeric_limits<T>::max();
    if constexpr (std::is_integral_v<T>) {
      if (ctx.opset() >= 11) {
        if (has_lo) tlo = static_cast<T>(ctx.input(1)->element_as_int64(0));
        if (has_hi) thi = static_cast<T>(ctx.input(2)->element_as_int64(0));
      } else {
        if (has_lo) tlo = double_to_int<T>(std::max(lo, double(std::numeric_limits<T>::lowest())));
        if (has_hi) thi = double_to_int<T>(std::min(hi, double(std::numeric_limits<T>::max())));
      }
    } else {
      if (has_lo) tlo = static_cast<T>(lo);
      if (has_hi) thi = static_cast<T>(hi);
    }
    // min(max(x, lo), hi): when lo > hi every value becomes hi, as ONNX specifies.
    map_elements(xf.data<T>(), yf.data<T>(), x.num_elements(),
                 [=](T v) { return std::min(std::max(v, tlo), thi); });
  });
  ctx.set_output(0, dtype_is_half(x.dtype()) ? float_to_half(yf, x.dtype()) : yf);
  return st;
}

// ---- PRelu --------------------------------------------------------------------------------

// Before opset 7 a 1-D slope of C values held one slope per channel (axis 1), not a
// NumPy-broadcast trailing axis: give it the shape [C, 1, ..., 1] so that broadcasting
// lines it up with axis 1.
Shape prelu_slope_shape(const ir::Node& node, const Shape& x, const Shape& slope) {
  if (node.opset() >= 7 || !x.has_rank() || x.rank() < 2 || !slope.has_rank() || slope.rank() != 1 ||
      (slope[0].is_static() && slope[0].value == 1))
    return slope;
  std::vector<Dim> dims(static_cast<size_t>(x.rank() - 1), Dim(1));
  dims[0] = slope[0];
  return Shape(std::move(dims));
}

// slope broadcasts to X (unidirectionally): the output always has X's shape.
Status prelu_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const ir::Node& node = ctx.node();
  const Tensor slope = ctx.input(1)->reshaped(
      prelu_slope_shape(node, Shape::from_static(x.dims()), Shape::from_static(ctx.input(1)->dims()))
          .static_dims());
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeNumeric));
  if (slope.dtype() != x.dtype())
    return invalid_argument("node %s: slope is %s but X is %s", node.label().c_str(), dtype_name(slope.dtype()),
                            dtype_name(x.dtype()));
  Tensor xf = half_to_float(x), sf = half_to_float(slope);
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {x.dims(), slope.dims()}));
  if (plan.out_dims != x.dims())
    return invalid_argument("node %s: slope %s does not broadcast to X %s", node.label().c_str(),
                            dims_to_string(slope.dims()).c_str(), dims_to_string(x.dims()).c_str());
  Tensor yf = Tensor::make(xf.dtype(), x.dims());
  dispatch_types<kTypeNumeric & ~kTypeHalf>(xf.dtype(), [&]<typename T>() {
    broadcast_binary(plan, xf.data<T>(), sf.data<T>(), yf.data<T>(),
                     [](T v, T s) { return v < T(0) ? static_cast<T>(s * v) : v; });
  });
  ctx.set_output(0, dtype_is_half(x.dtype()) ? float_to_half(yf, x.dtype()) : yf);
  return ok_status();
}

Status infer_prelu(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return ok_status();
  const ir::TensorType& x = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), x.dtype, kTypeNumeric));
  const Shape slope = prelu_slope_shape(ctx.node(), x.shape, ctx.input_type(1).shape);
  KILN_ASSIGN_OR_RETURN(Shape b, broadcast_shapes(ctx.node(), x.shape, slope));
  if (b.has_rank() && x.shape.has_rank() && b.rank() != x.shape.rank())
    return invalid_argument("node %s: slope %s does not broadcast to X %s", ctx.node().label().c_str(),
                            ctx.input_type(1).shape.to_string().c_str(), x.shape.to_string().c_str());
  ctx.set_output(0, x.dtype, x.shape);
  return ok_status();
}

int register_activations() {
  for (const ActivationEntry& e : kActivations) {
    OpSchema s(e.name);
    s.since(e.since).inputs(1, 1).outputs(1, 1);
    for (const FloatAttr* a : {&e.alpha, &e.beta, &e.gamma})
      if (a->name) s.attr(a->name, ir::AttrKind::kFloat);
    if (e.has_approximate) s.attr("approximate", ir::AttrKind::kString);
    const ActivationEntry* ep = &e;
    s.infer([ep](InferContext& ctx) -> Status {
       KILN_ASSIGN_OR_RETURN(ActParams p, read_params(ctx.node(), *ep));
       (void)p;
       return infer_activation(ctx, ep->types);
     }).kernel([ep](KernelContext& ctx) -> Status {
      KILN_ASSIGN_OR_RETURN(ActParams p, read_params(ctx.node(), *ep));
      return ep->kernel(ctx, p);
    });
    OpRegistry::instance().add(std::move(s));
  }
  auto infer_numeric = [](InferContext& ctx) { return infer_activation(ctx, kTypeNumeric); };
  OpRegistry::instance().add(OpSchema("Clip")
                                 .since(1, 10)
                                 .inputs(1, 1)
                                 .outputs(1, 1)
                                 .attr("min", ir::AttrKind::kFloat)
                                 .attr("max", ir::AttrKind::kFloat)
                                 .infer(infer_numeric)
                                 .kernel(clip_kernel));
  // Clip 1-5 differs from 6 only by consumed_inputs.
  OpRegistry::instance().add(
      OpSchema("Clip").since(11).inputs(1, 3).outputs(1, 1).infer(infer_numeric).kernel(clip_kernel));
  OpRegistry::instance().add(OpSchema("PRelu").since(1).inputs(2, 2).outputs(1, 1).infer(infer_prelu).kernel(
      prelu_kernel));
  return static_cast<int>(std::size(kActivations)) + 3;
}

[[maybe_unused]] const int kRegistered = register_activations();

}  // namespace
}  // namespace kiln::ops
