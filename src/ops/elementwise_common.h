// Machinery shared by the element-wise op families (unary, activation, binary, logical,
// cast, reduce, softmax): dtype sets and typed dispatch, float16/bfloat16 round trips
// through float32, and a broadcast plan that walks N inputs in contiguous blocks so that
// inner loops are straight loops over memory.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"

namespace kiln::ops {

// ---- dtype sets ----------------------------------------------------------------------

// Bit set of element kinds an op accepts.
using TypeSet = uint32_t;
inline constexpr TypeSet kTypeFloat = 1;     // float32, float64
inline constexpr TypeSet kTypeHalf = 2;      // float16, bfloat16 (computed in float32)
inline constexpr TypeSet kTypeSigned = 4;    // int8..int64
inline constexpr TypeSet kTypeUnsigned = 8;  // uint8..uint64
inline constexpr TypeSet kTypeBool = 16;
inline constexpr TypeSet kTypeFloats = kTypeFloat | kTypeHalf;
inline constexpr TypeSet kTypeInts = kTypeSigned | kTypeUnsigned;
inline constexpr TypeSet kTypeNumeric = kTypeFloats | kTypeInts;

inline bool dtype_is_half(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }
// The kind bit of `t`, 0 for types outside the sets (string, complex, float8, ...).
TypeSet type_bit(DataType t);
inline bool type_in(DataType t, TypeSet set) { return (type_bit(t) & set) != 0; }

// Error naming the node when `t` is not in `set` (for kernels and for inference; an
// undefined dtype passes inference, as the input may simply not be typed yet).
Status check_dtype(const ir::Node& node, DataType t, TypeSet set, const char* what = "input");

template <typename T>
inline constexpr TypeSet kTypeBitOf =
    std::is_same_v<T, bool> ? kTypeBool
    : std::is_floating_point_v<T> ? kTypeFloat
    : std::is_signed_v<T> ? kTypeSigned
                          : kTypeUnsigned;

// Calls fn.template operator()<T>() for the float32/64 and integer types in `set` (bool
// too when the set has it). Returns false when `t` is outside the set or is a half type
// (callers convert halves to float32 first).
template <TypeSet kSet, typename Fn>
bool dispatch_types(DataType t, Fn&& fn) {
  bool done = false;
  dispatch_numeric(t, [&]<typename T>() {
    if constexpr ((kTypeBitOf<T> & kSet) != 0) {
      fn.template operator()<T>();
      done = true;
    }
  });
  return done;
}

// ---- float16 / bfloat16 --------------------------------------------------------------

// float16/bfloat16 -> float32 copy (other dtypes: returned as is).
Tensor half_to_float(const Tensor& t);
// float32 -> float16/bfloat16 copy.
Tensor float_to_half(const Tensor& t, DataType half_type);

// Converts a double to integer type T without undefined behaviour: NaN gives 0, values
// beyond the range of int64 saturate, the rest truncate toward zero and then wrap to T
// as C++ integer conversion does (so -1.0 -> uint8 is 255, as NumPy gives).
template <typename T>
T double_to_int(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    if (std::isnan(v)) return T(0);
    if constexpr (std::is_same_v<T, uint64_t>) {
      if (v >= 18446744073709551616.0) return std::numeric_limits<uint64_t>::max();
      if (v >= 9223372036854775808.0) return static_cast<uint64_t>(v);
    }
    if (v >= 9223372036854775807.0) return static_cast<T>(std::numeric_limits<int64_t>::max());
    if (v <= -9223372036854775808.0) return static_cast<T>(std::numeric_limits<int64_t>::min());
    return static_cast<T>(static_cast<int64_t>(v));
  }
}

// Writes `v` as element i of a float32/64, float16, bfloat16 or integer/bool tensor
// (integers convert as double_to_int does). Other dtypes are left untouched.
inline void store_double(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DataType::kFloat32: t.data<float>()[i] = static_cast<float>(v); return;
    case DataType::kFloat64: t.data<double>()[i] = v; return;
    case DataType::kFloat16: t.data<uint16_t>()[i] = float_to_fp16(static_cast<float>(v)); return;
    case DataType::kBFloat16: t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v)); return;
    default: dispatch_numeric(t.dtype(), [&]<typename T>() { t.data<T>()[i] = double_to_int<T>(v); });
  }
}

// ---- loops -----------------------------------------------------------------------------

// Elements per parallel chunk for cheap element-wise work.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

// dst[i] = f(src[i]) for i in [0, n), in parallel chunks.
template <typename TI, typename TO, typename F>
void map_elements(const TI* src, TO* dst, int64_t n, F f) {
  parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = f(src[i]);
  });
}

// How N inputs broadcast to one output, split into an outer index space and contiguous
// inner blocks. Along the inner block each input either advances with the output (step
// 1) or stays put (step 0, broadcast).
struct BroadcastPlan {
  std::vector<int64_t> out_dims;
  int64_t inner = 1;
  std::vector<int64_t> outer_dims;
  std::vector<std::vector<int64_t>> outer_strides;  // per input, per outer dim
  std::vector<int64_t> inner_step;                  // per input: 0 or 1
  int64_t num_elements() const { return kiln::num_elements(out_dims); }
};

// Plans NumPy broadcasting of `inputs` (dims of each); error naming the node if they do
// not broadcast.
Expected<BroadcastPlan> make_broadcast_plan(const ir::Node& node,
                                            const std::vector<std::vector<int64_t>>& inputs);

// ---- opset 1-6 broadcasting -------------------------------------------------------------

// Before opset 7 the binary ops (Add, Sub, Mul, Div, Pow, the comparisons and logical ops)
// broadcast only B onto A, and only when the node says broadcast=1: B's dims then match
// A's starting at `axis`, or A's trailing dims when axis is absent (which is what NumPy
// broadcasting does). Without broadcast=1 the shapes must be equal. Returns B's shape
// padded with 1s to A's rank, so that NumPy broadcasting of A and the result gives the
// legacy answer; error naming the node when B does not fit. Opset >= 7 nodes get b back.
Expected<Shape> legacy_broadcast_shape(const ir::Node& node, const Shape& a, const Shape& b);
// The same for static dims.
Expected<std::vector<int64_t>> legacy_broadcast_dims(const ir::Node& node, const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b);

// Calls fn(out_offset, in_offsets, len) for every inner block, in parallel chunks.
// in_offsets has one entry per input.
template <typename Fn>
void for_each_block(const BroadcastPlan& p, Fn&& fn) {
  const int64_t blocks = kiln::num_elements(p.outer_dims);
  if (blocks == 0 || p.inner == 0) return;
  const size_t n_in = p.inner_step.size();
  const int rank = static_cast<int>(p.outer_dims.size());
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / p.inner);
  parallel_for(0, blocks, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    std::vector<int64_t> off(n_in, 0);
    int64_t rest = b;
    for (int d = rank - 1; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      idx[du] = rest % p.outer_dims[du];
      rest /= p.outer_dims[du];
      for (size_t k = 0; k < n_in; ++k) off[k] += idx[du] * p.outer_strides[k][du];
    }
    for (int64_t blk = b; blk < e; ++blk) {
      fn(blk * p.inner, off.data(), p.inner);
      for (int d = rank - 1; d >= 0; --d) {
        size_t du = static_cast<size_t>(d);
        if (++idx[du] < p.outer_dims[du]) {
          for (size_t k = 0; k < n_in; ++k) off[k] += p.outer_strides[k][du];
          break;
        }
        for (size_t k = 0; k < n_in; ++k) off[k] -= p.outer_strides[k][du] * (p.outer_dims[du] - 1);
        idx[du] = 0;
      }
    }
  });
}

// out = f(a, b) over a two-input plan.
template <typename TA, typename TB, typename TO, typename F>
void broadcast_binary(const BroadcastPlan& p, const TA* a, const TB* b, TO* out, F f) {
  const bool sa = p.inner_step[0] != 0, sb = p.inner_step[1] != 0;
  for_each_block(p, [&](int64_t o, const int64_t* off, int64_t len) {
    const TA* pa = a + off[0];
    const TB* pb = b + off[1];
    TO* po = out + o;
    if (sa && sb) {
      for (int64_t i = 0; i < len; ++i) po[i] = f(pa[i], pb[i]);
    } else if (sa) {
      const TB y = *pb;
      for (int64_t i = 0; i < len; ++i) po[i] = f(pa[i], y);
    } else if (sb) {
      const TA x = *pa;
      for (int64_t i = 0; i < len; ++i) po[i] = f(x, pb[i]);
    } else {
      const TO v = f(*pa, *pb);
      for (int64_t i = 0; i < len; ++i) po[i] = v;
    }
  });
}

}  // namespace kiln::ops
