// Low-precision conversions against independent references: codes from the ONNX node-test
// data (test_cast_*), and nearest-value tables computed by brute force in Python.
#include "core/lowp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kiln {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Inputs of test_cast_FLOAT_to_FLOAT8* (ONNX 1.22 node tests).
const std::vector<float> kCastInputs = {0.4789254665374756f, 0.48033666610717773f, 0.4996848702430725f,
                                        0.8191054463386536f, 0.4703124761581421f,  0.7229037880897522f,
                                        1e6f,                1e-7f,                kNaN,
                                        kInf,                kInf,                 -kInf,
                                        -1e-7f,              1e-7f,                -1e6f};

struct CastCase {
  DataType type;
  bool saturate;
  std::vector<uint8_t> codes;  // output_0.pb raw bytes of the matching node test
};

TEST(LowpTest, Float8EncodingMatchesOnnxCastTests) {
  const std::vector<CastCase> cases = {
      {DataType::kFloat8E4M3FN, true, {0x2f, 0x2f, 0x30, 0x35, 0x2f, 0x34, 0x7e, 0x00, 0x7f, 0x7e, 0x7e, 0xfe, 0x80, 0x00, 0xfe}},
      {DataType::kFloat8E4M3FN, false, {0x2f, 0x2f, 0x30, 0x35, 0x2f, 0x34, 0x7f, 0x00, 0x7f, 0x7f, 0x7f, 0xff, 0x80, 0x00, 0xff}},
      {DataType::kFloat8E4M3FNUZ, true, {0x37, 0x37, 0x38, 0x3d, 0x37, 0x3c, 0x7f, 0x00, 0x80, 0x7f, 0x7f, 0xff, 0x00, 0x00, 0xff}},
      {DataType::kFloat8E4M3FNUZ, false, {0x37, 0x37, 0x38, 0x3d, 0x37, 0x3c, 0x80, 0x00, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00, 0x80}},
      {DataType::kFloat8E5M2, true, {0x38, 0x38, 0x38, 0x3b, 0x38, 0x3a, 0x7b, 0x00, 0x7e, 0x7b, 0x7b, 0xfb, 0x80, 0x00, 0xfb}},
      {DataType::kFloat8E5M2, false, {0x38, 0x38, 0x38, 0x3b, 0x38, 0x3a, 0x7c, 0x00, 0x7e, 0x7c, 0x7c, 0xfc, 0x80, 0x00, 0xfc}},
      {DataType::kFloat8E5M2FNUZ, true, {0x3c, 0x3c, 0x3c, 0x3f, 0x3c, 0x3e, 0x7f, 0x00, 0x80, 0x7f, 0x7f, 0xff, 0x00, 0x00, 0xff}},
      {DataType::kFloat8E5M2FNUZ, false, {0x3c, 0x3c, 0x3c, 0x3f, 0x3c, 0x3e, 0x80, 0x00, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00, 0x80}},
  };
  for (const CastCase& c : cases)
    for (size_t i = 0; i < kCastInputs.size(); ++i)
      EXPECT_EQ(lowp_float_encode(c.type, kCastInputs[i], c.saturate), c.codes[i])
          << dtype_name(c.type) << " saturate=" << c.saturate << " input " << kCastInputs[i];
}

struct NearestCase {
  DataType type;
  float value;
  uint8_t code;
};

// Saturating nearest-value codes from a brute-force search over every code (ties to the
// even mantissa), including exact midpoints between neighbours.
TEST(LowpTest, Float8EncodingRoundsToNearestEven) {
  const std::vector<NearestCase> cases = {
    {DataType::kFloat8E4M3FN, -0.026062211, 0x8d},
    {DataType::kFloat8E4M3FN, -0.072555691, 0x99},
    {DataType::kFloat8E4M3FN, -0.000693992421, 0x80},
    {DataType::kFloat8E4M3FN, -0.047663182, 0x94},
    {DataType::kFloat8E4M3FN, -121.813927, 0xef},
    {DataType::kFloat8E4M3FN, 0.000419275311, 0x00},
    {DataType::kFloat8E4M3FN, -0.101605922, 0x9d},
    {DataType::kFloat8E4M3FN, 0.000903303153, 0x00},
    {DataType::kFloat8E4M3FN, -0.000572646852, 0x80},
    {DataType::kFloat8E4M3FN, -209.952942, 0xf5},
    {DataType::kFloat8E4M3FN, 1.00555074, 0x38},
    {DataType::kFloat8E4M3FN, -0.000499171263, 0x80},
    {DataType::kFloat8E4M3FN, -0.000477988127, 0x80},
    {DataType::kFloat8E4M3FN, -0.01590918, 0x88},
    {DataType::kFloat8E4M3FN, 0.594703794, 0x32},
    {DataType::kFloat8E4M3FN, -0.788658142, 0xb5},
    {DataType::kFloat8E4M3FN, -0.00107930379, 0x81},
    {DataType::kFloat8E4M3FN, -0.0525053367, 0x95},
    {DataType::kFloat8E4M3FN, -0.836832821, 0xb5},
    {DataType::kFloat8E4M3FN, 0.31405139, 0x2a},
    {DataType::kFloat8E4M3FN, 18.026844, 0x59},
    {DataType::kFloat8E4M3FN, 1.13602412, 0x39},
    {DataType::kFloat8E4M3FN, -0.0449221991, 0x94},
    {DataType::kFloat8E4M3FN, -23.0858326, 0xdc},
    {DataType::kFloat8E4M3FN, 0.000794969033, 0x00},
    {DataType::kFloat8E4M3FN, 0.475642681, 0x2f},
    {DataType::kFloat8E4M3FN, 9.04943085, 0x51},
    {DataType::kFloat8E4M3FN, -1.59198463, 0xbd},
    {DataType::kFloat8E4M3FN, 0.00134017447, 0x01},
    {DataType::kFloat8E4M3FN, 0.0026357423, 0x01},
    {DataType::kFloat8E4M3FN, 0.00218582875, 0x01},
    {DataType::kFloat8E4M3FN, -0.106906936, 0x9e},
    {DataType::kFloat8E4M3FN, 15.0187969, 0x57},
    {DataType::kFloat8E4M3FN, 0.0329642631, 0x10},
    {DataType::kFloat8E4M3FN, 1.28990519, 0x3a},
    {DataType::kFloat8E4M3FN, -0.000658182427, 0x80},
    {DataType::kFloat8E4M3FN, 201.734619, 0x75},
    {DataType::kFloat8E4M3FN, -5.67099428, 0xcb},
    {DataType::kFloat8E4M3FN, 0.000585667847, 0x00},
    {DataType::kFloat8E4M3FN, 2.76071072, 0x43},
    {DataType::kFloat8E4M3FN, 0.0029296875, 0x02},
    {DataType::kFloat8E4M3FN, 1.6875, 0x3e},
    {DataType::kFloat8E4M3FN, 0.0048828125, 0x02},
    {DataType::kFloat8E4M3FN, 1.8125, 0x3e},
    {DataType::kFloat8E4M3FN, 0.0068359375, 0x04},
    {DataType::kFloat8E4M3FN, 1.9375, 0x40},
    {DataType::kFloat8E4M3FN, 0.0087890625, 0x04},
    {DataType::kFloat8E4M3FN, 2.125, 0x40},
    {DataType::kFloat8E4M3FN, 0.0107421875, 0x06},
    {DataType::kFloat8E4M3FN, 2.375, 0x42},
    {DataType::kFloat8E4M3FNUZ, 0.0123907914, 0x0d},
    {DataType::kFloat8E4M3FNUZ, 50.5000916, 0x6d},
    {DataType::kFloat8E4M3FNUZ, 0.000333311269, 0x00},
    {DataType::kFloat8E4M3FNUZ, -0.0329445861, 0x98},
    {DataType::kFloat8E4M3FNUZ, -0.221886292, 0xae},
    {DataType::kFloat8E4M3FNUZ, -9.80236626, 0xda},
    {DataType::kFloat8E4M3FNUZ, 6.49135208, 0x55},
    {DataType::kFloat8E4M3FNUZ, 0.0537568703, 0x1e},
    {DataType::kFloat8E4M3FNUZ, 0.00074221415, 0x01},
    {DataType::kFloat8E4M3FNUZ, 0.0623048507, 0x20},
    {DataType::kFloat8E4M3FNUZ, 48.0153961, 0x6c},
    {DataType::kFloat8E4M3FNUZ, 36.7390976, 0x69},
    {DataType::kFloat8E4M3FNUZ, 4.17611647, 0x50},
    {DataType::kFloat8E4M3FNUZ, 3.01235795, 0x4c},
    {DataType::kFloat8E4M3FNUZ, -133.940674, 0xf8},
    {DataType::kFloat8E4M3FNUZ, -0.000767240883, 0x81},
    {DataType::kFloat8E4M3FNUZ, -0.00599319069, 0x86},
    {DataType::kFloat8E4M3FNUZ, -0.000288355863, 0x00},
    {DataType::kFloat8E4M3FNUZ, -0.00916574709, 0x89},
    {DataType::kFloat8E4M3FNUZ, 0.00182228466, 0x02},
    {DataType::kFloat8E4M3FNUZ, 1.10149992, 0x41},
    {DataType::kFloat8E4M3FNUZ, -125.645584, 0xf8},
    {DataType::kFloat8E4M3FNUZ, 0.133079171, 0x29},
    {DataType::kFloat8E4M3FNUZ, 0.0593062751, 0x1f},
    {DataType::kFloat8E4M3FNUZ, 0.00101881055, 0x01},
    {DataType::kFloat8E4M3FNUZ, -0.000576321152, 0x81},
    {DataType::kFloat8E4M3FNUZ, 194.23645, 0x7c},
    {DataType::kFloat8E4M3FNUZ, 0.00229220511, 0x02},
    {DataType::kFloat8E4M3FNUZ, -0.971719503, 0xc0},
    {DataType::kFloat8E4M3FNUZ, -0.000244927767, 0x00},
    {DataType::kFloat8E4M3FNUZ, 0.401204437, 0x35},
    {DataType::kFloat8E4M3FNUZ, -1.16279805, 0xc1},
    {DataType::kFloat8E4M3FNUZ, 42.3778648, 0x6b},
    {DataType::kFloat8E4M3FNUZ, 0.00189600466, 0x02},
    {DataType::kFloat8E4M3FNUZ, 129.822571, 0x78},
    {DataType::kFloat8E4M3FNUZ, -0.169444099, 0xab},
    {DataType::kFloat8E4M3FNUZ, 29.8507347, 0x67},
    {DataType::kFloat8E4M3FNUZ, 0.184689373, 0x2c},
    {DataType::kFloat8E4M3FNUZ, -0.000798564521, 0x81},
    {DataType::kFloat8E4M3FNUZ, 7.58777428, 0x57},
    {DataType::kFloat8E4M3FNUZ, 0.00146484375, 0x02},
    {DataType::kFloat8E4M3FNUZ, 0.84375, 0x3e},
    {DataType::kFloat8E4M3FNUZ, 0.00244140625, 0x02},
    {DataType::kFloat8E4M3FNUZ, 0.90625, 0x3e},
    {DataType::kFloat8E4M3FNUZ, 0.00341796875, 0x04},
    {DataType::kFloat8E4M3FNUZ, 0.96875, 0x40},
    {DataType::kFloat8E4M3FNUZ, 0.00439453125, 0x04},
    {DataType::kFloat8E4M3FNUZ, 1.0625, 0x40},
    {DataType::kFloat8E4M3FNUZ, 0.00537109375, 0x06},
    {DataType::kFloat8E4M3FNUZ, 1.1875, 0x42},
    {DataType::kFloat8E5M2, -0.28340593, 0xb5},
    {DataType::kFloat8E5M2, -0.685821176, 0xb9},
    {DataType::kFloat8E5M2, 18183.0527, 0x74},
    {DataType::kFloat8E5M2, -0.000118423588, 0x88},
    {DataType::kFloat8E5M2, 198.19931, 0x5a},
    {DataType::kFloat8E5M2, -34649.3047, 0xf8},
    {DataType::kFloat8E5M2, 46.4166946, 0x52},
    {DataType::kFloat8E5M2, -0.719779313, 0xba},
    {DataType::kFloat8E5M2, -0.0158997364, 0xa4},
    {DataType::kFloat8E5M2, 1.0038476, 0x3c},
    {DataType::kFloat8E5M2, -11.4431953, 0xca},
    {DataType::kFloat8E5M2, 609.45874, 0x61},
    {DataType::kFloat8E5M2, -129.172028, 0xd8},
    {DataType::kFloat8E5M2, 0.000413076952, 0x0f},
    {DataType::kFloat8E5M2, -0.0158500262, 0xa4},
    {DataType::kFloat8E5M2, 44945.207, 0x79},
    {DataType::kFloat8E5M2, -0.24403964, 0xb4},
    {DataType::kFloat8E5M2, 42.5868187, 0x51},
    {DataType::kFloat8E5M2, 0.135802776, 0x30},
    {DataType::kFloat8E5M2, 19976.9023, 0x75},
    {DataType::kFloat8E5M2, -2.51824986e-05, 0x82},
    {DataType::kFloat8E5M2, -0.000776383677, 0x92},
    {DataType::kFloat8E5M2, 0.0104381572, 0x21},
    {DataType::kFloat8E5M2, -8.5625124, 0xc8},
    {DataType::kFloat8E5M2, 0.289117604, 0x35},
    {DataType::kFloat8E5M2, -524.151428, 0xe0},
    {DataType::kFloat8E5M2, -1190.43115, 0xe5},
    {DataType::kFloat8E5M2, -6922.88965, 0xef},
    {DataType::kFloat8E5M2, -0.279519856, 0xb4},
    {DataType::kFloat8E5M2, 0.0994323418, 0x2e},
    {DataType::kFloat8E5M2, 2.9128345e-05, 0x02},
    {DataType::kFloat8E5M2, -0.197268531, 0xb2},
    {DataType::kFloat8E5M2, -90.7311325, 0xd6},
    {DataType::kFloat8E5M2, -48796.9023, 0xfa},
    {DataType::kFloat8E5M2, 0.000131742214, 0x08},
    {DataType::kFloat8E5M2, -615.535706, 0xe1},
    {DataType::kFloat8E5M2, 6.38938427, 0x46},
    {DataType::kFloat8E5M2, 18.6422291, 0x4d},
    {DataType::kFloat8E5M2, -0.000147294049, 0x89},
    {DataType::kFloat8E5M2, -6.2981735e-06, 0x80},
    {DataType::kFloat8E5M2, 2.28881836e-05, 0x02},
    {DataType::kFloat8E5M2, 1.375, 0x3e},
    {DataType::kFloat8E5M2, 3.81469727e-05, 0x02},
    {DataType::kFloat8E5M2, 1.625, 0x3e},
    {DataType::kFloat8E5M2, 5.34057617e-05, 0x04},
    {DataType::kFloat8E5M2, 1.875, 0x40},
    {DataType::kFloat8E5M2, 6.86645508e-05, 0x04},
    {DataType::kFloat8E5M2, 2.25, 0x40},
    {DataType::kFloat8E5M2, 8.39233398e-05, 0x06},
    {DataType::kFloat8E5M2, 2.75, 0x42},
    {DataType::kFloat8E5M2FNUZ, -0.87194699, 0xbf},
    {DataType::kFloat8E5M2FNUZ, -0.099163264, 0xb2},
    {DataType::kFloat8E5M2FNUZ, -975.585022, 0xe8},
    {DataType::kFloat8E5M2FNUZ, -7.35111144e-06, 0x81},
    {DataType::kFloat8E5M2FNUZ, -0.00365586276, 0x9f},
    {DataType::kFloat8E5M2FNUZ, 225.657913, 0x5f},
    {DataType::kFloat8E5M2FNUZ, 0.00166350009, 0x1b},
    {DataType::kFloat8E5M2FNUZ, -1177.83875, 0xe9},
    {DataType::kFloat8E5M2FNUZ, 6961.92041, 0x73},
    {DataType::kFloat8E5M2FNUZ, 5216.9751, 0x71},
    {DataType::kFloat8E5M2FNUZ, -998.352051, 0xe8},
    {DataType::kFloat8E5M2FNUZ, -0.985956073, 0xc0},
    {DataType::kFloat8E5M2FNUZ, -2910.89819, 0xee},
    {DataType::kFloat8E5M2FNUZ, -5.95302391, 0xca},
    {DataType::kFloat8E5M2FNUZ, 0.000216489774, 0x0f},
    {DataType::kFloat8E5M2FNUZ, -7.62203026, 0xcc},
    {DataType::kFloat8E5M2FNUZ, 1.75682318, 0x43},
    {DataType::kFloat8E5M2FNUZ, 33.540184, 0x54},
    {DataType::kFloat8E5M2FNUZ, -365.614105, 0xe2},
    {DataType::kFloat8E5M2FNUZ, -3716.1582, 0xef},
    {DataType::kFloat8E5M2FNUZ, 0.00128941797, 0x19},
    {DataType::kFloat8E5M2FNUZ, -1.02546164e-05, 0x81},
    {DataType::kFloat8E5M2FNUZ, -0.560375988, 0xbc},
    {DataType::kFloat8E5M2FNUZ, -206.981491, 0xde},
    {DataType::kFloat8E5M2FNUZ, -0.123711862, 0xb4},
    {DataType::kFloat8E5M2FNUZ, 42.7959633, 0x55},
    {DataType::kFloat8E5M2FNUZ, 0.566212475, 0x3d},
    {DataType::kFloat8E5M2FNUZ, -0.560873508, 0xbc},
    {DataType::kFloat8E5M2FNUZ, 49.8218651, 0x56},
    {DataType::kFloat8E5M2FNUZ, -9389.89551, 0xf5},
    {DataType::kFloat8E5M2FNUZ, -1349.46399, 0xe9},
    {DataType::kFloat8E5M2FNUZ, 0.0663112178, 0x30},
    {DataType::kFloat8E5M2FNUZ, -0.120478123, 0xb4},
    {DataType::kFloat8E5M2FNUZ, 25.8123646, 0x52},
    {DataType::kFloat8E5M2FNUZ, 2.1164702e-05, 0x03},
    {DataType::kFloat8E5M2FNUZ, -362.742798, 0xe2},
    {DataType::kFloat8E5M2FNUZ, 13893.9336, 0x77},
    {DataType::kFloat8E5M2FNUZ, -0.000108783075, 0x8b},
    {DataType::kFloat8E5M2FNUZ, -26803.4277, 0xfb},
    {DataType::kFloat8E5M2FNUZ, -151.518112, 0xdd},
    {DataType::kFloat8E5M2FNUZ, 1.14440918e-05, 0x02},
    {DataType::kFloat8E5M2FNUZ, 0.6875, 0x3e},
    {DataType::kFloat8E5M2FNUZ, 1.90734863e-05, 0x02},
    {DataType::kFloat8E5M2FNUZ, 0.8125, 0x3e},
    {DataType::kFloat8E5M2FNUZ, 2.67028809e-05, 0x04},
    {DataType::kFloat8E5M2FNUZ, 0.9375, 0x40},
    {DataType::kFloat8E5M2FNUZ, 3.43322754e-05, 0x04},
    {DataType::kFloat8E5M2FNUZ, 1.125, 0x40},
    {DataType::kFloat8E5M2FNUZ, 4.19616699e-05, 0x06},
    {DataType::kFloat8E5M2FNUZ, 1.375, 0x42},
  };
  for (const NearestCase& c : cases)
    EXPECT_EQ(lowp_float_encode(c.type, c.value, true), c.code) << dtype_name(c.type) << " " << c.value;
}

TEST(LowpTest, Float8DecodingFollowsTheFormats) {
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E4M3FN, 0x7e), 448.0f);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E4M3FN, 0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E4M3FN, 0xed), -104.0f);
  EXPECT_TRUE(std::isnan(lowp_float_decode(DataType::kFloat8E4M3FN, 0x7f)));
  EXPECT_TRUE(std::isnan(lowp_float_decode(DataType::kFloat8E4M3FN, 0xff)));
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E4M3FNUZ, 0x7f), 240.0f);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E4M3FNUZ, 0x01), std::ldexp(1.0f, -10));
  EXPECT_TRUE(std::isnan(lowp_float_decode(DataType::kFloat8E4M3FNUZ, 0x80)));
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E5M2, 0x7b), 57344.0f);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E5M2, 0x7c), kInf);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E5M2, 0xfc), -kInf);
  EXPECT_TRUE(std::isnan(lowp_float_decode(DataType::kFloat8E5M2, 0x7e)));
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E5M2, 0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E5M2FNUZ, 0x7f), 57344.0f);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E5M2FNUZ, 0x01), std::ldexp(1.0f, -17));
  EXPECT_TRUE(std::isnan(lowp_float_decode(DataType::kFloat8E5M2FNUZ, 0x80)));
  // Every finite code round-trips through float.
  for (DataType t : {DataType::kFloat8E4M3FN, DataType::kFloat8E4M3FNUZ, DataType::kFloat8E5M2,
                     DataType::kFloat8E5M2FNUZ}) {
    for (int c = 0; c < 256; ++c) {
      const float v = lowp_float_decode(t, static_cast<uint8_t>(c));
      if (std::isfinite(v) && !(v == 0 && c != 0)) {
        EXPECT_EQ(lowp_float_encode(t, v, false), c) << dtype_name(t) << " code " << c;
      }
    }
  }
}

TEST(LowpTest, Float4RoundsToNearestEvenAndAlwaysSaturates) {
  const float values[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(lowp_float_decode(DataType::kFloat4E2M1, static_cast<uint8_t>(c)), values[c]);
    EXPECT_EQ(lowp_float_decode(DataType::kFloat4E2M1, static_cast<uint8_t>(c | 8)), -values[c]);
  }
  // test_cast_FLOAT_to_FLOAT4E2M1: inputs and the nibbles of 01e27f0778f70e08.
  const std::vector<float> in = {0.48f, 0.25f, 1.05f, -3.5f, -8.0f, 9.0f, 1e6f, 1e-7f,
                                 kNaN,  kInf,  kInf,  -kInf, -4.0f, 0.01f, -0.0f};
  const std::vector<uint8_t> want = {0x1, 0x0, 0x2, 0xe, 0xf, 0x7, 0x7, 0x0, 0x8, 0x7, 0x7, 0xf, 0xe, 0x0, 0x8};
  for (size_t i = 0; i < in.size(); ++i)
    for (bool saturate : {true, false})
      EXPECT_EQ(lowp_float_encode(DataType::kFloat4E2M1, in[i], saturate), want[i]) << in[i];
}

TEST(LowpTest, E8M0FollowsTheOnnxReference) {
  // test_cast_e8m0_FLOAT_to_FLOAT8E8M0 (round_mode "up", saturate).
  const std::vector<float> in = {0.0f, 0.124f, 0.25f, 0.5f, 1.1f, 2.0f, 4.0f, 8.0f};
  const std::vector<uint8_t> up = {0x00, 0x7c, 0x7d, 0x7e, 0x80, 0x80, 0x81, 0x82};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(float_to_e8m0(in[i], true, E8M0Rounding::kUp), up[i]);
  // Down drops the fraction; nearest rounds on the guard bit (1.5 -> 2, 1.25 -> 1, 3 -> 4).
  EXPECT_EQ(float_to_e8m0(1.1f, true, E8M0Rounding::kDown), 0x7f);
  EXPECT_EQ(float_to_e8m0(1.5f, true, E8M0Rounding::kNearest), 0x80);
  EXPECT_EQ(float_to_e8m0(1.25f, true, E8M0Rounding::kNearest), 0x7f);
  EXPECT_EQ(float_to_e8m0(3.0f, true, E8M0Rounding::kNearest), 0x81);
  EXPECT_EQ(float_to_e8m0(-4.0f, true, E8M0Rounding::kUp), 0x81);  // sign ignored
  EXPECT_EQ(float_to_e8m0(kNaN, true, E8M0Rounding::kUp), 0xff);
  EXPECT_EQ(float_to_e8m0(kInf, true, E8M0Rounding::kUp), 0xff);
  // Just below 2^128: saturate keeps 2^127, otherwise it overflows to NaN.
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(float_to_e8m0(big, true, E8M0Rounding::kUp), 0xfe);
  EXPECT_EQ(float_to_e8m0(big, false, E8M0Rounding::kUp), 0xff);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E8M0, 0x7f), 1.0f);
  EXPECT_EQ(lowp_float_decode(DataType::kFloat8E8M0, 0x00), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(lowp_float_decode(DataType::kFloat8E8M0, 0xff)));
  E8M0Rounding mode = E8M0Rounding::kUp;
  EXPECT_TRUE(e8m0_rounding_from_name("nearest", &mode));
  EXPECT_EQ(mode, E8M0Rounding::kNearest);
  EXPECT_FALSE(e8m0_rounding_from_name("sideways", &mode));
}

TEST(LowpTest, PackedIntegersWrapAndSignExtend) {
  // test_cast_FLOAT_to_INT4: -9..15 -> bytes 87a9cbed0f21436587a9cbed0f (low nibble first).
  std::vector<uint8_t> buf(13, 0xff);
  for (int i = 0; i < 25; ++i) packed_int_set(DataType::kInt4, buf.data(), i, i - 9);
  const std::vector<uint8_t> want = {0x87, 0xa9, 0xcb, 0xed, 0x0f, 0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(buf[i], want[i]) << i;
  EXPECT_EQ(buf[12] & 0x0f, 0x0f);
  EXPECT_EQ(packed_int_get(DataType::kInt4, buf.data(), 0), 7);    // -9 wraps
  EXPECT_EQ(packed_int_get(DataType::kInt4, buf.data(), 1), -8);
  EXPECT_EQ(packed_int_get(DataType::kUInt4, buf.data(), 1), 8);
  // test_cast_FLOAT_to_UINT2: -3..3 -> 0x39 0x39.
  std::vector<uint8_t> two(2, 0);
  for (int i = 0; i < 7; ++i) packed_int_set(DataType::kUInt2, two.data(), i, i - 3);
  EXPECT_EQ(two[0], 0x39);
  EXPECT_EQ(two[1] & 0x3f, 0x39);
  EXPECT_EQ(packed_int_get(DataType::kInt2, two.data(), 1), -2);
  EXPECT_EQ(packed_int_get(DataType::kUInt2, two.data(), 1), 2);
  EXPECT_EQ(packed_int_min(DataType::kInt2), -2);
  EXPECT_EQ(packed_int_max(DataType::kUInt4), 15);
}

TEST(LowpTest, LowpToDoubleReadsEveryType) {
  const uint16_t half[] = {0x3c00, 0xc000};  // 1.0, -2.0
  EXPECT_EQ(lowp_to_double(DataType::kFloat16, half, 1), -2.0);
  const uint16_t bf[] = {0x3f80, 0x4040};  // 1.0, 3.0
  EXPECT_EQ(lowp_to_double(DataType::kBFloat16, bf, 1), 3.0);
  const uint8_t fp4[] = {0x7f};
  EXPECT_EQ(lowp_to_double(DataType::kFloat4E2M1, fp4, 0), -6.0);
  EXPECT_EQ(lowp_to_double(DataType::kFloat4E2M1, fp4, 1), 6.0);
  const uint8_t e4[] = {0x30, 0xed};
  EXPECT_EQ(lowp_to_double(DataType::kFloat8E4M3FN, e4, 1), -104.0);
  const uint8_t i2[] = {0xb4};  // int2 0, 1, -1, -2 (test_dequantizelinear_int2)
  EXPECT_EQ(lowp_to_double(DataType::kInt2, i2, 0), 0.0);
  EXPECT_EQ(lowp_to_double(DataType::kInt2, i2, 1), 1.0);
  EXPECT_EQ(lowp_to_double(DataType::kInt2, i2, 2), -1.0);
  EXPECT_EQ(lowp_to_double(DataType::kInt2, i2, 3), -2.0);
  const int16_t s[] = {-300};
  EXPECT_EQ(lowp_to_double(DataType::kInt16, s, 0), -300.0);
  EXPECT_TRUE(std::isnan(lowp_to_double(DataType::kString, s, 0)));
}

}  // namespace
}  // namespace kiln
