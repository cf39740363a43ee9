// Helpers shared by op families: axis normalisation, NumPy broadcasting of shapes and
// of element indices, and the common inference functions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ops/registry.h"

namespace kiln::ops {

// Maps axis in [-rank, rank) to [0, rank); error naming the node otherwise. Ops whose
// axis may equal rank (Unsqueeze, Concat of new axes) pass rank + 1.
Expected<int> normalize_axis(const ir::Node& node, int64_t axis, int rank);

// NumPy broadcasting of static dims; error naming the node if incompatible.
Expected<std::vector<int64_t>> broadcast_dims(const ir::Node& node, const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b);
// Broadcasting of possibly symbolic shapes (unknown dims stay unknown unless the other is > 1).
Expected<Shape> broadcast_shapes(const ir::Node& node, const Shape& a, const Shape& b);

// Strides (in elements) of `in_dims` broadcast to `out_dims`: 0 along broadcast axes.
// in_dims is right-aligned against out_dims.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims);

// Row-major strides of dims.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

// Iterates the flat output index space of `out_dims`, tracking the matching flat offset
// in each input given its broadcast strides. Calls fn(out_index, offsets).
template <size_t N, typename Fn>
void for_each_broadcast(const std::vector<int64_t>& out_dims, const std::vector<int64_t> (&strides)[N], Fn&& fn) {
  const int rank = static_cast<int>(out_dims.size());
  const int64_t total = num_elements(out_dims);
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t off[N] = {};
  for (int64_t o = 0; o < total; ++o) {
    fn(o, off);
    for (int d = rank - 1; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      if (++idx[du] < out_dims[du]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][du];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][du] * (out_dims[du] - 1);
      idx[du] = 0;
    }
  }
}

// Common inference functions.
Status infer_same_as_input(InferContext& ctx);        // output 0 = type of input 0
Status infer_broadcast(InferContext& ctx);            // output 0: broadcast of all inputs, dtype of input 0
Status infer_broadcast_bool(InferContext& ctx);       // same shape, dtype bool (comparisons)

// The values of int32/int64 input i when known at compile time (a constant), else nullopt.
std::optional<std::vector<int64_t>> constant_ints(const InferContext& ctx, int i);
// A shape of the given rank with every dim unknown.
Shape unknown_dims(int64_t rank);

// Reads an optional int64 list from input i (for opset-moved attributes such as axes):
// empty if absent. Error if the tensor is not int32/int64.
Expected<std::vector<int64_t>> int_list_input(const KernelContext& ctx, int i);

}  // namespace kiln::ops
