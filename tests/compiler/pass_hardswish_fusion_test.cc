// hardswish_fusion: Mul(x, HardSigmoid(x)) and x * Clip(x + 3, 0, 6) / 6 (with the
// variants exporters write) become kiln HardSwish at -O2/-O3 and compute what the unfused
// -O1 graph's ONNX reference kernels compute; look-alikes stay unfused.
#include <gtest/gtest.h>

#include <string>

#include "fusion_test_util.h"

namespace kiln::compiler {
namespace {

using testing::compile_O3;
using testing::count_kiln_op;
using testing::count_op;
using testing::expect_fused_matches_O1;
using testing::fmodel;
using testing::fusions;
using testing::output_producer;

using Patterns = std::map<std::string, int>;

// Inputs from make_inputs lie in [-1.85, 1.85]; scaling by 2.5 covers both clamps of
// hard-swish (x <= -3 and x >= 3) and the linear part in between.
constexpr const char* kScale = "float[1] sc = {2.5}, ";

TEST(HardSwishFusionTest, MulOfHardSigmoidEitherOrder) {
  std::string text = fmodel("g (float[2,3,4] x0) => (float[2,3,4] y, float[2,3,4] y2)", kScale, R"(
    x = Mul(x0, sc)
    h = HardSigmoid<alpha = 0.25, beta = 0.4>(x)
    y = Mul(x, h)
    h2 = HardSigmoid(x)
    y2 = Mul(h2, x))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "hardswish_fusion"), (Patterns{{"HardSwish", 2}}));
    const ir::Node* n = output_producer(c, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->op_type(), "HardSwish");
    EXPECT_EQ(n->domain(), "kiln");
    EXPECT_FLOAT_EQ(n->attr_float("alpha", 0), 0.25f);
    EXPECT_FLOAT_EQ(n->attr_float("beta", 0), 0.4f);
    const ir::Node* n2 = output_producer(c, 1);
    ASSERT_TRUE(n2);
    EXPECT_EQ(n2->op_type(), "HardSwish");
    EXPECT_FLOAT_EQ(n2->attr_float("alpha", 0), 0.2f);  // ONNX HardSigmoid's defaults
    EXPECT_FLOAT_EQ(n2->attr_float("beta", 0), 0.5f);
    EXPECT_EQ(count_op(*c.graph, "HardSigmoid"), 0);
  }
}

TEST(HardSwishFusionTest, ClipForms) {
  std::string text = fmodel(
      "g (float[2,3,4] x0) => (float[2,3,4] y1, float[2,3,4] y2, float[2,3,4] y3, float[2,3,4] y4)",
      std::string(kScale) +
          "float three = {3.0}, float zero = {0.0}, float six = {6.0}, "
          "float sixth = {0.16666667}, float[1] four = {4.0}, float five = {5.0}, ",
      R"(
    x = Mul(x0, sc)
    a1 = Add(x, three)
    c1 = Clip(a1, zero, six)
    m1 = Mul(x, c1)
    y1 = Div(m1, six)
    a2 = Add(three, x)
    c2 = Clip(a2, zero, six)
    m2 = Mul(c2, x)
    y2 = Mul(m2, sixth)
    a3 = Add(x, three)
    c3 = Clip(a3, zero, six)
    d3 = Div(c3, six)
    y3 = Mul(x, d3)
    a4 = Add(x, four)
    c4 = Clip(a4, zero, five)
    d4 = Mul(sixth, c4)
    y4 = Mul(d4, x))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    // y4 divides by 6 after clipping at 5: not a hard-swish.
    EXPECT_EQ(fusions(c, "hardswish_fusion"), (Patterns{{"HardSwish", 3}}));
    for (size_t i = 0; i < 3; ++i) {
      const ir::Node* n = output_producer(c, i);
      ASSERT_TRUE(n);
      EXPECT_EQ(n->op_type(), "HardSwish") << i;
      EXPECT_NEAR(n->attr_float("alpha", 0), 1.0 / 6.0, 1e-7);
      EXPECT_NEAR(n->attr_float("beta", 0), 0.5, 1e-7);
    }
    EXPECT_NE(output_producer(c, 3)->op_type(), "HardSwish");
  }
}

TEST(HardSwishFusionTest, OtherShiftAndHeight) {
  // x * Clip(x + 4, 0, 8) / 8 = x * HardSigmoid(x; 1/8, 1/2).
  std::string text = fmodel(
      "g (float[5,4] x0) => (float[5,4] y)",
      std::string(kScale) + "float four = {4.0}, float zero = {0.0}, float eight = {8.0}, ", R"(
    x = Mul(x0, sc)
    a = Add(x, four)
    k = Clip(a, zero, eight)
    m = Mul(x, k)
    y = Div(m, eight))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  const ir::Node* n = output_producer(c);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->op_type(), "HardSwish");
  EXPECT_FLOAT_EQ(n->attr_float("alpha", 0), 0.125f);
  EXPECT_FLOAT_EQ(n->attr_float("beta", 0), 0.5f);
}

TEST(HardSwishFusionTest, NegativeCasesStayUnfused) {
  std::string k = "float three = {3.0}, float zero = {0.0}, float six = {6.0}, ";
  struct Case {
    const char* what;
    std::string text;
  } cases[] = {
      {"HardSigmoid of another tensor (squeeze-excite scaling)",
       fmodel("g (float[2,3] x, float[2,3] s) => (float[2,3] y)", "", R"(
    h = HardSigmoid(s)
    y = Mul(x, h))")},
      {"HardSigmoid output read twice",
       fmodel("g (float[2,3] x) => (float[2,3] y, float[2,3] y2)", "", R"(
    h = HardSigmoid(x)
    y = Mul(x, h)
    y2 = Neg(h))")},
      {"clip output is a graph output",
       fmodel("g (float[2,3] x) => (float[2,3] c, float[2,3] y)", k, R"(
    a = Add(x, three)
    c = Clip(a, zero, six)
    m = Mul(x, c)
    y = Div(m, six))")},
      {"non-constant clip bound", fmodel("g (float[2,3] x, float hi) => (float[2,3] y)", k, R"(
    a = Add(x, three)
    c = Clip(a, zero, hi)
    m = Mul(x, c)
    y = Div(m, six))")},
      {"unknown shape", fmodel("g (float[?,3] x) => (float[?,3] y)", "", R"(
    h = HardSigmoid(x)
    y = Mul(x, h))")},
  };
  for (const Case& c0 : cases) {
    SCOPED_TRACE(c0.what);
    auto c = compile_O3(c0.text);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(count_kiln_op(*c.graph, "HardSwish"), 0);
    EXPECT_TRUE(fusions(c, "hardswish_fusion").empty());
  }
}

}  // namespace
}  // namespace kiln::compiler
