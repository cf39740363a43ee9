// The oneDNN MatMulInteger kernel (src/kernels/cpu/matmul_integer.cc) against a plain integer
// reference written here (int64 sums of (a - a_zp) * (b - b_zp), as NumPy's integer matmul
// computes them) and against the reference kernel (src/ops/qlinear.cc): int32 outputs equal
// over shapes (batched A, K past float32's 2^24 integer range), uint8 / int8 A and B, zero
// points absent, scalar or per column; plus what the kernel refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace kiln::kernels {
namespace {

using namespace kiln::kernels::testing;

const KernelFactory* onednn_factory(const ir::Node& node) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), DeviceKind::kCpu))
    if (f->name == "onednn") return f;
  return nullptr;
}

int64_t at(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kUInt8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

// sum_k (a - a_zp) * (b - b_zp[n]) in int64 (no wrapping at these sizes), as int32.
std::vector<int32_t> integer_reference(const Tensor& a, const Tensor& b, const Tensor& a_zp, const Tensor& b_zp) {
  const int64_t k = b.dim(0), n = b.dim(1), m = a.num_elements() / k;
  const int64_t za = a_zp.defined() ? at(a_zp, 0) : 0;
  std::vector<int32_t> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t zb = b_zp.defined() ? at(b_zp, b_zp.num_elements() == 1 ? 0 : j) : 0;
      int64_t s = 0;
      for (int64_t p = 0; p < k; ++p) s += (at(a, i * k + p) - za) * (at(b, p * n + j) - zb);
      y[static_cast<size_t>(i * n + j)] = static_cast<int32_t>(s);
    }
  return y;
}

struct Case {
  Dims a_dims;
  int64_t n;
  DataType a_type, b_type;
  int a_zp;                // -1: absent
  int b_zp_kind;           // 0 absent, 1 scalar, 2 per column
};

std::string describe(const Case& c) {
  return "A " + dims_to_string(c.a_dims) + " " + dtype_name(c.a_type) + " B " + dtype_name(c.b_type) + " N " +
         std::to_string(c.n) + " a_zp " + std::to_string(c.a_zp) + " b_zp kind " + std::to_string(c.b_zp_kind);
}

void expect_exact(const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.a_dims.back() * 131 + c.n));
  const int64_t k = c.a_dims.back();
  Tensor a = random_bytes(c.a_type, c.a_dims, rng);
  Tensor b = random_bytes(c.b_type, {k, c.n}, rng);
  Tensor a_zp = c.a_zp >= 0 ? scalar_x8(c.a_type, c.a_zp) : Tensor();
  Tensor b_zp;
  if (c.b_zp_kind == 1) b_zp = scalar_x8(c.b_type, c.b_type == DataType::kUInt8 ? 131 : -3);
  if (c.b_zp_kind == 2) b_zp = random_bytes(c.b_type, {c.n}, rng);
  std::vector<Tensor> inputs = {a, b};
  if (a_zp.defined() || b_zp.defined()) inputs.push_back(a_zp);
  if (b_zp.defined()) inputs.push_back(b_zp);
  Built built = make_quant_graph("MatMulInteger", ops::kOnnxDomain, 10, inputs, {0, 2});
  const KernelFactory* f = onednn_factory(*built.node);
  ASSERT_NE(f, nullptr);
  Status applicable = f->applicable(*built.node);
  ASSERT_TRUE(applicable.ok()) << describe(c) << ": " << applicable.to_string();
  auto kernel = f->prepare(*built.node);
  ASSERT_TRUE(kernel.ok()) << describe(c) << ": " << kernel.status().to_string();
  EXPECT_EQ((*kernel)->implementation().rfind("onednn:", 0), 0u) << (*kernel)->implementation();
  auto got = run_kernel(**kernel, *built.node, built.inputs);
  ASSERT_TRUE(got.ok()) << describe(c) << ": " << got.status().to_string();
  Dims y_dims = c.a_dims;
  y_dims.back() = c.n;
  ASSERT_EQ(got->dtype(), DataType::kInt32);
  ASSERT_EQ(got->dims(), y_dims);
  const std::vector<int32_t> want = integer_reference(a, b, a_zp, b_zp);
  ASSERT_EQ(std::memcmp(got->data<int32_t>(), want.data(), want.size() * sizeof(int32_t)), 0) << describe(c);
  auto ref = run_reference(*built.node, built.inputs);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_EQ(std::memcmp(ref->data<int32_t>(), want.data(), want.size() * sizeof(int32_t)), 0) << describe(c);
}

TEST(MatMulIntegerKernelTest, EqualsTheIntegerReferenceOverTypesAndZeroPoints) {
  for (DataType at : {DataType::kUInt8, DataType::kInt8})
    for (DataType bt : {DataType::kUInt8, DataType::kInt8})
      for (int zk = 0; zk < 3; ++zk)
        for (int azp : {-1, 0, 1}) {
          const int a_zp = azp < 0 ? -1 : (azp == 0 ? 0 : (at == DataType::kUInt8 ? 129 : -7));
          expect_exact({{3, 5}, 7, at, bt, a_zp, zk});
          expect_exact({{2, 17, 65}, 33, at, bt, a_zp, zk});
        }
}

TEST(MatMulIntegerKernelTest, EqualsTheIntegerReferenceOnTransformerShapes) {
  // K = 3072: sums reach ~1e9, far past float32's exact integers (2^24).
  expect_exact({{1, 128, 768}, 64, DataType::kUInt8, DataType::kInt8, 130, 0});
  expect_exact({{2, 64, 3072}, 48, DataType::kUInt8, DataType::kInt8, 0, 2});
  expect_exact({{1, 1, 1}, 1, DataType::kUInt8, DataType::kUInt8, 255, 1});
  expect_exact({{2, 3, 128, 64}, 128, DataType::kUInt8, DataType::kUInt8, 3, 2});
}

TEST(MatMulIntegerKernelTest, RefusesWithAReason) {
  std::mt19937 rng(7);
  Tensor a = random_bytes(DataType::kUInt8, {4, 8}, rng);
  Tensor b = random_bytes(DataType::kInt8, {8, 3}, rng);
  // B given at run time.
  Built runtime_b = make_quant_graph("MatMulInteger", ops::kOnnxDomain, 10, {a, b}, {0, 1});
  Status s = onednn_factory(*runtime_b.node)->applicable(*runtime_b.node);
  EXPECT_NE(s.to_string().find("B is not constant"), std::string::npos) << s.to_string();
  // A per-row zero point.
  Built per_row = make_quant_graph("MatMulInteger", ops::kOnnxDomain, 10,
                                   {a, b, random_bytes(DataType::kUInt8, {4}, rng)}, {0, 2});
  s = onednn_factory(*per_row.node)->applicable(*per_row.node);
  EXPECT_NE(s.to_string().find("a scalar only"), std::string::npos) << s.to_string();
  // A batched B.
  Built batched = make_quant_graph("MatMulInteger", ops::kOnnxDomain, 10,
                                   {random_bytes(DataType::kUInt8, {2, 4, 8}, rng),
                                    random_bytes(DataType::kInt8, {2, 8, 3}, rng)},
                                   {0});
  s = onednn_factory(*batched.node)->applicable(*batched.node);
  EXPECT_NE(s.to_string().find("only 2-D B"), std::string::npos) << s.to_string();
}

// kiln FusedDynamicQuantMatMul: the oneDNN kernel (activation quantised by the SIMD
// DynamicQuantizeLinear passes, float32 epilogue) equals its reference kernel (the unfused
// graph's float32 operations; tests/quant/dynamic_quant_test.py holds both to NumPy) bit for bit.
void expect_fused_matches_reference(const Dims& x_dims, int64_t n, bool per_column, bool bias, float inf_at = 0) {
  std::mt19937 rng(static_cast<uint32_t>(x_dims.back() + n));
  const int64_t k = x_dims.back();
  Tensor x = random_tensor(x_dims, rng, -2.0f, 3.0f);
  if (inf_at != 0) x.data<float>()[1] = inf_at;
  Tensor w = random_bytes(DataType::kInt8, {k, n}, rng);
  Tensor ws = per_column ? random_tensor({n}, rng, 1e-3f, 2e-2f) : scalar_f32(7e-3f);
  std::vector<Tensor> inputs = {x, w, ws};
  if (bias) inputs.push_back(random_tensor({n}, rng, -1.0f, 1.0f));
  Built built = make_quant_graph("FusedDynamicQuantMatMul", ops::kKilnDomain, 1, inputs, {0});
  const KernelFactory* f = onednn_factory(*built.node);
  ASSERT_NE(f, nullptr);
  auto kernel = f->prepare(*built.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  auto got = run_kernel(**kernel, *built.node, built.inputs);
  auto want = run_reference(*built.node, built.inputs);
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ(got->dims(), want->dims());
  const std::string what = "x " + dims_to_string(x_dims) + " N " + std::to_string(n);
  for (int64_t i = 0; i < got->num_elements(); ++i) {
    const float g = got->data<float>()[i], r = want->data<float>()[i];
    ASSERT_TRUE(std::memcmp(&g, &r, sizeof(float)) == 0) << what << " element " << i << ": " << g << " vs " << r;
  }
}

TEST(FusedDynamicQuantMatMulKernelTest, EqualsTheReferenceBitForBit) {
  expect_fused_matches_reference({3, 5}, 7, false, false);
  expect_fused_matches_reference({2, 17, 65}, 33, true, true);
  expect_fused_matches_reference({1, 128, 768}, 64, true, true);
  expect_fused_matches_reference({1, 64, 3072}, 48, false, true);
  // An infinity in x: the reference's arithmetic (NaN scale), through the reference kernel.
  expect_fused_matches_reference({4, 16}, 8, false, true, INFINITY);
}

}  // namespace
}  // namespace kiln::kernels
