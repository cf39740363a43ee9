// Tests of the opset 1-6 forms of ops (legacy broadcast/axis attributes, per-channel PRelu
// slopes, attribute-borne shapes and pads, old defaults) and of fixes found by the ONNX
// node tests. Expected values computed by NumPy.
#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

// a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5
Tensor a234() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
  return make<float>({2, 3, 4}, v);
}

TEST(LegacyOpsetTest, AddBroadcastsBOntoAAtAxis) {
  // a + b.reshape(1, 3, 1), b = [1, -2, 3]
  ir::AttributeMap attrs{{"broadcast", attr_i(1)}, {"axis", attr_i(1)}};
  expect_tensor(run1("Add", 6, {a234(), make<float>({3}, {1, -2, 3})}, attrs), {2, 3, 4},
                {1.0, 1.5, 2.0, 2.5, 0.0, 0.5, 1.0, 1.5, 7.0, 7.5, 8.0, 8.5,
                 7.0, 7.5, 8.0, 8.5, 6.0, 6.5, 7.0, 7.5, 13.0, 13.5, 14.0, 14.5});
  // Opset 1 (consumed_inputs is ignored), negative axis.
  attrs = {{"broadcast", attr_i(1)}, {"axis", attr_i(-2)}, {"consumed_inputs", attr_ints({0, 0})}};
  Tensor r = run1("Add", 1, {a234(), make<float>({3}, {1, -2, 3})}, attrs);
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_FLOAT_EQ(r.data<float>()[4], 0.0f);
}

TEST(LegacyOpsetTest, BroadcastWithoutAxisMatchesTheSuffix) {
  // a * c, c of shape (3, 4) = [[10, 20, 30, 40], [50, 60, 70, 80], [90, 100, 110, 120]]
  std::vector<float> c{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
  Tensor r = run1("Mul", 6, {a234(), make<float>({3, 4}, c)}, {{"broadcast", attr_i(1)}});
  ASSERT_EQ(r.dims(), (std::vector<int64_t>{2, 3, 4}));
  const std::vector<float> first{0.0f, 10.0f, 30.0f, 60.0f, 100.0f, 150.0f};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_FLOAT_EQ(r.data<float>()[i], first[i]);
  // Scalar B broadcasts too.
  expect_tensor(run1("Sub", 6, {make<float>({2}, {1, 2}), scalar<float>(1)}, {{"broadcast", attr_i(1)}}), {2},
                {0, 1});
}

TEST(LegacyOpsetTest, LegacyBroadcastRejectsMismatches) {
  // broadcast=0 needs equal shapes.
  auto r = run_op("Add", 6, {a234(), make<float>({4}, {1, 2, 3, 4})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("broadcast"), std::string::npos) << r.status().to_string();
  // B does not fit at the axis, or runs past A's rank.
  r = run_op("Add", 6, {a234(), make<float>({4}, {1, 2, 3, 4})}, {{"broadcast", attr_i(1)}, {"axis", attr_i(1)}});
  EXPECT_FALSE(r.ok());
  r = run_op("Add", 6, {a234(), make<float>({3, 4}, std::vector<float>(12, 1))},
             {{"broadcast", attr_i(1)}, {"axis", attr_i(2)}});
  EXPECT_FALSE(r.ok());
  r = run_op("Add", 6, {a234(), make<float>({3}, {1, 2, 3})}, {{"broadcast", attr_i(1)}, {"axis", attr_i(7)}});
  EXPECT_FALSE(r.ok());
  // Opset 7 ignores the old attributes and broadcasts NumPy-style.
  r = run_op("Add", 7, {a234(), make<float>({4}, {1, 2, 3, 4})}, {{"broadcast", attr_i(1)}, {"axis", attr_i(0)}});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST(LegacyOpsetTest, PowAndComparisonsUseLegacyBroadcast) {
  // [[1, 2], [3, 4]] ** [2, 3].reshape(2, 1)
  expect_tensor(run1("Pow", 6, {make<float>({2, 2}, {1, 2, 3, 4}), make<float>({2}, {2, 3})},
                     {{"broadcast", attr_i(1)}, {"axis", attr_i(0)}}),
                {2, 2}, {1, 4, 27, 64});
  // [[1, 5], [7, 2]] > [3, 4].reshape(2, 1)
  Tensor g = run1("Greater", 1, {make<int32_t>({2, 2}, {1, 5, 7, 2}), make<int32_t>({2}, {3, 4})},
                  {{"broadcast", attr_i(1)}, {"axis", attr_i(0)}});
  ASSERT_EQ(g.dtype(), DataType::kBool);
  expect_tensor(g, {2, 2}, {0, 1, 1, 0}, 0, 0);
  auto r = run_op("Equal", 6, {make<int32_t>({2, 2}, {1, 5, 7, 2}), make<int32_t>({2}, {3, 4})});
  EXPECT_FALSE(r.ok());
}

TEST(LegacyOpsetTest, PReluBeforeOpset7HasOneSlopePerChannel) {
  std::vector<float> x{-1, 2, -3, 4, -5, 6, -7, 8, -9, 10, -11, 12};
  expect_tensor(run1("PRelu", 6, {make<float>({1, 3, 2, 2}, x), make<float>({3}, {0.1f, 0.2f, 0.3f})}),
                {1, 3, 2, 2}, {-0.1, 2, -0.3, 4, -1.0, 6, -1.4, 8, -2.7, 10, -3.3, 12});
  // A single slope is shared.
  expect_tensor(run1("PRelu", 1, {make<float>({1, 2, 1, 1}, {-2, 3}), make<float>({1}, {0.5f})}), {1, 2, 1, 1},
                {-1, 3});
  // From opset 7 a 1-D slope broadcasts against the last axis.
  expect_tensor(run1("PRelu", 7, {make<float>({1, 2, 3}, {-1, -1, -1, 2, 2, 2}), make<float>({3}, {1, 2, 3})}),
                {1, 2, 3}, {-1, -2, -3, 2, 2, 2});
}

TEST(LegacyOpsetTest, SeluOpset1HasRoundedDefaults) {
  // np.where(v > 0, g * v, g * a * (np.exp(v) - 1)), a/g = 1.6732/1.0507 (opset 1) or exact (6)
  expect_tensor(run1("Selu", 1, {make<float>({2}, {-1.0f, 0.5f})}), {2}, {-1.1112878322601318, 0.5253499746322632});
  expect_tensor(run1("Selu", 6, {make<float>({2}, {-1.0f, 0.5f})}), {2}, {-1.1113308668136597, 0.5253505110740662});
}

TEST(LegacyOpsetTest, UnaryAndActivationOpsAcceptOpset1) {
  ir::AttributeMap consumed{{"consumed_inputs", attr_ints({0})}};
  expect_tensor(run1("Relu", 1, {make<float>({3}, {-1, 0, 2})}, consumed), {3}, {0, 0, 2});
  expect_tensor(run1("Abs", 1, {make<float>({2}, {-1.5f, 2})}, consumed), {2}, {1.5, 2});
  expect_tensor(run1("Clip", 1, {make<float>({3}, {-5, 0.5f, 5})}, {{"min", attr_f(-1)}, {"max", attr_f(1)}}), {3},
                {-1, 0.5, 1});
  expect_tensor(run1("Sum", 1, {make<float>({2}, {1, 2}), make<float>({2}, {3, 4})}), {2}, {4, 6});
}

TEST(LegacyOpsetTest, GemmOpset6RequiresAndBroadcastsC) {
  // 2 * A @ B + 3 * C, C of shape (3,) broadcast over rows
  Tensor a = make<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor b = make<float>({2, 3}, {1, 0, 2, 0, 1, 3});
  Tensor c = make<float>({3}, {0.5f, 1, -1});
  expect_tensor(run1("Gemm", 6, {a, b, c}, {{"alpha", attr_f(2)}, {"beta", attr_f(3)}, {"broadcast", attr_i(1)}}),
                {3, 3}, {3.5, 7.0, 13.0, 7.5, 11.0, 33.0, 11.5, 15.0, 53.0});
  EXPECT_FALSE(run_op("Gemm", 6, {a, b}).ok());
}

TEST(LegacyOpsetTest, ReshapeOpset1TakesTheShapeAttribute) {
  Tensor r = run1("Reshape", 1, {iota_f({2, 3})}, {{"shape", attr_ints({3, -1})}});
  expect_tensor(r, {3, 2}, {0, 1, 2, 3, 4, 5});
  EXPECT_FALSE(run_op("Reshape", 4, {iota_f({2, 3})}, {{"shape", attr_ints({4, -1})}}).ok());
}

TEST(LegacyOpsetTest, ConcatPadSplitDropoutOldForms) {
  // Concat opset 1-3: axis defaults to 1.
  expect_tensor(run1("Concat", 1, {iota_f({1, 2}), iota_f({1, 1})}), {1, 3}, {0, 1, 0});
  EXPECT_FALSE(run_op("Concat", 4, {iota_f({1, 2}), iota_f({1, 1})}).ok());
  // Pad opset 1: `paddings` [x1_begin, x2_begin, x1_end, x2_end].
  expect_tensor(run1("Pad", 1, {make<float>({1, 2}, {1, 2})},
                     {{"paddings", attr_ints({0, 1, 0, 2})}, {"value", attr_f(5)}}),
                {1, 5}, {5, 1, 2, 5, 5});
  // Split opset 1: sizes from the optional second input.
  auto parts = run_op("Split", 1, {iota_f({5}), i64({2, 3}, {2})}, {{"axis", attr_i(0)}}, 2, {1});
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  expect_tensor((*parts)[0], {2}, {0, 1});
  expect_tensor((*parts)[1], {3}, {2, 3, 4});
  // Dropout opset 6 with is_test: the identity.
  expect_tensor(run1("Dropout", 6, {make<float>({2}, {1, 2})}, {{"is_test", attr_i(1)}}), {2}, {1, 2});
}

TEST(LegacyOpsetTest, BatchNormalizationOpset6) {
  // (x - mean) / sqrt(var + eps) * scale + B per channel
  Tensor x = make<float>({1, 2, 1, 2}, {1, 2, 3, 4});
  Tensor scale = make<float>({2}, {1, 2}), bias = make<float>({2}, {0, 1});
  Tensor mean = make<float>({2}, {1, 3}), var = make<float>({2}, {4, 1});
  expect_tensor(run1("BatchNormalization", 6, {x, scale, bias, mean, var},
                     {{"is_test", attr_i(1)}, {"epsilon", attr_f(0)}, {"consumed_inputs", attr_ints({0, 0, 0, 1, 1})}}),
                {1, 2, 1, 2}, {0, 0.5, 1, 3});
}

// ---- node-test fixes -----------------------------------------------------------------------

TEST(NodeTestFixes, ReduceMaxMinTakeBools) {
  Tensor x = make<bool>({2, 2}, {true, false, false, false});
  Tensor mx = run1("ReduceMax", 20, {x, i64({1}, {1})}, {}, {1});
  ASSERT_EQ(mx.dtype(), DataType::kBool);
  expect_tensor(mx, {2, 1}, {1, 0}, 0, 0);
  expect_tensor(run1("ReduceMin", 20, {x, i64({1}, {1})}, {}, {1}), {2, 1}, {0, 0}, 0, 0);
}

TEST(NodeTestFixes, RangeOfHalfTypes) {
  auto half = [](float v, DataType d) {
    Tensor t = Tensor::make(d, {});
    *t.data<uint16_t>() = d == DataType::kFloat16 ? float_to_fp16(v) : float_to_bf16(v);
    return t;
  };
  // np.arange(1, 5, 2, dtype=np.float16)
  const DataType f16 = DataType::kFloat16, bf16 = DataType::kBFloat16;
  Tensor r = run1("Range", 11, {half(1, f16), half(5, f16), half(2, f16)});
  ASSERT_EQ(r.dtype(), DataType::kFloat16);
  expect_tensor(r, {2}, {1, 3}, 0, 0);
  r = run1("Range", 11, {half(1, bf16), half(5, bf16), half(2, bf16)});
  ASSERT_EQ(r.dtype(), DataType::kBFloat16);
  expect_tensor(r, {2}, {1, 3}, 0, 0);
}

TEST(NodeTestFixes, TrainingDropoutWithSeedMatchesNumPy) {
  // np.random.seed(0); m = np.random.uniform(0, 1, (2, 3)) >= 0.6; m * ones / (1 - np.float32(0.6))
  auto r = run_op("Dropout", 13,
                  {make<float>({2, 3}, std::vector<float>(6, 1.0f)), scalar<float>(0.6f), scalar<bool>(true)},
                  {{"seed", attr_i(0)}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 3}, {0, 2.5000002, 2.5000002, 0, 0, 2.5000002});
  ASSERT_EQ((*r)[1].dtype(), DataType::kBool);
  expect_tensor((*r)[1], {2, 3}, {0, 1, 1, 0, 0, 1}, 0, 0);
  // Not training, or ratio 0: the identity with an all-true mask.
  r = run_op("Dropout", 13, {make<float>({2}, {1, 2}), scalar<float>(0.6f), scalar<bool>(false)}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2}, {1, 2});
  expect_tensor((*r)[1], {2}, {1, 1}, 0, 0);
  EXPECT_FALSE(run_op("Dropout", 13, {make<float>({2}, {1, 2}), scalar<float>(1.0f), scalar<bool>(true)}).ok());
}

TEST(NodeTestFixes, ConvTransposeOutputShapeBeyondTheFullOutput) {
  // X = [[[[2]]]], W = [[[[1, 3]]]]: the full output is [[2, 6]]; output_shape (2, 3) adds a
  // row and a column at the end that get no contribution.
  Tensor r = run1("ConvTranspose", 11, {make<float>({1, 1, 1, 1}, {2}), make<float>({1, 1, 1, 2}, {1, 3})},
                  {{"output_shape", attr_ints({2, 3})}});
  expect_tensor(r, {1, 1, 2, 3}, {2, 6, 0, 0, 0, 0}, 0, 0);
}

}  // namespace
}  // namespace kiln::ops
