// What the oneDNN int8 kernels (qlinear_conv.cc, qlinear_matmul.cc) read from a node for
// their requantising epilogue, checked the same way for both: symmetric weights, the int32
// bias as the float32 oneDNN 2.6 adds to the accumulator, and the activation.
#pragma once

#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/fused_activation.h"

namespace kiln::kernels::int8 {

// Every weight zero point is 0 (null: none given). oneDNN's int8 kernels take no weight zero
// points.
Status check_symmetric_weights(const ir::Node& node, const Tensor* zero_points);

// The requantisation factors x_scale * w_scale[c] / y_scale: finite and positive, else the
// node runs its reference kernel (which defines what a zero or NaN scale gives).
Status check_output_scales(const ir::Node& node, const std::vector<float>& scales);

// The int32 bias (null: none) of `n` values as float32, which oneDNN adds to the accumulator
// (converted to float32 itself) before the output scale. Both are exact below 2^24; above, the
// sum is off by a relative 2^-24 before requantisation, a tie at most one step away. (Biases
// that large come from near-zero weight channels, whose tiny scales make b / (x_scale *
// w_scale) huge: PP-OCRv4's recogniser has some.)
Expected<std::vector<float>> float_bias(const ir::Node& node, const Tensor* bias, int64_t n);

// The fused activation of a FusedQLinearConv / FusedQLinearMatMul: none, Relu or Clip(lo <= hi),
// as the epilogue applies it. With a quantised output it runs in units of y_scale (before the
// zero point), so Clip's bounds are divided by `y_scale` (0: float32 output, bounds as they are).
Expected<ops::FusedActivation> epilogue_activation(const ir::Node& node, double y_scale);

// A float32 vector memory holding `values` (the bias), laid out as `md`. Throws dnnl::error.
dnnl::memory float_memory(const dnnl::memory::desc& md, const std::vector<float>& values);

}  // namespace kiln::kernels::int8
