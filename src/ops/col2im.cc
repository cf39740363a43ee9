// Col2Im (ONNX opsets 18..27): rebuilds an N x C x D1..Dn image from its sliding blocks
// (the inverse layout of im2col), summing where blocks overlap.
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

struct BlockGeometry {
  std::vector<int64_t> image, block, strides, dilations, pads, blocks_per_dim;
  int64_t block_size = 1, num_blocks = 1;
};

Expected<BlockGeometry> block_geometry(const ir::Node& node, std::vector<int64_t> image, std::vector<int64_t> block) {
  const std::string label = node.label();
  const size_t n = image.size();
  if (n == 0 || block.size() != n)
    return invalid_argument("node %s: image_shape has %zu values and block_shape %zu; they must match and be >= 1",
                            label.c_str(), n, block.size());
  BlockGeometry g;
  g.image = std::move(image);
  g.block = std::move(block);
  g.strides = node.attr_ints("strides", std::vector<int64_t>(n, 1));
  g.dilations = node.attr_ints("dilations", std::vector<int64_t>(n, 1));
  g.pads = node.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (g.strides.size() != n || g.dilations.size() != n || g.pads.size() != 2 * n)
    return invalid_argument("node %s: strides (%zu), dilations (%zu) and pads (%zu) do not fit %zu spatial dims",
                            label.c_str(), g.strides.size(), g.dilations.size(), g.pads.size(), n);
  for (size_t d = 0; d < n; ++d) {
    if (g.image[d] < 1 || g.block[d] < 1 || g.strides[d] < 1 || g.dilations[d] < 1 || g.pads[d] < 0 ||
        g.pads[d + n] < 0)
      return invalid_argument("node %s: image_shape, block_shape, strides, dilations must be >= 1 and pads >= 0",
                              label.c_str());
    constexpr int64_t kMaxExtent = int64_t{1} << 30;
    if (g.image[d] > kMaxExtent || g.block[d] > kMaxExtent || g.dilations[d] > kMaxExtent ||
        g.pads[d] > kMaxExtent || g.pads[d + n] > kMaxExtent)
      return invalid_argument("node %s: an extent of dim %zu is above 2^30", label.c_str(), d);
    const int64_t span = g.dilations[d] * (g.block[d] - 1) + 1;
    const int64_t padded = g.image[d] + g.pads[d] + g.pads[d + n];
    if (padded < span)
      return invalid_argument("node %s: block of extent %lld does not fit padded image extent %lld (dim %zu)",
                              label.c_str(), (long long)span, (long long)padded, d);
    g.blocks_per_dim.push_back((padded - span) / g.strides[d] + 1);
    // Hostile extents must not overflow the products.
    constexpr int64_t kLimit = int64_t{1} << 40;
    if (g.block[d] > kLimit / g.block_size || g.blocks_per_dim.back() > kLimit / g.num_blocks)
      return invalid_argument("node %s: block_shape / image_shape too large", label.c_str());
    g.block_size *= g.block[d];
    g.num_blocks *= g.blocks_per_dim.back();
  }
  return g;
}

Status infer_col2im(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const std::string label = ctx.node().label();
  if (xt.shape.has_rank() && xt.shape.rank() != 3)
    return invalid_argument("node %s: input has rank %d, expected 3 (N x C*prod(block) x L)", label.c_str(),
                            xt.shape.rank());
  std::optional<std::vector<int64_t>> image = constant_ints(ctx, 1);
  std::optional<std::vector<int64_t>> block = constant_ints(ctx, 2);
  Dim batch = xt.shape.has_rank() ? xt.shape[0] : Dim();
  if (image && block) {
    KILN_ASSIGN_OR_RETURN(BlockGeometry g, block_geometry(ctx.node(), *image, *block));
    Dim channels;
    if (xt.shape.has_rank() && xt.shape[1].is_static()) {
      if (xt.shape[1].value % g.block_size != 0)
        return invalid_argument("node %s: input dim 1 (%lld) is not a multiple of the block size %lld",
                                label.c_str(), (long long)xt.shape[1].value, (long long)g.block_size);
      channels = Dim(xt.shape[1].value / g.block_size);
    }
    std::vector<Dim> dims{batch, channels};
    for (int64_t v : g.image) dims.push_back(Dim(v));
    ctx.set_output(0, xt.dtype, Shape(dims));
    return ok_status();
  }
  const ir::TensorType& it = ctx.input_type(1);
  if (it.shape.has_rank() && it.shape.rank() == 1 && it.shape[0].is_static()) {
    Shape out = unknown_dims(it.shape[0].value + 2);
    out[0] = batch;
    ctx.set_output(0, xt.dtype, out);
  } else {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
  }
  return ok_status();
}

Status col2im_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> image, int_list_input(ctx, 1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> block, int_list_input(ctx, 2));
  KILN_ASSIGN_OR_RETURN(BlockGeometry g, block_geometry(node, image, block));
  if (x.rank() != 3 || x.dim(1) % g.block_size != 0 || x.dim(2) != g.num_blocks)
    return invalid_argument("node %s: input %s does not fit block size %lld and %lld blocks "
                            "(expected N x C*%lld x %lld)",
                            label.c_str(), dims_to_string(x.dims()).c_str(), (long long)g.block_size,
                            (long long)g.num_blocks, (long long)g.block_size, (long long)g.num_blocks);
  const int n = static_cast<int>(g.image.size());
  const int64_t channels = x.dim(1) / g.block_size;
  std::vector<int64_t> out_dims{x.dim(0), channels};
  out_dims.insert(out_dims.end(), g.image.begin(), g.image.end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  if (y->num_elements() == 0) return ok_status();
  const int64_t image_size = num_elements(g.image);
  auto run = [&]<typename T>() {
    const T* src = x.data<T>();
    T* dst = y->data<T>();
    parallel_for(0, x.dim(0) * channels, 1, [&](int64_t p0, int64_t p1) {
      std::vector<int64_t> kpos(static_cast<size_t>(n)), bpos(static_cast<size_t>(n));
      for (int64_t p = p0; p < p1; ++p) {
        T* out = dst + p * image_size;
        // Row (c, kernel offset) of the column matrix, column = block index.
        for (int64_t k = 0; k < g.block_size; ++k) {
          int64_t rem = k;
          for (int d = n - 1; d >= 0; --d) {
            kpos[d] = rem % g.block[d];
            rem /= g.block[d];
          }
          const T* row = src + (p * g.block_size + k) * g.num_blocks;
          for (int64_t b = 0; b < g.num_blocks; ++b) {
            int64_t r2 = b, off = 0;
            bool inside = true;
            for (int d = n - 1; d >= 0; --d) {
              bpos[d] = r2 % g.blocks_per_dim[d];
              r2 /= g.blocks_per_dim[d];
            }
            for (int d = 0; d < n; ++d) {
              const int64_t i = bpos[d] * g.strides[d] - g.pads[d] + kpos[d] * g.dilations[d];
              if (i < 0 || i >= g.image[d]) {
                inside = false;
                break;
              }
              off = off * g.image[d] + i;
            }
            if (inside) out[off] += row[b];
          }
        }
      }
    });
  };
  if (!dispatch_float(x.dtype(), run)) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Col2Im")
                     .since(18)
                     .inputs(3, 3)
                     .outputs(1, 1)
                     .attr("dilations", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .infer(infer_col2im)
                     .kernel(with_half_as_float(col2im_kernel)));

}  // namespace kiln::ops
