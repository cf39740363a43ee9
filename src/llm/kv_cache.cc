// The paged KV cache's storage (kv_cache.h).
#include "llm/kv_cache.h"

#include <algorithm>
#include <new>

namespace kiln::llm {

Expected<std::unique_ptr<KvCache>> KvCache::create(int64_t layers, int64_t kv_heads, int64_t head_dim,
                                                   int64_t num_blocks, int64_t block_size) {
  if (layers <= 0 || kv_heads <= 0 || head_dim <= 0 || num_blocks <= 0 || block_size <= 0)
    return invalid_argument("KV cache: layers, heads, head_dim, blocks and block size must be positive");
  std::unique_ptr<KvCache> cache(new KvCache(num_blocks, block_size));
  cache->row_ = kv_heads * head_dim;
  const size_t floats = static_cast<size_t>(num_blocks * block_size * cache->row_);
  for (int64_t l = 0; l < layers; ++l) {
    // Not zeroed: attention reads only slots written before, and untouched pages of a large
    // pool then cost nothing (zeroing 256 MiB took most of a short run).
    auto k = std::unique_ptr<float[]>(new (std::nothrow) float[floats]);
    auto v = std::unique_ptr<float[]>(new (std::nothrow) float[floats]);
    if (!k || !v)
      return resource_exhausted("KV cache: cannot allocate %lld blocks (%lld MiB)", (long long)num_blocks,
                                (long long)(block_bytes(layers, kv_heads, head_dim, block_size) * num_blocks >> 20));
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  return cache;
}

void KvCache::write(int64_t layer, const int32_t* table, int64_t pos, const float* k, const float* v) {
  const int64_t bs = blocks_.block_size();
  const int64_t slot = static_cast<int64_t>(table[pos / bs]) * bs + pos % bs;
  std::copy(k, k + row_, k_[layer].get() + slot * row_);
  std::copy(v, v + row_, v_[layer].get() + slot * row_);
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t floats = blocks_.block_size() * row_;
  for (size_t l = 0; l < k_.size(); ++l) {
    std::copy(k_[l].get() + src * floats, k_[l].get() + (src + 1) * floats, k_[l].get() + dst * floats);
    std::copy(v_[l].get() + src * floats, v_[l].get() + (src + 1) * floats, v_[l].get() + dst * floats);
  }
}

}  // namespace kiln::llm
