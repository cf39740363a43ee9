// The arena loan by itself (kernels/cpu/lent_workspace.h, onednn::thread_workspace): a request
// that fits what the thread's lender lends is served from it, one that does not (or one made
// without a lender, or on another thread) from the thread's own block; the lender is asked with
// the step and the bytes, a scope restores the lender it replaced, and the compile-time
// recorder keeps the largest need noted.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/cpu/lent_workspace.h"
#include "kernels/cpu/onednn_util.h"

namespace kiln::kernels {
namespace {

// A lender over a buffer of its own, recording what it was asked.
struct FakeArena {
  alignas(64) char bytes[4096];
  size_t lent_bytes = 4096;
  bool planned = true;
  std::vector<std::pair<size_t, size_t>> asked;  // (step, bytes)
  static LentWorkspace lend(void* owner, size_t step, size_t bytes) {
    auto* self = static_cast<FakeArena*>(owner);
    self->asked.emplace_back(step, bytes);
    return {self->bytes, self->lent_bytes, self->planned};
  }
  WorkspaceLender lender(size_t step) { return {&FakeArena::lend, this, step}; }
  bool holds(const void* p) const { return p >= bytes && p < bytes + sizeof bytes; }
};

TEST(LentWorkspaceTest, ARequestThatFitsIsServedFromTheLenderAndOneThatDoesNotFromTheThreadsBlock) {
  FakeArena arena;
  WorkspaceCounts& counts = workspace_counts();
  const uint64_t planned = counts.planned, free_range = counts.free_range, own = counts.own_block;
  {
    WorkspaceLenderScope scope(arena.lender(7));
    void* fits = onednn::thread_workspace(1000);
    EXPECT_EQ(fits, arena.bytes);
    void* too_large = onednn::thread_workspace(8192);
    ASSERT_NE(too_large, nullptr);
    EXPECT_FALSE(arena.holds(too_large));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(too_large) % 64, 0u);
  }
  ASSERT_EQ(arena.asked.size(), 2u);
  EXPECT_EQ(arena.asked[0], (std::pair<size_t, size_t>{7, 1000}));
  EXPECT_EQ(arena.asked[1], (std::pair<size_t, size_t>{7, 8192}));
  EXPECT_EQ(counts.planned - planned, 1u);
  EXPECT_EQ(counts.own_block - own, 1u);
  // A free part of the arena is counted as such.
  arena.planned = false;
  {
    WorkspaceLenderScope scope(arena.lender(8));
    EXPECT_EQ(onednn::thread_workspace(64), arena.bytes);
  }
  EXPECT_EQ(counts.free_range - free_range, 1u);
}

TEST(LentWorkspaceTest, WithoutALenderOrOnAnotherThreadTheThreadsOwnBlockServes) {
  FakeArena arena;
  void* outside = onednn::thread_workspace(256);
  ASSERT_NE(outside, nullptr);
  EXPECT_FALSE(arena.holds(outside));
  WorkspaceLenderScope scope(arena.lender(1));
  void* other = nullptr;
  std::thread([&] { other = onednn::thread_workspace(256); }).join();  // a worker has no lender
  EXPECT_NE(other, nullptr);
  EXPECT_FALSE(arena.holds(other));
  EXPECT_TRUE(arena.asked.empty());
}

TEST(LentWorkspaceTest, AScopeRestoresTheLenderItReplaced) {
  FakeArena outer, inner;
  EXPECT_EQ(t_workspace_lender.lend, nullptr);
  {
    WorkspaceLenderScope a(outer.lender(1));
    {
      WorkspaceLenderScope b(inner.lender(2));
      EXPECT_EQ(onednn::thread_workspace(64), inner.bytes);
    }
    EXPECT_EQ(onednn::thread_workspace(64), outer.bytes);
    // An empty lender (the runtime's without a plan) lends nothing.
    WorkspaceLenderScope none(WorkspaceLender{});
    EXPECT_FALSE(outer.holds(onednn::thread_workspace(64)));
  }
  EXPECT_EQ(t_workspace_lender.lend, nullptr);
  EXPECT_EQ(outer.asked.size(), 1u);
  EXPECT_EQ(inner.asked.size(), 1u);
}

TEST(LentWorkspaceTest, TheRecorderKeepsTheLargestNeedAndNests) {
  note_workspace_need(1 << 20);  // no recorder: nothing happens
  WorkspaceNeedRecorder outer;
  note_workspace_need(300);
  {
    WorkspaceNeedRecorder inner;
    note_workspace_need(500);
    note_workspace_need(200);
    EXPECT_EQ(inner.bytes(), 500u);
  }
  note_workspace_need(100);
  EXPECT_EQ(outer.bytes(), 300u);
  EXPECT_EQ(WorkspaceNeedRecorder::current(), &outer);
}

}  // namespace
}  // namespace kiln::kernels
