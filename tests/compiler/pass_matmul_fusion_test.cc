// matmul_fusion: MatMul [+ Add] [+ Add] [+ activation] becomes kiln FusedMatMul and Gemm +
// activation kiln FusedGemm at -O2/-O3, computing what the unfused -O1 graph's ONNX
// reference kernels compute; shared or pinned intermediates, a residual not provably of the
// result's shape, Adds that would grow the result and non-constant Clip bounds stay unfused.
#include <gtest/gtest.h>

#include <string>

#include "fusion_test_util.h"

namespace kiln::compiler {
namespace {

using testing::compile_O3;
using testing::count_kiln_op;
using testing::count_op;
using testing::expect_fused_matches_O1;
using testing::finit;
using testing::fmodel;
using testing::fusions;
using testing::output_producer;

using Patterns = std::map<std::string, int>;

TEST(MatMulFusionTest, MatMulConstantBias) {
  std::string text =
      fmodel("g (float[3,5] x) => (float[3,4] y)", finit("w", {5, 4}, 1) + finit("b", {4}, 2), R"(
    m = MatMul(x, w)
    y = Add(m, b))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "matmul_fusion"), (Patterns{{"MatMul+Add", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 1u);
    const ir::Node* n = output_producer(c);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->op_type(), "FusedMatMul");
    EXPECT_EQ(n->domain(), "kiln");
    ASSERT_EQ(n->num_inputs(), 3);
    EXPECT_EQ(n->input(2)->name(), "b");
    EXPECT_FALSE(n->has_attr("activation"));
    EXPECT_EQ(c.graph->opset_imports().at("kiln"), 1);
  }
}

TEST(MatMulFusionTest, BatchedBiasFirstThenResidualThenRelu) {
  std::string text = fmodel("g (float[2,3,5] x, float[2,3,4] r) => (float[2,3,4] y)",
                            finit("w", {5, 4}, 3) + finit("b", {1, 4}, 4), R"(
    m = MatMul(x, w)
    a = Add(b, m)
    s = Add(a, r)
    y = Relu(s))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "matmul_fusion"), (Patterns{{"MatMul+Add+Add+Relu", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 1u);
    const ir::Node* n = output_producer(c);
    ASSERT_EQ(n->num_inputs(), 4);
    EXPECT_EQ(n->input(2)->name(), "b");
    EXPECT_EQ(n->input(3)->name(), "r");
    EXPECT_EQ(n->attr_string("activation", ""), "Relu");
  }
}

TEST(MatMulFusionTest, NonConstantBiasAndGelu) {
  std::string text = fmodel("g (float[2,3,5] x, float[4] b) => (float[2,3,4] y, float[2,3,4] y2)",
                            finit("w", {5, 4}, 5, -1, 1), R"(
    m = MatMul(x, w)
    a = Add(m, b)
    y = Gelu(a)
    m2 = MatMul(x, w)
    y2 = Sigmoid(m2))",
                            20);
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "matmul_fusion"),
              (Patterns{{"MatMul+Add+Gelu", 1}, {"MatMul+Sigmoid", 1}}));
    EXPECT_EQ(count_kiln_op(*c.graph, "FusedMatMul"), 2);
    EXPECT_EQ(c.graph->nodes().size(), 2u);
  }
}

TEST(MatMulFusionTest, GeluDecompositionFusedFirst) {
  // The erf form becomes a kiln Gelu (gelu_fusion), which matmul_fusion then absorbs.
  std::string text = fmodel("g (float[3,5] x) => (float[3,4] y)",
                            finit("w", {5, 4}, 6, -1, 1) + finit("b", {4}, 7) +
                                "float sq2 = {1.4142135}, float one = {1.0}, float half = {0.5}, ",
                            R"(
    m = MatMul(x, w)
    a = Add(m, b)
    d = Div(a, sq2)
    e = Erf(d)
    f = Add(e, one)
    g1 = Mul(a, f)
    y = Mul(g1, half))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  if (!fusions(c, "gelu_fusion").empty()) {
    EXPECT_EQ(fusions(c, "matmul_fusion"), (Patterns{{"MatMul+Add+Gelu", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 1u);
  } else {
    // Without a Gelu fusion the tail stays apart; MatMul+Add is still fused.
    EXPECT_EQ(fusions(c, "matmul_fusion").count("MatMul+Add"), 1u);
  }
}

TEST(MatMulFusionTest, GemmActivations) {
  std::string text = fmodel(
      "g (float[3,5] x) => (float[3,4] y, float[3,4] y2, float[3,4] y3)",
      finit("w", {4, 5}, 8) + finit("b", {4}, 9) + "float lo = {-0.1}, float hi = {0.2}, ", R"(
    m = Gemm(x, w, b) <transB = 1, alpha = 0.5, beta = 2.0>
    y = Relu(m)
    m2 = Gemm(x, w) <transB = 1>
    y2 = LeakyRelu<alpha = 0.3>(m2)
    m3 = Gemm(x, w, b) <transB = 1, beta = 0.5>
    y3 = Clip(m3, lo, hi))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "matmul_fusion"),
              (Patterns{{"Gemm+Relu", 1}, {"Gemm+LeakyRelu", 1}, {"Gemm+Clip", 1}}));
    EXPECT_EQ(count_kiln_op(*c.graph, "FusedGemm"), 3);
    const ir::Node* n = output_producer(c);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->attr_int("transB", 0), 1);
    EXPECT_FLOAT_EQ(n->attr_float("alpha", 1), 0.5f);
    EXPECT_FLOAT_EQ(n->attr_float("beta", 1), 2.0f);
    EXPECT_EQ(n->attr_string("activation", ""), "Relu");
  }
}

TEST(MatMulFusionTest, NegativeCasesStayUnfused) {
  std::string w = finit("w", {5, 4}, 10) + finit("b", {4}, 11);
  struct Case {
    const char* what;
    std::string text;
  } cases[] = {
      {"matmul output read twice",
       fmodel("g (float[3,5] x) => (float[3,4] y, float[3,4] y2)", w, R"(
    m = MatMul(x, w)
    y = Add(m, b)
    y2 = Relu(m))")},
      {"matmul output is a graph output",
       fmodel("g (float[3,5] x) => (float[3,4] m, float[3,4] y)", w, R"(
    m = MatMul(x, w)
    y = Add(m, b))")},
      {"residual whose open dim is not the matmul's", fmodel("g (float[?,5] x, float[?,4] r) => (float[?,4] y)", w, R"(
    m = MatMul(x, w)
    y = Add(m, r))")},
      {"add grows the result", fmodel("g (float[3,5] x, float[2,3,4] r) => (float[2,3,4] y)", w, R"(
    m = MatMul(x, w)
    y = Add(m, r))")},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto c = compile_O3(k.text);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(count_op(*c.graph, "MatMul"), 1);
    EXPECT_EQ(count_kiln_op(*c.graph, "FusedMatMul"), 0);
    EXPECT_TRUE(fusions(c, "matmul_fusion").empty());
  }
  // Gemm whose Clip bounds are fed at run time.
  auto c =
      compile_O3(fmodel("g (float[3,5] x, float lo) => (float[3,4] y)", finit("wt", {4, 5}, 12), R"(
    m = Gemm(x, wt) <transB = 1>
    y = Clip(m, lo))"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Gemm"), 1);
  EXPECT_EQ(count_kiln_op(*c.graph, "FusedGemm"), 0);
  // The shaped negative cases still compute what -O1 computes.
  expect_fused_matches_O1(
      fmodel("g (float[3,5] x, float[2,3,4] r) => (float[3,4] m, float[2,3,4] y)", w, R"(
    m = MatMul(x, w)
    y = Add(m, r))"),
      3);
}

}  // namespace
}  // namespace kiln::compiler
