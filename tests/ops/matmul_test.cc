// Tests of MatMul and Gemm: reference kernels, inference and error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values below were computed by PyTorch 1.13 / NumPy (generator kept outside
// the tree); Resize cases are the ONNX backend test data (test_resize_*, test_upsample_*).

TEST(MatMulTest, TwoD) {
  Tensor in0 = make<float>({2, 3}, {1.07000005, 1.33000004, -1.44000006, -1.34000003, -0.469999999, -0.150000006});
  Tensor in1 = make<float>({3, 4}, {1.83000004, 1.76999998, 1.87, 0.920000017, 0.709999979, -0.920000017, -0.50999999, -1.99000001, 1.33000004, -0.899999976, -1.67999995, -0.74000001});
  auto r = run_op("MatMul", 13, {in0, in1}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 4}, {0.987200141, 1.96630001, 3.74179983, -0.596700072, -2.9854002, -1.80439997, -2.01409984, -0.186500013}, 1e-05, 1e-05);
}

TEST(MatMulTest, BatchBroadcast) {
  Tensor in0 = make<float>({2, 1, 2, 3}, {-0.709999979, 0.899999976, -1.98000002, -1.08000004, 1.59000003, 1.41999996, 0.519999981, 0.239999995, -1.11000001, 1.5, 1.03999996, 0.0500000007});
  Tensor in1 = make<float>({3, 3, 2}, {-1.36000001, -1.13999999, -0.479999989, -0.680000007, -1.75999999, -0.370000005, -0.209999993, -0.850000024, -0.460000008, -0.670000017, -0.49000001, 0.479999989, -0.00999999978, -1.21000004, 1.17999995, 0.0500000007, -0.170000002, 0.850000024});
  auto r = run_op("MatMul", 13, {in0, in1}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 3, 2, 2}, {4.01840019, 0.930000007, -1.79359984, -0.375400007, 0.705299973, -0.949899971, -1.20040011, 0.53429991, 1.40569997, -0.778900087, 1.64559996, 2.5933001, 1.13120008, -0.3452999, -2.62719989, -2.43570018, 0.324300021, -1.13560009, -0.817900002, -1.94780004, 0.466700017, -1.56069994, 1.20369995, -1.72049999}, 1e-05, 1e-05);
}

TEST(MatMulTest, VectorMatrix) {
  Tensor in0 = make<float>({3}, {1.00999999, 1.39999998, 1.24000001});
  Tensor in1 = make<float>({3, 4}, {1.83000004, 1.76999998, 1.87, 0.920000017, 0.709999979, -0.920000017, -0.50999999, -1.99000001, 1.33000004, -0.899999976, -1.67999995, -0.74000001});
  auto r = run_op("MatMul", 9, {in0, in1}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {4}, {4.4914999, -0.616299987, -0.908499956, -2.77440023}, 1e-05, 1e-05);
}

TEST(MatMulTest, BatchedMatrixVector) {
  Tensor in0 = make<float>({3, 3, 2}, {-1.36000001, -1.13999999, -0.479999989, -0.680000007, -1.75999999, -0.370000005, -0.209999993, -0.850000024, -0.460000008, -0.670000017, -0.49000001, 0.479999989, -0.00999999978, -1.21000004, 1.17999995, 0.0500000007, -0.170000002, 0.850000024});
  Tensor in1 = make<float>({2}, {0.5, -1.5});
  auto r = run_op("MatMul", 13, {in0, in1}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {3, 3}, {1.02999997, 0.779999971, -0.324999988, 1.17000008, 0.774999976, -0.964999974, 1.81000006, 0.514999986, -1.36000013}, 1e-05, 1e-05);
}

TEST(MatMulTest, VectorVector) {
  Tensor in0 = make<float>({3}, {1.00999999, 1.39999998, 1.24000001});
  Tensor in1 = make<float>({3}, {1.00999999, 1.39999998, 1.24000001});
  auto r = run_op("MatMul", 13, {in0, in1}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {}, {4.5177002}, 1e-05, 1e-05);
}

TEST(MatMulTest, Int32) {
  Tensor in0 = make<int32_t>({2, 3}, {-3, 1, 2, 2, 3, -4});
  Tensor in1 = make<int32_t>({3, 2}, {1, 1, -2, -3, 0, -3});
  auto r = run_op("MatMul", 13, {in0, in1}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 2}, {-5, -12, -4, 5}, 1e-05, 1e-05);
}

TEST(GemmTest, TransAlphaBetaRowBias) {
  Tensor in0 = make<float>({3, 2}, {-1.51999998, -0.409999996, -1.91999996, 0.629999995, 0.99000001, 1.10000002});
  Tensor in1 = make<float>({4, 3}, {-1.48000002, 0.560000002, 1.35000002, -1.86000001, -1.23000002, -0.930000007, -0.150000006, -1.30999994, 0.159999996, -0.620000005, 0.620000005, 0.129999995});
  Tensor in2 = make<float>({1, 4}, {0.75, -1.00999999, 0.829999983, 0.939999998});
  auto r = run_op("Gemm", 13, {in0, in1, in2}, {{"transA", attr_i(1)}, {"transB", attr_i(1)}, {"alpha", attr_f(0.5f)}, {"beta", attr_f(2.0f)}}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 4}, {2.75545001, 0.114049911, 3.11079979, 1.82034993, 2.72230005, -2.53765011, 1.36609995, 2.27390003}, 1e-05, 1e-05);
}

TEST(GemmTest, ColumnBias) {
  Tensor in0 = make<float>({2, 3}, {0.889999986, -1.73000002, 1.77999997, 0.310000002, -0.910000026, -0.25999999});
  Tensor in1 = make<float>({3, 4}, {0.0700000003, 0.0700000003, -1.00999999, -0.939999998, -0.550000012, 1.12, -0.25, -1.85000002, -0.189999998, -1.19000006, -1.95000005, 1.90999997});
  Tensor in2 = make<float>({2, 1}, {-0.829999983, 0.150000006});
  auto r = run_op("Gemm", 11, {in0, in1, in2}, {}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 4}, {-0.154399931, -4.82350016, -4.76739979, 4.93369961, 0.721600056, -0.538100123, 0.571399927, 1.04550016}, 1e-05, 1e-05);
}

TEST(GemmTest, ScalarBias) {
  Tensor in0 = make<float>({2, 3}, {0.889999986, -1.73000002, 1.77999997, 0.310000002, -0.910000026, -0.25999999});
  Tensor in1 = make<float>({3, 4}, {0.0700000003, 0.0700000003, -1.00999999, -0.939999998, -0.550000012, 1.12, -0.25, -1.85000002, -0.189999998, -1.19000006, -1.95000005, 1.90999997});
  Tensor in2 = make<float>({1}, {1.5});
  auto r = run_op("Gemm", 9, {in0, in1, in2}, {{"beta", attr_f(0.5f)}}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 4}, {1.42560005, -3.24350023, -3.18739986, 6.51369953, 1.32159996, 0.0618999004, 1.17139995, 1.64550018}, 1e-05, 1e-05);
}

TEST(GemmTest, NoBias) {
  Tensor in0 = make<float>({2, 3}, {0.889999986, -1.73000002, 1.77999997, 0.310000002, -0.910000026, -0.25999999});
  Tensor in1 = make<float>({3, 4}, {0.0700000003, 0.0700000003, -1.00999999, -0.939999998, -0.550000012, 1.12, -0.25, -1.85000002, -0.189999998, -1.19000006, -1.95000005, 1.90999997});
  auto r = run_op("Gemm", 13, {in0, in1}, {{"alpha", attr_f(2.0f)}}, 1, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 4}, {1.3512001, -7.98700047, -7.87479973, 11.5273991, 1.14320004, -1.3762002, 0.842799902, 1.79100025}, 1e-05, 1e-05);
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(gen);
  return v;
}

// A plain triple loop in double: an independent check of the blocked GEMM on shapes that
// cross its 16-row, 512-column and 256-depth blocks, with and without transposes.
TEST(GemmTest, LargeAgainstTripleLoop) {
  const int64_t m = 37, k = 300, n = 600;
  std::vector<float> a = random_floats(static_cast<size_t>(m * k), 3), b = random_floats(static_cast<size_t>(k * n), 4);
  std::vector<float> c = random_floats(static_cast<size_t>(n), 5);
  for (int trans = 0; trans < 4; ++trans) {
    const bool ta = trans & 1, tb = trans & 2;
    // Stored operands: A is m x k (or k x m), B is k x n (or n x k), holding the same logical values.
    std::vector<float> as(a.size()), bs(b.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) as[static_cast<size_t>(ta ? p * m + i : i * k + p)] = a[static_cast<size_t>(i * k + p)];
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) bs[static_cast<size_t>(tb ? j * k + p : p * n + j)] = b[static_cast<size_t>(p * n + j)];
    std::vector<double> expected(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += double(a[static_cast<size_t>(i * k + p)]) * b[static_cast<size_t>(p * n + j)];
        expected[static_cast<size_t>(i * n + j)] = 0.25 * acc + 3.0 * c[static_cast<size_t>(j)];
      }
    Tensor y = run1("Gemm", 13,
                    {make<float>(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, as),
                     make<float>(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, bs), make<float>({n}, c)},
                    {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}, {"alpha", attr_f(0.25f)}, {"beta", attr_f(3.0f)}});
    expect_tensor(y, {m, n}, expected, 1e-4, 1e-4);
    if (!ta && !tb) {
      Tensor z = run1("MatMul", 13, {make<float>({m, k}, a), make<float>({k, n}, b)});
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = (expected[i] - 3.0 * c[i % n]) * 4.0;
      expect_tensor(z, {m, n}, expected, 1e-4, 1e-4);
    }
  }
}

TEST(MatMulTest, InferenceKeepsSymbolicDims) {
  auto r = infer_op("MatMul", 13,
                    {{DataType::kFloat32, Shape({Dim::symbolic("B"), Dim::symbolic("S"), Dim(768)})},
                     {DataType::kFloat32, Shape({Dim(768), Dim(3072)})}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].shape.to_string(), "[B,S,3072]");
  auto g = infer_op("Gemm", 13,
                    {{DataType::kFloat32, Shape({Dim::symbolic("N"), Dim(2048)})},
                     {DataType::kFloat32, Shape({Dim(1000), Dim(2048)})}},
                    {{"transB", attr_i(1)}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ((*g)[0].shape.to_string(), "[N,1000]");
}

TEST(MatMulTest, BadInputsAreErrors) {
  Tensor a = make<float>({2, 3}, std::vector<float>(6, 1.f));
  Tensor b = make<float>({2, 3}, std::vector<float>(6, 1.f));
  EXPECT_NE(run_error("MatMul", 13, {a, b}).find("inner dims"), std::string::npos);
  EXPECT_NE(run_error("MatMul", 13, {make<float>({2, 2, 3}, std::vector<float>(12, 1.f)),
                                     make<float>({3, 3, 2}, std::vector<float>(18, 1.f))})
                .find("broadcast"),
            std::string::npos);
  EXPECT_NE(run_error("MatMul", 13, {a, make<double>({3, 2}, std::vector<double>(6, 1.0))}).find("'n' (MatMul)"),
            std::string::npos);
  EXPECT_NE(run_error("Gemm", 13, {a, b}).find("inner dims"), std::string::npos);
  EXPECT_NE(run_error("Gemm", 13, {a, b, make<float>({3, 3}, std::vector<float>(9, 1.f))}, {{"transB", attr_i(1)}})
                .find("broadcast"),
            std::string::npos);
  EXPECT_NE(run_error("Gemm", 13, {make<float>({6}, std::vector<float>(6, 1.f)), b}).find("2-D"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ops::testing
