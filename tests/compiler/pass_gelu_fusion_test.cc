// gelu_fusion: GELU in erf form and tanh form, in the operation orders exporters write,
// becomes one kiln Gelu at -O2/-O3 and gives the outputs of the unfused graph (-O1, run by
// the ONNX ops' reference kernels); chains with wrong constants or shared intermediates
// stay unfused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
  std::string ir = opset >= 20 ? "9" : "8";
  return "<ir_version: " + ir + ", opset_import: [\"\" : " + std::to_string(opset) + "]>\n" +
         signature + "\n<" + inits + ">\n{\n" + body + "\n}";
}

constexpr const char* kSig = "g (float[2,3,7] x) => (float[2,3,7] y)";
constexpr const char* kErfConsts =
    "float s2 = {1.4142135}, float is2 = {0.70710678}, float one = {1.0}, float half = {0.5}, "
    "float two = {2.0}";
constexpr const char* kTanhConsts =
    "float k = {0.7978845608}, float kappa = {0.044715}, float three = {3.0}, float one = {1.0}, "
    "float half = {0.5}";

// Fused once at -O2 and -O3 into a single kiln Gelu with `approximate`.
void expect_fused(const std::string& text, const std::string& pattern,
                  const std::string& approximate) {
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusion_count(c, pattern), 1) << "-O" << level;
    EXPECT_EQ(c.graph->nodes().size(), 1u) << ir::to_text(*c.graph);
    const ir::Node* g = find_kiln_op(*c.graph, "Gelu");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->attr_string("approximate", ""), approximate);
    EXPECT_EQ(c.graph->outputs()[0]->name(), "y");
  }
}

void expect_not_fused(const std::string& text) {
  for (int level : {2, 3}) {
    CompiledModel c = expect_close_to_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusion_count(c, "Gelu") + fusion_count(c, "GeluTanh"), 0) << "-O" << level;
    EXPECT_EQ(count_op_in(*c.graph, "Gelu", "kiln"), 0);
  }
}

TEST(GeluFusionTest, ErfFormAsPyTorchExportsIt) {
  // BERT: Div(x, sqrt 2), Erf, Add(1), Mul(x, .), Mul(., 0.5).
  expect_fused(model(17, kSig, kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half))"),
               "Gelu", "none");
}

TEST(GeluFusionTest, ErfFormHalfAppliedToXFirst) {
  expect_fused(model(17, kSig, kErfConsts, R"(
    h = Mul(half, x)
    u = Mul(x, is2)
    e = Erf(u)
    a = Add(one, e)
    y = Mul(h, a))"),
               "Gelu", "none");
}

TEST(GeluFusionTest, ErfFormHalfAppliedToOnePlusErf) {
  expect_fused(model(17, kSig, kErfConsts, R"(
    u = Mul(is2, x)
    e = Erf(u)
    a = Add(e, one)
    b = Mul(a, half)
    y = Mul(b, x))"),
               "Gelu", "none");
}

TEST(GeluFusionTest, ErfFormDividedByTwoAtTheEnd) {
  expect_fused(model(17, kSig, kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(a, x)
    y = Div(m, two))"),
               "Gelu", "none");
}

TEST(GeluFusionTest, TanhFormWithPowAsHuggingFaceNewGelu) {
  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): Mul(Mul(0.5, x), Add(1, tanh)).
  expect_fused(model(17, kSig, kTanhConsts, R"(
    p = Pow(x, three)
    c = Mul(kappa, p)
    s = Add(x, c)
    t = Mul(k, s)
    th = Tanh(t)
    a = Add(one, th)
    h = Mul(half, x)
    y = Mul(h, a))"),
               "GeluTanh", "tanh");
}

TEST(GeluFusionTest, TanhFormWithMulChainAsTorchSymbolic) {
  // torch.onnx (approximate="tanh", opset < 20): x * (x * x), half * (x * (1 + tanh)).
  expect_fused(model(17, kSig, kTanhConsts, R"(
    sq = Mul(x, x)
    p = Mul(x, sq)
    c = Mul(kappa, p)
    s = Add(x, c)
    t = Mul(k, s)
    th = Tanh(t)
    a = Add(one, th)
    m = Mul(x, a)
    y = Mul(half, m))"),
               "GeluTanh", "tanh");
}

TEST(GeluFusionTest, OnnxGeluOpBecomesKilnGelu) {
  for (const char* approximate : {"none", "tanh"}) {
    auto text = model(20, kSig, "float unused = {0.0}",
                      std::string("    y = Gelu<approximate = \"") + approximate + "\">(x)");
    for (int level : {2, 3}) {
      CompiledModel c = expect_close_to_O1(text, level);
      ASSERT_TRUE(c.graph);
      EXPECT_EQ(fusion_count(c, "onnx:Gelu"), 1);
      const ir::Node* g = find_kiln_op(*c.graph, "Gelu");
      ASSERT_TRUE(g);
      EXPECT_EQ(g->attr_string("approximate", ""), approximate);
      EXPECT_EQ(count_op_in(*c.graph, "Gelu", ""), 0);
    }
  }
}

TEST(GeluFusionTest, TwoGelusSharingTheirInputAreBothFused) {
  auto text = model(17, "g (float[2,3,7] x) => (float[2,3,7] y, float[2,3,7] z)", kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half)
    w = Relu(x)
    u2 = Div(w, s2)
    e2 = Erf(u2)
    a2 = Add(e2, one)
    m2 = Mul(w, a2)
    z = Mul(m2, half))");
  CompiledModel c = expect_close_to_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(fusion_count(c, "Gelu"), 2);
  EXPECT_EQ(count_op(*c.graph, "Erf"), 0);
}

TEST(GeluFusionTest, Float16ConstantsRoundedToTheirTypeAreAccepted) {
  // In float16, sqrt 2 is 1.4140625 (1.1e-4 away) and 0.5 exact: the constants as an fp16
  // model stores them. The Casts of the constants fold before the fusion passes run.
  auto text = model(17, kSig, kErfConsts, R"(
    h = Cast<to = 10>(x)
    s2h = Cast<to = 10>(s2)
    oneh = Cast<to = 10>(one)
    halfh = Cast<to = 10>(half)
    u = Div(h, s2h)
    e = Erf(u)
    a = Add(e, oneh)
    m = Mul(h, a)
    g = Mul(m, halfh)
    y = Cast<to = 1>(g))");
  auto ref = compile_text(text, 1);
  auto opt = compile_text(text, 3);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  EXPECT_EQ(fusion_count(*opt, "Gelu"), 1);
  EXPECT_EQ(count_op(*opt->graph, "Erf"), 0);
  auto inputs = testing::make_inputs(*ref->graph);
  auto a = testing::run_graph(ref->graph, inputs);
  auto b = testing::run_graph(opt->graph, inputs);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  // The unfused chain rounds to float16 after each of its five ops, the fused kernel once:
  // they agree within a few float16 ulps (2^-10 relative each).
  const Tensor& ta = a[0].tensor();
  const Tensor& tb = b[0].tensor();
  ASSERT_EQ(ta.dims(), tb.dims());
  for (int64_t i = 0; i < ta.num_elements(); ++i) {
    double x = tb.element_as_double(i), r = ta.element_as_double(i);
    ASSERT_LE(std::fabs(x - r), 4.0 / 1024 * std::max(std::fabs(r), 1.0)) << "element " << i;
  }
}

TEST(GeluFusionTest, WrongDivisorStaysUnfused) {
  expect_not_fused(model(17, kSig, "float s2 = {1.5}, float one = {1.0}, float half = {0.5}", R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half))"));
}

TEST(GeluFusionTest, WrongHalfStaysUnfused) {
  expect_not_fused(
      model(17, kSig, "float s2 = {1.4142135}, float one = {1.0}, float half = {0.6}", R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half))"));
}

TEST(GeluFusionTest, WrongKappaStaysUnfused) {
  expect_not_fused(model(
      17, kSig,
      "float k = {0.7978845608}, float kappa = {0.05}, float three = {3.0}, float one = {1.0}, "
      "float half = {0.5}",
      R"(
    p = Pow(x, three)
    c = Mul(kappa, p)
    s = Add(x, c)
    t = Mul(k, s)
    th = Tanh(t)
    a = Add(one, th)
    h = Mul(half, x)
    y = Mul(h, a))"));
}

TEST(GeluFusionTest, MultiplyingAnotherValueStaysUnfused) {
  // v * 0.5 * (1 + erf(x / sqrt 2)) with v != x is not GELU.
  expect_not_fused(
      model(17, "g (float[2,3,7] x, float[2,3,7] v) => (float[2,3,7] y)", kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(v, a)
    y = Mul(m, half))"));
}

TEST(GeluFusionTest, IntermediateWithTwoConsumersStaysUnfused) {
  expect_not_fused(
      model(17, "g (float[2,3,7] x) => (float[2,3,7] y, float[2,3,7] z)", kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half)
    z = Relu(a))"));
}

TEST(GeluFusionTest, GraphOutputInTheMiddleStaysUnfused) {
  expect_not_fused(
      model(17, "g (float[2,3,7] x) => (float[2,3,7] y, float[2,3,7] e)", kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half))"));
}

TEST(GeluFusionTest, BroadcastingConstantThatGrowsTheShapeStaysUnfused) {
  // A [1,1,1,1] "0.5" turns a rank-3 x into a rank-4 result: not GELU of x.
  expect_not_fused(model(17, "g (float[2,3,7] x) => (float[1,2,3,7] y)",
                         "float s2 = {1.4142135}, float one = {1.0}, float[1,1,1,1] half = {0.5}",
                         R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half))"));
}

TEST(GeluFusionTest, NotAtO1) {
  auto c = compile_text(model(17, kSig, kErfConsts, R"(
    u = Div(x, s2)
    e = Erf(u)
    a = Add(e, one)
    m = Mul(x, a)
    y = Mul(m, half))"),
                        1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "Erf"), 1);
}

}  // namespace
}  // namespace kiln::compiler
