// The KV cache's block manager: a pool of fixed-size blocks of token slots handed out to
// sequences on demand from a free list and returned when a sequence ends, a block table per
// sequence (logical block i -> physical block), and the pool's statistics. It only does the
// bookkeeping; kv_cache.h holds the K/V storage the block numbers index.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kiln::llm {

struct BlockStats {
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;
  int64_t blocks_free = 0;
  int64_t slots_allocated = 0;  // blocks_used * block_size
  int64_t slots_used = 0;       // tokens stored
  int64_t sequences = 0;
  // Internal fragmentation: allocated token slots no token fills (only in each sequence's
  // last, partly filled block) / allocated slots; 0 when nothing is allocated.
  double fragmentation() const {
    return slots_allocated ? static_cast<double>(slots_allocated - slots_used) / slots_allocated : 0.0;
  }
};

// Not thread-safe: the engine's scheduler owns it.
class BlockManager {
 public:
  // `num_blocks` > 0 blocks of `block_size` > 0 token slots (checked by the caller: engine
  // options are validated before this is built).
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // Blocks a sequence of `tokens` tokens occupies.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Starts an empty sequence. Invalid argument if `seq` exists.
  Status add_sequence(int64_t seq);
  bool has_sequence(int64_t seq) const { return tables_.count(seq) != 0; }
  // Makes room for `seq` to hold `tokens` tokens in all, taking blocks from the free list as
  // needed. Resource exhausted (and nothing taken) when the free list is too short; not found
  // for an unknown sequence.
  Status reserve(int64_t seq, int64_t tokens);
  // Whether reserve(seq, tokens) would succeed (an unknown sequence counts as empty).
  bool can_reserve(int64_t seq, int64_t tokens) const;
  // Records that `seq` now stores `tokens` tokens (<= its reserved capacity: a KILN_CHECK).
  void set_length(int64_t seq, int64_t tokens);
  int64_t length(int64_t seq) const;
  // Returns the sequence's blocks to the free list; unknown sequences are ignored.
  void free_sequence(int64_t seq);
  // Logical block i of `seq` -> physical block; must exist.
  const std::vector<int32_t>& block_table(int64_t seq) const;

  BlockStats stats() const;

 private:
  struct Table {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  const Table& table(int64_t seq) const;
  int64_t num_blocks_, block_size_;
  // LIFO: the block freed last is handed out first, while it is still warm in cache.
  std::vector<int32_t> free_;
  std::unordered_map<int64_t, Table> tables_;
};

}  // namespace kiln::llm
