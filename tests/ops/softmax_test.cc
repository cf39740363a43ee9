// Tests of Softmax, LogSoftmax and Hardmax at both axis semantics; expected values
// computed by NumPy.
#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

Tensor x() {
  return make<float>({2, 3, 4}, {0.13f, -0.13f, 0.64f, 0.10f, -0.54f, 0.36f, 1.30f, 0.95f, -0.70f, -1.27f, -0.62f, 0.04f,
                                 -2.33f, -0.22f, -1.25f, -0.73f, -0.54f, -0.32f, 0.41f, 1.04f, -0.13f, 1.37f, -0.67f,
                                 0.35f});
}

TEST(SoftmaxTest, Opset13NormalisesAlongOneAxis) {
  // e = np.exp(x - x.max(1, keepdims=True)); e / e.sum(1, keepdims=True)
  expect_tensor(run1("Softmax", 13, {x()}, {{"axis", attr_i(1)}}), {2, 3, 4},
                {0.51341084, 0.338737866, 0.310708928, 0.23356784, 0.262716726, 0.552927319, 0.601157232, 0.546466253,
                 0.223872434, 0.108334815, 0.0881338394, 0.219965907, 0.0624435482, 0.146873366, 0.124295412,
                 0.101879339, 0.374002627, 0.132896518, 0.653708208, 0.59811865, 0.563553825, 0.720230115, 0.22199638,
                 0.300002011});
  expect_tensor(run1("LogSoftmax", 13, {x()}), {2, 3, 4},
                {-1.48314615, -1.74314614, -0.97314616, -1.51314614, -2.65276557, -1.75276554, -0.8127656,
                 -1.16276556, -1.55703832, -2.12703831, -1.47703833, -0.817038331, -2.84176211, -0.731762183,
                 -1.76176218, -1.2417622, -2.27075817, -2.05075814, -1.32075815, -0.690758184, -2.03868617,
                 -0.538686172, -2.57868619, -1.55868618});
  expect_tensor(run1("Hardmax", 13, {x()}), {2, 3, 4},
                {0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0}, 0, 0);
}

TEST(SoftmaxTest, BeforeOpset13CoercesTo2D) {
  // Same as softmax of x.reshape(2, 12) along axis 1.
  expect_tensor(run1("Softmax", 11, {x()}, {{"axis", attr_i(1)}}), {2, 3, 4},
                {0.072787974, 0.0561232833, 0.121213171, 0.0706367647, 0.03724623, 0.0916109465, 0.234522306,
                 0.165265082, 0.0317391446, 0.0179492938, 0.0343826043, 0.0665231996, 0.00692132793, 0.0570887785,
                 0.0203810913, 0.0342815584, 0.0414549606, 0.0516560632, 0.107190494, 0.201261998, 0.0624650735,
                 0.279949037, 0.0364014117, 0.100948205});
  // Default axis is 1 before opset 13.
  expect_tensor(run1("LogSoftmax", 7, {x()}), {2, 3, 4},
                {-2.62020453, -2.88020452, -2.11020454, -2.65020452, -3.29020455, -2.39020451, -1.45020457,
                 -1.80020454, -3.45020451, -4.02020451, -3.37020453, -2.71020453, -4.97314763, -2.86314771,
                 -3.89314771, -3.37314773, -3.18314773, -2.9631477, -2.23314771, -1.60314774, -2.7731477, -1.2731477,
                 -3.31314772, -2.29314771});
  // With axis = rank - 1 both forms agree.
  Tensor a = run1("Softmax", 11, {x()}, {{"axis", attr_i(2)}});
  Tensor b = run1("Softmax", 13, {x()}, {{"axis", attr_i(-1)}});
  for (int64_t i = 0; i < a.num_elements(); ++i) EXPECT_FLOAT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

TEST(SoftmaxTest, LargeInputsDoNotOverflowAndHalvesWork) {
  expect_tensor(run1("Softmax", 13, {make<double>({3}, {1000, 1000, 1000})}), {3}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-12,
                0);
  Tensor h = Tensor::make(DataType::kFloat16, {2});
  h.data<uint16_t>()[0] = float_to_fp16(0.0f);
  h.data<uint16_t>()[1] = float_to_fp16(0.0f);
  Tensor y = run1("Softmax", 13, {h});
  EXPECT_EQ(y.dtype(), DataType::kFloat16);
  expect_tensor(y, {2}, {0.5, 0.5}, 0, 0);
}

TEST(SoftmaxTest, AxisOutOfRangeIsAnError) {
  auto r = run_op("Softmax", 13, {x()}, {{"axis", attr_i(3)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("Softmax"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(run_op("Hardmax", 11, {x()}, {{"axis", attr_i(-4)}}).ok());
  EXPECT_FALSE(run_op("LogSoftmax", 13, {make<int32_t>({2}, {1, 2})}).ok());
  EXPECT_FALSE(infer_op("Softmax", 13, {{DataType::kFloat32, Shape{2, 3}}}, {{"axis", attr_i(2)}}).ok());
}

}  // namespace
}  // namespace kiln::ops
