// layernorm_fusion: the LayerNorm decompositions exporters write become one kiln LayerNorm
// at -O2/-O3 and give the outputs of the unfused graph (-O1, run by the ONNX ops'
// reference kernels); patterns that differ from LayerNorm stay unfused.
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

// Fused once at -O2 and -O3 with the given axis, no ONNX op of the decomposition left.
void expect_fused(const std::string& text, int64_t axis, int inputs) {
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusion_count(c, "LayerNorm"), 1) << "-O" << level;
    EXPECT_EQ(count_op_in(*c.graph, "LayerNorm", "kiln"), 1);
    for (const char* op : {"ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Reciprocal"})
      EXPECT_EQ(count_op(*c.graph, op), 0) << op;
    const ir::Node* ln = find_kiln_op(*c.graph, "LayerNorm");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->attr_int("axis", -100), axis);
    EXPECT_EQ(ln->num_inputs(), inputs);
    EXPECT_EQ(c.graph->opset_imports().at("kiln"), 1);
  }
}

void expect_not_fused(const std::string& text) {
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusion_count(c, "LayerNorm"), 0) << "-O" << level;
    EXPECT_EQ(count_op_in(*c.graph, "LayerNorm", "kiln"), 0);
  }
}

constexpr const char* kAffine =
    "float[8] gamma = {0.5, 1.5, -1.0, 2.0, 0.25, 1.0, 0.75, -0.5}, "
    "float[8] beta = {0.1, -0.2, 0.3, 0.0, 0.5, -0.4, 0.05, 0.2}, "
    "float eps = {0.00001}, float two = {2.0}";

TEST(LayerNormFusionTest, PyTorchDecompositionWithScaleAndBias) {
  expect_fused(model(17, "g (float[2,3,8] x) => (float[2,3,8] y)", kAffine, R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    s = Mul(n, gamma)
    y = Add(s, beta))"),
               2, 3);
}

TEST(LayerNormFusionTest, Opset18AxesInputTwoTrailingAxesMulSquareNoAffine) {
  // ReduceMean-18 takes its axes as an input; no Mul/Add: the fused node gets ones as Scale.
  expect_fused(model(18, "g (float[2,4,6] x) => (float[2,4,6] y)",
                     "int64[2] axes = {1, 2}, float[1] eps = {0.001}", R"(
    mean = ReduceMean(x, axes)
    d = Sub(x, mean)
    sq = Mul(d, d)
    var = ReduceMean(sq, axes)
    ve = Add(eps, var)
    sd = Sqrt(ve)
    y = Div(d, sd))"),
               1, 2);
}

TEST(LayerNormFusionTest, ReciprocalVariantWithBroadcastScaleOnly) {
  // Sqrt -> Reciprocal -> Mul, scale [1, 8] (a leading 1) and no bias.
  expect_fused(model(17, "g (float[3,8] x) => (float[3,8] y)",
                     "float[1,8] gamma = {0.5, 1.5, -1.0, 2.0, 0.25, 1.0, 0.75, -0.5}, "
                     "float eps = {0.00001}, int64 two = {2}",
                     R"(
    mean = ReduceMean<axes = [1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    r = Reciprocal(sd)
    n = Mul(r, d)
    y = Mul(gamma, n))"),
               1, 2);
}

TEST(LayerNormFusionTest, BiasWithoutScaleAndGraphOutputKeepsItsName) {
  auto text = model(17, "g (float[2,5,8] x) => (float[2,5,8] y)", kAffine, R"(
    mean = ReduceMean<axes = [2]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [2]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    y = Add(beta, n))");
  expect_fused(text, 2, 3);
  auto c = compile_text(text, 3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->graph->outputs()[0]->name(), "y");
  EXPECT_EQ(c->graph->outputs()[0]->producer()->op_type(), "LayerNorm");
}

TEST(LayerNormFusionTest, TwoLayerNormsInSequence) {
  auto text = model(17, "g (float[2,3,8] x) => (float[2,3,8] z)", kAffine, R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    s = Mul(n, gamma)
    y = Add(s, beta)
    mean2 = ReduceMean<axes = [-1]>(y)
    d2 = Sub(y, mean2)
    sq2 = Pow(d2, two)
    var2 = ReduceMean<axes = [-1]>(sq2)
    ve2 = Add(var2, eps)
    sd2 = Sqrt(ve2)
    z = Div(d2, sd2))");
  CompiledModel c = expect_close_to_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(fusion_count(c, "LayerNorm"), 2);
  EXPECT_EQ(c.graph->nodes().size(), 2u);
}

TEST(LayerNormFusionTest, OnnxLayerNormalizationBecomesKilnLayerNorm) {
  auto text = model(17, "g (float[2,3,8] x) => (float[2,3,8] y)", kAffine, R"(
    y = LayerNormalization<axis = -1, epsilon = 0.001>(x, gamma, beta))");
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusion_count(c, "onnx:LayerNormalization"), 1);
    EXPECT_EQ(count_op(*c.graph, "LayerNormalization"), 0);
    EXPECT_EQ(count_op_in(*c.graph, "LayerNorm", "kiln"), 1);
  }
}

TEST(LayerNormFusionTest, OnnxLayerNormalizationWithMeanOutputInUseStays) {
  expect_not_fused(model(17, "g (float[2,3,8] x) => (float[2,3,8] y, float[2,3,1] m)", kAffine, R"(
    y, m = LayerNormalization<axis = -1>(x, gamma, beta))"));
}

TEST(LayerNormFusionTest, NonTrailingReduceAxesStayUnfused) {
  // Normalising over axis 1 of a rank-3 tensor is not LayerNorm over trailing axes.
  expect_not_fused(model(17, "g (float[2,4,3] x) => (float[2,4,3] y)",
                         "float eps = {0.00001}, float two = {2.0}", R"(
    mean = ReduceMean<axes = [1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))"));
}

TEST(LayerNormFusionTest, DifferentAxesOfTheTwoReductionsStayUnfused) {
  expect_not_fused(model(17, "g (float[2,4,3] x) => (float[2,4,3] y)",
                         "float eps = {0.00001}, float two = {2.0}", R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [1, 2]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))"));
}

TEST(LayerNormFusionTest, WrongExponentStaysUnfused) {
  expect_not_fused(model(17, "g (float[2,8] x) => (float[2,8] y)",
                         "float eps = {0.00001}, float three = {3.0}", R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, three)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))"));
}

TEST(LayerNormFusionTest, KeepdimsZeroStaysUnfused) {
  expect_not_fused(model(17, "g (float[2,8] x) => (float[2,8] y)",
                         "float eps = {0.00001}, float two = {2.0}, int64[1] ax = {1}", R"(
    mean = ReduceMean<axes = [-1], keepdims = 0>(x)
    mu = Unsqueeze(mean, ax)
    d = Sub(x, mu)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))"));
}

TEST(LayerNormFusionTest, IntermediateWithTwoConsumersStaysUnfused) {
  // The centred value d feeds a third node: it must stay.
  expect_not_fused(model(17, "g (float[2,8] x) => (float[2,8] y, float[2,8] z)",
                         "float eps = {0.00001}, float two = {2.0}",
                         R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd)
    z = Relu(d))"));
}

TEST(LayerNormFusionTest, GraphOutputInTheMiddleStaysUnfused) {
  expect_not_fused(model(17, "g (float[2,8] x) => (float[2,8] y, float[2,1] var)",
                         "float eps = {0.00001}, float two = {2.0}",
                         R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))"));
}

TEST(LayerNormFusionTest, ScaleOnAnotherAxisIsLeftOutOfTheFusion) {
  // gamma [3, 1] scales along the rows, not the normalised axis: the normalisation fuses,
  // the Mul stays.
  auto text =
      model(17, "g (float[3,8] x) => (float[3,8] y)",
            "float[3,1] gamma = {0.5, 2.0, -1.0}, float eps = {0.00001}, float two = {2.0}", R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    y = Mul(n, gamma))");
  CompiledModel c = expect_close_to_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(fusion_count(c, "LayerNorm"), 1);
  EXPECT_EQ(count_op(*c.graph, "Mul"), 1);
}

TEST(LayerNormFusionTest, NotAtO1) {
  auto c = compile_text(model(17, "g (float[2,3,8] x) => (float[2,3,8] y)", kAffine, R"(
    mean = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mean)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))"),
                        1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "ReduceMean"), 2);
  EXPECT_EQ(fusion_count(*c, "LayerNorm"), 0);
}

}  // namespace
}  // namespace kiln::compiler
