// precision_assignment (kiln compile --precision bf16|mixed, --keep-dtype): which
// convolutions and products get precision "bf16", and what such a node computes on the
// reference kernels: the ONNX op on X and W rounded to bfloat16 (rounded here by the test, on
// its own), exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/dtype.h"
#include "fusion_test_util.h"

namespace kiln::compiler {
namespace {

using testing::finit;
using testing::fmodel;
using testing::make_inputs;
using testing::run_graph;

// The cost model (bf16_pays) is off unless asked for: its decisions depend on the CPU.
Expected<CompiledModel> compile_with(const std::string& text, int level, Precision precision,
                                     std::vector<std::string> keep = {}, bool cost_model = false) {
  CompileOptions options;
  options.passes.opt_level = level;
  options.passes.precision = precision;
  options.passes.keep_dtype = std::move(keep);
  options.passes.precision_cost_model = cost_model;
  return testing::compile_text_with(text, std::move(options));
}

// Output name -> the precision attribute of its producer ("fp32" when absent), for the convs
// and products (the ONNX text syntax names values, not nodes).
std::map<std::string, std::string> precisions(const ir::Graph& g) {
  std::map<std::string, std::string> out;
  for (const auto& n : g.nodes()) {
    const std::string& op = n->op_type();
    if (op == "Conv" || op == "FusedConv" || op == "MatMul" || op == "FusedMatMul" || op == "Gemm" ||
        op == "FusedGemm")
      out[n->output(0)->name()] = n->attr_string("precision", "fp32");
  }
  return out;
}

std::vector<std::string> notes(const CompiledModel& c) {
  for (const PassRecord& r : c.passes)
    if (r.name == "precision_assignment") return r.notes;
  return {};
}

// conv1 (+Relu) -> conv2 -> pool -> fc: a small classifier.
std::string classifier() {
  return fmodel("g (float[1,3,8,8] x) => (float[1,5] y)",
                finit("w1", {4, 3, 3, 3}, 1) + finit("b1", {4}, 2) + finit("w2", {6, 4, 1, 1}, 3) +
                    finit("wf", {5, 6}, 4) + finit("bf", {5}, 5),
                R"(
    c1 = Conv(x, w1, b1) <pads = [1, 1, 1, 1]>
    r1 = Relu(c1)
    c2 = Conv(r1, w2)
    p = GlobalAveragePool(c2)
    f = Flatten(p)
    y = Gemm(f, wf, bf) <transB = 1>)");
}

TEST(PrecisionAssignmentTest, Fp32ChangesNothing) {
  auto c = compile_with(classifier(), 3, Precision::kFp32);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  for (const auto& [name, p] : precisions(*c->graph)) EXPECT_EQ(p, "fp32") << name;
  EXPECT_TRUE(notes(*c).empty());
}

TEST(PrecisionAssignmentTest, MixedKeepsTheFinalLayerFp32AtEveryLevel) {
  for (int level : {0, 1, 2, 3}) {
    auto c = compile_with(classifier(), level, Precision::kMixed);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    std::map<std::string, std::string> p = precisions(*c->graph);
    ASSERT_EQ(p.size(), 3u) << "level " << level;
    int split = 0;
    for (const auto& [name, prec] : p) {
      const bool is_fc = name == "y";
      // The 2-D convolutions take the split bf16x3.
      EXPECT_EQ(prec, is_fc ? "fp32" : "bf16x3") << name << " at -O" << level;
      split += prec == "bf16x3";
    }
    EXPECT_EQ(split, 2);
    ASSERT_FALSE(notes(*c).empty());
    EXPECT_NE(notes(*c)[0].find("precision mixed: 2 nodes in bf16"), std::string::npos) << notes(*c)[0];
    EXPECT_NE(notes(*c)[1].find("(final layer)"), std::string::npos) << notes(*c)[1];
  }
}

TEST(PrecisionAssignmentTest, Bf16TakesTheFinalLayerToo) {
  auto c = compile_with(classifier(), 3, Precision::kBf16);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  for (const auto& [name, p] : precisions(*c->graph)) EXPECT_EQ(p, "bf16") << name;
  EXPECT_EQ(c->graph->outputs()[0]->producer()->op_type(), "FusedGemm");  // carries the attribute
}

TEST(PrecisionAssignmentTest, KeepDtypeByNameAndByOpType) {
  // By the name of the node's output (the fused Conv+Relu writes r1).
  auto by_name = compile_with(classifier(), 3, Precision::kBf16, {"r1"});
  ASSERT_TRUE(by_name.ok()) << by_name.status().to_string();
  int fp32 = 0;
  for (const auto& [name, p] : precisions(*by_name->graph)) {
    EXPECT_EQ(p, name == "r1" ? "fp32" : "bf16") << name;
    fp32 += p == "fp32";
  }
  EXPECT_EQ(fp32, 1);

  // ONNX op types match the fused forms; an entry matching nothing is reported.
  auto by_type = compile_with(classifier(), 3, Precision::kBf16, {"Conv", "NoSuchNode"});
  ASSERT_TRUE(by_type.ok()) << by_type.status().to_string();
  for (const auto& [name, p] : precisions(*by_type->graph)) EXPECT_EQ(p, name != "y" ? "fp32" : "bf16") << name;
  bool reported = false;
  for (const std::string& n : notes(*by_type))
    reported |= n.find("NoSuchNode matches no convolution") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST(PrecisionAssignmentTest, MixedProductsTakeSingleBf16) {
  std::string text = fmodel("g (float[4,8] a) => (float[4,3] y)", finit("w1", {8, 6}, 7) + finit("w2", {6, 3}, 8), R"(
    m = MatMul(a, w1)
    r = Relu(m)
    y = MatMul(r, w2))");
  auto c = compile_with(text, 3, Precision::kMixed);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::map<std::string, std::string> p = precisions(*c->graph);
  ASSERT_EQ(p.size(), 2u);
  for (const auto& [name, prec] : p) EXPECT_EQ(prec, name == "y" ? "fp32" : "bf16") << name;
}

// With the cost model on a bf16-capable CPU, a convolution with few FLOPs per element (3 -> 64
// channels, 1x1, on a 64x64 map) stays fp32 and one with many (64 -> 64, 3x3) takes bf16x3
// where the CPU's bf16 rate pays for its three products (AMX).
TEST(PrecisionAssignmentTest, CostModelKeepsCheapConvolutionsFp32) {
  if (!kernels::cpu_bf16_support().avx512) GTEST_SKIP() << "no bf16 kernels on this CPU: the model does not apply";
  std::string text = fmodel("g (float[1,3,64,64] x) => (float[1,8] y)",
                            finit("w1", {64, 3, 1, 1}, 1) + finit("w2", {64, 64, 3, 3}, 2) + finit("wf", {8, 64}, 3), R"(
    a = Conv(x, w1)
    b = Conv(a, w2) <pads = [1, 1, 1, 1]>
    p = GlobalAveragePool(b)
    f = Flatten(p)
    y = Gemm(f, wf) <transB = 1>)");
  auto c = compile_with(text, 3, Precision::kMixed, {}, true);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::map<std::string, std::string> p = precisions(*c->graph);
  EXPECT_EQ(p["a"], "fp32");
  // bf16x3 does three products' work, so it pays only where bf16 runs at more than three times
  // fp32's rate: with AMX tiles; with AVX512-BF16 dot products alone (the model's rate: about
  // 1.6x fp32) b takes single bf16 instead (it is not among the first sixth of the model's
  // convolutions, which would stay fp32).
  const bool amx = kernels::cpu_bf16_support().amx;
  EXPECT_EQ(p["b"], amx ? "bf16x3" : "bf16");
  const std::string expected_note = "1 convolutions faster in fp32 here";
  bool noted = false;
  for (const std::string& n : notes(*c)) noted |= n.find(expected_note) != std::string::npos;
  EXPECT_TRUE(noted) << expected_note;
}

// Seven 32 -> 32 3x3 convolutions, each wanting bf16x3 (its input outweighs its weights):
// with AMX all take it; without, bf16x3 runs slower than fp32, so the first (one sixth of
// seven, rounded down: the early_convolutions) stays fp32 and the rest take single bf16.
TEST(PrecisionAssignmentTest, WithoutAmxEarlyConvolutionsStayFp32AndLaterOnesTakeBf16) {
  if (!kernels::cpu_bf16_support().avx512) GTEST_SKIP() << "no bf16 kernels on this CPU: the model does not apply";
  std::string inits = finit("wf", {8, 32}, 20);
  std::string body;
  for (int i = 1; i <= 7; ++i) {
    inits += finit("w" + std::to_string(i), {32, 32, 3, 3}, i);
    body += "    c" + std::to_string(i) + " = Conv(" + (i == 1 ? std::string("x") : "c" + std::to_string(i - 1)) + ", w" +
            std::to_string(i) + ") <pads = [1, 1, 1, 1]>\n";
  }
  body += "    p = GlobalAveragePool(c7)\n    f = Flatten(p)\n    y = Gemm(f, wf) <transB = 1>";
  auto c = compile_with(fmodel("g (float[1,32,32,32] x) => (float[1,8] y)", inits, body), 3, Precision::kMixed, {},
                        true);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::map<std::string, std::string> p = precisions(*c->graph);
  const bool amx = kernels::cpu_bf16_support().amx;
  for (int i = 1; i <= 7; ++i) {
    const std::string name = "c" + std::to_string(i);
    EXPECT_EQ(p[name], amx ? "bf16x3" : (i == 1 ? "fp32" : "bf16")) << name;
  }
  EXPECT_EQ(p["y"], "fp32");  // the final layer
}

// bf16, -O3, NC1HWC0 with 16-channel blocks: the model and the output dtypes of its FusedConvs.
Expected<CompiledModel> compile_blocked_bf16(const std::string& text) {
  CompileOptions options;
  options.passes.opt_level = 3;
  options.passes.precision = Precision::kBf16;
  options.passes.channel_block = 16;
  return testing::compile_text_with(text, std::move(options));
}

std::map<std::string, DataType> conv_output_dtypes(const ir::Graph& g) {
  std::map<std::string, DataType> out;  // by output name
  for (const auto& n : g.nodes())
    if (n->op_type() == "FusedConv") out[n->output(0)->name()] = n->output(0)->dtype();
  return out;
}

// Outputs of bf16 convolutions between 16-channel blocked tensors that only such convolutions
// read, as X or Z, are stored in bfloat16 (y_dtype): c2 (read by c3 as X), c3 (read by c4 as X
// and as the residual Z), a4 (c4 with the residual fused in, read by c5 as X). c1 stays
// float32 (its own X is the plain graph input: the NHWC route), c5 too (a pool reads it).
TEST(PrecisionAssignmentTest, Bf16ConvOutputsReadOnlyByBf16ConvsAreStoredInBf16) {
  std::string inits = finit("wf", {8, 32}, 20);
  for (int i = 1; i <= 5; ++i) inits += finit("w" + std::to_string(i), {32, 32, 3, 3}, i);
  auto c = compile_blocked_bf16(fmodel("g (float[1,32,12,12] x) => (float[1,8] y)", inits, R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    c2 = Conv(c1, w2) <pads = [1, 1, 1, 1]>
    c3 = Conv(c2, w3) <pads = [1, 1, 1, 1]>
    c4 = Conv(c3, w4) <pads = [1, 1, 1, 1]>
    a4 = Add(c4, c3)
    c5 = Conv(a4, w5) <pads = [1, 1, 1, 1]>
    p = GlobalAveragePool(c5)
    f = Flatten(p)
    y = Gemm(f, wf) <transB = 1>)"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::map<std::string, DataType> stored = conv_output_dtypes(*c->graph);
  ASSERT_EQ(stored.size(), 5u);
  EXPECT_EQ(stored["c1"], DataType::kFloat32);
  EXPECT_EQ(stored["c2"], DataType::kBFloat16);
  EXPECT_EQ(stored["c3"], DataType::kBFloat16);
  EXPECT_EQ(stored["a4"], DataType::kBFloat16);
  EXPECT_EQ(stored["c5"], DataType::kFloat32);
  bool noted = false;
  for (const std::string& note : notes(*c)) noted |= note.find("3 convolution outputs stored in bf16") != std::string::npos;
  EXPECT_TRUE(noted);
}

// Stored outputs read only as X change no result: the same graph with every output kept
// float32 (its readers then round it to bfloat16 themselves) gives the same bits.
TEST(PrecisionAssignmentTest, Bf16StoredInputsGiveTheResultsOfFloat32Ones) {
  std::string inits = finit("wf", {8, 32}, 20);
  for (int i = 1; i <= 4; ++i) inits += finit("w" + std::to_string(i), {32, 32, 3, 3}, i);
  const std::string text = fmodel("g (float[1,32,12,12] x) => (float[1,8] y)", inits, R"(
    c1 = Conv(x, w1) <pads = [1, 1, 1, 1]>
    r1 = Relu(c1)
    c2 = Conv(r1, w2) <pads = [1, 1, 1, 1]>
    r2 = Relu(c2)
    c3 = Conv(r2, w3) <strides = [2, 2]>
    c4 = Conv(c3, w4) <pads = [1, 1, 1, 1]>
    p = GlobalAveragePool(c4)
    f = Flatten(p)
    y = Gemm(f, wf) <transB = 1>)");
  auto stored = compile_blocked_bf16(text);
  auto unstored = compile_blocked_bf16(text);
  ASSERT_TRUE(stored.ok() && unstored.ok());
  int changed = 0;
  for (const auto& n : unstored->graph->nodes()) {
    if (!n->has_attr("y_dtype")) continue;
    n->attrs().erase("y_dtype");
    n->output(0)->type().dtype = DataType::kFloat32;
    ++changed;
  }
  ASSERT_EQ(changed, 2);  // c2 and c3
  auto inputs = make_inputs(*stored->graph);
  const Tensor got = run_graph(stored->graph, inputs)[0].tensor();
  const Tensor want = run_graph(unstored->graph, inputs)[0].tensor();
  ASSERT_EQ(got.dims(), want.dims());
  for (int64_t i = 0; i < want.num_elements(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
}

TEST(PrecisionAssignmentTest, ProductsOfTwoActivationsStayFp32) {
  std::string text = fmodel("g (float[4,8] a, float[8,3] b) => (float[4,3] y)", finit("w", {3, 3}, 6), R"(
    m = MatMul(a, b)
    y = MatMul(m, w))");
  auto c = compile_with(text, 3, Precision::kBf16);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::map<std::string, std::string> p = precisions(*c->graph);
  EXPECT_EQ(p["m"], "fp32");  // B is an input, not a layer's weights
  EXPECT_EQ(p["y"], "bf16");
}

// The oracle: the fp32 graph on X and W rounded to bfloat16 by this test.
float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

void expect_bf16_product_semantics(const std::string& signature, const std::string& w_name, std::vector<int> w_dims,
                                   const std::string& body) {
  const std::string w = finit(w_name, w_dims, 11);
  const std::string text = fmodel(signature, w, body);
  auto bf16 = compile_with(text, 0, Precision::kBf16);
  auto fp32 = compile_with(text, 0, Precision::kFp32);
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  ASSERT_TRUE(fp32.ok()) << fp32.status().to_string();
  ASSERT_EQ(precisions(*bf16->graph).begin()->second, "bf16");
  auto inputs = make_inputs(*fp32->graph);
  const std::vector<RuntimeValue> got = run_graph(bf16->graph, inputs);
  const std::vector<RuntimeValue> unrounded = run_graph(fp32->graph, inputs);

  // Round X and W (the initializer of the fp32 graph) in place.
  for (rt::NamedValue& in : inputs) {
    Tensor& t = in.value.tensor();
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = round_bf16(t.data<float>()[i]);
  }
  for (const auto& value : fp32->graph->values()) {
    ir::Value* v = value.get();
    if (!v->has_initializer() || v->name() != w_name) continue;
    Tensor r = Tensor::make(DataType::kFloat32, v->initializer()->dims());
    for (int64_t i = 0; i < r.num_elements(); ++i) r.data<float>()[i] = round_bf16(v->initializer()->data<float>()[i]);
    v->set_initializer(std::move(r));
  }
  const std::vector<RuntimeValue> want = run_graph(fp32->graph, inputs);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  const Tensor& g = got[0].tensor();
  const Tensor& e = want[0].tensor();
  ASSERT_EQ(g.dims(), e.dims());
  bool differs_from_fp32 = false;
  for (int64_t i = 0; i < g.num_elements(); ++i) {
    ASSERT_EQ(g.data<float>()[i], e.data<float>()[i]) << "element " << i;
    differs_from_fp32 |= g.data<float>()[i] != unrounded[0].tensor().data<float>()[i];
  }
  EXPECT_TRUE(differs_from_fp32) << "the rounding changed nothing: the test would not notice its absence";
}

TEST(PrecisionAssignmentTest, Bf16ConvComputesOnRoundedInputs) {
  expect_bf16_product_semantics("g (float[1,3,6,6] x) => (float[1,4,6,6] y)", "w", {4, 3, 3, 3},
                                "y = Conv(x, w) <pads = [1, 1, 1, 1]>");
}

TEST(PrecisionAssignmentTest, Bf16MatMulAndGemmComputeOnRoundedInputs) {
  expect_bf16_product_semantics("g (float[5,7] a) => (float[5,3] y)", "w", {7, 3}, "y = MatMul(a, w)");
  expect_bf16_product_semantics("g (float[5,7] a) => (float[5,3] y)", "w", {3, 7},
                                "y = Gemm(a, w) <transB = 1, alpha = 0.5>");
}

// bf16x3 keeps about 16 significant bits: within 1e-4 of max|fp32| on a grouped conv where
// single bf16 is off by far more, and the split must be what brings it there.
TEST(PrecisionAssignmentTest, Bf16x3ConvIsCloseToFp32) {
  const std::string text = fmodel("g (float[1,8,9,9] x) => (float[1,6,9,9] y)", finit("w", {6, 4, 3, 3}, 12), R"(
    c = Conv(x, w) <pads = [1, 1, 1, 1], group = 2>
    y = Relu(c))");
  auto mixed = compile_with(text, 3, Precision::kMixed);
  auto bf16 = compile_with(text, 3, Precision::kBf16);
  auto fp32 = compile_with(text, 3, Precision::kFp32);
  ASSERT_TRUE(mixed.ok() && bf16.ok() && fp32.ok());
  // The only conv is the final layer under mixed: keep nothing, so it is split.
  ASSERT_EQ(precisions(*mixed->graph).begin()->second, "fp32");
  ir::Node* conv = mixed->graph->nodes()[0].get();
  conv->attrs()["precision"] = ir::Attribute::from_string("bf16x3");
  auto inputs = make_inputs(*fp32->graph);
  const Tensor want = run_graph(fp32->graph, inputs)[0].tensor();
  const Tensor x3 = run_graph(mixed->graph, inputs)[0].tensor();
  const Tensor x1 = run_graph(bf16->graph, inputs)[0].tensor();
  double scale = 0, err3 = 0, err1 = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
    err3 = std::max(err3, std::fabs(double(x3.data<float>()[i]) - want.data<float>()[i]));
    err1 = std::max(err1, std::fabs(double(x1.data<float>()[i]) - want.data<float>()[i]));
  }
  EXPECT_LE(err3, 1e-4 * scale);
  EXPECT_GT(err1, 10 * err3) << "single bf16 " << err1 << " vs bf16x3 " << err3;
}

TEST(ParseKeepDtypeTest, ListsFilesAndErrors) {
  auto list = parse_keep_dtype("fc, Gemm,conv1");
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  EXPECT_EQ(*list, (std::vector<std::string>{"fc", "Gemm", "conv1"}));
  EXPECT_FALSE(parse_keep_dtype("fc,,Gemm").ok());

  const std::string path = ::testing::TempDir() + "keep_dtype.cfg";
  {
    std::ofstream f(path);
    f << "# ATC's keep_dtype file\nOpName:fc\n\nOpType: Softmax  # a comment\nconv1\n";
  }
  auto file = parse_keep_dtype(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(*file, (std::vector<std::string>{"fc", "Softmax", "conv1"}));
  {
    std::ofstream f(path);
    f << "OpName:\n";
  }
  auto bad = parse_keep_dtype(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find(":1"), std::string::npos) << bad.status().to_string();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::compiler
