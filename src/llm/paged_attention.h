// Paged attention, fp32: softmax(q k^T / sqrt(head_dim)) v for query tokens of many sequences
// at once, reading each sequence's keys and values through its block table from the KV
// cache's block pool (kv_cache.h), causal, with grouped-query attention (query head h reads
// KV head h / (heads / kv_heads)). Serves prefill (many query tokens of one sequence) and
// decode (one token of each of many sequences) alike.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::llm {

struct AttentionShape {
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // divides heads
  int64_t head_dim = 0;
  int64_t block_size = 0;  // token slots per KV block
};

// One sequence's part of a call: its query tokens sit at rows [row, row + count) of q and
// out and are its positions [start, start + count); token i attends to positions 0 .. start + i,
// which must already be in the cache.
struct AttentionSequence {
  const int32_t* block_table = nullptr;
  int64_t start = 0;
  int64_t count = 0;
  int64_t row = 0;
};

// Pool layout: [block][slot][kv_head][head_dim] floats, for K and for V alike. q and out are
// [rows][heads][head_dim]. Rows no sequence names are left untouched. Parallel over (token,
// head) pairs with parallel_for.
void paged_attention(const AttentionShape& shape, const float* q, const float* k_pool, const float* v_pool,
                     const std::vector<AttentionSequence>& sequences, float* out);

}  // namespace kiln::llm
