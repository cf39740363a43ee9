// Models compiled with open dims: symbolic_shape_folding turns Reshape targets computed from
// Shape chains into constants with 0 and -1 and names the dims of Range / ConstantOfShape;
// shape inference names the dims that windows (convolutions, pools) and reshapes derive from
// open ones; so the fusions and the blocked layout still apply. Each optimised graph runs at
// several concrete shapes on the fast kernels (prepared per shape) against the -O0 graph on
// the ONNX reference kernels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fusion_test_util.h"

namespace kiln::compiler {
namespace {

using testing::compile_text;
using testing::count_kiln_op;
using testing::count_op;
using testing::expect_close_rel;
using testing::finit;
using testing::fmodel;

// Deterministic input of the given dims (values of both signs).
Tensor input_of(const std::vector<int64_t>& dims, int salt) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data<float>()[i] = static_cast<float>(((i * 7 + salt * 3) % 13) - 6) * 0.21f;
  return t;
}

std::vector<RuntimeValue> run(const std::shared_ptr<ir::Graph>& g, const Tensor& x, bool fast) {
  kernels::set_fast_kernels_enabled(fast);
  auto ex = rt::GraphExecutor::create(g);
  kernels::reset_fast_kernels_enabled();
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  std::vector<RuntimeValue> out;
  if (!ex.ok()) return out;
  Status s = (*ex)->run({{g->inputs()[0]->name(), RuntimeValue(x)}}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

// The optimised graph on fast kernels matches the -O0 graph on reference kernels at each
// of `shapes`.
void expect_matches_O0_at(const std::string& text, const CompiledModel& opt,
                          const std::vector<std::vector<int64_t>>& shapes) {
  auto ref = compile_text(text, 0);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  for (size_t k = 0; k < shapes.size(); ++k) {
    Tensor x = input_of(shapes[k], static_cast<int>(k));
    auto a = run(ref->graph, x, false);
    auto b = run(opt.graph, x, true);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      expect_close_rel(b[i].tensor(), a[i].tensor(), "output " + std::to_string(i) + " at shape " +
                                                         dims_to_string(shapes[k]));
  }
}

const ir::Node* first(const ir::Graph& g, const std::string& op) {
  for (const auto& n : g.nodes())
    if (n->op_type() == op) return n.get();
  return nullptr;
}

// x.view(x.size(0), x.size(1), 2, 8) as exporters write it: Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape; then a transpose and a reshape back through Slice of the shape.
const char* kViewModel = R"(
    s = Shape(x)
    i0 = Constant<value = int64 {0}>()
    i1 = Constant<value = int64 {1}>()
    b = Gather<axis = 0>(s, i0)
    t = Gather<axis = 0>(s, i1)
    bu = Unsqueeze(b, a0)
    tu = Unsqueeze(t, a0)
    heads = Constant<value = int64[2] {2, 8}>()
    target = Concat<axis = 0>(bu, tu, heads)
    h = MatMul(x, w)
    r = Reshape(h, target)
    p = Transpose<perm = [0, 2, 1, 3]>(r)
    q = Transpose<perm = [0, 2, 1, 3]>(p)
    s2 = Shape(q)
    lead = Slice(s2, st, en)
    back = Constant<value = int64[1] {16}>()
    target2 = Concat<axis = 0>(lead, back)
    y = Reshape(q, target2))";

std::string view_model() {
  return fmodel("g (float[B,S,16] x) => (float[B,S,16] y)",
                finit("w", {16, 16}, 1) + "int64[1] a0 = {0}, int64[1] st = {0}, int64[1] en = {2}, ",
                kViewModel);
}

TEST(SymbolicShapeFoldingTest, ComputedTargetsBecomeConstantsAndDimsKeepTheirNames) {
  auto c = compile_text(view_model(), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(testing::changed(*c, "symbolic_shape_folding"), 2);
  EXPECT_EQ(count_op(*c->graph, "Shape"), 0);  // the shape computations are dead
  EXPECT_EQ(count_op(*c->graph, "Concat"), 0);
  const ir::Node* r = first(*c->graph, "Reshape");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->input(1)->has_initializer());
  const Tensor& target = *r->input(1)->initializer();
  EXPECT_EQ(target.num_elements(), 4);
  EXPECT_EQ(target.data<int64_t>()[0], 0);
  EXPECT_EQ(target.data<int64_t>()[1], 0);
  EXPECT_EQ(target.data<int64_t>()[2], 2);
  EXPECT_EQ(target.data<int64_t>()[3], 8);
  EXPECT_EQ(r->output(0)->shape().to_string(), "[B,S,2,8]");
  EXPECT_EQ(c->graph->outputs()[0]->shape().to_string(), "[B,S,16]");
  expect_matches_O0_at(view_model(), *c, {{1, 3, 16}, {2, 5, 16}, {3, 1, 16}});
}

TEST(SymbolicShapeFoldingTest, InferredDimResolvesByName) {
  // [B, 4, 1, W] -> [0, 4, -1] is [B, 4, W]; the computed form is what the -1 replaces.
  const std::string text = fmodel("g (float[B,4,1,W] x) => (float[B,W,4] y)", "int64[1] st = {0}, int64[1] en = {2}, ",
                                  R"(
    s = Shape(x)
    lead = Slice(s, st, en)
    rest = Constant<value = int64[1] {-1}>()
    target = Concat<axis = 0>(lead, rest)
    r = Reshape(x, target)
    y = Transpose<perm = [0, 2, 1]>(r))");
  auto c = compile_text(text, 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const ir::Node* r = first(*c->graph, "Reshape");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->input(1)->has_initializer());
  EXPECT_EQ(r->output(0)->shape().to_string(), "[B,4,W]");
  expect_matches_O0_at(text, *c, {{1, 4, 1, 7}, {3, 4, 1, 2}});
}

TEST(SymbolicShapeFoldingTest, TargetsItCannotFollowStayComputed) {
  // The target's first element is a product (B * S), which the symbolic evaluation does not
  // follow: the Reshape keeps its computed target (and still runs, on the reference kernel).
  const std::string text = fmodel("g (float[B,S,16] x) => (float[?,?] y)", "int64[1] a0 = {0}, ", R"(
    s = Shape(x)
    i0 = Constant<value = int64 {0}>()
    i1 = Constant<value = int64 {1}>()
    b = Gather<axis = 0>(s, i0)
    t = Gather<axis = 0>(s, i1)
    bt = Mul(b, t)
    btu = Unsqueeze(bt, a0)
    width = Constant<value = int64[1] {16}>()
    target = Concat<axis = 0>(btu, width)
    r = Reshape(x, target)
    y = Relu(r))");
  auto c = compile_text(text, 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const ir::Node* r = first(*c->graph, "Reshape");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->input(1)->has_initializer());
  EXPECT_EQ(testing::changed(*c, "symbolic_shape_folding"), 0);
  expect_matches_O0_at(text, *c, {{2, 3, 16}, {1, 1, 16}});
}

TEST(SymbolicShapeFoldingTest, ReshapeToItsOwnShapeDisappears) {
  // Shape(x)[0:1] ++ Shape(x)[1:] is [N, 3]: the target becomes [0, 3], the Reshape a no-op.
  const std::string text = fmodel("g (float[N,3] x) => (float[N,3] y)", "", R"(
    head = Shape <end = 1> (x)
    tail = Shape <start = 1> (x)
    shp = Concat <axis = 0> (head, tail)
    r = Reshape(x, shp)
    y = Relu(r))");
  auto c = compile_text(text, 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "Shape"), 0);
  EXPECT_EQ(count_op(*c->graph, "Reshape"), 0);
  expect_matches_O0_at(text, *c, {{4, 3}, {1, 3}});
}

TEST(SymbolicShapeFoldingTest, RangeAndConstantOfShapeAreNamedAfterTheirShapes) {
  // A position embedding: positions = arange(seq), token types = zeros(batch, seq).
  const std::string text = fmodel("g (int64[batch,seq] ids) => (float[batch,seq,4] y)",
                                  finit("pos", {16, 4}, 1) + finit("tok", {2, 4}, 2) + finit("word", {32, 4}, 3) +
                                      "int64 zero = {0}, int64 one = {1}, int64[1] a0 = {0}, ",
                                  R"(
    s = Shape(ids)
    n = Gather<axis = 0>(s, one)
    r = Range(zero, n, one)
    p = Unsqueeze(r, a0)
    pe = Gather(pos, p)
    t = ConstantOfShape(s)
    te = Gather(tok, t)
    we = Gather(word, ids)
    a = Add(we, pe)
    y = Add(a, te))");
  auto c = compile_text(text, 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->graph->find_value("r")->shape().to_string(), "[seq]");
  EXPECT_EQ(c->graph->find_value("t")->shape().to_string(), "[batch,seq]");
  EXPECT_EQ(c->graph->outputs()[0]->shape().to_string(), "[batch,seq,4]");
}

// A residual block over open H and W: a stride-2 conv names its output dims after the input's
// (win(H,...)), a "same" conv keeps them, so the residual Add fuses into the conv and the
// activations between convolutions stay blocked.
TEST(OpenDimsTest, ConvolutionsFuseAndBlockWithOpenSpatialDims) {
  const std::string text = fmodel("g (float[N,16,H,W] x) => (float[N,16,?,?] y)",
                                  finit("w1", {16, 16, 3, 3}, 1) + finit("b1", {16}, 2) +
                                      finit("w2", {16, 16, 3, 3}, 3) + finit("w3", {16, 16, 1, 1}, 4),
                                  R"(
    c1 = Conv<strides = [2, 2], pads = [1, 1, 1, 1]>(x, w1, b1)
    r1 = Relu(c1)
    c2 = Conv<pads = [1, 1, 1, 1]>(r1, w2)
    s = Add(c2, r1)
    r2 = Relu(s)
    c3 = Conv(r2, w3)
    y = Sigmoid(c3))");
  auto c = testing::compile_O3(text);
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Add"), 0);  // the residual is the conv's
  EXPECT_EQ(count_kiln_op(*c.graph, "FusedConv"), 3);
  int blocked = 0;
  for (const auto& n : c.graph->nodes()) blocked += n->attr_string("y_format", "") == "NC1HWC0";
  EXPECT_GE(blocked, 2);
  expect_matches_O0_at(text, c, {{1, 16, 9, 12}, {2, 16, 16, 16}, {1, 16, 5, 3}});
}

}  // namespace
}  // namespace kiln::compiler
