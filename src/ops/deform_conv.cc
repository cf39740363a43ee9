// DeformConv (ONNX opsets 19..27): 2-D convolution whose kernel taps are moved by learned
// per-position offsets (and scaled by an optional mask), sampled bilinearly with zeros
// outside the image; a deformable im2col followed by the shared GEMM per group.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/gemm_util.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

Dim dim_or_unknown(int64_t v) { return v >= 0 ? Dim(v) : Dim(); }

struct DeformShape {
  int64_t group = 1, offset_group = 1;
  WindowGeometry geo;
};

// x: N x C x H x W, w: M x C/group x kH x kW (-1 where unknown).
Expected<DeformShape> deform_shape(const ir::Node& node, const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) {
  const std::string label = node.label();
  if (x.size() != 4 || w.size() != 4)
    return invalid_argument("node %s: X has rank %zu and W rank %zu; only 2-D DeformConv (rank 4) is supported",
                            label.c_str(), x.size(), w.size());
  DeformShape s;
  s.group = node.attr_int("group", 1);
  s.offset_group = node.attr_int("offset_group", 1);
  if (s.group < 1 || s.offset_group < 1)
    return invalid_argument("node %s: group %lld and offset_group %lld must be >= 1", label.c_str(),
                            (long long)s.group, (long long)s.offset_group);
  if (w[0] >= 0 && w[0] % s.group != 0)
    return invalid_argument("node %s: %lld output channels are not divisible by group %lld", label.c_str(),
                            (long long)w[0], (long long)s.group);
  if (x[1] >= 0 && w[1] >= 0 && x[1] != w[1] * s.group)
    return invalid_argument("node %s: X has %lld channels, W %s with group %lld expects %lld", label.c_str(),
                            (long long)x[1], dims_to_string(w).c_str(), (long long)s.group,
                            (long long)(w[1] * s.group));
  if (x[1] >= 0 && x[1] % s.offset_group != 0)
    return invalid_argument("node %s: %lld channels are not divisible by offset_group %lld", label.c_str(),
                            (long long)x[1], (long long)s.offset_group);
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (kernel[0] < 0 || kernel[1] < 0) kernel.clear();
  KILN_ASSIGN_OR_RETURN(s.geo, window_geometry(node, std::vector<int64_t>(x.begin() + 2, x.end()), kernel, false));
  return s;
}

Status infer_deform_conv(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const ir::TensorType& wt = ctx.input_type(1);
  if (!xt.shape.has_rank() || !wt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  if (!wt.shape.is_static() && !ctx.node().has_attr("kernel_shape")) {
    ctx.set_output(0, xt.dtype, unknown_dims(xt.shape.rank()));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(DeformShape s, deform_shape(ctx.node(), dims_or_unknown(xt.shape), dims_or_unknown(wt.shape)));
  std::vector<Dim> dims{xt.shape[0], wt.shape[0]};
  for (int64_t o : s.geo.out) dims.push_back(dim_or_unknown(o));
  ctx.set_output(0, xt.dtype, Shape(std::move(dims)));
  return ok_status();
}

// Bilinear sample of plane x (h x w) at (y, xx); corners outside the image read 0.
template <typename T>
double sample(const T* x, int64_t h, int64_t w, double y, double xx) {
  if (!(y > -1.0 && y < static_cast<double>(h) && xx > -1.0 && xx < static_cast<double>(w))) return 0;
  const double fy = std::floor(y), fx = std::floor(xx);
  const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
  const double ly = y - fy, lx = xx - fx;
  auto at = [&](int64_t yi, int64_t xi) -> double {
    return yi >= 0 && yi < h && xi >= 0 && xi < w ? static_cast<double>(x[yi * w + xi]) : 0.0;
  };
  return (1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x0 + 1)) +
         ly * ((1 - lx) * at(y0 + 1, x0) + lx * at(y0 + 1, x0 + 1));
}

Status deform_conv_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor& offset = *ctx.input(2);
  const Tensor* bias = ctx.input(3);
  const Tensor* mask = ctx.input(4);
  KILN_ASSIGN_OR_RETURN(DeformShape s, deform_shape(node, x.dims(), w.dims()));
  const WindowGeometry& g = s.geo;
  const int64_t batch = x.dim(0), c_in = x.dim(1), c_out = w.dim(0), ih = x.dim(2), iw = x.dim(3);
  const int64_t kh = g.kernel[0], kw = g.kernel[1], k = kh * kw, oh = g.out[0], ow = g.out[1];
  if (w.dim(2) != kh || w.dim(3) != kw)
    return invalid_argument("node %s: W %s does not match kernel_shape", label.c_str(),
                            dims_to_string(w.dims()).c_str());
  const std::vector<int64_t> want_offset{batch, s.offset_group * 2 * k, oh, ow};
  if (offset.dims() != want_offset)
    return invalid_argument("node %s: offset %s, expected %s", label.c_str(), dims_to_string(offset.dims()).c_str(),
                            dims_to_string(want_offset).c_str());
  const std::vector<int64_t> want_mask{batch, s.offset_group * k, oh, ow};
  if (mask && mask->dims() != want_mask)
    return invalid_argument("node %s: mask %s, expected %s", label.c_str(), dims_to_string(mask->dims()).c_str(),
                            dims_to_string(want_mask).c_str());
  if (bias && (bias->rank() != 1 || bias->dim(0) != c_out))
    return invalid_argument("node %s: B %s, expected [%lld]", label.c_str(), dims_to_string(bias->dims()).c_str(),
                            (long long)c_out);
  for (const Tensor* t : {&w, &offset, bias, mask})
    if (t && t->dtype() != x.dtype())
      return invalid_argument("node %s: inputs are %s and %s; they must match", label.c_str(), dtype_name(x.dtype()),
                              dtype_name(t->dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), {batch, c_out, oh, ow}));
  if (y->num_elements() == 0) return ok_status();
  const int64_t cg = c_in / s.group, mg = c_out / s.group, ch_per_og = c_in / s.offset_group;
  const int64_t positions = oh * ow;
  auto run = [&]<typename T>() {
    // Column matrix of one image: (c_in * k) rows x positions.
    std::vector<T> col(static_cast<size_t>(c_in * k * positions));
    for (int64_t n = 0; n < batch; ++n) {
      const T* xn = x.data<T>() + n * c_in * ih * iw;
      const T* off = offset.data<T>() + n * s.offset_group * 2 * k * positions;
      const T* mk = mask ? mask->data<T>() + n * s.offset_group * k * positions : nullptr;
      parallel_for(0, c_in * k, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t c = r / k, tap = r % k, i = tap / kw, j = tap % kw, og = c / ch_per_og;
          const T* oy = off + (og * 2 * k + 2 * tap) * positions;
          const T* ox = oy + positions;
          const T* m = mk ? mk + (og * k + tap) * positions : nullptr;
          T* dst = col.data() + r * positions;
          for (int64_t p = 0; p < positions; ++p) {
            const int64_t py = p / ow, px = p % ow;
            const double yy = static_cast<double>(py * g.strides[0] - g.pad_begin(0) + i * g.dilations[0]) +
                              static_cast<double>(oy[p]);
            const double xx = static_cast<double>(px * g.strides[1] - g.pad_begin(1) + j * g.dilations[1]) +
                              static_cast<double>(ox[p]);
            double v = sample(xn + c * ih * iw, ih, iw, yy, xx);
            if (m) v *= static_cast<double>(m[p]);
            dst[p] = static_cast<T>(v);
          }
        }
      });
      T* yn = y->data<T>() + n * c_out * positions;
      for (int64_t gi = 0; gi < s.group; ++gi) {
        gemm<T>(false, false, mg, positions, cg * k, T(1), w.data<T>() + gi * mg * cg * k, cg * k,
                col.data() + gi * cg * k * positions, positions, T(0), yn + gi * mg * positions, positions);
      }
      if (bias)
        for (int64_t o = 0; o < c_out; ++o)
          for (int64_t p = 0; p < positions; ++p) yn[o * positions + p] += bias->data<T>()[o];
    }
  };
  if (!dispatch_float(x.dtype(), run)) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("DeformConv")
                     .since(19)
                     .inputs(3, 5)
                     .outputs(1, 1)
                     .attr("dilations", AttrKind::kInts)
                     .attr("group", AttrKind::kInt)
                     .attr("kernel_shape", AttrKind::kInts)
                     .attr("offset_group", AttrKind::kInt)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .infer(infer_deform_conv)
                     .kernel(with_half_as_float(deform_conv_kernel)));

}  // namespace kiln::ops
