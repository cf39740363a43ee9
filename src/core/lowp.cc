// Low-precision element types: float8/float4/float8e8m0 conversion and packed int access.
#include "core/lowp.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace kiln {
namespace {

// One small float format: `mbits` mantissa bits, exponent bias, sign bit position, the
// largest finite value, and how it spells the specials.
struct FloatFormat {
  int mbits;
  int bias;
  int sign_shift;      // 7 for the bytes, 3 for float4e2m1
  double max;          // largest finite value
  bool has_inf;        // float8e5m2 only
  bool uz;             // *fnuz: no negative zero, NaN is the lone sign bit (0x80)
  uint8_t nan_code;    // positive NaN (sign added for the non-uz kinds that keep it)
  bool nan_keeps_sign;
  bool always_saturates;  // float4e2m1: no inf and no NaN to overflow to
};

constexpr FloatFormat kE4M3FN{3, 7, 7, 448.0, false, false, 0x7f, true, false};
constexpr FloatFormat kE4M3FNUZ{3, 8, 7, 240.0, false, true, 0x80, false, false};
constexpr FloatFormat kE5M2{2, 15, 7, 57344.0, true, false, 0x7e, true, false};
constexpr FloatFormat kE5M2FNUZ{2, 16, 7, 57344.0, false, true, 0x80, false, false};
// float4e2m1 has no NaN; ml_dtypes (the ONNX reference) turns NaN into 0x8.
constexpr FloatFormat kE2M1{1, 1, 3, 6.0, false, false, 0x8, false, true};

const FloatFormat* format_of(DataType t) {
  switch (t) {
    case DataType::kFloat8E4M3FN: return &kE4M3FN;
    case DataType::kFloat8E4M3FNUZ: return &kE4M3FNUZ;
    case DataType::kFloat8E5M2: return &kE5M2;
    case DataType::kFloat8E5M2FNUZ: return &kE5M2FNUZ;
    case DataType::kFloat4E2M1: return &kE2M1;
    default: return nullptr;
  }
}

// Value of a code from its fields (no table; the tables below are built with it).
float decode_fields(const FloatFormat& f, uint8_t code) {
  const uint8_t sign_bit = static_cast<uint8_t>(1u << f.sign_shift);
  const uint8_t body = code & static_cast<uint8_t>(sign_bit - 1);
  const bool neg = (code & sign_bit) != 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (f.uz && code == 0x80) return nan;
  if (!f.uz && !f.has_inf && !f.always_saturates && body == f.nan_code) return nan;  // e4m3fn
  const int exp_field = body >> f.mbits;
  const int mant = body & ((1 << f.mbits) - 1);
  if (f.has_inf && exp_field == (0x7f >> f.mbits)) {
    if (mant != 0) return nan;
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  double v = exp_field == 0 ? std::ldexp(static_cast<double>(mant), 1 - f.bias - f.mbits)
                            : std::ldexp(static_cast<double>(mant + (1 << f.mbits)), exp_field - f.bias - f.mbits);
  return static_cast<float>(neg ? -v : v);
}

using Table = std::array<float, 256>;
Table make_table(const FloatFormat& f) {
  Table t{};
  const int count = 1 << (f.sign_shift + 1);
  for (int c = 0; c < count; ++c) t[static_cast<size_t>(c)] = decode_fields(f, static_cast<uint8_t>(c));
  return t;
}

const Table& table_of(DataType t) {
  static const Table e4m3fn = make_table(kE4M3FN);
  static const Table e4m3fnuz = make_table(kE4M3FNUZ);
  static const Table e5m2 = make_table(kE5M2);
  static const Table e5m2fnuz = make_table(kE5M2FNUZ);
  static const Table e2m1 = make_table(kE2M1);
  switch (t) {
    case DataType::kFloat8E4M3FN: return e4m3fn;
    case DataType::kFloat8E4M3FNUZ: return e4m3fnuz;
    case DataType::kFloat8E5M2: return e5m2;
    case DataType::kFloat8E5M2FNUZ: return e5m2fnuz;
    default: return e2m1;
  }
}

// Code of a finite, non-negative value that is exactly representable (already rounded).
uint8_t encode_exact(const FloatFormat& f, double q) {
  if (q == 0) return 0;
  int e = 0;
  std::frexp(q, &e);  // q = m * 2^e, m in [0.5, 1)
  const int k = e - 1;  // floor(log2 q)
  if (k < 1 - f.bias)   // subnormal: exponent field 0
    return static_cast<uint8_t>(std::ldexp(q, f.bias - 1 + f.mbits));
  const int mant = static_cast<int>(std::ldexp(q, f.mbits - k)) - (1 << f.mbits);
  return static_cast<uint8_t>(((k + f.bias) << f.mbits) | mant);
}

uint8_t encode(const FloatFormat& f, double v, bool saturate) {
  const uint8_t sign = std::signbit(v) ? static_cast<uint8_t>(1u << f.sign_shift) : 0;
  if (std::isnan(v)) return f.nan_keeps_sign ? static_cast<uint8_t>(f.nan_code | sign) : f.nan_code;
  saturate = saturate || f.always_saturates;
  const uint8_t max_code = encode_exact(f, f.max);
  auto overflow = [&]() -> uint8_t {
    if (saturate) return static_cast<uint8_t>(sign | max_code);
    if (f.has_inf) return static_cast<uint8_t>(sign | (0x7f >> f.mbits << f.mbits));  // S.11111.00
    return f.nan_keeps_sign ? static_cast<uint8_t>(f.nan_code | sign) : f.nan_code;
  };
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow();
  // The quantum at a's binade (never below the subnormal step); a / step is exact, and
  // nearbyint rounds half to even in the default rounding mode.
  int e = 0;
  std::frexp(a, &e);
  const int k = std::max(e - 1, 1 - f.bias);
  const double q = std::ldexp(std::nearbyint(std::ldexp(a, f.mbits - k)), k - f.mbits);
  if (q > f.max) return overflow();
  if (q == 0) return f.uz ? 0 : sign;
  return static_cast<uint8_t>(sign | encode_exact(f, q));
}

int packed_bits(DataType t) { return t == DataType::kInt2 || t == DataType::kUInt2 ? 2 : 4; }

}  // namespace

bool dtype_is_lowp(DataType t) { return dtype_is_lowp_float(t) || dtype_is_packed_int(t); }

bool dtype_is_lowp_float(DataType t) {
  return format_of(t) != nullptr || t == DataType::kFloat8E8M0;
}

bool dtype_is_packed_int(DataType t) {
  return t == DataType::kInt4 || t == DataType::kUInt4 || t == DataType::kInt2 || t == DataType::kUInt2;
}

bool dtype_is_packed(DataType t) { return dtype_is_packed_int(t) || t == DataType::kFloat4E2M1; }

float lowp_float_decode(DataType t, uint8_t code) {
  if (t == DataType::kFloat8E8M0) {
    if (code == 0xff) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, static_cast<int>(code) - 127);
  }
  if (t == DataType::kFloat4E2M1) code &= 0xf;
  return table_of(t)[code];
}

uint8_t lowp_float_encode(DataType t, double v, bool saturate) {
  if (t == DataType::kFloat8E8M0) return float_to_e8m0(static_cast<float>(v), saturate, E8M0Rounding::kUp);
  const FloatFormat* f = format_of(t);
  return f ? encode(*f, v, saturate) : 0;
}

bool e8m0_rounding_from_name(const char* name, E8M0Rounding* out) {
  if (std::strcmp(name, "up") == 0) {
    *out = E8M0Rounding::kUp;
  } else if (std::strcmp(name, "down") == 0) {
    *out = E8M0Rounding::kDown;
  } else if (std::strcmp(name, "nearest") == 0) {
    *out = E8M0Rounding::kNearest;
  } else {
    return false;
  }
  return true;
}

uint8_t float_to_e8m0(float v, bool saturate, E8M0Rounding mode) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  uint32_t exponent = (bits >> 23) & 0xffu;
  if (exponent == 0xffu) return 0xff;  // NaN and inf
  bool round_up = false;
  if (mode == E8M0Rounding::kUp) {
    round_up = (bits & 0x7fffffu) != 0;
  } else if (mode == E8M0Rounding::kNearest) {
    // Guard, round and sticky bits below the exponent, as the ONNX reference reads them
    // (its "lsb" is whether the exponent is non-zero).
    const bool g = (bits & 0x400000u) != 0;
    const bool r = (bits & 0x200000u) != 0;
    const bool s = (bits & 0x1fffffu) != 0;
    round_up = g && (r || s || exponent > 0);
  }
  if (round_up && saturate && exponent == 0xfeu) round_up = false;
  exponent += round_up ? 1u : 0u;
  return static_cast<uint8_t>(exponent);
}

uint8_t packed_get_code(DataType t, const void* data, int64_t index) {
  const uint8_t* b = static_cast<const uint8_t*>(data);
  if (packed_bits(t) == 2)
    return static_cast<uint8_t>((b[index >> 2] >> (2 * (index & 3))) & 0x3u);
  return static_cast<uint8_t>((b[index >> 1] >> (4 * (index & 1))) & 0xfu);
}

void packed_set_code(DataType t, void* data, int64_t index, uint8_t code) {
  uint8_t* b = static_cast<uint8_t*>(data);
  const int bits = packed_bits(t);
  const int per_byte = 8 / bits;
  const int shift = bits * static_cast<int>(index % per_byte);
  const uint8_t mask = static_cast<uint8_t>(((1u << bits) - 1u) << shift);
  uint8_t& byte = b[index / per_byte];
  byte = static_cast<uint8_t>((byte & ~mask) | ((static_cast<unsigned>(code) << shift) & mask));
}

int32_t packed_int_get(DataType t, const void* data, int64_t index) {
  const int32_t code = packed_get_code(t, data, index);
  const int bits = packed_bits(t);
  if (t == DataType::kInt4 || t == DataType::kInt2) {
    const int32_t half = 1 << (bits - 1);
    return code >= half ? code - (1 << bits) : code;
  }
  return code;
}

void packed_int_set(DataType t, void* data, int64_t index, int64_t value) {
  // Two's complement wrap: keep the low bits.
  packed_set_code(t, data, index, static_cast<uint8_t>(static_cast<uint64_t>(value) & 0xfu));
}

int32_t packed_int_min(DataType t) {
  switch (t) {
    case DataType::kInt4: return -8;
    case DataType::kInt2: return -2;
    default: return 0;
  }
}

int32_t packed_int_max(DataType t) {
  switch (t) {
    case DataType::kInt4: return 7;
    case DataType::kUInt4: return 15;
    case DataType::kInt2: return 1;
    case DataType::kUInt2: return 3;
    default: return 0;
  }
}

double lowp_to_double(DataType t, const void* data, int64_t index) {
  const uint8_t* b = static_cast<const uint8_t*>(data);
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * index, 2);
      return fp16_to_float(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * index, 2);
      return bf16_to_float(h);
    }
    case DataType::kFloat4E2M1: return lowp_float_decode(t, packed_get_code(t, data, index));
    default: break;
  }
  if (dtype_is_lowp_float(t)) return lowp_float_decode(t, b[index]);
  if (dtype_is_packed_int(t)) return packed_int_get(t, data, index);
  double v = std::numeric_limits<double>::quiet_NaN();
  dispatch_numeric(t, [&]<typename T>() { v = static_cast<double>(static_cast<const T*>(data)[index]); });
  return v;
}

}  // namespace kiln
