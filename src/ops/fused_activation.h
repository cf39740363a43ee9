// Shared by Kiln's fused ops (docs/fused-ops.md): the activation that ends FusedConv,
// FusedGemm and FusedMatMul (`activation` / `activation_params` parsed once into a small
// struct, applied in place to a float32 or float64 buffer), and calls into the ONNX
// reference kernels and inference that a fused op extends.
#pragma once

#include <cstdint>
#include <string>

#include "ops/registry.h"

namespace kiln::ops {

enum class FusedActivationKind {
  kNone,
  kRelu,
  kLeakyRelu,
  kClip,
  kHardSigmoid,
  kHardSwish,
  kSigmoid,
  kTanh,
  kSilu,
  kGelu,
  kGeluTanh,
};

struct FusedActivation {
  FusedActivationKind kind = FusedActivationKind::kNone;
  // alpha / lo and beta / hi, depending on the kind.
  float p0 = 0, p1 = 0;
  // An affine step after the activation (attributes `activation_post_scale` and
  // `activation_post_shift`): act(x) * post_scale + post_shift, two roundings as the
  // unfused Mul and Add. PP-LCNetV3's learnable affine after each HardSwish is one.
  float post_scale = 1, post_shift = 0;
  bool has_post_affine() const { return post_scale != 1.0f || post_shift != 0.0f; }
  bool is_none() const { return kind == FusedActivationKind::kNone; }
  // The post-affine alone (for kernels that compute the activation their own way).
  FusedActivation post_affine_only() const {
    FusedActivation a;
    a.post_scale = post_scale;
    a.post_shift = post_shift;
    return a;
  }
};

// Reads `activation` (absent or "" = none), `activation_params` and the post-affine of a fused
// node. The error names the node: unknown name, wrong number of parameters, wrong attribute
// kind, a post-affine without an activation.
Expected<FusedActivation> parse_fused_activation(const ir::Node& node);

// The `precision` attribute (compiler/passes/precision_assignment.cc, docs/fused-ops.md):
//   "fp32" (the default);
//   "bf16": X (A) and W (B) rounded to bfloat16 before the product, summed in float32;
//   "bf16x3" (FusedConv): X and W each split into bfloat16 hi + lo, and the product
//     hi_x*hi_w + hi_x*lo_w + lo_x*hi_w summed in float32: one convolution over three times
//     the input channels, [hi_x | hi_x | lo_x] per group against [hi_w | lo_w | hi_w].
// The addends and the activation stay float32. Returns the bfloat16 parts: 0, 1 or 3.
// Errors name the node. The reference kernels and the fast kernels read it here.
Expected<int> bf16_parts(const ir::Node& node);

// data[i] = act(data[i]) for i in [0, n); parallel in chunks.
void apply_fused_activation(const FusedActivation& act, float* data, int64_t n);
void apply_fused_activation(const FusedActivation& act, double* data, int64_t n);
// Applies to a float32 or float64 tensor; error naming the node for other dtypes.
Status apply_fused_activation(const ir::Node& node, const FusedActivation& act, Tensor& t);

// One element (the formula of the table in docs/fused-ops.md, then the post-affine), for
// callers with their own loops.
template <typename T>
T fused_activation_value(const FusedActivation& act, T x);

extern template float fused_activation_value<float>(const FusedActivation&, float);
extern template double fused_activation_value<double>(const FusedActivation&, double);

// Runs the registered reference kernel of ONNX `op` (default domain, newest opset) on the
// fused node itself with its first `num_inputs` inputs, and returns output 0. The fused
// ops keep the ONNX op's attribute names (Conv's pads, Gemm's transA, LayerNormalization's
// axis), so the ONNX kernel reads them from the fused node; errors name the fused node.
// `first_inputs`, when given, replaces the node's first inputs (the fused ops' bf16 precision
// runs the product on rounded copies of X and W).
Expected<Tensor> run_onnx_reference(KernelContext& ctx, const char* op, int num_inputs,
                                    const std::vector<const RuntimeValue*>& first_inputs = {});
// Runs the ONNX op's shape and type inference on the fused node's context.
Status run_onnx_inference(InferContext& ctx, const char* op);

}  // namespace kiln::ops
