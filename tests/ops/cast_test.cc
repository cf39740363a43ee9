// Tests of Cast and CastLike; expected values from NumPy's astype.
#include <string>

#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

ir::AttributeMap to(DataType t) { return {{"to", attr_i(static_cast<int64_t>(t))}}; }

TEST(CastTest, NumericConversionsMatchNumPy) {
  Tensor x = make<float>({4}, {1.7f, -1.7f, 300.5f, -1.0f});
  Tensor i = run1("Cast", 13, {x}, to(DataType::kInt32));
  ASSERT_EQ(i.dtype(), DataType::kInt32);
  expect_tensor(i, {4}, {1, -1, 300, -1}, 0, 0);
  // np.array([-1.0, 255.9, 3.2], np.float32).astype(np.uint8) = [255, 255, 3]
  expect_tensor(run1("Cast", 13, {make<float>({3}, {-1.0f, 255.9f, 3.2f})}, to(DataType::kUInt8)), {3}, {255, 255, 3},
                0, 0);
  // np.array([300, -129], np.int32).astype(np.int8) = [44, 127]
  expect_tensor(run1("Cast", 9, {make<int32_t>({2}, {300, -129})}, to(DataType::kInt8)), {2}, {44, 127}, 0, 0);
  expect_tensor(run1("Cast", 6, {make<float>({3}, {0.0f, 0.5f, -2.0f})}, to(DataType::kBool)), {3}, {0, 1, 1}, 0, 0);
  expect_tensor(run1("Cast", 13, {make<bool>({2}, {true, false})}, to(DataType::kFloat64)), {2}, {1, 0}, 0, 0);
  expect_tensor(run1("Cast", 13, {make<int64_t>({1}, {(int64_t(1) << 53) + 1})}, to(DataType::kInt64)), {1},
                {double((int64_t(1) << 53) + 1)}, 0, 0);
  // NaN and out-of-range floats do not crash.
  EXPECT_TRUE(run_op("Cast", 13, {make<float>({2}, {NAN, 1e30f})}, to(DataType::kInt64)).ok());
}

TEST(CastTest, HalfTypesRoundToNearestEven) {
  // np.float16(0.1) = 0.0999755859375; 70000 overflows to inf.
  Tensor h = run1("Cast", 13, {make<float>({3}, {0.1f, 1.0f, 70000.0f})}, to(DataType::kFloat16));
  ASSERT_EQ(h.dtype(), DataType::kFloat16);
  expect_tensor(h, {3}, {0.0999755859375, 1.0, INFINITY}, 0, 0);
  // bfloat16 keeps 8 significand bits: 1 + 2^-8 ties to even (1.0), 1 + 3 * 2^-8 to 1 + 2^-6.
  Tensor b = run1("Cast", 13, {make<double>({2}, {1.00390625, 1.01171875})}, to(DataType::kBFloat16));
  expect_tensor(b, {2}, {1.0, 1.015625}, 0, 0);
  expect_tensor(run1("Cast", 13, {h}, to(DataType::kFloat64)), {3}, {0.0999755859375, 1.0, INFINITY}, 0, 0);
}

TEST(CastTest, StringsParseAndPrint) {
  Tensor s = Tensor::make(DataType::kString, {3});
  s.data<std::string>()[0] = "3.5";
  s.data<std::string>()[1] = "-12";
  s.data<std::string>()[2] = "1e3";
  expect_tensor(run1("Cast", 13, {s}, to(DataType::kFloat32)), {3}, {3.5, -12, 1000}, 0, 0);
  Tensor n = run1("Cast", 13, {make<int64_t>({2}, {-12, 40})}, to(DataType::kString));
  ASSERT_EQ(n.dtype(), DataType::kString);
  EXPECT_EQ(n.data<std::string>()[0], "-12");
  EXPECT_EQ(n.data<std::string>()[1], "40");
  Tensor f = run1("Cast", 13, {make<float>({2}, {1.5f, -INFINITY})}, to(DataType::kString));
  EXPECT_EQ(f.data<std::string>()[0], "1.5");
  EXPECT_EQ(f.data<std::string>()[1], "-INF");
  s.data<std::string>()[2] = "kiln";
  auto bad = run_op("Cast", 13, {s}, to(DataType::kInt32));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("kiln"), std::string::npos);
}

TEST(CastTest, CastLikeTakesTheSecondInputsType) {
  Tensor y = run1("CastLike", 15, {make<double>({2}, {2.7, -0.2}), make<int64_t>({1}, {0})});
  ASSERT_EQ(y.dtype(), DataType::kInt64);
  expect_tensor(y, {2}, {2, 0}, 0, 0);
}

TEST(CastTest, InferenceAndBadTargets) {
  Shape s{Dim::symbolic("n"), 4};
  auto out = infer_op("Cast", 13, {{DataType::kFloat32, s}}, to(DataType::kFloat16));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].dtype, DataType::kFloat16);
  EXPECT_EQ((*out)[0].shape, s);
  EXPECT_FALSE(infer_op("Cast", 13, {{DataType::kFloat32, s}}, {{"to", attr_i(99)}}).ok());
  EXPECT_FALSE(run_op("Cast", 13, {make<float>({1}, {1})}, to(DataType::kComplex64)).ok());
  EXPECT_FALSE(run_op("Cast", 13, {make<float>({1}, {1})}).ok());  // 'to' missing
}

}  // namespace
}  // namespace kiln::ops
