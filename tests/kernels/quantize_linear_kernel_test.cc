// The SIMD QuantizeLinear / DequantizeLinear kernels (src/kernels/cpu/quantize_linear.cc)
// against the reference kernels (src/ops/quantize.cc, validated on the ONNX node tests):
// bit for bit, uint8 and int8, with and without a zero point, sizes around the vector width,
// saturation at both ends, exact .5 ties, NaN and infinities; what the kernels refuse; fed
// constants; and (disabled, run by hand) the time per element at one thread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace kiln::kernels {
namespace {

using namespace kiln::kernels::testing;

constexpr int kOpset = 21;

// x / scale over about +-300 steps around the zero point (saturating both ends of 8 bits),
// with NaN, infinities, signed zeros and values k + 0.5 steps (exact ties when the scale is
// a power of two, near ties otherwise) at the front.
Tensor quantize_input(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor x = random_tensor({n}, rng, -300.0f * scale, 300.0f * scale);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""), inf, -inf, 0.0f, -0.0f, 1e30f, -1e30f, 1e-40f};
  float* p = x.data<float>();
  int64_t i = 0;
  for (float v : specials)
    if (i < n) p[i++] = v;
  for (int k = -140; k < 140 && i < n; k += 3) p[i++] = (static_cast<float>(k) + 0.5f) * scale;
  return x;
}

Built quantize_graph(const Tensor& x, float scale, DataType q_type, int zp, bool with_zp) {
  std::vector<Tensor> in = {x, scalar_f32(scale)};
  if (with_zp) in.push_back(scalar_x8(q_type, zp));
  return make_quant_graph("QuantizeLinear", ops::kOnnxDomain, kOpset, in, {0});
}

Built dequantize_graph(const Tensor& x, float scale, int zp, bool with_zp) {
  std::vector<Tensor> in = {x, scalar_f32(scale)};
  if (with_zp) in.push_back(scalar_x8(x.dtype(), zp));
  return make_quant_graph("DequantizeLinear", ops::kOnnxDomain, kOpset, in, {0});
}

const int64_t kSizes[] = {1, 7, 15, 16, 17, 31, 33, 64, 65, 1001, 70001};

TEST(QuantizeLinearKernelTest, MatchesTheReferenceBitForBit) {
  struct Case {
    DataType type;
    int zp;
    bool with_zp;
  };
  const Case cases[] = {{DataType::kUInt8, 128, true}, {DataType::kUInt8, 3, true}, {DataType::kUInt8, 0, false},
                        {DataType::kInt8, 0, true},    {DataType::kInt8, -7, true}, {DataType::kInt8, 100, true}};
  for (const Case& c : cases)
    for (float scale : {0.25f, 0.0173f, 3.7f, 1.0f / 255.0f})
      for (int64_t n : kSizes) {
        const std::string what = std::string(dtype_name(c.type)) + " zp " + std::to_string(c.zp) + " scale " +
                                 std::to_string(scale) + " n " + std::to_string(n);
        Built b = quantize_graph(quantize_input(n, scale, static_cast<uint32_t>(n)), scale, c.type, c.zp, c.with_zp);
        expect_bytes_match_reference(simd_factory(*b.node), b, what);
      }
}

TEST(QuantizeLinearKernelTest, RoundsTiesToEvenAndSaturatesNaNLow) {
  // Scale 0.25: x / scale is exactly 0.5, 1.5, 2.5, -0.5, -1.5, -2.5; then saturation and NaN.
  const std::vector<float> xs = {0.125f, 0.375f, 0.625f, -0.125f, -0.375f, -0.625f, 1000.0f, -1000.0f, std::nanf("")};
  Tensor x = Tensor::from_vector<float>(xs, {static_cast<int64_t>(xs.size())});
  Built s8 = quantize_graph(x, 0.25f, DataType::kInt8, 0, true);
  auto k = simd_factory(*s8.node)->prepare(*s8.node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  auto y = run_kernel(**k, *s8.node, s8.inputs);
  ASSERT_TRUE(y.ok());
  const std::vector<int> want_s8 = {0, 2, 2, 0, -2, -2, 127, -128, -128};
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(y->data<int8_t>()[i], want_s8[i]) << "x " << xs[i];
  Built u8 = quantize_graph(x, 0.25f, DataType::kUInt8, 10, true);
  k = simd_factory(*u8.node)->prepare(*u8.node);
  ASSERT_TRUE(k.ok());
  y = run_kernel(**k, *u8.node, u8.inputs);
  ASSERT_TRUE(y.ok());
  const std::vector<int> want_u8 = {10, 12, 12, 10, 8, 8, 255, 0, 0};
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(y->data<uint8_t>()[i], want_u8[i]) << "x " << xs[i];
  expect_bytes_match_reference(simd_factory(*u8.node), u8, "ties u8");
}

TEST(DequantizeLinearKernelTest, MatchesTheReferenceBitForBit) {
  for (DataType t : {DataType::kUInt8, DataType::kInt8})
    for (int zp : {0, 5, -128, 127, 255})
      for (float scale : {0.25f, 0.0173f, 3.7f, 1e-30f}) {
        if ((t == DataType::kUInt8 && zp < 0) || (t == DataType::kInt8 && zp > 127)) continue;
        for (int64_t n : kSizes) {
          std::mt19937 rng(static_cast<uint32_t>(n + zp));
          Tensor x = random_bytes(t, {n}, rng);
          uint8_t* bytes = static_cast<uint8_t*>(x.raw_data());
          for (int64_t i = 0; i < std::min<int64_t>(n, 256); ++i) bytes[i] = static_cast<uint8_t>(i);  // every value
          const std::string what = std::string(dtype_name(t)) + " zp " + std::to_string(zp) + " scale " +
                                   std::to_string(scale) + " n " + std::to_string(n);
          Built b = dequantize_graph(x, scale, zp, zp != 0);
          expect_bytes_match_reference(simd_factory(*b.node), b, what);
        }
      }
}

TEST(QuantizeLinearKernelTest, AnyShape) {
  std::mt19937 rng(5);
  Tensor x = random_tensor({2, 3, 5, 7}, rng, -4, 4);
  Built q = quantize_graph(x, 0.03f, DataType::kInt8, -3, true);
  expect_bytes_match_reference(simd_factory(*q.node), q, "quantize 4-D");
  Built d = dequantize_graph(random_bytes(DataType::kUInt8, {3, 1, 9, 11}, rng), 0.02f, 130, true);
  expect_bytes_match_reference(simd_factory(*d.node), d, "dequantize 4-D");
}

TEST(QuantizeLinearKernelTest, RefusesWhatTheReferenceRuns) {
  std::mt19937 rng(1);
  Tensor x = random_tensor({1, 3, 4}, rng, -1, 1);
  auto refused = [](const Built& b) { return !simd_factory(*b.node)->applicable(*b.node).ok(); };
  ir::AttributeMap axis1 = {{"axis", ir::Attribute::from_int(1)}};
  // Per-axis scale and zero point.
  Tensor s3 = Tensor::from_vector<float>({0.1f, 0.2f, 0.3f}, {3});
  Tensor z3 = Tensor::make(DataType::kUInt8, {3});
  EXPECT_TRUE(refused(make_quant_graph("QuantizeLinear", ops::kOnnxDomain, kOpset, {x, s3, z3}, {0}, axis1)));
  Tensor q = random_bytes(DataType::kUInt8, {1, 3, 4}, rng);
  EXPECT_TRUE(refused(make_quant_graph("DequantizeLinear", ops::kOnnxDomain, kOpset, {q, s3, z3}, {0}, axis1)));
  // A scale that is not a constant.
  EXPECT_TRUE(refused(make_quant_graph("QuantizeLinear", ops::kOnnxDomain, kOpset, {x, scalar_f32(0.1f)}, {0, 1})));
  // 16-bit output, int32 input, float16 scale.
  Tensor z16 = Tensor::make(DataType::kInt16, {});
  EXPECT_TRUE(refused(make_quant_graph("QuantizeLinear", ops::kOnnxDomain, kOpset, {x, scalar_f32(0.1f), z16}, {0})));
  Tensor i32 = Tensor::make(DataType::kInt32, {1, 3, 4});
  EXPECT_TRUE(refused(make_quant_graph("DequantizeLinear", ops::kOnnxDomain, kOpset, {i32, scalar_f32(0.1f)}, {0})));
  Tensor s16 = Tensor::make(DataType::kFloat16, {});
  EXPECT_TRUE(refused(make_quant_graph("DequantizeLinear", ops::kOnnxDomain, kOpset, {q, s16}, {0})));
  // And the plain case is taken, through selection too.
  Built ok = quantize_graph(x, 0.1f, DataType::kUInt8, 128, true);
  EXPECT_FALSE(refused(ok));
  auto k = select_kernel(*ok.node);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->implementation().rfind("simd:", 0), 0u) << k->implementation();
}

TEST(QuantizeLinearKernelTest, FedConstantsRunTheReference) {
  std::mt19937 rng(2);
  Built b = quantize_graph(random_tensor({100}, rng, -3, 3), 0.02f, DataType::kUInt8, 128, true);
  auto k = simd_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(k.ok());
  std::vector<Tensor> in = b.inputs;
  in[1] = scalar_f32(0.05f);  // not the prepared scale
  auto want = run_reference(*b.node, in);
  auto got = run_kernel(**k, *b.node, in);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(std::memcmp(got->raw_data(), want->raw_data(), want->size_bytes()), 0);
  // And the prepared scale gives another result (so the check above saw the fed one).
  auto prepared = run_kernel(**k, *b.node, b.inputs);
  ASSERT_TRUE(prepared.ok());
  EXPECT_NE(std::memcmp(prepared->raw_data(), want->raw_data(), want->size_bytes()), 0);
}

TEST(QuantizeLinearKernelTest, DISABLED_Timing) {
  const Dims dims = {1, 256, 56, 56};
  std::mt19937 rng(3);
  Built q = quantize_graph(random_tensor(dims, rng, -3, 3), 0.02f, DataType::kUInt8, 128, true);
  Built d = dequantize_graph(random_bytes(DataType::kUInt8, dims, rng), 0.02f, 128, true);
  for (const Built* b : {&q, &d}) {
    auto k = simd_factory(*b->node)->prepare(*b->node);
    ASSERT_TRUE(k.ok());
    print_timing(b->node->op_type() + " u8 [1,256,56,56]", **k, *b);
  }
}

}  // namespace
}  // namespace kiln::kernels
