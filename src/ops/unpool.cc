// MaxUnpool (ONNX opsets 9..27): scatters pooled values back to the positions MaxPool's
// Indices output recorded, into a zero tensor of the unpooled (or given) shape.
#include <cstring>
#include <string>
#include <vector>

#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

struct UnpoolGeometry {
  std::vector<int64_t> kernel, strides, pads;  // pads: begin_1..begin_n, end_1..end_n
};

Expected<UnpoolGeometry> unpool_geometry(const ir::Node& node, int n) {
  const std::string label = node.label();
  UnpoolGeometry g;
  g.kernel = node.attr_ints("kernel_shape");
  g.strides = node.attr_ints("strides", std::vector<int64_t>(static_cast<size_t>(n), 1));
  g.pads = node.attr_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * n), 0));
  if (static_cast<int>(g.kernel.size()) != n || static_cast<int>(g.strides.size()) != n ||
      static_cast<int>(g.pads.size()) != 2 * n)
    return invalid_argument("node %s: kernel_shape (%zu), strides (%zu) and pads (%zu) do not fit %d spatial dims",
                            label.c_str(), g.kernel.size(), g.strides.size(), g.pads.size(), n);
  for (int d = 0; d < n; ++d) {
    if (g.kernel[d] < 1 || g.strides[d] < 1 || g.pads[d] < 0 || g.pads[d + n] < 0)
      return invalid_argument("node %s: kernel_shape and strides must be >= 1 and pads >= 0", label.c_str());
  }
  return g;
}

// The default output extent of spatial dim d: the input of a MaxPool that gives `in`.
int64_t unpooled_extent(const UnpoolGeometry& g, int d, int64_t in) {
  const int n = static_cast<int>(g.kernel.size());
  return (in - 1) * g.strides[d] + g.kernel[d] - g.pads[d] - g.pads[d + n];
}

Status infer_max_unpool(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const std::string label = ctx.node().label();
  if (ctx.has_input(2)) {
    if (std::optional<std::vector<int64_t>> shape = constant_ints(ctx, 2)) {
      ctx.set_output(0, xt.dtype, Shape::from_static(*shape));
      return ok_status();
    }
    const ir::TensorType& st = ctx.input_type(2);
    if (st.shape.has_rank() && st.shape.rank() == 1 && st.shape[0].is_static())
      ctx.set_output(0, xt.dtype, unknown_dims(st.shape[0].value));
    else
      ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  if (!xt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const int r = xt.shape.rank();
  if (r < 3) return invalid_argument("node %s: X has rank %d, expected >= 3 (N x C x D1 ...)", label.c_str(), r);
  KILN_ASSIGN_OR_RETURN(UnpoolGeometry g, unpool_geometry(ctx.node(), r - 2));
  std::vector<Dim> dims{xt.shape[0], xt.shape[1]};
  for (int d = 0; d < r - 2; ++d) {
    const Dim& in = xt.shape[d + 2];
    dims.push_back(in.is_static() ? Dim(unpooled_extent(g, d, in.value)) : Dim());
  }
  ctx.set_output(0, xt.dtype, Shape(dims));
  return ok_status();
}

Status max_unpool_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  const Tensor& indices = *ctx.input(1);
  const int r = x.rank();
  if (r < 3)
    return invalid_argument("node %s: X %s has rank %d, expected >= 3 (N x C x D1 ...)", label.c_str(),
                            dims_to_string(x.dims()).c_str(), r);
  if (indices.dims() != x.dims())
    return invalid_argument("node %s: I %s must have the shape of X %s", label.c_str(),
                            dims_to_string(indices.dims()).c_str(), dims_to_string(x.dims()).c_str());
  if (indices.dtype() != DataType::kInt64)
    return invalid_argument("node %s: I is %s, expected int64", label.c_str(), dtype_name(indices.dtype()));
  KILN_ASSIGN_OR_RETURN(UnpoolGeometry g, unpool_geometry(node, r - 2));
  // Indices address the inferred (unpooled) shape; a given output_shape may only add
  // room past its end in each dim, where the values keep their coordinates (the ONNX
  // reference and test data), e.g. unpooling 2x2 into 5x5 instead of the inferred 4x4.
  std::vector<int64_t> inferred{x.dim(0), x.dim(1)};
  for (int d = 0; d < r - 2; ++d) inferred.push_back(unpooled_extent(g, d, x.dim(d + 2)));
  for (int64_t v : inferred)
    if (v < 0)
      return invalid_argument("node %s: unpooled shape %s has a negative dim", label.c_str(),
                              dims_to_string(inferred).c_str());
  std::vector<int64_t> out_dims = inferred;
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(out_dims, int_list_input(ctx, 2));
    bool fits = static_cast<int>(out_dims.size()) == r && out_dims[0] == x.dim(0) && out_dims[1] == x.dim(1);
    for (int d = 2; fits && d < r; ++d) fits = out_dims[d] >= inferred[d];
    if (!fits)
      return invalid_argument("node %s: output_shape %s does not fit X %s (same N and C, spatial dims >= %s)",
                              label.c_str(), dims_to_string(out_dims).c_str(), dims_to_string(x.dims()).c_str(),
                              dims_to_string(inferred).c_str());
  }
  if (x.dtype() == DataType::kString || dtype_bits(x.dtype()) < 8) return unsupported_dtype(node, x.dtype());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  const int64_t total = num_elements(inferred);
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t i = 0; i < x.num_elements(); ++i)
    if (idx[i] < 0 || idx[i] >= total)
      return out_of_range("node %s: I[%lld] = %lld is outside the unpooled shape's %lld elements", label.c_str(),
                          (long long)i, (long long)idx[i], (long long)total);
  const size_t bytes = static_cast<size_t>(dtype_bits(x.dtype()) / 8);
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    // Unravel over the inferred dims, ravel over the output dims.
    int64_t rem = idx[i], off = 0, scale = 1;
    for (int d = r - 1; d >= 0; --d) {
      off += (rem % inferred[d]) * scale;
      rem /= inferred[d];
      scale *= out_dims[d];
    }
    std::memcpy(dst + static_cast<size_t>(off) * bytes, src + static_cast<size_t>(i) * bytes, bytes);
  }
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("MaxUnpool")
                     .since(9)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .required_attr("kernel_shape", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .infer(infer_max_unpool)
                     .kernel(max_unpool_kernel));

}  // namespace kiln::ops
