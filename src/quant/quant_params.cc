// Scales, zero points and the quantisation of weights and biases (quant_params.h).
#include "quant/quant_params.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>

namespace kiln::quant {

QuantParams activation_params(double lo, double hi, ActivationType type) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  QuantParams p;
  if (type == ActivationType::kU8) {
    p.scale = static_cast<float>((hi - lo) / 255.0);
    if (!(p.scale >= FLT_MIN)) return QuantParams{1.0f, 0};
    double zp = std::nearbyint(-lo / static_cast<double>(p.scale));
    p.zero_point = static_cast<int32_t>(std::clamp(zp, 0.0, 255.0));
  } else {
    double amax = std::max(std::fabs(lo), std::fabs(hi));
    p.scale = static_cast<float>(amax / 127.0);
    if (!(p.scale >= FLT_MIN)) return QuantParams{1.0f, 0};
    p.zero_point = 0;
  }
  return p;
}

int32_t quantize_value(float x, float scale, int32_t zero_point, int32_t qmin, int32_t qmax) {
  double q = std::nearbyint(static_cast<double>(x / scale)) + zero_point;
  return static_cast<int32_t>(std::clamp(q, static_cast<double>(qmin), static_cast<double>(qmax)));
}

PerChannelWeights quantize_weights_per_channel(const float* w, const std::vector<int64_t>& dims, int axis) {
  int64_t outer = 1, channels = dims[static_cast<size_t>(axis)], inner = 1;
  for (int i = 0; i < axis; ++i) outer *= dims[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < dims.size(); ++i) inner *= dims[i];
  PerChannelWeights out;
  out.scales.assign(static_cast<size_t>(channels), 0.0f);
  std::vector<double> amax(static_cast<size_t>(channels), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i)
        amax[static_cast<size_t>(c)] =
            std::max(amax[static_cast<size_t>(c)], static_cast<double>(std::fabs(w[(o * channels + c) * inner + i])));
  for (int64_t c = 0; c < channels; ++c) {
    float s = static_cast<float>(amax[static_cast<size_t>(c)] / 127.0);
    out.scales[static_cast<size_t>(c)] = s >= FLT_MIN ? s : 1.0f;
  }
  out.data.resize(static_cast<size_t>(outer * channels * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = (o * channels + c) * inner + i;
        out.data[static_cast<size_t>(k)] =
            static_cast<int8_t>(quantize_value(w[k], out.scales[static_cast<size_t>(c)], 0, -127, 127));
      }
  return out;
}

Int32Bias quantize_bias(const float* b, size_t n, float x_scale, const std::vector<float>& w_scales) {
  Int32Bias out;
  out.data.resize(n);
  out.scales.resize(n);
  for (size_t c = 0; c < n; ++c) {
    float s = x_scale * w_scales[w_scales.size() == 1 ? 0 : c];
    out.scales[c] = s;
    out.data[c] = quantize_value(b[c], s, 0, INT32_MIN, INT32_MAX);
  }
  return out;
}

const char* activation_type_name(ActivationType type) { return type == ActivationType::kU8 ? "u8" : "s8"; }

}  // namespace kiln::quant
