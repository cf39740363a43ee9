// Kiln's packed-B fp32 GEMM (gemm.h). The micro-kernel and the packing are Highway code,
// compiled per SIMD target; the driver below them (blocking, threads, edges, epilogue) is
// target code too, so a panel's width is the vector length of the target that packed it.
#ifndef KILN_KERNELS_CPU_GEMM_SHARED_
#define KILN_KERNELS_CPU_GEMM_SHARED_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <tuple>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/weak_cache.h"

namespace kiln::kernels::gemm_simd {

// Rows of the micro-kernel's tile: 6 rows x 2 vectors = 12 accumulators, plus 2 vectors of
// B and a broadcast of A, fit AVX2's 16 registers (BLIS's Haswell kernel has the same shape).
constexpr int64_t kRows = 6;
constexpr int64_t kVecs = 2;
// Rows of A per block: 192 rows of a 256-deep K block are 192 KiB, which stay in L2.
constexpr int64_t kBlockRows = 192;
// Bytes of a panel slice the micro-kernel keeps in L1.
constexpr int64_t kPanelSliceBytes = 16 << 10;

struct Job {
  int64_t m = 0;
  const gemm::ASource* a = nullptr;
  const gemm::PackedB* b = nullptr;
  gemm::OutputLayout c;
  const gemm::Epilogue* ep = nullptr;
  int64_t panel_groups = 1;  // tasks per M block
};

// A row-major matrix as an ASource (a short last tile repeats its last row).
class RowMajorA final : public gemm::ASource {
 public:
  RowMajorA(const float* a, int64_t lda) : a_(a), lda_(lda) {}
  void pack(int64_t i0, int64_t rows, int64_t k0, int64_t kc, float* out) const override {
    const float* a[kRows];
    for (int64_t r = 0; r < kRows; ++r) a[r] = a_ + (i0 + std::min(r, rows - 1)) * lda_ + k0;
    for (int64_t k = 0; k < kc; ++k, out += kRows)
      for (int64_t r = 0; r < kRows; ++r) out[r] = a[r][k];
  }

 private:
  const float* a_;
  int64_t lda_;
};

// This thread's buffer for a packed block of A (grown, never shrunk: no allocation per call).
inline float* a_block_buffer(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

// The activation on one row segment of C (Gelu through its SIMD kernel, the others by the
// reference formula: they are cheap next to the product).
inline void activate(const ops::FusedActivation& act, float* p, int64_t n) {
  if (act.kind == ops::FusedActivationKind::kGelu ||
      act.kind == ops::FusedActivationKind::kGeluTanh) {
    gelu_span(p, n, act.kind == ops::FusedActivationKind::kGeluTanh);
    if (act.has_post_affine()) {
      const ops::FusedActivation affine = act.post_affine_only();
      for (int64_t j = 0; j < n; ++j) p[j] = ops::fused_activation_value(affine, p[j]);
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) p[j] = ops::fused_activation_value(act, p[j]);
}

}  // namespace kiln::kernels::gemm_simd

#endif  // KILN_KERNELS_CPU_GEMM_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::gemm_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

int64_t panel_width() { return static_cast<int64_t>(kVecs * hn::Lanes(D())); }
int64_t vector_floats() { return static_cast<int64_t>(hn::Lanes(D())); }

// The rows of B one K block holds: its panel slices stay in L1.
int64_t block_rows() { return std::max<int64_t>(16, kPanelSliceBytes / (panel_width() * 4)); }

void pack_panels(const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                 float* out) {
  const int64_t w = panel_width(), kc_max = block_rows();
  const int64_t panels = (n + w - 1) / w;
  for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - k0);
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t j0 = p * w, cols = std::min(w, n - j0);
      for (int64_t kk = k0; kk < k0 + kc; ++kk, out += w) {
        const float* src = b + kk * row_stride + j0 * col_stride;
        int64_t j = 0;
        for (; j < cols; ++j) out[j] = src[j * col_stride];
        for (; j < w; ++j) out[j] = 0.0f;
      }
    }
  }
}

// c[0..kRows) x [0..kVecs vectors) (row r, vector v at c + r * ldc + v * ldv) =
// (accumulate ? c : 0) + the product of
// the packed A slice ap (kc steps of kRows values) and the panel slice bp (kc rows of kVecs
// vectors). With kPrefetch, it also prefetches `next` (the next panel slice) a line per step,
// so that the panels of weights that come from DRAM arrive before they are needed.
// kR < kRows: the first kR rows only (the last row tile of M), A still packed kRows wide.
template <int64_t kR, bool kPrefetch>
HWY_INLINE void micro_tile(int64_t kc, const float* HWY_RESTRICT ap, const float* HWY_RESTRICT bp,
                           float* HWY_RESTRICT c, int64_t ldc, int64_t ldv, bool accumulate,
                           const float* next) {
  const D d;
  const size_t L = hn::Lanes(d);
  V acc[kR][kVecs];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kR; ++r)
#pragma GCC unroll 4
    for (int64_t v = 0; v < kVecs; ++v) acc[r][v] = hn::Zero(d);
  for (int64_t k = 0; k < kc; ++k, bp += kVecs * L, ap += kRows) {
    if constexpr (kPrefetch) hwy::Prefetch(next + k * kVecs * L);
    V b[kVecs];
#pragma GCC unroll 4
    for (int64_t v = 0; v < kVecs; ++v) b[v] = hn::Load(d, bp + v * L);
#pragma GCC unroll 8
    for (int64_t r = 0; r < kR; ++r) {
      const V x = hn::Set(d, ap[r]);
#pragma GCC unroll 4
      for (int64_t v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(x, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < kR; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 4
    for (int64_t v = 0; v < kVecs; ++v) {
      if (accumulate) acc[r][v] = hn::Add(acc[r][v], hn::LoadU(d, row + v * ldv));
      hn::StoreU(acc[r][v], d, row + v * ldv);
    }
  }
}

// micro_tile for `rows` (1..kRows) rows.
template <bool kPrefetch>
HWY_INLINE void micro_tile_rows(int64_t rows, int64_t kc, const float* ap, const float* bp,
                                float* c, int64_t ldc, int64_t ldv, bool accumulate,
                                const float* next) {
  switch (rows) {
    case 1: return micro_tile<1, kPrefetch>(kc, ap, bp, c, ldc, ldv, accumulate, next);
    case 2: return micro_tile<2, kPrefetch>(kc, ap, bp, c, ldc, ldv, accumulate, next);
    case 3: return micro_tile<3, kPrefetch>(kc, ap, bp, c, ldc, ldv, accumulate, next);
    case 4: return micro_tile<4, kPrefetch>(kc, ap, bp, c, ldc, ldv, accumulate, next);
    case 5: return micro_tile<5, kPrefetch>(kc, ap, bp, c, ldc, ldv, accumulate, next);
    default: return micro_tile<kRows, kPrefetch>(kc, ap, bp, c, ldc, ldv, accumulate, next);
  }
}
static_assert(kRows == 6, "micro_tile_rows covers 1..6 rows");

// Rows [i_begin, i_end) x columns [k0, k0 + kc) of A, as the micro-kernel reads them: per
// tile of kRows rows, kc steps of kRows values. The copy keeps the tile's rows in consecutive
// lines: rows of A a multiple of 4 KiB apart (K = 3072) would otherwise share L1 sets with
// each other and with the panel slice.
HWY_INLINE void pack_a(const Job& job, int64_t i_begin, int64_t i_end, int64_t k0, int64_t kc,
                       float* HWY_RESTRICT out) {
  for (int64_t i0 = i_begin; i0 < i_end; i0 += kRows, out += kRows * kc)
    job.a->pack(i0, std::min(kRows, i_end - i0), k0, kc, out);
}

// The activations convolutions end with, on a vector, with the reference's comparisons and
// roundings (ops/fused_activation.cc: NaN behaves as there); false for the others, which
// `activate` computes per element.
HWY_INLINE bool activate_vector(const ops::FusedActivation& act, D d, V& x) {
  const V zero = hn::Zero(d);
  using K = ops::FusedActivationKind;
  switch (act.kind) {
    case K::kRelu:  // x > 0 ? x : 0
      x = hn::IfThenElse(hn::Gt(x, zero), x, zero);
      break;
    case K::kClip: {  // min(max(x, lo), hi) as std::min / std::max
      const V lo = hn::Set(d, act.p0), hi = hn::Set(d, act.p1);
      x = hn::IfThenElse(hn::Lt(x, lo), lo, x);
      x = hn::IfThenElse(hn::Lt(hi, x), hi, x);
      break;
    }
    case K::kHardSwish: {
      if (act.p0 != 1.0f / 6.0f || act.p1 != 0.5f) return false;
      // x * max(0, min(1, x / 6 + 0.5)), ONNX HardSwish's own rounding.
      const V one = hn::Set(d, 1.0f);
      V t = hn::Add(hn::Div(x, hn::Set(d, 6.0f)), hn::Set(d, 0.5f));
      t = hn::IfThenElse(hn::Lt(t, one), t, one);
      t = hn::IfThenElse(hn::Lt(zero, t), t, zero);
      x = hn::Mul(x, t);
      break;
    }
    default:
      return false;
  }
  if (act.has_post_affine())
    x = hn::Add(hn::Mul(x, hn::Set(d, act.post_scale)), hn::Set(d, act.post_shift));
  return true;
}

// Element (i, j0 + v * L) of C (j0 a multiple of L): its address's offset from C's start.
HWY_INLINE int64_t c_offset(const gemm::OutputLayout& c, int64_t i, int64_t j0, int64_t v,
                            int64_t L) {
  return i * c.row_stride + (j0 / L + v) * c.vector_stride;
}

// The epilogue on rows x cols of C at (i0, j0), after the last K block.
HWY_INLINE void finish_tile(const Job& job, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const gemm::Epilogue& ep = *job.ep;
  const D d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const V alpha = hn::Set(d, ep.alpha);
  const V row_scale = hn::Set(d, ep.row_scale);
  const V full_scale = hn::Set(d, ep.full_scale);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v * L < cols; ++v) {
      const int64_t at = c_offset(job.c, i0 + r, j0, v, L);
      float* c = job.c.c + at;
      const int64_t n = std::min(L, cols - v * L);
      const auto m = hn::FirstN(d, static_cast<size_t>(n));
      V x = hn::Mul(alpha, hn::MaskedLoad(m, d, c));
      if (ep.row) x = hn::MulAdd(row_scale, hn::MaskedLoad(m, d, ep.row + j0 + v * L), x);
      if (ep.full) x = hn::MulAdd(full_scale, hn::MaskedLoad(m, d, ep.full + at), x);
      const bool done = ep.act.is_none() || activate_vector(ep.act, d, x);
      hn::BlendedStore(x, m, d, c);
      if (!done) activate(ep.act, c, n);
    }
  }
}

// Task t: M block t / panel_groups, panel group t % panel_groups.
void run_tasks(const Job& job, int64_t t_begin, int64_t t_end) {
  const gemm::PackedB& b = *job.b;
  const int64_t w = b.width(), k = b.k(), n = b.n(), panels = b.num_panels();
  const int64_t L = static_cast<int64_t>(hn::Lanes(D()));
  const int64_t kc_max = b.block_rows();
  HWY_ALIGN float edge[kRows * 64];  // an edge tile (panels are at most 2 x 32 floats wide)
  float* packed_a = a_block_buffer(kBlockRows * kc_max);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t mb = t / job.panel_groups, g = t % job.panel_groups;
    const int64_t i_begin = mb * kBlockRows, i_end = std::min(job.m, i_begin + kBlockRows);
    const int64_t p_begin = panels * g / job.panel_groups;
    const int64_t p_end = panels * (g + 1) / job.panel_groups;
    for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
      const int64_t kc = std::min(kc_max, k - k0);
      const bool first = k0 == 0, last = k0 + kc == k;
      pack_a(job, i_begin, i_end, k0, kc, packed_a);
      for (int64_t p = p_begin; p < p_end; ++p) {
        const float* bp = b.slice(k0, p);
        // The slice after this one in the stream: the next panel, or the next block's first.
        const float* next = bp + kc * w;
        const int64_t j0 = p * w, cols = std::min(w, n - j0);
        for (int64_t i0 = i_begin; i0 < i_end; i0 += kRows) {
          const int64_t rows = std::min(kRows, i_end - i0);
          const float* a = packed_a + (i0 - i_begin) * kc;
          float* c = job.c.c + c_offset(job.c, i0, j0, 0, L);
          if (cols == w) {
            if (i0 == i_begin)
              micro_tile_rows<true>(rows, kc, a, bp, c, job.c.row_stride, job.c.vector_stride,
                                    !first, next);
            else
              micro_tile_rows<false>(rows, kc, a, bp, c, job.c.row_stride, job.c.vector_stride,
                                     !first, nullptr);
          } else {
            // A tile past N goes through a full-width buffer; only its real part is kept.
            auto copy = [&](bool to_edge) {
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t v = 0; v * L < cols; ++v) {
                  float* at = job.c.c + c_offset(job.c, i0 + r, j0, v, L);
                  float* e = edge + r * w + v * L;
                  const size_t bytes = static_cast<size_t>(std::min(L, cols - v * L)) * 4;
                  if (to_edge)
                    std::memcpy(e, at, bytes);
                  else
                    std::memcpy(at, e, bytes);
                }
            };
            if (!first) copy(true);
            micro_tile_rows<false>(rows, kc, a, bp, edge, w, L, !first, nullptr);
            copy(false);
          }
          if (last) finish_tile(job, i0, j0, rows, cols);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::gemm_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels::gemm {
namespace {

using TasksFn = void (*)(const gemm_simd::Job&, int64_t, int64_t);
using WidthFn = int64_t (*)();  // also the block rows
using PackFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, float*);

struct Target {
  TasksFn tasks = KILN_SIMD_SELECT(kiln::kernels::gemm_simd, run_tasks);
  WidthFn width = KILN_SIMD_SELECT(kiln::kernels::gemm_simd, panel_width);
  WidthFn block_rows = KILN_SIMD_SELECT(kiln::kernels::gemm_simd, block_rows);
  WidthFn vector_floats = KILN_SIMD_SELECT(kiln::kernels::gemm_simd, vector_floats);
  PackFn pack = KILN_SIMD_SELECT(kiln::kernels::gemm_simd, pack_panels);
  const char* name = KILN_SIMD_TARGET_NAME();
};

const Target& target() {
  static const Target t;
  return t;
}

}  // namespace

void PackedB::Free::operator()(float* p) const { std::free(p); }

PackedB PackedB::pack(const float* b, int64_t k, int64_t n, int64_t row_stride,
                      int64_t col_stride) {
  PackedB out;
  out.k_ = k;
  out.n_ = n;
  out.width_ = target().width();
  out.kc_ = target().block_rows();
  const size_t bytes = (out.bytes() + 63) / 64 * 64;
  out.data_.reset(static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
  if (!out.data_) throw std::bad_alloc();
  target().pack(b, k, n, row_stride, col_stride, out.data_.get());
  return out;
}

std::shared_ptr<const PackedB> PackedB::pack_shared(const float* b, int64_t k, int64_t n, int64_t row_stride,
                                                    int64_t col_stride) {
  using Key = std::tuple<const float*, int64_t, int64_t, int64_t, int64_t>;
  static auto* cache = new WeakCache<Key, const PackedB>;  // never destroyed: kernels may outlive statics
  return cache->get_or_make({b, k, n, row_stride, col_stride}, [&] {
    return std::make_shared<const PackedB>(pack(b, k, n, row_stride, col_stride));
  });
}

void multiply(int64_t m, const ASource& a, const PackedB& b, const OutputLayout& c,
              const Epilogue& epilogue) {
  if (m <= 0 || b.n() <= 0) return;
  gemm_simd::Job job;
  job.m = m;
  job.a = &a;
  job.b = &b;
  job.c = c;
  job.ep = &epilogue;
  // A task per thread at least, a few panels each at least; one thread, one task per M block
  // (each task packs its block of A).
  const int64_t m_blocks = (m + gemm_simd::kBlockRows - 1) / gemm_simd::kBlockRows;
  const int64_t threads = num_threads();
  const int64_t want = threads == 1 ? 1 : (2 * threads + m_blocks - 1) / m_blocks;
  job.panel_groups = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, b.num_panels() / 2));
  const gemm_simd::Job* j = &job;
  const TasksFn fn = target().tasks;
  parallel_for(0, m_blocks * job.panel_groups, 1,
               [j, fn](int64_t begin, int64_t end) { fn(*j, begin, end); });
}

void multiply(int64_t m, const float* a, int64_t lda, const PackedB& b, float* c, int64_t ldc,
              const Epilogue& epilogue) {
  const gemm_simd::RowMajorA source(a, lda);
  multiply(m, source, b, OutputLayout{c, ldc, vector_floats()}, epilogue);
}

int64_t tile_rows() { return gemm_simd::kRows; }

int64_t vector_floats() { return target().vector_floats(); }

const char* target_name() { return target().name; }

}  // namespace kiln::kernels::gemm

#endif  // HWY_ONCE
