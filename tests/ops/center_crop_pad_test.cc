// Tests of CenterCropPad: cropping, padding, axes, inference from a constant shape, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(CenterCropPadTest, CropAndPad) {
  auto r = run_op("CenterCropPad", 18, {make<float>({5, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}), make<int64_t>({2}, {2, 7})}, {}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 7}, {0, 4, 5, 6, 7, 0, 0, 0, 8, 9, 10, 11, 0, 0});
}

TEST(CenterCropPadTest, NegativeAxis) {
  auto r = run_op("CenterCropPad", 18, {make<float>({5, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}), make<int64_t>({1}, {3})}, {{"axes", attr_ints({-1})}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {5, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18});
}


TEST(CenterCropPadTest, InferFromConstantShape) {
  Tensor shape = make<int64_t>({2}, {3, 6});
  auto r = infer_op("CenterCropPad", 18, {ir::TensorType{DataType::kFloat32, Shape{5, 4}},
                                          ir::TensorType{DataType::kInt64, Shape{2}}},
                    {}, {nullptr, &shape});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].shape, (Shape{3, 6}));
}

TEST(CenterCropPadTest, Errors) {
  EXPECT_NE(run_error("CenterCropPad", 18, {iota_f({5, 4}), make<int64_t>({1}, {2})}), "");
  EXPECT_NE(run_error("CenterCropPad", 18, {iota_f({5, 4}), make<int64_t>({2}, {2, -1})}), "");
}

}  // namespace
}  // namespace kiln::ops::testing
