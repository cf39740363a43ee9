// Tests of Swish, Shrink, CumProd and Det.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(MiscMathTest, Swish) {
  auto r = run_op("Swish", 24, {make<float>({5}, {0.75, 2.37000012, 1.6500001, -1.6500001, -1.20000005})}, {{"alpha", attr_f(0.5f)}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {5}, {0.44449994, 1.8150543, 1.14723957, -0.50276053, -0.425212443});
}

TEST(MiscMathTest, ShrinkSoft) {
  auto r = run_op("Shrink", 9, {make<float>({5}, {-3, -1, 0, 1, 3})}, {{"lambd", attr_f(1.5f)}, {"bias", attr_f(1.5f)}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {5}, {-1.5, 0, 0, 0, 1.5});
}

TEST(MiscMathTest, ShrinkInt) {
  auto r = run_op("Shrink", 9, {make<int32_t>({5}, {-5, -1, 0, 2, 7})}, {{"lambd", attr_f(1.0f)}, {"bias", attr_f(1.0f)}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {5}, {-4, 0, 0, 1, 6});
}

TEST(MiscMathTest, CumProdReverseExclusive) {
  Tensor y = run1("CumProd", 26, {make<double>({2, 3}, {1.5, -1.98, 1.28, 1.18, -0.12, -0.78}), scalar<int32_t>(-1)}, {{"reverse", attr_i(1)}, {"exclusive", attr_i(1)}});
  expect_tensor(y, {2, 3}, {-2.5344, 1.28, 1, 0.0936, -0.78, 1}, 1e-12, 1e-12);
}

TEST(MiscMathTest, CumProdInt) {
  Tensor y = run1("CumProd", 26, {make<int64_t>({2, 3}, {2, 3, -4, 1, 5, 6}), scalar<int64_t>(0)});
  expect_tensor(y, {2, 3}, {2, 3, -4, 2, 15, -24}, 0, 0);
}

TEST(MiscMathTest, DetBatch) {
  auto r = run_op("Det", 22, {make<float>({2, 3, 3}, {-0.439999998, -0.49000001, -0.109999999, 0.00999999978, 0.109999999, 0.99000001, 0.589999974, 0.239999995, 0.980000019, -0.569999993, -0.680000007, 0.230000004, -0.910000026, -0.930000007, 0.0299999993, -0.0700000003, 0.829999983, 0.25999999})}, {}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2}, {-0.217419997, -0.196133018});
}


TEST(MiscMathTest, Errors) {
  EXPECT_NE(run_error("CumProd", 26, {iota_f({2, 3}), scalar<int64_t>(2)}), "");
  EXPECT_NE(run_error("Det", 22, {iota_f({2, 3})}), "");
}

TEST(MiscMathTest, DetSingular) {
  Tensor y = run1("Det", 22, {make<float>({2, 2}, {1, 2, 2, 4})});
  expect_tensor(y, {}, {0});
}

}  // namespace
}  // namespace kiln::ops::testing
