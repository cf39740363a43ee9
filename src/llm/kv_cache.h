// The paged KV cache: one preallocated pool of blocks per layer for keys and one for values,
// in the layout paged_attention.h reads ([block][slot][kv_head][head_dim] fp32), and the
// block manager that hands the blocks out.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "llm/block_manager.h"

namespace kiln::llm {

class KvCache {
 public:
  // Resource exhausted when the pool cannot be allocated.
  static Expected<std::unique_ptr<KvCache>> create(int64_t layers, int64_t kv_heads, int64_t head_dim,
                                                   int64_t num_blocks, int64_t block_size);
  // Bytes one block takes over all layers, K and V.
  static int64_t block_bytes(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_size) {
    return 2 * layers * block_size * kv_heads * head_dim * static_cast<int64_t>(sizeof(float));
  }

  BlockManager& blocks() { return blocks_; }
  const BlockManager& blocks() const { return blocks_; }
  const float* keys(int64_t layer) const { return k_[layer].get(); }
  const float* values(int64_t layer) const { return v_[layer].get(); }
  // Stores one token's K and V rows ([kv_heads][head_dim] each) at position `pos` of a
  // sequence whose block table covers it.
  void write(int64_t layer, const int32_t* table, int64_t pos, const float* k, const float* v);
  // Copies block `src`'s K and V into block `dst` in every layer (copy-on-write).
  void copy_block(int32_t src, int32_t dst);

 private:
  KvCache(int64_t num_blocks, int64_t block_size) : blocks_(num_blocks, block_size) {}
  BlockManager blocks_;
  int64_t row_ = 0;  // floats per token slot: kv_heads * head_dim
  std::vector<std::unique_ptr<float[]>> k_, v_;
};

}  // namespace kiln::llm
