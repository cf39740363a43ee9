// algebraic_simplify: each rewrite fires where it should and not where it must not; the
// -O3 graph gives the same outputs as the -O0 reference under GraphExecutor.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::compiler {
namespace {

using testing::changed;
using testing::compile_text;
using testing::count_op;
using testing::expect_same_as_O0;

constexpr const char* kHeader = R"(<ir_version: 8, opset_import: ["" : 17]>
)";

std::string model(const std::string& body) { return kHeader + body; }

TEST(AlgebraicSimplifyTest, IdentityRemovedButGraphOutputKeepsItsName) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,3] y) {
    a = Identity(x)
    b = Relu(a)
    y = Identity(b)
  })"));
  ASSERT_TRUE(c.graph);
  // The Identity producing the graph output y stays: output names are stable.
  EXPECT_EQ(count_op(*c.graph, "Identity"), 1);
  EXPECT_EQ(c.graph->nodes().size(), 2u);
  EXPECT_EQ(changed(c, "algebraic_simplify"), 1);
  EXPECT_EQ(c.graph->outputs()[0]->producer()->op_type(), "Identity");
}

TEST(AlgebraicSimplifyTest, DisabledAtO0AndByName) {
  const std::string text = model(R"(g (float[2,3] x) => (float[2,3] y) {
    a = Identity(x)
    y = Relu(a)
  })");
  auto o0 = compile_text(text, 0);
  ASSERT_TRUE(o0.ok()) << o0.status().to_string();
  EXPECT_EQ(count_op(*o0->graph, "Identity"), 1);
  EXPECT_EQ(changed(*o0, "algebraic_simplify"), -1);  // did not run
  auto off = compile_text(text, 1, {"algebraic_simplify"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(count_op(*off->graph, "Identity"), 1);
  auto o1 = compile_text(text, 1);
  ASSERT_TRUE(o1.ok());
  EXPECT_EQ(count_op(*o1->graph, "Identity"), 0);
}

TEST(AlgebraicSimplifyTest, InferenceDropoutRemoved) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,3] y) {
    r = Constant <value = float {0.5}> ()
    t = Constant <value = bool {0}> ()
    a = Dropout(x)
    b = Dropout(a, r, t)
    y = Relu(b)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Dropout"), 0);
  EXPECT_EQ(changed(c, "algebraic_simplify"), 2);
}

TEST(AlgebraicSimplifyTest, TrainingDropoutAndUsedMaskKept) {
  auto c = compile_text(model(R"(g (float[2,3] x) => (float[2,3] y, bool[2,3] m) {
    r = Constant <value = float {0.5}> ()
    t = Constant <value = bool {1}> ()
    a = Dropout(x, r, t)
    b, m = Dropout(a)
    y = Relu(b)
  })"), 1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(count_op(*c->graph, "Dropout"), 2);
  EXPECT_EQ(changed(*c, "algebraic_simplify"), 0);
}

TEST(AlgebraicSimplifyTest, NoOpReshapeTransposeCastPadRemoved) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[3,2] y) {
    s = Constant <value = int64[2] {2, 3}> ()
    a = Reshape(x, s)
    b = Transpose <perm = [0, 1]> (a)
    c = Cast <to = 1> (b)
    p = Constant <value = int64[4] {0, 0, 0, 0}> ()
    d = Pad(c, p)
    s2 = Constant <value = int64[2] {3, 2}> ()
    e = Reshape(d, s2)
    y = Relu(e)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Transpose"), 0);
  EXPECT_EQ(count_op(*c.graph, "Cast"), 0);
  EXPECT_EQ(count_op(*c.graph, "Pad"), 0);
  EXPECT_EQ(count_op(*c.graph, "Reshape"), 1);  // the real one, [2,3] -> [3,2]
}

TEST(AlgebraicSimplifyTest, RealPadKept) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,5] y) {
    p = Constant <value = int64[4] {0, 1, 0, 1}> ()
    y = Pad(x, p)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Pad"), 1);
}

TEST(AlgebraicSimplifyTest, TransposeChainComposedMatchesNumPy) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3,4] x) => (float[3,4,2] y) {
    a = Transpose <perm = [1, 0, 2]> (x)
    y = Transpose <perm = [0, 2, 1]> (a)
  })"));
  ASSERT_TRUE(c.graph);
  ASSERT_EQ(c.graph->nodes().size(), 1u);
  EXPECT_EQ(c.graph->nodes()[0]->attr_ints("perm"), (std::vector<int64_t>{1, 2, 0}));
  // x.transpose(1,0,2).transpose(0,2,1) computed by NumPy on make_inputs' x.
  const std::vector<float> want = {
      -0.726999998f, 1.86300004f, 1.86300004f, 0.382999986f, 0.382999986f, -1.097f, -1.097f, 1.49300003f,
      1.49300003f, 0.0130000003f, 0.0130000003f, -1.46700001f, -1.46700001f, 1.12300003f, 1.12300003f,
      -0.356999993f, -0.356999993f, -1.83700001f, -1.83700001f, 0.753000021f, 0.753000021f, -0.726999998f,
      -0.726999998f, 1.86300004f};
  auto out = testing::run_graph(c.graph, testing::make_inputs(*c.graph));
  ASSERT_EQ(out.size(), 1u);
  const Tensor& y = out[0].tensor();
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{3, 4, 2}));
  for (int64_t i = 0; i < y.num_elements(); ++i) EXPECT_EQ(y.data<float>()[i], want[static_cast<size_t>(i)]) << i;
}

TEST(AlgebraicSimplifyTest, InverseTransposesCancel) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3,4] x) => (float[2,3,4] y) {
    a = Transpose <perm = [2, 0, 1]> (x)
    b = Transpose <perm = [1, 2, 0]> (a)
    y = Relu(b)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Transpose"), 0);
  EXPECT_EQ(c.graph->nodes().size(), 1u);
}

TEST(AlgebraicSimplifyTest, TransposeWithSecondConsumerNotComposed) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3,4] x) => (float[2,3,4] y, float[3,2,4] z) {
    a = Transpose <perm = [1, 0, 2]> (x)
    b = Transpose <perm = [1, 0, 2]> (a)
    y = Relu(b)
    z = Sigmoid(a)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Transpose"), 2);
  EXPECT_EQ(changed(c, "algebraic_simplify"), 0);
}

TEST(AlgebraicSimplifyTest, ReshapeChainShortened) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3,4] x) => (float[4,6] y) {
    s1 = Constant <value = int64[2] {6, 4}> ()
    s2 = Constant <value = int64[2] {4, -1}> ()
    a = Reshape(x, s1)
    b = Reshape(a, s2)
    y = Relu(b)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Reshape"), 1);
  EXPECT_EQ(c.graph->nodes()[0]->input(0)->name(), "x");
}

TEST(AlgebraicSimplifyTest, ReshapeChainCopyingADimKept) {
  // 0 copies the intermediate's dim 0 (6), which differs from x's (2): must not shortcut.
  auto c = expect_same_as_O0(model(R"(g (float[2,3,4] x) => (float[6,4] y) {
    s1 = Constant <value = int64[2] {6, 4}> ()
    s2 = Constant <value = int64[2] {0, -1}> ()
    a = Reshape(x, s1)
    b = Reshape(a, s2)
    y = Relu(b)
  })"));
  ASSERT_TRUE(c.graph);
  // The second Reshape is itself a no-op ([6,4] -> [6,4]) and goes; the first stays.
  EXPECT_EQ(count_op(*c.graph, "Reshape"), 1);
  EXPECT_EQ(c.graph->nodes()[0]->input(0)->name(), "x");
  EXPECT_EQ(c.graph->nodes()[0]->output(0)->shape().to_string(), "[6,4]");
}

TEST(AlgebraicSimplifyTest, ArithmeticIdentitiesRemoved) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x) => (float[2,3] y) {
    one = Constant <value = float[3] {1, 1, 1}> ()
    zero = Constant <value = float {0}> ()
    a = Mul(x, one)
    b = Mul(one, a)
    c = Add(b, zero)
    d = Add(zero, c)
    e = Sub(d, zero)
    f = Div(e, one)
    y = Relu(f)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(c.graph->nodes().size(), 1u);
  EXPECT_EQ(changed(c, "algebraic_simplify"), 6);
}

TEST(AlgebraicSimplifyTest, ArithmeticThatIsNotIdentityKept) {
  // 0 - x negates; a 1 broadcast to a bigger shape changes the output shape; 2 is not a unit.
  auto c = expect_same_as_O0(model(R"(g (float[3] x) => (float[2,3] y, float[3] z, float[3] w) {
    ones = Constant <value = float[2,3] {1, 1, 1, 1, 1, 1}> ()
    zero = Constant <value = float {0}> ()
    two = Constant <value = float {2}> ()
    y = Mul(x, ones)
    a = Sub(zero, x)
    z = Relu(a)
    b = Mul(x, two)
    w = Relu(b)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Mul"), 2);
  EXPECT_EQ(count_op(*c.graph, "Sub"), 1);
  EXPECT_EQ(changed(c, "algebraic_simplify"), 0);
}

TEST(AlgebraicSimplifyTest, LosslessCastRoundTripRemoved) {
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x, int32[4] i) => (float[2,3] y, int32[4] j) {
    a = Cast <to = 11> (x)
    b = Cast <to = 1> (a)
    y = Relu(b)
    k = Cast <to = 7> (i)
    l = Cast <to = 6> (k)
    j = Abs(l)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Cast"), 0);
}

TEST(AlgebraicSimplifyTest, LossyCastRoundTripKept) {
  // float32 -> float16 -> float32 rounds; int32 -> float32 -> int32 loses large values.
  auto c = expect_same_as_O0(model(R"(g (float[2,3] x, int32[4] i) => (float[2,3] y, int32[4] j) {
    a = Cast <to = 10> (x)
    b = Cast <to = 1> (a)
    y = Relu(b)
    k = Cast <to = 1> (i)
    l = Cast <to = 6> (k)
    j = Abs(l)
  })"));
  ASSERT_TRUE(c.graph);
  EXPECT_EQ(count_op(*c.graph, "Cast"), 4);
  // And the values really do differ from x: the round trip was not an identity.
  auto inputs = testing::make_inputs(*c.graph);
  auto out = testing::run_graph(c.graph, inputs);
  ASSERT_EQ(out.size(), 2u);
  const Tensor& x = inputs[0].value.tensor();
  bool differs = false;
  for (int64_t e = 0; e < x.num_elements(); ++e)
    differs |= out[0].tensor().data<float>()[e] != std::max(0.0f, x.data<float>()[e]);
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace kiln::compiler
