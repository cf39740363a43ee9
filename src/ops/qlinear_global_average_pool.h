// kiln QLinearGlobalAveragePool's geometry and requantisation (ops/qlinear_global_average_pool.cc),
// shared by the reference kernel and the fast one (kernels/cpu/qlinear_global_average_pool.cc)
// so that both round the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace kiln::ops {

// X read as N images of `positions` pixels of C channels, plain or channels-last.
struct QGapShape {
  int64_t n = 0, c = 0, positions = 0;
  bool channels_last = false;  // x_format NC1HWC0: X is [N, 1, H, W, C]
  std::vector<int64_t> y_dims;
};

// From the node's x_format and X's dims; invalid_argument naming the node when they disagree.
Expected<QGapShape> qgap_shape(const ir::Node& node, const std::vector<int64_t>& x_dims);

// The zero points and the factor x_scale / (positions * y_scale), in double.
struct QGapParams {
  int32_t x_zero_point = 0, y_zero_point = 0;
  double factor = 1;
};

// From the scale and zero-point inputs (zero points may be null: 0); invalid_argument naming
// the node for a scale that is not one float32, a zero point that is not one value of
// `x_dtype`, or a factor that is not finite.
Expected<QGapParams> qgap_params(const ir::Node& node, const Tensor* x_scale, const Tensor* x_zp,
                                 const Tensor* y_scale, const Tensor* y_zp, DataType x_dtype, int64_t positions);

// Y for one channel's centred sum S = sum (X - x_zero_point): round half to even, saturate.
template <typename T>
T qgap_quantize(int64_t centred_sum, const QGapParams& q) {
  const double v = std::nearbyint(static_cast<double>(centred_sum) * q.factor) + q.y_zero_point;
  return static_cast<T>(std::clamp(v, double(std::numeric_limits<T>::lowest()), double(std::numeric_limits<T>::max())));
}

}  // namespace kiln::ops
