// memory_scheduling: a traced order that keeps two large branch tensors alive at once is
// reordered to run each branch to its reduction first; the arena shrinks, results do not
// change, and an order that is already best is left alone.
#include <gtest/gtest.h>

#include "compiler/memory_plan.h"
#include "pass_test_util.h"

namespace kiln::compiler {
namespace {

using testing::changed;
using testing::compile_text;
using testing::expect_same_as_O0;

// Two projections of x to [1,4096] (16 KiB each), each reduced to one number. The
// exporter's order computes both projections before either reduction.
const char* kInterleaved = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16] x, float[16,4096] wa, float[16,4096] wb) => (float[1,1] y) {
  a = MatMul(x, wa)
  b = MatMul(x, wb)
  ra = ReduceSum <keepdims = 1> (a)
  rb = ReduceSum <keepdims = 1> (b)
  y = Add(ra, rb)
})";

TEST(MemorySchedulingTest, RunsEachBranchToItsReductionFirst) {
  auto before = compile_text(kInterleaved, 3, {"memory_scheduling"});
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  auto plan_before = plan_memory(*before->graph);
  ASSERT_TRUE(plan_before.ok());
  // Both 16 KiB projections are live together in the traced order.
  EXPECT_GE(plan_before->arena_bytes, 2u * 4096 * 4);

  CompiledModel after = expect_same_as_O0(kInterleaved, 3);
  ASSERT_TRUE(after.graph);
  EXPECT_GT(changed(after, "memory_scheduling"), 0);
  auto plan_after = plan_memory(*after.graph);
  ASSERT_TRUE(plan_after.ok());
  EXPECT_LT(plan_after->arena_bytes, plan_before->arena_bytes);
  EXPECT_LT(plan_after->arena_bytes, 2u * 4096 * 4);
  // The schedule is a valid topological order (each reduction after its projection).
  std::vector<std::string> order;
  for (const auto& n : after.graph->nodes()) order.push_back(n->outputs()[0]->name());
  auto pos = [&](const std::string& name) { return std::find(order.begin(), order.end(), name) - order.begin(); };
  EXPECT_LT(pos("a"), pos("ra"));
  EXPECT_LT(pos("b"), pos("rb"));
  EXPECT_TRUE(pos("ra") < pos("b") || pos("rb") < pos("a")) << "one branch must finish before the other starts";
}

TEST(MemorySchedulingTest, BestOrderIsKept) {
  auto c = expect_same_as_O0(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16] x, float[16,4096] wa, float[16,4096] wb) => (float[1,1] y) {
  a = MatMul(x, wa)
  ra = ReduceSum <keepdims = 1> (a)
  b = MatMul(x, wb)
  rb = ReduceSum <keepdims = 1> (b)
  y = Add(ra, rb)
})", 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(changed(c, "memory_scheduling"), 0);
}

TEST(MemorySchedulingTest, ReorderRejectsAnOrderBreakingDependencies) {
  auto c = compile_text(kInterleaved, 0);
  ASSERT_TRUE(c.ok());
  std::vector<const ir::Node*> order;
  for (const auto& n : c->graph->nodes()) order.push_back(n.get());
  std::reverse(order.begin(), order.end());
  Status s = c->graph->reorder_nodes(order);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("before"), std::string::npos) << s.message();
  // Nothing changed: the graph still runs in its original order.
  EXPECT_TRUE(ir::verify(*c->graph).ok());
  order.pop_back();
  EXPECT_FALSE(c->graph->reorder_nodes(order).ok());
}

}  // namespace
}  // namespace kiln::compiler
