// batchnorm_folding: BatchNormalization after Conv/ConvTranspose/Gemm is folded where it
// may be and kept where it must; folded graphs match the -O0 graph (whose reference BN
// kernel checks the algebra independently) and, for a Conv2d+BatchNorm2d, PyTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "compiler/pass_manager.h"
#include "pass_test_util.h"

namespace kiln::compiler {
namespace {

using testing::changed;
using testing::compile_text;
using testing::count_op;
using testing::make_inputs;
using testing::run_graph;

constexpr const char* kHeader = R"(<ir_version: 8, opset_import: ["" : 17]>
)";

// `n` deterministic pseudo-random values in [lo, hi), as an ONNX text initializer body.
std::string values(int n, int seed, double lo, double hi) {
  std::string s = "{";
  uint32_t state = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    double u = static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.6g", i ? ", " : "", lo + (hi - lo) * u);
    s += buf;
  }
  return s + "}";
}

// "float[d0,d1] name = {...}" with values from `values`, ending in ", ".
std::string init(const std::string& name, std::vector<int> dims, int seed, double lo, double hi) {
  std::string d;
  int n = 1;
  for (int x : dims) {
    if (!d.empty()) d += ',';
    d += std::to_string(x);
    n *= x;
  }
  return "float[" + d + "] " + name + " = " + values(n, seed, lo, hi) + ", ";
}

// Initializers of a BatchNormalization over `c` channels named s<k>, bb<k>, m<k>, v<k>.
std::string bn_params(int c, int seed, const std::string& k = "") {
  return init("s" + k, {c}, seed, 0.5, 1.5) + init("bb" + k, {c}, seed + 1, -0.5, 0.5) +
         init("m" + k, {c}, seed + 2, -0.3, 0.3) + init("v" + k, {c}, seed + 3, 0.2, 2.0);
}

// A model: signature, initializers (each ending in ", "), node list.
std::string model(const std::string& signature, std::string inits, const std::string& body) {
  inits.resize(inits.size() - 2);
  return kHeader + signature + "\n<" + inits + ">\n{\n" + body + "\n}";
}

// Elementwise |a - b| <= 1e-5 + 1e-4 |b|: folding reassociates the float arithmetic.
void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dims(), b.dims()) << what;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.element_as_double(i), y = b.element_as_double(i);
    ASSERT_LE(std::fabs(x - y), 1e-5 + 1e-4 * std::fabs(y))
        << what << " element " << i << ": " << x << " vs " << y;
  }
}

// Compiles at -O0 and -O3, checks output names are kept, runs both on the same inputs and
// compares within tolerance. Returns the -O3 model.
CompiledModel expect_close_to_O0(const std::string& text) {
  auto ref = compile_text(text, 0);
  auto opt = compile_text(text, 1);
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  EXPECT_TRUE(opt.ok()) << opt.status().to_string();
  if (!ref.ok() || !opt.ok()) return {};
  EXPECT_EQ(ref->graph->outputs().size(), opt->graph->outputs().size());
  for (size_t i = 0; i < ref->graph->outputs().size() && i < opt->graph->outputs().size(); ++i)
    EXPECT_EQ(ref->graph->outputs()[i]->name(), opt->graph->outputs()[i]->name());
  auto inputs = make_inputs(*ref->graph);
  auto a = run_graph(ref->graph, inputs);
  auto b = run_graph(opt->graph, inputs);
  EXPECT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size() && k < b.size(); ++k)
    expect_close(b[k].tensor(), a[k].tensor(), "output " + std::to_string(k));
  return std::move(*opt);
}

void expect_folded(const CompiledModel& c, int folds) {
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "BatchNormalization"), 0);
  EXPECT_EQ(changed(c, "batchnorm_folding"), folds);
}

TEST(BatchNormFoldingTest, Conv2dWithBiasFoldedAndOutputKeepsItsName) {
  auto c = expect_close_to_O0(model(
      "g (float[1,3,6,6] x) => (float[1,4,6,6] y)",
      init("w", {4, 3, 3, 3}, 1, -0.5, 0.5) + init("b", {4}, 2, -0.2, 0.2) + bn_params(4, 3), R"(
    c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
    y = BatchNormalization(c, s, bb, m, v) <epsilon = 0.001>)"));
  expect_folded(c, 1);
  ASSERT_EQ(c.graph->nodes().size(), 1u);
  EXPECT_EQ(c.graph->outputs()[0]->name(), "y");
  EXPECT_EQ(c.graph->outputs()[0]->producer()->op_type(), "Conv");
}

TEST(BatchNormFoldingTest, Conv2dWithoutBiasFollowedByRelu) {
  auto c = expect_close_to_O0(model("g (float[2,3,5,5] x) => (float[2,4,3,3] y)",
                                    init("w", {4, 3, 3, 3}, 7, -0.5, 0.5) + bn_params(4, 8), R"(
    c = Conv(x, w)
    n = BatchNormalization(c, s, bb, m, v)
    y = Relu(n))"));
  expect_folded(c, 1);
  EXPECT_EQ(count_op(*c.graph, "Conv"), 1);
  EXPECT_EQ(c.graph->nodes().size(), 2u);
}

TEST(BatchNormFoldingTest, GroupedAndDepthwiseConv2d) {
  auto c = expect_close_to_O0(model(
      "g (float[1,4,6,6] x) => (float[1,6,6,6] y)",
      init("dw", {4, 1, 3, 3}, 11, -0.5, 0.5) + bn_params(4, 12, "1") +
          init("w", {6, 2, 1, 1}, 16, -0.5, 0.5) + init("b", {6}, 17, -0.2, 0.2) + bn_params(6, 18),
      R"(
    d = Conv(x, dw) <group = 4, pads = [1, 1, 1, 1]>
    e = BatchNormalization(d, s1, bb1, m1, v1)
    c = Conv(e, w, b) <group = 2>
    y = BatchNormalization(c, s, bb, m, v))"));
  expect_folded(c, 2);
  EXPECT_EQ(c.graph->nodes().size(), 2u);
}

TEST(BatchNormFoldingTest, Conv1d) {
  auto c = expect_close_to_O0(
      model("g (float[2,3,9] x) => (float[2,5,7] y)",
            init("w", {5, 3, 3}, 21, -0.5, 0.5) + init("b", {5}, 22, -0.2, 0.2) + bn_params(5, 23),
            R"(
    c = Conv(x, w, b)
    y = BatchNormalization(c, s, bb, m, v))"));
  expect_folded(c, 1);
}

TEST(BatchNormFoldingTest, ConvTransposeGroupedWeightLayout) {
  // W is [C_in, C_out / group, k, k]: output channel of W[i, j] is (i / (C_in/group)) * 3 + j.
  auto c = expect_close_to_O0(
      model("g (float[1,4,3,3] x) => (float[1,6,7,7] y)",
            init("w", {4, 3, 3, 3}, 31, -0.5, 0.5) + init("b", {6}, 32, -0.2, 0.2) +
                bn_params(6, 33),
            R"(
    c = ConvTranspose(x, w, b) <group = 2, strides = [2, 2]>
    y = BatchNormalization(c, s, bb, m, v))"));
  expect_folded(c, 1);
  EXPECT_EQ(count_op(*c.graph, "ConvTranspose"), 1);
}

TEST(BatchNormFoldingTest, ConvTransposeWithoutBias) {
  auto c = expect_close_to_O0(model("g (float[2,3,4] x) => (float[2,2,6] y)",
                                    init("w", {3, 2, 3}, 41, -0.5, 0.5) + bn_params(2, 42), R"(
    c = ConvTranspose(x, w)
    y = BatchNormalization(c, s, bb, m, v))"));
  expect_folded(c, 1);
}

TEST(BatchNormFoldingTest, GemmTransBOverFeatures) {
  auto c = expect_close_to_O0(
      model("g (float[3,5] x) => (float[3,4] y)",
            init("w", {4, 5}, 51, -0.5, 0.5) + init("b", {4}, 52, -0.2, 0.2) + bn_params(4, 53), R"(
    c = Gemm(x, w, b) <transB = 1, alpha = 0.5, beta = 2.0>
    y = BatchNormalization(c, s, bb, m, v))"));
  expect_folded(c, 1);
  EXPECT_EQ(count_op(*c.graph, "Gemm"), 1);
}

TEST(BatchNormFoldingTest, GemmWithoutBiasAndScalarBias) {
  auto c = expect_close_to_O0(model(
      "g (float[3,5] x) => (float[3,4] y, float[3,4] z)",
      init("w", {5, 4}, 61, -0.5, 0.5) + init("w2", {4, 5}, 62, -0.5, 0.5) +
          "float[1] k = {0.25}, " + bn_params(4, 63),
      R"(
    c = Gemm(x, w)
    y = BatchNormalization(c, s, bb, m, v)
    d = Gemm(x, w2, k) <transB = 1, beta = 3.0>
    z = BatchNormalization(d, s, bb, m, v))"));
  expect_folded(c, 2);
}

TEST(BatchNormFoldingTest, SharedWeightsStayForTheOtherConv) {
  auto c = expect_close_to_O0(model("g (float[1,2,5,5] x) => (float[1,3,3,3] y, float[1,3,3,3] z)",
                                    init("w", {3, 2, 3, 3}, 71, -0.5, 0.5) + bn_params(3, 72), R"(
    c = Conv(x, w)
    y = BatchNormalization(c, s, bb, m, v)
    z = Conv(x, w))"));
  expect_folded(c, 1);
  EXPECT_EQ(count_op(*c.graph, "Conv"), 2);
}

// Model text whose Conv feeds a BatchNormalization; `body` is the node list.
std::string conv_bn_model(const std::string& signature, const std::string& body,
                          bool weight_is_input = false) {
  std::string w = weight_is_input ? std::string() : init("w", {4, 3, 3, 3}, 81, -0.5, 0.5);
  return model(signature, w + bn_params(4, 82), body);
}

TEST(BatchNormFoldingTest, ConvOutputWithSecondConsumerNotFolded) {
  auto c = expect_close_to_O0(
      conv_bn_model("g (float[1,3,5,5] x) => (float[1,4,3,3] y, float[1,4,3,3] z)", R"(
    c = Conv(x, w)
    y = BatchNormalization(c, s, bb, m, v)
    z = Relu(c))"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "BatchNormalization"), 1);
  EXPECT_EQ(changed(c, "batchnorm_folding"), 0);
}

TEST(BatchNormFoldingTest, ConvOutputThatIsAGraphOutputNotFolded) {
  auto c = expect_close_to_O0(
      conv_bn_model("g (float[1,3,5,5] x) => (float[1,4,3,3] y, float[1,4,3,3] c)", R"(
    c = Conv(x, w)
    y = BatchNormalization(c, s, bb, m, v))"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "BatchNormalization"), 1);
}

TEST(BatchNormFoldingTest, WeightsFromAGraphInputNotFolded) {
  auto c = expect_close_to_O0(
      conv_bn_model("g (float[1,3,5,5] x, float[4,3,3,3] w) => (float[1,4,3,3] y)", R"(
    c = Conv(x, w)
    y = BatchNormalization(c, s, bb, m, v))", /*weight_is_input=*/true));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "BatchNormalization"), 1);
}

TEST(BatchNormFoldingTest, TrainingModeNotFolded) {
  auto c = compile_text(conv_bn_model("g (float[2,3,5,5] x) => (float[2,4,3,3] y)", R"(
    c = Conv(x, w)
    y = BatchNormalization(c, s, bb, m, v) <training_mode = 1>)"), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "BatchNormalization"), 1);
  EXPECT_EQ(changed(*c, "batchnorm_folding"), 0);
}

TEST(BatchNormFoldingTest, SwitchedOffByNameAndFusionSwitchAndAtO0) {
  std::string text = conv_bn_model("g (float[1,3,5,5] x) => (float[1,4,3,3] y)", R"(
    c = Conv(x, w)
    y = BatchNormalization(c, s, bb, m, v))");
  auto off = compile_text(text, 1, {"batchnorm_folding"});
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_EQ(count_op(*off->graph, "BatchNormalization"), 1);
  auto sw = parse_fusion_switch_text("batchnorm_folding:off\n", "switch.cfg");
  ASSERT_TRUE(sw.ok()) << sw.status().to_string();
  EXPECT_EQ(sw->count("batchnorm_folding"), 1u);
  auto all = parse_fusion_switch_text(R"({"Switch":{"GraphFusion":{"ALL":"off"}}})", "switch.json");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(all->count("batchnorm_folding"), 1u);
  auto o0 = compile_text(text, 0);
  ASSERT_TRUE(o0.ok());
  EXPECT_EQ(count_op(*o0->graph, "BatchNormalization"), 1);
  auto o1 = compile_text(text, 1);
  ASSERT_TRUE(o1.ok());
  EXPECT_EQ(count_op(*o1->graph, "BatchNormalization"), 0);
}

// torch 1.13: torch.manual_seed(5); Conv2d(2, 3, 3, padding=1) + BatchNorm2d(3, eps=1e-3)
// with weight ~ U(0.5, 1.5), bias ~ U(-0.5, 0.5), running_mean ~ U(-0.3, 0.3),
// running_var ~ U(0.2, 2.0), in eval mode, on x = torch.randn(1, 2, 4, 4).
TEST(BatchNormFoldingTest, MatchesPyTorchConv2dBatchNorm2dEval) {
  const std::string text = kHeader + std::string(R"(g (float[1,2,4,4] x) => (float[1,3,4,4] y)
<float[3,2,3,3] w = {
  0.155682221, -0.176253006, 0.192083061, 0.150815055, 0.198038653, -0.180715173, -0.158207357,
  0.112156279, -0.220021158, 0.232960925, 0.0501709059, 0.030439185, -0.20156683, 0.0751131028,
  0.101354688, 0.0373953804, 0.226711124, 0.0707854629, -0.20900479, 0.198042557, 0.0800279006,
  -0.11244265, -0.216508925, 0.134367153, 0.223993197, -0.19311358, 0.0128812855, 0.0845634639,
  -0.111307718, -0.0515734144, -0.157385439, -0.1114325, -0.214882031, -0.00546262506,
  0.139753953, 0.11463923, 0.22142069, -0.207006156, -0.0290012751, 0.229486808, 0.038596116,
  -0.066467464, -0.212275743, 0.109682709, 0.178938657, 0.189003497, 0.197320223, 0.0461451225,
  0.167993963, -0.0593297258, 0.19141829, -0.0201662555, -0.0486061051, -0.117164843},
 float[3] b = {0.125495195, 0.0953663737, 0.149925873},
 float[3] s = {0.680465817, 0.734150171, 1.47316206},
 float[3] bb = {-0.277520597, -0.285158932, -0.133780301},
 float[3] m = {-0.0969628617, -0.20402123, 0.242440417},
 float[3] v = {1.20031965, 1.51032257, 1.76756835}>
{
  c = Conv(x, w, b) <pads = [1, 1, 1, 1]>
  y = BatchNormalization(c, s, bb, m, v) <epsilon = 0.001>
})");
  const std::vector<float> x = {
      0.607017875, -0.877926052, -0.742591977, -0.497302502, -1.99827719, -2.36351204,
      0.254126251, 0.977179229, -0.136755601, 1.87034404, 0.150498748, 0.918427527, 0.469784737,
      0.949497402, -2.35090899, -1.46401644, -0.547050416, 0.487822294, -0.651946723,
      -0.517564476, -0.775365829, 0.506116092, 0.481721997, -0.406538486, -0.0474340431,
      0.518630683, 0.651876509, 1.18550372, 0.359321982, -0.40358299, -0.904838681, 0.652799726};
  const std::vector<float> expected = {
      0.135722175, 0.0143737849, -0.203086331, -0.21559009, -0.552063465, -0.281086683,
      -0.670777261, 0.0286802538, -0.477573067, 0.393387437, -0.232941002, 0.13579534,
      0.0495120808, -0.0139657818, 0.26563862, -0.350601166, -0.0992903709, 0.0943813175,
      -0.254582107, -0.0106903836, 0.0618733093, -0.0686480403, 0.526097476, -0.221622065,
      -0.359853834, -0.707789302, 0.313191116, -0.328381538, -0.00265188795, -0.151608825,
      -0.194671497, 0.32633695, -0.741499603, -0.176272169, 0.36517176, -0.463510573, 0.0943342,
      -0.428825825, -1.45778096, -0.333441645, 0.402134627, -0.420191616, -0.821935892,
      0.0949055627, -0.407864541, -0.332132399, 0.841586471, -0.885856986};
  auto c = compile_text(text, 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_folded(*c, 1);
  std::vector<rt::NamedValue> inputs;
  inputs.push_back({"x", RuntimeValue(Tensor::from_vector(x, {1, 2, 4, 4}))});
  auto out = run_graph(c->graph, inputs);
  ASSERT_EQ(out.size(), 1u);
  expect_close(out[0].tensor(), Tensor::from_vector(expected, {1, 3, 4, 4}), "y vs PyTorch");
}

}  // namespace
}  // namespace kiln::compiler
