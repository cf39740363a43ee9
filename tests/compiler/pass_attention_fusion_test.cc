// attention_fusion: MatMul, scale, mask Add, Softmax over the last axis and MatMul become
// one kiln Attention at -O2/-O3 and give the outputs of the unfused graph (-O1, run by the
// ONNX ops' reference kernels); blocks whose intermediates are needed elsewhere, or whose
// softmax runs over another axis, stay unfused.
#include <gtest/gtest.h>

#include <string>

#include "transformer_fusion_test_util.h"

namespace kiln::compiler {
namespace {

using testing::compile_text;
using testing::count_op;
using testing::transformer::count_op_in;
using testing::transformer::expect_close_to_O1;
using testing::transformer::find_kiln_op;
using testing::transformer::fusion_count;

std::string model(int opset, const std::string& signature, const std::string& inits,
                  const std::string& body) {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + "]>\n" + signature +
         "\n<" + inits + ">\n{\n" + body + "\n}";
}

// Fused once at -O2 and -O3; returns the -O3 model.
CompiledModel expect_fused(const std::string& text, int nodes_after) {
  CompiledModel last;
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    if (!c.graph) {
      ADD_FAILURE() << "compile failed at -O" << level;
      return last;
    }
    EXPECT_EQ(fusion_count(c, "Attention"), 1) << "-O" << level;
    EXPECT_EQ(count_op_in(*c.graph, "Attention", "kiln"), 1);
    EXPECT_EQ(count_op(*c.graph, "Softmax"), 0);
    EXPECT_EQ(static_cast<int>(c.graph->nodes().size()), nodes_after) << ir::to_text(*c.graph);
    EXPECT_EQ(c.graph->opset_imports().at("kiln"), 1);
    last = std::move(c);
  }
  return last;
}

void expect_not_fused(const std::string& text) {
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusion_count(c, "Attention"), 0) << "-O" << level;
    EXPECT_EQ(count_op_in(*c.graph, "Attention", "kiln"), 0);
  }
}

constexpr const char* kSig4 =
    "g (float[1,2,5,8] q, float[1,2,5,8] k, float[1,2,5,8] v, float[1,1,1,5] mask) => "
    "(float[1,2,5,8] y)";

TEST(AttentionFusionTest, BertBlockWithTransposedKeyAbsorbed) {
  auto c = expect_fused(model(17, kSig4, "float c = {2.8284271}", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Div(s, c)
    a = Add(sc, mask)
    p = Softmax<axis = -1>(a)
    y = MatMul(p, v))"),
                        1);
  const ir::Node* att = c.graph ? find_kiln_op(*c.graph, "Attention") : nullptr;
  ASSERT_TRUE(att);
  EXPECT_EQ(att->attr_int("k_transposed", -1), 0);
  EXPECT_NEAR(att->attr_float("scale", 0), 1.0 / 2.8284271, 1e-7);
  ASSERT_EQ(att->num_inputs(), 4);
  EXPECT_EQ(att->input(1)->name(), "k");
  EXPECT_EQ(att->input(3)->name(), "mask");
  EXPECT_EQ(c.graph->outputs()[0]->name(), "y");
}

TEST(AttentionFusionTest, PreTransposedKeyMulScaleMaskFirstNoTranspose) {
  // K arrives as [.., D, Sk] (as BERT's Transpose(0,2,3,1) makes it): k_transposed = 1.
  auto c = expect_fused(model(17,
                              "g (float[1,2,5,8] q, float[1,2,8,6] kt, float[1,2,6,3] v, "
                              "float[1,1,5,6] mask) => (float[1,2,5,3] y)",
                              "float c = {0.35}", R"(
    s = MatMul(q, kt)
    sc = Mul(c, s)
    a = Add(mask, sc)
    p = Softmax<axis = 3>(a)
    y = MatMul(p, v))"),
                        1);
  const ir::Node* att = c.graph ? find_kiln_op(*c.graph, "Attention") : nullptr;
  ASSERT_TRUE(att);
  EXPECT_EQ(att->attr_int("k_transposed", -1), 1);
  EXPECT_NEAR(att->attr_float("scale", 0), 0.35, 1e-7);
  EXPECT_EQ(att->input(1)->name(), "kt");
}

TEST(AttentionFusionTest, ThreeDimensionalWithoutScaleOrMask) {
  auto c = expect_fused(
      model(17, "g (float[3,4,6] q, float[3,5,6] k, float[3,5,2] v) => (float[3,4,2] y)",
            "float unused = {0.0}", R"(
    kt = Transpose<perm = [0, 2, 1]>(k)
    s = MatMul(q, kt)
    p = Softmax(s)
    y = MatMul(p, v))"),
      1);
  const ir::Node* att = c.graph ? find_kiln_op(*c.graph, "Attention") : nullptr;
  ASSERT_TRUE(att);
  EXPECT_EQ(att->num_inputs(), 3);
  EXPECT_EQ(att->attr_float("scale", 0), 1.0f);
}

TEST(AttentionFusionTest, BroadcastBatchAndTwoDimensionalTranspose) {
  // Q [2,4,6] against a shared 2-D K [5,6] (Transpose default perm) and V [5,3].
  expect_fused(model(17, "g (float[2,4,6] q, float[5,6] k, float[5,3] v) => (float[2,4,3] y)",
                     "float c = {4.0}", R"(
    kt = Transpose(k)
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax<axis = -1>(sc)
    y = MatMul(p, v))"),
               1);
}

TEST(AttentionFusionTest, Opset11SoftmaxOverTheLastAxisIsFused) {
  expect_fused(model(11, "g (float[3,4,6] q, float[3,6,5] kt, float[3,5,2] v) => (float[3,4,2] y)",
                     "float c = {2.0}", R"(
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax<axis = 2>(sc)
    y = MatMul(p, v))"),
               1);
}

TEST(AttentionFusionTest, TransposeWithSecondConsumerStaysAndIsPassedTransposed) {
  auto c = expect_fused(model(17,
                              "g (float[1,2,5,8] q, float[1,2,5,8] k, float[1,2,5,8] v) => "
                              "(float[1,2,5,8] y, float[1,2,8,5] kt)",
                              "float c = {2.0}", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax<axis = -1>(sc)
    y = MatMul(p, v))"),
                        2);
  const ir::Node* att = c.graph ? find_kiln_op(*c.graph, "Attention") : nullptr;
  ASSERT_TRUE(att);
  EXPECT_EQ(att->attr_int("k_transposed", -1), 1);
  EXPECT_EQ(count_op(*c.graph, "Transpose"), 1);
}

TEST(AttentionFusionTest, Opset11DefaultSoftmaxAxisStaysUnfused) {
  // Softmax-11 with the default axis 1 normalises over the flattened [4, 5] block.
  expect_not_fused(model(11,
                         "g (float[3,4,6] q, float[3,6,5] kt, float[3,5,2] v) => (float[3,4,2] y)",
                         "float c = {2.0}", R"(
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax(sc)
    y = MatMul(p, v))"));
}

TEST(AttentionFusionTest, SoftmaxOverAnotherAxisStaysUnfused) {
  expect_not_fused(model(17,
                         "g (float[2,5,6] q, float[2,6,5] kt, float[2,5,3] v) => (float[2,5,3] y)",
                         "float c = {2.0}", R"(
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax<axis = -2>(sc)
    y = MatMul(p, v))"));
}

TEST(AttentionFusionTest, ProbabilitiesAsGraphOutputStayUnfused) {
  expect_not_fused(model(
      17, "g (float[2,5,6] q, float[2,6,5] kt, float[2,5,3] v) => (float[2,5,3] y, float[2,5,5] p)",
      "float c = {2.0}", R"(
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax<axis = -1>(sc)
    y = MatMul(p, v))"));
}

TEST(AttentionFusionTest, ScoresWithTwoConsumersStayUnfused) {
  expect_not_fused(model(
      17, "g (float[2,5,6] q, float[2,6,5] kt, float[2,5,3] v) => (float[2,5,3] y, float[2,5,5] z)",
      "float c = {2.0}", R"(
    s = MatMul(q, kt)
    sc = Div(s, c)
    p = Softmax<axis = -1>(sc)
    y = MatMul(p, v)
    z = Relu(s))"));
}

TEST(AttentionFusionTest, MaskThatGrowsTheScoresStaysUnfused) {
  // A mask [2,1,5,5] broadcasts the [5,5] scores of a rank-2 block up to rank 4.
  expect_not_fused(model(
      17,
      "g (float[5,6] q, float[6,5] kt, float[5,3] v, float[2,1,5,5] mask) => (float[2,1,5,3] y)",
      "float c = {2.0}", R"(
    s = MatMul(q, kt)
    a = Add(s, mask)
    p = Softmax<axis = -1>(a)
    y = MatMul(p, v))"));
}

TEST(AttentionFusionTest, ConstantDividedByScoresStaysUnfused) {
  // Div(c, s) is not a scaling of the scores.
  expect_not_fused(model(17,
                         "g (float[2,5,6] q, float[2,6,5] kt, float[2,5,3] v) => (float[2,5,3] y)",
                         "float c = {2.0}", R"(
    s = MatMul(q, kt)
    sc = Div(c, s)
    p = Softmax<axis = -1>(sc)
    y = MatMul(p, v))"));
}

TEST(AttentionFusionTest, NotAtO1) {
  auto c = compile_text(model(17, kSig4, "float c = {2.8284271}", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Div(s, c)
    a = Add(sc, mask)
    p = Softmax<axis = -1>(a)
    y = MatMul(p, v))"),
                        1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "Softmax"), 1);
}

}  // namespace
}  // namespace kiln::compiler
