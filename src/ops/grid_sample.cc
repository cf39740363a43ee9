// Spatial sampling by a grid (ONNX opsets 16..27): GridSample (linear / nearest / cubic,
// zeros / border / reflection padding, align_corners, N-D from opset 20) and AffineGrid
// (opset 20), which builds the grid GridSample reads.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

enum class SampleMode { kLinear, kNearest, kCubic };
enum class PaddingMode { kZeros, kBorder, kReflection };

// Opset 16 spells the modes bilinear / bicubic, opset 20 linear / cubic; both are
// accepted at any opset since they name the same interpolation.
Expected<SampleMode> sample_mode(const ir::Node& node) {
  const std::string m = node.attr_string("mode", node.opset() >= 20 ? "linear" : "bilinear");
  if (m == "linear" || m == "bilinear") return SampleMode::kLinear;
  if (m == "nearest") return SampleMode::kNearest;
  if (m == "cubic" || m == "bicubic") return SampleMode::kCubic;
  return invalid_argument("node %s: mode '%s' is not linear, nearest or cubic", node.label().c_str(), m.c_str());
}

Expected<PaddingMode> padding_mode(const ir::Node& node) {
  const std::string p = node.attr_string("padding_mode", "zeros");
  if (p == "zeros") return PaddingMode::kZeros;
  if (p == "border") return PaddingMode::kBorder;
  if (p == "reflection") return PaddingMode::kReflection;
  return invalid_argument("node %s: padding_mode '%s' is not zeros, border or reflection", node.label().c_str(),
                          p.c_str());
}

// X is N x C x D1..Dn, Grid is N x O1..Om x n (m = n); Y is N x C x O1..Om.
Status infer_grid_sample(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const ir::TensorType& gt = ctx.input_type(1);
  const std::string label = ctx.node().label();
  if (!xt.shape.has_rank() || !gt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const int r = xt.shape.rank();
  if (r < 3)
    return invalid_argument("node %s: X has rank %d, expected >= 3 (N x C x D1 ...)", label.c_str(), r);
  if (gt.shape.rank() != r)
    return invalid_argument("node %s: Grid has rank %d, X rank %d; they must match", label.c_str(), gt.shape.rank(),
                            r);
  const Dim& last = gt.shape[r - 1];
  if (last.is_static() && last.value != r - 2)
    return invalid_argument("node %s: Grid's last dim is %lld, expected %d (one coordinate per spatial dim)",
                            label.c_str(), (long long)last.value, r - 2);
  std::vector<Dim> dims{xt.shape[0], xt.shape[1]};
  for (int i = 1; i < r - 1; ++i) dims.push_back(gt.shape[i]);
  ctx.set_output(0, xt.dtype, Shape(dims));
  return ok_status();
}

// Reflects x into [lo, hi] by bouncing off the nearer border (PyTorch's reflect_coordinates).
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// Keys' cubic convolution weights (A = -0.75) of the 4 taps at floor(x)-1 .. floor(x)+2.
void cubic_weights(double t, double w[4]) {
  constexpr double a = -0.75;
  auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

struct GridSampler {
  SampleMode mode;
  PaddingMode padding;
  bool align_corners;
  std::vector<int64_t> in;  // spatial extents D1..Dn
  std::vector<double> lo, hi;  // reflection borders per dim

  // Maps a tap index to an element index along dim d, or -1 for a zero (padding) tap.
  int64_t tap(int d, int64_t i) const {
    const int64_t n = in[static_cast<size_t>(d)];
    switch (padding) {
      case PaddingMode::kZeros: return i >= 0 && i < n ? i : -1;
      case PaddingMode::kBorder: return std::clamp<int64_t>(i, 0, n - 1);
      case PaddingMode::kReflection: {
        const int64_t r = static_cast<int64_t>(reflect(static_cast<double>(i), lo[d], hi[d]));
        return std::clamp<int64_t>(r, 0, n - 1);
      }
    }
    return -1;
  }
};

template <typename T>
void grid_sample_run(const GridSampler& s, const T* x, const T* grid, T* y, int64_t batch, int64_t channels,
                     int64_t out_points) {
  const int n = static_cast<int>(s.in.size());
  int64_t in_size = 1;
  for (int64_t v : s.in) in_size *= v;
  std::vector<int64_t> in_stride(static_cast<size_t>(n), 1);
  for (int d = n - 2; d >= 0; --d) in_stride[d] = in_stride[d + 1] * s.in[d + 1];
  const int taps = s.mode == SampleMode::kLinear ? 2 : s.mode == SampleMode::kCubic ? 4 : 1;
  int64_t corners = 1;
  for (int d = 0; d < n; ++d) corners *= taps;
  parallel_for(0, batch * out_points, 16, [&](int64_t p0, int64_t p1) {
    // Per dim: the element index and weight of each tap.
    std::vector<int64_t> idx(static_cast<size_t>(n * taps));
    std::vector<double> wt(static_cast<size_t>(n * taps));
    std::vector<int> k(static_cast<size_t>(n));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / out_points, o = p % out_points;
      const T* g = grid + p * n;
      for (int d = 0; d < n; ++d) {
        const int64_t len = s.in[static_cast<size_t>(d)];
        // The grid's last axis is (x, y, z...): innermost spatial dim first.
        const double gn = static_cast<double>(g[n - 1 - d]);
        double c = s.align_corners ? (gn + 1) / 2.0 * static_cast<double>(len - 1)
                                   : ((gn + 1) * static_cast<double>(len) - 1) / 2.0;
        // NaN samples padding; huge values are bounded so that integer casts stay defined.
        c = std::isnan(c) ? -2.0 : std::clamp(c, -1e9, 1e9);
        if (s.mode == SampleMode::kNearest) {
          // Half to even (the ONNX reference's rint) in every rank; PyTorch's 3-D kernel
          // rounds half away from zero, which the ONNX test data does not follow.
          c = std::nearbyint(c);
        }
        if (c < s.lo[d] || c > s.hi[d]) {
          if (s.padding == PaddingMode::kBorder)
            c = std::clamp(c, 0.0, static_cast<double>(len - 1));
          else if (s.padding == PaddingMode::kReflection)
            c = reflect(c, s.lo[d], s.hi[d]);
        }
        int64_t* id = &idx[static_cast<size_t>(d * taps)];
        double* w = &wt[static_cast<size_t>(d * taps)];
        if (s.mode == SampleMode::kNearest) {
          // Coordinates far outside are treated as out of range (zeros) or clamped.
          const double cl = std::clamp(c, -2.0, static_cast<double>(len) + 1.0);
          id[0] = s.tap(d, static_cast<int64_t>(cl));
          w[0] = 1;
          continue;
        }
        const double f = std::floor(c);
        const double t = c - f;
        // Far-away coordinates only ever touch padding: keep the integer taps in range.
        const int64_t base = static_cast<int64_t>(std::clamp(f, -4.0, static_cast<double>(len) + 4.0));
        if (s.mode == SampleMode::kLinear) {
          id[0] = s.tap(d, base);
          id[1] = s.tap(d, base + 1);
          w[0] = 1 - t;
          w[1] = t;
        } else {
          for (int j = 0; j < 4; ++j) id[j] = s.tap(d, base - 1 + j);
          cubic_weights(t, w);
        }
      }
      for (int64_t c = 0; c < channels; ++c) {
        const T* xc = x + (b * channels + c) * in_size;
        double acc = 0;
        std::fill(k.begin(), k.end(), 0);
        for (int64_t corner = 0; corner < corners; ++corner) {
          double w = 1;
          int64_t off = 0;
          for (int d = 0; d < n; ++d) {
            const int64_t i = idx[static_cast<size_t>(d * taps + k[d])];
            if (i < 0) {
              off = -1;
              break;
            }
            off += i * in_stride[d];
            w *= wt[static_cast<size_t>(d * taps + k[d])];
          }
          if (off >= 0) acc += w * static_cast<double>(xc[off]);
          for (int d = n - 1; d >= 0; --d) {
            if (++k[d] < taps) break;
            k[d] = 0;
          }
        }
        y[(b * channels + c) * out_points + o] = static_cast<T>(acc);
      }
    }
  });
}

Status grid_sample_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  const Tensor& grid = *ctx.input(1);
  const int r = x.rank();
  if (r < 3) return invalid_argument("node %s: X has rank %d, expected >= 3 (N x C x D1 ...)", label.c_str(), r);
  if (node.opset() < 20 && r != 4)
    return invalid_argument("node %s: GridSample-%lld takes 4-D X, got %s", label.c_str(), (long long)node.opset(),
                            dims_to_string(x.dims()).c_str());
  if (grid.rank() != r || grid.dim(0) != x.dim(0) || grid.dim(r - 1) != r - 2)
    return invalid_argument("node %s: Grid %s does not fit X %s (expected N x O1..O%d x %d)", label.c_str(),
                            dims_to_string(grid.dims()).c_str(), dims_to_string(x.dims()).c_str(), r - 2, r - 2);
  if (grid.dtype() != x.dtype())
    return invalid_argument("node %s: Grid is %s, X is %s; they must match", label.c_str(), dtype_name(grid.dtype()),
                            dtype_name(x.dtype()));
  GridSampler s;
  KILN_ASSIGN_OR_RETURN(s.mode, sample_mode(node));
  KILN_ASSIGN_OR_RETURN(s.padding, padding_mode(node));
  s.align_corners = node.attr_int("align_corners", 0) != 0;
  s.in.assign(x.dims().begin() + 2, x.dims().end());
  for (int64_t len : s.in) {
    s.lo.push_back(s.align_corners ? 0.0 : -0.5);
    s.hi.push_back(s.align_corners ? static_cast<double>(len) - 1 : static_cast<double>(len) - 0.5);
  }
  std::vector<int64_t> out_dims{x.dim(0), x.dim(1)};
  for (int i = 1; i < r - 1; ++i) out_dims.push_back(grid.dim(i));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  if (y->num_elements() == 0) return ok_status();
  for (int64_t len : s.in)
    if (len == 0) return invalid_argument("node %s: X %s has an empty spatial dim", label.c_str(),
                                          dims_to_string(x.dims()).c_str());
  const int64_t out_points = y->num_elements() / (x.dim(0) * x.dim(1));
  auto run = [&]<typename T>() {
    grid_sample_run<T>(s, x.data<T>(), grid.data<T>(), y->data<T>(), x.dim(0), x.dim(1), out_points);
  };
  if (!dispatch_float(x.dtype(), run)) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

// ---- AffineGrid ------------------------------------------------------------------

// theta is N x 2 x 3 (2-D) or N x 3 x 4 (3-D); size is (N, C, H, W) or (N, C, D, H, W).
Status infer_affine_grid(InferContext& ctx) {
  const ir::TensorType& tt = ctx.input_type(0);
  const std::string label = ctx.node().label();
  if (tt.shape.has_rank() && tt.shape.rank() != 3)
    return invalid_argument("node %s: theta has rank %d, expected 3 (N x n x n+1)", label.c_str(), tt.shape.rank());
  std::optional<std::vector<int64_t>> size = constant_ints(ctx, 1);
  if (size) {
    if (size->size() != 4 && size->size() != 5)
      return invalid_argument("node %s: size has %zu values, expected 4 or 5", label.c_str(), size->size());
    std::vector<Dim> dims{Dim((*size)[0])};
    for (size_t i = 2; i < size->size(); ++i) dims.push_back(Dim((*size)[i]));
    dims.push_back(Dim(static_cast<int64_t>(size->size()) - 2));
    ctx.set_output(0, tt.dtype, Shape(dims));
    return ok_status();
  }
  const ir::TensorType& st = ctx.input_type(1);
  if (st.shape.has_rank() && st.shape.rank() == 1 && st.shape[0].is_static()) {
    const int64_t n = st.shape[0].value;
    if (n != 4 && n != 5) return invalid_argument("node %s: size has %lld values, expected 4 or 5", label.c_str(),
                                                  (long long)n);
    Shape out = unknown_dims(n - 1);
    if (tt.shape.has_rank()) out[0] = tt.shape[0];
    out[static_cast<int>(n) - 2] = Dim(n - 2);
    ctx.set_output(0, tt.dtype, out);
    return ok_status();
  }
  ctx.set_output(0, tt.dtype, Shape::unknown_rank());
  return ok_status();
}

Status affine_grid_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& theta = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, int_list_input(ctx, 1));
  if (size.size() != 4 && size.size() != 5)
    return invalid_argument("node %s: size has %zu values, expected 4 or 5", label.c_str(), size.size());
  const int n = static_cast<int>(size.size()) - 2;
  for (int64_t v : size)
    if (v < 0) return invalid_argument("node %s: size has a negative value", label.c_str());
  if (theta.rank() != 3 || theta.dim(0) != size[0] || theta.dim(1) != n || theta.dim(2) != n + 1)
    return invalid_argument("node %s: theta %s does not fit size (expected [%lld,%d,%d])", label.c_str(),
                            dims_to_string(theta.dims()).c_str(), (long long)size[0], n, n + 1);
  const bool align = node.attr_int("align_corners", 0) != 0;
  std::vector<int64_t> spatial(size.begin() + 2, size.end());
  std::vector<int64_t> out_dims{size[0]};
  out_dims.insert(out_dims.end(), spatial.begin(), spatial.end());
  out_dims.push_back(n);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, theta.dtype(), out_dims));
  if (y->num_elements() == 0) return ok_status();
  // Base coordinate of position i along an axis of `len` points, in [-1, 1].
  auto base = [&](int64_t i, int64_t len) -> double {
    if (align) return len > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1) : -1.0;
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len) - 1.0;
  };
  const int64_t points = num_elements(spatial);
  auto run = [&]<typename T>() {
    const T* th = theta.data<T>();
    T* out = y->data<T>();
    std::vector<double> v(static_cast<size_t>(n + 1));
    for (int64_t b = 0; b < size[0]; ++b) {
      const T* m = th + b * n * (n + 1);
      for (int64_t p = 0; p < points; ++p) {
        // v = (x, y[, z], 1) where x runs along the innermost spatial dim.
        int64_t rem = p;
        for (int d = n - 1; d >= 0; --d) {
          const int64_t len = spatial[static_cast<size_t>(d)];
          v[static_cast<size_t>(n - 1 - d)] = base(rem % len, len);
          rem /= len;
        }
        v[static_cast<size_t>(n)] = 1;
        T* dst = out + (b * points + p) * n;
        for (int r = 0; r < n; ++r) {
          double acc = 0;
          for (int c = 0; c <= n; ++c) acc += static_cast<double>(m[r * (n + 1) + c]) * v[static_cast<size_t>(c)];
          dst[r] = static_cast<T>(acc);
        }
      }
    }
  };
  if (!dispatch_float(theta.dtype(), run)) return unsupported_dtype(node, theta.dtype());
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("GridSample")
                     .since(16)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("align_corners", AttrKind::kInt)
                     .attr("mode", AttrKind::kString)
                     .attr("padding_mode", AttrKind::kString)
                     .infer(infer_grid_sample)
                     .kernel(with_half_as_float(grid_sample_kernel)));
KILN_REGISTER_OP(OpSchema("AffineGrid")
                     .since(20)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("align_corners", AttrKind::kInt)
                     .infer(infer_affine_grid)
                     .kernel(with_half_as_float(affine_grid_kernel)));

}  // namespace kiln::ops
