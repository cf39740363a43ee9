// elementwise_fusion: trees of two or more elementwise ops become one kiln
// FusedElementwise whose body holds them, at -O2/-O3, computing what the unfused -O1
// graph's ONNX reference kernels compute; shared or pinned intermediates, unknown shapes
// and non-constant Clip bounds break the trees.
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

// The body graph of a FusedElementwise node.
const ir::Graph* body_of(const ir::Node* n) {
  if (!n) return nullptr;
  const ir::Attribute* a = n->attr("body");
  return a && a->kind == ir::AttrKind::kGraph ? a->g.get() : nullptr;
}

TEST(ElementwiseFusionTest, ChainWithConstantsAndBroadcast) {
  std::string text = fmodel("g (float[2,3,4] x) => (float[2,3,4] y)",
                            finit("a", {4}, 1, 0.5, 1.5) + finit("b", {3, 1}, 2), R"(
    m = Mul(x, a)
    s = Add(m, b)
    y = Relu(s))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "elementwise_fusion"), (Patterns{{"Elementwise(3 ops)", 1}}));
    ASSERT_EQ(c.graph->nodes().size(), 1u);
    const ir::Node* n = output_producer(c);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->op_type(), "FusedElementwise");
    EXPECT_EQ(n->domain(), "kiln");
    EXPECT_EQ(c.graph->opset_imports().at("kiln"), 1);
    // Inputs in order of first use, each once; the body's inputs typed like them.
    ASSERT_EQ(n->num_inputs(), 3);
    EXPECT_EQ(n->input(0)->name(), "x");
    EXPECT_EQ(n->input(1)->name(), "a");
    EXPECT_EQ(n->input(2)->name(), "b");
    const ir::Graph* body = body_of(n);
    ASSERT_TRUE(body);
    ASSERT_EQ(body->inputs().size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(body->inputs()[i]->dtype(), n->input(i)->dtype());
      EXPECT_EQ(body->inputs()[i]->shape(), n->input(i)->shape());
    }
    ASSERT_EQ(body->outputs().size(), 1u);
    EXPECT_EQ(body->outputs()[0]->shape(), Shape({2, 3, 4}));
    ASSERT_EQ(body->nodes().size(), 3u);
    EXPECT_EQ(body->nodes()[0]->op_type(), "Mul");
    EXPECT_EQ(body->nodes()[2]->op_type(), "Relu");
    EXPECT_TRUE(ir::verify(*body).ok());
  }
}

TEST(ElementwiseFusionTest, TreeSharingAnInputAndClip) {
  std::string text = fmodel("g (float[3,4] x, float[3,4] z) => (float[3,4] y)",
                            "float lo = {-0.5}, float hi = {1.25}, float[1] two = {2.0}, ", R"(
    e = Exp(x)
    b = Abs(z)
    r = Sqrt(b)
    s = Sub(e, r)
    t = Mul(s, x)
    p = Pow(t, two)
    y = Clip(p, lo, hi))");
  for (int level : {2, 3}) {
    auto c = expect_fused_matches_O1(text, level);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(fusions(c, "elementwise_fusion"), (Patterns{{"Elementwise(7 ops)", 1}}));
    ASSERT_EQ(c.graph->nodes().size(), 1u);
    const ir::Node* n = output_producer(c);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->num_inputs(), 5);  // x, z, two, lo, hi
    ASSERT_TRUE(body_of(n));
    EXPECT_EQ(body_of(n)->nodes().size(), 7u);
  }
}

TEST(ElementwiseFusionTest, UnaryChainAfterOtherOps) {
  // The chain between a Softmax and a ReduceSum: only the elementwise ops join.
  std::string text = fmodel("g (float[2,6] x) => (float[2] y)", "int64[1] ax = {1}, ", R"(
    s = Softmax<axis = -1>(x)
    n = Neg(s)
    t = Tanh(n)
    k = Sigmoid(t)
    l = LeakyRelu<alpha = 0.2>(k)
    y = ReduceSum<keepdims = 0>(l, ax))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(fusions(c, "elementwise_fusion"), (Patterns{{"Elementwise(4 ops)", 1}}));
  EXPECT_EQ(c.graph->nodes().size(), 3u);
}

TEST(ElementwiseFusionTest, NegativeCasesStayUnfused) {
  struct Case {
    const char* what;
    std::string text;
  } cases[] = {
      {"intermediate read twice",
       fmodel("g (float[2,3] x) => (float[2,3] y, float[2,3] y2)", "", R"(
    t = Exp(x)
    y = Relu(t)
    y2 = Neg(t))")},
      {"intermediate is a graph output",
       fmodel("g (float[2,3] x) => (float[2,3] t, float[2,3] y)", "", R"(
    t = Exp(x)
    y = Relu(t))")},
      {"unknown shape", fmodel("g (float[?,3] x) => (float[?,3] y)", "", R"(
    t = Exp(x)
    y = Relu(t))")},
      {"non-constant clip bound", fmodel("g (float[2,3] x, float lo) => (float[2,3] y)", "", R"(
    t = Exp(x)
    y = Clip(t, lo))")},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto c = compile_O3(k.text);
    ASSERT_TRUE(c.graph);
    EXPECT_EQ(count_kiln_op(*c.graph, "FusedElementwise"), 0);
    EXPECT_TRUE(fusions(c, "elementwise_fusion").empty());
    EXPECT_EQ(count_op(*c.graph, "Exp"), 1);
  }
  // The shaped ones still compute what -O1 computes.
  expect_fused_matches_O1(fmodel("g (float[2,3] x) => (float[2,3] y, float[2,3] y2)", "", R"(
    t = Exp(x)
    y = Relu(t)
    y2 = Neg(t))"),
                          3);
}

TEST(ElementwiseFusionTest, OpenDimsAreNamedSoTreesFuseAndStopAtUnprovenBroadcasts) {
  // The pattern of a detection head compiled with open H and W: Resize by scales gives dims
  // inference cannot express; shape inference names them, so Add(bias) + Sigmoid after the
  // Resize fuses, and Mul + Add on z fuses while the Add of z's H with the Resize's is left
  // out (equal only at run time) instead of spoiling the tree that feeds it.
  std::string text = fmodel("g (float[1,2,h,w] x, float[1,2,H,W] z) => (float[1,2,?,?] y, float[1,2,?,?] y2)",
                            "float[0] roi = {}, float[4] sc = {1.0, 1.0, 2.0, 2.0}, " + finit("b", {1, 2, 1, 1}, 3) +
                                finit("c", {1, 2, 1, 1}, 4),
                            R"(
    r = Resize(x, roi, sc) <mode = "nearest">
    a = Add(r, b)
    y = Sigmoid(a)
    m = Mul(z, c)
    n = Add(m, z)
    y2 = Add(n, r))");
  auto ref = testing::compile_text(text, 1);
  auto opt = testing::compile_text(text, 3);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  EXPECT_EQ(fusions(*opt, "elementwise_fusion"), (Patterns{{"Elementwise(2 ops)", 2}}));
  EXPECT_EQ(count_op(*opt->graph, "Add"), 1);  // y2 = Add(n, r)
  // Run both at h = w = 3 (the Resize gives 6x6) and H = W = 6.
  std::vector<rt::NamedValue> inputs;
  for (auto [name, extent] : {std::pair<const char*, int64_t>{"x", 3}, {"z", 6}}) {
    Tensor t = Tensor::make(DataType::kFloat32, {1, 2, extent, extent});
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>((i * 7 % 11) - 5) * 0.31f;
    inputs.push_back({name, RuntimeValue(std::move(t))});
  }
  auto a = testing::run_graph(ref->graph, inputs);
  auto b = testing::run_graph(opt->graph, inputs);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t k = 0; k < a.size(); ++k)
    testing::expect_close_rel(b[k].tensor(), a[k].tensor(), "output " + std::to_string(k));
}

TEST(ElementwiseFusionTest, SplitsAtASharedValue) {
  // t feeds two consumers: the trees above it and below it are fused separately.
  std::string text = fmodel("g (float[2,3] x) => (float[2,3] y, float[2,3] y2)", "", R"(
    a = Abs(x)
    t = Sqrt(a)
    b = Neg(t)
    y = Exp(b)
    c = Tanh(t)
    y2 = Sigmoid(c))");
  auto c = expect_fused_matches_O1(text, 3);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(fusions(c, "elementwise_fusion"), (Patterns{{"Elementwise(2 ops)", 3}}));
  EXPECT_EQ(count_kiln_op(*c.graph, "FusedElementwise"), 3);
}

}  // namespace
}  // namespace kiln::compiler
