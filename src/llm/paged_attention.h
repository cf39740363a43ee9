// Paged attention: softmax(q k^T / sqrt(head_dim)) v for query tokens of many sequences at
// once, reading each sequence's keys and values through its block table from the KV cache's
// block pool (kv_cache.h), fp32 or bf16 (widened to fp32 as loaded; the math is fp32), causal, with grouped-query attention (query head h reads
// KV head h / (heads / kv_heads)). Serves prefill (many query tokens of one sequence) and
// decode (one token of each of many sequences) alike.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

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
  // Static-shape emulation (kiln llm-bench's fixed-length baselines): when larger than a token's
  // causal keys, the token also scores positions up to padded_keys - 1 and takes them through
  // the softmax and the weighted sum of values at weight 0, as a graph compiled for a padded
  // length computes them. The block table must cover padded_keys positions, whose slots hold
  // finite values (a zero-filled pool); the result is the same as without. 0: causal keys only.
  int64_t padded_keys = 0;
};

// One layer's K and V pools, [block][slot][kv_head][head_dim] elements of `dtype` each:
// kFloat32 (float) or kBFloat16 (uint16_t bits, as core/dtype.h's float_to_bf16 stores them).
struct KvPools {
  const void* k = nullptr;
  const void* v = nullptr;
  DataType dtype = DataType::kFloat32;
};

// q and out are [rows][heads][head_dim] floats. Rows no sequence names are left untouched.
// Parallel with parallel_for over query tokens (and ranges of KV heads when there are fewer
// tokens than twice the threads). `pools.dtype` must be kFloat32 or
// kBFloat16 (KvCache::create checks it).
void paged_attention(const AttentionShape& shape, const float* q, const KvPools& pools,
                     const std::vector<AttentionSequence>& sequences, float* out);

}  // namespace kiln::llm
