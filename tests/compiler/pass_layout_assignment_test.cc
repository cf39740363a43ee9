// layout_assignment (-O3): values between fast convolutions are stored channel-blocked
// (NC1HWC0), with kiln TransData only where a plain reader meets a blocked value; the graph
// computes what the -O1 graph's ONNX reference kernels compute (the oracle), and values
// that must stay plain (channels not a multiple of the block, graph outputs, readers that
// are not convolutions) stay plain.
#include <gtest/gtest.h>

#include <string>

#include "fusion_test_util.h"
#include "ops/layout.h"

namespace kiln::compiler {
namespace {

using testing::count_kiln_op;
using testing::expect_fused_matches_O1;
using testing::finit;
using testing::fmodel;
using testing::changed;

// The pass's note: "layout_assignment: B values in NC1HWC0 (c0 = 8), T TransData".
std::string layout_note(const CompiledModel& c) {
  for (const PassRecord& r : c.passes)
    if (r.name == "layout_assignment")
      for (const std::string& n : r.notes) return n;
  return "";
}

std::string expected_note(int blocked, int conversions) {
  return "layout_assignment: " + std::to_string(blocked) + " values in NC1HWC0 (c0 = " +
         std::to_string(__builtin_cpu_supports("avx512f") ? 16 : 8) + "), " + std::to_string(conversions) +
         " TransData";
}

const ir::Node* node_producing(const ir::Graph& g, const std::string& value) {
  const ir::Value* v = g.find_value(value);
  return v ? v->producer() : nullptr;
}

int64_t block() { return __builtin_cpu_supports("avx512f") ? 16 : 8; }

// Three 16-channel convs in a chain with a residual: every intermediate is blocked, the
// graph output is converted back once.
TEST(LayoutAssignmentTest, ConvChainStaysBlocked) {
  std::string text = fmodel("g (float[1,16,10,10] x) => (float[1,16,10,10] y)",
                            finit("w1", {16, 16, 3, 3}, 1) + finit("b1", {16}, 2) + finit("w2", {16, 16, 1, 1}, 3) +
                                finit("w3", {16, 16, 3, 3}, 4),
                            R"(
    c1 = Conv(x, w1, b1) <pads = [1, 1, 1, 1]>
    r1 = Relu(c1)
    c2 = Conv(r1, w2)
    r2 = Relu(c2)
    c3 = Conv(r2, w3) <pads = [1, 1, 1, 1]>
    s = Add(c3, r1)
    t = Relu(s)
    y = Sigmoid(t))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(layout_note(c), expected_note(2, 1));
  EXPECT_EQ(changed(c, "layout_assignment"), 3);
  EXPECT_EQ(count_kiln_op(*c.graph, "FusedConv"), 3);
  EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 1);
  // The first conv reads the plain graph input and writes blocked; the last writes plain for
  // the Sigmoid... through one TransData: its output feeds only a non-conv, so it stays plain.
  int blocked_x = 0, blocked_y = 0;
  for (const auto& n : c.graph->nodes()) {
    if (n->op_type() != "FusedConv") continue;
    blocked_x += n->attr_string("x_format", "") == ops::kFormatBlocked;
    blocked_y += n->attr_string("y_format", "") == ops::kFormatBlocked;
    if (n->attr_string("x_format", "") == ops::kFormatBlocked) EXPECT_EQ(n->attr_int("c0", 0), block());
  }
  EXPECT_EQ(blocked_x, 2);
  EXPECT_EQ(blocked_y, 2);
  const ir::Value* y = c.graph->outputs()[0];
  EXPECT_EQ(y->shape().static_dims(), (std::vector<int64_t>{1, 16, 10, 10}));
}

// The residual read both as a conv input and by plain ops: one shared TransData.
TEST(LayoutAssignmentTest, PlainReadersShareOneConversion) {
  std::string text = fmodel("g (float[1,8,6,6] x) => (float[1,8,6,6] y, float[1,8,6,6] p)",
                            finit("w1", {8, 8, 3, 3}, 5) + finit("w2", {8, 8, 3, 3}, 6), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    r1 = Relu(c1)
    c2 = Conv(r1, w2) <pads = [1, 1, 1, 1]>
    y = Relu(c2)
    m = LpPool(r1) <kernel_shape = [3, 3], pads = [1, 1, 1, 1]>
    q = Sigmoid(r1)
    p = Add(m, q))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  if (block() != 8) GTEST_SKIP() << "8 channels are blocked only where the block is 8 (AVX2)";
  EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 1);
  const ir::Node* pool = nullptr;
  for (const auto& n : c.graph->nodes())
    if (n->op_type() == "LpPool") pool = n.get();
  ASSERT_TRUE(pool);
  const ir::Node* conv = pool->input(0)->producer();
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->op_type(), "TransData");
  EXPECT_EQ(conv->attr_string("dst_format", ""), ops::kFormatPlain);
}

// Must not fire: channels not a multiple of the block; a conv output that is a graph
// output; a conv whose reader is not a conv; a grouped (not depthwise) conv.
TEST(LayoutAssignmentTest, DoesNotFireWhereItCannotHelp) {
  // 5 channels: channel_padding does not widen so few to a block either (8 or 16).
  const std::string odd = fmodel("g (float[1,5,6,6] x) => (float[1,5,6,6] y)",
                                 finit("w1", {5, 5, 3, 3}, 7) + finit("w2", {5, 5, 3, 3}, 8), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    r = Relu(c1)
    y = Conv(r, w2) <pads = [1, 1, 1, 1]>)");
  const std::string pinned = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] r, float[1,16,6,6] y)",
                                    finit("w1", {16, 16, 3, 3}, 9) + finit("w2", {16, 16, 3, 3}, 10), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    r = Relu(c1)
    y = Conv(r, w2) <pads = [1, 1, 1, 1]>)");
  const std::string lone = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y)", finit("w1", {16, 16, 3, 3}, 11), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    y = Sigmoid(c1))");
  const std::string grouped = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y)",
                                     finit("w1", {16, 4, 3, 3}, 12) + finit("w2", {16, 16, 1, 1}, 13), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1], group = 4>
    r = Relu(c1)
    y = Conv(r, w2))");
  for (const std::string& text : {odd, pinned, lone, grouped}) {
    auto c = expect_fused_matches_O1(text, 3);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(changed(c, "layout_assignment"), 0) << text;
    EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 0) << text;
  }
}

// Depthwise convs (MobileNet's) are blockable; a plain ONNX Conv (nothing fused) becomes a
// FusedConv to carry the formats.
TEST(LayoutAssignmentTest, DepthwiseAndUnfusedConv) {
  std::string text = fmodel("g (float[1,16,7,7] x) => (float[1,16,7,7] y)",
                            finit("w1", {16, 16, 1, 1}, 14) + finit("w2", {16, 1, 3, 3}, 15) +
                                finit("w3", {16, 16, 1, 1}, 16),
                            R"(
    c1 = Conv(x, w1)
    c2 = Conv(c1, w2) <pads = [1, 1, 1, 1], group = 16>
    r2 = Clip(c2)
    c3 = Conv(r2, w3)
    y = Relu(c3))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(layout_note(c), expected_note(2, 0));
  EXPECT_EQ(count_kiln_op(*c.graph, "FusedConv"), 3);
  EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 0);
  const ir::Node* first = node_producing(*c.graph, "c1");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->op_type(), "FusedConv");
  EXPECT_EQ(first->attr_string("y_format", ""), ops::kFormatBlocked);
}

// A blocked-output conv whose residual comes from a plain producer reads a TransData of it.
TEST(LayoutAssignmentTest, PlainResidualIsConverted) {
  std::string text = fmodel("g (float[1,16,6,6] x, float[1,16,6,6] z) => (float[1,16,6,6] y)",
                            finit("w1", {16, 16, 3, 3}, 17) + finit("w2", {16, 16, 1, 1}, 18), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    s = Add(c1, z)
    r = Relu(s)
    c2 = Conv(r, w2)
    y = Relu(c2))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(layout_note(c), expected_note(1, 1));
  const ir::Node* t = nullptr;
  for (const auto& n : c.graph->nodes())
    if (n->op_type() == "TransData") t = n.get();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->input(0)->name(), "z");
  EXPECT_EQ(t->attr_string("dst_format", ""), ops::kFormatBlocked);
}

// Pools inside a blocked region compute blocked (kiln Pooling): conv -> MaxPool -> conv needs
// no conversion; the global pool at the end is blocked too and converted once for Flatten.
TEST(LayoutAssignmentTest, PoolsJoinTheBlockedRegion) {
  std::string text = fmodel("g (float[1,3,20,20] x) => (float[1,16] y)",
                            finit("w1", {16, 3, 3, 3}, 21) + finit("w2", {16, 16, 3, 3}, 22), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1], strides = [2, 2]>
    r1 = Relu(c1)
    m = MaxPool(r1) <kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]>
    c2 = Conv(m, w2) <pads = [1, 1, 1, 1]>
    r2 = Relu(c2)
    a = AveragePool(r2) <kernel_shape = [2, 2], strides = [1, 1]>
    g = GlobalAveragePool(a)
    y = Flatten(g))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(layout_note(c), expected_note(5, 1));
  EXPECT_EQ(count_kiln_op(*c.graph, "Pooling"), 3);
  EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 1);
  const ir::Node* flatten = node_producing(*c.graph, "y");
  ASSERT_TRUE(flatten);
  EXPECT_EQ(flatten->input(0)->producer()->op_type(), "TransData");
  for (const auto& n : c.graph->nodes())
    if (n->op_type() == "Pooling") EXPECT_EQ(n->attr_string("format", ""), ops::kFormatBlocked);
}

// A pool whose input is plain stays an ONNX pool.
TEST(LayoutAssignmentTest, PoolOnPlainInputStaysPlain) {
  std::string text = fmodel("g (float[1,16,8,8] x) => (float[1,16,8,8] y)", finit("w1", {16, 16, 3, 3}, 23), R"(
    m = MaxPool(x) <kernel_shape = [3, 3], pads = [1, 1, 1, 1]>
    c1 = Conv(m, w1) <pads = [1, 1, 1, 1]>
    y = Relu(c1))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(changed(c, "layout_assignment"), 0);
  EXPECT_EQ(count_kiln_op(*c.graph, "Pooling"), 0);
}

// -O2 keeps everything plain: the pass is -O3 only.
TEST(LayoutAssignmentTest, OnlyAtO3) {
  std::string text = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y)",
                            finit("w1", {16, 16, 3, 3}, 19) + finit("w2", {16, 16, 3, 3}, 20), R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    r = Relu(c1)
    y = Conv(r, w2) <pads = [1, 1, 1, 1]>)");
  auto c = expect_fused_matches_O1(text, 2);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 0);
  for (const auto& n : c.graph->nodes()) EXPECT_EQ(n->attr_string("y_format", ops::kFormatPlain), ops::kFormatPlain);
}

}  // namespace
}  // namespace kiln::compiler
