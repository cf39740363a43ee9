// Region-of-interest pooling (ONNX opsets 1..27): RoiAlign (opset 10; 16 added
// coordinate_transformation_mode; avg and max modes) and MaxRoiPool (opset 1, Caffe's
// quantised bins).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// ---- RoiAlign --------------------------------------------------------------------

Status infer_roi_align(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const ir::TensorType& rt = ctx.input_type(1);
  const std::string label = ctx.node().label();
  if (xt.shape.has_rank() && xt.shape.rank() != 4)
    return invalid_argument("node %s: X has rank %d, expected 4 (N x C x H x W)", label.c_str(), xt.shape.rank());
  if (rt.shape.has_rank() && rt.shape.rank() != 2)
    return invalid_argument("node %s: rois has rank %d, expected 2 (num_rois x 4)", label.c_str(), rt.shape.rank());
  const int64_t oh = ctx.node().attr_int("output_height", 1), ow = ctx.node().attr_int("output_width", 1);
  if (oh < 1 || ow < 1)
    return invalid_argument("node %s: output_height %lld and output_width %lld must be >= 1", label.c_str(),
                            (long long)oh, (long long)ow);
  Dim rois = rt.shape.has_rank() ? rt.shape[0] : Dim();
  Dim channels = xt.shape.has_rank() ? xt.shape[1] : Dim();
  ctx.set_output(0, xt.dtype, Shape({rois, channels, Dim(oh), Dim(ow)}));
  return ok_status();
}

struct Tap {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

template <typename T>
void roi_align_one(const T* x, const T* roi, T* y, int64_t channels, int64_t height, int64_t width, int64_t oh,
                   int64_t ow, double scale, int64_t sampling_ratio, bool half_pixel, bool max_mode) {
  const double offset = half_pixel ? 0.5 : 0.0;
  const double start_w = static_cast<double>(roi[0]) * scale - offset;
  const double start_h = static_cast<double>(roi[1]) * scale - offset;
  const double end_w = static_cast<double>(roi[2]) * scale - offset;
  const double end_h = static_cast<double>(roi[3]) * scale - offset;
  double roi_w = end_w - start_w, roi_h = end_h - start_h;
  if (!half_pixel) {
    // The legacy mode forces malformed ROIs to 1 x 1.
    roi_w = std::max(roi_w, 1.0);
    roi_h = std::max(roi_h, 1.0);
  }
  const double bin_h = roi_h / static_cast<double>(oh), bin_w = roi_w / static_cast<double>(ow);
  // Samples per bin: the attribute, or enough to cover the bin (bounded: a hostile ROI
  // must not make the loop run forever).
  auto grid = [&](double bin) -> int64_t {
    if (sampling_ratio > 0) return sampling_ratio;
    const double g = std::ceil(bin);
    return static_cast<int64_t>(std::clamp(std::isnan(g) ? 0.0 : g, 0.0, 512.0));
  };
  const int64_t grid_h = grid(bin_h), grid_w = grid(bin_w);
  const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
  // Per bin: the bilinear taps of its sample points, shared by all channels.
  const int64_t samples = grid_h * grid_w;
  std::vector<Tap> taps(static_cast<size_t>(samples));
  for (int64_t ph = 0; ph < oh; ++ph) {
    for (int64_t pw = 0; pw < ow; ++pw) {
      size_t t = 0;
      for (int64_t iy = 0; iy < grid_h; ++iy) {
        const double yy = start_h + static_cast<double>(ph) * bin_h +
                          (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(grid_h);
        for (int64_t ix = 0; ix < grid_w; ++ix, ++t) {
          double xx = start_w + static_cast<double>(pw) * bin_w +
                      (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(grid_w);
          double yv = yy;
          Tap& tap = taps[t];
          tap = Tap();
          if (!(yv >= -1.0 && yv <= static_cast<double>(height) && xx >= -1.0 && xx <= static_cast<double>(width)))
            continue;  // outside the feature map: contributes 0
          yv = std::max(yv, 0.0);
          xx = std::max(xx, 0.0);
          int64_t y_low = static_cast<int64_t>(yv), x_low = static_cast<int64_t>(xx), y_high, x_high;
          if (y_low >= height - 1) {
            y_high = y_low = height - 1;
            yv = static_cast<double>(y_low);
          } else {
            y_high = y_low + 1;
          }
          if (x_low >= width - 1) {
            x_high = x_low = width - 1;
            xx = static_cast<double>(x_low);
          } else {
            x_high = x_low + 1;
          }
          const double ly = yv - static_cast<double>(y_low), lx = xx - static_cast<double>(x_low);
          const double hy = 1 - ly, hx = 1 - lx;
          tap.pos[0] = y_low * width + x_low;
          tap.pos[1] = y_low * width + x_high;
          tap.pos[2] = y_high * width + x_low;
          tap.pos[3] = y_high * width + x_high;
          tap.w[0] = hy * hx;
          tap.w[1] = hy * lx;
          tap.w[2] = ly * hx;
          tap.w[3] = ly * lx;
        }
      }
      for (int64_t c = 0; c < channels; ++c) {
        const T* xc = x + c * height * width;
        double out = 0;
        for (int64_t s = 0; s < samples; ++s) {
          const Tap& tap = taps[static_cast<size_t>(s)];
          if (max_mode) {
            // ONNX's max mode: the largest weighted corner, maxed over the samples.
            double v = tap.w[0] * static_cast<double>(xc[tap.pos[0]]);
            for (int k = 1; k < 4; ++k) v = std::max(v, tap.w[k] * static_cast<double>(xc[tap.pos[k]]));
            out = s == 0 ? v : std::max(out, v);
          } else {
            for (int k = 0; k < 4; ++k) out += tap.w[k] * static_cast<double>(xc[tap.pos[k]]);
          }
        }
        y[(c * oh + ph) * ow + pw] = static_cast<T>(max_mode ? out : out / count);
      }
    }
  }
}

Status roi_align_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  const Tensor& rois = *ctx.input(1);
  const Tensor& batch_indices = *ctx.input(2);
  if (x.rank() != 4)
    return invalid_argument("node %s: X %s has rank %d, expected 4", label.c_str(), dims_to_string(x.dims()).c_str(),
                            x.rank());
  if (rois.rank() != 2 || rois.dim(1) != 4)
    return invalid_argument("node %s: rois %s, expected num_rois x 4", label.c_str(),
                            dims_to_string(rois.dims()).c_str());
  if (batch_indices.rank() != 1 || batch_indices.dim(0) != rois.dim(0))
    return invalid_argument("node %s: batch_indices %s, expected [%lld] (one per roi)", label.c_str(),
                            dims_to_string(batch_indices.dims()).c_str(), (long long)rois.dim(0));
  if (rois.dtype() != x.dtype())
    return invalid_argument("node %s: rois is %s, X is %s; they must match", label.c_str(), dtype_name(rois.dtype()),
                            dtype_name(x.dtype()));
  if (batch_indices.dtype() != DataType::kInt64 && batch_indices.dtype() != DataType::kInt32)
    return invalid_argument("node %s: batch_indices is %s, expected int64", label.c_str(),
                            dtype_name(batch_indices.dtype()));
  const std::string mode = node.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max")
    return invalid_argument("node %s: mode '%s' is not avg or max", label.c_str(), mode.c_str());
  // Opset 10 had no attribute and behaved as output_half_pixel; 16 defaults to half_pixel.
  const std::string ctm =
      node.attr_string("coordinate_transformation_mode", node.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return invalid_argument("node %s: coordinate_transformation_mode '%s' is not half_pixel or output_half_pixel",
                            label.c_str(), ctm.c_str());
  const int64_t oh = node.attr_int("output_height", 1), ow = node.attr_int("output_width", 1);
  const int64_t sampling_ratio = node.attr_int("sampling_ratio", 0);
  const double scale = node.attr_float("spatial_scale", 1.0f);
  if (oh < 1 || ow < 1 || sampling_ratio < 0)
    return invalid_argument("node %s: output_height %lld, output_width %lld must be >= 1 and sampling_ratio %lld >= 0",
                            label.c_str(), (long long)oh, (long long)ow, (long long)sampling_ratio);
  const int64_t num_rois = rois.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), {num_rois, channels, oh, ow}));
  if (y->num_elements() == 0) return ok_status();
  if (height == 0 || width == 0)
    return invalid_argument("node %s: X %s has an empty spatial dim", label.c_str(), dims_to_string(x.dims()).c_str());
  for (int64_t r = 0; r < num_rois; ++r) {
    const int64_t b = batch_indices.element_as_int64(r);
    if (b < 0 || b >= x.dim(0))
      return out_of_range("node %s: batch_indices[%lld] = %lld is outside [0, %lld)", label.c_str(), (long long)r,
                          (long long)b, (long long)x.dim(0));
  }
  auto run = [&]<typename T>() {
    parallel_for(0, num_rois, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = batch_indices.element_as_int64(r);
        roi_align_one<T>(x.data<T>() + b * channels * height * width, rois.data<T>() + r * 4,
                         y->data<T>() + r * channels * oh * ow, channels, height, width, oh, ow, scale,
                         sampling_ratio, ctm == "half_pixel", mode == "max");
      }
    });
  };
  if (!dispatch_float(x.dtype(), run)) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

// ---- MaxRoiPool ------------------------------------------------------------------

Expected<std::vector<int64_t>> pooled_shape(const ir::Node& node) {
  std::vector<int64_t> ps = node.attr_ints("pooled_shape");
  if (ps.size() != 2 || ps[0] < 1 || ps[1] < 1)
    return invalid_argument("node %s: pooled_shape must be 2 values >= 1", node.label().c_str());
  return ps;
}

Status infer_max_roi_pool(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  const ir::TensorType& rt = ctx.input_type(1);
  const std::string label = ctx.node().label();
  if (xt.shape.has_rank() && xt.shape.rank() != 4)
    return invalid_argument("node %s: X has rank %d, expected 4 (N x C x H x W)", label.c_str(), xt.shape.rank());
  if (rt.shape.has_rank() && rt.shape.rank() != 2)
    return invalid_argument("node %s: rois has rank %d, expected 2 (num_rois x 5)", label.c_str(), rt.shape.rank());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ps, pooled_shape(ctx.node()));
  Dim rois = rt.shape.has_rank() ? rt.shape[0] : Dim();
  Dim channels = xt.shape.has_rank() ? xt.shape[1] : Dim();
  ctx.set_output(0, xt.dtype, Shape({rois, channels, Dim(ps[0]), Dim(ps[1])}));
  return ok_status();
}

Status max_roi_pool_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  const Tensor& rois = *ctx.input(1);
  if (x.rank() != 4)
    return invalid_argument("node %s: X %s has rank %d, expected 4", label.c_str(), dims_to_string(x.dims()).c_str(),
                            x.rank());
  if (rois.rank() != 2 || rois.dim(1) != 5)
    return invalid_argument("node %s: rois %s, expected num_rois x 5 (batch, x1, y1, x2, y2)", label.c_str(),
                            dims_to_string(rois.dims()).c_str());
  if (rois.dtype() != x.dtype())
    return invalid_argument("node %s: rois is %s, X is %s; they must match", label.c_str(), dtype_name(rois.dtype()),
                            dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ps, pooled_shape(node));
  const double scale = node.attr_float("spatial_scale", 1.0f);
  const int64_t num_rois = rois.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), {num_rois, channels, ps[0], ps[1]}));
  if (y->num_elements() == 0) return ok_status();
  Status status;
  auto run = [&]<typename T>() {
    const T* r = rois.data<T>();
    T* out = y->data<T>();
    for (int64_t n = 0; n < num_rois; ++n, r += 5) {
      const double bd = static_cast<double>(r[0]);
      if (!(bd >= 0 && bd < static_cast<double>(x.dim(0)))) {
        status = out_of_range("node %s: roi %lld has batch index %g outside [0, %lld)", label.c_str(), (long long)n,
                              bd, (long long)x.dim(0));
        return;
      }
      const int64_t b = static_cast<int64_t>(bd);
      // Caffe's ROI pooling: ROI corners rounded to pixels, bins of the (inclusive) ROI.
      auto pix = [&](T v) {
        const double p = std::round(static_cast<double>(v) * scale);
        return static_cast<int64_t>(std::clamp(std::isnan(p) ? 0.0 : p, -1e12, 1e12));
      };
      const int64_t x1 = pix(r[1]), y1 = pix(r[2]), x2 = pix(r[3]), y2 = pix(r[4]);
      const int64_t roi_w = std::max<int64_t>(x2 - x1 + 1, 1), roi_h = std::max<int64_t>(y2 - y1 + 1, 1);
      const double bin_h = static_cast<double>(roi_h) / static_cast<double>(ps[0]);
      const double bin_w = static_cast<double>(roi_w) / static_cast<double>(ps[1]);
      for (int64_t c = 0; c < channels; ++c) {
        const T* xc = x.data<T>() + (b * channels + c) * height * width;
        for (int64_t ph = 0; ph < ps[0]; ++ph) {
          const int64_t hs = std::clamp<int64_t>(
              static_cast<int64_t>(std::floor(static_cast<double>(ph) * bin_h)) + y1, 0, height);
          const int64_t he = std::clamp<int64_t>(
              static_cast<int64_t>(std::ceil(static_cast<double>(ph + 1) * bin_h)) + y1, 0, height);
          for (int64_t pw = 0; pw < ps[1]; ++pw) {
            const int64_t ws = std::clamp<int64_t>(
                static_cast<int64_t>(std::floor(static_cast<double>(pw) * bin_w)) + x1, 0, width);
            const int64_t we = std::clamp<int64_t>(
                static_cast<int64_t>(std::ceil(static_cast<double>(pw + 1) * bin_w)) + x1, 0, width);
            T best = T(0);
            bool any = false;
            for (int64_t h = hs; h < he; ++h)
              for (int64_t w = ws; w < we; ++w) {
                const T v = xc[h * width + w];
                if (!any || v > best) best = v;
                any = true;
              }
            out[((n * channels + c) * ps[0] + ph) * ps[1] + pw] = any ? best : T(0);
          }
        }
      }
    }
  };
  if (!dispatch_float(x.dtype(), run)) return unsupported_dtype(node, x.dtype());
  return status;
}

}  // namespace

KILN_REGISTER_OP(OpSchema("RoiAlign")
                     .since(10)
                     .inputs(3, 3)
                     .outputs(1, 1)
                     .attr("coordinate_transformation_mode", AttrKind::kString)
                     .attr("mode", AttrKind::kString)
                     .attr("output_height", AttrKind::kInt)
                     .attr("output_width", AttrKind::kInt)
                     .attr("sampling_ratio", AttrKind::kInt)
                     .attr("spatial_scale", AttrKind::kFloat)
                     .infer(infer_roi_align)
                     .kernel(with_half_as_float(roi_align_kernel)));
KILN_REGISTER_OP(OpSchema("MaxRoiPool")
                     .since(1)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .required_attr("pooled_shape", AttrKind::kInts)
                     .attr("spatial_scale", AttrKind::kFloat)
                     .infer(infer_max_roi_pool)
                     .kernel(with_half_as_float(max_roi_pool_kernel)));

}  // namespace kiln::ops
