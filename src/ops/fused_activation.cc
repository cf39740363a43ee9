// The activation table of Kiln's fused ops: parsing `activation` / `activation_params` and
// applying the result. Each formula is the one of the ONNX op it replaces (same
// comparisons, so NaN and the edges behave as the unfused graph does).
#include "ops/fused_activation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/parallel.h"

namespace kiln::ops {
namespace {

struct ActivationSpec {
  const char* name;
  FusedActivationKind kind;
  int num_params;        // what the table of docs/fused-ops.md lists
  float default_p0 = 0;  // the ONNX op's defaults, used when activation_params is empty
  float default_p1 = 0;
};

constexpr float kInf = std::numeric_limits<float>::infinity();

const ActivationSpec kSpecs[] = {
    {"Relu", FusedActivationKind::kRelu, 0},
    {"LeakyRelu", FusedActivationKind::kLeakyRelu, 1, 0.01f},
    {"Clip", FusedActivationKind::kClip, 2, -kInf, kInf},
    {"HardSigmoid", FusedActivationKind::kHardSigmoid, 2, 0.2f, 0.5f},
    {"HardSwish", FusedActivationKind::kHardSwish, 2, 1.0f / 6.0f, 0.5f},
    {"Sigmoid", FusedActivationKind::kSigmoid, 0},
    {"Tanh", FusedActivationKind::kTanh, 0},
    {"Silu", FusedActivationKind::kSilu, 1, 1.0f},  // beta: Swish, x * sigmoid(beta x)
    {"Gelu", FusedActivationKind::kGelu, 0},
    {"GeluTanh", FusedActivationKind::kGeluTanh, 0},
};

template <typename T>
T sigmoid(T x) {
  // The form of the ONNX Sigmoid reference kernel: exp never overflows.
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

template <typename T>
void apply(const FusedActivation& act, T* data, int64_t n) {
  if (act.is_none() || n <= 0) return;
  parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[i] = fused_activation_value<T>(act, data[i]);
  });
}

}  // namespace

template <typename T>
T activation_value(const FusedActivation& act, T x) {
  const T p0 = static_cast<T>(act.p0), p1 = static_cast<T>(act.p1);
  switch (act.kind) {
    case FusedActivationKind::kNone:
      return x;
    case FusedActivationKind::kRelu:
      return x > T(0) ? x : T(0);
    case FusedActivationKind::kLeakyRelu:
      return x >= T(0) ? x : p0 * x;
    case FusedActivationKind::kClip:
      return std::min(std::max(x, p0), p1);
    case FusedActivationKind::kHardSigmoid:
      return std::max(T(0), std::min(T(1), p0 * x + p1));
    case FusedActivationKind::kHardSwish:
      // ONNX HardSwish divides by 6; keep its rounding for its own parameters.
      if (act.p0 == 1.0f / 6.0f && act.p1 == 0.5f) return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
      return x * std::max(T(0), std::min(T(1), p0 * x + p1));
    case FusedActivationKind::kSigmoid:
      return sigmoid(x);
    case FusedActivationKind::kTanh:
      return std::tanh(x);
    case FusedActivationKind::kSilu:
      return x * sigmoid(p0 * x);
    case FusedActivationKind::kGelu:
      return T(0.5) * x * (T(1) + std::erf(x * static_cast<T>(0.7071067811865476)));
    case FusedActivationKind::kGeluTanh: {
      const T k = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }
  }
  return x;
}

template <typename T>
T fused_activation_value(const FusedActivation& act, T x) {
  const T y = activation_value(act, x);
  if (!act.has_post_affine()) return y;
  const T scaled = y * static_cast<T>(act.post_scale);  // rounded, as the unfused Mul
  return scaled + static_cast<T>(act.post_shift);
}

template float fused_activation_value<float>(const FusedActivation&, float);
template double fused_activation_value<double>(const FusedActivation&, double);

Expected<FusedActivation> parse_fused_activation(const ir::Node& node) {
  const std::string label = node.label();
  FusedActivation act;
  const ir::Attribute* name_attr = node.attr("activation");
  const ir::Attribute* params_attr = node.attr("activation_params");
  if (name_attr && name_attr->kind != ir::AttrKind::kString)
    return invalid_argument("node %s: attribute 'activation' must be a string, got %s", label.c_str(),
                            attr_kind_name(name_attr->kind));
  if (params_attr && params_attr->kind != ir::AttrKind::kFloats)
    return invalid_argument("node %s: attribute 'activation_params' must be a list of floats, got %s", label.c_str(),
                            attr_kind_name(params_attr->kind));
  const std::string name = name_attr ? name_attr->s : std::string();
  const std::vector<float> params = params_attr ? params_attr->floats : std::vector<float>();
  const std::pair<const char*, float*> post_affine[] = {{"activation_post_scale", &act.post_scale},
                                                       {"activation_post_shift", &act.post_shift}};
  for (const auto& [attr_name, field] : post_affine) {
    const ir::Attribute* a = node.attr(attr_name);
    if (!a) continue;
    if (a->kind != ir::AttrKind::kFloat)
      return invalid_argument("node %s: attribute '%s' must be a float, got %s", label.c_str(), attr_name,
                              attr_kind_name(a->kind));
    if (name.empty())
      return invalid_argument("node %s: %s is set but there is no activation", label.c_str(), attr_name);
    *field = a->f;
  }
  if (name.empty()) {
    if (!params.empty())
      return invalid_argument("node %s: activation_params has %zu values but there is no activation", label.c_str(),
                              params.size());
    return act;
  }
  for (const ActivationSpec& s : kSpecs) {
    if (name != s.name) continue;
    act.kind = s.kind;
    if (params.empty()) {
      act.p0 = s.default_p0;
      act.p1 = s.default_p1;
    } else if (static_cast<int>(params.size()) == s.num_params) {
      act.p0 = params[0];
      if (s.num_params > 1) act.p1 = params[1];
    } else {
      return invalid_argument("node %s: activation %s takes %d activation_params, got %zu", label.c_str(), name.c_str(),
                              s.num_params, params.size());
    }
    return act;
  }
  return invalid_argument(
      "node %s: unknown activation '%s' (expected Relu, LeakyRelu, Clip, HardSigmoid, HardSwish, Sigmoid, Tanh, "
      "Silu, Gelu or GeluTanh)",
      label.c_str(), name.c_str());
}

void apply_fused_activation(const FusedActivation& act, float* data, int64_t n) { apply(act, data, n); }
void apply_fused_activation(const FusedActivation& act, double* data, int64_t n) { apply(act, data, n); }

Status apply_fused_activation(const ir::Node& node, const FusedActivation& act, Tensor& t) {
  if (t.dtype() == DataType::kFloat32) {
    apply(act, t.data<float>(), t.num_elements());
  } else if (t.dtype() == DataType::kFloat64) {
    apply(act, t.data<double>(), t.num_elements());
  } else if (!act.is_none()) {
    return unsupported("node %s: activation on dtype %s is not supported", node.label().c_str(), dtype_name(t.dtype()));
  }
  return ok_status();
}

Expected<Tensor> run_onnx_reference(KernelContext& ctx, const char* op, int num_inputs,
                                    const std::vector<const RuntimeValue*>& first_inputs) {
  const OpSchema* schema = OpRegistry::instance().find(kOnnxDomain, op, kMaxOpset);
  if (!schema || !schema->kernel_fn())
    return internal_error("node %s: no reference kernel for ONNX %s", ctx.node().label().c_str(), op);
  std::vector<const RuntimeValue*> inputs;
  for (int i = 0; i < num_inputs; ++i)
    inputs.push_back(static_cast<size_t>(i) < first_inputs.size() ? first_inputs[static_cast<size_t>(i)] : ctx.value(i));
  std::vector<RuntimeValue> outputs(1);
  KernelContext inner(ctx.node(), std::move(inputs), &outputs, ctx.subgraphs());
  KILN_RETURN_IF_ERROR(schema->kernel_fn()(inner));
  if (!outputs[0].is_tensor() || !outputs[0].tensor().defined())
    return internal_error("node %s: the %s reference kernel gave no tensor", ctx.node().label().c_str(), op);
  return std::move(outputs[0].tensor());
}

Status run_onnx_inference(InferContext& ctx, const char* op) {
  const OpSchema* schema = OpRegistry::instance().find(kOnnxDomain, op, kMaxOpset);
  if (!schema || !schema->infer_fn())
    return internal_error("node %s: no inference for ONNX %s", ctx.node().label().c_str(), op);
  return schema->infer_fn()(ctx);
}

Expected<int> bf16_parts(const ir::Node& node) {
  const std::string p = node.attr_string("precision", "fp32");
  if (p == "fp32") return 0;
  if (p == "bf16") return 1;
  if (p == "bf16x3" && node.op_type() == "FusedConv") return 3;
  return invalid_argument("node %s: precision '%s': expected fp32, bf16%s", node.label().c_str(), p.c_str(),
                          node.op_type() == "FusedConv" ? " or bf16x3" : "");
}

}  // namespace kiln::ops
