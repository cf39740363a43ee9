// Transpose, DepthToSpace and SpaceToDepth: permutations of the input's elements, each
// one strided read of the input (a reshape to more dims, then a transpose).
#include <algorithm>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// The permutation for a rank: the attribute, or the reverse of the dims.
Expected<std::vector<int>> transpose_perm(const ir::Node& node, int rank) {
  std::vector<int> perm;
  if (const ir::Attribute* a = node.attr("perm")) {
    if (static_cast<int>(a->ints.size()) != rank)
      return invalid_argument("node %s: perm has %zu entries for an input of rank %d", node.label().c_str(),
                              a->ints.size(), rank);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (int64_t p : a->ints) {
      if (p < 0 || p >= rank || seen[static_cast<size_t>(p)])
        return invalid_argument("node %s: perm is not a permutation of 0..%d", node.label().c_str(), rank - 1);
      seen[static_cast<size_t>(p)] = true;
      perm.push_back(static_cast<int>(p));
    }
    return perm;
  }
  for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  return perm;
}

Status infer_transpose(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (!in.shape.has_rank()) {
    if (const ir::Attribute* a = ctx.node().attr("perm"))
      ctx.set_output(0, in.dtype, Shape(std::vector<Dim>(a->ints.size())));
    else
      ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int> perm, transpose_perm(ctx.node(), in.shape.rank()));
  std::vector<Dim> out;
  for (int p : perm) out.push_back(in.shape[p]);
  ctx.set_output(0, in.dtype, Shape(std::move(out)));
  return ok_status();
}

// Reads x as a tensor of `view_dims` (same element count), permutes by `perm`, and
// writes the result to output 0 with dims `out_dims`.
Status permute_into_output(KernelContext& ctx, const Tensor& x, const std::vector<int64_t>& view_dims,
                           const std::vector<int>& perm, std::vector<int64_t> out_dims) {
  std::vector<int64_t> in_strides = contiguous_strides(view_dims);
  std::vector<int64_t> dims, strides;
  for (int p : perm) {
    dims.push_back(view_dims[static_cast<size_t>(p)]);
    strides.push_back(in_strides[static_cast<size_t>(p)]);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), std::move(out_dims)));
  return strided_copy_tensor(ctx.node(), x, 0, *y, dims, strides);
}

Status transpose_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<int> perm, transpose_perm(ctx.node(), x.rank()));
  std::vector<int64_t> out;
  for (int p : perm) out.push_back(x.dim(p));
  return permute_into_output(ctx, x, x.dims(), perm, out);
}

// ---- DepthToSpace, SpaceToDepth -----------------------------------------------------

Expected<int64_t> blocksize(const ir::Node& node) {
  int64_t b = node.attr_int("blocksize", 0);
  if (b <= 0) return invalid_argument("node %s: blocksize must be positive, got %lld", node.label().c_str(),
                                      (long long)b);
  return b;
}

Expected<bool> depth_to_space_is_crd(const ir::Node& node) {
  std::string mode = node.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD")
    return invalid_argument("node %s: mode must be DCR or CRD, got '%s'", node.label().c_str(), mode.c_str());
  return mode == "CRD";
}

Dim dim_mul(const Dim& d, int64_t f) { return d.is_static() ? Dim(d.value * f) : Dim(); }

Status infer_depth_to_space(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  KILN_ASSIGN_OR_RETURN(int64_t b, blocksize(ctx.node()));
  KILN_RETURN_IF_ERROR(depth_to_space_is_crd(ctx.node()).status());
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape(std::vector<Dim>(4)));
    return ok_status();
  }
  if (in.shape.rank() != 4)
    return invalid_argument("node %s: input must be 4-D, got %s", ctx.node().label().c_str(),
                            in.shape.to_string().c_str());
  Dim c = in.shape[1];
  if (c.is_static()) {
    if (c.value % (b * b) != 0)
      return invalid_argument("node %s: channels %lld are not divisible by blocksize^2 = %lld",
                              ctx.node().label().c_str(), (long long)c.value, (long long)(b * b));
    c = Dim(c.value / (b * b));
  }
  ctx.set_output(0, in.dtype, Shape{in.shape[0], c, dim_mul(in.shape[2], b), dim_mul(in.shape[3], b)});
  return ok_status();
}

Status depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(int64_t b, blocksize(ctx.node()));
  KILN_ASSIGN_OR_RETURN(bool crd, depth_to_space_is_crd(ctx.node()));
  if (x.rank() != 4)
    return invalid_argument("node %s: input must be 4-D, got %s", ctx.node().label().c_str(),
                            dims_to_string(x.dims()).c_str());
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  if (c % (b * b) != 0)
    return invalid_argument("node %s: channels %lld are not divisible by blocksize^2 = %lld",
                            ctx.node().label().c_str(), (long long)c, (long long)(b * b));
  const int64_t oc = c / (b * b);
  std::vector<int64_t> out = {n, oc, h * b, w * b};
  if (crd) return permute_into_output(ctx, x, {n, oc, b, b, h, w}, {0, 1, 4, 2, 5, 3}, out);
  return permute_into_output(ctx, x, {n, b, b, oc, h, w}, {0, 3, 4, 1, 5, 2}, out);
}

Status infer_space_to_depth(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  KILN_ASSIGN_OR_RETURN(int64_t b, blocksize(ctx.node()));
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape(std::vector<Dim>(4)));
    return ok_status();
  }
  if (in.shape.rank() != 4)
    return invalid_argument("node %s: input must be 4-D, got %s", ctx.node().label().c_str(),
                            in.shape.to_string().c_str());
  Dim hw[2] = {in.shape[2], in.shape[3]};
  for (Dim& d : hw) {
    if (!d.is_static()) {
      d = Dim();
      continue;
    }
    if (d.value % b != 0)
      return invalid_argument("node %s: spatial dims %s are not divisible by blocksize %lld",
                              ctx.node().label().c_str(), in.shape.to_string().c_str(), (long long)b);
    d = Dim(d.value / b);
  }
  ctx.set_output(0, in.dtype, Shape{in.shape[0], dim_mul(in.shape[1], b * b), hw[0], hw[1]});
  return ok_status();
}

Status space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(int64_t b, blocksize(ctx.node()));
  if (x.rank() != 4)
    return invalid_argument("node %s: input must be 4-D, got %s", ctx.node().label().c_str(),
                            dims_to_string(x.dims()).c_str());
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  if (h % b != 0 || w % b != 0)
    return invalid_argument("node %s: spatial dims %s are not divisible by blocksize %lld",
                            ctx.node().label().c_str(), dims_to_string(x.dims()).c_str(), (long long)b);
  return permute_into_output(ctx, x, {n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4},
                             {n, c * b * b, h / b, w / b});
}

KILN_REGISTER_OP(OpSchema("Transpose").since(1).inputs(1, 1).outputs(1, 1).attr("perm", AttrKind::kInts)
                     .infer(infer_transpose).kernel(transpose_kernel));
KILN_REGISTER_OP(OpSchema("DepthToSpace").since(1).inputs(1, 1).outputs(1, 1)
                     .required_attr("blocksize", AttrKind::kInt).attr("mode", AttrKind::kString)
                     .infer(infer_depth_to_space).kernel(depth_to_space_kernel));
KILN_REGISTER_OP(OpSchema("SpaceToDepth").since(1).inputs(1, 1).outputs(1, 1)
                     .required_attr("blocksize", AttrKind::kInt).infer(infer_space_to_depth)
                     .kernel(space_to_depth_kernel));

}  // namespace
}  // namespace kiln::ops
