// Layout conversions of the bf16 convolution kernels (bf16_layout.h). Loops are written so
// the compiler vectorises the inner one: along W for plain NCHW (contiguous there), along the
// block of c0 channels for NC1HWC0.
#include "kernels/cpu/bf16_layout.h"

#include <vector>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/parallel.h"

namespace kiln::kernels::bf16 {
namespace {

// Offset of element (n, c, pixel) in `l` (pixel = h * W + w).
inline int64_t offset(const ActivationLayout& l, int64_t n, int64_t c, int64_t pixel) {
  const int64_t hw = l.h * l.w;
  if (l.c0 == 0) return (n * l.c + c) * hw + pixel;
  return ((n * (l.c / l.c0) + c / l.c0) * hw + pixel) * l.c0 + c % l.c0;
}

// Work per parallel task: one row of pixels of one image.
constexpr int64_t kRowGrain = 1;

}  // namespace

// Converts `count` contiguous floats of x (channels c .. c + count - 1 of one pixel) into
// the pixel's NHWC row `o`: part t of channel c lands at (c / cg) * parts * cg + t * cg + c % cg.
// Within one group (cg >= count, the block inside it) the stores are contiguous and the loop
// vectorises; depthwise (cg == 1) interleaves hi, hi, lo per channel.
inline void convert_channels(const float* x, int64_t c, int64_t count, int parts, int64_t cg, uint16_t* o) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  // 16 channels of one group at a time with VCVTNEPS2BF16 (round to nearest even, as
  // float_to_bf16; it reads float32 denormals as zero, which bfloat16 products lose anyway).
  if (count % 16 == 0 && (parts == 1 || (cg % 16 == 0 && c % 16 == 0))) {
    for (int64_t j = 0; j < count; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      const __m256bh hi = _mm512_cvtneps_pbh(v);
      const int64_t ch = c + j;
      if (parts == 1) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + ch), reinterpret_cast<const __m256i&>(hi));
        continue;
      }
      const __m256bh lo = _mm512_cvtneps_pbh(_mm512_sub_ps(v, _mm512_cvtpbh_ps(hi)));
      uint16_t* oc = o + (ch / cg) * 3 * cg + ch % cg;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(oc), reinterpret_cast<const __m256i&>(hi));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(oc + cg), reinterpret_cast<const __m256i&>(hi));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(oc + 2 * cg), reinterpret_cast<const __m256i&>(lo));
    }
    return;
  }
#endif
  if (parts == 1) {
    for (int64_t j = 0; j < count; ++j) o[c + j] = float_to_bf16(x[j]);
    return;
  }
  if (cg == 1) {
    uint16_t* oc = o + c * 3;
    for (int64_t j = 0; j < count; ++j) {
      const uint16_t hi = float_to_bf16(x[j]);
      const uint16_t lo = float_to_bf16(x[j] - bf16_to_float(hi));
      oc[3 * j] = hi;
      oc[3 * j + 1] = hi;
      oc[3 * j + 2] = lo;
    }
    return;
  }
  if (c / cg == (c + count - 1) / cg) {
    uint16_t* oc = o + (c / cg) * 3 * cg + c % cg;
    for (int64_t j = 0; j < count; ++j) {
      const uint16_t hi = float_to_bf16(x[j]);
      const uint16_t lo = float_to_bf16(x[j] - bf16_to_float(hi));
      oc[j] = hi;
      oc[j + cg] = hi;
      oc[j + 2 * cg] = lo;
    }
    return;
  }
  for (int64_t j = 0; j < count; ++j) convert_channels(x + j, c + j, 1, parts, cg, o);  // straddles groups
}

void to_nhwc_bf16(const float* x, const ActivationLayout& l, int parts, int64_t groups, uint16_t* out) {
  const int64_t cg = l.c / groups, cp = l.c * parts;
  parallel_for(0, l.n * l.h, kRowGrain, [&](int64_t begin, int64_t end) {
    // Plain NCHW: a pixel's channels are H*W apart; gather them into a row first.
    std::vector<float> gathered(l.c0 == 0 ? static_cast<size_t>(l.c) : 0);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / l.h, pixel0 = (row % l.h) * l.w;
      for (int64_t p = 0; p < l.w; ++p) {
        uint16_t* o = out + (n * l.h * l.w + pixel0 + p) * cp;
        if (l.c0 != 0) {
          for (int64_t c = 0; c < l.c; c += l.c0)
            convert_channels(x + offset(l, n, c, pixel0 + p), c, l.c0, parts, cg, o);
        } else {
          for (int64_t c = 0; c < l.c; ++c) gathered[static_cast<size_t>(c)] = x[offset(l, n, c, pixel0 + p)];
          convert_channels(gathered.data(), 0, l.c, parts, cg, o);
        }
      }
    }
  });
}

void split_weights_bf16x3(const float* w, int64_t o, int64_t cg, int64_t k, float* out) {
  for (int64_t i = 0; i < o; ++i)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t e = 0; e < k; ++e) {
        const float v = w[(i * cg + c) * k + e];
        const float hi = bf16_to_float(float_to_bf16(v));
        const float lo = bf16_to_float(float_to_bf16(v - hi));
        float* oi = out + i * 3 * cg * k;
        oi[(c)*k + e] = hi;
        oi[(cg + c) * k + e] = lo;
        oi[(2 * cg + c) * k + e] = hi;
      }
}

// Copies between NHWC and `l`; to_nhwc: direction.
template <bool kToNhwc>
void convert(const float* src, const ActivationLayout& l, float* dst) {
  const int64_t hw = l.h * l.w;
  parallel_for(0, l.n * l.h, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / l.h, pixel0 = (row % l.h) * l.w;
      const int64_t nhwc0 = (n * hw + pixel0) * l.c;
      if (l.c0 != 0) {
        // Blocks of c0 contiguous channels on both sides.
        for (int64_t c1 = 0; c1 < l.c / l.c0; ++c1)
          for (int64_t p = 0; p < l.w; ++p) {
            const int64_t a = nhwc0 + p * l.c + c1 * l.c0;
            const int64_t b = offset(l, n, c1 * l.c0, pixel0 + p);
            // An inlined loop: a memcpy call per 64-byte block cost more than the copy.
            const float* from = src + (kToNhwc ? b : a);
            float* to = dst + (kToNhwc ? a : b);
            for (int64_t j = 0; j < l.c0; ++j) to[j] = from[j];
          }
        continue;
      }
      for (int64_t c = 0; c < l.c; ++c) {
        const int64_t b = offset(l, n, c, pixel0);
        for (int64_t p = 0; p < l.w; ++p) {
          if (kToNhwc) {
            dst[nhwc0 + p * l.c + c] = src[b + p];
          } else {
            dst[b + p] = src[nhwc0 + p * l.c + c];
          }
        }
      }
    }
  });
}

void nhwc_to_layout(const float* src, const ActivationLayout& l, float* dst) { convert<false>(src, l, dst); }
void layout_to_nhwc(const float* src, const ActivationLayout& l, float* dst) { convert<true>(src, l, dst); }

}  // namespace kiln::kernels::bf16
