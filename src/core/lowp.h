// Low-precision element types: the float8 kinds, float4e2m1 and float8e8m0 (to and from
// float with ONNX's rounding and saturation rules), and element access for the packed
// 4-bit and 2-bit types.
//
// Encodings (ONNX, after the OCP 8-bit and MX specifications):
//   float8e4m3fn    bias 7,  no inf, NaN = S.1111.111, max 448
//   float8e4m3fnuz  bias 8,  no inf, no -0, NaN = 0x80, max 240
//   float8e5m2      bias 15, IEEE-like (inf, NaN), max 57344
//   float8e5m2fnuz  bias 16, no inf, no -0, NaN = 0x80, max 57344
//   float4e2m1      bias 1,  no inf, no NaN, max 6 (one nibble)
//   float8e8m0      exponent only: 2^(code - 127), code 0xFF = NaN, no sign, no zero
// Packed types store elements from the lowest bits up: int4/uint4/float4e2m1 two per byte
// (element 0 in bits 0-3), int2/uint2 four per byte (element 0 in bits 0-1).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace kiln {

// float8 kinds, float4e2m1, float8e8m0, int4/uint4, int2/uint2: the types whose elements
// are not a C++ arithmetic type and need the conversions below.
bool dtype_is_lowp(DataType t);
// The float kinds among them (float8 x4, float4e2m1, float8e8m0).
bool dtype_is_lowp_float(DataType t);
// int4, uint4, int2, uint2.
bool dtype_is_packed_int(DataType t);
// Elements share bytes: int4, uint4, float4e2m1, int2, uint2.
bool dtype_is_packed(DataType t);

// ---- float8 / float4 / float8e8m0 ------------------------------------------------------

// The value of `code` (the element's bits: a byte, or a nibble for float4e2m1) of a lowp
// float type. NaN for NaN codes. `t` must satisfy dtype_is_lowp_float.
float lowp_float_decode(DataType t, uint8_t code);

// Rounds `v` to the nearest value of a float8 kind or float4e2m1 (ties to even) and
// returns its code. With `saturate`, values beyond the largest finite value (infinities
// included) become +-max; without it they become inf (float8e5m2) or NaN (the kinds
// without inf). float4e2m1 has neither, so it always saturates, and NaN becomes 0x8, as
// the ONNX reference (ml_dtypes) gives. The *fnuz kinds have no -0: tiny negatives give 0.
uint8_t lowp_float_encode(DataType t, double v, bool saturate);

// Rounding of float -> float8e8m0 (Cast's round_mode): "up" rounds any fraction away
// from zero, "down" drops it, "nearest" rounds to the nearest power of two.
enum class E8M0Rounding { kUp, kDown, kNearest };
// Parses "up" / "down" / "nearest"; false for anything else.
bool e8m0_rounding_from_name(const char* name, E8M0Rounding* out);
// float -> float8e8m0 code from the float32 bit pattern, as the ONNX reference does: the
// sign is ignored, NaN and inf give 0xFF, zero gives 0x00 (2^-127). With `saturate` a
// round-up never passes 2^127 (code 0xFE); without it that overflows to NaN.
uint8_t float_to_e8m0(float v, bool saturate, E8M0Rounding mode);

// ---- packed elements -------------------------------------------------------------------

// The raw bits (0..15 or 0..3) of element `index` of packed data of type `t`.
uint8_t packed_get_code(DataType t, const void* data, int64_t index);
// Stores the low bits of `code` as element `index`, leaving its neighbours alone.
void packed_set_code(DataType t, void* data, int64_t index, uint8_t code);
// Element `index` of int4/uint4/int2/uint2 data as an integer (sign-extended for int4/int2).
int32_t packed_int_get(DataType t, const void* data, int64_t index);
// Stores `value` wrapped to the type's width (-9 -> int4 7, -1 -> uint2 3), as Cast does.
void packed_int_set(DataType t, void* data, int64_t index, int64_t value);
// Range of int4/uint4/int2/uint2 values (for saturating quantisation).
int32_t packed_int_min(DataType t);
int32_t packed_int_max(DataType t);

// ---- any element as a number ------------------------------------------------------------

// Element `index` of `data` (laid out as type `t`) as a double: every lowp type, float16,
// bfloat16, and the plain numeric types and bool. NaN for string and complex types.
double lowp_to_double(DataType t, const void* data, int64_t index);

}  // namespace kiln
