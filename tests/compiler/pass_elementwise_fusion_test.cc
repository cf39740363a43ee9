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
