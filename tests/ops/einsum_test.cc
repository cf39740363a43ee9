// Tests of Einsum: explicit and implicit equations, ellipsis broadcasting, diagonals, traces, several operands, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(EinsumTest, BatchMatmulEllipsis) {
  Tensor y = run1("Einsum", 12, {make<float>({2, 1, 2, 3}, {0.25, 0.790000021, 0.550000012, -0.550000012, -0.400000006, 0.75, -0.99000001, 0.639999986, 0.589999974, -0.0599999987, -0.389999986, -0.439999998}), make<float>({3, 3, 2}, {-0.49000001, -0.109999999, 0.00999999978, 0.109999999, 0.99000001, 0.589999974, 0.239999995, 0.980000019, -0.569999993, -0.680000007, 0.230000004, -0.910000026, -0.930000007, 0.0299999993, -0.0700000003, 0.829999983, 0.25999999, 0.0299999993})}, {{"equation", attr_s("...ij,...jk->...ik")}});
  expect_tensor(y, {2, 3, 2, 2}, {0.42990002, 0.383899987, 1.00800002, 0.458999991, -0.263799995, -0.792700052, 0.2685, -0.949500024, -0.144800007, 0.679700017, 0.734499991, -0.326000005, 1.07560003, 0.527399957, -0.410100013, -0.295899987, -0.466699988, -1.94229996, 0.106699988, 0.60680002, 1.02929997, 0.519199967, -0.0312999971, -0.338699967});
}

TEST(EinsumTest, Diagonal) {
  Tensor y = run1("Einsum", 12, {make<float>({3, 3}, {-0.00999999978, -0.5, -0.980000019, -0.620000005, 0.379999995, -0.600000024, -0.25999999, -0.99000001, 0.660000026})}, {{"equation", attr_s("ii->i")}});
  expect_tensor(y, {3}, {-0.00999999978, 0.379999995, 0.660000026});
}

TEST(EinsumTest, Trace) {
  Tensor y = run1("Einsum", 12, {make<float>({3, 3}, {-0.689999998, -0.460000008, 0.75999999, 0.0199999996, 0.689999998, 0.280000001, 0.479999989, -0.819999993, 0.0799999982})}, {{"equation", attr_s("ii")}});
  expect_tensor(y, {}, {0.0799999982});
}

TEST(EinsumTest, ImplicitOuterSorted) {
  Tensor y = run1("Einsum", 12, {make<float>({2, 3}, {0.0199999996, 0.74000001, -0.280000001, 0.200000003, -0.879999995, -0.219999999}), make<float>({2}, {-0.349999994, -0.699999988})}, {{"equation", attr_s("ba,c")}});
  expect_tensor(y, {3, 2, 2}, {-0.00699999975, -0.0139999995, -0.0700000003, -0.140000001, -0.259000003, -0.518000007, 0.307999998, 0.615999997, 0.0979999974, 0.195999995, 0.0769999996, 0.153999999});
}

TEST(EinsumTest, ThreeOperands) {
  Tensor y = run1("Einsum", 12, {make<float>({2, 3}, {0.629999995, -0.239999995, 0.959999979, 0.180000007, 0.209999993, 0.280000001}), make<float>({3, 2}, {0.349999994, -0.699999988, -0.119999997, -0.519999981, -0.200000003, -0.810000002}), make<float>({2, 2}, {0.939999998, -0.569999993, 0.340000004, -0.400000006})}, {{"equation", attr_s("ij,jk,kl->il")}});
  expect_tensor(y, {2, 2}, {-0.31803, 0.404859006, -0.174188003, 0.195173994});
}

TEST(EinsumTest, BatchDiagonalSum) {
  Tensor y = run1("Einsum", 12, {make<float>({2, 3, 3}, {0.75, 0.319999993, -0.74000001, 0.689999998, 0.889999986, 0.810000002, 0.140000001, -0.709999979, -0.620000005, 0.860000014, 0.100000001, -0.639999986, 0.769999981, 0.280000001, 0.140000001, -0.25, -0.180000007, -0.519999981})}, {{"equation", attr_s("...ii->...")}});
  expect_tensor(y, {2}, {1.01999998, 0.620000005});
}

TEST(EinsumTest, RepeatedAcrossAndWithin) {
  Tensor y = run1("Einsum", 12, {make<float>({2, 2, 3}, {-0.920000017, 0.75, -0.0599999987, 0.100000001, -0.360000014, 0.5, -0.949999988, -0.25999999, -0.939999998, -0.75, 0.930000007, 0.319999993}), make<float>({3, 2}, {-0.140000001, 0.0500000007, 0.75, -0.310000002, 0.180000007, 0.370000005})}, {{"equation", attr_s("iij,jk->ik")}});
  expect_tensor(y, {2, 2}, {0.680500031, -0.300700009, 0.860100031, -0.207400009});
}


TEST(EinsumTest, Int64MatMul) {
  Tensor y = run1("Einsum", 12, {make<int64_t>({2, 2}, {1, 2, 3, 4}), make<int64_t>({2, 2}, {5, 6, 7, 8})},
                  {{"equation", attr_s("ij,jk->ik")}});
  ASSERT_EQ(y.dtype(), DataType::kInt64);
  expect_tensor(y, {2, 2}, {19, 22, 43, 50}, 0, 0);
}

TEST(EinsumTest, Errors) {
  Tensor a = iota_f({2, 3});
  EXPECT_NE(run_error("Einsum", 12, {a, a}, {{"equation", attr_s("ij,jk->ik")}}), "");  // j: 3 vs 2
  EXPECT_NE(run_error("Einsum", 12, {a}, {{"equation", attr_s("ijk->i")}}), "");       // rank
  EXPECT_NE(run_error("Einsum", 12, {a}, {{"equation", attr_s("ij->iz")}}), "");       // unknown label
  EXPECT_NE(run_error("Einsum", 12, {a}, {{"equation", attr_s("ij,jk")}}), "");        // operand count
  EXPECT_NE(run_error("Einsum", 12, {a}, {{"equation", attr_s("i.j")}}), "");          // bad ellipsis
}

}  // namespace
}  // namespace kiln::ops::testing
