// The KV block manager: blocks handed out on demand, returned on free and reused, the
// out-of-blocks error leaving everything as it was, and the statistics.
#include <gtest/gtest.h>

#include "llm/block_manager.h"

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

}  // namespace
}  // namespace kiln::llm
