// Element data types: every ONNX tensor type, with the ONNX TensorProto numbering so
// that conversion to and from ONNX and the .kiln file is a checked cast.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

enum class DataType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
};
inline constexpr int32_t kMaxDataTypeValue = 26;

// True for the values above (anything read from a file must pass this first).
bool dtype_is_valid(int32_t value);
// Storage bits of one element (4 and 2 for the packed 4-bit and 2-bit types). String: sizeof(std::string)*8.
int dtype_bits(DataType t);
// Bytes for `count` elements (rounds packed types up to whole bytes).
size_t dtype_bytes(DataType t, int64_t count);
// Lower-case name as NumPy and the CLI spell it: "float32", "int64", "bool", "bfloat16".
const char* dtype_name(DataType t);
std::optional<DataType> dtype_from_name(std::string_view name);
bool dtype_is_float(DataType t);    // float16/32/64, bfloat16, float8 kinds
bool dtype_is_integer(DataType t);  // signed and unsigned, not bool
bool dtype_is_signed(DataType t);

// Half-precision helpers (IEEE binary16 and bfloat16), round to nearest even.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
float fp16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);
inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Maps a C++ element type to its DataType.
template <typename T>
struct DataTypeOf;
#define KILN_DTYPE_OF(T, DT) \
  template <>                \
  struct DataTypeOf<T> {     \
    static constexpr DataType value = DataType::DT; \
  };
KILN_DTYPE_OF(float, kFloat32)
KILN_DTYPE_OF(double, kFloat64)
KILN_DTYPE_OF(int8_t, kInt8)
KILN_DTYPE_OF(int16_t, kInt16)
KILN_DTYPE_OF(int32_t, kInt32)
KILN_DTYPE_OF(int64_t, kInt64)
KILN_DTYPE_OF(uint8_t, kUInt8)
KILN_DTYPE_OF(uint16_t, kUInt16)
KILN_DTYPE_OF(uint32_t, kUInt32)
KILN_DTYPE_OF(uint64_t, kUInt64)
KILN_DTYPE_OF(bool, kBool)
KILN_DTYPE_OF(Float16, kFloat16)
KILN_DTYPE_OF(BFloat16, kBFloat16)
KILN_DTYPE_OF(std::string, kString)
#undef KILN_DTYPE_OF

// Calls fn.template operator()<T>() with the C++ type of `t` for the common numeric
// types (float32/64, int8..64, uint8..64, bool). Returns false if `t` is not one.
template <typename Fn>
bool dispatch_numeric(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: fn.template operator()<float>(); return true;
    case DataType::kFloat64: fn.template operator()<double>(); return true;
    case DataType::kInt8: fn.template operator()<int8_t>(); return true;
    case DataType::kInt16: fn.template operator()<int16_t>(); return true;
    case DataType::kInt32: fn.template operator()<int32_t>(); return true;
    case DataType::kInt64: fn.template operator()<int64_t>(); return true;
    case DataType::kUInt8: fn.template operator()<uint8_t>(); return true;
    case DataType::kUInt16: fn.template operator()<uint16_t>(); return true;
    case DataType::kUInt32: fn.template operator()<uint32_t>(); return true;
    case DataType::kUInt64: fn.template operator()<uint64_t>(); return true;
    case DataType::kBool: fn.template operator()<bool>(); return true;
    default: return false;
  }
}

}  // namespace kiln
