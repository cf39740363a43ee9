// The KV cache's block manager (block_manager.h).
#include "llm/block_manager.h"

namespace kiln::llm {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  KILN_CHECK(num_blocks > 0 && block_size > 0, "%lld blocks of %lld tokens", (long long)num_blocks, (long long)block_size);
  free_.reserve(num_blocks);
  // Highest first so that the first blocks handed out are 0, 1, 2, ...
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
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
  for (int64_t i = 0; i < need; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
  }
  return ok_status();
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
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) free_.push_back(*b);
  tables_.erase(it);
}

BlockStats BlockManager::stats() const {
  BlockStats s;
  s.blocks_total = num_blocks_;
  s.blocks_free = free_blocks();
  s.blocks_used = num_blocks_ - s.blocks_free;
  s.slots_allocated = s.blocks_used * block_size_;
  for (const auto& [seq, t] : tables_) s.slots_used += t.length;
  s.sequences = static_cast<int64_t>(tables_.size());
  return s;
}

}  // namespace kiln::llm
