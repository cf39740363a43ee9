// Tests of Resize and Upsample: reference kernels, inference and error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values below were computed by PyTorch 1.13 / NumPy (generator kept outside
// the tree); Resize cases are the ONNX backend test data (test_resize_*, test_upsample_*).

// test_resize_downsample_scales_cubic (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesCubic) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 0.800000012, 0.800000012});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {1.47119141, 2.78125, 4.08251953, 6.71142578, 8.02148438, 9.32275391, 11.9165039, 13.2265625, 14.527832}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_cubic_A_n0p5_exclude_outside (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesCubicAN0p5ExcludeOutside) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 0.800000012, 0.800000012});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"cubic_coeff_a", attr_f(-0.5f)}, {"exclude_outside", attr_i(1)}, {"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {1.36812675, 2.6695013, 4.01333666, 6.57362509, 7.875, 9.21883488, 11.948966, 13.2503414, 14.5941763}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_cubic_align_corners (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesCubicAlignCorners) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 0.800000012, 0.800000012});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("align_corners")}, {"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {1, 2.39519167, 3.7903831, 6.5807662, 7.97595787, 9.37114906, 12.1615324, 13.5567236, 14.9519157}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_cubic_antialias (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesCubicAntialias) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 0.600000024, 0.600000024});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"antialias", attr_i(1)}, {"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 2, 2}, {2.51807213, 4.28588629, 9.58932877, 11.3571424}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_linear (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesLinear) {
  Tensor in0 = make<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor in2 = make<float>({4}, {1, 1, 0.600000024, 0.600000024});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 2}, {2.66666651, 4.33333302}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_linear_align_corners (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesLinearAlignCorners) {
  Tensor in0 = make<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor in2 = make<float>({4}, {1, 1, 0.600000024, 0.600000024});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("align_corners")}, {"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 2}, {1, 3.14285707}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_linear_antialias (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesLinearAntialias) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 0.600000024, 0.600000024});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"antialias", attr_i(1)}, {"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 2, 2}, {2.875, 4.5, 9.375, 11}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_linear_half_pixel_symmetric (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesLinearHalfPixelSymmetric) {
  Tensor in0 = make<float>({1, 1, 1, 4}, {1, 2, 3, 4});
  Tensor in2 = make<float>({4}, {1, 1, 1, 0.600000024});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("half_pixel_symmetric")}, {"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 2}, {1.66666675, 3.33333325}, 1e-05, 1e-05);
}

// test_resize_downsample_scales_nearest (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleScalesNearest) {
  Tensor in0 = make<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor in2 = make<float>({4}, {1, 1, 0.600000024, 0.600000024});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"mode", attr_s("nearest")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 2}, {1, 3}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_cubic (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesCubic) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 3, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"mode", attr_s("cubic")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {1.63078701, 3.00462961, 4.37847233, 7.12615728, 8.5, 9.87384224, 12.6215277, 13.9953699, 15.3692131}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_cubic_antialias (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesCubicAntialias) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 3, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"antialias", attr_i(1)}, {"mode", attr_s("cubic")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {1.77500916, 3.12000728, 4.4650054, 7.15500164, 8.5, 9.84499836, 12.5349941, 13.8799925, 15.2249908}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_linear_antialias (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesLinearAntialias) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 3, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"antialias", attr_i(1)}, {"mode", attr_s("linear")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {2.36363626, 3.590909, 4.81818199, 7.27272749, 8.5, 9.72727299, 12.181818, 13.409091, 14.636364}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_linear_pytorch_half_pixel (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesLinearPytorchHalfPixel) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 3, 1});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"coordinate_transformation_mode", attr_s("pytorch_half_pixel")}, {"mode", attr_s("linear")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 1}, {1.66666663, 7, 12.333333}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_nearest (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesNearest) {
  Tensor in0 = make<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor in3 = make<int64_t>({4}, {1, 1, 1, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 3}, {1, 2, 4}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_nearest_not_larger (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesNearestNotLarger) {
  Tensor in0 = make<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor in3 = make<int64_t>({2}, {1, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"axes", attr_ints({2, 3})}, {"keep_aspect_ratio_policy", attr_s("not_larger")}, {"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 2}, {1, 3}, 1e-05, 1e-05);
}

// test_resize_downsample_sizes_nearest_not_smaller (opset 19)
TEST(ResizeOnnxTest, ResizeDownsampleSizesNearestNotSmaller) {
  Tensor in0 = make<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor in3 = make<int64_t>({2}, {1, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"axes", attr_ints({2, 3})}, {"keep_aspect_ratio_policy", attr_s("not_smaller")}, {"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 2, 3}, {1, 2, 4, 5, 6, 8}, 1e-05, 1e-05);
}

// test_resize_tf_crop_and_resize (opset 19)
TEST(ResizeOnnxTest, ResizeTfCropAndResize) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in1 = make<float>({8}, {0, 0, 0.400000006, 0.600000024, 1, 1, 0.600000024, 0.800000012});
  Tensor in3 = make<int64_t>({4}, {1, 1, 3, 3});
  auto r = run_op("Resize", 19, {in0, in1, Tensor(), in3}, {{"coordinate_transformation_mode", attr_s("tf_crop_and_resize")}, {"mode", attr_s("linear")}}, 1, {1, 3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {7.60000038, 7.9000001, 8.19999981, 8.80000019, 9.10000038, 9.40000057, 10, 10.3000002, 10.6000004}, 1e-05, 1e-05);
}

// test_resize_tf_crop_and_resize_axes_2_3 (opset 19)
TEST(ResizeOnnxTest, ResizeTfCropAndResizeAxes23) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in1 = make<float>({4}, {0.400000006, 0.600000024, 0.600000024, 0.800000012});
  Tensor in3 = make<int64_t>({2}, {3, 3});
  auto r = run_op("Resize", 19, {in0, in1, Tensor(), in3}, {{"axes", attr_ints({2, 3})}, {"coordinate_transformation_mode", attr_s("tf_crop_and_resize")}, {"mode", attr_s("linear")}}, 1, {1, 3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {7.60000038, 7.9000001, 8.19999981, 8.80000019, 9.10000038, 9.40000057, 10, 10.3000002, 10.6000004}, 1e-05, 1e-05);
}

// test_resize_tf_crop_and_resize_axes_3_2 (opset 19)
TEST(ResizeOnnxTest, ResizeTfCropAndResizeAxes32) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in1 = make<float>({4}, {0.600000024, 0.400000006, 0.800000012, 0.600000024});
  Tensor in3 = make<int64_t>({2}, {3, 3});
  auto r = run_op("Resize", 19, {in0, in1, Tensor(), in3}, {{"axes", attr_ints({3, 2})}, {"coordinate_transformation_mode", attr_s("tf_crop_and_resize")}, {"mode", attr_s("linear")}}, 1, {1, 3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {7.60000038, 7.9000001, 8.19999981, 8.80000019, 9.10000038, 9.40000057, 10, 10.3000002, 10.6000004}, 1e-05, 1e-05);
}

// test_resize_tf_crop_and_resize_extrapolation_value (opset 19)
TEST(ResizeOnnxTest, ResizeTfCropAndResizeExtrapolationValue) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in1 = make<float>({8}, {0, 0, 0.400000006, 0.600000024, 1, 1, 1.20000005, 1.70000005});
  Tensor in3 = make<int64_t>({4}, {1, 1, 3, 3});
  auto r = run_op("Resize", 19, {in0, in1, Tensor(), in3}, {{"coordinate_transformation_mode", attr_s("tf_crop_and_resize")}, {"extrapolation_value", attr_f(10.0f)}, {"mode", attr_s("linear")}}, 1, {1, 3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 3, 3}, {7.60000038, 10, 10, 12.4000006, 10, 10, 10, 10, 10}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_cubic (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesCubic) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 2, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125, 2.91015625, 3.38671875, 3.68359375, 1.66015625, 1.95703125, 2.43359375, 3.0625, 3.46875, 4.09765625, 4.57421875, 4.87109375, 3.56640625, 3.86328125, 4.33984375, 4.96875, 5.375, 6.00390625, 6.48046875, 6.77734375, 6.08203125, 6.37890625, 6.85546875, 7.484375, 7.890625, 8.51953125, 8.99609375, 9.29296875, 7.70703125, 8.00390625, 8.48046875, 9.109375, 9.515625, 10.1445312, 10.6210938, 10.9179688, 10.2226562, 10.5195312, 10.9960938, 11.625, 12.03125, 12.6601562, 13.1367188, 13.4335938, 12.1289062, 12.4257812, 12.9023438, 13.53125, 13.9375, 14.5664062, 15.0429688, 15.3398438, 13.3164062, 13.6132812, 14.0898438, 14.71875, 15.125, 15.7539062, 16.2304688, 16.5273438}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_cubic_A_n0p5_exclude_outside (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesCubicAN0p5ExcludeOutside) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 2, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"cubic_coeff_a", attr_f(-0.5f)}, {"exclude_outside", attr_i(1)}, {"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {0.558823526, 0.814942062, 1.35698247, 1.89705884, 2.39705873, 2.93713522, 3.47917557, 3.7352941, 1.58329761, 1.83941603, 2.38145661, 2.92153287, 3.42153287, 3.96160913, 4.50364971, 4.75976801, 3.75145936, 4.0075779, 4.54961824, 5.0896945, 5.5896945, 6.12977076, 6.67181158, 6.92792988, 5.91176462, 6.1678834, 6.70992374, 7.25, 7.75, 8.29007626, 8.83211708, 9.0882349, 7.91176462, 8.16788292, 8.70992374, 9.25, 9.75, 10.2900763, 10.8321171, 11.0882349, 10.0720701, 10.3281889, 10.8702288, 11.410305, 11.910305, 12.4503813, 12.9924221, 13.2485409, 12.2402315, 12.4963503, 13.0383911, 13.5784674, 14.0784674, 14.6185436, 15.1605835, 15.4167023, 13.2647057, 13.5208244, 14.0628653, 14.6029415, 15.1029415, 15.6430178, 16.1850586, 16.4411774}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_cubic_align_corners (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesCubicAlignCorners) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 2, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("align_corners")}, {"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {1, 1.34110785, 1.80029154, 2.32944608, 2.67055392, 3.19970846, 3.65889215, 4, 2.36443138, 2.70553946, 3.16472292, 3.69387746, 4.03498554, 4.56413984, 5.02332354, 5.36443138, 4.20116615, 4.542274, 5.00145769, 5.53061247, 5.87172031, 6.40087461, 6.86005831, 7.20116615, 6.31778431, 6.65889215, 7.11807585, 7.64723015, 7.98833799, 8.51749229, 8.97667599, 9.31778431, 7.68221569, 8.02332401, 8.48250771, 9.01166153, 9.35276985, 9.88192463, 10.3411083, 10.6822157, 9.79883385, 10.1399412, 10.5991249, 11.1282797, 11.469388, 11.9985418, 12.4577255, 12.7988338, 11.6355686, 11.976676, 12.4358597, 12.9650145, 13.3061228, 13.8352766, 14.2944603, 14.6355686, 13, 13.3411083, 13.800292, 14.3294458, 14.6705542, 15.199708, 15.6588917, 16}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_cubic_asymmetric (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesCubicAsymmetric) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in2 = make<float>({4}, {1, 1, 2, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("asymmetric")}, {"mode", attr_s("cubic")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {1, 1.40625, 2, 2.5, 3, 3.59375, 4, 4.09375, 2.625, 3.03125, 3.625, 4.125, 4.625, 5.21875, 5.625, 5.71875, 5, 5.40625, 6, 6.5, 7, 7.59375, 8, 8.09375, 7, 7.40625, 8, 8.5, 9, 9.59375, 10, 10.09375, 9, 9.40625, 10, 10.5, 11, 11.59375, 12, 12.09375, 11.375, 11.78125, 12.375, 12.875, 13.375, 13.96875, 14.375, 14.46875, 13, 13.40625, 14, 14.5, 15, 15.59375, 16, 16.09375, 13.375, 13.78125, 14.375, 14.875, 15.375, 15.96875, 16.375, 16.46875}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_linear (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesLinear) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in2 = make<float>({4}, {1, 1, 2, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 4}, {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_linear_align_corners (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesLinearAlignCorners) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in2 = make<float>({4}, {1, 1, 2, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("align_corners")}, {"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 4}, {1, 1.33333337, 1.66666663, 2, 1.66666663, 2, 2.33333325, 2.66666675, 2.33333325, 2.66666675, 3, 3.33333325, 3, 3.33333325, 3.66666675, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_linear_half_pixel_symmetric (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesLinearHalfPixelSymmetric) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in2 = make<float>({4}, {1, 1, 2.29999995, 2.94000006});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"coordinate_transformation_mode", attr_s("half_pixel_symmetric")}, {"mode", attr_s("linear")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 5}, {1, 1.15986395, 1.5, 1.84013605, 2, 1.56521738, 1.72508132, 2.06521749, 2.40535355, 2.56521749, 2.43478251, 2.59464645, 2.93478251, 3.27491856, 3.43478251, 3, 3.15986395, 3.5, 3.84013605, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_nearest (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesNearest) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in2 = make<float>({4}, {1, 1, 2, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"mode", attr_s("nearest")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_nearest_axes_2_3 (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesNearestAxes23) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in2 = make<float>({2}, {2, 3});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"axes", attr_ints({2, 3})}, {"mode", attr_s("nearest")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_scales_nearest_axes_3_2 (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleScalesNearestAxes32) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in2 = make<float>({2}, {3, 2});
  auto r = run_op("Resize", 19, {in0, Tensor(), in2}, {{"axes", attr_ints({3, 2})}, {"mode", attr_s("nearest")}}, 1, {2});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_cubic (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesCubic) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 9, 10});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"mode", attr_s("cubic")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 9, 10}, {0.455079228, 0.640579224, 0.971579194, 1.42257917, 1.9073292, 2.22332931, 2.7080791, 3.15907931, 3.49007916, 3.67557931, 1.39437962, 1.57987964, 1.91087961, 2.36187959, 2.84662962, 3.1626296, 3.64737964, 4.09837961, 4.42937946, 4.61487961, 2.95130682, 3.13680696, 3.46780682, 3.91880703, 4.40355682, 4.71955681, 5.20430708, 5.65530682, 5.98630714, 6.17180681, 5.20525074, 5.39075089, 5.72175074, 6.17275047, 6.65750074, 6.97350073, 7.45825052, 7.90925074, 8.24025059, 8.42575073, 6.88975, 7.07525015, 7.40625, 7.85725021, 8.34200001, 8.65799999, 9.14274979, 9.59375, 9.92475033, 10.1102505, 8.57424927, 8.75974941, 9.09074974, 9.541749, 10.0264997, 10.3424997, 10.8272495, 11.2782497, 11.6092491, 11.7947493, 10.8281927, 11.0136929, 11.3446932, 11.7956934, 12.2804432, 12.5964432, 13.081193, 13.5321932, 13.8631935, 14.0486927, 12.3851204, 12.5706205, 12.9016199, 13.3526201, 13.8373699, 14.1533699, 14.6381207, 15.0891199, 15.4201202, 15.6056204, 13.3244209, 13.5099211, 13.8409204, 14.2919207, 14.7766705, 15.0926704, 15.5774212, 16.0284214, 16.3594208, 16.54492}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearest) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in3 = make<int64_t>({4}, {1, 1, 7, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 7, 8}, {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_axes_2_3 (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestAxes23) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in3 = make<int64_t>({2}, {7, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"axes", attr_ints({2, 3})}, {"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 7, 8}, {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_axes_3_2 (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestAxes32) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in3 = make<int64_t>({2}, {8, 7});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"axes", attr_ints({3, 2})}, {"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 7, 8}, {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_ceil_half_pixel (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestCeilHalfPixel) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 8, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"coordinate_transformation_mode", attr_s("half_pixel")}, {"mode", attr_s("nearest")}, {"nearest_mode", attr_s("ceil")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {1, 2, 2, 3, 3, 4, 4, 4, 5, 6, 6, 7, 7, 8, 8, 8, 5, 6, 6, 7, 7, 8, 8, 8, 9, 10, 10, 11, 11, 12, 12, 12, 9, 10, 10, 11, 11, 12, 12, 12, 13, 14, 14, 15, 15, 16, 16, 16, 13, 14, 14, 15, 15, 16, 16, 16, 13, 14, 14, 15, 15, 16, 16, 16}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_floor_align_corners (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestFloorAlignCorners) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 8, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"coordinate_transformation_mode", attr_s("align_corners")}, {"mode", attr_s("nearest")}, {"nearest_mode", attr_s("floor")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {1, 1, 1, 2, 2, 3, 3, 4, 1, 1, 1, 2, 2, 3, 3, 4, 1, 1, 1, 2, 2, 3, 3, 4, 5, 5, 5, 6, 6, 7, 7, 8, 5, 5, 5, 6, 6, 7, 7, 8, 9, 9, 9, 10, 10, 11, 11, 12, 9, 9, 9, 10, 10, 11, 11, 12, 13, 13, 13, 14, 14, 15, 15, 16}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_not_larger (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestNotLarger) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in3 = make<int64_t>({2}, {7, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"axes", attr_ints({2, 3})}, {"keep_aspect_ratio_policy", attr_s("not_larger")}, {"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 7, 7}, {1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_not_smaller (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestNotSmaller) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in3 = make<int64_t>({2}, {7, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"axes", attr_ints({2, 3})}, {"keep_aspect_ratio_policy", attr_s("not_smaller")}, {"mode", attr_s("nearest")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4}, 1e-05, 1e-05);
}

// test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric (opset 19)
TEST(ResizeOnnxTest, ResizeUpsampleSizesNearestRoundPreferCeilAsymmetric) {
  Tensor in0 = make<float>({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  Tensor in3 = make<int64_t>({4}, {1, 1, 8, 8});
  auto r = run_op("Resize", 19, {in0, Tensor(), Tensor(), in3}, {{"coordinate_transformation_mode", attr_s("asymmetric")}, {"mode", attr_s("nearest")}, {"nearest_mode", attr_s("round_prefer_ceil")}}, 1, {3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 8, 8}, {1, 2, 2, 3, 3, 4, 4, 4, 5, 6, 6, 7, 7, 8, 8, 8, 5, 6, 6, 7, 7, 8, 8, 8, 9, 10, 10, 11, 11, 12, 12, 12, 9, 10, 10, 11, 11, 12, 12, 12, 13, 14, 14, 15, 15, 16, 16, 16, 13, 14, 14, 15, 15, 16, 16, 16, 13, 14, 14, 15, 15, 16, 16, 16}, 1e-05, 1e-05);
}

// test_upsample_nearest (opset 9)
TEST(ResizeOnnxTest, UpsampleNearest) {
  Tensor in0 = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor in1 = make<float>({4}, {1, 1, 2, 3});
  auto r = run_op("Upsample", 9, {in0, in1}, {{"mode", attr_s("nearest")}}, 1, {1});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 1e-05, 1e-05);
}

TEST(ResizeTest, UpsampleOpset7ScalesAttribute) {
  // NumPy: x.repeat(2, axis=2).repeat(3, axis=3)
  Tensor x = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor y = run1("Upsample", 7, {x},
                  {{"mode", attr_s("nearest")}, {"scales", ir::Attribute::from_floats({1.f, 1.f, 2.f, 3.f})}});
  expect_tensor(y, {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 0, 0);
}

TEST(ResizeTest, Opset10LinearIsAsymmetric) {
  // x_original = x / 2: [1, 1.5, 2, 2] along the last axis (clamped at the edge).
  Tensor x = make<float>({1, 1, 1, 2}, {1, 2});
  Tensor y = run1("Resize", 10, {x, make<float>({4}, {1.f, 1.f, 1.f, 2.f})}, {{"mode", attr_s("linear")}}, {1});
  expect_tensor(y, {1, 1, 1, 4}, {1, 1.5, 2, 2}, 0, 0);
}

TEST(ResizeTest, Uint8Nearest) {
  Tensor x = make<uint8_t>({1, 2}, {7, 250});
  Tensor y = run1("Resize", 13, {x, Tensor(), make<float>({2}, {1.f, 2.f})},
                  {{"mode", attr_s("nearest")}, {"coordinate_transformation_mode", attr_s("asymmetric")}}, {2});
  expect_tensor(y, {1, 4}, {7, 7, 250, 250}, 0, 0);
}

TEST(ResizeTest, InferenceFromConstantScalesKeepsSymbolicBatch) {
  Tensor scales = make<float>({4}, {1.f, 1.f, 2.f, 2.f});
  auto r = infer_op("Resize", 13,
                    {{DataType::kFloat32, Shape({Dim::symbolic("N"), Dim(8), Dim(20), Dim(20)})}, {},
                     {DataType::kFloat32, scales.shape()}},
                    {{"mode", attr_s("nearest")}}, {nullptr, nullptr, &scales});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].shape.to_string(), "[N,8,?,?]");
  auto s = infer_op("Resize", 13,
                    {{DataType::kFloat32, Shape({Dim(1), Dim(8), Dim(20), Dim(20)})}, {},
                     {DataType::kFloat32, scales.shape()}},
                    {{"mode", attr_s("nearest")}}, {nullptr, nullptr, &scales});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ((*s)[0].shape.to_string(), "[1,8,40,40]");
}

TEST(ResizeTest, BadInputsAreErrors) {
  Tensor x = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor scales = make<float>({4}, {1.f, 1.f, 2.f, 2.f});
  Tensor sizes = make<int64_t>({4}, {1, 1, 4, 4});
  EXPECT_NE(run_error("Resize", 13, {x, Tensor(), scales, sizes}).find("only one"), std::string::npos);
  EXPECT_NE(run_error("Resize", 13, {x}).find("'n' (Resize)"), std::string::npos);
  EXPECT_NE(run_error("Resize", 13, {x, Tensor(), make<float>({2}, {2.f, 2.f})}).find("scales"), std::string::npos);
  EXPECT_NE(run_error("Resize", 13, {x, Tensor(), make<float>({4}, {1.f, 1.f, -2.f, 2.f})}).find("positive"),
            std::string::npos);
  EXPECT_NE(run_error("Resize", 13, {x, Tensor(), scales}, {{"mode", attr_s("area")}}).find("mode"), std::string::npos);
  EXPECT_NE(run_error("Resize", 13, {x, Tensor(), scales}, {{"coordinate_transformation_mode", attr_s("half_pixel_symmetric")}})
                .find("not valid at opset 13"),
            std::string::npos);
  EXPECT_NE(run_error("Resize", 18, {x, Tensor(), make<float>({2}, {2.f, 2.f})}, {{"axes", attr_ints({2, 2})}})
                .find("repeated"),
            std::string::npos);
  EXPECT_NE(run_error("Upsample", 9, {x, make<float>({4}, {1.f, 1.f, 0.5f, 2.f})}).find("< 1"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ops::testing
