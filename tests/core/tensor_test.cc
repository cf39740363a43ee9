// Tensors, dtypes and half-precision conversion.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/parallel.h"

namespace kiln {
namespace {

TEST(TensorTest, AllocateIsAlignedAndZeroed) {
  auto t = Tensor::allocate(DataType::kFloat32, {3, 5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % kTensorAlignment, 0u);
  EXPECT_EQ(t->num_elements(), 15);
  EXPECT_EQ(t->size_bytes(), 60u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t->data<float>()[i], 0.0f);
}

TEST(TensorTest, NegativeAndHugeDimsAreErrors) {
  EXPECT_FALSE(Tensor::allocate(DataType::kFloat32, {2, -1}).ok());
  int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_FALSE(Tensor::allocate(DataType::kFloat32, {big, big}).ok());
}

TEST(TensorTest, StringTensorsHoldStrings) {
  Tensor t = Tensor::make(DataType::kString, {2});
  t.data<std::string>()[0] = "kiln";
  Tensor c = t.clone();
  t.data<std::string>()[0] = "changed";
  EXPECT_EQ(c.data<std::string>()[0], "kiln");
  EXPECT_EQ(c.data<std::string>()[1], "");
}

TEST(TensorTest, ViewSharesAndKeepsOwnerAlive) {
  auto storage = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  Tensor v = Tensor::view(DataType::kFloat32, {2, 2}, storage->data(), storage);
  std::weak_ptr<std::vector<float>> weak = storage;
  storage.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(v.data<float>()[3], 4.0f);
  EXPECT_EQ(v.reshaped({4}).dims(), std::vector<int64_t>{4});
}

TEST(DataTypeTest, NamesSizesAndOnnxNumbering) {
  EXPECT_EQ(static_cast<int>(DataType::kFloat32), 1);   // TensorProto.FLOAT
  EXPECT_EQ(static_cast<int>(DataType::kBFloat16), 16); // TensorProto.BFLOAT16
  EXPECT_STREQ(dtype_name(DataType::kInt64), "int64");
  EXPECT_EQ(dtype_from_name("bfloat16"), DataType::kBFloat16);
  EXPECT_EQ(dtype_bytes(DataType::kInt4, 3), 2u);
  EXPECT_FALSE(dtype_is_valid(99));
}

TEST(DataTypeTest, HalfConversionsMatchIeee) {
  // Values checked against numpy: np.float16(x).view(np.uint16)
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.5f), 0xc100);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(1e6f), 0x7c00);          // overflow to inf
  EXPECT_EQ(float_to_fp16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
  // bfloat16 rounds to nearest even: 1 + 2^-8 ties to 1.0, 1 + 3*2^-8 to 1 + 2^-6
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

TEST(ParallelTest, ParallelForCoversRangeOnce) {
  std::vector<int> hits(1000, 0);
  parallel_for(0, 1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

}  // namespace
}  // namespace kiln
