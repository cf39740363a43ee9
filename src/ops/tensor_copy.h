// Dtype-agnostic element movement for the tensor/shape op families: a copy type per
// element size (strings by element), a strided copy engine (Transpose, Slice, Expand,
// Tile, DepthToSpace are all one strided read of the input), and index-input helpers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace kiln::ops {

// A 16-byte element (complex128) moved as one unit.
struct Bytes16 {
  uint64_t lo, hi;
};

// Calls fn.template operator()<T>() with a type of the dtype's element size (uint8_t ..
// Bytes16), or std::string for strings. Sub-byte packed dtypes (int4, float4) cannot be
// addressed per element: returns an error naming the node.
template <typename Fn>
Status dispatch_copy_type(const ir::Node& node, DataType t, Fn&& fn) {
  if (t == DataType::kString) {
    fn.template operator()<std::string>();
    return ok_status();
  }
  switch (dtype_bits(t)) {
    case 8: fn.template operator()<uint8_t>(); return ok_status();
    case 16: fn.template operator()<uint16_t>(); return ok_status();
    case 32: fn.template operator()<uint32_t>(); return ok_status();
    case 64: fn.template operator()<uint64_t>(); return ok_status();
    case 128: fn.template operator()<Bytes16>(); return ok_status();
    default:
      return unsupported("node %s: dtype %s is not supported by this op", node.label().c_str(),
                         dtype_name(t));
  }
}

// Copies n elements; memcpy for plain types, assignment for strings.
template <typename T>
inline void copy_run(T* dst, const T* src, int64_t n) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// Merges adjacent dims that are contiguous in the source (stride[d] == stride[d+1] *
// dims[d+1]) and drops extent-1 dims, so the inner loop of strided_copy runs long.
inline void coalesce_dims(std::vector<int64_t>& dims, std::vector<int64_t>& strides) {
  std::vector<int64_t> d2, s2;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!d2.empty() && s2.back() == strides[i] * dims[i]) {
      d2.back() *= dims[i];
      s2.back() = strides[i];
    } else {
      d2.push_back(dims[i]);
      s2.push_back(strides[i]);
    }
  }
  dims = std::move(d2);
  strides = std::move(s2);
}

// dst[o] = src[offset + sum_d idx_d(o) * strides[d]] over the row-major index space of
// `dims`; strides are in elements and may be 0 (broadcast) or negative (reversed slice).
template <typename T>
void strided_copy(T* dst, const T* src, std::vector<int64_t> dims, std::vector<int64_t> strides) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  coalesce_dims(dims, strides);
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t inner = dims[static_cast<size_t>(rank - 1)];
  const int64_t istride = strides[static_cast<size_t>(rank - 1)];
  const int64_t outer = total / inner;
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  const T* p = src;
  for (int64_t o = 0; o < outer; ++o) {
    if (istride == 1) {
      copy_run(dst, p, inner);
    } else if (istride == 0) {
      for (int64_t k = 0; k < inner; ++k) dst[k] = p[0];
    } else {
      for (int64_t k = 0; k < inner; ++k) dst[k] = p[k * istride];
    }
    dst += inner;
    for (int d = rank - 2; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      if (++idx[du] < dims[du]) {
        p += strides[du];
        break;
      }
      p -= strides[du] * (dims[du] - 1);
      idx[du] = 0;
    }
  }
}

// Runs strided_copy for any dtype from `src` (starting `offset` elements in) into `dst`,
// which must already have dtype src.dtype() and num_elements == prod(dims).
inline Status strided_copy_tensor(const ir::Node& node, const Tensor& src, int64_t offset, Tensor& dst,
                                  const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  return dispatch_copy_type(node, src.dtype(), [&]<typename T>() {
    strided_copy(dst.data<T>(), src.data<T>() + offset, dims, strides);
  });
}

// An int32/int64 tensor's values as int64; error naming the node and the input otherwise.
inline Expected<std::vector<int64_t>> index_values(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.dtype() != DataType::kInt64 && t.dtype() != DataType::kInt32)
    return invalid_argument("node %s: %s must be int32 or int64, got %s", node.label().c_str(), what,
                            dtype_name(t.dtype()));
  std::vector<int64_t> out(static_cast<size_t>(t.num_elements()));
  if (t.dtype() == DataType::kInt64) {
    copy_run(out.data(), t.data<int64_t>(), t.num_elements());
  } else {
    for (int64_t i = 0; i < t.num_elements(); ++i) out[static_cast<size_t>(i)] = t.data<int32_t>()[i];
  }
  return out;
}

// One integer from a scalar (or one-element) int input.
inline Expected<int64_t> scalar_index(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.num_elements() != 1)
    return invalid_argument("node %s: %s must hold one value, got shape %s", node.label().c_str(), what,
                            dims_to_string(t.dims()).c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, index_values(node, t, what));
  return v[0];
}

}  // namespace kiln::ops
