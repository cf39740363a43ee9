// channel_padding (-O3): a value between convolutions whose channels do not fill whole
// NC1HWC0 blocks is widened with zero channels (the producer's extra output channels, the
// readers' extra input channels) so that layout_assignment stores it blocked; the graph
// computes what the -O1 graph computes (the oracle), and values it cannot widen exactly
// (an activation not mapping 0 to 0, a reader that is not a convolution, a graph output,
// a grouped reader, a residual whose sum stays narrow, too many extra channels) keep their
// channels.
#include <gtest/gtest.h>

#include <string>

#include "fusion_test_util.h"
#include "ops/layout.h"

namespace kiln::compiler {
namespace {

using testing::changed;
using testing::count_kiln_op;
using testing::expect_fused_matches_O1;
using testing::finit;
using testing::fmodel;

int64_t block() { return __builtin_cpu_supports("avx512f") ? 16 : 8; }

std::string pass_note(const CompiledModel& c, const std::string& pass) {
  for (const PassRecord& r : c.passes)
    if (r.name == pass)
      for (const std::string& n : r.notes) return n;
  return "";
}

// 12 channels: 12 -> 16 with the block of 16 (AVX-512) and of 8 (AVX2) alike.
TEST(ChannelPaddingTest, ValuesBetweenConvolutionsAreWidenedAndBlocked) {
  // conv 16 -> 12 (Relu), conv 12 -> 12 3x3 adding the first as residual (Clip 0..6), an
  // unfused conv 12 -> 12 (stride 2) with bias, then 12 -> 16 (HardSwish) and a plain reader.
  std::string text = fmodel("g (float[1,16,9,11] x) => (float[1,16,5,6] y)",
                            finit("w1", {12, 16, 1, 1}, 1) + finit("b1", {12}, 2) + finit("w2", {12, 12, 3, 3}, 3) +
                                finit("b2", {12}, 4) + finit("w3", {12, 12, 3, 3}, 5) + finit("b3", {12}, 6) +
                                finit("w4", {16, 12, 1, 1}, 7),
                            R"(
    c1 = Conv(x, w1, b1)
    r1 = Relu(c1)
    c2 = Conv(r1, w2, b2) <pads = [1, 1, 1, 1]>
    s2 = Add(c2, r1)
    r2 = Clip(s2) <min = 0.0, max = 6.0>
    c3 = Conv(r2, w3, b3) <pads = [1, 1, 1, 1], strides = [2, 2]>
    c4 = Conv(c3, w4)
    h = HardSwish(c4)
    y = Sigmoid(h))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(pass_note(c, "channel_padding"),
            "channel_padding: 3 values widened to whole blocks of " + std::to_string(block()) +
                " channels (3 from 12 to 16)");
  EXPECT_EQ(changed(c, "channel_padding"), 3);
  // r1, r2 and c3 are blocked 16-channel values now; h feeds the Sigmoid: plain, converted once.
  int widened = 0;
  for (const auto& n : c.graph->nodes()) {
    if (n->op_type() != "FusedConv") continue;
    const ir::Value* y = n->output(0);
    if (y->name().find("_cpad") == std::string::npos) continue;
    ++widened;
    EXPECT_EQ(n->attr_string("y_format", ""), ops::kFormatBlocked) << y->name();
    EXPECT_EQ(y->shape().static_dims()[1] * y->shape().static_dims()[4], 16) << y->name();
    EXPECT_EQ(n->input(1)->shape().static_dims()[0], 16) << n->name();  // W's output channels
  }
  EXPECT_EQ(widened, 3);
  EXPECT_EQ(count_kiln_op(*c.graph, "TransData"), 0);
  // The widened weights replace the old ones: no initializer is stored twice.
  EXPECT_FALSE(c.graph->find_value("w2")->has_initializer());
}

// Nothing is widened where the extra channels would not be exactly zero or where a reader
// could not take them.
TEST(ChannelPaddingTest, DoesNotFireWhereTheWideningIsNotExact) {
  const std::string conv2 = "    y = Conv(r, w2) <pads = [1, 1, 1, 1]>";
  const std::string inits = finit("w1", {12, 16, 1, 1}, 8) + finit("b1", {12}, 9) + finit("w2", {16, 12, 3, 3}, 10);
  // Sigmoid(0) = 0.5: the extra channels would not be zero.
  const std::string sigmoid = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y)", inits, R"(
    c1 = Conv(x, w1, b1)
    r = Sigmoid(c1)
)" + conv2);
  // A reader that is not a convolution.
  const std::string pool_reader = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y, float[1,12,6,6] m)", inits, R"(
    c1 = Conv(x, w1, b1)
    r = Relu(c1)
    m = MaxPool(r) <kernel_shape = [3, 3], pads = [1, 1, 1, 1]>
)" + conv2);
  // A graph output.
  const std::string pinned = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y, float[1,12,6,6] r)", inits, R"(
    c1 = Conv(x, w1, b1)
    r = Relu(c1)
)" + conv2);
  // A grouped reader.
  const std::string grouped = fmodel("g (float[1,16,6,6] x) => (float[1,12,6,6] y)",
                                     finit("w1", {12, 16, 1, 1}, 11) + finit("w2", {12, 4, 3, 3}, 12), R"(
    c1 = Conv(x, w1)
    r = Relu(c1)
    y = Conv(r, w2) <pads = [1, 1, 1, 1], group = 3>)");
  // A residual added into a sum that stays narrow (the sum is a graph output): neither widens.
  const std::string residual = fmodel("g (float[1,16,6,6] x) => (float[1,12,6,6] y)",
                                      finit("w1", {12, 16, 1, 1}, 13) + finit("w2", {12, 12, 3, 3}, 14), R"(
    c1 = Conv(x, w1)
    r = Relu(c1)
    c2 = Conv(r, w2) <pads = [1, 1, 1, 1]>
    s = Add(c2, r)
    y = Relu(s))");
  // 5 channels to 8 or 16: more extra channels than the value's half.
  const std::string narrow = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y)",
                                    finit("w1", {5, 16, 1, 1}, 15) + finit("w2", {16, 5, 3, 3}, 16), R"(
    c1 = Conv(x, w1)
    r = Relu(c1)
    y = Conv(r, w2) <pads = [1, 1, 1, 1]>)");
  for (const std::string& text : {sigmoid, pool_reader, pinned, grouped, residual, narrow}) {
    auto c = expect_fused_matches_O1(text, 3);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(changed(c, "channel_padding"), 0) << text;
    for (const auto& n : c.graph->nodes())
      for (const ir::Value* v : n->outputs()) EXPECT_EQ(v->name().find("_cpad"), std::string::npos) << text;
  }
}

// -O2 widens nothing: the pass serves the blocked layout, which is -O3 only.
TEST(ChannelPaddingTest, OnlyAtO3) {
  std::string text = fmodel("g (float[1,16,6,6] x) => (float[1,16,6,6] y)",
                            finit("w1", {12, 16, 1, 1}, 17) + finit("w2", {16, 12, 3, 3}, 18), R"(
    c1 = Conv(x, w1)
    r = Relu(c1)
    y = Conv(r, w2) <pads = [1, 1, 1, 1]>)");
  auto c = expect_fused_matches_O1(text, 2);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(changed(c, "channel_padding"), -1);  // did not run
  for (const auto& n : c.graph->nodes())
    for (const ir::Value* v : n->outputs()) EXPECT_EQ(v->name().find("_cpad"), std::string::npos);
}

}  // namespace
}  // namespace kiln::compiler
