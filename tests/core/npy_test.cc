// .npy reading and writing, checked against files NumPy wrote.
#include "core/npy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace kiln {
namespace {

std::string data_dir() {
  const char* src = std::getenv("KILN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/core/data";
}

TEST(NpyTest, ReadsFloat32WrittenByNumpy) {
  // np.save('f32_2x3.npy', np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
  auto t = read_npy(data_dir() + "/f32_2x3.npy");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->dtype(), DataType::kFloat32);
  EXPECT_EQ(t->dims(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t->data<float>()[i], i / 4.0f);
}

TEST(NpyTest, ReadsFortranOrderAndBigEndian) {
  // np.save('i32_fortran.npy', np.asfortranarray(np.arange(6, dtype='>i4').reshape(2, 3)))
  auto t = read_npy(data_dir() + "/i32_fortran_be.npy");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->dtype(), DataType::kInt32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t->data<int32_t>()[i], i);
}

TEST(NpyTest, RoundTripsEveryNumericDtype) {
  auto dir = std::filesystem::temp_directory_path() / "kiln_npy_test";
  std::filesystem::create_directories(dir);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                      DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64, DataType::kUInt8,
                      DataType::kUInt16, DataType::kUInt32, DataType::kUInt64, DataType::kBool}) {
    Tensor t = Tensor::make(dt, {3, 1, 2});
    auto* p = static_cast<unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.size_bytes(); ++i) p[i] = static_cast<unsigned char>(dt == DataType::kBool ? i % 2 : i * 7);
    std::string path = (dir / (std::string(dtype_name(dt)) + ".npy")).string();
    ASSERT_TRUE(write_npy(path, t).ok());
    auto back = read_npy(path);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->dtype(), dt);
    EXPECT_EQ(back->dims(), t.dims());
    EXPECT_EQ(std::memcmp(back->raw_data(), t.raw_data(), t.size_bytes()), 0) << dtype_name(dt);
  }
}

TEST(NpyTest, RejectsTruncatedAndGarbage) {
  EXPECT_FALSE(parse_npy("hello", 5, "x").ok());
  std::string bad = "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }";
  bad.resize(10 + 64, ' ');
  EXPECT_FALSE(parse_npy(bad.data(), bad.size(), "x").ok());
  EXPECT_FALSE(read_npy("/nonexistent/file.npy").ok());
}

}  // namespace
}  // namespace kiln
