// Tests of NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: reductions, ignore_index, weights, log_prob, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(LossTest, NllMeanWeightIgnore) {
  auto r = run_op("NegativeLogLikelihoodLoss", 22, {make<float>({2, 3, 2}, {0.25, 0.790000021, 0.550000012, -0.550000012, -0.400000006, 0.75, -0.99000001, 0.639999986, 0.589999974, -0.0599999987, -0.389999986, -0.439999998}), make<int64_t>({2, 2}, {0, 2, 1, 1}), make<float>({3}, {0.590000033, 0.210000008, 0.109999999})}, {{"ignore_index", attr_i(2)}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {}, {-0.256237626});
}

TEST(LossTest, NllNone) {
  auto r = run_op("NegativeLogLikelihoodLoss", 13, {make<float>({2, 3, 2}, {0.25, 0.790000021, 0.550000012, -0.550000012, -0.400000006, 0.75, -0.99000001, 0.639999986, 0.589999974, -0.0599999987, -0.389999986, -0.439999998}), make<int64_t>({2, 2}, {0, 2, 1, 1})}, {{"reduction", attr_s("none")}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 2}, {-0.25, -0.75, -0.589999974, 0.0599999987});
}

TEST(LossTest, NllSum) {
  auto r = run_op("NegativeLogLikelihoodLoss", 13, {make<float>({2, 3, 2}, {0.25, 0.790000021, 0.550000012, -0.550000012, -0.400000006, 0.75, -0.99000001, 0.639999986, 0.589999974, -0.0599999987, -0.389999986, -0.439999998}), make<int64_t>({2, 2}, {0, 2, 1, 1}), make<float>({3}, {0.590000033, 0.210000008, 0.109999999})}, {{"reduction", attr_s("sum")}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {}, {-0.341300011});
}

TEST(LossTest, SceMeanNegativeIgnoreLogProb) {
  auto r = run_op("SoftmaxCrossEntropyLoss", 13, {make<float>({3, 4}, {0.109999999, 0.99000001, 0.589999974, 0.239999995, 0.980000019, -0.569999993, -0.680000007, 0.230000004, -0.910000026, -0.930000007, 0.0299999993, -0.0700000003}), make<int64_t>({3}, {3, -1, 0})}, {{"ignore_index", attr_i(-1)}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {}, {1.80711114});
  expect_tensor((*r)[1], {3, 4}, {-1.81901824, -0.939018309, -1.33901834, -1.68901825, -0.628477156, -2.17847729, -2.28847718, -1.37847722, -1.92520404, -1.94520402, -0.985203981, -1.08520401});
}

TEST(LossTest, SceNoneWeights3D) {
  auto r = run_op("SoftmaxCrossEntropyLoss", 13, {make<float>({2, 3, 2}, {0.829999983, 0.25999999, 0.0299999993, -0.00999999978, -0.5, -0.980000019, -0.620000005, 0.379999995, -0.600000024, -0.25999999, -0.99000001, 0.660000026}), make<int64_t>({2, 2}, {0, 2, 1, 1}), make<float>({3}, {0.790000021, 0.560000002, 0.860000014})}, {{"reduction", attr_s("none")}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 2}, {0.425586253, 1.68490088, 0.547284544, 0.944981575});
}


TEST(LossTest, TargetOutOfRange) {
  Tensor x = iota_f({2, 3});
  EXPECT_NE(run_error("NegativeLogLikelihoodLoss", 13, {x, make<int64_t>({2}, {0, 3})}), "");
  EXPECT_NE(run_error("SoftmaxCrossEntropyLoss", 13, {x, make<int64_t>({2}, {-1, 0})}), "");
  // Target shape must be the input shape without the class axis.
  EXPECT_NE(run_error("NegativeLogLikelihoodLoss", 13, {x, make<int64_t>({3}, {0, 0, 0})}), "");
}

}  // namespace
}  // namespace kiln::ops::testing
