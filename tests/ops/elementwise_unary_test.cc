// Tests of the unary element-wise ops, expected values from closed-form std:: math, and of
// the static registration of all element-wise families.
#include <cmath>
#include <functional>

#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

TEST(ElementwiseRegistrationTest, FamiliesAreRegisteredAtEveryOpset) {
  const OpRegistry& reg = OpRegistry::instance();
  EXPECT_NE(reg.find("", "Relu", 14), nullptr);
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu", "Add", "Sub", "Mul",
                         "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater", "And", "Or",
                         "Xor", "Not", "Cast", "Clip", "PRelu", "LeakyRelu", "Softmax", "LogSoftmax", "Hardmax",
                         "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})
    for (int64_t opset = 7; opset <= kMaxOpset; ++opset)
      EXPECT_NE(reg.find("", op, opset), nullptr) << op << " at opset " << opset;
  EXPECT_NE(reg.find("", "Gelu", 20), nullptr);
  EXPECT_EQ(reg.find("", "Gelu", 19), nullptr);
  EXPECT_NE(reg.find("", "Where", 9), nullptr);
  EXPECT_NE(reg.find("", "CastLike", 15), nullptr);
  EXPECT_NE(reg.find("", "BitShift", 11), nullptr);
  EXPECT_NE(reg.find("", "Mish", 18), nullptr);
  EXPECT_NE(reg.find("", "HardSwish", 14), nullptr);
  // The opset-dependent forms are distinct schemas.
  EXPECT_NE(reg.find("", "ReduceSum", 12), reg.find("", "ReduceSum", 13));
  EXPECT_NE(reg.find("", "ReduceMean", 17), reg.find("", "ReduceMean", 18));
  EXPECT_NE(reg.find("", "Clip", 10), reg.find("", "Clip", 11));
  EXPECT_NE(reg.find("", "Softmax", 12), reg.find("", "Softmax", 13));
}

struct UnaryCase {
  const char* op;
  int64_t opset;
  std::function<double(double)> fn;
  std::vector<double> inputs;
};

std::vector<UnaryCase> unary_cases() {
  const std::vector<double> any = {-2.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.5, 3.0};
  const std::vector<double> unit = {-0.9, -0.5, 0.0, 0.3, 0.75};
  const std::vector<double> pos = {0.1, 0.5, 1.0, 2.0, 10.0};
  return {
      {"Abs", 13, [](double x) { return std::fabs(x); }, any},
      {"Neg", 13, [](double x) { return -x; }, any},
      {"Exp", 13, [](double x) { return std::exp(x); }, any},
      {"Log", 13, [](double x) { return std::log(x); }, pos},
      {"Sqrt", 13, [](double x) { return std::sqrt(x); }, pos},
      {"Reciprocal", 13, [](double x) { return 1.0 / x; }, pos},
      {"Floor", 13, [](double x) { return std::floor(x); }, any},
      {"Ceil", 13, [](double x) { return std::ceil(x); }, any},
      // Halves round to even: -2.5 -> -2, -0.5 -> -0, 0.5 -> 0, 1.5 -> 2.
      {"Round", 11, [](double x) { return std::nearbyint(x); }, any},
      {"Sign", 13, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, any},
      {"Erf", 13, [](double x) { return std::erf(x); }, any},
      {"Tanh", 13, [](double x) { return std::tanh(x); }, any},
      {"Sigmoid", 13, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, any},
      {"Sin", 7, [](double x) { return std::sin(x); }, any},
      {"Cos", 7, [](double x) { return std::cos(x); }, any},
      {"Tan", 7, [](double x) { return std::tan(x); }, any},
      {"Asin", 7, [](double x) { return std::asin(x); }, unit},
      {"Acos", 7, [](double x) { return std::acos(x); }, unit},
      {"Atan", 7, [](double x) { return std::atan(x); }, any},
      {"Sinh", 9, [](double x) { return std::sinh(x); }, any},
      {"Cosh", 9, [](double x) { return std::cosh(x); }, any},
      {"Asinh", 9, [](double x) { return std::asinh(x); }, any},
      {"Acosh", 9, [](double x) { return std::acosh(x); }, {1.0, 1.5, 2.0, 10.0}},
      {"Atanh", 9, [](double x) { return std::atanh(x); }, unit},
  };
}

TEST(ElementwiseUnaryTest, FloatOpsMatchClosedForm) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.op);
    std::vector<double> expected;
    std::vector<float> xf;
    for (double x : c.inputs) {
      expected.push_back(c.fn(x));
      xf.push_back(static_cast<float>(x));
    }
    const int64_t n = static_cast<int64_t>(c.inputs.size());
    expect_tensor(run1(c.op, c.opset, {make<double>({n}, c.inputs)}), {n}, expected, 1e-12, 1e-12);
    expect_tensor(run1(c.op, c.opset, {make<float>({1, n}, xf)}), {1, n}, expected, 1e-6, 1e-6);
  }
}

TEST(ElementwiseUnaryTest, HalfTypesComputeInFloat) {
  Tensor h = Tensor::make(DataType::kFloat16, {3});
  Tensor b = Tensor::make(DataType::kBFloat16, {3});
  const float v[3] = {0.5f, 4.0f, 9.0f};
  for (int i = 0; i < 3; ++i) {
    h.data<uint16_t>()[i] = float_to_fp16(v[i]);
    b.data<uint16_t>()[i] = float_to_bf16(v[i]);
  }
  Tensor yh = run1("Sqrt", 13, {h});
  ASSERT_EQ(yh.dtype(), DataType::kFloat16);
  expect_tensor(yh, {3}, {std::sqrt(0.5), 2.0, 3.0}, 1e-3, 0);
  Tensor yb = run1("Sqrt", 13, {b});
  ASSERT_EQ(yb.dtype(), DataType::kBFloat16);
  expect_tensor(yb, {3}, {std::sqrt(0.5), 2.0, 3.0}, 1e-2, 0);
}

TEST(ElementwiseUnaryTest, IntegerAbsNegSignWrapLikeNumPy) {
  expect_tensor(run1("Abs", 13, {make<int32_t>({4}, {-3, 0, 5, INT32_MIN})}), {4}, {3, 0, 5, INT32_MIN}, 0, 0);
  expect_tensor(run1("Neg", 13, {make<int64_t>({3}, {-3, 0, 7})}), {3}, {3, 0, -7}, 0, 0);
  expect_tensor(run1("Sign", 13, {make<int8_t>({3}, {-4, 0, 9})}), {3}, {-1, 0, 1}, 0, 0);
  expect_tensor(run1("Abs", 13, {make<uint8_t>({2}, {200, 3})}), {2}, {200, 3}, 0, 0);
}

TEST(ElementwiseUnaryTest, IsNaNAndIsInfGiveBool) {
  const double inf = INFINITY;
  Tensor x = make<float>({4}, {1.0f, NAN, INFINITY, -INFINITY});
  Tensor nan = run1("IsNaN", 13, {x});
  ASSERT_EQ(nan.dtype(), DataType::kBool);
  expect_tensor(nan, {4}, {0, 1, 0, 0}, 0, 0);
  expect_tensor(run1("IsInf", 10, {x}), {4}, {0, 0, 1, 1}, 0, 0);
  expect_tensor(run1("IsInf", 10, {x}, {{"detect_negative", attr_i(0)}}), {4}, {0, 0, 1, 0}, 0, 0);
  expect_tensor(run1("IsInf", 10, {x}, {{"detect_positive", attr_i(0)}}), {4}, {0, 0, 0, 1}, 0, 0);
  (void)inf;
}

TEST(ElementwiseUnaryTest, InferenceKeepsSymbolicDims) {
  Shape s{Dim::symbolic("batch"), 3};
  auto out = infer_op("Exp", 13, {{DataType::kFloat32, s}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].dtype, DataType::kFloat32);
  EXPECT_EQ((*out)[0].shape, s);
  auto b = infer_op("IsNaN", 13, {{DataType::kFloat32, s}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[0].dtype, DataType::kBool);
}

TEST(ElementwiseUnaryTest, UnsupportedDtypeIsAnError) {
  auto r = run_op("Exp", 13, {make<int32_t>({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("Exp"), std::string::npos) << r.status().to_string();
  auto n = run_op("Neg", 13, {make<uint8_t>({1}, {1})});
  EXPECT_FALSE(n.ok());
}

}  // namespace
}  // namespace kiln::ops
