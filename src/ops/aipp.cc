// Kiln's Aipp op (ops/aipp_params.h): a raw uint8 image in, the model's float32 input out.
// Schema, inference, and the reference kernel: the documented steps one output pixel at a
// time, in double precision, written for clarity (the fast kernel is kernels/cpu/aipp.cc).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/aipp.h"
#include "ops/op_util.h"

namespace kiln::ops {

Expected<AippNodeInfo> aipp_node_info(const ir::Node& node) {
  AippNodeInfo info;
  const std::string mode = node.attr_string("mode", "static");
  if (mode != "static" && mode != "dynamic")
    return invalid_argument("node %s: mode '%s' is neither static nor dynamic", node.label().c_str(), mode.c_str());
  info.dynamic = mode == "dynamic";
  const std::string layout = node.attr_string("output_layout", "NCHW");
  if (layout != "NCHW" && layout != "NHWC")
    return invalid_argument("node %s: output_layout '%s' is neither NCHW nor NHWC", node.label().c_str(), layout.c_str());
  std::vector<int64_t> dims = node.attr_ints("output_shape");
  if (dims.size() != 4 || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d <= 0; }))
    return invalid_argument("node %s: output_shape must be 4 positive dims", node.label().c_str());
  info.out.nhwc = layout == "NHWC";
  info.out.batch = dims[0];
  info.out.channels = info.out.nhwc ? dims[3] : dims[1];
  info.out.height = info.out.nhwc ? dims[1] : dims[2];
  info.out.width = info.out.nhwc ? dims[2] : dims[3];
  info.output_dims = dims;
  info.max_src_image_size = node.attr_int("max_src_image_size", 0);
  if (!info.dynamic) {
    const ir::Attribute* a = node.attr("params");
    if (!a || a->kind != ir::AttrKind::kTensor || a->t.dtype() != DataType::kUInt8)
      return invalid_argument("node %s: a static Aipp needs its uint8 'params' attribute", node.label().c_str());
    Expected<AippParams> p = deserialize_aipp(a->t.data<uint8_t>(), static_cast<size_t>(a->t.num_elements()));
    if (!p.ok()) return invalid_argument("node %s: %s", node.label().c_str(), p.status().message().c_str());
    Status s = validate_aipp(*p, info.out);
    if (!s.ok()) return invalid_argument("node %s: %s", node.label().c_str(), s.message().c_str());
    info.params = std::move(*p);
    info.image_bytes = aipp_image_bytes(info.params.format, info.params.src_w, info.params.src_h);
  } else if (info.max_src_image_size <= 0) {
    return invalid_argument("node %s: a dynamic Aipp needs max_src_image_size", node.label().c_str());
  }
  return info;
}

Expected<AippParams> aipp_run_params(const ir::Node& node, const AippNodeInfo& info, const Tensor* params_input) {
  if (!info.dynamic) return info.params;
  if (!params_input || params_input->dtype() != DataType::kUInt8)
    return invalid_argument("node %s: the dynamic AIPP parameter input is missing or not uint8", node.label().c_str());
  Expected<AippParams> p =
      deserialize_aipp(params_input->data<uint8_t>(), static_cast<size_t>(params_input->num_elements()));
  if (!p.ok())
    return invalid_argument("node %s: dynamic AIPP: %s", node.label().c_str(), p.status().message().c_str());
  Status s = validate_aipp(*p, info.out);
  if (!s.ok()) return invalid_argument("node %s: dynamic AIPP: %s", node.label().c_str(), s.message().c_str());
  if (aipp_image_bytes(p->format, p->src_w, p->src_h) > info.max_src_image_size)
    return invalid_argument("node %s: dynamic AIPP: a %s image of %dx%d takes %lld bytes, more than max_src_image_size %lld",
                            node.label().c_str(), aipp_format_name(p->format), p->src_w, p->src_h,
                            (long long)aipp_image_bytes(p->format, p->src_w, p->src_h),
                            (long long)info.max_src_image_size);
  return p;
}

Status check_aipp_image(const ir::Node& node, const AippNodeInfo& info, const AippParams& p, const Tensor* image) {
  if (!image || image->dtype() != DataType::kUInt8 || image->rank() < 1)
    return invalid_argument("node %s: the image input must be uint8", node.label().c_str());
  if (image->dim(0) != info.out.batch)
    return invalid_argument("node %s: the image input holds %lld images, the model takes %lld", node.label().c_str(),
                            (long long)image->dim(0), (long long)info.out.batch);
  const int64_t need = aipp_image_bytes(p.format, p.src_w, p.src_h) * info.out.batch;
  if (image->num_elements() < need)
    return invalid_argument("node %s: the image input has %lld bytes, a batch of %lld %s %dx%d images takes %lld",
                            node.label().c_str(), (long long)image->num_elements(), (long long)info.out.batch,
                            aipp_format_name(p.format), p.src_w, p.src_h, (long long)need);
  return ok_status();
}

const ir::Node* aipp_node_for_input(const ir::Graph& graph, const ir::Value* input) {
  for (const auto& n : graph.nodes())
    if (is_aipp_node(*n) && n->input(0) == input) return n.get();
  return nullptr;
}

std::string aipp_description(const ir::Node& node) {
  Expected<AippNodeInfo> info = aipp_node_info(node);
  if (!info.ok()) return "AIPP (invalid: " + info.status().message() + ")";
  std::string dims;
  for (int64_t d : info->output_dims) {
    if (!dims.empty()) dims += ',';  // appended, not `"," + to_string(d)`: GCC 12 warns on that (-Wrestrict)
    dims += std::to_string(d);
  }
  const std::string out = std::string(info->out.nhwc ? "NHWC" : "NCHW") + " float32[" + dims + "]";
  if (info->dynamic) {
    const ir::Value* params = node.input(1);
    return "dynamic AIPP: parameters set at run time in input '" + (params ? params->name() : std::string("?")) +
           "', images up to " + std::to_string(info->max_src_image_size) + " bytes -> " + out;
  }
  return "static AIPP: " + info->params.to_text() + " -> " + out;
}

void aipp_fetch_pixel(const AippParams& p, const uint8_t* img, int64_t x, int64_t y, float ch[4]) {
  const int64_t w = p.src_w, h = p.src_h;
  uint8_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  switch (p.format) {
    case AippFormat::kYuv420sp: {
      const uint8_t* uv = img + h * w + (y / 2) * w + (x / 2) * 2;
      c0 = img[y * w + x], c1 = uv[0], c2 = uv[1];
      break;
    }
    case AippFormat::kYuv422sp: {
      const uint8_t* uv = img + h * w + y * w + (x / 2) * 2;
      c0 = img[y * w + x], c1 = uv[0], c2 = uv[1];
      break;
    }
    case AippFormat::kYuyv: {
      const uint8_t* q = img + y * w * 2 + (x / 2) * 4;
      c0 = q[(x & 1) * 2], c1 = q[1], c2 = q[3];
      break;
    }
    case AippFormat::kYuv400: c0 = img[y * w + x]; break;
    case AippFormat::kRgb888: {
      const uint8_t* q = img + (y * w + x) * 3;
      c0 = q[0], c1 = q[1], c2 = q[2];
      break;
    }
    default: {  // 4-byte formats: alpha/X first, or last with ax_swap
      const uint8_t* q = img + (y * w + x) * 4;
      if (p.ax_swap)
        c0 = q[0], c1 = q[1], c2 = q[2], c3 = q[3];
      else
        c3 = q[0], c0 = q[1], c1 = q[2], c2 = q[3];
      break;
    }
  }
  // rbuv_swap_switch: U<->V for YUV formats, R<->B for RGB formats.
  if (p.rbuv_swap) {
    if (aipp_format_is_yuv(p.format))
      std::swap(c1, c2);
    else
      std::swap(c0, c2);
  }
  ch[0] = c0, ch[1] = c1, ch[2] = c2, ch[3] = c3;
}

namespace {

// Step 2 for the source pixel (x, y), as doubles.
void reference_pixel(const AippParams& p, const uint8_t* img, int64_t x, int64_t y, double v[4]) {
  float ch[4];
  aipp_fetch_pixel(p, img, x, y, ch);
  for (int c = 0; c < 4; ++c) v[c] = ch[c];
}

// Step 4 on one pixel's (resampled) channels, in place.
void reference_csc(const AippParams& p, double v[4]) {
  if (!p.csc) return;
  double out[3];
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += double{p.matrix[r][j]} * (v[j] - double{p.input_bias[j]});
    out[r] = std::clamp(s / 256.0 + p.output_bias[r], 0.0, 255.0);
  }
  v[0] = out[0], v[1] = out[1], v[2] = out[2];
}

// The source coordinate and weight of output index o along an axis resized from `in` to `out`.
void bilinear_tap(int64_t o, int64_t in, int64_t out, int64_t* i0, int64_t* i1, double* w1) {
  double s = (static_cast<double>(o) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
  s = std::clamp(s, 0.0, static_cast<double>(in - 1));
  *i0 = static_cast<int64_t>(std::floor(s));
  *i1 = std::min(*i0 + 1, in - 1);
  *w1 = s - static_cast<double>(*i0);
}

void reference_image(const AippParams& p, const AippBatchParams& b, const uint8_t* img, const AippOutputDesc& out,
                     float* dst) {
  const int64_t cx = b.crop ? b.crop_x : 0, cy = b.crop ? b.crop_y : 0;
  const int64_t cw = b.crop ? b.crop_w : p.src_w, chh = b.crop ? b.crop_h : p.src_h;
  const int64_t rw = b.resize ? b.resize_w : cw, rh = b.resize ? b.resize_h : chh;
  const int64_t left = b.padding ? b.pad_left : 0, top = b.padding ? b.pad_top : 0;
  const int64_t C = out.channels, H = out.height, W = out.width;
  // Which fetched channel feeds output channel c: colour channels first; a grey image's Y.
  auto at = [&](int64_t c, int64_t y, int64_t x) -> float& {
    return out.nhwc ? dst[(y * W + x) * C + c] : dst[(c * H + y) * W + x];
  };
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const int64_t ry = y - top, rx = x - left;
      if (ry < 0 || ry >= rh || rx < 0 || rx >= rw) {
        for (int64_t c = 0; c < C; ++c) at(c, y, x) = b.padding_value;
        continue;
      }
      double v[4] = {0, 0, 0, 0};
      if (rw == cw && rh == chh) {
        reference_pixel(p, img, cx + rx, cy + ry, v);
      } else {
        int64_t x0, x1, y0, y1;
        double wx, wy;
        bilinear_tap(rx, cw, rw, &x0, &x1, &wx);
        bilinear_tap(ry, chh, rh, &y0, &y1, &wy);
        double p00[4], p01[4], p10[4], p11[4];
        reference_pixel(p, img, cx + x0, cy + y0, p00);
        reference_pixel(p, img, cx + x1, cy + y0, p01);
        reference_pixel(p, img, cx + x0, cy + y1, p10);
        reference_pixel(p, img, cx + x1, cy + y1, p11);
        for (int c = 0; c < 4; ++c)
          v[c] = (1 - wy) * ((1 - wx) * p00[c] + wx * p01[c]) + wy * ((1 - wx) * p10[c] + wx * p11[c]);
      }
      reference_csc(p, v);
      for (int64_t c = 0; c < C; ++c)
        at(c, y, x) = static_cast<float>((v[c] - b.mean[c] - b.min[c]) * b.var_reci[c]);
    }
}

Status infer_aipp(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(AippNodeInfo info, aipp_node_info(node));
  if (ctx.input_type(0).dtype != DataType::kUInt8)
    return invalid_argument("node %s: the image input must be uint8", node.label().c_str());
  if (info.dynamic != (ctx.num_inputs() == 2))
    return invalid_argument("node %s: a %s Aipp takes %d input(s)", node.label().c_str(),
                            info.dynamic ? "dynamic" : "static", info.dynamic ? 2 : 1);
  ctx.set_output(0, DataType::kFloat32, Shape::from_static(info.output_dims));
  return ok_status();
}

Status aipp_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(AippNodeInfo info, aipp_node_info(node));
  KILN_ASSIGN_OR_RETURN(AippParams p, aipp_run_params(node, info, info.dynamic ? ctx.input(1) : nullptr));
  const Tensor* image = ctx.input(0);
  KILN_RETURN_IF_ERROR(check_aipp_image(node, info, p, image));
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::allocate(DataType::kFloat32, info.output_dims));
  const int64_t image_floats = info.out.channels * info.out.height * info.out.width;
  const int64_t stride = image->num_elements() / info.out.batch;
  for (int64_t n = 0; n < info.out.batch; ++n)
    reference_image(p, p.for_image(n), image->data<uint8_t>() + n * stride, info.out, y.data<float>() + n * image_floats);
  ctx.set_output(0, std::move(y));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema(kAippOp, kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, 2)
                     .outputs(1, 1)
                     .attr("mode", ir::AttrKind::kString)
                     .attr("params", ir::AttrKind::kTensor)
                     .attr("output_layout", ir::AttrKind::kString)
                     .required_attr("output_shape", ir::AttrKind::kInts)
                     .attr("max_src_image_size", ir::AttrKind::kInt)
                     .infer(infer_aipp)
                     .kernel(aipp_kernel)
                     .doc("Y = the model input made from a raw image: crop, colour conversion, resize, "
                          "normalisation, padding (docs/aipp.md)"));

}  // namespace kiln::ops
