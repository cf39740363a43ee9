// Helpers shared by the NN op families (conv, pool, normalization, resize): the window
// geometry of Conv/ConvTranspose/pooling (kernel, strides, dilations, pads, auto_pad,
// ceil_mode) and a wrapper that runs float kernels on float16/bfloat16 by conversion.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace kiln::ops {

// Sliding-window geometry over the spatial dims of an N x C x D1 x ... x Dn input.
struct WindowGeometry {
  std::vector<int64_t> kernel;     // window extent per spatial dim (before dilation)
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;       // begin_1..begin_n, end_1..end_n
  std::vector<int64_t> out;        // output extent per spatial dim

  int rank() const { return static_cast<int>(kernel.size()); }
  int64_t pad_begin(int d) const { return pads[static_cast<size_t>(d)]; }
  int64_t pad_end(int d) const { return pads[static_cast<size_t>(d) + kernel.size()]; }
};

// Reads kernel_shape / strides / dilations / pads / auto_pad / ceil_mode of `node` and
// computes the output extents for the given spatial input extents (-1 = unknown; the
// matching output is then -1 too). `kernel` is the kernel extent when it comes from a
// weight (Conv); empty to read the kernel_shape attribute (pooling, which requires it).
// Every value is validated: lengths, strides and dilations >= 1, pads >= 0, output >= 1.
Expected<WindowGeometry> window_geometry(const ir::Node& node, const std::vector<int64_t>& in,
                                         std::vector<int64_t> kernel, bool allow_ceil_mode);

// Output spatial dim d of a window op whose input spatial dim d is `in`: the extent when
// known; for a symbolic input, the same symbol when the window keeps the extent (stride 1,
// padding that covers the dilated window: the common "same" convolution), else a new symbol
// named after the input's and the window's parameters, so that two values computed the same
// way from the same open dim carry the same name (fusions compare shapes by name); unknown
// when the input is unnamed.
Dim window_output_dim(const ir::Node& node, const Dim& in, const WindowGeometry& g, size_t d);

// Spatial extents of a shape of rank >= 3 (-1 for symbolic ones).
std::vector<int64_t> spatial_extents(const Shape& shape);

// Checks that `t` has rank >= min_rank and a float dtype the kernel handles.
Status check_float_input(const ir::Node& node, const Tensor& t, const char* what, int min_rank);

// Wraps a kernel written for float32/float64 so that float16 and bfloat16 inputs run
// through float32: floating inputs are converted, and float32 outputs converted back to
// the dtype of input 0. Costs two copies; the fast kernels handle half types natively.
KernelFn with_half_as_float(KernelFn fn);

// Calls fn.template operator()<T>() for float32 (float) and float64 (double); false otherwise.
template <typename Fn>
bool dispatch_float(DataType t, Fn&& fn) {
  if (t == DataType::kFloat32) {
    fn.template operator()<float>();
    return true;
  }
  if (t == DataType::kFloat64) {
    fn.template operator()<double>();
    return true;
  }
  return false;
}

// Error for a dtype a kernel does not handle.
Status unsupported_dtype(const ir::Node& node, DataType t);

// Dims of a (possibly symbolic) shape, -1 where unknown (for inference of window ops).
std::vector<int64_t> dims_or_unknown(const Shape& s);

}  // namespace kiln::ops
