// Scales and zero points of int8 / uint8 quantisation, and the quantisation of weights and
// biases: the formulas of docs/quantization.md, shared by the QDQ writer and the report.
//
// All rounding is half to even (std::nearbyint in the default rounding mode, as
// QuantizeLinear), and every quantised value saturates to its type's range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::quant {

// The integer type of quantised activations (--activation-type).
enum class ActivationType {
  kU8,  // uint8, asymmetric: zero point in [0, 255]
  kS8,  // int8, symmetric: zero point 0
};

struct QuantParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
};

// Per-tensor activation parameters for the calibrated range [lo, hi]. The range is first
// widened to contain 0 (so that 0 is exact: padding, ReLU).
//   u8: scale = (hi - lo) / 255, zero_point = clamp(round(-lo / scale), 0, 255)
//   s8: scale = max(|lo|, |hi|) / 127, zero_point = 0
// A range of zero width (scale below FLT_MIN) gives scale 1 and zero point 0 (as ONNX
// Runtime's quantiser does), which represents the constant 0 exactly.
QuantParams activation_params(double lo, double hi, ActivationType type);

// round(x / scale) + zero_point saturated to [qmin, qmax]; x / scale is computed in float32,
// as QuantizeLinear does.
int32_t quantize_value(float x, float scale, int32_t zero_point, int32_t qmin, int32_t qmax);

// Symmetric int8 weights, one scale per slice along `axis` (the output channels):
//   scale[c] = max|w[c]| / 127 (1 for an all-zero channel), q = clamp(round(w / scale[c]), -127, 127)
// -128 is never used, so that the range is symmetric (what int8 kernels with VNNI expect).
struct PerChannelWeights {
  std::vector<int8_t> data;   // same shape as the float weights
  std::vector<float> scales;  // one per channel
};
PerChannelWeights quantize_weights_per_channel(const float* w, const std::vector<int64_t>& dims, int axis);

// int32 bias of a Conv / Gemm whose input has scale `x_scale` and whose weights have the
// per-channel `w_scales`: bias_scale[c] = x_scale * w_scale[c] (float32 product),
// q = clamp(round(b / bias_scale[c]), INT32_MIN, INT32_MAX); the zero point is 0.
struct Int32Bias {
  std::vector<int32_t> data;
  std::vector<float> scales;
};
Int32Bias quantize_bias(const float* b, size_t n, float x_scale, const std::vector<float>& w_scales);

const char* activation_type_name(ActivationType type);

}  // namespace kiln::quant
