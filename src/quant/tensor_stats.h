// Statistics of one calibrated tensor over the calibration set, and the ranges the
// calibration methods choose from them (docs/quantization.md "Calibration methods").
//
// Collection takes two passes over the data when a histogram is needed: the first finds
// min, max and max|x|; the second fills a histogram of |x| with kHistogramBins bins of equal
// width over [0, max|x|]. A value falls in bin floor(|x| / max|x| * kHistogramBins) (computed
// in double, the last bin closed), so the histogram is exactly reproducible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::quant {

inline constexpr int kHistogramBins = 2048;
// Levels of one sign of an 8-bit type: the quantised distribution of the entropy search.
inline constexpr int kEntropyQuantizedBins = 128;

enum class CalibrationMethod { kMinMax, kPercentile, kEntropy };

const char* calibration_method_name(CalibrationMethod m);

class TensorStats {
 public:
  // Pass 1: min, max, max|x| and the element count.
  void add_minmax(const float* x, int64_t n);
  // Pass 2 (after every add_minmax): the histogram of |x| over [0, abs_max()].
  void add_histogram(const float* x, int64_t n);

  double min() const { return count_ ? min_ : 0.0; }
  double max() const { return count_ ? max_ : 0.0; }
  double abs_max() const;
  int64_t count() const { return count_; }
  const std::vector<uint64_t>& histogram() const { return hist_; }
  // The upper edge of histogram bin i (i + 1 bins wide from 0).
  double bin_edge(int i) const { return abs_max() * i / kHistogramBins; }

 private:
  double min_ = 0, max_ = 0;
  int64_t count_ = 0;
  std::vector<uint64_t> hist_;
};

// The threshold T on |x| that a histogram method chooses:
//   percentile p: the upper edge of the first bin at which the cumulative share of |x|
//     reaches p / 100;
//   entropy: TensorRT's search (as onnxruntime's EntropyCalibrater, one-sided on |x|): the zero
//     bin's count is first replaced by bin 1's (NVIDIA pytorch-quantization's
//     _compute_amax_entropy: the spike of exact zeros after ReLU would dominate); then for each
//     i in [128, 2048], P = the first i bins with every count beyond added to bin i - 1,
//     Q = those i bins merged into 128 and spread back over their non-zero bins; both smoothed
//     (zeros get 1e-4, taken evenly from the non-zeros), normalised, and the i of the least
//     KL(P || Q) gives T = bin_edge(i).
double percentile_threshold(const TensorStats& s, double percentile);
double entropy_threshold(const TensorStats& s);

// The range [lo, hi] a method chooses: min/max for minmax; for the histogram methods the
// observed [min, max] clipped to [-T, T].
struct CalibratedRange {
  double lo = 0, hi = 0;
  double threshold = 0;  // T for the histogram methods, else max|x|
};
CalibratedRange choose_range(const TensorStats& s, CalibrationMethod method, double percentile);

}  // namespace kiln::quant
