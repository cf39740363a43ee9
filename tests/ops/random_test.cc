// Tests of the random generators: values cannot be compared with another runtime's, so
// these check dtype, shape, range, repeatability under a seed and rough statistics
// (mean and spread of many draws against the distribution's, by wide margins).
#include <cmath>

#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

double mean(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) s += t.element_as_double(i);
  return s / static_cast<double>(t.num_elements());
}

TEST(RandomTest, UniformRangeShapeAndSeed) {
  ir::AttributeMap a = {{"shape", attr_ints({100, 50})},
                        {"low", attr_f(-2.0f)},
                        {"high", attr_f(3.0f)},
                        {"seed", attr_f(7.0f)}};
  Tensor x = run1("RandomUniform", 1, {}, a);
  ASSERT_EQ(x.dims(), (std::vector<int64_t>{100, 50}));
  EXPECT_EQ(x.dtype(), DataType::kFloat32);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    ASSERT_GE(x.data<float>()[i], -2.0f);
    ASSERT_LT(x.data<float>()[i], 3.0f);
  }
  EXPECT_NEAR(mean(x), 0.5, 0.1);  // 5000 draws: standard error 0.02
  Tensor y = run1("RandomUniform", 1, {}, a);
  for (int64_t i = 0; i < x.num_elements(); ++i) ASSERT_EQ(x.data<float>()[i], y.data<float>()[i]);
}

TEST(RandomTest, NormalAndLikeForms) {
  Tensor like = make<double>({40, 50}, std::vector<double>(2000, 0.0));
  Tensor x = run1("RandomNormalLike", 1, {like}, {{"mean", attr_f(1.5f)}, {"scale", attr_f(2.0f)}});
  EXPECT_EQ(x.dtype(), DataType::kFloat64);
  EXPECT_EQ(x.dims(), like.dims());
  EXPECT_NEAR(mean(x), 1.5, 0.25);  // standard error 0.045
  Tensor u = run1("RandomUniformLike", 1, {like}, {{"dtype", attr_i(1)}});
  EXPECT_EQ(u.dtype(), DataType::kFloat32);
  Tensor n = run1("RandomNormal", 1, {}, {{"shape", attr_ints({3, 0})}, {"dtype", attr_i(11)}});
  EXPECT_EQ(n.dims(), (std::vector<int64_t>{3, 0}));
  EXPECT_NE(run_error("RandomUniform", 1, {}, {{"shape", attr_ints({2})}, {"dtype", attr_i(8)}})
                .find("string"),
            std::string::npos);
}

TEST(RandomTest, BernoulliGivesZerosAndOnes) {
  std::vector<double> p(1000);
  for (size_t i = 0; i < p.size(); ++i) p[i] = i < 500 ? 0.0 : 1.0;
  Tensor y = run1("Bernoulli", 15, {make<double>({1000}, p)});
  EXPECT_EQ(y.dtype(), DataType::kFloat64);
  for (size_t i = 0; i < p.size(); ++i)
    ASSERT_EQ(y.data<double>()[i], p[i]);  // p = 0 or 1 is certain
  Tensor half = run1("Bernoulli", 22, {make<float>({2000}, std::vector<float>(2000, 0.5f))},
                     {{"dtype", attr_i(9)}, {"seed", attr_f(0.0f)}});
  EXPECT_EQ(half.dtype(), DataType::kBool);
  EXPECT_NEAR(mean(half), 0.5, 0.06);
  EXPECT_NE(run_error("Bernoulli", 15, {make<float>({1}, {1.5f})}).find("[0, 1]"),
            std::string::npos);
}

TEST(RandomTest, MultinomialSamplesClassesByLogProbability) {
  // log-probabilities of [0, 0.25, 0.75] (the first class is impossible).
  Tensor x = make<float>({1, 3}, {-INFINITY, std::log(0.25f), std::log(0.75f)});
  Tensor y = run1("Multinomial", 7, {x}, {{"sample_size", attr_i(4000)}, {"dtype", attr_i(7)}});
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{1, 4000}));
  int64_t twos = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    ASSERT_GE(y.data<int64_t>()[i], 1);
    ASSERT_LE(y.data<int64_t>()[i], 2);
    twos += y.data<int64_t>()[i] == 2;
  }
  EXPECT_NEAR(static_cast<double>(twos) / 4000, 0.75, 0.05);
  EXPECT_NE(run_error("Multinomial", 7, {x}, {{"dtype", attr_i(1)}}).find("int32"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::ops
