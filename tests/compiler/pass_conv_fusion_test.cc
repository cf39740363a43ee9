// conv_fusion: Conv [+ bias Add] [+ residual Add] [+ activation] becomes kiln FusedConv at
// -O2/-O3 and computes what the unfused -O1 graph's ONNX reference kernels compute;
// chains that must stay apart (shared or pinned intermediates, a residual not provably of the
// conv's shape, non-constant Clip bounds, a broadcasting residual) stay unfused; an open batch
// does not stop a fusion.
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

TEST(ConvFusionTest, ConvReluKeepsOutputName) {
  std::string text = fmodel("g (float[1,3,8,8] x) => (float[1,4,8,8] y)",
                            finit("w", {4, 3, 3, 3}, 1) + finit("b", {4}, 2), R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    y = Relu(c))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(c.graph->nodes().size(), 1u);
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+Relu", 1}}));
    const ir::Node* n = output_producer(c);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->op_type(), "FusedConv");
    EXPECT_EQ(n->domain(), "kiln");
    EXPECT_EQ(n->opset(), 1);
    EXPECT_EQ(n->attr_string("activation", ""), "Relu");
    EXPECT_EQ(n->attr_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
    EXPECT_EQ(c.graph->opset_imports().at("kiln"), 1);
    EXPECT_EQ(c.graph->outputs()[0]->name(), "y");
  }
  auto o1 = testing::compile_text(text, 1);
  ASSERT_TRUE(o1.ok());
  EXPECT_EQ(count_op(*o1->graph, "Conv"), 1);
  EXPECT_EQ(count_op(*o1->graph, "Relu"), 1);
}

TEST(ConvFusionTest, ResidualAddEitherOrderThenRelu) {
  std::string text =
      fmodel("g (float[1,4,6,6] x, float[1,4,6,6] z) => (float[1,4,6,6] y, float[1,4,6,6] y2)",
             finit("w", {4, 4, 3, 3}, 3) + finit("b", {4}, 4) + finit("w2", {4, 4, 1, 1}, 5), R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    r = Add(z, c)
    y = Relu(r)
    c2 = Conv(y, w2)
    y2 = Add(c2, x))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+Add+Relu", 1}, {"Conv+Add", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 2u);
    EXPECT_EQ(count_kiln_op(*c.graph, "FusedConv"), 2);
    const ir::Node* n = output_producer(c, 0);
    ASSERT_TRUE(n);
    ASSERT_EQ(n->num_inputs(), 4);
    EXPECT_EQ(n->input(3)->name(), "z");
    const ir::Node* n2 = output_producer(c, 1);
    ASSERT_TRUE(n2);
    ASSERT_EQ(n2->num_inputs(), 4);
    EXPECT_EQ(n2->input(2), nullptr);  // no bias
    EXPECT_EQ(n2->input(3)->name(), "x");
    EXPECT_FALSE(n2->has_attr("activation"));
  }
}

TEST(ConvFusionTest, ClipAsRelu6AndOneSidedClip) {
  std::string text = fmodel("g (float[1,3,7,7] x) => (float[1,4,4,4] y, float[1,4,4,4] y2)",
                            finit("w", {4, 3, 3, 3}, 6, -1.5, 1.5) + finit("b", {4}, 7) +
                                "float lo = {0.0}, float hi = {6.0}, float hi2 = {0.25}, ",
                            R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1], strides = [2, 2]>
    y = Clip(c, lo, hi)
    c2 = Conv(x, w) <pads = [1, 1, 1, 1], strides = [2, 2]>
    y2 = Clip(c2, , hi2))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+Clip", 2}}));
    const ir::Node* n = output_producer(c, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->attr_string("activation", ""), "Clip");
    EXPECT_EQ(n->attr_floats("activation_params"), (std::vector<float>{0.0f, 6.0f}));
    const ir::Node* n2 = output_producer(c, 1);
    ASSERT_TRUE(n2);
    std::vector<float> p = n2->attr_floats("activation_params");
    ASSERT_EQ(p.size(), 2u);
    EXPECT_TRUE(std::isinf(p[0]) && p[0] < 0);
    EXPECT_EQ(p[1], 0.25f);
  }
}

TEST(ConvFusionTest, ClipBeforeOpset11UsesAttributes) {
  std::string text =
      fmodel("g (float[1,2,5,5] x) => (float[1,3,5,5] y)", finit("w", {3, 2, 3, 3}, 8, -1, 1), R"(
    c = Conv(x, w) <pads = [1, 1, 1, 1]>
    y = Clip<min = -0.5, max = 0.75>(c))",
             9);
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+Clip", 1}}));
  EXPECT_EQ(output_producer(c)->attr_floats("activation_params"),
            (std::vector<float>{-0.5f, 0.75f}));
}

TEST(ConvFusionTest, EveryActivation) {
  std::string text = fmodel(
      "g (float[1,3,6,6] x) => (float[1,4,6,6] y1, float[1,4,6,6] y2, float[1,4,6,6] y3, "
      "float[1,4,6,6] y4, float[1,4,6,6] y5, float[1,4,6,6] y6, float[1,4,6,6] y7, float[1,4,6,6] "
      "y8)",
      finit("w", {4, 3, 3, 3}, 9, -1, 1) + finit("b", {4}, 10),
      R"(
    c1 = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    y1 = LeakyRelu<alpha = 0.2>(c1)
    c2 = Conv(x, w) <pads = [1, 1, 1, 1]>
    y2 = HardSigmoid<alpha = 0.3, beta = 0.4>(c2)
    c3 = Conv(x, w, b) <pads = [2, 2, 0, 0]>
    y3 = HardSwish(c3)
    c4 = Conv(x, w, b) <pads = [0, 0, 2, 2]>
    y4 = Sigmoid(c4)
    c5 = Conv(x, w, b) <pads = [1, 1, 1, 1], dilations = [1, 1]>
    y5 = Tanh(c5)
    c6 = Conv(x, w, b) <pads = [1, 2, 1, 0]>
    s6 = Sigmoid(c6)
    y6 = Mul(s6, c6)
    c7 = Conv(x, w, b) <pads = [2, 1, 0, 1]>
    y7 = Gelu(c7)
    c8 = Conv(x, w, b) <pads = [1, 0, 1, 2]>
    y8 = Gelu<approximate = "tanh">(c8))",
      20);
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+LeakyRelu", 1},
                                                   {"Conv+HardSigmoid", 1},
                                                   {"Conv+HardSwish", 1},
                                                   {"Conv+Sigmoid", 1},
                                                   {"Conv+Tanh", 1},
                                                   {"Conv+Silu", 1},
                                                   {"Conv+Gelu", 1},
                                                   {"Conv+GeluTanh", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 8u);
    EXPECT_EQ(output_producer(c, 0)->attr_floats("activation_params"), (std::vector<float>{0.2f}));
    EXPECT_EQ(output_producer(c, 1)->attr_floats("activation_params"),
              (std::vector<float>{0.3f, 0.4f}));
    std::vector<float> hs = output_producer(c, 2)->attr_floats("activation_params");
    ASSERT_EQ(hs.size(), 2u);
    EXPECT_FLOAT_EQ(hs[0], 1.0f / 6.0f);
    EXPECT_FLOAT_EQ(hs[1], 0.5f);
  }
}

TEST(ConvFusionTest, HardSwishMadeByHardSwishFusionIsAbsorbed) {
  std::string text = fmodel("g (float[1,3,6,6] x) => (float[1,4,6,6] y)",
                            finit("w", {4, 3, 3, 3}, 11, -1, 1) + finit("b", {4}, 12) +
                                "float three = {3.0}, float zero = {0.0}, float six = {6.0}, ",
                            R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    a = Add(c, three)
    k = Clip(a, zero, six)
    m = Mul(c, k)
    y = Div(m, six))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "hardswish_fusion"), (Patterns{{"HardSwish", 1}}));
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+HardSwish", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 1u);
  }
}

TEST(ConvFusionTest, ConstantBiasAddsFoldIntoB) {
  std::string text = fmodel(
      "g (float[1,3,6,6] x, float[1,4,6,6] z) => (float[1,4,6,6] y, float[1,4,6,6] y2, "
      "float[1,4,6,6] y3)",
      finit("w", {4, 3, 3, 3}, 13, -1, 1) + finit("b", {4}, 14) + finit("cb", {4, 1, 1}, 15) +
          finit("cb4", {1, 4, 1, 1}, 16) + "float[1] k = {0.125}, ",
      R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    a = Add(cb, c)
    y = LeakyRelu<alpha = 0.1>(a)
    c2 = Conv(x, w) <pads = [1, 1, 1, 1]>
    y2 = Add(c2, cb4)
    c3 = Conv(x, w) <pads = [1, 1, 1, 1]>
    a3 = Add(c3, z)
    b3 = Add(a3, k)
    y3 = Relu(b3))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "conv_fusion"),
              (Patterns{{"Conv+Bias+LeakyRelu", 1}, {"Conv+Bias", 1}, {"Conv+Bias+Add+Relu", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 3u);
    // A Conv that only gained a bias stays an ONNX Conv.
    const ir::Node* n2 = output_producer(c, 1);
    ASSERT_TRUE(n2);
    EXPECT_EQ(n2->op_type(), "Conv");
    EXPECT_EQ(n2->domain(), "");
    ASSERT_EQ(n2->num_inputs(), 3);
    EXPECT_EQ(n2->input(2)->shape(), Shape({4}));
  }
}

TEST(ConvFusionTest, ConstantScalesFoldIntoWeights) {
  // PaddleOCR's "learnable affine" blocks: Conv, Mul(scalar), Add(scalar), activation.
  // Folding the scale into W rounds W differently, as BatchNorm folding does; in float64
  // that rounding is far below the tolerance, so the comparison checks the algebra.
  auto d = [](const std::string& name, std::vector<int> dims, int seed, double lo, double hi) {
    return finit(name, std::move(dims), seed, lo, hi, "double");
  };
  std::string text = fmodel(
      "g (double[1,3,6,6] x, double[1,4,6,6] z) => (double[1,4,6,6] y, double[1,4,6,6] y2, "
      "double[1,4,6,6] y3)",
      d("w", {4, 3, 3, 3}, 22, -1, 1) + d("b", {4}, 23, -0.5, 0.5) +
          d("s4", {1, 4, 1, 1}, 24, 0.5, 2) + "double[1] s = {1.75}, double[1] t = {-0.25}, ",
      R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    m = Mul(s, c)
    a = Add(m, t)
    y = HardSwish(a)
    c2 = Conv(x, w) <pads = [1, 1, 1, 1]>
    a2 = Add(c2, t)
    y2 = Mul(a2, s4)
    c3 = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    r3 = Add(c3, z)
    m3 = Mul(r3, s)
    y3 = Relu(m3))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    // The residual would be scaled too: the Mul after it stays (and the Relu with it).
    EXPECT_EQ(
        fusions(c, "conv_fusion"),
        (Patterns{{"Conv+Scale+Bias+HardSwish", 1}, {"Conv+Scale+Bias", 1}, {"Conv+Add", 1}}));
    const ir::Node* n = output_producer(c, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->op_type(), "FusedConv");
    EXPECT_EQ(n->attr_string("activation", ""), "HardSwish");
    const ir::Node* n2 = output_producer(c, 1);
    ASSERT_TRUE(n2);
    EXPECT_EQ(n2->op_type(), "Conv");  // only constants folded
    EXPECT_NE(n2->input(1)->name(), "w");
    EXPECT_NE(output_producer(c, 2)->op_type(), "FusedConv");
  }
}

TEST(ConvFusionTest, ScalarAffineAfterActivationBecomesPostAffine) {
  // PP-LCNetV3 (PP-OCRv4): HardSwish, then a learnable scalar a * y + b. Mul then Add, or
  // either alone, join as activation_post_scale / activation_post_shift.
  std::string text = fmodel(
      "g (float[1,3,6,6] x) => (float[1,4,6,6] y, float[1,4,6,6] y2, float[1,4,6,6] y3)",
      finit("w", {4, 3, 3, 3}, 31, -1, 1) + finit("b", {4}, 32) +
          "float[1] s = {1.75}, float t = {-0.25}, ",
      R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    h = HardSwish(c)
    m = Mul(h, s)
    y = Add(t, m)
    c2 = Conv(x, w) <pads = [1, 1, 1, 1]>
    r2 = Relu(c2)
    y2 = Add(r2, t)
    c3 = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    g3 = Sigmoid(c3)
    y3 = Mul(s, g3))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+HardSwish+Affine", 1},
                                                   {"Conv+Relu+Affine", 1},
                                                   {"Conv+Sigmoid+Affine", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 3u);
    const ir::Node* n = output_producer(c, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->attr_float("activation_post_scale", 1.0f), 1.75f);
    EXPECT_EQ(n->attr_float("activation_post_shift", 0.0f), -0.25f);
    const ir::Node* n2 = output_producer(c, 1);
    ASSERT_TRUE(n2);
    EXPECT_FALSE(n2->has_attr("activation_post_scale"));
    EXPECT_EQ(n2->attr_float("activation_post_shift", 0.0f), -0.25f);
  }
}

TEST(ConvFusionTest, AffineThatIsNotAScalarOrIsSharedStaysApart) {
  std::string text = fmodel(
      "g (float[1,3,6,6] x) => (float[1,4,6,6] y, float[1,4,6,6] h2, float[1,4,6,6] y2)",
      finit("w", {4, 3, 3, 3}, 33, -1, 1) + finit("s4", {1, 4, 1, 1}, 34) + "float t = {0.5}, ",
      R"(
    c = Conv(x, w) <pads = [1, 1, 1, 1]>
    h = Relu(c)
    y = Mul(h, s4)
    c2 = Conv(x, w) <pads = [1, 1, 1, 1]>
    h2 = Relu(c2)
    y2 = Add(h2, t))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    // A per-channel Mul after the activation, and an activation output the graph also
    // returns: the activation fuses, the affine does not.
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+Relu", 2}}));
    EXPECT_EQ(count_op(*c.graph, "Mul") + count_op(*c.graph, "Add") +
                  count_kiln_op(*c.graph, "FusedElementwise"),
              2);
  }
}

TEST(ConvFusionTest, FusedConvWithoutActivationIsExtended) {
  std::string text = fmodel("g (float[1,3,6,6] x, float[1,4,6,6] z) => (float[1,4,6,6] y)",
                            finit("w", {4, 3, 3, 3}, 17, -1, 1) + finit("b", {4}, 18), R"(
    c = kiln.FusedConv(x, w, b) <pads = [1, 1, 1, 1]>
    a = Add(c, z)
    y = Relu(a))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "conv_fusion"), (Patterns{{"Conv+Add+Relu", 1}}));
    EXPECT_EQ(c.graph->nodes().size(), 1u);
    EXPECT_EQ(output_producer(c)->attr_string("activation", ""), "Relu");
  }
}

TEST(ConvFusionTest, ConvAloneIsLeftAsOnnxConv) {
  auto c = compile_O3(
      fmodel("g (float[1,3,6,6] x) => (float[1,4,4,4] y)", finit("w", {4, 3, 3, 3}, 19), R"(
    y = Conv(x, w))"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Conv"), 1);
  EXPECT_TRUE(fusions(c, "conv_fusion").empty());
  EXPECT_EQ(testing::changed(c, "conv_fusion"), 0);
}

// Graphs that must keep their Conv unfused: the fused node would drop a value someone needs
// or compute something else.
TEST(ConvFusionTest, NegativeCasesStayUnfused) {
  std::string w = finit("w", {4, 3, 3, 3}, 20);
  struct Case {
    const char* what;
    std::string text;
  } cases[] = {
      {"conv output read twice",
       fmodel("g (float[1,3,6,6] x) => (float[1,4,4,4] y, float[1,4,4,4] y2)", w, R"(
    c = Conv(x, w)
    y = Relu(c)
    y2 = Sigmoid(c))")},
      {"conv output is a graph output",
       fmodel("g (float[1,3,6,6] x) => (float[1,4,4,4] c, float[1,4,4,4] y)", w, R"(
    c = Conv(x, w)
    y = Relu(c))")},
      {"residual whose open dim is not the conv's", fmodel("g (float[?,3,6,6] x, float[?,4,4,4] z) => (float[?,4,4,4] y)", w, R"(
    c = Conv(x, w)
    y = Add(c, z))")},
      {"non-constant clip bounds",
       fmodel("g (float[1,3,6,6] x, float lo) => (float[1,4,4,4] y)", w, R"(
    c = Conv(x, w)
    y = Clip(c, lo))")},
      {"broadcasting non-constant residual",
       fmodel("g (float[1,3,6,6] x, float[1,4,1,1] z) => (float[1,4,4,4] y)", w, R"(
    c = Conv(x, w)
    y = Add(c, z))")},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto c = compile_O3(k.text);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(count_op(*c.graph, "Conv"), 1);
    EXPECT_EQ(count_kiln_op(*c.graph, "FusedConv"), 0);
    EXPECT_TRUE(fusions(c, "conv_fusion").empty());
  }
}

TEST(ConvFusionTest, OpenBatchFusesAndComputesTheSame) {
  // The conv's output dims are named by shape inference even where the input's are "?", so
  // Conv + Relu fuses with an open batch; both graphs then run at batch 2.
  std::string text = fmodel("g (float[?,3,6,6] x) => (float[?,4,4,4] y)", finit("w", {4, 3, 3, 3}, 22), R"(
    c = Conv(x, w)
    y = Relu(c))");
  auto ref = testing::compile_text(text, 1);
  auto opt = testing::compile_text(text, 3);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  EXPECT_EQ(fusions(*opt, "conv_fusion"), (Patterns{{"Conv+Relu", 1}}));
  Tensor x = Tensor::make(DataType::kFloat32, {2, 3, 6, 6});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = static_cast<float>((i * 5 % 13) - 6) * 0.17f;
  std::vector<rt::NamedValue> inputs;
  inputs.push_back({"x", RuntimeValue(std::move(x))});
  auto a = testing::run_graph(ref->graph, inputs);
  auto b = testing::run_graph(opt->graph, inputs);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  testing::expect_close_rel(b[0].tensor(), a[0].tensor(), "y");
}

TEST(ConvFusionTest, NegativeCasesStillComputeTheSame) {
  // The shaped negative cases run: nothing fused must not mean anything broken.
  std::string w = finit("w", {4, 3, 3, 3}, 21);
  auto c = expect_fused_matches_O1(
      fmodel("g (float[1,3,6,6] x) => (float[1,4,4,4] c, float[1,4,4,4] y)", w, R"(
    c = Conv(x, w)
    y = Relu(c))"),
      3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_kiln_op(*c.graph, "FusedConv"), 0);
}

}  // namespace
}  // namespace kiln::compiler
