// The KV cache's block manager (block_manager.h).
#include "llm/block_manager.h"

#include <algorithm>

namespace kiln::llm {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  KILN_CHECK(num_blocks > 0 && block_size > 0, "%lld blocks of %lld tokens", (long long)num_blocks, (long long)block_size);
  free_.reserve(num_blocks);
  // Highest first so that the first blocks handed out are 0, 1, 2, ...
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  evictable_at_.resize(num_blocks);
  refs_.assign(num_blocks, 0);
  hash_of_.assign(num_blocks, 0);
  cached_.resize(num_blocks);
}

Status BlockManager::add_sequence(int64_t seq) {
  if (!tables_.emplace(seq, Table{}).second) return invalid_argument("sequence %lld already exists", (long long)seq);
  return ok_status();
}

const BlockManager::Table& BlockManager::table(int64_t seq) const {
  auto it = tables_.find(seq);
  KILN_CHECK(it != tables_.end(), "unknown sequence %lld", (long long)seq);
  return it->second;
}

uint64_t BlockManager::chain_hash(uint64_t parent, const int64_t* tokens) const {
  // FNV-1a over the parent hash and the block's token ids; never 0, which means "none".
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int64_t i = 0; i < block_size_; ++i) mix(static_cast<uint64_t>(tokens[i]));
  return h ? h : 1;
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    KILN_CHECK(!evictable_.empty(), "no free KV block");
    b = evictable_.front();  // eviction: the cached block released longest ago
    evictable_.pop_front();
    by_hash_.erase(hash_of_[b]);
    hash_of_[b] = 0;
  }
  refs_[b] = 1;
  return b;
}

void BlockManager::release(int32_t b) {
  KILN_CHECK(refs_[b] > 0, "KV block %d released more often than mapped", b);
  if (--refs_[b] > 0) return;
  if (hash_of_[b]) {
    evictable_.push_back(b);
    evictable_at_[b] = std::prev(evictable_.end());
  } else {
    free_.push_back(b);
  }
}

bool BlockManager::can_reserve(int64_t seq, int64_t tokens) const {
  auto it = tables_.find(seq);
  const int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  return blocks_for(tokens) - have <= free_blocks();
}

Status BlockManager::reserve(int64_t seq, int64_t tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return not_found("sequence %lld has no block table", (long long)seq);
  std::vector<int32_t>& blocks = it->second.blocks;
  const int64_t need = blocks_for(tokens) - static_cast<int64_t>(blocks.size());
  if (need <= 0) return ok_status();
  if (need > free_blocks())
    return resource_exhausted("KV cache out of blocks: sequence %lld needs %lld more block(s) of %lld tokens, %lld of %lld free",
                              (long long)seq, (long long)need, (long long)block_size_, (long long)free_blocks(),
                              (long long)num_blocks_);
  for (int64_t i = 0; i < need; ++i) blocks.push_back(take_block());
  return ok_status();
}

int64_t BlockManager::match_prefix(int64_t seq, const std::vector<int64_t>& tokens, int64_t max_tokens) {
  auto it = tables_.find(seq);
  KILN_CHECK(it != tables_.end() && it->second.blocks.empty(), "sequence %lld: prefix match needs an empty table",
             (long long)seq);
  Table& t = it->second;
  const int64_t full = std::min(static_cast<int64_t>(tokens.size()), max_tokens) / block_size_;
  uint64_t parent = 0;
  for (int64_t i = 0; i < full; ++i) {
    const int64_t* block_tokens = tokens.data() + i * block_size_;
    const uint64_t h = chain_hash(parent, block_tokens);
    auto found = by_hash_.find(h);
    if (found == by_hash_.end()) break;
    const int32_t b = found->second;
    const Cached& c = cached_[b];
    if (c.parent != parent || !std::equal(c.tokens.begin(), c.tokens.end(), block_tokens)) break;  // a collision
    if (refs_[b] == 0) evictable_.erase(evictable_at_[b]);  // revived from the cache
    ++refs_[b];
    t.blocks.push_back(b);
    parent = h;
  }
  t.registered = static_cast<int64_t>(t.blocks.size());
  t.last_hash = parent;
  t.length = t.registered * block_size_;
  return t.length;
}

void BlockManager::register_blocks(int64_t seq, const int64_t* tokens, int64_t n) {
  auto it = tables_.find(seq);
  KILN_CHECK(it != tables_.end() && blocks_for(n) <= static_cast<int64_t>(it->second.blocks.size()),
             "sequence %lld: registering %lld tokens beyond its blocks", (long long)seq, (long long)n);
  Table& t = it->second;
  for (; t.registered < n / block_size_; ++t.registered) {
    const int64_t* block_tokens = tokens + t.registered * block_size_;
    const uint64_t h = chain_hash(t.last_hash, block_tokens);
    const int32_t b = t.blocks[t.registered];
    // Another block already holds this prefix (computed side by side before either was
    // registered): keep the first; this one stays private and is freed, not cached.
    if (!hash_of_[b] && by_hash_.emplace(h, b).second) {
      hash_of_[b] = h;
      cached_[b].parent = t.last_hash;
      cached_[b].tokens.assign(block_tokens, block_tokens + block_size_);
    }
    t.last_hash = h;
  }
}

Expected<std::pair<int32_t, int32_t>> BlockManager::make_writable(int64_t seq, int64_t pos) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return not_found("sequence %lld has no block table", (long long)seq);
  Table& t = it->second;
  const int64_t i = pos / block_size_;
  KILN_CHECK(i < static_cast<int64_t>(t.blocks.size()), "sequence %lld: position %lld beyond its blocks", (long long)seq,
             (long long)pos);
  const int32_t src = t.blocks[i];
  // A block only this sequence maps is written in place, even if registered: registered
  // blocks are full, and a sequence rewrites one only to recompute the same token.
  if (refs_[src] == 1) return std::pair<int32_t, int32_t>{-1, -1};
  if (free_blocks() == 0)
    return resource_exhausted("KV cache out of blocks: sequence %lld needs a block to copy shared block %d into",
                              (long long)seq, src);
  const int32_t dst = take_block();
  release(src);
  t.blocks[i] = dst;
  // The copy stays unregistered: the source keeps the hash (and the cache entry).
  ++copies_on_write_;
  return std::pair<int32_t, int32_t>{src, dst};
}

void BlockManager::set_length(int64_t seq, int64_t tokens) {
  auto it = tables_.find(seq);
  KILN_CHECK(it != tables_.end() && tokens <= static_cast<int64_t>(it->second.blocks.size()) * block_size_,
             "sequence %lld: length %lld beyond its reserved blocks", (long long)seq, (long long)tokens);
  it->second.length = tokens;
}

int64_t BlockManager::length(int64_t seq) const { return table(seq).length; }

const std::vector<int32_t>& BlockManager::block_table(int64_t seq) const { return table(seq).blocks; }

void BlockManager::free_sequence(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  // Reverse order, so the sequence's first block is the next one handed out.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) release(*b);
  tables_.erase(it);
}

BlockStats BlockManager::stats() const {
  BlockStats s;
  s.blocks_total = num_blocks_;
  s.blocks_free = free_blocks();
  s.blocks_cached = static_cast<int64_t>(evictable_.size());
  s.blocks_used = num_blocks_ - s.blocks_free;
  s.slots_allocated = s.blocks_used * block_size_;
  for (int32_t r : refs_) s.blocks_shared += r > 1;
  // A shared block is full (only full blocks are matched, and a shared block is copied before
  // a write), so each table's partial tail is its own: count every full block once and the
  // tails per table.
  int64_t full_blocks = 0;
  for (const auto& [seq, t] : tables_) {
    s.slots_used += t.length % block_size_;
    for (int64_t i = 0; i < t.length / block_size_; ++i) full_blocks += refs_[t.blocks[i]] == 1;
  }
  // Full blocks mapped by several tables were counted by none above; add them once.
  for (int32_t r : refs_) full_blocks += r > 1;
  s.slots_used += full_blocks * block_size_;
  s.sequences = static_cast<int64_t>(tables_.size());
  s.copies_on_write = copies_on_write_;
  return s;
}

}  // namespace kiln::llm
