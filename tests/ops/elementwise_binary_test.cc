// Tests of the broadcasting arithmetic ops; expected values computed by NumPy.
#include <cmath>

#include "elementwise_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

// a (2,3,1), b (4,), c (3,1), as NumPy float32 arrays.
Tensor a() { return make<float>({2, 3, 1}, {0.90f, 0.09f, -0.74f, -0.92f, -0.46f, 0.22f}); }
Tensor b() { return make<float>({4}, {-1.01f, -0.21f, -0.16f, 0.54f}); }
Tensor c() { return make<float>({3, 1}, {0.21f, 0.36f, -0.65f}); }

TEST(ElementwiseBinaryTest, ArithmeticBroadcastsLikeNumPy) {
  expect_tensor(run1("Add", 14, {a(), b()}), {2, 3, 4},
                {-0.110000014, 0.689999983, 0.73999998, 1.44, -0.919999987, -0.11999999, -0.0699999928, 0.630000025,
                 -1.75, -0.950000003, -0.900000006, -0.199999988, -1.93000001, -1.13000001, -1.08000001, -0.379999995,
                 -1.47, -0.670000002, -0.620000005, 0.0800000131, -0.789999992, 0.0100000054, 0.0600000024,
                 0.76000002});
  expect_tensor(run1("Sub", 7, {a(), b()}), {2, 3, 4},
                {1.90999997, 1.10999997, 1.05999997, 0.359999955, 1.09999999, 0.299999997, 0.25, -0.450000018,
                 0.269999981, -0.530000016, -0.580000013, -1.28000003, 0.0899999738, -0.710000023, -0.76000002,
                 -1.46000004, 0.549999982, -0.250000015, -0.300000012, -1.00000003, 1.22999999, 0.429999992,
                 0.379999995, -0.320000023});
  expect_tensor(run1("Mul", 13, {a(), b()}), {2, 3, 4},
                {-0.908999967, -0.188999989, -0.143999993, 0.486000006, -0.0909000028, -0.0189000002, -0.0144000003,
                 0.0486000039, 0.747400003, 0.155399997, 0.118399999, -0.399600021, 0.929200008, 0.193199997,
                 0.147199999, -0.496800029, 0.464600004, 0.0965999987, 0.0735999997, -0.248400014, -0.222199997,
                 -0.0461999983, -0.035199999, 0.118800004});
  expect_tensor(run1("Div", 14, {a(), b()}), {2, 3, 4},
                {-0.891089094, -4.28571431, -5.62499998, 1.66666656, -0.0891089153, -0.428571459, -0.562500035,
                 0.166666667, 0.732673284, 3.52380968, 4.62500016, -1.37037033, 0.910891114, 4.3809526, 5.75000023,
                 -1.70370367, 0.455445557, 2.1904763, 2.87500012, -0.851851833, -0.217821783, -1.04761907,
                 -1.37500002, 0.407407389});
}

TEST(ElementwiseBinaryTest, BroadcastsAlongInnerAndMiddleAxes) {
  // a = np.arange(12).reshape(3, 1, 4); b = (np.arange(5) * 100).reshape(1, 5, 1); a - b
  std::vector<int32_t> av(12);
  for (int i = 0; i < 12; ++i) av[static_cast<size_t>(i)] = i;
  expect_tensor(run1("Sub", 14, {make<int32_t>({3, 1, 4}, av), make<int32_t>({1, 5, 1}, {0, 100, 200, 300, 400})}),
                {3, 5, 4},
                {0,    1,    2,    3,    -100, -99,  -98,  -97,  -200, -199, -198, -197, -300, -299, -298,
                 -297, -400, -399, -398, -397, 4,    5,    6,    7,    -96,  -95,  -94,  -93,  -196, -195,
                 -194, -193, -296, -295, -294, -293, -396, -395, -394, -393, 8,    9,    10,   11,   -92,
                 -91,  -90,  -89,  -192, -191, -190, -189, -292, -291, -290, -289, -392, -391, -390, -389},
                0, 0);
  // c = np.arange(6).reshape(2, 1, 3); d = np.arange(8).reshape(2, 4, 1); c * d
  expect_tensor(run1("Mul", 14, {make<int64_t>({2, 1, 3}, {0, 1, 2, 3, 4, 5}),
                                 make<int64_t>({2, 4, 1}, {0, 1, 2, 3, 4, 5, 6, 7})}),
                {2, 4, 3}, {0, 0, 0, 0, 1, 2, 0, 2, 4, 0, 3, 6, 12, 16, 20, 15, 20, 25, 18, 24, 30, 21, 28, 35}, 0, 0);
  // Zero-sized outputs and rank-0 operands.
  expect_tensor(run1("Add", 14, {Tensor::make(DataType::kFloat32, {0, 3}), scalar<float>(1.0f)}), {0, 3}, {}, 0, 0);
  expect_tensor(run1("Add", 14, {scalar<float>(1.5f), scalar<float>(2.0f)}), {}, {3.5}, 0, 0);
}

TEST(ElementwiseBinaryTest, VariadicOpsBroadcastAllInputs) {
  expect_tensor(run1("Max", 13, {a(), b(), c()}), {2, 3, 4},
                {0.899999976, 0.899999976, 0.899999976, 0.899999976, 0.360000014, 0.360000014, 0.360000014,
                 0.540000021, -0.649999976, -0.209999993, -0.159999996, 0.540000021, 0.209999993, 0.209999993,
                 0.209999993, 0.540000021, 0.360000014, 0.360000014, 0.360000014, 0.540000021, 0.219999999,
                 0.219999999, 0.219999999, 0.540000021});
  expect_tensor(run1("Mean", 13, {a(), b(), c()}), {2, 3, 4},
                {0.0333333264, 0.299999992, 0.316666658, 0.549999997, -0.186666658, 0.0800000081, 0.0966666738,
                 0.330000013, -0.799999992, -0.533333326, -0.516666661, -0.283333321, -0.573333338, -0.306666672,
                 -0.290000007, -0.0566666673, -0.369999995, -0.103333329, -0.0866666635, 0.146666676, -0.479999989,
                 -0.213333324, -0.196666658, 0.0366666814},
                1e-6, 1e-7);
  expect_tensor(run1("Sum", 8, {make<double>({2}, {1.5, 2.0})}), {2}, {1.5, 2.0}, 0, 0);
  expect_tensor(run1("Min", 12, {make<int32_t>({2, 1}, {3, -4}), make<int32_t>({3}, {0, 5, -9})}), {2, 3},
                {0, 3, -9, -4, -4, -9}, 0, 0);
  // NaN propagates as in np.maximum.
  expect_tensor(run1("Max", 13, {make<float>({2}, {NAN, 1.0f}), make<float>({2}, {0.0f, NAN})}), {2}, {NAN, NAN});
}

TEST(ElementwiseBinaryTest, IntegerDivAndModFollowOnnxRules) {
  Tensor x = make<int32_t>({4}, {7, -7, 7, -7});
  // Div truncates toward zero; Mod fmod=0 takes the divisor's sign (np.mod), fmod=1 the
  // dividend's (np.fmod).
  expect_tensor(run1("Div", 14, {x, make<int32_t>({4}, {2, 2, -2, -2})}), {4}, {3, -3, -3, 3}, 0, 0);
  Tensor d = make<int32_t>({4}, {3, 3, -3, -3});
  expect_tensor(run1("Mod", 13, {x, d}), {4}, {1, 2, -2, -1}, 0, 0);
  expect_tensor(run1("Mod", 13, {x, d}, {{"fmod", attr_i(1)}}), {4}, {1, -1, 1, -1}, 0, 0);
  // np.fmod([5.5, -5.5], 2) = [1.5, -1.5]
  expect_tensor(run1("Mod", 10, {make<float>({2}, {5.5f, -5.5f}), scalar<float>(2.0f)}, {{"fmod", attr_i(1)}}), {2},
                {1.5, -1.5}, 0, 0);
  expect_tensor(run1("Add", 14, {make<int64_t>({2}, {INT64_MAX, 1}), scalar<int64_t>(1)}), {2}, {double(INT64_MIN), 2},
                0, 0);
}

TEST(ElementwiseBinaryTest, PowTakesMixedBaseAndExponentTypes) {
  // np.array([1.5, 2, 0.5, 3], np.float32) ** np.array([2, 3, -1, 0]) = [2.25, 8, 2, 1]
  expect_tensor(run1("Pow", 15, {make<float>({4}, {1.5f, 2.0f, 0.5f, 3.0f}), make<int64_t>({4}, {2, 3, -1, 0})}), {4},
                {2.25, 8, 2, 1}, 0, 0);
  expect_tensor(run1("Pow", 15, {make<int64_t>({3}, {3, -2, 10}), scalar<int64_t>(3)}), {3}, {27, -8, 1000}, 0, 0);
  // Integer base, float exponent: computed in double, truncated (int(np.power(2, 0.5)) = 1).
  expect_tensor(run1("Pow", 15, {make<int32_t>({2}, {2, 9}), scalar<float>(0.5f)}), {2}, {1, 3}, 0, 0);
  expect_tensor(run1("Pow", 7, {make<float>({2, 1}, {4.0f, 9.0f}), make<float>({2}, {0.5f, 2.0f})}), {2, 2},
                {2, 16, 3, 81}, 1e-6, 0);
}

TEST(ElementwiseBinaryTest, BitShiftBothDirections) {
  Tensor x = make<uint8_t>({3}, {16, 4, 1});
  Tensor s = make<uint8_t>({3}, {1, 2, 9});
  expect_tensor(run1("BitShift", 11, {x, s}, {{"direction", attr_s("RIGHT")}}), {3}, {8, 1, 0}, 0, 0);
  expect_tensor(run1("BitShift", 11, {make<uint32_t>({3}, {16, 4, 1}), make<uint32_t>({3}, {1, 2, 9})},
                     {{"direction", attr_s("LEFT")}}),
                {3}, {32, 16, 512}, 0, 0);
  EXPECT_FALSE(run_op("BitShift", 11, {x, s}, {{"direction", attr_s("UP")}}).ok());
}

TEST(ElementwiseBinaryTest, HalfInputsComputeInFloat) {
  Tensor h = Tensor::make(DataType::kBFloat16, {2});
  h.data<uint16_t>()[0] = float_to_bf16(1.5f);
  h.data<uint16_t>()[1] = float_to_bf16(-2.0f);
  Tensor y = run1("Mul", 14, {h, h});
  EXPECT_EQ(y.dtype(), DataType::kBFloat16);
  expect_tensor(y, {2}, {2.25, 4.0}, 0, 0);
}

TEST(ElementwiseBinaryTest, InferenceBroadcastsSymbolicShapes) {
  Shape x{Dim::symbolic("batch"), Dim::symbolic("seq"), 768};
  auto out = infer_op("Add", 14, {{DataType::kFloat32, x}, {DataType::kFloat32, Shape{768}}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].shape, x);
  auto bad = infer_op("Add", 14, {{DataType::kFloat32, Shape{2, 3}}, {DataType::kFloat32, Shape{4}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("'n' (Add)"), std::string::npos) << bad.status().to_string();
  auto mixed = infer_op("Add", 14, {{DataType::kFloat32, Shape{2}}, {DataType::kInt32, Shape{2}}});
  EXPECT_FALSE(mixed.ok());
}

TEST(ElementwiseBinaryTest, BadInputsAreErrorsNotCrashes) {
  auto r = run_op("Mul", 14, {make<float>({2, 3}, {1, 2, 3, 4, 5, 6}), make<float>({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("do not broadcast"), std::string::npos) << r.status().to_string();
  auto z = run_op("Div", 14, {make<int32_t>({2}, {1, 2}), make<int32_t>({2}, {1, 0})});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().to_string().find("division by zero"), std::string::npos);
  EXPECT_FALSE(run_op("Mod", 13, {make<int64_t>({1}, {5}), make<int64_t>({1}, {0})}).ok());
  EXPECT_FALSE(run_op("Mod", 13, {make<float>({1}, {5}), make<float>({1}, {2})}).ok());  // floats need fmod=1
  EXPECT_FALSE(run_op("Sum", 13, {make<int32_t>({1}, {5})}).ok());
  // INT_MIN / -1 wraps instead of trapping.
  expect_tensor(run1("Div", 14, {make<int32_t>({1}, {INT32_MIN}), make<int32_t>({1}, {-1})}), {1}, {INT32_MIN}, 0, 0);
}

}  // namespace
}  // namespace kiln::ops
