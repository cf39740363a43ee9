// Resize (ONNX opsets 10..23) and Upsample (7, 9): nearest (every nearest_mode), n-D
// linear and cubic (cubic_coeff_a, exclude_outside, antialias), every
// coordinate_transformation_mode, scales or sizes, axes and keep_aspect_ratio_policy.
//
// The resampling is separable: per resized axis and output index the kernel computes a
// short list of (input index, weight) taps once, then every output element is the sum
// over the product of its axes' taps. The formulas follow the ONNX reference
// implementation (onnx/reference/ops/op_resize.py), including its use of the unrounded
// output length scale * input_length in the coordinate transforms.
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

enum class InterpMode { kNearest, kLinear, kCubic };

struct ResizeParams {
  InterpMode mode = InterpMode::kNearest;
  std::string coord_mode = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  bool legacy_nearest = false;  // Upsample and Resize-10: floor up, ceil down (as ONNX Runtime)
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  bool antialias = false;
  std::vector<double> scales;           // per input axis
  std::vector<double> roi_start, roi_end;  // per input axis
  std::vector<int64_t> out;             // per input axis
};

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = t.element_as_double(i);
  return v;
}

bool present(const Tensor* t) { return t && t->num_elements() > 0; }

// Reads attributes and the roi / scales / sizes inputs (any may be null) for an input of
// dims `in` and computes the output extents.
Expected<ResizeParams> resize_params(const ir::Node& node, const std::vector<int64_t>& in, const Tensor* roi,
                                     const Tensor* scales, const Tensor* sizes) {
  const std::string label_str = node.label();
  const char* label = label_str.c_str();
  const int rank = static_cast<int>(in.size());
  const bool upsample = node.op_type() == "Upsample";
  const bool legacy = upsample || node.opset() < 11;
  ResizeParams p;
  const std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest") {
    p.mode = InterpMode::kNearest;
  } else if (mode == "linear" || (upsample && mode == "bilinear")) {
    p.mode = InterpMode::kLinear;
  } else if (mode == "cubic" && !legacy) {
    p.mode = InterpMode::kCubic;
  } else {
    return invalid_argument("node %s: unsupported mode '%s'", label, mode.c_str());
  }
  if (legacy) {
    p.coord_mode = "asymmetric";
    p.legacy_nearest = true;
  } else {
    p.coord_mode = node.attr_string("coordinate_transformation_mode", "half_pixel");
    static const char* kCoordModes[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    if (std::find(std::begin(kCoordModes), std::end(kCoordModes), p.coord_mode) == std::end(kCoordModes) ||
        (p.coord_mode == "half_pixel_symmetric" && node.opset() < 19) ||
        (p.coord_mode == "tf_half_pixel_for_nn" && node.opset() >= 13))
      return invalid_argument("node %s: coordinate_transformation_mode '%s' is not valid at opset %lld", label,
                              p.coord_mode.c_str(), (long long)node.opset());
    p.nearest_mode = node.attr_string("nearest_mode", "round_prefer_floor");
    if (p.nearest_mode != "round_prefer_floor" && p.nearest_mode != "round_prefer_ceil" && p.nearest_mode != "floor" &&
        p.nearest_mode != "ceil")
      return invalid_argument("node %s: unknown nearest_mode '%s'", label, p.nearest_mode.c_str());
    p.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
    p.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
    p.extrapolation = node.attr_float("extrapolation_value", 0.0f);
    p.antialias = node.attr_int("antialias", 0) != 0;
  }
  // Axes the scales / sizes / roi refer to (opset 18); all axes otherwise.
  std::vector<int> axes;
  if (node.has_attr("axes")) {
    for (int64_t a : node.attr_ints("axes")) {
      KILN_ASSIGN_OR_RETURN(int ax, normalize_axis(node, a, rank));
      if (std::find(axes.begin(), axes.end(), ax) != axes.end())
        return invalid_argument("node %s: axis %d is repeated in axes", label, ax);
      axes.push_back(ax);
    }
  } else {
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  const size_t na = axes.size();
  p.scales.assign(static_cast<size_t>(rank), 1.0);
  p.roi_start.assign(static_cast<size_t>(rank), 0.0);
  p.roi_end.assign(static_cast<size_t>(rank), 1.0);
  p.out = in;
  if (p.coord_mode == "tf_crop_and_resize" && present(roi)) {
    std::vector<double> r = doubles_of(*roi);
    if (r.size() != 2 * na)
      return invalid_argument("node %s: roi has %zu values, expected %zu", label, r.size(), 2 * na);
    for (size_t i = 0; i < na; ++i) {
      p.roi_start[static_cast<size_t>(axes[i])] = r[i];
      p.roi_end[static_cast<size_t>(axes[i])] = r[i + na];
    }
  }
  if (upsample && node.opset() < 9) {
    std::vector<float> s = node.attr_floats("scales");
    if (s.size() != static_cast<size_t>(rank))
      return invalid_argument("node %s: scales attribute has %zu values, input rank %d", label, s.size(), rank);
    for (int i = 0; i < rank; ++i) p.scales[static_cast<size_t>(i)] = s[static_cast<size_t>(i)];
  } else if (present(scales) && present(sizes)) {
    return invalid_argument("node %s: only one of scales and sizes may be given", label);
  } else if (present(scales)) {
    std::vector<double> s = doubles_of(*scales);
    if (s.size() != na)
      return invalid_argument("node %s: scales has %zu values, expected %zu", label, s.size(), na);
    for (size_t i = 0; i < na; ++i) p.scales[static_cast<size_t>(axes[i])] = s[i];
  } else if (present(sizes)) {
    if (sizes->dtype() != DataType::kInt64)
      return invalid_argument("node %s: sizes must be int64, got %s", label, dtype_name(sizes->dtype()));
    std::vector<int64_t> s = sizes->to_int64_vector();
    if (s.size() != na)
      return invalid_argument("node %s: sizes has %zu values, expected %zu", label, s.size(), na);
    for (int64_t v : s)
      if (v < 1) return invalid_argument("node %s: sizes %s has a value < 1", label, dims_to_string(s).c_str());
    const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < na; ++i) {
        const size_t ax = static_cast<size_t>(axes[i]);
        p.out[ax] = s[i];
        p.scales[ax] = in[ax] > 0 ? static_cast<double>(s[i]) / static_cast<double>(in[ax]) : 1.0;
      }
      return p;
    }
    if (policy != "not_larger" && policy != "not_smaller")
      return invalid_argument("node %s: unknown keep_aspect_ratio_policy '%s'", label, policy.c_str());
    // One scale for every axis: the largest that fits (not_larger) or the smallest that covers.
    double scale = policy == "not_larger" ? 1e300 : 0.0;
    for (size_t i = 0; i < na; ++i) {
      const double r = static_cast<double>(s[i]) / static_cast<double>(std::max<int64_t>(1, in[static_cast<size_t>(axes[i])]));
      scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
    }
    for (int ax : axes) {
      p.scales[static_cast<size_t>(ax)] = scale;
      p.out[static_cast<size_t>(ax)] = static_cast<int64_t>(std::nearbyint(scale * static_cast<double>(in[static_cast<size_t>(ax)])));
    }
    return p;
  } else {
    return invalid_argument("node %s: one of scales and sizes must be given", label);
  }
  for (int i = 0; i < rank; ++i) {
    const double s = p.scales[static_cast<size_t>(i)];
    if (!(s > 0) || !std::isfinite(s))
      return invalid_argument("node %s: scale %g on axis %d must be positive", label, s, i);
    if (upsample && s < 1) return invalid_argument("node %s: Upsample scale %g on axis %d is < 1", label, s, i);
    const double o = std::floor(static_cast<double>(in[static_cast<size_t>(i)]) * s);
    if (o > 1e15) return invalid_argument("node %s: output extent on axis %d is too large", label, i);
    p.out[static_cast<size_t>(i)] = static_cast<int64_t>(o);
  }
  return p;
}

struct Tap {
  int64_t index;
  double weight;
};

// Where output index x of an axis samples the input (the coordinate transformation).
double original_coordinate(const ResizeParams& p, int64_t x_int, int64_t in, int64_t out_int, double scale,
                           double start, double end) {
  const double x = static_cast<double>(x_int);
  const double out = scale * static_cast<double>(in);  // unrounded, as the reference
  const std::string& m = p.coord_mode;
  if (m == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (m == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_int) / out;
    const double center = static_cast<double>(in) / 2;
    return center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  if (m == "pytorch_half_pixel") return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (m == "align_corners") return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / (out - 1);
  if (m == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (m == "tf_crop_and_resize") {
    const double span = static_cast<double>(in - 1);
    return out == 1 ? 0.5 * (start + end) * span : start * span + x * (end - start) * span / (out - 1);
  }
  return x / scale;  // asymmetric
}

double cubic_weight(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

// The taps of one output index on one axis; false if it lies outside the input under
// tf_crop_and_resize (the output is then extrapolation_value).
bool axis_taps(const ResizeParams& p, int64_t x, int64_t in, int64_t out, double scale, double start, double end,
               std::vector<Tap>* taps) {
  taps->clear();
  const double xo = original_coordinate(p, x, in, out, scale, start, end);
  if (p.coord_mode == "tf_crop_and_resize" && (xo < 0 || xo > static_cast<double>(in - 1))) return false;
  auto clamp = [&](int64_t i) { return std::min(std::max<int64_t>(i, 0), in - 1); };
  const double fl = std::floor(xo);
  const bool integral = xo == fl;
  if (p.mode == InterpMode::kNearest) {
    int64_t i = static_cast<int64_t>(fl);
    if (!integral) {
      const double frac = xo - fl;
      bool up;
      if (p.legacy_nearest) {
        up = scale < 1;
      } else if (p.nearest_mode == "round_prefer_floor") {
        up = frac > 0.5;
      } else if (p.nearest_mode == "round_prefer_ceil") {
        up = frac >= 0.5;
      } else {
        up = p.nearest_mode == "ceil";
      }
      i += up ? 1 : 0;
    }
    taps->push_back({clamp(i), 1.0});
    return true;
  }
  // The reference keeps the ratio in (0, 1]: an integral coordinate takes the left neighbour as base.
  const int64_t base = static_cast<int64_t>(fl) - (integral ? 1 : 0);
  const double ratio = xo - static_cast<double>(base);
  const double support = p.mode == InterpMode::kLinear ? 1.0 : 2.0;
  // Antialiasing stretches the filter by 1/scale when downsampling.
  const double s = p.antialias ? std::min(scale, 1.0) : 1.0;
  const int64_t first = static_cast<int64_t>(std::floor(-support / s)) + 1;
  const int64_t last = 1 - first;  // inclusive
  double sum = 0;
  for (int64_t i = first; i <= last; ++i) {
    const double t = (static_cast<double>(i) - ratio) * s;
    double w = p.mode == InterpMode::kLinear ? std::max(0.0, 1 - std::fabs(t)) : cubic_weight(t, p.cubic_a);
    const int64_t idx = base + i;
    if (p.exclude_outside && (idx < 0 || idx >= in)) w = 0;
    sum += w;
    taps->push_back({idx, w});
  }
  const bool normalize = p.antialias || p.exclude_outside;
  for (Tap& t : *taps) {
    t.index = clamp(t.index);
    if (normalize && sum != 0) t.weight /= sum;
  }
  return true;
}

template <typename T>
void resize_forward(const T* x, T* y, const std::vector<int64_t>& in, const ResizeParams& p) {
  const int rank = static_cast<int>(in.size());
  // Per axis and output index: its taps (input offsets pre-multiplied by the axis stride).
  const std::vector<int64_t> in_strides = contiguous_strides(in);
  std::vector<std::vector<std::vector<Tap>>> taps(static_cast<size_t>(rank));
  std::vector<std::vector<char>> outside(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const size_t du = static_cast<size_t>(d);
    taps[du].resize(static_cast<size_t>(p.out[du]));
    outside[du].resize(static_cast<size_t>(p.out[du]));
    for (int64_t o = 0; o < p.out[du]; ++o) {
      std::vector<Tap>& t = taps[du][static_cast<size_t>(o)];
      outside[du][static_cast<size_t>(o)] =
          !axis_taps(p, o, in[du], p.out[du], p.scales[du], p.roi_start[du], p.roi_end[du], &t);
      for (Tap& tap : t) tap.index *= in_strides[du];
    }
  }
  const int64_t out_last = p.out.back();
  const int64_t rows = num_elements(p.out) / std::max<int64_t>(out_last, 1);
  if (p.mode == InterpMode::kNearest) {
    // One tap of weight 1 per axis: every output element is a copy of one input element
    // (the general loop below computes 1.0 * x exactly, in double), so gather directly.
    const size_t last = static_cast<size_t>(rank - 1);
    std::vector<int64_t> col(static_cast<size_t>(out_last));
    std::vector<char> col_outside(static_cast<size_t>(out_last));
    // An index outside the input (tf_crop_and_resize) has no tap: it reads nothing.
    auto first_tap = [&](size_t axis, int64_t o) {
      const std::vector<Tap>& t = taps[axis][static_cast<size_t>(o)];
      return t.empty() ? int64_t{0} : t[0].index;
    };
    for (int64_t ow = 0; ow < out_last; ++ow) {
      col[static_cast<size_t>(ow)] = first_tap(last, ow);
      col_outside[static_cast<size_t>(ow)] = outside[last][static_cast<size_t>(ow)];
    }
    parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        bool row_outside = false;
        int64_t base = 0, rem = r;
        for (int d = rank - 2; d >= 0; --d) {
          const size_t du = static_cast<size_t>(d);
          const int64_t od = rem % p.out[du];
          rem /= p.out[du];
          base += first_tap(du, od);
          row_outside = row_outside || outside[du][static_cast<size_t>(od)];
        }
        T* dst = y + r * out_last;
        const T* src = x + base;
        for (int64_t ow = 0; ow < out_last; ++ow)
          dst[ow] = row_outside || col_outside[static_cast<size_t>(ow)] ? static_cast<T>(p.extrapolation)
                                                                        : src[col[static_cast<size_t>(ow)]];
      }
    });
    return;
  }
  parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<const std::vector<Tap>*> row_taps(static_cast<size_t>(rank));
    std::vector<size_t> pos(static_cast<size_t>(rank));
    for (int64_t r = r0; r < r1; ++r) {
      bool row_outside = false;
      int64_t rem = r;
      for (int d = rank - 2; d >= 0; --d) {
        const size_t du = static_cast<size_t>(d);
        const int64_t od = rem % p.out[du];
        rem /= p.out[du];
        row_taps[du] = &taps[du][static_cast<size_t>(od)];
        row_outside = row_outside || outside[du][static_cast<size_t>(od)];
      }
      T* dst = y + r * out_last;
      for (int64_t ow = 0; ow < out_last; ++ow) {
        const size_t last = static_cast<size_t>(rank - 1);
        row_taps[last] = &taps[last][static_cast<size_t>(ow)];
        if (row_outside || outside[last][static_cast<size_t>(ow)]) {
          dst[ow] = static_cast<T>(p.extrapolation);
          continue;
        }
        // Sum over the cartesian product of the axes' taps.
        double acc = 0;
        std::fill(pos.begin(), pos.end(), 0);
        while (true) {
          int64_t offset = 0;
          double w = 1;
          for (size_t d = 0; d <= last; ++d) {
            const Tap& t = (*row_taps[d])[pos[d]];
            offset += t.index;
            w *= t.weight;
          }
          acc += w * static_cast<double>(x[offset]);
          int d = rank - 1;
          for (; d >= 0; --d) {
            const size_t du = static_cast<size_t>(d);
            if (++pos[du] < row_taps[du]->size()) break;
            pos[du] = 0;
          }
          if (d < 0) break;
        }
        dst[ow] = static_cast<T>(acc);
      }
    }
  });
}

// Input indices of roi, scales and sizes for this node's op and opset (-1 = none).
struct ResizeInputs {
  int roi = -1, scales = -1, sizes = -1;
};

ResizeInputs resize_inputs(const ir::Node& node) {
  if (node.op_type() == "Upsample") return {-1, node.opset() >= 9 ? 1 : -1, -1};
  if (node.opset() < 11) return {-1, 1, -1};
  return {1, 2, 3};
}

Status infer_resize(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  if (!xt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const ResizeInputs ri = resize_inputs(ctx.node());
  auto constant = [&](int i, bool* dynamic) -> const Tensor* {
    if (i < 0 || !ctx.has_input(i)) return nullptr;
    const Tensor* t = ctx.input_constant(i);
    if (!t) *dynamic = true;
    return t;
  };
  bool dynamic = false;
  const Tensor* roi = constant(ri.roi, &dynamic);
  bool scales_dynamic = false, sizes_dynamic = false;
  const Tensor* scales = constant(ri.scales, &scales_dynamic);
  const Tensor* sizes = constant(ri.sizes, &sizes_dynamic);
  std::vector<int64_t> in = [&] {
    std::vector<int64_t> v;
    for (const Dim& d : xt.shape.dims()) v.push_back(d.is_static() ? d.value : -1);
    return v;
  }();
  const bool static_in = std::all_of(in.begin(), in.end(), [](int64_t v) { return v >= 0; });
  // roi matters only for the coordinates, not the shape.
  (void)roi;
  if (scales_dynamic || sizes_dynamic || !static_in) {
    // Sizes known but input not: the resized axes are known. Otherwise only the rank.
    std::vector<Dim> dims(static_cast<size_t>(xt.shape.rank()));
    if (sizes && !sizes_dynamic && !scales_dynamic && !ctx.node().has_attr("axes") &&
        ctx.node().attr_string("keep_aspect_ratio_policy", "stretch") == "stretch" &&
        sizes->num_elements() == xt.shape.rank()) {
      std::vector<int64_t> s = sizes->to_int64_vector();
      for (size_t i = 0; i < dims.size(); ++i) dims[i] = Dim(s[i]);
    } else if (scales && !scales_dynamic) {
      // Axes with scale 1 keep their (possibly symbolic) dim.
      std::vector<double> s = doubles_of(*scales);
      if (s.size() == dims.size())
        for (size_t i = 0; i < dims.size(); ++i)
          if (s[i] == 1.0) dims[i] = xt.shape[static_cast<int>(i)];
    }
    ctx.set_output(0, xt.dtype, Shape(dims));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(ResizeParams p, resize_params(ctx.node(), in, nullptr, scales, sizes));
  ctx.set_output(0, xt.dtype, Shape::from_static(p.out));
  return ok_status();
}

Status resize_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kFloat64 && x.dtype() != DataType::kUInt8 &&
      x.dtype() != DataType::kInt8 && x.dtype() != DataType::kInt32 && x.dtype() != DataType::kInt64)
    return unsupported_dtype(node, x.dtype());
  if (x.rank() < 1) return invalid_argument("node %s: input must have rank >= 1", node.label().c_str());
  const ResizeInputs ri = resize_inputs(node);
  auto input = [&](int i) { return i < 0 ? nullptr : ctx.input(i); };
  KILN_ASSIGN_OR_RETURN(ResizeParams p, resize_params(node, x.dims(), input(ri.roi), input(ri.scales), input(ri.sizes)));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), p.out));
  if (y->num_elements() == 0) return ok_status();
  if (x.num_elements() == 0)
    return invalid_argument("node %s: cannot resize the empty input %s to %s", node.label().c_str(),
                            dims_to_string(x.dims()).c_str(), dims_to_string(p.out).c_str());
  auto run = [&]<typename T>() { resize_forward<T>(x.data<T>(), y->data<T>(), x.dims(), p); };
  if (!dispatch_float(x.dtype(), run)) {
    // Integer images: nearest only (it copies values; interpolation would need rounding rules).
    if (p.mode != InterpMode::kNearest)
      return unsupported("node %s: %s interpolation of %s is not supported; use nearest or a float type",
                         node.label().c_str(), node.attr_string("mode", "").c_str(), dtype_name(x.dtype()));
    switch (x.dtype()) {
      case DataType::kUInt8: run.template operator()<uint8_t>(); break;
      case DataType::kInt8: run.template operator()<int8_t>(); break;
      case DataType::kInt32: run.template operator()<int32_t>(); break;
      default: run.template operator()<int64_t>(); break;
    }
  }
  return ok_status();
}

OpSchema resize_schema(int64_t first, int64_t last, int max_inputs) {
  return OpSchema("Resize")
      .since(first, last)
      .inputs(1, max_inputs)
      .outputs(1, 1)
      .attr("mode", AttrKind::kString)
      .attr("coordinate_transformation_mode", AttrKind::kString)
      .attr("cubic_coeff_a", AttrKind::kFloat)
      .attr("exclude_outside", AttrKind::kInt)
      .attr("extrapolation_value", AttrKind::kFloat)
      .attr("nearest_mode", AttrKind::kString)
      .attr("antialias", AttrKind::kInt)
      .attr("axes", AttrKind::kInts)
      .attr("keep_aspect_ratio_policy", AttrKind::kString)
      .infer(infer_resize)
      .kernel(with_half_as_float(resize_kernel));
}

}  // namespace

// Resize 10: X, scales. 11: X, roi, scales, sizes. 13: roi and scales optional.
// 18: antialias, axes, keep_aspect_ratio_policy. 19: half_pixel_symmetric.
KILN_REGISTER_OP(resize_schema(10, 10, 2).inputs(2, 2));
KILN_REGISTER_OP(resize_schema(11, kMaxOpset, 4));
KILN_REGISTER_OP(OpSchema("Upsample")
                     .since(7, 8)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("mode", AttrKind::kString)
                     .required_attr("scales", AttrKind::kFloats)
                     .infer(infer_resize)
                     .kernel(with_half_as_float(resize_kernel)));
KILN_REGISTER_OP(OpSchema("Upsample")
                     .since(9, 9)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("mode", AttrKind::kString)
                     .infer(infer_resize)
                     .kernel(with_half_as_float(resize_kernel)));

}  // namespace kiln::ops
