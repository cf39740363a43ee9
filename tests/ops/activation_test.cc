// Tests of the activation ops: expected values from the ONNX formulas in closed form,
// PRelu's broadcast from NumPy.
#include <cfloat>
#include <cmath>
#include <functional>

#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

const std::vector<double> kX = {-3.0, -1.5, -0.5, 0.0, 0.4, 1.0, 2.5, 7.0};

void expect_activation(const char* op, int64_t opset, ir::AttributeMap attrs, const std::function<double(double)>& fn) {
  SCOPED_TRACE(op);
  std::vector<double> expected;
  std::vector<float> xf;
  for (double x : kX) {
    expected.push_back(fn(x));
    xf.push_back(static_cast<float>(x));
  }
  const int64_t n = static_cast<int64_t>(kX.size());
  expect_tensor(run1(op, opset, {make<double>({2, n / 2}, kX)}, attrs), {2, n / 2}, expected, 1e-12, 1e-12);
  expect_tensor(run1(op, opset, {make<float>({n}, xf)}, attrs), {n}, expected, 1e-6, 1e-6);
}

double softplus(double x) { return std::log(std::exp(x) + 1.0); }

TEST(ActivationTest, MatchesOnnxFormulas) {
  expect_activation("Relu", 14, {}, [](double x) { return std::max(x, 0.0); });
  expect_activation("LeakyRelu", 16, {}, [](double x) { return x >= 0 ? x : double(0.01f) * x; });
  expect_activation("LeakyRelu", 6, {{"alpha", attr_f(0.5f)}}, [](double x) { return x >= 0 ? x : 0.5 * x; });
  expect_activation("Elu", 6, {{"alpha", attr_f(2.0f)}}, [](double x) { return x >= 0 ? x : 2.0 * (std::exp(x) - 1); });
  const double sa = 1.67326319217681884765625, sg = 1.05070102214813232421875;
  expect_activation("Selu", 6, {}, [&](double x) { return x > 0 ? sg * x : sg * (sa * std::exp(x) - sa); });
  expect_activation("Celu", 12, {{"alpha", attr_f(2.0f)}},
                    [](double x) { return std::max(0.0, x) + std::min(0.0, 2.0 * (std::exp(x / 2.0) - 1)); });
  expect_activation("ThresholdedRelu", 10, {{"alpha", attr_f(0.5f)}}, [](double x) { return x > 0.5 ? x : 0.0; });
  expect_activation("HardSigmoid", 6, {},
                    [](double x) { return std::max(0.0, std::min(1.0, double(0.2f) * x + 0.5)); });
  expect_activation("HardSwish", 14, {}, [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); });
  expect_activation("Softplus", 1, {}, softplus);
  expect_activation("Softsign", 1, {}, [](double x) { return x / (1 + std::fabs(x)); });
  expect_activation("Mish", 18, {}, [](double x) { return x * std::tanh(softplus(x)); });
  expect_activation("Gelu", 20, {}, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  expect_activation("Gelu", 20, {{"approximate", attr_s("tanh")}}, [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  });
}

TEST(ActivationTest, ReluTakesIntegersAndHalves) {
  expect_tensor(run1("Relu", 14, {make<int32_t>({3}, {-5, 0, 7})}), {3}, {0, 0, 7}, 0, 0);
  Tensor h = Tensor::make(DataType::kFloat16, {2});
  h.data<uint16_t>()[0] = float_to_fp16(-1.0f);
  h.data<uint16_t>()[1] = float_to_fp16(2.5f);
  Tensor y = run1("Relu", 14, {h});
  EXPECT_EQ(y.dtype(), DataType::kFloat16);
  expect_tensor(y, {2}, {0.0, 2.5}, 0, 0);
}

TEST(ActivationTest, ClipUsesAttributesBeforeOpset11AndInputsAfter) {
  Tensor x = make<float>({5}, {-3.0f, -1.0f, 0.0f, 2.0f, 5.0f});
  expect_tensor(run1("Clip", 6, {x}, {{"min", attr_f(-1.5f)}, {"max", attr_f(2.5f)}}), {5},
                {-1.5, -1.0, 0.0, 2.0, 2.5}, 0, 0);
  expect_tensor(run1("Clip", 6, {x}), {5}, {-3, -1, 0, 2, 5}, 0, 0);
  expect_tensor(run1("Clip", 13, {x, scalar<float>(-1.5f), scalar<float>(2.5f)}), {5}, {-1.5, -1.0, 0.0, 2.0, 2.5},
                0, 0);
  expect_tensor(run1("Clip", 11, {x, Tensor(), scalar<float>(1.0f)}), {5}, {-3, -1, 0, 1, 1}, 0, 0);
  expect_tensor(run1("Clip", 11, {x, scalar<float>(0.0f)}), {5}, {0, 0, 0, 2, 5}, 0, 0);
  // min > max: everything becomes max.
  expect_tensor(run1("Clip", 13, {x, scalar<float>(3.0f), scalar<float>(1.0f)}), {5}, {1, 1, 1, 1, 1}, 0, 0);
  expect_tensor(run1("Clip", 12, {make<int64_t>({3}, {-9, 4, 9}), scalar<int64_t>(-2), scalar<int64_t>(5)}), {3},
                {-2, 4, 5}, 0, 0);
}

TEST(ActivationTest, PReluBroadcastsSlopeToX) {
  // x = np.array([[[-1, 2], [-3, 4], [5, -6]]]) (1, 3, 2), slope (3, 1) = [[0.1], [0.2], [0.3]]
  // np.where(x < 0, x * slope, x)
  Tensor x = make<float>({1, 3, 2}, {-1, 2, -3, 4, 5, -6});
  Tensor slope = make<float>({3, 1}, {0.1f, 0.2f, 0.3f});
  expect_tensor(run1("PRelu", 16, {x, slope}), {1, 3, 2}, {-0.1, 2, -0.6, 4, 5, -1.8}, 1e-6, 1e-7);
  // A per-channel slope of shape (2,) on the last axis.
  expect_tensor(run1("PRelu", 9, {x, make<float>({2}, {0.5f, 0.25f})}), {1, 3, 2}, {-0.5, 2, -1.5, 4, 5, -1.5},
                1e-6, 1e-7);
}

TEST(ActivationTest, BadInputsAreErrors) {
  // slope (4,) does not broadcast to (1, 3, 2).
  auto r = run_op("PRelu", 16, {make<float>({1, 3, 2}, {1, 2, 3, 4, 5, 6}), make<float>({4}, {1, 2, 3, 4})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("PRelu"), std::string::npos) << r.status().to_string();
  // slope (2, 3, 2) would make the output larger than X.
  auto big = run_op("PRelu", 16, {make<float>({3, 2}, {1, 2, 3, 4, 5, 6}), Tensor::make(DataType::kFloat32, {2, 3, 2})});
  EXPECT_FALSE(big.ok());
  auto g = run_op("Gelu", 20, {make<float>({1}, {1.0f})}, {{"approximate", attr_s("erf")}});
  EXPECT_FALSE(g.ok());
  auto c = run_op("Clip", 13, {make<float>({2}, {1, 2}), make<float>({2}, {0, 1})});
  EXPECT_FALSE(c.ok());
  auto e = run_op("Elu", 6, {make<int32_t>({1}, {1})});
  EXPECT_FALSE(e.ok());
}

}  // namespace
}  // namespace kiln::ops
