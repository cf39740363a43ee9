// Fast kernel for kiln Aipp (ops/aipp_params.h): every format, crop, colour conversion,
// bilinear resize, normalisation and padding in one pass over the OUTPUT pixels, writing the
// model's float32 input directly (no intermediate RGB image, no full-frame conversion: a
// 1080p frame resized to 224x224 reads ~4 of its 2M pixels per output pixel).
//
// Per output row (rows of all images in parallel): the two source rows of the bilinear taps,
// and per SIMD vector of output columns the two source columns x0, x0+1 of each lane,
// fetched with 32-bit gathers at byte offsets (one gather brings Y[x0] and Y[x0+1], or the
// chroma pair of both, since x0 and x0+1 share a chroma sample or sit in adjacent ones). The
// four pixels are colour-converted (with the clamp, before interpolation, as documented),
// blended, normalised with one FMA, and stored per channel plane. Taps at the right/bottom
// edge use x0 = in-2 with weight 1 on x0+1 (the same value as the clamped tap), so x0+1 is
// always inside the crop; rows whose gathers could read past the end of the image buffer
// (the last row of the last image) and crops 1 pixel wide or high take the scalar path,
// which computes the same steps per pixel.
//
// Highway, AVX-512 / AVX2 / baseline picked at prepare (simd_dispatch.h). The arithmetic is
// float32 (the reference computes in double): tests/preprocess/aipp_test.py allows 1e-5
// relative.
#ifndef KILN_KERNELS_CPU_AIPP_SHARED_
#define KILN_KERNELS_CPU_AIPP_SHARED_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/aipp.h"

namespace kiln::kernels::aipp_simd {

// One image's parameters, decoded into what the row loop reads.
struct ImagePlan {
  ops::AippFormat format = ops::AippFormat::kUndefined;
  bool rbuv_swap = false, ax_swap = false, csc = false;
  int32_t src_w = 0, src_h = 0;
  int32_t rw = 0, rh = 0;        // the resized (or cropped) region
  int32_t left = 0, top = 0;     // where it sits in the output
  float padding_value = 0;
  float m[9] = {}, ib[3] = {}, ob[3] = {};  // CSC: matrix / 256, input and output biases
  float scale[4] = {1, 1, 1, 1}, bias[4] = {};  // DTC as v * scale + bias
  std::vector<int32_t> x0;  // per column of the region: absolute source column of the left tap
  std::vector<float> wx;    // weight of the right tap
  std::vector<int32_t> y0;
  std::vector<float> wy;
  bool taps2 = true;        // crop at least 2x2: x0 + 1 and y0 + 1 are inside it
  ops::AippParams fetch_view;  // what ops::aipp_fetch_pixel reads (the scalar path)
};

// What one run computes: all images, output rows in parallel.
struct Job {
  const uint8_t* images = nullptr;
  int64_t image_stride = 0;   // bytes from one image to the next
  const uint8_t* buffer_end = nullptr;
  const ImagePlan* plans = nullptr;  // one per image, or one for all
  bool one_plan = true;
  int64_t batch = 1, channels = 3, height = 0, width = 0;
  bool nhwc = false;
  float* dst = nullptr;
};

}  // namespace kiln::kernels::aipp_simd

#endif  // KILN_KERNELS_CPU_AIPP_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/aipp.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::aipp_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

// Byte k (0..3) of each 32-bit lane, as float.
HWY_INLINE VF byte_of(VI v, int k) {
  const DF df;
  const DI di;
  VI b = k == 0 ? v : k == 1 ? hn::ShiftRight<8>(v) : k == 2 ? hn::ShiftRight<16>(v) : hn::ShiftRight<24>(v);
  return hn::ConvertTo(df, hn::And(b, hn::Set(di, 0xFF)));
}

HWY_INLINE VI gather(const uint8_t* base, VI offsets) {
  const DI di;
  return hn::GatherOffset(di, reinterpret_cast<const int32_t*>(base), offsets);
}

// The channels (before CSC) of source pixels x0 (a) and x0 + 1 (b) of row y, per lane.
struct Pair {
  VF a[4], b[4];
};

HWY_INLINE Pair fetch_pair(const ImagePlan& p, const uint8_t* img, int32_t y, VI x0) {
  const DI di;
  const DF df;
  Pair r;
  const int64_t w = p.src_w, h = p.src_h;
  const VI one = hn::Set(di, 1);
  switch (p.format) {
    case ops::AippFormat::kYuv420sp:
    case ops::AippFormat::kYuv422sp: {
      const uint8_t* yrow = img + y * w;
      const uint8_t* uvrow = img + h * w + (p.format == ops::AippFormat::kYuv420sp ? (y / 2) : y) * w;
      const VI yy = gather(yrow, x0);
      const VI uv = gather(uvrow, hn::AndNot(one, x0));  // U V of x0's pair, then the next pair
      const auto odd = hn::RebindMask(df, hn::Eq(hn::And(x0, one), one));
      r.a[0] = byte_of(yy, 0), r.b[0] = byte_of(yy, 1);
      const VF u0 = byte_of(uv, 0), v0 = byte_of(uv, 1), u1 = byte_of(uv, 2), v1 = byte_of(uv, 3);
      // x0 even: both pixels use pair 0; x0 odd: x0 uses pair 0, x0 + 1 pair 1.
      r.a[1] = u0, r.a[2] = v0;
      r.b[1] = hn::IfThenElse(odd, u1, u0), r.b[2] = hn::IfThenElse(odd, v1, v0);
      break;
    }
    case ops::AippFormat::kYuyv: {
      const uint8_t* row = img + y * w * 2;
      const VI pair = hn::ShiftLeft<2>(hn::ShiftRight<1>(x0));  // byte offset of x0's Y0 U Y1 V
      const VI q0 = gather(row, pair), q1 = gather(row, hn::Add(pair, hn::Set(di, 4)));
      const auto odd = hn::RebindMask(df, hn::Eq(hn::And(x0, one), one));
      // x0 even: Y0, Y1 of q0; x0 odd: Y1 of q0 and Y0 of q1 (with q1's chroma).
      r.a[0] = hn::IfThenElse(odd, byte_of(q0, 2), byte_of(q0, 0));
      r.b[0] = hn::IfThenElse(odd, byte_of(q1, 0), byte_of(q0, 2));
      r.a[1] = byte_of(q0, 1), r.a[2] = byte_of(q0, 3);
      r.b[1] = hn::IfThenElse(odd, byte_of(q1, 1), byte_of(q0, 1));
      r.b[2] = hn::IfThenElse(odd, byte_of(q1, 3), byte_of(q0, 3));
      break;
    }
    case ops::AippFormat::kYuv400: {
      const VI yy = gather(img + y * w, x0);
      r.a[0] = byte_of(yy, 0), r.b[0] = byte_of(yy, 1);
      r.a[1] = r.a[2] = r.b[1] = r.b[2] = hn::Zero(df);
      break;
    }
    case ops::AippFormat::kRgb888: {
      const VI off = hn::Mul(x0, hn::Set(di, 3));
      const VI q0 = gather(img + y * w * 3, off), q1 = gather(img + y * w * 3, hn::Add(off, hn::Set(di, 3)));
      for (int c = 0; c < 3; ++c) r.a[c] = byte_of(q0, c), r.b[c] = byte_of(q1, c);
      break;
    }
    default: {  // 4-byte formats
      const VI off = hn::ShiftLeft<2>(x0);
      const VI q0 = gather(img + y * w * 4, off), q1 = gather(img + y * w * 4, hn::Add(off, hn::Set(di, 4)));
      // Without ax_swap the alpha/X byte is first.
      const int first = p.ax_swap ? 0 : 1, alpha = p.ax_swap ? 3 : 0;
      for (int c = 0; c < 3; ++c) r.a[c] = byte_of(q0, first + c), r.b[c] = byte_of(q1, first + c);
      r.a[3] = byte_of(q0, alpha), r.b[3] = byte_of(q1, alpha);
      break;
    }
  }
  if (p.rbuv_swap) {
    const int i = ops::aipp_format_is_yuv(p.format) ? 1 : 0;
    std::swap(r.a[i], r.a[2]);
    std::swap(r.b[i], r.b[2]);
  }
  return r;
}

// Step 3 on one pixel's channels, in place.
HWY_INLINE void csc(const ImagePlan& p, VF c[4]) {
  const DF df;
  const VF d0 = hn::Sub(c[0], hn::Set(df, p.ib[0]));
  const VF d1 = hn::Sub(c[1], hn::Set(df, p.ib[1]));
  const VF d2 = hn::Sub(c[2], hn::Set(df, p.ib[2]));
  const VF lo = hn::Zero(df), hi = hn::Set(df, 255.0f);
  VF out[3];
  for (int r = 0; r < 3; ++r) {
    VF s = hn::MulAdd(hn::Set(df, p.m[r * 3 + 2]), d2, hn::Set(df, p.ob[r]));
    s = hn::MulAdd(hn::Set(df, p.m[r * 3 + 1]), d1, s);
    s = hn::MulAdd(hn::Set(df, p.m[r * 3 + 0]), d0, s);
    out[r] = hn::Min(hn::Max(s, lo), hi);
  }
  c[0] = out[0], c[1] = out[1], c[2] = out[2];
}

// Region columns [x, x + lanes) of one output row into tmp planes (region-relative).
HWY_INLINE void row_vector(const ImagePlan& p, const uint8_t* img, int32_t ya, float wy, int64_t x, int channels,
                           float* const* tmp) {
  const DF df;
  const DI di;
  const VI x0 = hn::LoadU(di, p.x0.data() + x);
  const VF wx = hn::LoadU(df, p.wx.data() + x);
  Pair top = fetch_pair(p, img, ya, x0);
  Pair bot = fetch_pair(p, img, ya + 1, x0);
  if (p.csc) {
    csc(p, top.a), csc(p, top.b), csc(p, bot.a), csc(p, bot.b);
  }
  const VF vwy = hn::Set(df, wy);
  for (int c = 0; c < channels; ++c) {
    // (1-wy)((1-wx) a + wx b) + wy((1-wx) c + wx d), as a + wx (b - a) per row.
    const VF t = hn::MulAdd(wx, hn::Sub(top.b[c], top.a[c]), top.a[c]);
    const VF b = hn::MulAdd(wx, hn::Sub(bot.b[c], bot.a[c]), bot.a[c]);
    const VF v = hn::MulAdd(vwy, hn::Sub(b, t), t);
    hn::StoreU(hn::MulAdd(v, hn::Set(df, p.scale[c]), hn::Set(df, p.bias[c])), df, tmp[c] + x);
  }
}

// The same steps for one pixel, scalar (the vector loop's tail, edge rows, 1-pixel crops).
void pixel_scalar(const ImagePlan& p, const uint8_t* img, int32_t ya, int32_t yb, float wy, int32_t xa, int32_t xb,
                  float wx, int channels, float* out) {
  const ops::AippParams& view = p.fetch_view;
  float px[4][4];
  const int32_t xs[4] = {xa, xb, xa, xb}, ys[4] = {ya, ya, yb, yb};
  for (int k = 0; k < 4; ++k) {
    ops::aipp_fetch_pixel(view, img, xs[k], ys[k], px[k]);
    if (p.csc) {
      float o[3];
      for (int r = 0; r < 3; ++r) {
        float s = p.ob[r] + p.m[r * 3 + 2] * (px[k][2] - p.ib[2]);
        s += p.m[r * 3 + 1] * (px[k][1] - p.ib[1]);
        s += p.m[r * 3 + 0] * (px[k][0] - p.ib[0]);
        o[r] = std::min(std::max(s, 0.0f), 255.0f);
      }
      px[k][0] = o[0], px[k][1] = o[1], px[k][2] = o[2];
    }
  }
  for (int c = 0; c < channels; ++c) {
    const float t = px[0][c] + wx * (px[1][c] - px[0][c]);
    const float b = px[2][c] + wx * (px[3][c] - px[2][c]);
    out[c] = (t + wy * (b - t)) * p.scale[c] + p.bias[c];
  }
}

// Bytes of the raw image from its start through the last byte row y's pixels read (the
// chroma row, for the semi-planar formats).
int64_t bytes_through_row(const ImagePlan& p, int64_t y) {
  const int64_t w = p.src_w, h = p.src_h;
  switch (p.format) {
    case ops::AippFormat::kYuv420sp: return h * w + (y / 2 + 1) * w;
    case ops::AippFormat::kYuv422sp: return h * w + (y + 1) * w;
    case ops::AippFormat::kYuv400: return (y + 1) * w;
    case ops::AippFormat::kYuyv: return (y + 1) * w * 2;
    case ops::AippFormat::kRgb888: return (y + 1) * w * 3;
    default: return (y + 1) * w * 4;
  }
}

// Output rows [begin, end) over all images (row index = n * height + y).
void aipp_rows(const Job& job, int64_t begin, int64_t end) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int C = static_cast<int>(job.channels);
  const int64_t H = job.height, W = job.width;
  thread_local std::vector<float> tmp_storage;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t n = row / H, y = row % H;
    const ImagePlan& p = job.plans[job.one_plan ? 0 : n];
    const uint8_t* img = job.images + n * job.image_stride;
    const size_t need = static_cast<size_t>(C) * static_cast<size_t>(W + lanes);
    if (tmp_storage.size() < need) tmp_storage.resize(need);
    float* tmp[4];
    for (int c = 0; c < C; ++c) tmp[c] = tmp_storage.data() + c * (W + lanes);
    // 1. the output row: padding, or padding around a region row.
    const int64_t ry = y - p.top;
    const bool in_region = ry >= 0 && ry < p.rh;
    for (int c = 0; c < C; ++c) std::fill(tmp[c], tmp[c] + W, p.padding_value);
    if (in_region) {
      float* reg[4];
      for (int c = 0; c < C; ++c) reg[c] = tmp[c] + p.left;
      const int32_t ya = p.y0[static_cast<size_t>(ry)];
      const float wy = p.wy[static_cast<size_t>(ry)];
      // 2. vectors where every gather stays inside the buffer: bytes up to 8 past the
      // furthest row start of this image's last row read.
      const int32_t yb = p.taps2 ? ya + 1 : ya;
      const bool vector_ok = p.taps2 && img + bytes_through_row(p, yb) + 8 <= job.buffer_end;
      int64_t x = 0;
      if (vector_ok)
        for (; x + lanes <= p.rw; x += lanes) row_vector(p, img, ya, wy, x, C, reg);
      float out[4];
      for (; x < p.rw; ++x) {
        const int32_t xa = p.x0[static_cast<size_t>(x)];
        pixel_scalar(p, img, ya, yb, wy, xa, p.taps2 ? xa + 1 : xa, p.wx[static_cast<size_t>(x)], C, out);
        for (int c = 0; c < C; ++c) reg[c][x] = out[c];
      }
    }
    // 3. into the output's layout.
    if (!job.nhwc) {
      for (int c = 0; c < C; ++c) std::memcpy(job.dst + ((n * C + c) * H + y) * W, tmp[c], sizeof(float) * W);
    } else {
      float* d = job.dst + (n * H + y) * W * C;
      for (int64_t x = 0; x < W; ++x)
        for (int c = 0; c < C; ++c) d[x * C + c] = tmp[c][x];
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::aipp_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using aipp_simd::ImagePlan;

// Bilinear taps along one axis (ops/aipp_params.h step 4), as absolute source indices:
// left tap `first + i0` and the weight of `first + i0 + 1`.
void axis_taps(int32_t first, int32_t in, int32_t out, bool resize, std::vector<int32_t>* i0, std::vector<float>* w) {
  i0->resize(static_cast<size_t>(out));
  w->resize(static_cast<size_t>(out));
  for (int32_t o = 0; o < out; ++o) {
    double s = resize ? (o + 0.5) * in / out - 0.5 : o;
    s = std::clamp(s, 0.0, static_cast<double>(in - 1));
    int32_t i = static_cast<int32_t>(std::floor(s));
    double f = s - i;
    if (in >= 2 && i == in - 1) i = in - 2, f = 1.0;  // the same value, with i + 1 inside
    (*i0)[static_cast<size_t>(o)] = first + i;
    (*w)[static_cast<size_t>(o)] = static_cast<float>(f);
  }
}

ImagePlan make_plan(const ops::AippParams& p, const ops::AippBatchParams& b) {
  ImagePlan plan;
  plan.format = p.format;
  plan.rbuv_swap = p.rbuv_swap, plan.ax_swap = p.ax_swap, plan.csc = p.csc;
  plan.src_w = p.src_w, plan.src_h = p.src_h;
  plan.fetch_view.format = p.format, plan.fetch_view.src_w = p.src_w, plan.fetch_view.src_h = p.src_h;
  plan.fetch_view.rbuv_swap = p.rbuv_swap, plan.fetch_view.ax_swap = p.ax_swap;
  const int32_t cx = b.crop ? b.crop_x : 0, cy = b.crop ? b.crop_y : 0;
  const int32_t cw = b.crop ? b.crop_w : p.src_w, ch = b.crop ? b.crop_h : p.src_h;
  plan.rw = b.resize ? b.resize_w : cw;
  plan.rh = b.resize ? b.resize_h : ch;
  plan.left = b.padding ? b.pad_left : 0;
  plan.top = b.padding ? b.pad_top : 0;
  plan.padding_value = b.padding_value;
  for (int i = 0; i < 9; ++i) plan.m[i] = p.matrix[i / 3][i % 3] / 256.0f;
  for (int i = 0; i < 3; ++i) plan.ib[i] = p.input_bias[i], plan.ob[i] = p.output_bias[i];
  for (int c = 0; c < 4; ++c) {
    plan.scale[c] = b.var_reci[c];
    plan.bias[c] = -(b.mean[c] + b.min[c]) * b.var_reci[c];
  }
  axis_taps(cx, cw, plan.rw, b.resize, &plan.x0, &plan.wx);
  axis_taps(cy, ch, plan.rh, b.resize, &plan.y0, &plan.wy);
  plan.taps2 = cw >= 2 && ch >= 2;
  if (!plan.taps2) {  // one tap: the scalar path reads x0 (and y0) only
    for (int32_t& i : plan.x0) i = std::min(i, cx + cw - 1);
    for (int32_t& i : plan.y0) i = std::min(i, cy + ch - 1);
    std::fill(plan.wx.begin(), plan.wx.end(), 0.0f);
    std::fill(plan.wy.begin(), plan.wy.end(), 0.0f);
  }
  return plan;
}

std::vector<ImagePlan> make_plans(const ops::AippParams& p) {
  std::vector<ImagePlan> plans;
  for (const ops::AippBatchParams& b : p.batch) plans.push_back(make_plan(p, b));
  return plans;
}

using RowsFn = void (*)(const aipp_simd::Job&, int64_t, int64_t);

class AippKernel final : public Kernel {
 public:
  explicit AippKernel(ops::AippNodeInfo info) : info_(std::move(info)) {
    rows_ = KILN_SIMD_SELECT(kiln::kernels::aipp_simd, aipp_rows);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
    if (!info_.dynamic) static_plans_ = make_plans(info_.params);
  }

  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    std::vector<ImagePlan> dynamic_plans;
    const std::vector<ImagePlan>* plans = &static_plans_;
    const ops::AippParams* params = &info_.params;
    ops::AippParams dynamic_params;
    if (info_.dynamic) {
      KILN_ASSIGN_OR_RETURN(dynamic_params, ops::aipp_run_params(node, info_, ctx.input(1)));
      dynamic_plans = make_plans(dynamic_params);
      plans = &dynamic_plans;
      params = &dynamic_params;
    }
    const Tensor* image = ctx.input(0);
    KILN_RETURN_IF_ERROR(ops::check_aipp_image(node, info_, *params, image));
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, info_.output_dims,
                                                          TensorInit::kUninitialized));
    aipp_simd::Job job;
    job.images = image->data<uint8_t>();
    job.image_stride = image->num_elements() / info_.out.batch;
    job.buffer_end = job.images + image->num_elements();
    job.plans = plans->data();
    job.one_plan = plans->size() == 1;
    job.batch = info_.out.batch;
    job.channels = info_.out.channels;
    job.height = info_.out.height;
    job.width = info_.out.width;
    job.nhwc = info_.out.nhwc;
    job.dst = y->data<float>();
    const RowsFn rows = rows_;
    parallel_for(0, job.batch * job.height, 4, [&](int64_t b, int64_t e) { rows(job, b, e); });
    return ok_status();
  }
  std::string implementation() const override { return implementation_; }

 private:
  ops::AippNodeInfo info_;
  std::vector<ImagePlan> static_plans_;
  RowsFn rows_ = nullptr;
  std::string implementation_;
};

Expected<std::unique_ptr<Kernel>> prepare_aipp(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(ops::AippNodeInfo info, ops::aipp_node_info(node));
  return std::unique_ptr<Kernel>(new AippKernel(std::move(info)));
}

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = ops::kAippOp,
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "kiln",
                                    .applicable = [](const ir::Node& n) { return ops::aipp_node_info(n).ok(); },
                                    .prepare = prepare_aipp}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
