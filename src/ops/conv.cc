// Conv and ConvTranspose (ONNX opsets 1..23): schemas, shape inference and the reference
// kernels, im2col / col2im around the shared GEMM, per group, N-D (1-D, 2-D, 3-D, ...).
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "ops/gemm_util.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// im2col keeps its buffer under this many elements by splitting the output positions.
constexpr int64_t kMaxColElements = int64_t{1} << 22;

Dim dim_or_unknown(int64_t v) { return v >= 0 ? Dim(v) : Dim(); }

// ---- Conv ------------------------------------------------------------------------

struct ConvShape {
  int64_t batch = -1, c_in = -1, c_out = -1, group = 1;
  WindowGeometry geo;
};

// X needs N, C and at least one spatial dim, W as many dims as X.
Status check_conv_ranks(const std::string& label, size_t x_rank, size_t w_rank) {
  if (x_rank < 3)
    return invalid_argument("node %s: input X has rank %zu, expected >= 3 (N x C x D1 ...)", label.c_str(), x_rank);
  if (w_rank != x_rank)
    return invalid_argument("node %s: weight W has rank %zu, input X rank %zu; they must match", label.c_str(),
                            w_rank, x_rank);
  return ok_status();
}

// Validates X (N x C x D...) and W (M x C/group x k...) dims (-1 = unknown) against the
// attributes and computes the output geometry.
Expected<ConvShape> conv_shape(const ir::Node& node, const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
  const std::string label = node.label();
  ConvShape cs;
  KILN_RETURN_IF_ERROR(check_conv_ranks(label, x.size(), w.size()));
  cs.group = node.attr_int("group", 1);
  if (cs.group < 1) return invalid_argument("node %s: group %lld < 1", label.c_str(), (long long)cs.group);
  cs.batch = x[0];
  cs.c_in = x[1];
  cs.c_out = w[0];
  if (cs.c_out >= 0 && cs.c_out % cs.group != 0)
    return invalid_argument("node %s: %lld output channels (W dim 0) are not divisible by group %lld",
                            label.c_str(), (long long)cs.c_out, (long long)cs.group);
  if (cs.c_in >= 0 && w[1] >= 0 && cs.c_in != w[1] * cs.group)
    return invalid_argument("node %s: input has %lld channels but W %s with group %lld expects %lld", label.c_str(),
                            (long long)cs.c_in, dims_to_string(w).c_str(), (long long)cs.group,
                            (long long)(w[1] * cs.group));
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  bool kernel_known = std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k >= 0; });
  if (!kernel_known) kernel.clear();  // fall back to kernel_shape
  KILN_ASSIGN_OR_RETURN(cs.geo, window_geometry(node, std::vector<int64_t>(x.begin() + 2, x.end()), kernel, false));
  return cs;
}

Status infer_conv(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const ir::TensorType& wt = ctx.input_type(1);
  if (!xt.shape.has_rank() || !wt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  if (!wt.shape.is_static() && !ctx.node().has_attr("kernel_shape")) {
    // conv_shape checks the ranks on the other path; this one indexes dims 0 and 1 itself
    // (a scalar X here read past an empty shape: fuzz/regressions/onnx_import).
    KILN_RETURN_IF_ERROR(check_conv_ranks(ctx.node().label(), static_cast<size_t>(xt.shape.rank()),
                                          static_cast<size_t>(wt.shape.rank())));
    std::vector<Dim> dims(static_cast<size_t>(xt.shape.rank()));
    dims[0] = xt.shape[0];
    dims[1] = wt.shape[0];
    ctx.set_output(0, xt.dtype, Shape(std::move(dims)));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(ConvShape cs, conv_shape(ctx.node(), dims_or_unknown(xt.shape), dims_or_unknown(wt.shape)));
  std::vector<Dim> dims{xt.shape[0], wt.shape[0]};
  for (size_t d = 0; d < cs.geo.out.size(); ++d)
    dims.push_back(window_output_dim(ctx.node(), xt.shape[static_cast<int>(d) + 2], cs.geo, d));
  ctx.set_output(0, xt.dtype, Shape(std::move(dims)));
  return ok_status();
}

// Output positions are walked as "outer" rows (all spatial dims but the last) times the
// last dim, so the innermost copy is a run along the input's contiguous last dim.
struct SpatialLayout {
  std::vector<int64_t> in, out;  // spatial extents
  int64_t in_size = 1, out_size = 1, out_last = 1, outer = 1, kernel_size = 1;
};

SpatialLayout spatial_layout(const std::vector<int64_t>& in, const WindowGeometry& g) {
  SpatialLayout l;
  l.in = in;
  l.out = g.out;
  for (int64_t v : in) l.in_size *= v;
  for (int64_t v : g.out) l.out_size *= v;
  for (int64_t v : g.kernel) l.kernel_size *= v;
  l.out_last = g.out.back();
  l.outer = l.out_size / l.out_last;
  return l;
}

// Fills col rows [channels * kernel_size] x columns [(outer1 - outer0) * out_last] from x
// (channels x in spatial), zeros where the window reads padding.
template <typename T>
void im2col(const T* x, int64_t channels, const WindowGeometry& g, const SpatialLayout& l, int64_t outer0,
            int64_t outer1, T* col, bool parallel) {
  const int n = g.rank();
  const int last = n - 1;
  const int64_t cols = (outer1 - outer0) * l.out_last;
  auto rows_fn = [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> kc(static_cast<size_t>(n)), od(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / l.kernel_size;
      int64_t rem = r % l.kernel_size;
      for (int d = n - 1; d >= 0; --d) {
        kc[d] = rem % g.kernel[d];
        rem /= g.kernel[d];
      }
      const T* xc = x + c * l.in_size;
      T* dst = col + r * cols;
      for (int64_t o = outer0; o < outer1; ++o, dst += l.out_last) {
        int64_t orem = o, offset = 0, scale = l.in[last];
        bool inside = true;
        for (int d = last - 1; d >= 0; --d) {
          od[d] = orem % l.out[d];
          orem /= l.out[d];
          const int64_t id = od[d] * g.strides[d] - g.pad_begin(d) + kc[d] * g.dilations[d];
          if (id < 0 || id >= l.in[d]) inside = false;
          offset += id * scale;
          scale *= l.in[d];
        }
        if (!inside) {
          std::fill(dst, dst + l.out_last, T(0));
          continue;
        }
        const T* src = xc + offset;
        const int64_t s = g.strides[last];
        const int64_t base = kc[last] * g.dilations[last] - g.pad_begin(last);
        for (int64_t ow = 0; ow < l.out_last; ++ow) {
          const int64_t iw = ow * s + base;
          dst[ow] = iw >= 0 && iw < l.in[last] ? src[iw] : T(0);
        }
      }
    }
  };
  if (parallel) {
    parallel_for(0, channels * l.kernel_size, 4, rows_fn);
  } else {
    rows_fn(0, channels * l.kernel_size);
  }
}

template <typename T>
void conv_forward(const T* x, const T* w, const T* bias, T* y, const ConvShape& cs, const SpatialLayout& l) {
  const WindowGeometry& g = cs.geo;
  const int64_t cin_g = cs.c_in / cs.group, cout_g = cs.c_out / cs.group;
  const int64_t k_g = cin_g * l.kernel_size;
  bool pointwise = l.kernel_size == 1 && l.in_size == l.out_size;
  for (int d = 0; d < g.rank(); ++d)
    pointwise = pointwise && g.strides[d] == 1 && g.pads[d] == 0 && g.pad_begin(d) == 0 && g.pad_end(d) == 0;
  const int64_t outer_chunk = std::max<int64_t>(1, kMaxColElements / std::max<int64_t>(1, k_g * l.out_last));

  auto run_group = [&](int64_t n, int64_t grp, std::vector<T>& buf, bool parallel) {
    const T* xg = x + (n * cs.c_in + grp * cin_g) * l.in_size;
    const T* wg = w + grp * cout_g * k_g;
    T* yg = y + (n * cs.c_out + grp * cout_g) * l.out_size;
    if (pointwise) {  // a 1x1 stride-1 unpadded conv is a plain GEMM on the input
      gemm<T>(false, false, cout_g, l.out_size, k_g, T(1), wg, k_g, xg, l.in_size, T(0), yg, l.out_size, parallel);
      return;
    }
    for (int64_t o0 = 0; o0 < l.outer; o0 += outer_chunk) {
      const int64_t o1 = std::min(l.outer, o0 + outer_chunk);
      const int64_t cols = (o1 - o0) * l.out_last;
      buf.resize(static_cast<size_t>(k_g * cols));
      im2col(xg, cin_g, g, l, o0, o1, buf.data(), parallel);
      gemm<T>(false, false, cout_g, cols, k_g, T(1), wg, k_g, buf.data(), cols, T(0), yg + o0 * l.out_last,
              l.out_size, parallel);
    }
  };
  const int64_t jobs = cs.batch * cs.group;
  if (cs.group > 1 && jobs >= 2 * num_threads()) {
    // Many small groups (depthwise): one group per task, each with its own buffer.
    parallel_for(0, jobs, 1, [&](int64_t j0, int64_t j1) {
      std::vector<T> buf;
      for (int64_t j = j0; j < j1; ++j) run_group(j / cs.group, j % cs.group, buf, false);
    });
  } else {
    std::vector<T> buf;
    for (int64_t j = 0; j < jobs; ++j) run_group(j / cs.group, j % cs.group, buf, true);
  }
  if (bias) {
    parallel_for(0, cs.batch * cs.c_out, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T b = bias[r % cs.c_out];
        T* row = y + r * l.out_size;
        for (int64_t i = 0; i < l.out_size; ++i) row[i] += b;
      }
    });
  }
}

Status check_bias(const ir::Node& node, const Tensor* b, const Tensor& x, int64_t channels) {
  if (!b) return ok_status();
  if (b->dtype() != x.dtype())
    return invalid_argument("node %s: bias dtype %s differs from input dtype %s", node.label().c_str(),
                            dtype_name(b->dtype()), dtype_name(x.dtype()));
  if (b->rank() != 1 || b->dim(0) != channels)
    return invalid_argument("node %s: bias has shape %s, expected [%lld]", node.label().c_str(),
                            dims_to_string(b->dims()).c_str(), (long long)channels);
  return ok_status();
}

Status check_weight(const ir::Node& node, const Tensor& w, const Tensor& x) {
  if (w.dtype() != x.dtype())
    return invalid_argument("node %s: weight dtype %s differs from input dtype %s", node.label().c_str(),
                            dtype_name(w.dtype()), dtype_name(x.dtype()));
  for (int64_t d : w.dims())
    if (d == 0) return invalid_argument("node %s: weight %s is empty", node.label().c_str(),
                                        dims_to_string(w.dims()).c_str());
  return ok_status();
}

Status conv_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor* b = ctx.input(2);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 3));
  KILN_RETURN_IF_ERROR(check_weight(node, w, x));
  KILN_ASSIGN_OR_RETURN(ConvShape cs, conv_shape(node, x.dims(), w.dims()));
  KILN_RETURN_IF_ERROR(check_bias(node, b, x, cs.c_out));
  std::vector<int64_t> out_dims{cs.batch, cs.c_out};
  out_dims.insert(out_dims.end(), cs.geo.out.begin(), cs.geo.out.end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  if (y->num_elements() == 0) return ok_status();
  SpatialLayout l = spatial_layout(std::vector<int64_t>(x.dims().begin() + 2, x.dims().end()), cs.geo);
  dispatch_float(x.dtype(), [&]<typename T>() {
    conv_forward<T>(x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y->data<T>(), cs, l);
  });
  return ok_status();
}

// ---- ConvTranspose ---------------------------------------------------------------

// Validates X (N x C x D...) and W (C x M/group x k...) and computes pads and output
// extents from output_shape, auto_pad or pads, with output_padding.
Expected<ConvShape> conv_transpose_shape(const ir::Node& node, const std::vector<int64_t>& x,
                                         const std::vector<int64_t>& w) {
  const std::string label_str = node.label();
  const char* label = label_str.c_str();
  ConvShape cs;
  if (x.size() < 3)
    return invalid_argument("node %s: input X has rank %zu, expected >= 3 (N x C x D1 ...)", label, x.size());
  if (w.size() != x.size())
    return invalid_argument("node %s: weight W has rank %zu, input X rank %zu; they must match", label, w.size(),
                            x.size());
  const size_t n = x.size() - 2;
  cs.group = node.attr_int("group", 1);
  if (cs.group < 1) return invalid_argument("node %s: group %lld < 1", label, (long long)cs.group);
  cs.batch = x[0];
  cs.c_in = x[1];
  cs.c_out = w[1] >= 0 ? w[1] * cs.group : -1;
  if (cs.c_in >= 0 && w[0] >= 0 && cs.c_in != w[0])
    return invalid_argument("node %s: input has %lld channels, W %s expects %lld", label, (long long)cs.c_in,
                            dims_to_string(w).c_str(), (long long)w[0]);
  if (w[0] >= 0 && w[0] % cs.group != 0)
    return invalid_argument("node %s: %lld input channels are not divisible by group %lld", label,
                            (long long)w[0], (long long)cs.group);
  WindowGeometry& g = cs.geo;
  g.kernel.assign(w.begin() + 2, w.end());
  if (node.has_attr("kernel_shape")) {
    std::vector<int64_t> ks = node.attr_ints("kernel_shape");
    if (ks.size() != n) return invalid_argument("node %s: kernel_shape has %zu dims, expected %zu", label, ks.size(), n);
    for (size_t d = 0; d < n; ++d) {
      if (g.kernel[d] >= 0 && ks[d] != g.kernel[d])
        return invalid_argument("node %s: kernel_shape %s does not match W %s", label, dims_to_string(ks).c_str(),
                                dims_to_string(w).c_str());
      g.kernel[d] = ks[d];
    }
  }
  g.strides = node.attr_ints("strides", std::vector<int64_t>(n, 1));
  g.dilations = node.attr_ints("dilations", std::vector<int64_t>(n, 1));
  g.pads = node.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> out_pad = node.attr_ints("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> out_shape = node.attr_ints("output_shape");
  if (out_shape.size() == n + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (g.strides.size() != n || g.dilations.size() != n || g.pads.size() != 2 * n || out_pad.size() != n ||
      (!out_shape.empty() && out_shape.size() != n))
    return invalid_argument("node %s: strides/dilations/output_padding need %zu values, pads %zu, output_shape %zu",
                            label, n, 2 * n, n);
  for (size_t d = 0; d < n; ++d) {
    if (g.strides[d] < 1 || g.dilations[d] < 1)
      return invalid_argument("node %s: strides and dilations must be >= 1, got %s and %s", label,
                              dims_to_string(g.strides).c_str(), dims_to_string(g.dilations).c_str());
    if (g.kernel[d] == 0) return invalid_argument("node %s: kernel extent 0", label);
    if (out_pad[d] < 0 || out_pad[d] >= std::max(g.strides[d], g.dilations[d]))
      return invalid_argument("node %s: output_padding %lld must be in [0, max(stride, dilation))", label,
                              (long long)out_pad[d]);
  }
  for (int64_t p : g.pads)
    if (p < 0) return invalid_argument("node %s: negative pad %lld", label, (long long)p);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return invalid_argument("node %s: unknown auto_pad '%s'", label, auto_pad.c_str());
  g.out.assign(n, -1);
  for (size_t d = 0; d < n; ++d) {
    const int64_t in = x[d + 2];
    if (in < 0 || g.kernel[d] < 0) continue;
    const int64_t dk = (g.kernel[d] - 1) * g.dilations[d] + 1;
    const int64_t full = g.strides[d] * (in - 1) + out_pad[d] + dk;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t target = out_shape.empty() ? in * g.strides[d] : out_shape[d];
      // An output_shape beyond the full output gives negative padding: the extra positions
      // (at the end, as the ONNX reference places them) get no contribution, only the bias.
      const int64_t total = full - target;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
      if (total < 0 && (auto_pad == "NOTSET" || auto_pad == "VALID"))
        g.pads[d] = 0;
      else
        g.pads[d] = auto_pad == "SAME_UPPER" ? half : total - half;
      g.pads[d + n] = total - g.pads[d];
      g.out[d] = target;
    } else {
      if (auto_pad == "VALID") g.pads[d] = g.pads[d + n] = 0;
      g.out[d] = full - g.pads[d] - g.pads[d + n];
    }
    if (g.out[d] < 1)
      return invalid_argument("node %s: output extent %lld on spatial dim %zu is not positive", label,
                              (long long)g.out[d], d);
  }
  return cs;
}

Status infer_conv_transpose(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const ir::TensorType& wt = ctx.input_type(1);
  if (!xt.shape.has_rank() || !wt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(ConvShape cs,
                        conv_transpose_shape(ctx.node(), dims_or_unknown(xt.shape), dims_or_unknown(wt.shape)));
  std::vector<Dim> dims{xt.shape[0], dim_or_unknown(cs.c_out)};
  for (int64_t o : cs.geo.out) dims.push_back(dim_or_unknown(o));
  ctx.set_output(0, xt.dtype, Shape(std::move(dims)));
  return ok_status();
}

// Adds col rows (channels * kernel_size) x (input positions) into y (channels x out spatial).
template <typename T>
void col2im(const T* col, int64_t channels, const WindowGeometry& g, const std::vector<int64_t>& in,
            int64_t in_size, int64_t kernel_size, int64_t out_size, T* y) {
  const int n = g.rank();
  parallel_for(0, channels, 1, [&](int64_t c0, int64_t c1) {
    std::vector<int64_t> kc(static_cast<size_t>(n)), id(static_cast<size_t>(n));
    for (int64_t c = c0; c < c1; ++c) {
      T* yc = y + c * out_size;
      for (int64_t kr = 0; kr < kernel_size; ++kr) {
        int64_t rem = kr;
        for (int d = n - 1; d >= 0; --d) {
          kc[d] = rem % g.kernel[d];
          rem /= g.kernel[d];
        }
        const T* src = col + (c * kernel_size + kr) * in_size;
        std::fill(id.begin(), id.end(), 0);
        for (int64_t i = 0; i < in_size; ++i) {
          int64_t offset = 0;
          bool inside = true;
          for (int d = 0; d < n; ++d) {
            const int64_t od = id[d] * g.strides[d] - g.pad_begin(d) + kc[d] * g.dilations[d];
            if (od < 0 || od >= g.out[d]) {
              inside = false;
              break;
            }
            offset = offset * g.out[d] + od;
          }
          if (inside) yc[offset] += src[i];
          for (int d = n - 1; d >= 0; --d) {
            if (++id[d] < in[d]) break;
            id[d] = 0;
          }
        }
      }
    }
  });
}

template <typename T>
void conv_transpose_forward(const T* x, const T* w, const T* bias, T* y, const ConvShape& cs,
                            const std::vector<int64_t>& in) {
  const WindowGeometry& g = cs.geo;
  int64_t in_size = 1, out_size = 1, kernel_size = 1;
  for (int64_t v : in) in_size *= v;
  for (int64_t v : g.out) out_size *= v;
  for (int64_t v : g.kernel) kernel_size *= v;
  const int64_t cin_g = cs.c_in / cs.group, cout_g = cs.c_out / cs.group;
  const int64_t rows = cout_g * kernel_size;
  std::vector<T> col(static_cast<size_t>(rows * in_size));
  for (int64_t n = 0; n < cs.batch; ++n) {
    for (int64_t grp = 0; grp < cs.group; ++grp) {
      // col = W_g^T * X_g: each input position spreads over cout_g x kernel outputs.
      gemm<T>(true, false, rows, in_size, cin_g, T(1), w + grp * cin_g * rows, rows,
              x + (n * cs.c_in + grp * cin_g) * in_size, in_size, T(0), col.data(), in_size);
      col2im(col.data(), cout_g, g, in, in_size, kernel_size, out_size,
             y + (n * cs.c_out + grp * cout_g) * out_size);
    }
  }
  if (bias) {
    for (int64_t r = 0; r < cs.batch * cs.c_out; ++r) {
      const T b = bias[r % cs.c_out];
      T* row = y + r * out_size;
      for (int64_t i = 0; i < out_size; ++i) row[i] += b;
    }
  }
}

Status conv_transpose_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor* b = ctx.input(2);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 3));
  KILN_RETURN_IF_ERROR(check_weight(node, w, x));
  KILN_ASSIGN_OR_RETURN(ConvShape cs, conv_transpose_shape(node, x.dims(), w.dims()));
  KILN_RETURN_IF_ERROR(check_bias(node, b, x, cs.c_out));
  std::vector<int64_t> out_dims{cs.batch, cs.c_out};
  out_dims.insert(out_dims.end(), cs.geo.out.begin(), cs.geo.out.end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  if (y->num_elements() == 0 || x.num_elements() == 0) return ok_status();
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  dispatch_float(x.dtype(), [&]<typename T>() {
    conv_transpose_forward<T>(x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y->data<T>(), cs, in);
  });
  return ok_status();
}

OpSchema conv_schema(const char* name) {
  return OpSchema(name)
      .since(1)
      .inputs(2, 3)
      .outputs(1, 1)
      .attr("auto_pad", AttrKind::kString)
      .attr("dilations", AttrKind::kInts)
      .attr("group", AttrKind::kInt)
      .attr("kernel_shape", AttrKind::kInts)
      .attr("pads", AttrKind::kInts)
      .attr("strides", AttrKind::kInts);
}

}  // namespace

KILN_REGISTER_OP(conv_schema("Conv").infer(infer_conv).kernel(with_half_as_float(conv_kernel)));
KILN_REGISTER_OP(conv_schema("ConvTranspose")
                     .attr("output_padding", AttrKind::kInts)
                     .attr("output_shape", AttrKind::kInts)
                     .infer(infer_conv_transpose)
                     .kernel(with_half_as_float(conv_transpose_kernel)));

}  // namespace kiln::ops
