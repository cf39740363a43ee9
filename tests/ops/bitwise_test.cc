// Tests of BitwiseAnd/Or/Xor/Not and BitCast.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(BitwiseTest, BitwiseAndBroadcast) {
  Tensor y = run1("BitwiseAnd", 18, {make<int32_t>({2, 3}, {1, -2, 7, 0, 255, -128}), make<int32_t>({3}, {3, 5, -1})});
  expect_tensor(y, {2, 3}, {1, 4, 7, 0, 5, -128}, 0, 0);
}

TEST(BitwiseTest, BitwiseOrBroadcast) {
  Tensor y = run1("BitwiseOr", 18, {make<int32_t>({2, 3}, {1, -2, 7, 0, 255, -128}), make<int32_t>({3}, {3, 5, -1})});
  expect_tensor(y, {2, 3}, {3, -1, -1, 3, 255, -1}, 0, 0);
}

TEST(BitwiseTest, BitwiseXorBroadcast) {
  Tensor y = run1("BitwiseXor", 18, {make<int32_t>({2, 3}, {1, -2, 7, 0, 255, -128}), make<int32_t>({3}, {3, 5, -1})});
  expect_tensor(y, {2, 3}, {2, -5, -8, 3, 250, 127}, 0, 0);
}

TEST(BitwiseTest, NotUint8) {
  Tensor y = run1("BitwiseNot", 18, {make<uint8_t>({4}, {0, 1, 200, 255})});
  expect_tensor(y, {4}, {255, 254, 55, 0}, 0, 0);
}

TEST(BitwiseTest, BitCastFloatToInt32) {
  Tensor y = run1("BitCast", 26, {make<float>({3}, {1, -2.5, 0})}, {{"to", attr_i(6)}});
  ASSERT_EQ(y.dtype(), DataType::kInt32);
  expect_tensor(y, {3}, {1065353216, -1071644672, 0}, 0, 0);
}


TEST(BitwiseTest, Errors) {
  EXPECT_NE(run_error("BitwiseAnd", 18, {iota_f({2}), iota_f({2})}), "");
  EXPECT_NE(run_error("BitwiseOr", 18, {make<int32_t>({2}, {1, 2}), make<int64_t>({2}, {1, 2})}), "");
  // 32-bit float to 64-bit int: widths differ.
  EXPECT_NE(run_error("BitCast", 26, {iota_f({2})}, {{"to", attr_i(7)}}), "");
  EXPECT_NE(run_error("BitCast", 26, {iota_f({2})}, {{"to", attr_i(8)}}), "");
}

TEST(BitwiseTest, BitCastBoolToUint8AndBack) {
  Tensor u = run1("BitCast", 26, {make<bool>({3}, {true, false, true})}, {{"to", attr_i(2)}});
  ASSERT_EQ(u.dtype(), DataType::kUInt8);
  expect_tensor(u, {3}, {1, 0, 1}, 0, 0);
}

}  // namespace
}  // namespace kiln::ops::testing
