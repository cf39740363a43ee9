// Paged attention (paged_attention.h). Highway SIMD for the two loops over head_dim that carry
// the work (q.k per key, and the weighted sum of values); the target is the one the build
// compiles for (-march=native in the release preset), not a runtime dispatch: the engine is
// built for the machine it runs on, like the rest of the decode path. One loop body serves
// both pool types: a bf16 K or V row is widened to fp32 as it is loaded (PromoteTo: the bf16
// bits shifted into the high half of a float, exact), so q, the scores and the sums stay fp32
// and a bf16 pool only halves the bytes read.
#include "llm/paged_attention.h"

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace kiln::llm {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using Df = hn::ScalableTag<float>;
// Vectors of one head's output row kept in registers over a chunk of V rows (head_dim up to
// 8 vectors: 128 floats on AVX-512).
constexpr int64_t kMaxRowVectors = 8;

// Loads lanes(d) elements of a K or V row as floats.
HWY_INLINE hn::Vec<Df> load_row(Df d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE hn::Vec<Df> load_row(Df d, const uint16_t* p) {
  const hn::Rebind<hwy::bfloat16_t, Df> dbf;
  return hn::PromoteTo(d, hn::LoadU(dbf, reinterpret_cast<const hwy::bfloat16_t*>(p)));
}
inline float element(const float* p, int64_t i) { return p[i]; }
inline float element(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }

template <typename T>
float dot(const float* a, const T* b, int64_t n) {
  const Df d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::MulAdd(hn::LoadU(d, a + i), load_row(d, b + i), acc);
  float s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) s += a[i] * element(b, i);
  return s;
}

// dst += w * src
template <typename T>
void axpy(float w, const T* src, float* dst, int64_t n) {
  const Df d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vw = hn::Set(d, w);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(vw, load_row(d, src + i), hn::LoadU(d, dst + i)), d, dst + i);
  for (; i < n; ++i) dst[i] += w * element(src, i);
}

// Sums of `kKeys` vectors in one: lane k of the result is the sum of acc[k]'s lanes. Pairs are
// folded log2(kKeys) times (even lanes + odd lanes of two vectors side by side), so each pass
// halves the vectors and the lanes each covers: 2 shuffles and an add per vector per pass in
// place of a horizontal sum per vector.
template <size_t kKeys>
HWY_INLINE hn::Vec<Df> sum_each(Df d, hn::Vec<Df>* acc) {
  for (size_t n = kKeys; n > 1; n /= 2)
    for (size_t k = 0; k < n / 2; ++k)
      acc[k] = hn::Add(hn::ConcatEven(d, acc[2 * k + 1], acc[2 * k]), hn::ConcatOdd(d, acc[2 * k + 1], acc[2 * k]));
  return acc[0];
}

// T: float (fp32 pools) or uint16_t (bf16 pools).
//
// A work item is one query token and a range of KV heads (with their groups of query heads).
// Its keys are taken in chunks of up to one vector's lanes (16 on AVX-512) that lie in one
// block, so their rows are contiguous: [slot][kv_head][head_dim]. Per chunk and query head:
// the dot products of q with the chunk's keys, kept lane-wise in one vector per key and summed
// all at once (sum_each) into one vector of scores; then, over all the keys, a max-shifted
// softmax with Highway's Exp, and the weighted sum of the V rows, chunk by chunk, the output
// row held in registers over a chunk. While a chunk is computed, the next chunk's rows (in
// another block, wherever the block table puts it) are prefetched, head by head. A head_dim
// that is not a multiple of the lanes takes the plain loops (a dot and an axpy per key).
template <typename T>
void attend(const AttentionShape& shape, const float* q, const T* k_pool, const T* v_pool,
            const std::vector<AttentionSequence>& sequences, float* out) {
  const Df d;
  constexpr size_t kLanes = hn::MaxLanes(Df());
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t hd = shape.head_dim, heads = shape.heads, kv_heads = shape.kv_heads, bs = shape.block_size;
  const int64_t group = heads / kv_heads, row_elems = kv_heads * hd;
  const bool vector_rows = lanes == static_cast<int64_t>(kLanes) && hd % lanes == 0 && hd / lanes <= kMaxRowVectors;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  int64_t tokens = 0;
  for (const AttentionSequence& seq : sequences) tokens += seq.count;
  // KV heads split into `parts` ranges only when there are too few tokens to keep the threads
  // busy (decode of a small batch); otherwise an item is a token with all its heads.
  const int64_t parts =
      std::clamp<int64_t>((2 * num_threads() + tokens - 1) / std::max<int64_t>(tokens, 1), 1, kv_heads);
  // Work items: (sequence, token, part), numbered through a prefix sum over sequences.
  std::vector<int64_t> first_item(sequences.size() + 1, 0);
  for (size_t s = 0; s < sequences.size(); ++s) first_item[s + 1] = first_item[s] + sequences[s].count * parts;
  parallel_for(0, first_item.back(), 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    size_t s = std::upper_bound(first_item.begin(), first_item.end(), begin) - first_item.begin() - 1;
    for (int64_t item = begin; item < end; ++item) {
      while (item >= first_item[s + 1]) ++s;
      const AttentionSequence& seq = sequences[s];
      const int64_t local = item - first_item[s];
      const int64_t i = local / parts, part = local % parts;
      const int64_t g0 = part * kv_heads / parts, g1 = (part + 1) * kv_heads / parts;
      const int64_t h0 = g0 * group, nh = (g1 - g0) * group;  // query heads h0 .. h0 + nh - 1
      const int64_t row = seq.row + i;
      const int64_t keys = seq.start + i + 1;                   // the causal keys
      const int64_t computed = std::max(keys, seq.padded_keys);  // keys scored and summed (padded_keys)
      const int64_t stride = (computed + lanes - 1) / lanes * lanes;  // scores of head h0 + hl: [hl * stride, + computed)
      const float* qrow = q + (row * heads + h0) * hd;
      float* dst = out + (row * heads + h0) * hd;
      if (static_cast<int64_t>(scores.size()) < nh * stride) scores.resize(nh * stride);
      // Position j's K or V row, from KV head g0 on: block table, then slot in the block.
      auto at = [&](const T* pool, int64_t j) {
        return pool + (static_cast<int64_t>(seq.block_table[j / bs]) * bs + j % bs) * row_elems + g0 * hd;
      };
      // Keys [j, j + chunk(j)) lie in one block.
      auto chunk = [&](int64_t j) { return std::min({lanes, bs - j % bs, computed - j}); };
      // Prefetches KV head gl's part of the rows of the chunk at j (none past the keys).
      auto prefetch = [&](const T* pool, int64_t j, int64_t gl) {
        if (j >= computed) return;
        const char* p = reinterpret_cast<const char*>(at(pool, j) + gl * hd);
        const int64_t n = chunk(j), bytes = hd * static_cast<int64_t>(sizeof(T));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + (r * row_elems * sizeof(T)) + b);
      };
      for (int64_t j = 0; j < computed;) {
        const int64_t n = chunk(j);
        const T* k = at(k_pool, j);
        for (int64_t hl = 0; hl < nh; ++hl) {
          const float* qh = qrow + hl * hd;
          const T* kh = k + (hl / group) * hd;
          float* sc = scores.data() + hl * stride + j;
          if (hl % group == 0) prefetch(k_pool, j + n, hl / group);
          if (vector_rows && n == lanes) {
            hn::Vec<Df> acc[kLanes];
            for (size_t r = 0; r < kLanes; ++r) acc[r] = hn::Zero(d);
            for (int64_t e = 0; e < hd; e += lanes) {
              const auto qv = hn::LoadU(d, qh + e);
              for (size_t r = 0; r < kLanes; ++r) acc[r] = hn::MulAdd(qv, load_row(d, kh + r * row_elems + e), acc[r]);
            }
            hn::StoreU(hn::Mul(sum_each<kLanes>(d, acc), hn::Set(d, scale)), d, sc);
          } else {
            for (int64_t r = 0; r < n; ++r) sc[r] = dot(qh, kh + r * row_elems, hd) * scale;
          }
        }
        j += n;
      }
      // Softmax per head; the padding lanes past the keys (and the padded keys' scores) hold
      // -inf, which Exp takes to 0.
      const auto neg_inf = hn::Set(d, -INFINITY);
      for (int64_t hl = 0; hl < nh; ++hl) {
        float* sc = scores.data() + hl * stride;
        for (int64_t j = keys; j < stride; ++j) sc[j] = -INFINITY;
        auto vmax = neg_inf;
        for (int64_t j = 0; j < stride; j += lanes) vmax = hn::Max(vmax, hn::LoadU(d, sc + j));
        const auto max_score = hn::Set(d, hn::GetLane(hn::MaxOfLanes(d, vmax)));
        auto vsum = hn::Zero(d);
        for (int64_t j = 0; j < stride; j += lanes) {
          const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, sc + j), max_score));
          hn::StoreU(e, d, sc + j);
          vsum = hn::Add(vsum, e);
        }
        const auto inv = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, vsum)));
        for (int64_t j = 0; j < stride; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, sc + j), inv), d, sc + j);
      }
      std::fill(dst, dst + nh * hd, 0.0f);
      for (int64_t hl = 0; hl < nh; hl += group) prefetch(v_pool, 0, hl / group);
      for (int64_t j = 0; j < computed;) {
        const int64_t n = chunk(j);
        const T* v = at(v_pool, j);
        for (int64_t hl = 0; hl < nh; ++hl) {
          const T* vh = v + (hl / group) * hd;
          const float* w = scores.data() + hl * stride + j;
          float* o = dst + hl * hd;
          if (hl % group == 0) prefetch(v_pool, j + n, hl / group);
          if (vector_rows) {
            hn::Vec<Df> acc[kMaxRowVectors];
            const int64_t nv = hd / lanes;
            for (int64_t e = 0; e < nv; ++e) acc[e] = hn::LoadU(d, o + e * lanes);
            for (int64_t r = 0; r < n; ++r) {
              const auto wr = hn::Set(d, w[r]);
              for (int64_t e = 0; e < nv; ++e) acc[e] = hn::MulAdd(wr, load_row(d, vh + r * row_elems + e * lanes), acc[e]);
            }
            for (int64_t e = 0; e < nv; ++e) hn::StoreU(acc[e], d, o + e * lanes);
          } else {
            for (int64_t r = 0; r < n; ++r) axpy(w[r], vh + r * row_elems, o, hd);
          }
        }
        j += n;
      }
    }
  });
}

}  // namespace

void paged_attention(const AttentionShape& shape, const float* q, const KvPools& pools,
                     const std::vector<AttentionSequence>& sequences, float* out) {
  if (pools.dtype == DataType::kBFloat16)
    attend(shape, q, static_cast<const uint16_t*>(pools.k), static_cast<const uint16_t*>(pools.v), sequences, out);
  else
    attend(shape, q, static_cast<const float*>(pools.k), static_cast<const float*>(pools.v), sequences, out);
}

}  // namespace kiln::llm
