// Fast kernel for kiln AippConv (ops/aipp_conv.cc): the Aipp node's preprocessing and the
// convolution reading its image, without the float32 image. Per strip of R output rows of
// the convolution (of one image), on the thread that runs it:
//   1. the Aipp fast kernel's rows (aipp_rows.h) write the image rows the strip's windows
//      read, (R - 1) * stride + (K - 1) * dilation + 1 of them, into a per-thread strip buffer
//      (NCHW, a plane per channel); rows above or below the image are zeros, the
//      convolution's padding;
//   2. a oneDNN convolution made for that strip (no top/bottom padding, the image's left and
//      right padding) reads the buffer and writes the strip's output rows in place in Y, in
//      Y's layout (NC1HWC0 for a blocked reader, as the unfolded FusedConv wrote it): the
//      destination desc is a window of Y's, at the strip's first row.
// Strips run in parallel over the images' strips with the parallel_for the Aipp kernel uses.
// The strip buffer (kStripBytes) stays in L2 between the two steps, so the image is written
// and read back in cache instead of through memory (4.9 MB at 640x640). A thread's next strip
// takes the K - stride rows it shares with the previous one from the buffer.
//
// oneDNN per strip, not a direct convolution of our own: bench/aipp/first_conv_layouts.cc's
// direct AVX-512 prototype (8 output pixels x 16 channels in registers) took 0.67-0.75 ms
// for det's 3 -> 16 3x3 s2 at 640x640 against oneDNN's 0.59-0.63 ms (docs/aipp.md), and
// oneDNN takes every window, stride, dilation, output layout and activation post-op the
// FusedConv took. Primitives are created for one thread (each strip is one thread's work).
// Inputs other than those prepared for (shapes, W / B other than the node's initializers)
// run the reference kernel.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/aipp_rows.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/aipp.h"
#include "ops/fused_activation.h"
#include "ops/layout.h"
#include "ops/spatial_util.h"
#include "profiler/profiler.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

// Bytes of image rows per strip: with det's 640-wide RGB image, 8 output rows of a stride-2
// 3x3 convolution (17 rows, 130 KB; their output 164 KB), the pair well inside a core's L2.
constexpr int64_t kStripBytes = int64_t{128} << 10;

struct AippConvPlan {
  ops::AippNodeInfo aipp;
  std::vector<int64_t> w_dims, y_dims, y_tensor_dims;  // y_dims logical N M OH OW
  int64_t y_block = 0;                                 // C0 of a blocked Y, 0: plain
  ops::WindowGeometry geo;
  const Tensor* weights = nullptr;
  const Tensor* bias = nullptr;
  ops::FusedActivation act;
};

Expected<AippConvPlan> plan_aipp_conv(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kKilnDomain || node.op_type() != ops::kAippConvOp)
    return unsupported("node %s: not an AippConv", label.c_str());
  AippConvPlan p;
  KILN_ASSIGN_OR_RETURN(p.aipp, ops::aipp_node_info(node));
  if (p.aipp.dynamic || p.aipp.out.nhwc) return unsupported("node %s: a static NCHW Aipp only", label.c_str());
  if (node.inputs().size() > 3 || node.outputs().size() != 1)
    return unsupported("node %s: %zu inputs, %zu outputs", label.c_str(), node.inputs().size(), node.outputs().size());
  KILN_RETURN_IF_ERROR(require_static_tensor("image", node.input(0), {DataType::kUInt8}));
  KILN_RETURN_IF_ERROR(require_static_tensor("Y", node.output(0), {DataType::kFloat32}));
  KILN_RETURN_IF_ERROR(require_initializer("W", node.input(1), DataType::kFloat32));
  const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (b) KILN_RETURN_IF_ERROR(require_initializer("B", b, DataType::kFloat32));
  p.weights = node.input(1)->initializer();
  p.w_dims = p.weights->dims();
  if (p.w_dims.size() != 4 || p.w_dims[1] != p.aipp.out.channels || node.attr_int("group", 1) != 1)
    return unsupported("node %s: W %s: a 2-D convolution of the image's %lld channels, one group", label.c_str(),
                       dims_to_string(p.w_dims).c_str(), (long long)p.aipp.out.channels);
  if (b) {
    p.bias = b->initializer();
    if (p.bias->dims() != std::vector<int64_t>{p.w_dims[0]})
      return unsupported("node %s: B %s", label.c_str(), dims_to_string(p.bias->dims()).c_str());
  }
  KILN_ASSIGN_OR_RETURN(int parts, ops::bf16_parts(node));
  if (parts) return unsupported("node %s: float32 only", label.c_str());
  KILN_ASSIGN_OR_RETURN(p.act, ops::parse_fused_activation(node));
  if (!onednn::activation_supported(p.act))
    return unsupported("node %s: activation has no oneDNN post-op", label.c_str());
  const std::string yf = node.attr_string("y_format", ops::kFormatPlain);
  if (!ops::valid_format(yf)) return unsupported("node %s: y_format '%s'", label.c_str(), yf.c_str());
  p.y_tensor_dims = node.output(0)->shape().static_dims();
  p.y_dims = p.y_tensor_dims;
  if (ops::is_blocked_format(yf)) {
    p.y_block = node.attr_int("c0", 0);
    if (p.y_block != 8 && p.y_block != 16)
      return unsupported("node %s: blocks of %lld channels (oneDNN has 8 and 16)", label.c_str(), (long long)p.y_block);
    KILN_ASSIGN_OR_RETURN(Shape ps, ops::plain_shape(node.output(0)->shape(), p.y_block));
    p.y_dims = ps.static_dims();
  }
  KILN_ASSIGN_OR_RETURN(p.geo, ops::window_geometry(node, {p.aipp.out.height, p.aipp.out.width},
                                                    {p.w_dims[2], p.w_dims[3]}, false));
  const std::vector<int64_t> expect{p.aipp.out.batch, p.w_dims[0], p.geo.out[0], p.geo.out[1]};
  if (expect != p.y_dims)
    return unsupported("node %s: output %s, the geometry gives %s", label.c_str(), dims_to_string(p.y_dims).c_str(),
                       dims_to_string(expect).c_str());
  return p;
}

// The convolution of one strip of `out_rows` output rows.
struct StripConv {
  int64_t out_rows = 0, in_rows = 0;
  dnnl::convolution_forward conv;
  memory::desc src, dst;
  size_t scratch_bytes = 0;
  memory weights;
  std::shared_ptr<void> weights_buffer;
  std::string impl;  // oneDNN's, e.g. "onednn:jit:avx512_core"
};

class AippConvKernel final : public Kernel {
 public:
  AippConvKernel(AippConvPlan plan, const ops::KernelFn* reference) : plan_(std::move(plan)), reference_(reference) {}

  Status init(const ir::Node& node);
  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return impl_; }

 private:
  Status make_strip(int64_t out_rows, StripConv* s) const;
  bool inputs_as_prepared(const ops::KernelContext& ctx) const;
  // Strip `k` of image n: its image rows, then its convolution. Throws dnnl::error.
  // `continues`: the thread ran the previous strip of this run (the Aipp rows' caches stay).
  void run_strip(const aipp_simd::Job& base, int64_t n, int64_t k, bool continues, float* y) const;

  AippConvPlan plan_;
  const ops::KernelFn* reference_;
  Tensor w_initializer_, b_initializer_;
  aipp_simd::RowsFn rows_ = nullptr;
  std::vector<aipp_simd::ImagePlan> image_plans_;
  int64_t strip_rows_ = 0, strips_ = 0;  // output rows per strip, strips per image
  StripConv full_, last_;                 // last_: the image's last strip when it is shorter
  memory bias_;
  bool direct_ = false;  // the strip's output written in place in Y (one channel block)
  size_t src_offset_ = 0, dst_offset_ = 0, workspace_bytes_ = 0;  // thread workspace layout
  onednn::RunMemories memories_;
  std::string impl_;
};

Status AippConvKernel::make_strip(int64_t out_rows, StripConv* s) const {
  const AippConvPlan& p = plan_;
  const auto f32 = memory::data_type::f32;
  const int64_t ext_h = (p.w_dims[2] - 1) * p.geo.dilations[0] + 1;
  s->out_rows = out_rows;
  s->in_rows = (out_rows - 1) * p.geo.strides[0] + ext_h;
  s->src = memory::desc({1, p.aipp.out.channels, s->in_rows, p.aipp.out.width}, f32, memory::format_tag::nchw);
  // Y's layout, dense over the strip's rows: oneDNN 2.6 offers only its reference kernel for
  // a window of Y's own desc (Y's strides). Y's rows [oy0, oy0 + out_rows) of one image are
  // such a block when Y has one channel block (C1 = 1: det's 16 channels in nChw16c);
  // otherwise the strip's output goes to the workspace and is copied per block (run_strip).
  s->dst = memory::desc({1, p.y_dims[1], out_rows, p.y_dims[3]}, f32,
                        p.y_block == 16  ? memory::format_tag::nChw16c
                        : p.y_block == 8 ? memory::format_tag::nChw8c
                                         : memory::format_tag::nchw);
  const memory::desc w_md({p.w_dims[0], p.w_dims[1], p.w_dims[2], p.w_dims[3]}, f32, memory::format_tag::any);
  const memory::desc bias_md = p.bias ? memory::desc({p.w_dims[0]}, f32, memory::format_tag::a) : memory::desc();
  dnnl::post_ops po;
  KILN_RETURN_IF_ERROR(onednn::append_activation(p.act, po));
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Rows: none padded (the strip buffer holds the padding rows); columns: the image's.
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, s->src, w_md, bias_md, s->dst,
      {p.geo.strides[0], p.geo.strides[1]}, {p.geo.dilations[0] - 1, p.geo.dilations[1] - 1},
      {0, p.geo.pad_begin(1)}, {0, p.geo.pad_end(1)});
  dnnl::convolution_forward::primitive_desc pd(desc, attr, onednn::cpu_engine());
  const std::string impl = onednn::implementation_name(pd);
  if (impl.rfind("onednn:ref", 0) == 0) return unsupported("oneDNN offers only %s for the strips", impl.c_str());
  s->conv = dnnl::convolution_forward(pd);
  s->impl = impl;
  s->scratch_bytes = pd.scratchpad_desc().get_size();
  const memory::desc user_w({p.w_dims[0], p.w_dims[1], p.w_dims[2], p.w_dims[3]}, f32, memory::format_tag::oihw);
  s->weights_buffer = onednn::pack_shared(user_w, p.weights->raw_data(), pd.weights_desc());
  s->weights = memory(pd.weights_desc(), onednn::cpu_engine(), s->weights_buffer.get());
  return ok_status();
}

Status AippConvKernel::init(const ir::Node& node) {
  const AippConvPlan& p = plan_;
  w_initializer_ = *p.weights;
  if (p.bias) b_initializer_ = *p.bias;
  rows_ = aipp_simd::select_rows();
  image_plans_ = aipp_simd::make_plans(p.aipp.params);
  const int64_t oh = p.y_dims[2];
  const int64_t row_bytes = p.aipp.out.channels * p.aipp.out.width * static_cast<int64_t>(sizeof(float));
  const int64_t ext_h = (p.w_dims[2] - 1) * p.geo.dilations[0] + 1;
  strip_rows_ = std::clamp((kStripBytes / row_bytes - ext_h) / p.geo.strides[0] + 1, int64_t{1}, oh);
  strips_ = (oh + strip_rows_ - 1) / strip_rows_;
  try {
    // Each strip is one thread's work: primitives for one thread.
    onednn::SingleThreadScope one_thread;
    KILN_RETURN_IF_ERROR(make_strip(strip_rows_, &full_), "node %s", node.label().c_str());
    if (oh % strip_rows_) KILN_RETURN_IF_ERROR(make_strip(oh % strip_rows_, &last_), "node %s", node.label().c_str());
    if (p.bias) {
      bias_ = memory(memory::desc({p.w_dims[0]}, memory::data_type::f32, memory::format_tag::a), onednn::cpu_engine());
      std::memcpy(bias_.get_data_handle(), p.bias->raw_data(), p.bias->size_bytes());
    }
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no convolution for its strips: %s", node.label().c_str(), e.what());
  }
  // The workspace: the scratchpad, the strip buffer, and (C1 > 1) the strip's output.
  const int64_t block = p.y_block ? p.y_block : 1;
  direct_ = p.y_dims[1] == block;
  src_offset_ = onednn::align64(std::max(full_.scratch_bytes, last_.scratch_bytes));
  dst_offset_ = src_offset_ + onednn::align64(static_cast<size_t>(full_.in_rows * p.aipp.out.channels *
                                                                  p.aipp.out.width) * sizeof(float));
  workspace_bytes_ =
      dst_offset_ + (direct_ ? 0 : static_cast<size_t>(p.y_dims[1] * strip_rows_ * p.y_dims[3]) * sizeof(float));
  impl_ = std::string("simd:") + aipp_simd::rows_target_name() + "+" + full_.impl + " (strips of " +
          std::to_string(strip_rows_) + " rows)";
  return ok_status();
}

bool AippConvKernel::inputs_as_prepared(const ops::KernelContext& ctx) const {
  const Tensor* w = ctx.input(1);
  const Tensor* b = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
  if (!w || w->raw_data() != w_initializer_.raw_data() || w->dims() != plan_.w_dims) return false;
  if (!b_initializer_.defined()) return b == nullptr;
  return b && b->raw_data() == b_initializer_.raw_data() && b->dims() == b_initializer_.dims();
}

void AippConvKernel::run_strip(const aipp_simd::Job& base, int64_t n, int64_t k, bool continues, float* y) const {
  const AippConvPlan& p = plan_;
  const int64_t oh = p.y_dims[2], ow = p.y_dims[3], h = p.aipp.out.height, w = p.aipp.out.width;
  const int64_t oy0 = k * strip_rows_;
  const StripConv& s = oy0 + strip_rows_ <= oh ? full_ : last_;
  char* ws = static_cast<char*>(onednn::thread_workspace(workspace_bytes_));
  if (!ws) throw dnnl::error(dnnl_out_of_memory, "cannot allocate the strip buffer");
  float* strip = reinterpret_cast<float*>(ws + src_offset_);
  // Profiling: step 1 (the Aipp part) as a task record apart from the node's op record, so
  // that the preprocessing's share of the op time can be told from the convolution's.
  const int64_t aipp_start = KILN_UNLIKELY(profiler::enabled()) ? profiler::now_ns() : -1;
  // 1. Image rows [r0, r0 + in_rows): those inside the image from the Aipp rows, zeros around.
  // The first `reuse` of them (K - stride rows, dilated) are the previous strip's last ones
  // when this thread just ran strip k - 1 (always a full one): moved up, not recomputed.
  const int64_t stride = p.geo.strides[0];
  const int64_t r0 = oy0 * stride - p.geo.pad_begin(0);
  const int64_t plane = s.in_rows * w;
  const int64_t reuse = continues && k > 0 ? std::max<int64_t>(0, full_.in_rows - strip_rows_ * stride) : 0;
  const int64_t C = p.aipp.out.channels;
  // Ascending channels are safe: a channel's new rows end before the next one's old rows start.
  for (int64_t c = 0; reuse > 0 && c < C; ++c)
    std::memmove(strip + c * plane, strip + c * full_.in_rows * w + (full_.in_rows - reuse) * w,
                 static_cast<size_t>(reuse * w) * sizeof(float));
  const int64_t first = r0 + reuse, end = r0 + s.in_rows;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = first; r < end; ++r)
      if (r < 0 || r >= h) std::fill(strip + c * plane + (r - r0) * w, strip + c * plane + (r - r0 + 1) * w, 0.0f);
  const int64_t ya = std::clamp<int64_t>(first, 0, h), yb = std::clamp<int64_t>(end, 0, h);
  if (yb > ya) {
    aipp_simd::Job job = base;
    job.dst = strip;
    job.image_floats = 0;  // one image per call
    job.plane_floats = plane;
    job.row0 = r0;
    job.continues = continues;
    rows_(job, n * h + ya, n * h + yb);
  }
  if (KILN_UNLIKELY(aipp_start >= 0)) profiler::record_task(ops::kAippConvRowsTask, aipp_start);
  // 2. The strip's convolution, into Y's rows [oy0, oy0 + out_rows) of image n: in place, or
  // through the workspace, one block of channels (a channel, plain) at a time.
  const int64_t block = p.y_block ? p.y_block : 1;
  const int64_t blocks = p.y_dims[1] / block;
  const int64_t block_floats = oh * ow * block;        // one block of one image in Y
  float* y_strip = y + (n * blocks * oh + oy0) * ow * block;
  float* out = direct_ ? y_strip : reinterpret_cast<float*>(ws + dst_offset_);
  const int idx = &s == &full_ ? 0 : 3;
  const memory& scratch = memories_.get(idx, onednn::bytes_desc(s.scratch_bytes), s.scratch_bytes ? ws : nullptr);
  const memory& src = memories_.get(idx + 1, s.src, strip);
  const memory& dst = memories_.get(idx + 2, s.dst, out);
  onednn::Args args{{DNNL_ARG_SRC, &src}, {DNNL_ARG_WEIGHTS, &s.weights}, {DNNL_ARG_DST, &dst},
                    {DNNL_ARG_SCRATCHPAD, &scratch}};
  if (b_initializer_.defined()) args.add(DNNL_ARG_BIAS, bias_);
  dnnl::stream& st = onednn::thread_stream();
  args.execute(s.conv, st);
  st.wait();
  if (direct_) return;
  const int64_t strip_floats = s.out_rows * ow * block;
  for (int64_t c1 = 0; c1 < blocks; ++c1)
    std::memcpy(y_strip + c1 * block_floats, out + c1 * strip_floats, static_cast<size_t>(strip_floats) * sizeof(float));
}

Status AippConvKernel::run(ops::KernelContext& ctx) const {
  const ir::Node& node = ctx.node();
  if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
  const ops::AippNodeInfo& info = plan_.aipp;
  const Tensor* image = ctx.input(0);
  KILN_RETURN_IF_ERROR(ops::check_aipp_image(node, info, info.params, image));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan_.y_tensor_dims,
                                                        TensorInit::kUninitialized));
  const aipp_simd::Job job = aipp_simd::make_job(info.out, *image, image_plans_);
  float* dst = y->data<float>();
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string error;
  parallel_for(0, info.out.batch * strips_, 1, [&](int64_t b, int64_t e) {
    try {
      for (int64_t i = b; i < e && !failed.load(std::memory_order_relaxed); ++i) run_strip(job, i / strips_, i % strips_, i > b, dst);
    } catch (const dnnl::error& err) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed.exchange(true)) error = err.what();
    }
  });
  if (failed.load()) return internal_error("node %s: oneDNN convolution failed: %s", node.label().c_str(), error.c_str());
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_aipp_conv(const ir::Node& node) {
  return onednn::prepare_planned<AippConvKernel>(node, plan_aipp_conv);
}

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = ops::kAippConvOp,
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "kiln",
                                    .applicable = [](const ir::Node& n) { return plan_aipp_conv(n).status(); },
                                    .prepare = prepare_aipp_conv}));

}  // namespace kiln::kernels
