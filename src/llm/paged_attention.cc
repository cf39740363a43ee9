// Paged attention, fp32 (paged_attention.h). Highway SIMD for the two loops over head_dim
// that carry the work (q.k per key, and the weighted sum of values); the target is the one
// the build compiles for (-march=native in the release preset), not a runtime dispatch: the
// engine is built for the machine it runs on, like the rest of the decode path.
#include "llm/paged_attention.h"

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace kiln::llm {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

float dot(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc);
  float s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// dst += w * src
void axpy(float w, const float* src, float* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vw = hn::Set(d, w);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(vw, hn::LoadU(d, src + i), hn::LoadU(d, dst + i)), d, dst + i);
  for (; i < n; ++i) dst[i] += w * src[i];
}

}  // namespace

void paged_attention(const AttentionShape& shape, const float* q, const float* k_pool, const float* v_pool,
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
      auto at = [&](const float* pool, int64_t j) {
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

}  // namespace kiln::llm
