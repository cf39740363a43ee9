// Fast kernel for kiln Aipp (ops/aipp_params.h): every format, crop, bilinear resize, colour
// conversion, normalisation and padding in one pass over the OUTPUT pixels, writing the
// model's float32 input directly (no intermediate RGB image, no full-frame conversion: a
// 1080p frame resized to 224x224 reads ~4 of its 2M pixels per output pixel).
//
// Per output row (rows of all images in parallel, each thread a contiguous range):
//   1. the two source rows of the vertical taps, each resampled horizontally once into a
//      per-thread row cache (consecutive output rows share a source row when the vertical
//      scale is under 2; 4:2:0 caches its chroma rows apart, each serving two pixel rows):
//      per SIMD vector of output columns, the source columns x0, x0+1 of each lane are
//      fetched with 32-bit gathers at byte offsets (one gather brings Y[x0] and Y[x0+1], or
//      the chroma pairs of both), or, for semi-planar YUV on AVX-512 VBMI, with byte permutes
//      of 128-byte windows (made once per plan: the column taps are the same for every row)
//      straight into each lane's low byte; then a + wx (b - a) per channel (only a where
//      every weight of the vector is 0: integer downscales);
//   2. the vertical blend of the two cached rows, then the colour conversion and the
//      normalisation as one matrix (scaled by var_reci at plan time, the clamp mapped through
//      it), or the normalisation as one FMA without CSC, stored per channel plane (NCHW;
//      non-temporal stores for outputs over kStreamBytes) or interleaved (NHWC); padding
//      around the region.
// Taps at the right/bottom edge use x0 = in-2 with weight 1 on x0+1 (the same value as the
// clamped tap), so x0+1 is always inside the crop; source rows whose vector loads could read
// past the end of the image buffer (the last rows of the last image, except through the byte
// windows, which stay inside their row) and crops one pixel wide or high take the scalar
// path, which computes the same steps per pixel.
//
// Where the time goes (1080p NV12 -> 640x640, one Zen 5 core, perf on
// bench/aipp/preprocess_bench, about 0.36-0.50 ms; docs/aipp.md): the rows alone (output into
// an L1 buffer) 0.34-0.40 ms, of which the luma rows about 40% (their loads of the source
// rows, which are in L3 at best: 3.1 MB), the chroma rows and the region rows (step 2) about a
// quarter each; the 4.9 MB output's non-temporal stores add 0.05-0.1 ms.
//
// Highway, AVX-512 / AVX2 / baseline picked at prepare (simd_dispatch.h). The arithmetic is
// float32 (the reference computes in double): tests/preprocess/aipp_test.py allows 1e-5
// relative.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/aipp.h"
#include "kernels/cpu/aipp_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/aipp.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::aipp_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

// Byte k (0..3) of each 32-bit lane, as float.
HWY_INLINE VF byte_of(VI v, int k) {
  const DF df;
  const DI di;
  VI b = k == 0 ? v : k == 1 ? hn::ShiftRight<8>(v) : k == 2 ? hn::ShiftRight<16>(v) : hn::ShiftRight<24>(v);
  return hn::ConvertTo(df, hn::And(b, hn::Set(di, 0xFF)));
}

HWY_INLINE VI gather(const uint8_t* base, VI offsets) {
  const DI di;
  return hn::GatherOffset(di, reinterpret_cast<const int32_t*>(base), offsets);
}

// The channels (before CSC) of source pixels x0 (a) and x0 + 1 (b) of row y, per lane.
struct Pair {
  VF a[4], b[4];
};

// Which channels of a source row are resampled: all of them, or for 4:2:0, whose chroma row
// serves two pixel rows, the luma (channel 0) and the chroma (1, 2) apart, so that each
// chroma row is resampled once, not once per pixel row (RowCache).
enum class Part { kAll, kLuma, kChroma };
constexpr int part_first(Part part) { return part == Part::kChroma ? 1 : 0; }
constexpr int part_end(Part part, int channels) { return part == Part::kLuma ? 1 : part == Part::kChroma ? 3 : channels; }

template <ops::AippFormat kFormat, Part kPart = Part::kAll>
HWY_INLINE void fetch_pair(const ImagePlan& p, const uint8_t* img, int32_t y, VI x0, Pair& r) {
  const DI di;
  const DF df;
  const int64_t w = p.src_w, h = p.src_h;
  const VI one = hn::Set(di, 1);
  switch (kFormat) {
    case ops::AippFormat::kYuv420sp:
    case ops::AippFormat::kYuv422sp: {
      const uint8_t* yrow = img + y * w;
      const uint8_t* uvrow = img + h * w + (kFormat == ops::AippFormat::kYuv420sp ? (y / 2) : y) * w;
      if (kPart != Part::kChroma) {
        const VI yy = gather(yrow, x0);
        r.a[0] = byte_of(yy, 0), r.b[0] = byte_of(yy, 1);
      }
      if (kPart != Part::kLuma) {
        const VI uv = gather(uvrow, hn::AndNot(one, x0));  // U V of x0's pair, then the next
        const auto odd = hn::RebindMask(df, hn::Eq(hn::And(x0, one), one));
        const VF u0 = byte_of(uv, 0), v0 = byte_of(uv, 1), u1 = byte_of(uv, 2), v1 = byte_of(uv, 3);
        // x0 even: both pixels use pair 0; x0 odd: x0 uses pair 0, x0 + 1 pair 1.
        r.a[1] = u0, r.a[2] = v0;
        r.b[1] = hn::IfThenElse(odd, u1, u0), r.b[2] = hn::IfThenElse(odd, v1, v0);
      }
      break;
    }
    case ops::AippFormat::kYuyv: {
      const uint8_t* row = img + y * w * 2;
      const VI pair = hn::ShiftLeft<2>(hn::ShiftRight<1>(x0));  // byte offset of x0's Y0 U Y1 V
      const VI q0 = gather(row, pair), q1 = gather(row, hn::Add(pair, hn::Set(di, 4)));
      const auto odd = hn::RebindMask(df, hn::Eq(hn::And(x0, one), one));
      // x0 even: Y0, Y1 of q0; x0 odd: Y1 of q0 and Y0 of q1 (with q1's chroma).
      r.a[0] = hn::IfThenElse(odd, byte_of(q0, 2), byte_of(q0, 0));
      r.b[0] = hn::IfThenElse(odd, byte_of(q1, 0), byte_of(q0, 2));
      r.a[1] = byte_of(q0, 1), r.a[2] = byte_of(q0, 3);
      r.b[1] = hn::IfThenElse(odd, byte_of(q1, 1), byte_of(q0, 1));
      r.b[2] = hn::IfThenElse(odd, byte_of(q1, 3), byte_of(q0, 3));
      break;
    }
    case ops::AippFormat::kYuv400: {
      const VI yy = gather(img + y * w, x0);
      r.a[0] = byte_of(yy, 0), r.b[0] = byte_of(yy, 1);
      r.a[1] = r.a[2] = r.b[1] = r.b[2] = hn::Zero(df);
      break;
    }
    case ops::AippFormat::kRgb888: {
      const VI off = hn::Mul(x0, hn::Set(di, 3));
      const VI q0 = gather(img + y * w * 3, off), q1 = gather(img + y * w * 3, hn::Add(off, hn::Set(di, 3)));
      for (int c = 0; c < 3; ++c) r.a[c] = byte_of(q0, c), r.b[c] = byte_of(q1, c);
      break;
    }
    default: {  // 4-byte formats
      const VI off = hn::ShiftLeft<2>(x0);
      const VI q0 = gather(img + y * w * 4, off), q1 = gather(img + y * w * 4, hn::Add(off, hn::Set(di, 4)));
      // Without ax_swap the alpha/X byte is first.
      const int first = p.ax_swap ? 0 : 1, alpha = p.ax_swap ? 3 : 0;
      for (int c = 0; c < 3; ++c) r.a[c] = byte_of(q0, first + c), r.b[c] = byte_of(q1, first + c);
      r.a[3] = byte_of(q0, alpha), r.b[3] = byte_of(q1, alpha);
      break;
    }
  }
  if (kPart != Part::kLuma && p.rbuv_swap) {
    constexpr int i = kFormat == ops::AippFormat::kRgb888 || kFormat == ops::AippFormat::kXrgb8888 ||
                              kFormat == ops::AippFormat::kArgb8888
                          ? 0
                          : 1;
    const VF a = r.a[i], b = r.b[i];
    r.a[i] = r.a[2], r.b[i] = r.b[2];
    r.a[2] = a, r.b[2] = b;
  }
}

// Steps 4 and 5 on one pixel's channels, in place, folded at plan time (ImagePlan::csc_m):
// out_r = clamp(sum_j csc_m[3r + j] (in_j - ib_j) + csc_b[r], csc_lo[r], csc_hi[r]). The
// same value as clamping to [0, 255] and then normalising, in three FMAs and a clamp per
// channel instead of four FMAs and a clamp (float32 rounds differently, by about 1e-7 of the
// channel's range: docs/aipp.md). The input biases are subtracted first, not folded into the
// output bias: the terms summed stay near the data's own size (a folded BT.601 bias doubles
// them, and the float32 rounding of the sum with them).
// The constants as vectors, set once per row (the compiler cannot keep them in registers
// across the row's stores by itself: they might alias).
struct CscVectors {
  VF m[9], ib[3], b[3], lo[3], hi[3];
  explicit CscVectors(const ImagePlan& p) {
    const DF df;
    for (int i = 0; i < 9; ++i) m[i] = hn::Set(df, p.csc_m[i]);
    for (int r = 0; r < 3; ++r) {
      ib[r] = hn::Set(df, p.ib[r]), b[r] = hn::Set(df, p.csc_b[r]);
      lo[r] = hn::Set(df, p.csc_lo[r]), hi[r] = hn::Set(df, p.csc_hi[r]);
    }
  }
};

HWY_INLINE void csc_normalised(const CscVectors& k, VF c[4]) {
  const VF d0 = hn::Sub(c[0], k.ib[0]), d1 = hn::Sub(c[1], k.ib[1]), d2 = hn::Sub(c[2], k.ib[2]);
  VF out[3];
  for (int r = 0; r < 3; ++r) {
    VF s = hn::MulAdd(k.m[r * 3 + 2], d2, k.b[r]);
    s = hn::MulAdd(k.m[r * 3 + 1], d1, s);
    s = hn::MulAdd(k.m[r * 3 + 0], d0, s);
    out[r] = hn::Min(hn::Max(s, k.lo[r]), k.hi[r]);
  }
  c[0] = out[0], c[1] = out[1], c[2] = out[2];
}

void csc_normalised_scalar(const ImagePlan& p, float v[4]) {
  const float d[3] = {v[0] - p.ib[0], v[1] - p.ib[1], v[2] - p.ib[2]};
  for (int r = 0; r < 3; ++r) {
    float s = p.csc_b[r] + p.csc_m[r * 3 + 2] * d[2];
    s += p.csc_m[r * 3 + 1] * d[1];
    s += p.csc_m[r * 3 + 0] * d[0];
    v[r] = std::min(std::max(s, p.csc_lo[r]), p.csc_hi[r]);
  }
}

// Step 2 and the horizontal half of step 3 for source row y: per region column x,
// a + wx (b - a) of the channels of pixels a = (x0, y), b = (x0 + 1, y), into channel rows
// h[c] (row stride `stride`). Columns [0, x_end), x_end a multiple of the lanes.
template <ops::AippFormat kFormat, int kChannels, Part kPart = Part::kAll>
HWY_NOINLINE void hrow_vectors(const ImagePlan& p, const uint8_t* img, int32_t y, int64_t x_end, float* h,
                               int64_t stride) {
  const DF df;
  const DI di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int32_t* x0s = p.x0.data();
  const float* wxs = p.wx.data();
  for (int64_t x = 0; x < x_end; x += lanes) {
    const VI x0 = hn::LoadU(di, x0s + x);
    const VF wx = hn::LoadU(df, wxs + x);
    Pair px;
    fetch_pair<kFormat, kPart>(p, img, y, x0, px);
    // kChannels a constant: px stays in registers.
    for (int c = part_first(kPart); c < part_end(kPart, kChannels); ++c)
      hn::StoreU(hn::MulAdd(wx, hn::Sub(px.b[c], px.a[c]), px.a[c]), df, h + c * stride + x);
  }
}

template <ops::AippFormat kFormat>
void hrow_channels(const ImagePlan& p, const uint8_t* img, int32_t y, int64_t x_end, int channels, float* h,
                   int64_t stride) {
  if (channels == 1) return hrow_vectors<kFormat, 1>(p, img, y, x_end, h, stride);
  if (channels == 4) return hrow_vectors<kFormat, 4>(p, img, y, x_end, h, stride);
  return hrow_vectors<kFormat, 3>(p, img, y, x_end, h, stride);
}

// The target that reads semi-planar rows through ImagePlan::byte_windows.
constexpr bool kWindowTarget = HWY_TARGET == HWY_AVX3_DL;

#if HWY_TARGET == HWY_AVX3_DL
// The semi-planar rows on AVX-512 VBMI (ImagePlan::byte_windows): per 16 region columns, each
// tap's bytes with one vpermt2b per window straight into the lanes' low bytes (ByteWindows),
// converted with no shift or mask. Luma: 2 permutes, 2 conversions and the blend per vector
// (a gather and a byte split before: about half the instructions).

// Lanes' bytes `row[win + idx]` of window k of w (0 where the lane reads the other window).
HWY_INLINE __m512i window_lanes(const uint8_t* row, const ByteWindows& w, int k, __m512i idx) {
  const uint8_t* a = row + w.win[k];
  return _mm512_maskz_permutex2var_epi8(w.mask[k], _mm512_loadu_si512(a), idx, _mm512_loadu_si512(a + 64));
}

// One row's taps through the windows. Luma (one output): h[x] = Y[x0] + wx (Y[x0 + 1] - Y[x0]).
// Chroma (two outputs, U V pairs): pixel x0 takes the pair at byte x0 & ~1, pixel x0 + 1 the
// pair at (x0 + 1) & ~1; a pair's first byte goes to out[0], its second to out[1].
template <bool kChroma>
HWY_NOINLINE void window_row(const ImagePlan& p, const ByteWindows* HWY_RESTRICT windows, const uint8_t* row,
                             int64_t x_end, float* HWY_RESTRICT out0, float* HWY_RESTRICT out1) {
  constexpr int kOuts = kChroma ? 2 : 1;
  const int32_t* HWY_RESTRICT x0s = p.x0.data();
  const float* HWY_RESTRICT wxs = p.wx.data();
  float* const out[2] = {out0, out1};
  const __m512i one = _mm512_set1_epi32(1);
  for (int64_t x = 0; x < x_end; x += 16) {
    const ByteWindows& w = windows[x / 16];
    const __m512i x0 = _mm512_loadu_si512(x0s + x);
    __m512i taps[2 * kOuts];  // output o: taps 2o (x0) and 2o + 1 (x0 + 1)
    if (!w.blend) {
      // Every weight 0 (an integer downscale: 1920 -> 640): the value of x0, exactly what the
      // blend gives, from half the permutes.
      for (int o = 0; o < kOuts; ++o) {
        __m512i a = _mm512_setzero_si512();
        for (int k = 0; k < (w.mask[1] ? 2 : 1); ++k) {
          const __m512i d = _mm512_sub_epi32(x0, _mm512_set1_epi32(w.win[k]));
          __m512i idx = d;
          if constexpr (kChroma) idx = o == 0 ? _mm512_andnot_si512(one, d) : _mm512_or_si512(d, one);
          a = _mm512_or_si512(a, window_lanes(row, w, k, idx));
        }
        _mm512_storeu_ps(out[o] + x, _mm512_cvtepi32_ps(a));
      }
      continue;
    }
    for (int k = 0; k < (w.mask[1] ? 2 : 1); ++k) {
      const __m512i d = _mm512_sub_epi32(x0, _mm512_set1_epi32(w.win[k]));
      __m512i idx[2 * kOuts];
      if constexpr (kChroma) {
        // win is even: (x0 - win) & ~1 is the pair's index in the window.
        const __m512i pa = _mm512_andnot_si512(one, d), pb = _mm512_andnot_si512(one, _mm512_add_epi32(d, one));
        idx[0] = pa, idx[1] = pb, idx[2] = _mm512_or_si512(pa, one), idx[3] = _mm512_or_si512(pb, one);
      } else {
        idx[0] = d, idx[1] = _mm512_add_epi32(d, one);
      }
      for (int t = 0; t < 2 * kOuts; ++t) {
        const __m512i lanes = window_lanes(row, w, k, idx[t]);
        taps[t] = k == 0 ? lanes : _mm512_or_si512(taps[t], lanes);
      }
    }
    const __m512 wx = _mm512_loadu_ps(wxs + x);
    for (int o = 0; o < kOuts; ++o) {
      const __m512 a = _mm512_cvtepi32_ps(taps[2 * o]), b = _mm512_cvtepi32_ps(taps[2 * o + 1]);
      _mm512_storeu_ps(out[o] + x, _mm512_fmadd_ps(wx, _mm512_sub_ps(b, a), a));
    }
  }
}
#endif

void hrow_vector_span(const ImagePlan& p, const uint8_t* img, int32_t y, int64_t x_end, int channels, Part part,
                      float* h, int64_t stride) {
  using F = ops::AippFormat;
#if HWY_TARGET == HWY_AVX3_DL
  if (p.byte_windows) {  // semi-planar, three channels
    const int64_t w = p.src_w;
    const int64_t chroma_row = p.format == F::kYuv420sp ? y / 2 : y;
    if (part != Part::kChroma) window_row<false>(p, p.y_windows.data(), img + y * w, x_end, h, nullptr);
    if (part != Part::kLuma) {
      // rbuv_swap: the pair is V U, its first byte channel 2.
      float* u = h + stride, *v = h + 2 * stride;
      if (p.rbuv_swap) std::swap(u, v);
      window_row<true>(p, p.uv_windows.data(), img + (p.src_h + chroma_row) * w, x_end, u, v);
    }
    return;
  }
#endif
  // The parts are split for 4:2:0 only, which has three channels.
  if (part == Part::kLuma) return hrow_vectors<F::kYuv420sp, 3, Part::kLuma>(p, img, y, x_end, h, stride);
  if (part == Part::kChroma) return hrow_vectors<F::kYuv420sp, 3, Part::kChroma>(p, img, y, x_end, h, stride);
  switch (p.format) {
    case F::kYuv420sp: return hrow_channels<F::kYuv420sp>(p, img, y, x_end, channels, h, stride);
    case F::kYuv422sp: return hrow_channels<F::kYuv422sp>(p, img, y, x_end, channels, h, stride);
    case F::kYuyv: return hrow_channels<F::kYuyv>(p, img, y, x_end, channels, h, stride);
    case F::kYuv400: return hrow_channels<F::kYuv400>(p, img, y, x_end, channels, h, stride);
    case F::kRgb888: return hrow_channels<F::kRgb888>(p, img, y, x_end, channels, h, stride);
    case F::kXrgb8888: return hrow_channels<F::kXrgb8888>(p, img, y, x_end, channels, h, stride);
    case F::kArgb8888: return hrow_channels<F::kArgb8888>(p, img, y, x_end, channels, h, stride);
    default: return hrow_channels<F::kAyuv444>(p, img, y, x_end, channels, h, stride);
  }
}

// The same for one column, scalar (the vector loop's tail, rows near the buffer's end,
// crops one pixel wide: then x0 + 1 is x0's own column, with weight 0).
void hrow_scalar(const ImagePlan& p, const uint8_t* img, int32_t y, int64_t x, int channels, Part part, float* h,
                 int64_t stride) {
  float px[2][4];
  const int32_t xa = p.x0[static_cast<size_t>(x)];
  const int32_t cols[2] = {xa, p.taps2_x ? xa + 1 : xa};
  for (int k = 0; k < 2; ++k) ops::aipp_fetch_pixel(p.fetch_view, img, cols[k], y, px[k]);
  const float wx = p.wx[static_cast<size_t>(x)];
  for (int c = part_first(part); c < part_end(part, channels); ++c)
    h[c * stride + x] = px[0][c] + wx * (px[1][c] - px[0][c]);
}

// Bytes of the raw image from its start through the last byte row y's pixels read (the
// chroma row, for the semi-planar formats).
int64_t bytes_through_row(const ImagePlan& p, int64_t y) {
  const int64_t w = p.src_w, h = p.src_h;
  switch (p.format) {
    case ops::AippFormat::kYuv420sp: return h * w + (y / 2 + 1) * w;
    case ops::AippFormat::kYuv422sp: return h * w + (y + 1) * w;
    case ops::AippFormat::kYuv400: return (y + 1) * w;
    case ops::AippFormat::kYuyv: return (y + 1) * w * 2;
    case ops::AippFormat::kRgb888: return (y + 1) * w * 3;
    default: return (y + 1) * w * 4;
  }
}

// How many output rows ahead prefetch_source_rows runs.
constexpr int64_t kPrefetchRows = 2;

// The source rows prefetch_source_rows has asked for in the image: consecutive output rows
// share source rows (1080 -> 640: a third of them) and 4:2:0 pixel rows their chroma row,
// and asking again for lines already on their way costs as much as the row's loads.
struct Prefetched {
  const uint8_t* image = nullptr;
  int32_t row = -1, chroma_row = -1;
};

// Asks for the cache lines the taps of source rows y and y + 1 read (the crop's columns),
// those not asked for yet.
void prefetch_source_rows(const ImagePlan& p, const uint8_t* img, int32_t y, Prefetched& done) {
  if (done.image != img) done = Prefetched{img, -1, -1};
  const int64_t x_first = p.x0.front(), x_last = p.x0.back() + 2;
  const bool semi_planar = p.format == ops::AippFormat::kYuv420sp || p.format == ops::AippFormat::kYuv422sp;
  const int64_t bpp = p.format == ops::AippFormat::kRgb888 ? 3
                      : ops::aipp_format_channels(p.format) == 4 ? 4
                      : p.format == ops::AippFormat::kYuyv ? 2 : 1;
  auto lines = [&](const uint8_t* row) {
    for (const uint8_t* a = row + x_first * bpp; a < row + x_last * bpp; a += 64) __builtin_prefetch(a);
  };
  for (int32_t r = std::max(y, done.row + 1); r <= std::min(y + 1, p.src_h - 1); ++r) {
    lines(img + static_cast<int64_t>(r) * p.src_w * bpp);  // the pixel row (the luma row)
    const int32_t chroma_row = p.format == ops::AippFormat::kYuv420sp ? r / 2 : r;
    if (semi_planar && chroma_row > done.chroma_row) {
      lines(img + static_cast<int64_t>(p.src_h + chroma_row) * p.src_w);
      done.chroma_row = chroma_row;
    }
    done.row = r;
  }
}

// The horizontally resampled rows of a thread's last two source rows: consecutive output
// rows share a source row whenever the vertical scale is under 2 (1080 -> 640: a third of
// them), and the shared row is not fetched and converted again.
struct RowCache {
  const ImagePlan* plan = nullptr;
  const uint8_t* image = nullptr;
  int32_t row[2] = {-1, -1};
  std::vector<float> rows[2];
  int next = 0;  // the slot to fill next

  // The resampled row y (channel stride `stride`; the channels of `part`), computed if not
  // held. `keep` is a row the caller still needs (not evicted).
  const float* get(const ImagePlan& p, const uint8_t* img, const uint8_t* buffer_end, int32_t y, int32_t keep,
                   int channels, Part part, int64_t stride) {
    if (plan != &p || image != img) {
      plan = &p, image = img;
      row[0] = row[1] = -1;
    }
    for (int k = 0; k < 2; ++k)
      if (row[k] == y) return rows[k].data();
    int k = next;
    if (row[k] == keep && keep >= 0) k ^= 1;
    next = k ^ 1;
    const size_t need = static_cast<size_t>(channels * stride);
    if (rows[k].size() < need) rows[k].resize(need);
    float* h = rows[k].data();
    const DF df;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
    // Vectors where every gather or window load stays inside the buffer (8 bytes of slack).
    int64_t x = 0;
    // The byte windows read inside their row: no slack needed.
    if (p.taps2_x && ((kWindowTarget && p.byte_windows) ||
                      img + bytes_through_row(p, std::min(y + 1, p.src_h - 1)) + 8 <= buffer_end)) {
      x = p.rw / lanes * lanes;
      hrow_vector_span(p, img, y, x, channels, part, h, stride);
    }
    for (; x < p.rw; ++x) hrow_scalar(p, img, y, x, channels, part, h, stride);
    row[k] = y;
    return h;
  }
};

// Steps 3 (vertical half), 4 and 5 on one row of the region, from the two cached rows, into
// out[c] + p.left. kC and kCsc constants: the channel vectors stay in registers (a runtime
// channel count spilled them to the stack in every iteration). kStream: non-temporal stores,
// out[c] + p.left 64-byte aligned (see aipp_rows).
template <int kC, bool kCsc, bool kStream>
HWY_NOINLINE void region_row_t(const ImagePlan& p, const float* const* top, const float* const* bot, float w,
                               float* const* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF wy = hn::Set(df, w);
  const CscVectors k(p);
  // With CSC, channels 0-2 are normalised inside csc_normalised; the alpha channel and every
  // channel without CSC here.
  constexpr int kNormFirst = kCsc ? 3 : 0;
  VF scale[kC], bias[kC];
  const float* t[kC];
  const float* b[kC];
  float* dst[kC];
  for (int c = 0; c < kC; ++c) {
    scale[c] = hn::Set(df, p.scale[c]), bias[c] = hn::Set(df, p.bias[c]);
    t[c] = top[c], b[c] = bot[c], dst[c] = out[c] + p.left;
  }
  const int64_t rw = p.rw;
  int64_t x = 0;
  for (; x + lanes <= rw; x += lanes) {
    VF v[4];
    for (int c = 0; c < kC; ++c) {
      const VF vt = hn::LoadU(df, t[c] + x);
      v[c] = hn::MulAdd(wy, hn::Sub(hn::LoadU(df, b[c] + x), vt), vt);
    }
    if constexpr (kCsc) csc_normalised(k, v);
    for (int c = kNormFirst; c < kC; ++c) v[c] = hn::MulAdd(v[c], scale[c], bias[c]);
    for (int c = 0; c < kC; ++c) {
      if constexpr (kStream) hn::Stream(v[c], df, dst[c] + x);
      else hn::StoreU(v[c], df, dst[c] + x);
    }
  }
  for (; x < rw; ++x) {
    float v[4];
    for (int c = 0; c < kC; ++c) v[c] = t[c][x] + w * (b[c][x] - t[c][x]);
    if constexpr (kCsc) csc_normalised_scalar(p, v);
    for (int c = kNormFirst; c < kC; ++c) v[c] = v[c] * p.scale[c] + p.bias[c];
    for (int c = 0; c < kC; ++c) dst[c][x] = v[c];
  }
}

template <int kC>
void region_row_c(const ImagePlan& p, const float* const* top, const float* const* bot, float w, bool stream,
                  float* const* out) {
  // CSC needs 3 or 4 channels (aipp_node_info refuses it on one).
  if constexpr (kC >= 3) {
    if (p.csc) {
      return stream ? region_row_t<kC, true, true>(p, top, bot, w, out)
                    : region_row_t<kC, true, false>(p, top, bot, w, out);
    }
  }
  return stream ? region_row_t<kC, false, true>(p, top, bot, w, out)
                : region_row_t<kC, false, false>(p, top, bot, w, out);
}

void region_row(const ImagePlan& p, const float* const* top, const float* const* bot, float w, int channels,
                bool stream, float* const* out) {
  if (channels == 1) return region_row_c<1>(p, top, bot, w, stream, out);
  if (channels == 4) return region_row_c<4>(p, top, bot, w, stream, out);
  return region_row_c<3>(p, top, bot, w, stream, out);
}

// Output rows [begin, end) over all images (row index = n * height + y).
void aipp_rows(const Job& job, int64_t begin, int64_t end) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int C = static_cast<int>(job.channels);
  const int64_t H = job.height, W = job.width;
  thread_local std::vector<float> nhwc_rows;
  // 4:2:0 keeps its luma rows in `cache` and its chroma rows in `chroma` (Part).
  thread_local RowCache cache, chroma;
  thread_local Prefetched prefetched;
  if (!job.continues) {
    cache.plan = chroma.plan = nullptr;  // a new run: the image data may have changed
    prefetched = Prefetched{};
  }
  for (int64_t row = begin; row < end; ++row) {
    const int64_t n = row / H, y = row % H;
    const ImagePlan& p = job.plans[job.one_plan ? 0 : n];
    const uint8_t* img = job.images + n * job.image_stride;
    // 1. where the row goes: the output planes (NCHW), or channel rows interleaved at the end.
    const size_t need = static_cast<size_t>(C) * static_cast<size_t>(W + lanes);
    if (job.nhwc && nhwc_rows.size() < need) nhwc_rows.resize(need);
    float* out[4];
    for (int c = 0; c < C; ++c)
      out[c] = job.nhwc ? nhwc_rows.data() + c * (W + lanes)
                       : job.dst + n * job.image_floats + c * job.plane_floats + (y - job.row0) * W;
    // 2. padding, and the region row: the vertical half of step 4, step 5.
    const int64_t ry = y - p.top;
    const bool in_region = ry >= 0 && ry < p.rh;
    for (int c = 0; c < C; ++c) {
      if (!in_region) {
        std::fill(out[c], out[c] + W, p.padding_value);
        continue;
      }
      std::fill(out[c], out[c] + p.left, p.padding_value);
      std::fill(out[c] + p.left + p.rw, out[c] + W, p.padding_value);
    }
    if (in_region) {
      const int32_t ya = p.y0[static_cast<size_t>(ry)];
      const int32_t yb = p.taps2_y ? ya + 1 : ya;
      // The gathers of a row touch every cache line of its source rows (a 1080p row is 30
      // lines); without prefetching they wait on memory one line at a time.
      if (ry + kPrefetchRows < p.rh) prefetch_source_rows(p, img, p.y0[static_cast<size_t>(ry + kPrefetchRows)], prefetched);
      const int64_t stride = p.rw + lanes;
      const float *top[4], *bot[4];
      if (p.format == ops::AippFormat::kYuv420sp) {
        top[0] = cache.get(p, img, job.buffer_end, ya, -1, C, Part::kLuma, stride);
        bot[0] = cache.get(p, img, job.buffer_end, yb, ya, C, Part::kLuma, stride);
        // Each chroma row under its first pixel row (any pixel row of it fetches the same).
        const int32_t ca = ya / 2 * 2, cb = yb / 2 * 2;
        const float* t = chroma.get(p, img, job.buffer_end, ca, -1, C, Part::kChroma, stride);
        const float* b = chroma.get(p, img, job.buffer_end, cb, ca, C, Part::kChroma, stride);
        for (int c = 1; c < C; ++c) top[c] = t + c * stride, bot[c] = b + c * stride;
      } else {
        const float* t = cache.get(p, img, job.buffer_end, ya, -1, C, Part::kAll, stride);
        const float* b = cache.get(p, img, job.buffer_end, yb, ya, C, Part::kAll, stride);
        for (int c = 0; c < C; ++c) top[c] = t + c * stride, bot[c] = b + c * stride;
      }
      // Non-temporal stores need 64-byte aligned vectors (the planes of the usual sizes).
      bool stream = job.stream && !job.nhwc;
      for (int c = 0; c < C; ++c) stream = stream && reinterpret_cast<uintptr_t>(out[c] + p.left) % 64 == 0;
      region_row(p, top, bot, p.wy[static_cast<size_t>(ry)], C, stream, out);
    }
    // 3. NHWC: interleave the channel rows.
    if (job.nhwc) {
      float* d = job.dst + (n * H + y) * W * C;
      for (int64_t x = 0; x < W; ++x)
        for (int c = 0; c < C; ++c) d[x * C + c] = out[c][x];
    }
  }
  if (job.stream) hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::aipp_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using aipp_simd::ImagePlan;

// Bilinear taps along one axis (ops/aipp_params.h step 4), as absolute source indices:
// left tap `first + i0` and the weight of `first + i0 + 1`.
void axis_taps(int32_t first, int32_t in, int32_t out, bool resize, std::vector<int32_t>* i0, std::vector<float>* w) {
  i0->resize(static_cast<size_t>(out));
  w->resize(static_cast<size_t>(out));
  for (int32_t o = 0; o < out; ++o) {
    double s = resize ? (o + 0.5) * in / out - 0.5 : o;
    s = std::clamp(s, 0.0, static_cast<double>(in - 1));
    int32_t i = static_cast<int32_t>(std::floor(s));
    double f = s - i;
    if (in >= 2 && i == in - 1) i = in - 2, f = 1.0;  // the same value, with i + 1 inside
    (*i0)[static_cast<size_t>(o)] = first + i;
    (*w)[static_cast<size_t>(o)] = static_cast<float>(f);
  }
}

ImagePlan make_plan(const ops::AippParams& p, const ops::AippBatchParams& b) {
  ImagePlan plan;
  plan.format = p.format;
  plan.rbuv_swap = p.rbuv_swap, plan.ax_swap = p.ax_swap, plan.csc = p.csc;
  plan.src_w = p.src_w, plan.src_h = p.src_h;
  plan.fetch_view.format = p.format, plan.fetch_view.src_w = p.src_w, plan.fetch_view.src_h = p.src_h;
  plan.fetch_view.rbuv_swap = p.rbuv_swap, plan.fetch_view.ax_swap = p.ax_swap;
  const int32_t cx = b.crop ? b.crop_x : 0, cy = b.crop ? b.crop_y : 0;
  const int32_t cw = b.crop ? b.crop_w : p.src_w, ch = b.crop ? b.crop_h : p.src_h;
  plan.rw = b.resize ? b.resize_w : cw;
  plan.rh = b.resize ? b.resize_h : ch;
  plan.left = b.padding ? b.pad_left : 0;
  plan.top = b.padding ? b.pad_top : 0;
  plan.padding_value = b.padding_value;
  for (int i = 0; i < 9; ++i) plan.m[i] = p.matrix[i / 3][i % 3] / 256.0f;
  for (int i = 0; i < 3; ++i) plan.ib[i] = p.input_bias[i], plan.ob[i] = p.output_bias[i];
  for (int c = 0; c < 4; ++c) {
    plan.scale[c] = b.var_reci[c];
    plan.bias[c] = -(b.mean[c] + b.min[c]) * b.var_reci[c];
  }
  // clamp(v, 0, 255) * scale + bias = clamp(v * scale + bias, the ends 0 and 255 mapped the
  // same way, in order): scale may be negative or 0.
  for (int r = 0; r < 3; ++r) {
    for (int j = 0; j < 3; ++j) plan.csc_m[r * 3 + j] = plan.m[r * 3 + j] * plan.scale[r];
    plan.csc_b[r] = plan.ob[r] * plan.scale[r] + plan.bias[r];
    const float end0 = plan.bias[r], end255 = 255.0f * plan.scale[r] + plan.bias[r];
    plan.csc_lo[r] = std::min(end0, end255), plan.csc_hi[r] = std::max(end0, end255);
  }
  axis_taps(cx, cw, plan.rw, b.resize, &plan.x0, &plan.wx);
  axis_taps(cy, ch, plan.rh, b.resize, &plan.y0, &plan.wy);
  // axis_taps gives a 1-pixel axis the tap 0 with weight 0.
  plan.taps2_x = cw >= 2;
  plan.taps2_y = ch >= 2;
  return plan;
}

// Windows for 16 lanes whose lane i needs row bytes first[i] .. first[i] + span - 1 (the taps'
// bytes, read at run time with indices relative to the window). One window when the bytes span
// under 128, else one per half; false when a half spans more (a downscale over ~14x: gathers
// then).
bool lane_windows(const int32_t* first, int span, int32_t row_bytes, aipp_simd::ByteWindows* w) {
  auto fill = [&](int slot, int lane_begin, int lane_end) {
    int32_t lo = first[lane_begin], hi = first[lane_begin];
    for (int i = lane_begin; i < lane_end; ++i) lo = std::min(lo, first[i]), hi = std::max(hi, first[i]);
    hi += span - 1;
    if (hi - lo >= 128) return false;
    // The window stays inside the row: 128 bytes from win. The bytes read are inside the row
    // too, so at most win + 127 either way. Even for chroma rows (lo and row_bytes are).
    w->win[slot] = std::max(0, std::min(lo, row_bytes - 128));
    for (int i = lane_begin; i < lane_end; ++i) w->mask[slot] |= uint64_t{1} << (4 * i);
    return true;
  };
  if (fill(0, 0, 16)) return true;
  *w = aipp_simd::ByteWindows{};
  return fill(0, 0, 8) && fill(1, 8, 16);
}

void make_byte_windows(ImagePlan& plan) {
  const bool semi_planar = plan.format == ops::AippFormat::kYuv420sp || plan.format == ops::AippFormat::kYuv422sp;
  if (!semi_planar || !plan.taps2_x || plan.src_w < 128) return;
  const int64_t chunks = plan.rw / 16;
  plan.y_windows.resize(static_cast<size_t>(chunks));
  plan.uv_windows.resize(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    const int32_t* x0 = plan.x0.data() + c * 16;
    int32_t pair[16];
    for (int i = 0; i < 16; ++i) pair[i] = x0[i] & ~1;
    // Luma: x0 and x0 + 1. Chroma: U V of x0's pair and of x0 + 1's (the same or the next).
    if (!lane_windows(x0, 2, plan.src_w, &plan.y_windows[static_cast<size_t>(c)]) ||
        !lane_windows(pair, 4, plan.src_w, &plan.uv_windows[static_cast<size_t>(c)])) {
      plan.y_windows.clear();
      plan.uv_windows.clear();
      return;
    }
  }
  // Chunks whose weights are all 0 read one tap (window_row).
  for (int64_t c = 0; c < chunks; ++c) {
    bool blend = false;
    for (int i = 0; i < 16; ++i) blend = blend || plan.wx[static_cast<size_t>(c * 16 + i)] != 0.0f;
    plan.y_windows[static_cast<size_t>(c)].blend = plan.uv_windows[static_cast<size_t>(c)].blend = blend;
  }
  plan.byte_windows = true;
}

}  // namespace

std::vector<ImagePlan> aipp_simd::make_plans(const ops::AippParams& p) {
  std::vector<ImagePlan> plans;
  for (const ops::AippBatchParams& b : p.batch) {
    plans.push_back(make_plan(p, b));
    make_byte_windows(plans.back());
  }
  return plans;
}

aipp_simd::Job aipp_simd::make_job(const ops::AippOutputDesc& out, const Tensor& image,
                                   const std::vector<ImagePlan>& plans) {
  Job job;
  job.images = image.data<uint8_t>();
  job.image_stride = image.num_elements() / out.batch;
  job.buffer_end = job.images + image.num_elements();
  job.plans = plans.data();
  job.one_plan = plans.size() == 1;
  job.batch = out.batch;
  job.channels = out.channels;
  job.height = out.height;
  job.width = out.width;
  job.nhwc = out.nhwc;
  job.plane_floats = job.height * job.width;
  job.image_floats = job.channels * job.plane_floats;
  return job;
}

aipp_simd::RowsFn aipp_simd::select_rows() { return KILN_SIMD_SELECT(kiln::kernels::aipp_simd, aipp_rows); }
const char* aipp_simd::rows_target_name() { return KILN_SIMD_TARGET_NAME(); }

namespace {

using aipp_simd::RowsFn;

// Outputs larger than this are written with non-temporal stores: they do not stay in the
// cores' L2 (1 MiB each on Zen 5) anyway, and ordinary stores read every line from memory
// before writing it. 1080p NV12 -> 640x640 (4.9 MB): 0.68 -> 0.60 ms, one thread
// (docs/aipp.md); 224x224 (0.6 MB) stays in the cache for the model's first layer.
constexpr int64_t kStreamBytes = int64_t{2} << 20;

class AippKernel final : public Kernel {
 public:
  explicit AippKernel(ops::AippNodeInfo info) : info_(std::move(info)) {
    rows_ = aipp_simd::select_rows();
    implementation_ = std::string("simd:") + aipp_simd::rows_target_name();
    if (!info_.dynamic) static_plans_ = aipp_simd::make_plans(info_.params);
  }

  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    std::vector<ImagePlan> dynamic_plans;
    const std::vector<ImagePlan>* plans = &static_plans_;
    const ops::AippParams* params = &info_.params;
    ops::AippParams dynamic_params;
    if (info_.dynamic) {
      KILN_ASSIGN_OR_RETURN(dynamic_params, ops::aipp_run_params(node, info_, ctx.input(1)));
      dynamic_plans = aipp_simd::make_plans(dynamic_params);
      plans = &dynamic_plans;
      params = &dynamic_params;
    }
    const Tensor* image = ctx.input(0);
    KILN_RETURN_IF_ERROR(ops::check_aipp_image(node, info_, *params, image));
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, info_.output_dims,
                                                          TensorInit::kUninitialized));
    aipp_simd::Job job = aipp_simd::make_job(info_.out, *image, *plans);
    job.dst = y->data<float>();
    job.stream = static_cast<int64_t>(sizeof(float)) * y->num_elements() > kStreamBytes;
    const RowsFn rows = rows_;
    parallel_for(0, job.batch * job.height, 4, [&](int64_t b, int64_t e) { rows(job, b, e); });
    return ok_status();
  }
  std::string implementation() const override { return implementation_; }

 private:
  ops::AippNodeInfo info_;
  std::vector<ImagePlan> static_plans_;
  RowsFn rows_ = nullptr;
  std::string implementation_;
};

Expected<std::unique_ptr<Kernel>> prepare_aipp(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(ops::AippNodeInfo info, ops::aipp_node_info(node));
  return std::unique_ptr<Kernel>(new AippKernel(std::move(info)));
}

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = ops::kAippOp,
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "kiln",
                                    .applicable = [](const ir::Node& n) { return ops::aipp_node_info(n).status(); },
                                    .prepare = prepare_aipp}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
