// Tests of comparisons, logic ops and Where; expected values computed by NumPy.
#include <string>

#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

Tensor a() { return make<float>({2, 3, 1}, {0.90f, 0.09f, -0.74f, -0.92f, -0.46f, 0.22f}); }
Tensor b() { return make<float>({4}, {-1.01f, -0.21f, -0.16f, 0.54f}); }

TEST(LogicalTest, ComparisonsBroadcastToBool) {
  Tensor lt = run1("Less", 13, {a(), b()});
  ASSERT_EQ(lt.dtype(), DataType::kBool);
  // (a < b) from NumPy.
  const std::vector<double> less = {0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1};
  expect_tensor(lt, {2, 3, 4}, less, 0, 0);
  std::vector<double> ge;
  for (double v : less) ge.push_back(1 - v);
  expect_tensor(run1("GreaterOrEqual", 16, {a(), b()}), {2, 3, 4}, ge, 0, 0);
  Tensor x = make<int32_t>({3}, {1, 2, 3});
  expect_tensor(run1("Equal", 13, {x, scalar<int32_t>(2)}), {3}, {0, 1, 0}, 0, 0);
  expect_tensor(run1("Greater", 9, {x, scalar<int32_t>(2)}), {3}, {0, 0, 1}, 0, 0);
  expect_tensor(run1("LessOrEqual", 12, {x, scalar<int32_t>(2)}), {3}, {1, 1, 0}, 0, 0);
  expect_tensor(run1("Equal", 11, {make<bool>({2}, {true, false}), make<bool>({2}, {true, true})}), {2}, {1, 0}, 0, 0);
  Tensor s = Tensor::make(DataType::kString, {2});
  s.data<std::string>()[0] = "kiln";
  s.data<std::string>()[1] = "clay";
  Tensor t = Tensor::make(DataType::kString, {});
  t.data<std::string>()[0] = "clay";
  expect_tensor(run1("Equal", 19, {s, t}), {2}, {0, 1}, 0, 0);
}

TEST(LogicalTest, BooleanOpsAndNot) {
  Tensor p = make<bool>({2, 1}, {true, false});
  Tensor q = make<bool>({2}, {true, false});
  expect_tensor(run1("And", 7, {p, q}), {2, 2}, {1, 0, 0, 0}, 0, 0);
  expect_tensor(run1("Or", 7, {p, q}), {2, 2}, {1, 1, 1, 0}, 0, 0);
  expect_tensor(run1("Xor", 7, {p, q}), {2, 2}, {0, 1, 1, 0}, 0, 0);
  expect_tensor(run1("Not", 1, {q}), {2}, {0, 1}, 0, 0);
}

TEST(LogicalTest, WhereBroadcastsThreeInputs) {
  Tensor cond = make<bool>({4}, {true, false, true, false});
  Tensor c = make<float>({3, 1}, {0.21f, 0.36f, -0.65f});
  // np.where(cond, a, c)
  expect_tensor(run1("Where", 16, {cond, a(), c}), {2, 3, 4},
                {0.899999976, 0.209999993, 0.899999976, 0.209999993, 0.0900000036, 0.360000014, 0.0900000036,
                 0.360000014, -0.74000001, -0.649999976, -0.74000001, -0.649999976, -0.920000017, 0.209999993,
                 -0.920000017, 0.209999993, -0.460000008, 0.360000014, -0.460000008, 0.360000014, 0.219999999,
                 -0.649999976, 0.219999999, -0.649999976},
                1e-8, 0);  // the float32 values printed to 9 digits
  expect_tensor(run1("Where", 9, {make<bool>({2}, {false, true}), make<int64_t>({2}, {1, 2}), scalar<int64_t>(-1)}),
                {2}, {-1, 2}, 0, 0);
  Tensor h = Tensor::make(DataType::kFloat16, {2});
  h.data<uint16_t>()[0] = float_to_fp16(1.5f);
  h.data<uint16_t>()[1] = float_to_fp16(-3.0f);
  Tensor y = run1("Where", 16, {make<bool>({2}, {false, true}), h, Tensor::make(DataType::kFloat16, {1})});
  EXPECT_EQ(y.dtype(), DataType::kFloat16);
  expect_tensor(y, {2}, {0, -3}, 0, 0);
}

TEST(LogicalTest, BadInputsAreErrors) {
  auto r = run_op("Less", 13, {make<float>({3}, {1, 2, 3}), make<float>({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("Less"), std::string::npos);
  EXPECT_FALSE(run_op("And", 7, {make<int32_t>({1}, {1}), make<int32_t>({1}, {1})}).ok());
  EXPECT_FALSE(run_op("Where", 16, {make<int32_t>({1}, {1}), make<float>({1}, {1}), make<float>({1}, {2})}).ok());
  EXPECT_FALSE(run_op("Where", 16, {make<bool>({1}, {true}), make<float>({1}, {1}), make<double>({1}, {2})}).ok());
  EXPECT_FALSE(run_op("Equal", 13, {make<float>({1}, {1}), make<double>({1}, {1})}).ok());
}

}  // namespace
}  // namespace kiln::ops
