// The KV cache's block manager: a pool of fixed-size blocks of token slots handed out to
// sequences on demand from a free list and returned when a sequence ends, a block table per
// sequence (logical block i -> physical block), and the pool's statistics. It only does the
// bookkeeping; kv_cache.h holds the K/V storage the block numbers index.
//
// Prefix sharing (vLLM's automatic prefix caching): blocks are reference-counted. Every full
// block of a sequence is registered under a hash of its token ids chained with the previous
// block's hash, so equal hashes mean equal prefixes up to and including that block. A new
// sequence whose context starts with registered blocks maps them (one more reference each)
// instead of recomputing them. A registered block whose last user ends stays cached: it counts
// as free, and is only evicted (least recently released first) when no uncached block is left.
// Writing into a block other sequences map copies it first (copy-on-write, make_writable).
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::llm {

struct BlockStats {
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;
  int64_t blocks_free = 0;
  int64_t slots_allocated = 0;  // blocks_used * block_size
  int64_t slots_used = 0;       // tokens stored, a shared block counted once
  int64_t sequences = 0;
  int64_t blocks_shared = 0;      // blocks more than one sequence maps
  int64_t blocks_cached = 0;      // free blocks still holding a registered prefix (evictable)
  int64_t copies_on_write = 0;    // ever
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
  // Uncached free blocks and cached ones no sequence maps (evictable).
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
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
  // For a sequence with no blocks yet: maps the cached blocks that hold the longest prefix of
  // tokens[0, max_tokens) made of whole blocks, sets its length to them and returns the tokens
  // they hold.
  int64_t match_prefix(int64_t seq, const std::vector<int64_t>& tokens, int64_t max_tokens);
  // Registers the full blocks of `seq` holding tokens[0, n) (n <= its capacity) that are not
  // registered yet, so later sequences can map them. Call once their K/V is (or, within the
  // same prefill pass, will be) written; a block whose hash another block already holds stays
  // unregistered.
  void register_blocks(int64_t seq, const int64_t* tokens, int64_t n);
  // Before writing token position `pos` of `seq`: if the block holding it is mapped by other
  // sequences too (or cached under its hash), gives `seq` a private block and returns the
  // (source, destination) pair whose K/V the caller must copy; {-1, -1} when the block is
  // already private. Resource exhausted when no block is free for the copy.
  Expected<std::pair<int32_t, int32_t>> make_writable(int64_t seq, int64_t pos);
  int32_t ref_count(int32_t block) const { return refs_[block]; }
  // Records that `seq` now stores `tokens` tokens (<= its reserved capacity: a KILN_CHECK).
  void set_length(int64_t seq, int64_t tokens);
  int64_t length(int64_t seq) const;
  // Drops the sequence's reference to each of its blocks; a block nobody maps any more goes
  // back to the free list (or, if registered, to the evictable cache); unknown sequences are
  // ignored.
  void free_sequence(int64_t seq);
  // Logical block i of `seq` -> physical block; must exist.
  const std::vector<int32_t>& block_table(int64_t seq) const;

  BlockStats stats() const;

 private:
  struct Table {
    std::vector<int32_t> blocks;
    int64_t length = 0;
    int64_t registered = 0;  // leading full blocks already registered (or found duplicate)
    uint64_t last_hash = 0;  // hash of block registered-1
  };
  struct Cached {
    uint64_t parent = 0;  // the previous block's hash (0 for a first block)
    std::vector<int64_t> tokens;
  };
  const Table& table(int64_t seq) const;
  // A block off the free list, or else the least recently released cached one (its hash is
  // dropped); the caller checked one is there.
  int32_t take_block();
  void release(int32_t block);
  uint64_t chain_hash(uint64_t parent, const int64_t* tokens) const;
  int64_t num_blocks_, block_size_;
  // LIFO: the block freed last is handed out first, while it is still warm in cache.
  std::vector<int32_t> free_;
  // Registered blocks with no user, oldest release first; evictable_at_[b] is b's place.
  std::list<int32_t> evictable_;
  std::vector<std::list<int32_t>::iterator> evictable_at_;
  std::vector<int32_t> refs_;
  // Registered blocks: hash -> block, and per block its hash (0: none) and what it holds, so a
  // hash collision is caught by comparing the tokens and the parent hash.
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<uint64_t> hash_of_;
  std::vector<Cached> cached_;
  std::unordered_map<int64_t, Table> tables_;
  int64_t copies_on_write_ = 0;
};

}  // namespace kiln::llm
