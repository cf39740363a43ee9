// The paged KV cache: one preallocated pool of blocks per layer for keys and one for values,
// in the layout paged_attention.h reads ([block][slot][kv_head][head_dim], fp32 or bf16), and
// the block manager that hands the blocks out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "llm/block_manager.h"
#include "llm/paged_attention.h"

namespace kiln::llm {

// The element types a pool may hold: float32, or bfloat16 (half the bytes, so twice the blocks
// in the same memory; rounded to nearest even on store, widened to float32 by paged attention).
bool kv_dtype_supported(DataType dtype);
// "fp32" / "bf16" (the spelling of kiln compile --precision) and the dtype names "float32" /
// "bfloat16"; nullopt for anything else. The CLI, the C API and kiln serve's config share it.
std::optional<DataType> kv_dtype_from_name(std::string_view name);
// "fp32" or "bf16".
const char* kv_dtype_name(DataType dtype);

class KvCache {
 public:
  // Invalid argument for a non-positive size or a dtype kv_dtype_supported refuses; resource
  // exhausted when the pool cannot be allocated.
  // `zero_filled`: every slot starts at 0 (padded attention reads slots never written, at weight
  // 0, which must be finite); otherwise the pool is left untouched until used.
  static Expected<std::unique_ptr<KvCache>> create(int64_t layers, int64_t kv_heads, int64_t head_dim,
                                                   int64_t num_blocks, int64_t block_size,
                                                   DataType dtype = DataType::kFloat32, bool zero_filled = false);
  // Bytes one block takes over all layers, K and V.
  static int64_t block_bytes(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_size,
                             DataType dtype = DataType::kFloat32) {
    return 2 * layers * block_size * kv_heads * head_dim * (dtype == DataType::kBFloat16 ? 2 : 4);
  }

  BlockManager& blocks() { return blocks_; }
  const BlockManager& blocks() const { return blocks_; }
  DataType dtype() const { return dtype_; }
  // Layer `layer`'s K and V pools, as paged_attention reads them.
  KvPools pools(int64_t layer) const { return {k_[layer].get(), v_[layer].get(), dtype_}; }
  // Stores one token's K and V rows ([kv_heads][head_dim] fp32 each) at position `pos` of a
  // sequence whose block table covers it, rounded to the pool's dtype.
  void write(int64_t layer, const int32_t* table, int64_t pos, const float* k, const float* v);
  // Copies block `src`'s K and V into block `dst` in every layer (copy-on-write).
  void copy_block(int32_t src, int32_t dst);

 private:
  KvCache(int64_t num_blocks, int64_t block_size) : blocks_(num_blocks, block_size) {}
  BlockManager blocks_;
  DataType dtype_ = DataType::kFloat32;
  int64_t row_ = 0;        // elements per token slot: kv_heads * head_dim
  int64_t elem_bytes_ = 4;
  std::vector<std::unique_ptr<std::byte[]>> k_, v_;
};

}  // namespace kiln::llm
