// Calibration statistics and the ranges of minmax, percentile and entropy (tensor_stats.h).
#include "quant/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::quant {

const char* calibration_method_name(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::kMinMax: return "minmax";
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
  }
  return "?";
}

void TensorStats::add_minmax(const float* x, int64_t n) {
  if (n <= 0) return;
  float lo = x[0], hi = x[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (count_ == 0) {
    min_ = lo;
    max_ = hi;
  } else {
    min_ = std::min(min_, static_cast<double>(lo));
    max_ = std::max(max_, static_cast<double>(hi));
  }
  count_ += n;
}

double TensorStats::abs_max() const { return count_ ? std::max(std::fabs(min_), std::fabs(max_)) : 0.0; }

void TensorStats::add_histogram(const float* x, int64_t n) {
  if (hist_.empty()) hist_.assign(kHistogramBins, 0);
  const double amax = abs_max();
  if (amax <= 0) {
    hist_[0] += static_cast<uint64_t>(n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    double b = std::floor(std::fabs(static_cast<double>(x[i])) / amax * kHistogramBins);
    int bin = b >= kHistogramBins ? kHistogramBins - 1 : static_cast<int>(b);
    ++hist_[static_cast<size_t>(bin)];
  }
}

double percentile_threshold(const TensorStats& s, double percentile) {
  const auto& h = s.histogram();
  uint64_t total = 0;
  for (uint64_t c : h) total += c;
  if (h.empty() || total == 0) return s.abs_max();
  uint64_t cum = 0;
  for (int i = 0; i < kHistogramBins; ++i) {
    cum += h[static_cast<size_t>(i)];
    if (static_cast<double>(cum) / static_cast<double>(total) >= percentile / 100.0) return s.bin_edge(i + 1);
  }
  return s.abs_max();
}

namespace {

// Adds eps to the zero entries and takes the same total evenly from the non-zero ones
// (onnxruntime's smooth_distribution). False if every entry is zero.
bool smooth(std::vector<double>& p, double eps = 1e-4) {
  size_t zeros = 0;
  for (double v : p) zeros += v == 0;
  size_t nonzeros = p.size() - zeros;
  if (nonzeros == 0) return false;
  double eps1 = eps * static_cast<double>(zeros) / static_cast<double>(nonzeros);
  for (double& v : p) v += v == 0 ? eps : -eps1;
  return true;
}

// KL(P || Q) of two unnormalised distributions (scipy.stats.entropy).
double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sp += p[i];
    sq += q[i];
  }
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    double pi = p[i] / sp, qi = q[i] / sq;
    if (pi > 0) kl += pi * std::log(pi / qi);
  }
  return kl;
}

}  // namespace

double entropy_threshold(const TensorStats& s) {
  if (s.histogram().empty() || s.abs_max() <= 0) return s.abs_max();
  // The zero bin takes the count of its neighbour (as NVIDIA's pytorch-quantization does): the
  // exact zeros after a ReLU are a spike that merging would smear over a whole group of bins,
  // which makes every wide candidate look bad and clips far too much.
  std::vector<uint64_t> h = s.histogram();
  h[0] = h[1];
  const int nq = kEntropyQuantizedBins;
  double best_kl = std::numeric_limits<double>::infinity();
  int best_i = kHistogramBins;
  std::vector<double> p, q;
  for (int i = nq; i <= kHistogramBins; ++i) {
    // 1. The reference P: the first i bins, everything beyond clipped into the last one.
    p.assign(h.begin(), h.begin() + i);
    for (int k = i; k < kHistogramBins; ++k) p[static_cast<size_t>(i - 1)] += static_cast<double>(h[static_cast<size_t>(k)]);
    // 2. The candidate Q: the i bins merged into nq (the last one takes the remainder), each
    //    spread evenly over the non-zero bins of P it covers.
    const int merged = i / nq;
    q.assign(static_cast<size_t>(i), 0.0);
    for (int j = 0; j < nq; ++j) {
      int start = j * merged, stop = j == nq - 1 ? i : start + merged;
      double sum = 0;
      int nonzero = 0;
      for (int k = start; k < stop; ++k) {
        sum += static_cast<double>(h[static_cast<size_t>(k)]);
        nonzero += p[static_cast<size_t>(k)] != 0;
      }
      if (nonzero == 0) continue;
      for (int k = start; k < stop; ++k)
        if (p[static_cast<size_t>(k)] != 0) q[static_cast<size_t>(k)] = sum / nonzero;
    }
    // 3. KL(P || Q) of the smoothed distributions; the least wins (the first on ties).
    if (!smooth(p) || !smooth(q)) continue;
    double kl = kl_divergence(p, q);
    if (kl < best_kl) {
      best_kl = kl;
      best_i = i;
    }
  }
  return s.bin_edge(best_i);
}

CalibratedRange choose_range(const TensorStats& s, CalibrationMethod method, double percentile) {
  CalibratedRange r{s.min(), s.max(), s.abs_max()};
  if (method == CalibrationMethod::kMinMax) return r;
  double t = method == CalibrationMethod::kPercentile ? percentile_threshold(s, percentile) : entropy_threshold(s);
  r.threshold = t;
  r.lo = std::max(r.lo, -t);
  r.hi = std::min(r.hi, t);
  return r;
}

}  // namespace kiln::quant
