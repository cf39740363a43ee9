// constant_folding: all-constant chains and static shape chains fold; symbolic shapes,
// randomness, big outputs and graph outputs do not. Folded values are checked against
// NumPy-computed expectations, and -O3 runs against -O0.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pass_test_util.h"

namespace kiln::compiler {
namespace {

using testing::changed;
using testing::compile_text;
using testing::count_op;
using testing::expect_same_as_O0;

std::string model(const std::string& body) { return R"(<ir_version: 8, opset_import: ["" : 17]>
)" + body; }

std::vector<double> values_of(const ir::Value* v) {
  std::vector<double> out;
  if (!v || !v->has_initializer()) return out;
  for (int64_t i = 0; i < v->initializer()->num_elements(); ++i) out.push_back(v->initializer()->element_as_double(i));
  return out;
}

TEST(ConstantFoldingTest, AllConstantChainFolds) {
  auto c = expect_same_as_O0(model(R"(g (float[3,2] x) => (float[3,2] y) {
    a = Constant <value = float[2,3] {1, 2, 3, 4, 5, 6}> ()
    b = Constant <value = float[2,3] {0.5, -1, 2, 0.25, 3, -2}> ()
    s = Add(a, b)
    m = Mul(s, a)
    t = Transpose <perm = [1, 0]> (m)
    y = Add(x, t)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Mul"), 0);
  EXPECT_EQ(count_op(*c.graph, "Transpose"), 0);
  EXPECT_EQ(count_op(*c.graph, "Add"), 1);
  EXPECT_EQ(changed(c, "constant_folding"), 3);
  const ir::Value* t = c.graph->find_value("t");
  ASSERT_TRUE(t && t->has_initializer());
  EXPECT_EQ(t->shape().static_dims(), (std::vector<int64_t>{3, 2}));
  // NumPy: ((a + b) * a).T
  EXPECT_EQ(values_of(t), (std::vector<double>{1.5, 17.0, 2.0, 40.0, 15.0, 24.0}));
  // The constants only the folded nodes read are not carried into the weights.
  EXPECT_FALSE(c.graph->find_value("a")->has_initializer());
  EXPECT_FALSE(c.graph->find_value("s")->has_initializer());
}

TEST(ConstantFoldingTest, ShapeChainFoldsAndReshapeBecomesStatic) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3,4] x) => (float[A,B] y) {
    s = Shape(x)
    i0 = Constant <value = int64 {0}> ()
    i1 = Constant <value = int64 {1}> ()
    d0 = Gather <axis = 0> (s, i0)
    d1 = Gather <axis = 0> (s, i1)
    ax = Constant <value = int64[1] {0}> ()
    u0 = Unsqueeze(d0, ax)
    u1 = Unsqueeze(d1, ax)
    p = Mul(u0, u1)
    minus1 = Constant <value = int64[1] {-1}> ()
    shp = Concat <axis = 0> (p, minus1)
    r = Reshape(x, shp)
    n = Size(r)
    nf = Cast <to = 1> (n)
    y = Add(r, nf)
  })"));
  ASSERT_TRUE(c.graph);
  for (const char* op : {"Shape", "Gather", "Unsqueeze", "Mul", "Concat", "Size", "Cast"})
    EXPECT_EQ(count_op(*c.graph, op), 0) << op;
  EXPECT_EQ(count_op(*c.graph, "Reshape"), 1);
  // NumPy: x.shape[0] * x.shape[1] = 6, then -1; x.size = 24.
  EXPECT_EQ(values_of(c.graph->find_value("shp")), (std::vector<double>{6, -1}));
  EXPECT_EQ(values_of(c.graph->find_value("nf")), (std::vector<double>{24}));
  const ir::Value* r = c.graph->find_value("r");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->shape().is_static()) << r->shape().to_string();
  EXPECT_EQ(r->shape().static_dims(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(c.graph->find_value("y")->shape().static_dims(), (std::vector<int64_t>{6, 4}));
}

TEST(ConstantFoldingTest, ShapeOfSymbolicDimNotFolded) {
  auto c = compile_text(model(R"(g (float[N,3] x) => (float[N,3] y) {
    head = Shape <end = 1> (x)
    tail = Shape <start = 1> (x)
    shp = Concat <axis = 0> (head, tail)
    y = Reshape(x, shp)
  })"), 1, {"symbolic_shape_folding"});  // which follows N by name (its own test)
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // The slice [1:] is static and folds; [0:1] is N and does not, so neither does the Concat.
  EXPECT_EQ(count_op(*c->graph, "Shape"), 1);
  EXPECT_EQ(count_op(*c->graph, "Concat"), 1);
  EXPECT_EQ(changed(*c, "constant_folding"), 1);
  EXPECT_EQ(values_of(c->graph->find_value("tail")), (std::vector<double>{3}));
}

TEST(ConstantFoldingTest, RandomOpsNotFolded) {
  auto c = compile_text(model(R"(g (float[2,3] x) => (float[2,3] y) {
    a = RandomNormal <shape = [2, 3], seed = 1.0> ()
    k = Constant <value = float[2,3] {1, 2, 3, 4, 5, 6}> ()
    b = RandomUniformLike (k)
    e = Add(a, b)
    y = Add(x, e)
  })"), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "RandomNormal"), 1);
  EXPECT_EQ(count_op(*c->graph, "RandomUniformLike"), 1);
  EXPECT_EQ(count_op(*c->graph, "Add"), 2);
  EXPECT_EQ(changed(*c, "constant_folding"), 0);
}

TEST(ConstantFoldingTest, BigConstantOfShapeNotFolded) {
  auto c = compile_text(model(R"(g (float[1024,1024] x) => (float[1024,1024] y) {
    shp = Constant <value = int64[2] {1024, 1024}> ()
    big = ConstantOfShape <value = float[1] {1.5}> (shp)
    y = Add(x, big)
  })"), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "ConstantOfShape"), 1);
  EXPECT_EQ(changed(*c, "constant_folding"), 0);
  bool noted = false;
  for (const std::string& n : c->notes) noted |= n.find("much larger") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(ConstantFoldingTest, SmallConstantOfShapeFolds) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,3] y) {
    shp = Constant <value = int64[2] {2, 3}> ()
    fill = ConstantOfShape <value = float[1] {1.5}> (shp)
    y = Add(x, fill)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "ConstantOfShape"), 0);
  EXPECT_EQ(values_of(c.graph->find_value("fill")), (std::vector<double>(6, 1.5)));
}

TEST(ConstantFoldingTest, GraphOutputKeepsItsName) {
  auto c = expect_same_as_O0(model(R"(g (float[2] x) => (float[2] y, float[2] z) {
    a = Constant <value = float[2] {1, 2}> ()
    b = Constant <value = float[2] {3, -4}> ()
    c = Add(a, b)
    y = Mul(c, a)
    z = Add(x, y)
  })"));
  ASSERT_TRUE(c.graph);
  ASSERT_EQ(c.graph->outputs().size(), 2u);
  EXPECT_EQ(c.graph->outputs()[0]->name(), "y");
  EXPECT_EQ(c.graph->outputs()[1]->name(), "z");
  EXPECT_EQ(count_op(*c.graph, "Mul"), 1);  // produces a graph output: kept
  // NumPy: a + b
  EXPECT_EQ(values_of(c.graph->find_value("c")), (std::vector<double>{4, -2}));
}

TEST(ConstantFoldingTest, OffAtO0AndWhenDisabled) {
  const std::string text = model(R"(g (float[2] x) => (float[2] y) {
    a = Constant <value = float[2] {1, 2}> ()
    b = Neg(a)
    y = Add(x, b)
  })");
  auto o0 = compile_text(text, 0);
  ASSERT_TRUE(o0.ok()) << o0.status().to_string();
  EXPECT_EQ(changed(*o0, "constant_folding"), -1);
  EXPECT_EQ(count_op(*o0->graph, "Neg"), 1);
  auto off = compile_text(text, 1, {"constant_folding"});
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_EQ(count_op(*off->graph, "Neg"), 1);
  auto on = compile_text(text, 1);
  ASSERT_TRUE(on.ok()) << on.status().to_string();
  EXPECT_EQ(count_op(*on->graph, "Neg"), 0);
  EXPECT_EQ(values_of(on->graph->find_value("b")), (std::vector<double>{-1, -2}));
}

}  // namespace
}  // namespace kiln::compiler
