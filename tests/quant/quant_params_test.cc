// Scales, zero points, weight and bias quantisation, and the calibration methods on
// hand-computed cases (the full comparison with NumPy is quantize_test.py).
#include <gtest/gtest.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <vector>

#include "quant/quant_params.h"
#include "quant/tensor_stats.h"

namespace kiln::quant {
namespace {

TEST(QuantParamsTest, UnsignedRangeIsWidenedToZeroAndRoundedHalfToEven) {
  // [-1, 3]: scale 4/255, zero point round(255/4 = 63.75) = 64.
  QuantParams p = activation_params(-1.0, 3.0, ActivationType::kU8);
  EXPECT_FLOAT_EQ(p.scale, 4.0f / 255.0f);
  EXPECT_EQ(p.zero_point, 64);
  // [0.5, 2]: widened to [0, 2], zero point 0.
  p = activation_params(0.5, 2.0, ActivationType::kU8);
  EXPECT_FLOAT_EQ(p.scale, 2.0f / 255.0f);
  EXPECT_EQ(p.zero_point, 0);
  // All negative: [-2, 0], zero point 255.
  p = activation_params(-2.0, -1.0, ActivationType::kU8);
  EXPECT_EQ(p.zero_point, 255);
}

TEST(QuantParamsTest, SignedIsSymmetric) {
  QuantParams p = activation_params(-0.5, 2.54, ActivationType::kS8);
  EXPECT_FLOAT_EQ(p.scale, static_cast<float>(2.54 / 127.0));
  EXPECT_EQ(p.zero_point, 0);
}

TEST(QuantParamsTest, ZeroRangeGivesScaleOne) {
  for (ActivationType t : {ActivationType::kU8, ActivationType::kS8}) {
    QuantParams p = activation_params(0.0, 0.0, t);
    EXPECT_EQ(p.scale, 1.0f);
    EXPECT_EQ(p.zero_point, 0);
  }
}

TEST(QuantParamsTest, QuantizeValueRoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(quantize_value(2.5f, 1.0f, 0, -128, 127), 2);
  EXPECT_EQ(quantize_value(3.5f, 1.0f, 0, -128, 127), 4);
  EXPECT_EQ(quantize_value(-2.5f, 1.0f, 0, -128, 127), -2);
  EXPECT_EQ(quantize_value(1000.0f, 1.0f, 0, -128, 127), 127);
  EXPECT_EQ(quantize_value(-1000.0f, 1.0f, 10, 0, 255), 0);
}

TEST(QuantParamsTest, WeightsPerChannelAlongAxis) {
  // [2, 3] along axis 1: channel maxima 4, 0 (all zero: scale 1), 127.
  std::vector<float> w = {4, 0, -127, -2, 0, 63.5f};
  PerChannelWeights q = quantize_weights_per_channel(w.data(), {2, 3}, 1);
  ASSERT_EQ(q.scales.size(), 3u);
  EXPECT_FLOAT_EQ(q.scales[0], 4.0f / 127.0f);
  EXPECT_EQ(q.scales[1], 1.0f);
  EXPECT_EQ(q.scales[2], 1.0f);
  EXPECT_EQ(q.data, (std::vector<int8_t>{127, 0, -127, -64, 0, 64}));  // 63.5 -> 64 (even)
}

TEST(QuantParamsTest, BiasScaleIsInputTimesWeightScale) {
  std::vector<float> b = {1.0f, -0.5f};
  Int32Bias q = quantize_bias(b.data(), 2, 0.5f, {0.25f, 0.125f});
  EXPECT_EQ(q.scales, (std::vector<float>{0.125f, 0.0625f}));
  EXPECT_EQ(q.data, (std::vector<int32_t>{8, -8}));
}

TEST(TensorStatsTest, MinMaxAndHistogramBins) {
  std::vector<float> x = {-2.0f, 0.0f, 1.0f, 2.0f};
  TensorStats s;
  s.add_minmax(x.data(), 4);
  s.add_histogram(x.data(), 4);
  EXPECT_EQ(s.min(), -2.0);
  EXPECT_EQ(s.max(), 2.0);
  EXPECT_EQ(s.abs_max(), 2.0);
  EXPECT_EQ(s.histogram()[0], 1u);
  EXPECT_EQ(s.histogram()[kHistogramBins / 2], 1u);
  EXPECT_EQ(s.histogram()[kHistogramBins - 1], 2u);  // |x| = max falls in the last bin
}

TEST(TensorStatsTest, PercentileCutsTheTail) {
  // 999 values at 1 and one at 100: the 99.8th percentile of |x| ends in the bin of 1.
  std::vector<float> x(999, 1.0f);
  x.push_back(100.0f);
  TensorStats s;
  s.add_minmax(x.data(), static_cast<int64_t>(x.size()));
  s.add_histogram(x.data(), static_cast<int64_t>(x.size()));
  double t = percentile_threshold(s, 99.8);
  EXPECT_GE(t, 1.0);
  EXPECT_LT(t, 1.0 + 100.0 / kHistogramBins + 1e-9);
  CalibratedRange r = choose_range(s, CalibrationMethod::kPercentile, 99.8);
  EXPECT_EQ(r.lo, 1.0);
  EXPECT_EQ(r.hi, t);
  EXPECT_EQ(percentile_threshold(s, 100.0), 100.0);
}

TEST(TensorStatsTest, EntropyClipsARareOutlier) {
  // An exponential bulk (scale 0.05) and one far outlier: merging the bins of the full range
  // [0, 50] flattens the bulk, so the KL search keeps a range near the bulk.
  std::vector<float> x;
  const int n = 100000;
  for (int i = 0; i < n; ++i) x.push_back(static_cast<float>(-0.05 * std::log((i + 0.5) / n)));
  x.push_back(50.0f);
  TensorStats s;
  s.add_minmax(x.data(), static_cast<int64_t>(x.size()));
  s.add_histogram(x.data(), static_cast<int64_t>(x.size()));
  double t = entropy_threshold(s);
  EXPECT_GT(t, 0.3);
  EXPECT_LT(t, 10.0);
}

TEST(TensorStatsTest, AllZeroTensor) {
  std::vector<float> x(16, 0.0f);
  TensorStats s;
  s.add_minmax(x.data(), 16);
  s.add_histogram(x.data(), 16);
  EXPECT_EQ(entropy_threshold(s), 0.0);
  EXPECT_EQ(percentile_threshold(s, 99.0), 0.0);
  QuantParams p = activation_params(s.min(), s.max(), ActivationType::kU8);
  EXPECT_EQ(p.scale, 1.0f);
}

}  // namespace
}  // namespace kiln::quant
