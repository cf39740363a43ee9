// Tests of the reductions and ArgMax/ArgMin; expected values computed by NumPy.
#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

// np.round(np.random.default_rng(0).standard_normal((2, 3, 4)), 2).astype(np.float32)
Tensor x() {
  return make<float>({2, 3, 4}, {0.13f, -0.13f, 0.64f, 0.10f, -0.54f, 0.36f, 1.30f, 0.95f, -0.70f, -1.27f, -0.62f, 0.04f,
                                 -2.33f, -0.22f, -1.25f, -0.73f, -0.54f, -0.32f, 0.41f, 1.04f, -0.13f, 1.37f, -0.67f,
                                 0.35f});
}

Tensor axes(std::vector<int64_t> v) { return make<int64_t>({static_cast<int64_t>(v.size())}, v); }

TEST(ReduceTest, AxesAttributeAndInputGiveTheSameResult) {
  const std::vector<double> sum1 = {-1.11000001, -1.03999996, 1.31999993, 1.08999999,
                                    -2.99999994, 0.830000013, -1.51000002, 0.659999937};
  expect_tensor(run1("ReduceSum", 11, {x()}, {{"axes", attr_ints({1})}}), {2, 1, 4}, sum1);
  expect_tensor(run1("ReduceSum", 13, {x(), axes({1})}, {}, {1}), {2, 1, 4}, sum1);
  expect_tensor(run1("ReduceSum", 13, {x(), axes({-2})}), {2, 1, 4}, sum1);  // axes not constant
  const std::vector<double> mean02 = {-0.473749994, 0.332499985, -0.203749998};
  expect_tensor(run1("ReduceMean", 13, {x()}, {{"axes", attr_ints({0, 2})}, {"keepdims", attr_i(0)}}), {3}, mean02);
  expect_tensor(run1("ReduceMean", 18, {x(), axes({2, 0})}, {{"keepdims", attr_i(0)}}, {1}), {3}, mean02);
}

TEST(ReduceTest, EveryReductionMatchesNumPy) {
  expect_tensor(run1("ReduceMax", 13, {x()}), {1, 1, 1}, {1.37});
  expect_tensor(run1("ReduceMin", 18, {x(), axes({-1})}, {{"keepdims", attr_i(0)}}), {2, 3},
                {-0.129999995, -0.540000021, -1.26999998, -2.32999992, -0.540000021, -0.670000017});
  expect_tensor(run1("ReduceProd", 13, {x()}, {{"axes", attr_ints({2})}, {"keepdims", attr_i(0)}}), {2, 3},
                {-0.00108159991, -0.240084007, -0.022047199, 0.467747494, 0.0736819179, 0.0417644489});
  expect_tensor(run1("ReduceL1", 13, {x()}, {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}}), {2, 4},
                {1.37, 1.75999999, 2.55999994, 1.08999999, 2.99999994, 1.91, 2.33000001, 2.11999997});
  expect_tensor(run1("ReduceL2", 18, {x(), axes({0, 1})}, {{"keepdims", attr_i(0)}}), {4},
                {2.55654057, 1.94604727, 2.15951381, 1.62821986});
  expect_tensor(run1("ReduceLogSumExp", 13, {x()}, {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}}), {2, 4},
                {0.796678892, 0.952528731, 1.80889871, 1.55428271, 0.443492436, 1.69818452, 0.835094189, 1.5539661});
  expect_tensor(run1("ReduceSumSquare", 13, {x()}, {{"axes", attr_ints({-1})}}), {2, 3, 1},
                {0.45339998, 3.01369989, 2.48889994, 7.57269967, 1.64369994, 2.46520003});
  Tensor ab = run1("Abs", 13, {x()});
  // np.log(np.abs(x).sum(axis=2))
  expect_tensor(run1("ReduceLogSum", 13, {ab}, {{"axes", attr_ints({2})}, {"keepdims", attr_i(0)}}), {2, 3},
                {-2.2351742e-08, 1.14740245, 0.966983836, 1.51072193, 0.837247513, 0.924258906}, 1e-5, 1e-6);
  // Integers accumulate exactly.
  expect_tensor(run1("ReduceSum", 13, {make<int64_t>({2, 2}, {1, 2, 3, 4}), axes({0})}, {{"keepdims", attr_i(0)}}),
                {2}, {4, 6}, 0, 0);
}

TEST(ReduceTest, EmptyAxesReduceAllOrNothing) {
  Tensor t = make<float>({2, 2}, {1, -2, 3, 4});
  expect_tensor(run1("ReduceSum", 13, {t}), {1, 1}, {6}, 0, 0);
  expect_tensor(run1("ReduceSum", 13, {t, axes({})}, {{"keepdims", attr_i(0)}}), {}, {6}, 0, 0);
  expect_tensor(run1("ReduceSum", 13, {t}, {{"noop_with_empty_axes", attr_i(1)}}), {2, 2}, {1, -2, 3, 4}, 0, 0);
  expect_tensor(run1("ReduceSumSquare", 18, {t}, {{"noop_with_empty_axes", attr_i(1)}}), {2, 2}, {1, 4, 9, 16}, 0, 0);
  // Reductions over an empty axis give the identity of the operation.
  Tensor e = Tensor::make(DataType::kFloat32, {2, 0});
  expect_tensor(run1("ReduceSum", 13, {e, axes({1})}), {2, 1}, {0, 0}, 0, 0);
  expect_tensor(run1("ReduceMax", 18, {e, axes({1})}), {2, 1}, {-INFINITY, -INFINITY}, 0, 0);
  expect_tensor(run1("ReduceProd", 13, {e}, {{"axes", attr_ints({1})}}), {2, 1}, {1, 1}, 0, 0);
}

TEST(ReduceTest, ArgMaxArgMinWithKeepdimsAndLastIndex) {
  expect_tensor(run1("ArgMax", 13, {x()}, {{"axis", attr_i(1)}, {"keepdims", attr_i(0)}}), {2, 4},
                {0, 1, 1, 1, 2, 2, 1, 1}, 0, 0);
  Tensor am = run1("ArgMin", 11, {x()}, {{"axis", attr_i(2)}});
  ASSERT_EQ(am.dtype(), DataType::kInt64);
  expect_tensor(am, {2, 3, 1}, {1, 0, 1, 0, 0, 2}, 0, 0);
  Tensor ties = make<int32_t>({2, 3}, {5, 1, 5, 2, 2, 0});
  expect_tensor(run1("ArgMax", 12, {ties}, {{"axis", attr_i(-1)}}), {2, 1}, {0, 0}, 0, 0);
  expect_tensor(run1("ArgMax", 12, {ties}, {{"axis", attr_i(-1)}, {"select_last_index", attr_i(1)}}), {2, 1}, {2, 1},
                0, 0);
  expect_tensor(run1("ArgMin", 13, {ties}, {{"axis", attr_i(0)}, {"select_last_index", attr_i(1)}}), {1, 3},
                {1, 0, 1}, 0, 0);
}

TEST(ReduceTest, InferenceKeepsSymbolicDims) {
  Shape s{Dim::symbolic("batch"), Dim::symbolic("seq"), 768};
  auto out = infer_op("ReduceMean", 13, {{DataType::kFloat32, s}}, {{"axes", attr_ints({-1})}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].shape, (Shape{Dim::symbolic("batch"), Dim::symbolic("seq"), 1}));
  Tensor ax = axes({1});
  auto in18 = infer_op("ReduceMax", 18, {{DataType::kFloat32, s}, {DataType::kInt64, Shape{1}}},
                       {{"keepdims", attr_i(0)}}, {nullptr, &ax});
  ASSERT_TRUE(in18.ok()) << in18.status().to_string();
  EXPECT_EQ((*in18)[0].shape, (Shape{Dim::symbolic("batch"), 768}));
  // Axes known only at run time: rank survives with keepdims.
  auto dyn = infer_op("ReduceMax", 18, {{DataType::kFloat32, s}, {DataType::kInt64, Shape{1}}});
  ASSERT_TRUE(dyn.ok());
  EXPECT_EQ((*dyn)[0].shape.rank(), 3);
  auto arg = infer_op("ArgMax", 13, {{DataType::kFloat32, s}}, {{"axis", attr_i(2)}, {"keepdims", attr_i(0)}});
  ASSERT_TRUE(arg.ok());
  EXPECT_EQ((*arg)[0].dtype, DataType::kInt64);
  EXPECT_EQ((*arg)[0].shape, (Shape{Dim::symbolic("batch"), Dim::symbolic("seq")}));
}

TEST(ReduceTest, BadAxesAreErrors) {
  auto r = run_op("ReduceSum", 11, {x()}, {{"axes", attr_ints({3})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("ReduceSum"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(run_op("ReduceMean", 18, {x(), axes({-4})}).ok());
  EXPECT_FALSE(run_op("ReduceMean", 18, {x(), axes({1, 1})}).ok());
  EXPECT_FALSE(run_op("ReduceMean", 18, {x(), make<float>({1}, {1})}).ok());
  EXPECT_FALSE(run_op("ArgMax", 13, {x()}, {{"axis", attr_i(3)}}).ok());
  EXPECT_FALSE(run_op("ArgMax", 13, {Tensor::make(DataType::kFloat32, {0, 2})}).ok());
  EXPECT_FALSE(infer_op("ReduceL2", 13, {{DataType::kFloat32, Shape{2, 3}}}, {{"axes", attr_ints({2})}}).ok());
}

}  // namespace
}  // namespace kiln::ops
