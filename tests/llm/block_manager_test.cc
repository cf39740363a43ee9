// The KV block manager: blocks handed out on demand, returned on free and reused, the
// out-of-blocks error leaving everything as it was, and the statistics; prefix sharing:
// reference counts, chained block hashes, copy-on-write, the cache of released prefixes and
// its eviction.
#include <gtest/gtest.h>

#include "llm/block_manager.h"
#include "llm/kv_cache.h"

namespace kiln::llm {
namespace {

TEST(BlockManager, ReservesBlocksOnDemandAsASequenceGrows) {
  BlockManager bm(8, 4);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  EXPECT_TRUE(bm.block_table(1).empty());
  ASSERT_TRUE(bm.reserve(1, 1).ok());
  EXPECT_EQ(bm.block_table(1).size(), 1u);
  ASSERT_TRUE(bm.reserve(1, 4).ok());  // still one block
  EXPECT_EQ(bm.block_table(1).size(), 1u);
  ASSERT_TRUE(bm.reserve(1, 5).ok());
  EXPECT_EQ(bm.block_table(1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(bm.free_blocks(), 6);
}

TEST(BlockManager, FreedBlocksAreReusedFirst) {
  BlockManager bm(8, 4);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.add_sequence(2).ok());
  ASSERT_TRUE(bm.reserve(1, 8).ok());  // blocks 0, 1
  ASSERT_TRUE(bm.reserve(2, 4).ok());  // block 2
  bm.free_sequence(1);
  EXPECT_FALSE(bm.has_sequence(1));
  EXPECT_EQ(bm.free_blocks(), 7);
  ASSERT_TRUE(bm.add_sequence(3).ok());
  ASSERT_TRUE(bm.reserve(3, 8).ok());
  EXPECT_EQ(bm.block_table(3), (std::vector<int32_t>{0, 1}));
  bm.free_sequence(42);  // unknown: ignored
  EXPECT_EQ(bm.free_blocks(), 5);
}

TEST(BlockManager, OutOfBlocksIsAnErrorThatTakesNothing) {
  BlockManager bm(3, 16);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.reserve(1, 20).ok());  // 2 blocks
  ASSERT_TRUE(bm.add_sequence(2).ok());
  EXPECT_FALSE(bm.can_reserve(2, 17));
  Status st = bm.reserve(2, 17);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("out of blocks"), std::string::npos) << st.message();
  EXPECT_TRUE(bm.block_table(2).empty());
  EXPECT_EQ(bm.free_blocks(), 1);
  EXPECT_TRUE(bm.reserve(2, 16).ok());
}

TEST(BlockManager, DuplicateAndUnknownSequencesAreErrors) {
  BlockManager bm(2, 4);
  ASSERT_TRUE(bm.add_sequence(5).ok());
  EXPECT_EQ(bm.add_sequence(5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.reserve(6, 1).code(), StatusCode::kNotFound);
}

TEST(BlockManager, StatisticsCountUsedFreeAndFragmentation) {
  BlockManager bm(10, 4);
  EXPECT_EQ(bm.stats().fragmentation(), 0.0);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.reserve(1, 5).ok());
  bm.set_length(1, 5);  // 2 blocks, 3 slots unused
  ASSERT_TRUE(bm.add_sequence(2).ok());
  ASSERT_TRUE(bm.reserve(2, 4).ok());
  bm.set_length(2, 4);  // 1 full block
  BlockStats s = bm.stats();
  EXPECT_EQ(s.blocks_total, 10);
  EXPECT_EQ(s.blocks_used, 3);
  EXPECT_EQ(s.blocks_free, 7);
  EXPECT_EQ(s.slots_allocated, 12);
  EXPECT_EQ(s.slots_used, 9);
  EXPECT_EQ(s.sequences, 2);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 3.0 / 12.0);
}

// Tokens 0..n-1 shifted by `base`: distinct contents per base.
std::vector<int64_t> ramp(int64_t n, int64_t base = 0) {
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = base + i;
  return t;
}

// Sequence 1 computes and registers the 8 tokens of `a` (blocks 0, 1 of 4 tokens); sequence
// 2 maps them.
void share_two_blocks(BlockManager& bm, const std::vector<int64_t>& a) {
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.reserve(1, 8).ok());
  bm.register_blocks(1, a.data(), 8);
  ASSERT_TRUE(bm.add_sequence(2).ok());
  ASSERT_EQ(bm.match_prefix(2, a, 8), 8);
  ASSERT_EQ(bm.block_table(2), (std::vector<int32_t>{0, 1}));
}

TEST(BlockManagerPrefix, AMatchingPrefixMapsTheSameBlocksAndCountsReferences) {
  BlockManager bm(16, 4);
  const std::vector<int64_t> a = ramp(10);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.reserve(1, 10).ok());
  bm.register_blocks(1, a.data(), 10);  // blocks 0 and 1 full, block 2 partial
  std::vector<int64_t> b = ramp(8);
  b.insert(b.end(), {99, 98, 97});
  ASSERT_TRUE(bm.add_sequence(2).ok());
  EXPECT_EQ(bm.match_prefix(2, b, 10), 8);
  EXPECT_EQ(bm.length(2), 8);
  EXPECT_EQ(bm.block_table(2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(bm.ref_count(0), 2);
  EXPECT_EQ(bm.ref_count(1), 2);
  EXPECT_EQ(bm.ref_count(2), 1);
  ASSERT_TRUE(bm.reserve(2, 11).ok());  // one more, private block
  EXPECT_EQ(bm.block_table(2).back(), 3);
  BlockStats s = bm.stats();
  EXPECT_EQ(s.blocks_used, 4);
  EXPECT_EQ(s.blocks_shared, 2);
  // max_tokens caps the match: 7 tokens hold one whole block.
  ASSERT_TRUE(bm.add_sequence(3).ok());
  EXPECT_EQ(bm.match_prefix(3, a, 7), 4);
  EXPECT_EQ(bm.ref_count(0), 3);
  // The same tokens at another position are another prefix: the hash chains the parent.
  ASSERT_TRUE(bm.add_sequence(4).ok());
  EXPECT_EQ(bm.match_prefix(4, ramp(8, 4), 8), 0);
  EXPECT_TRUE(bm.block_table(4).empty());
  // A partial block is never registered: 10 tokens, only 2 blocks match even with room.
  ASSERT_TRUE(bm.add_sequence(5).ok());
  EXPECT_EQ(bm.match_prefix(5, ramp(12), 12), 8);
}

TEST(BlockManagerPrefix, BlocksFreeWhenTheLastUserEndsAndStayCachedUntilEvicted) {
  BlockManager bm(4, 4);
  const std::vector<int64_t> a = ramp(8);
  share_two_blocks(bm, a);
  bm.free_sequence(1);
  EXPECT_EQ(bm.ref_count(0), 1);  // still mapped by 2
  EXPECT_EQ(bm.free_blocks(), 2);
  bm.free_sequence(2);
  EXPECT_EQ(bm.ref_count(0), 0);
  BlockStats s = bm.stats();
  EXPECT_EQ(s.blocks_free, 4);  // cached blocks count as free
  EXPECT_EQ(s.blocks_cached, 2);
  EXPECT_EQ(s.blocks_used, 0);
  // A later sequence revives them from the cache.
  ASSERT_TRUE(bm.add_sequence(3).ok());
  EXPECT_EQ(bm.match_prefix(3, a, 8), 8);
  EXPECT_EQ(bm.stats().blocks_cached, 0);
  bm.free_sequence(3);
  // Uncached blocks go first; then the cached ones are evicted, oldest release first.
  ASSERT_TRUE(bm.add_sequence(4).ok());
  ASSERT_TRUE(bm.reserve(4, 8).ok());
  EXPECT_EQ(bm.stats().blocks_cached, 2);
  ASSERT_TRUE(bm.reserve(4, 12).ok());
  EXPECT_EQ(bm.stats().blocks_cached, 1);
  ASSERT_TRUE(bm.reserve(4, 16).ok());
  EXPECT_EQ(bm.free_blocks(), 0);
  bm.free_sequence(4);
  ASSERT_TRUE(bm.add_sequence(5).ok());
  EXPECT_EQ(bm.match_prefix(5, a, 8), 0);  // evicted: the hashes are gone
}

TEST(BlockManagerPrefix, WritingIntoASharedBlockCopiesItFirst) {
  BlockManager bm(4, 4);
  const std::vector<int64_t> a = ramp(8);
  share_two_blocks(bm, a);
  auto copy = bm.make_writable(2, 5);  // block 1, shared
  ASSERT_TRUE(copy.ok()) << copy.status().to_string();
  EXPECT_EQ(copy->first, 1);
  EXPECT_EQ(copy->second, 2);
  EXPECT_EQ(bm.block_table(2), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(bm.ref_count(1), 1);
  EXPECT_EQ(bm.ref_count(2), 1);
  auto again = bm.make_writable(2, 6);  // now private: no copy
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->first, -1);
  EXPECT_EQ(bm.stats().copies_on_write, 1);
  // The other user copies too, taking the last block; one more copy has no room.
  ASSERT_TRUE(bm.make_writable(1, 0).ok());
  EXPECT_EQ(bm.free_blocks(), 0);
  ASSERT_TRUE(bm.add_sequence(3).ok());
  ASSERT_EQ(bm.match_prefix(3, a, 4), 4);  // block 0, still cached under its hash, now shared by 2 and 3
  auto full = bm.make_writable(3, 0);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
}

TEST(BlockManagerPrefix, FragmentationCountsASharedBlockOnce) {
  BlockManager bm(8, 4);
  const std::vector<int64_t> a = ramp(8);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.reserve(1, 9).ok());
  bm.set_length(1, 9);
  bm.register_blocks(1, a.data(), 8);
  ASSERT_TRUE(bm.add_sequence(2).ok());
  ASSERT_EQ(bm.match_prefix(2, a, 8), 8);
  ASSERT_TRUE(bm.reserve(2, 10).ok());
  bm.set_length(2, 10);
  BlockStats s = bm.stats();
  EXPECT_EQ(s.blocks_used, 4);  // 2 shared + 1 tail each
  EXPECT_EQ(s.slots_allocated, 16);
  EXPECT_EQ(s.slots_used, 8 + 1 + 2);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 5.0 / 16.0);
}

TEST(KvCache, CopyBlockCopiesKeysAndValuesInEveryLayer) {
  auto cache = KvCache::create(2, 1, 3, 4, 2);
  ASSERT_TRUE(cache.ok());
  KvCache& kv = **cache;
  const int32_t table[] = {1};
  const float k0[] = {1, 2, 3}, v0[] = {4, 5, 6}, k1[] = {7, 8, 9}, v1[] = {10, 11, 12};
  for (int64_t layer = 0; layer < 2; ++layer) {
    kv.write(layer, table, 0, k0, v0);
    kv.write(layer, table, 1, k1, v1);
  }
  kv.copy_block(1, 3);
  for (int64_t layer = 0; layer < 2; ++layer) {
    const auto* keys = static_cast<const float*>(kv.pools(layer).k);
    const auto* values = static_cast<const float*>(kv.pools(layer).v);
    EXPECT_EQ(std::vector<float>(keys + 3 * 6, keys + 4 * 6), (std::vector<float>{1, 2, 3, 7, 8, 9}));
    EXPECT_EQ(std::vector<float>(values + 3 * 6, values + 4 * 6), (std::vector<float>{4, 5, 6, 10, 11, 12}));
  }
}

// A bf16 pool copies its 2-byte elements: a block's whole K and V, no more, no less.
TEST(KvCache, CopyBlockCopiesBf16Blocks) {
  auto cache = KvCache::create(1, 1, 3, 4, 2, DataType::kBFloat16);
  ASSERT_TRUE(cache.ok());
  KvCache& kv = **cache;
  const int32_t table[] = {1};
  const float k0[] = {1, 2, 3}, v0[] = {4, 5, 6}, k1[] = {7, 8, 9}, v1[] = {10, 11, 12};
  kv.write(0, table, 0, k0, v0);
  kv.write(0, table, 1, k1, v1);
  kv.copy_block(1, 3);
  const auto* keys = static_cast<const uint16_t*>(kv.pools(0).k);
  const auto* values = static_cast<const uint16_t*>(kv.pools(0).v);
  std::vector<float> k, v;
  for (int i = 3 * 6; i < 4 * 6; ++i) {
    k.push_back(bf16_to_float(keys[i]));
    v.push_back(bf16_to_float(values[i]));
  }
  EXPECT_EQ(k, (std::vector<float>{1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(v, (std::vector<float>{4, 5, 6, 10, 11, 12}));
  EXPECT_EQ(KvCache::block_bytes(2, 4, 8, 16, DataType::kBFloat16) * 2, KvCache::block_bytes(2, 4, 8, 16));
}

TEST(KvCache, UnsupportedElementTypeIsAClearError) {
  auto cache = KvCache::create(1, 1, 3, 4, 2, DataType::kFloat16);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("fp32 or bf16"), std::string::npos) << cache.status().message();
}

}  // namespace
}  // namespace kiln::llm
