// Tests of QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
// ConvInteger, QLinearMatMul, QLinearConv and Cast to and from the low-precision types.
// Expected values are those of the ONNX 1.22 node tests (test_quantizelinear_*, ...),
// computed there by the ONNX reference implementation.
#include <cmath>
#include <string>
#include <vector>

#include "core/lowp.h"
#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

// Any tensor's elements as doubles (low-precision types decoded).
std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(lowp_to_double(t.dtype(), t.raw_data(), i));
  return v;
}

// A packed int4/uint4/int2/uint2 tensor.
Tensor packed(DataType t, std::vector<int64_t> dims, const std::vector<int>& v) {
  Tensor out = Tensor::make(t, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) packed_int_set(t, out.raw_data(), static_cast<int64_t>(i), v[i]);
  return out;
}

// A float8 tensor from its codes.
Tensor codes(DataType t, std::vector<int64_t> dims, const std::vector<uint8_t>& c) {
  Tensor out = Tensor::make(t, std::move(dims));
  for (size_t i = 0; i < c.size(); ++i) out.data<uint8_t>()[i] = c[i];
  return out;
}

void expect_values(const Tensor& t, DataType dtype, const std::vector<int64_t>& dims, const std::vector<double>& want) {
  ASSERT_EQ(t.dtype(), dtype);
  ASSERT_EQ(t.dims(), dims);
  const std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(QuantizeTest, PerTensorRoundsHalfToEvenAndSaturates) {
  // test_quantizelinear
  Tensor y = run1("QuantizeLinear", 25,
                  {make<float>({6}, {0, 2, 3, 1000, -254, -1000}), scalar<float>(2), scalar<uint8_t>(128)});
  expect_values(y, DataType::kUInt8, {6}, {128, 129, 130, 255, 1, 0});
  // test_quantizelinear_int16: 2.9/2 = 1.45 -> 1, 3.1/2 -> 2 (+256), clipped at both ends.
  Tensor x = make<float>({8}, {0, -514, 3, -3, 2.9f, -2.9f, 65022, -66046});
  expect_values(run1("QuantizeLinear", 25, {x, scalar<float>(2), scalar<int16_t>(256)}), DataType::kInt16, {8},
                {256, -1, 258, 254, 257, 255, 32767, -32767});
  // Opset 10, no zero point: uint8.
  expect_values(run1("QuantizeLinear", 10, {make<float>({3}, {-1, 5, 600}), scalar<float>(2)}), DataType::kUInt8, {3},
                {0, 2, 255});
}

TEST(QuantizeTest, PerAxisAndBlockedScales) {
  // test_quantizelinear_axis (first 6 elements of channel 0 and 1).
  Tensor x = make<float>({1, 3, 1, 2}, {-162, 10, -76, 0, 245, -485});
  Tensor y = run1("QuantizeLinear", 13,
                  {x, make<float>({3}, {2, 4, 5}), make<uint8_t>({3}, {84, 24, 196})});
  expect_values(y, DataType::kUInt8, {1, 3, 1, 2}, {3, 89, 5, 24, 245, 99});
  // test_quantizelinear_blocked_asymmetric
  Tensor xb = make<float>({3, 4}, {6, 12, 50, 5, 1, 8, 4, 5, 0, 20, 10, 4});
  Tensor sb = make<float>({3, 2}, {1.5f, 2.5f, 3, 4.9f, 5.1f, 6.9f});
  ir::AttributeMap blocked = {{"axis", attr_i(1)}, {"block_size", attr_i(2)}};
  expect_values(run1("QuantizeLinear", 21, {xb, sb, make<uint8_t>({3, 2}, {0, 1, 1, 0, 2, 3})}, blocked),
                DataType::kUInt8, {3, 4}, {4, 8, 21, 3, 1, 4, 1, 1, 2, 6, 4, 4});
  // test_quantizelinear_blocked_symmetric: no zero point, output_dtype int16.
  ir::AttributeMap sym = blocked;
  sym["output_dtype"] = attr_i(static_cast<int64_t>(DataType::kInt16));
  Tensor xs = make<float>({3, 4}, {6, -8, -10, 5, 1, 8, 4, 5, 0, 20, 10, 4});
  expect_values(run1("QuantizeLinear", 21, {xs, sb}, sym), DataType::kInt16, {3, 4},
                {4, -5, -4, 2, 0, 3, 1, 1, 0, 4, 1, 1});
  // test_dequantizelinear_blocked (the first two rows of blocks).
  Tensor q = make<uint8_t>({1, 4, 1, 2}, {3, 89, 5, 24, 5, 12, 245, 99});
  Tensor s = make<float>({1, 2, 1, 2}, {3, 2, 5, 2});
  Tensor z = make<uint8_t>({1, 2, 1, 2}, {1, 0, 3, 2});
  expect_values(run1("DequantizeLinear", 21, {q, s, z}, blocked), DataType::kFloat32, {1, 4, 1, 2},
                {6, 178, 12, 48, 10, 20, 1210, 194});
}

TEST(QuantizeTest, SubByteIntegerTargets) {
  // test_quantizelinear_int4 / uint4 / int2 / uint2 (axis 0).
  Tensor x = make<float>({3, 4}, {0, 2.5f, 4.8f, 8.6f, -30, -20, 6, 9, 12, 15, 16, 40});
  Tensor s = make<float>({3}, {2, 3, 4});
  ir::AttributeMap axis0 = {{"axis", attr_i(0)}};
  expect_values(run1("QuantizeLinear", 21, {x, s, packed(DataType::kInt4, {3}, {1, 1, 1})}, axis0), DataType::kInt4,
                {3, 4}, {1, 2, 3, 5, -8, -6, 3, 4, 4, 5, 5, 7});
  expect_values(run1("QuantizeLinear", 21, {x, s, packed(DataType::kUInt4, {3}, {1, 1, 1})}, axis0), DataType::kUInt4,
                {3, 4}, {1, 2, 3, 5, 0, 0, 3, 4, 4, 5, 5, 11});
  Tensor x2 = make<float>({3, 4}, {0, 2.5f, 4.8f, 8.6f, -4, -3, 1, 2, -0.0f, -2.5f, -4.8f, -8.6f});
  expect_values(run1("QuantizeLinear", 25, {x2, s, packed(DataType::kInt2, {3}, {0, 0, 0})}, axis0), DataType::kInt2,
                {3, 4}, {0, 1, 1, 1, -1, -1, 0, 1, 0, -1, -1, -2});
  // test_dequantizelinear_int4 / int2
  expect_values(run1("DequantizeLinear", 21,
                     {packed(DataType::kInt4, {5}, {0, 1, 7, -4, -8}), scalar<float>(2),
                      packed(DataType::kInt4, {1}, {1})}),
                DataType::kFloat32, {5}, {-2, 0, 12, -10, -18});
  expect_values(run1("DequantizeLinear", 25,
                     {packed(DataType::kUInt2, {4}, {0, 1, 2, 3}), scalar<float>(2),
                      packed(DataType::kUInt2, {1}, {1})}),
                DataType::kFloat32, {4}, {-2, 0, 2, 4});
}

TEST(QuantizeTest, FloatTargets) {
  // test_quantizelinear_e4m3fn / e5m2: 100000 / 2 saturates.
  Tensor x = make<float>({5}, {0, 1, 2, 100000, 200});
  expect_values(run1("QuantizeLinear", 19, {x, scalar<float>(2), codes(DataType::kFloat8E4M3FN, {1}, {0})}),
                DataType::kFloat8E4M3FN, {5}, {0, 0.5, 1, 448, 96});
  expect_values(run1("QuantizeLinear", 19, {x, scalar<float>(2), codes(DataType::kFloat8E5M2, {1}, {0})}),
                DataType::kFloat8E5M2, {5}, {0, 0.5, 1, 49152, 96});
  // saturate = 0: out of range becomes NaN for e4m3fn.
  Tensor ns = run1("QuantizeLinear", 19, {x, scalar<float>(2), codes(DataType::kFloat8E4M3FN, {1}, {0})},
                   {{"saturate", attr_i(0)}});
  EXPECT_TRUE(std::isnan(values(ns)[3]));
  // test_quantizelinear_float4e2m1
  Tensor xf = make<float>({3, 4}, {0, 2.5f, 4.8f, 8.6f, -30, -20, 6, 9, -0.0f, -2.5f, -4.8f, -8.6f});
  Tensor zf = Tensor::make(DataType::kFloat4E2M1, {3});
  expect_values(run1("QuantizeLinear", 23, {xf, make<float>({3}, {2, 3, 4}), zf}, {{"axis", attr_i(0)}}),
                DataType::kFloat4E2M1, {3, 4}, {0, 1, 2, 4, -6, -6, 2, 3, 0, -0.5, -1, -2});
  // test_dequantizelinear_e4m3fn_float16: output takes the scale's type.
  Tensor q = codes(DataType::kFloat8E4M3FN, {5}, {0x00, 0x30, 0x38, 0x7e, 0xed});
  Tensor s16 = Tensor::make(DataType::kFloat16, {});
  s16.data<uint16_t>()[0] = 0x4000;  // 2.0
  expect_values(run1("DequantizeLinear", 19, {q, s16}), DataType::kFloat16, {5}, {0, 1, 2, 896, -208});
  // output_dtype (opset 23) overrides the scale's type.
  expect_values(run1("DequantizeLinear", 23, {q, s16}, {{"output_dtype", attr_i(1)}}), DataType::kFloat32, {5},
                {0, 1, 2, 896, -208});
}

TEST(QuantizeTest, DynamicQuantizeLinear) {
  // test_dynamicquantizelinear
  auto r = run_op("DynamicQuantizeLinear", 11, {make<float>({6}, {0, 2, -3, -2.5f, 1.34f, 0.5f})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_values((*r)[0], DataType::kUInt8, {6}, {153, 255, 0, 26, 221, 179});
  EXPECT_FLOAT_EQ((*r)[1].data<float>()[0], 0.019607843831181526f);
  expect_values((*r)[2], DataType::kUInt8, {}, {153});
  // All zeros: scale 1, zero point 0.
  auto z = run_op("DynamicQuantizeLinear", 11, {make<float>({2}, {0, 0})}, {}, 3);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ((*z)[1].data<float>()[0], 1.0f);
  expect_values((*z)[0], DataType::kUInt8, {2}, {0, 0});
}

TEST(QuantizeTest, BadScalesAndZeroPointsAreErrors) {
  Tensor x = make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_NE(run_error("QuantizeLinear", 13, {x, make<float>({4}, {1, 1, 1, 1})}).find("per-axis"), std::string::npos);
  EXPECT_NE(run_error("QuantizeLinear", 21, {x, make<float>({2, 3}, {1, 1, 1, 1, 1, 1})},
                      {{"axis", attr_i(1)}, {"block_size", attr_i(2)}})
                .find("blocked"),
            std::string::npos);
  EXPECT_NE(run_error("QuantizeLinear", 13, {x, make<float>({3}, {1, 1, 1}), make<uint8_t>({2}, {0, 0})}),
            "");
  EXPECT_NE(run_error("QuantizeLinear", 13, {x, make<float>({3}, {1, 1, 1})}, {{"axis", attr_i(5)}}), "");
  EXPECT_NE(run_error("QuantizeLinear", 21, {x, scalar<float>(1), scalar<uint8_t>(0)},
                      {{"output_dtype", attr_i(static_cast<int64_t>(DataType::kInt8))}}),
            "");
  EXPECT_NE(run_error("DequantizeLinear", 13, {make<uint8_t>({2}, {1, 2}), scalar<float>(1), scalar<int8_t>(0)}),
            "");
}

TEST(QLinearTest, MatMulInteger) {
  // test_matmulinteger
  Tensor a = make<uint8_t>({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0});
  Tensor b = make<uint8_t>({3, 2}, {1, 4, 2, 5, 3, 6});
  Tensor y = run1("MatMulInteger", 10, {a, b, make<uint8_t>({1}, {12}), make<uint8_t>({1}, {0})});
  expect_values(y, DataType::kInt32, {4, 2}, {-38, -83, -44, -98, -50, -113, -56, -128});
  // Per-row a zero point: rows minus 11, 10, 9, 8 (NumPy: (a - zp[:, None]) @ b).
  Tensor yr = run1("MatMulInteger", 10, {a, b, make<uint8_t>({4}, {11, 10, 9, 8})});
  expect_values(yr, DataType::kInt32, {4, 2}, {-32, -68, -32, -68, -32, -68, -32, -68});
}

TEST(QLinearTest, QLinearMatMulBroadcastsBatches) {
  // test_qlinearmatmul_3D_int8_float32 (one batch of B, broadcast over two of A).
  Tensor a = make<int8_t>({2, 2, 4}, {81, 109, -127, 111, -124, 87, -128, -98, 81, 109, -127, 111, -124, 87, -128, -98});
  Tensor b = make<int8_t>({1, 4, 3}, {25, -76, 117, -67, -101, -128, -127, 0, 119, 0, 127, 120});
  Tensor y = run1("QLinearMatMul", 21,
                  {a, make<float>({1}, {0.0066f}), make<int8_t>({1}, {-14}), b, make<float>({1}, {0.00705f}),
                   make<int8_t>({1}, {114}), make<float>({1}, {0.0107f}), make<int8_t>({1}, {-9})});
  expect_values(y, DataType::kInt8, {2, 2, 3}, {-86, -128, -128, 115, 39, -121, -86, -128, -128, 115, 39, -121});
}

TEST(QLinearTest, ConvInteger) {
  // test_convinteger_with_padding
  Tensor x = make<uint8_t>({1, 1, 3, 3}, {2, 3, 4, 5, 6, 7, 8, 9, 10});
  Tensor w = make<uint8_t>({2, 1, 2, 2}, {1, 1, 1, 1, 1, 1, 1, 1});
  Tensor y = run1("ConvInteger", 10, {x, w, scalar<uint8_t>(1), make<uint8_t>({2}, {0, 1})},
                  {{"pads", attr_ints({1, 1, 1, 1})}});
  expect_values(y, DataType::kInt32, {1, 2, 4, 4},
                {1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_NE(run_error("ConvInteger", 10, {x, make<uint8_t>({1, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 1, 1})}), "");
}

TEST(QLinearTest, QLinearConv) {
  // test_qlinearconv, first row of the 7x7 input (1x1 kernel: element-wise rescale).
  Tensor x = make<uint8_t>({1, 1, 1, 7}, {255, 174, 162, 25, 203, 168, 58});
  Tensor y = run1("QLinearConv", 10,
                  {x, scalar<float>(0.003692046971991658f), scalar<uint8_t>(132), make<uint8_t>({1, 1, 1, 1}, {0}),
                   make<float>({1}, {0.0017279457533732057f}), make<uint8_t>({1}, {255}),
                   scalar<float>(0.001626812620088458f), scalar<uint8_t>(123)});
  expect_values(y, DataType::kUInt8, {1, 1, 1, 7}, {0, 81, 93, 230, 52, 87, 197});
}

TEST(CastLowpTest, CastToAndFromLowPrecisionTypes) {
  auto to = [](DataType t) { return ir::AttributeMap{{"to", attr_i(static_cast<int64_t>(t))}}; };
  // test_cast_FLOAT_to_INT4 (part): wraps.
  expect_values(run1("Cast", 21, {make<float>({4}, {-9, -8, 7, 8})}, to(DataType::kInt4)), DataType::kInt4, {4},
                {7, -8, 7, -8});
  expect_values(run1("Cast", 25, {make<float>({3}, {-1, 2, 3})}, to(DataType::kUInt2)), DataType::kUInt2, {3},
                {3, 2, 3});
  expect_values(run1("Cast", 21, {packed(DataType::kInt4, {3}, {-8, 0, 7})}, to(DataType::kInt8)), DataType::kInt8,
                {3}, {-8, 0, 7});
  // float8: saturating by default, NaN without saturation.
  Tensor f8 = run1("Cast", 19, {make<float>({3}, {0.4789254665374756f, 1e6f, -1e6f})}, to(DataType::kFloat8E4M3FN));
  expect_values(f8, DataType::kFloat8E4M3FN, {3}, {0.46875, 448, -448});
  ir::AttributeMap ns = to(DataType::kFloat8E5M2);
  ns["saturate"] = attr_i(0);
  expect_values(run1("Cast", 19, {make<float>({1}, {1e6f})}, ns), DataType::kFloat8E5M2, {1}, {INFINITY});
  // float8 -> float16 goes through an exact float32.
  Tensor h = run1("Cast", 19, {f8}, to(DataType::kFloat16));
  expect_values(h, DataType::kFloat16, {3}, {0.46875, 448, -448});
  // float8e8m0 with round_mode (opset 24).
  ir::AttributeMap e8 = to(DataType::kFloat8E8M0);
  expect_values(run1("Cast", 24, {make<float>({3}, {0.124f, 1.1f, 8})}, e8), DataType::kFloat8E8M0, {3},
                {0.125, 2, 8});
  e8["round_mode"] = attr_s("down");
  expect_values(run1("Cast", 24, {make<float>({2}, {0.124f, 1.1f})}, e8), DataType::kFloat8E8M0, {2}, {0.0625, 1});
  e8["round_mode"] = attr_s("sideways");
  EXPECT_NE(run_error("Cast", 24, {make<float>({1}, {1})}, e8).find("round_mode"), std::string::npos);
  // CastLike to float4 takes the target from input 1.
  Tensor like = Tensor::make(DataType::kFloat4E2M1, {1});
  expect_values(run1("CastLike", 21, {make<float>({3}, {0.25f, -3.5f, 9}), like}), DataType::kFloat4E2M1, {3},
                {0, -4, 6});
}

}  // namespace
}  // namespace kiln::ops
