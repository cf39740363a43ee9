// Element data types: names, sizes and half-precision conversion.
#include "core/dtype.h"

#include <cmath>

namespace kiln {
namespace {

struct DataTypeInfo {
  DataType type;
  const char* name;
  int bits;
};

constexpr DataTypeInfo kTypes[] = {
    {DataType::kUndefined, "undefined", 0},
    {DataType::kFloat32, "float32", 32},
    {DataType::kUInt8, "uint8", 8},
    {DataType::kInt8, "int8", 8},
    {DataType::kUInt16, "uint16", 16},
    {DataType::kInt16, "int16", 16},
    {DataType::kInt32, "int32", 32},
    {DataType::kInt64, "int64", 64},
    {DataType::kString, "string", static_cast<int>(sizeof(std::string) * 8)},
    {DataType::kBool, "bool", 8},
    {DataType::kFloat16, "float16", 16},
    {DataType::kFloat64, "float64", 64},
    {DataType::kUInt32, "uint32", 32},
    {DataType::kUInt64, "uint64", 64},
    {DataType::kComplex64, "complex64", 64},
    {DataType::kComplex128, "complex128", 128},
    {DataType::kBFloat16, "bfloat16", 16},
    {DataType::kFloat8E4M3FN, "float8e4m3fn", 8},
    {DataType::kFloat8E4M3FNUZ, "float8e4m3fnuz", 8},
    {DataType::kFloat8E5M2, "float8e5m2", 8},
    {DataType::kFloat8E5M2FNUZ, "float8e5m2fnuz", 8},
    {DataType::kUInt4, "uint4", 4},
    {DataType::kInt4, "int4", 4},
    {DataType::kFloat4E2M1, "float4e2m1", 4},
    {DataType::kFloat8E8M0, "float8e8m0", 8},
    {DataType::kUInt2, "uint2", 2},
    {DataType::kInt2, "int2", 2},
};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == kMaxDataTypeValue + 1,
              "one entry per DataType, in enum order");

const DataTypeInfo& info(DataType t) {
  int v = static_cast<int>(t);
  return kTypes[dtype_is_valid(v) ? v : 0];
}

}  // namespace

bool dtype_is_valid(int32_t value) { return value >= 0 && value <= kMaxDataTypeValue; }
int dtype_bits(DataType t) { return info(t).bits; }
size_t dtype_bytes(DataType t, int64_t count) {
  return (static_cast<size_t>(count) * static_cast<size_t>(dtype_bits(t)) + 7) / 8;
}
const char* dtype_name(DataType t) { return info(t).name; }

std::optional<DataType> dtype_from_name(std::string_view name) {
  for (const auto& e : kTypes)
    if (name == e.name && e.type != DataType::kUndefined) return e.type;
  if (name == "float") return DataType::kFloat32;
  if (name == "double") return DataType::kFloat64;
  return std::nullopt;
}

bool dtype_is_float(DataType t) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat8E4M3FN:
    case DataType::kFloat8E4M3FNUZ:
    case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ:
    case DataType::kFloat4E2M1:
    case DataType::kFloat8E8M0: return true;
    default: return false;
  }
}

bool dtype_is_signed(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
    case DataType::kInt4:
    case DataType::kInt2: return true;
    default: return false;
  }
}

bool dtype_is_integer(DataType t) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kUInt16:
    case DataType::kUInt32:
    case DataType::kUInt64:
    case DataType::kUInt4:
    case DataType::kUInt2: return true;
    default: return dtype_is_signed(t);
  }
}

float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16: round via float arithmetic
    float a;
    std::memcpy(&a, &abs, 4);
    // 2^-24 is the fp16 subnormal step; nearbyint rounds half to even.
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace kiln
