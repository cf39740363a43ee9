// Paged attention (paged_attention.h). Highway SIMD for the two loops over head_dim that carry
// the work (q.k per key, and the weighted sum of values); the target is the one the build
// compiles for (-march=native in the release preset), not a runtime dispatch: the engine is
// built for the machine it runs on, like the rest of the decode path. One loop body serves
// both pool types: a bf16 K or V row is widened to fp32 as it is loaded (PromoteTo: the bf16
// bits shifted into the high half of a float, exact), so q, the scores and the sums stay fp32
// and a bf16 pool only halves the bytes read.
#include "llm/paged_attention.h"

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace kiln::llm {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using Df = hn::ScalableTag<float>;

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

// T: float (fp32 pools) or uint16_t (bf16 pools).
template <typename T>
void attend(const AttentionShape& shape, const float* q, const T* k_pool, const T* v_pool,
            const std::vector<AttentionSequence>& sequences, float* out) {
  const int64_t hd = shape.head_dim, heads = shape.heads, bs = shape.block_size;
  const int64_t group = heads / shape.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Work items: (sequence, token, head), numbered through a prefix sum over sequences.
  std::vector<int64_t> first_item(sequences.size() + 1, 0);
  for (size_t s = 0; s < sequences.size(); ++s) first_item[s + 1] = first_item[s] + sequences[s].count * heads;
  parallel_for(0, first_item.back(), 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    size_t s = std::upper_bound(first_item.begin(), first_item.end(), begin) - first_item.begin() - 1;
    for (int64_t item = begin; item < end; ++item) {
      while (item >= first_item[s + 1]) ++s;
      const AttentionSequence& seq = sequences[s];
      const int64_t local = item - first_item[s];
      const int64_t i = local / heads, h = local % heads, g = h / group;
      const int64_t row = seq.row + i;
      const int64_t keys = seq.start + i + 1;
      const float* qv = q + (row * heads + h) * hd;
      if (static_cast<int64_t>(scores.size()) < keys) scores.resize(keys);
      // Address of position j's K or V for KV head g: block table, then slot in the block.
      auto at = [&](const T* pool, int64_t j) {
        return pool + ((static_cast<int64_t>(seq.block_table[j / bs]) * bs + j % bs) * shape.kv_heads + g) * hd;
      };
      float max_score = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        scores[j] = dot(qv, at(k_pool, j), hd) * scale;
        max_score = std::max(max_score, scores[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < keys; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
      }
      float* dst = out + (row * heads + h) * hd;
      std::fill(dst, dst + hd, 0.0f);
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < keys; ++j) axpy(scores[j] * inv, at(v_pool, j), dst, hd);
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
