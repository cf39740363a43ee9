// cse: identical nodes merge; different attributes, randomness and graph outputs do not.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::compiler {
namespace {

using testing::changed;
using testing::compile_text;
using testing::count_op;
using testing::expect_same_as_O0;

std::string model(const std::string& body) { return R"(<ir_version: 8, opset_import: ["" : 17]>
)" + body; }

TEST(CseTest, IdenticalChainsMerge) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,3] y) {
    a = Relu(x)
    b = Relu(x)
    sa = Sigmoid(a)
    sb = Sigmoid(b)
    y = Add(sa, sb)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Relu"), 1);
  EXPECT_EQ(count_op(*c.graph, "Sigmoid"), 1);
  EXPECT_EQ(changed(c, "cse"), 2);
}

TEST(CseTest, DifferentAttributesOrInputsKept) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x, float[2,3] z) => (float[2,3] y) {
    a = LeakyRelu <alpha = 0.1> (x)
    b = LeakyRelu <alpha = 0.2> (x)
    d = LeakyRelu <alpha = 0.1> (z)
    e = Add(a, b)
    y = Add(e, d)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "LeakyRelu"), 3);
  EXPECT_EQ(changed(c, "cse"), 0);
}

TEST(CseTest, OperandOrderMatters) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x, float[2,3] z) => (float[2,3] y) {
    a = Sub(x, z)
    b = Sub(z, x)
    y = Add(a, b)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Sub"), 2);
}

TEST(CseTest, RandomOpsNeverMerge) {
  auto c = compile_text(model(R"(g (float[2,3] x) => (float[2,3] y) {
    a = RandomNormal <shape = [2, 3], seed = 1.0> ()
    b = RandomNormal <shape = [2, 3], seed = 1.0> ()
    c = RandomUniformLike (x)
    d = RandomUniformLike (x)
    e = Add(a, b)
    f = Add(c, d)
    y = Add(e, f)
  })"), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "RandomNormal"), 2);
  EXPECT_EQ(count_op(*c->graph, "RandomUniformLike"), 2);
  EXPECT_EQ(changed(*c, "cse"), 0);
}

TEST(CseTest, TrainingDropoutNeverMerges) {
  auto c = compile_text(model(R"(g (float[2,3] x) => (float[2,3] y) {
    r = Constant <value = float {0.5}> ()
    t = Constant <value = bool {1}> ()
    a = Dropout(x, r, t)
    b = Dropout(x, r, t)
    y = Add(a, b)
  })"), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "Dropout"), 2);
}

TEST(CseTest, DuplicateProducingAGraphOutputKept) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
    y = Relu(x)
    z = Relu(x)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Relu"), 2);
  EXPECT_EQ(c.graph->outputs()[1]->name(), "z");
}

TEST(CseTest, NodesWithSubgraphsNeverMerge) {
  auto c = expect_same_as_O0(model(R"(g (bool c, float[2] x) => (float[2] y) {
    a = If (c) <then_branch = t1 () => (float[2] o) { o = Relu(x) },
                else_branch = e1 () => (float[2] o) { o = Neg(x) }>
    b = If (c) <then_branch = t2 () => (float[2] o) { o = Relu(x) },
                else_branch = e2 () => (float[2] o) { o = Neg(x) }>
    y = Add(a, b)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "If"), 2);
}

}  // namespace
}  // namespace kiln::compiler
