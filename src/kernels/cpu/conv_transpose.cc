// oneDNN deconvolution kernel for ONNX ConvTranspose (float32, 2-D, groups, strides,
// dilations, explicit pads, output_padding that fits in the end pad): weights pre-packed at
// prepare, one primitive per node. Source and destination stay plain NCHW for the graph; the
// primitive picks its own layout and the run reorders through the thread's workspace, as the
// convolution kernel does. Measured on PP-OCRv4 det (640x640, kiln profile): the reference
// ConvTranspose took about 76 ms per call, 17% of the model.
//
// Left to the reference kernel: auto_pad other than NOTSET, output_shape, an output_padding
// larger than the end pad (oneDNN takes no negative padding), 1-D and 3-D, other dtypes.
//
// Windows that do not overlap (strides equal to the kernel, no pads, dilations or groups: the
// DB head's 2x2 / stride 2 upsampling of PP-OCR det) run first on Kiln's packed GEMM instead
// (GemmDeconvKernel): each output pixel block is one input pixel times W, so Y is X^T W
// scattered, computed a band of input rows at a time into the thread workspace (planned into the
// arena at compile time). oneDNN's plain-layout deconvolution (gemm-based) mallocs its GEMM
// packing buffers on every call, 5.1 MB per thread for det's first ConvTranspose (issue 33).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/lent_workspace.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

struct DeconvPlan {
  std::vector<int64_t> x_dims, w_dims, y_dims;
  int64_t group = 1;
  memory::dims strides, dilations, pad_l, pad_r;
  const Tensor* weights = nullptr;
  const Tensor* bias = nullptr;
};

Status require_static_f32(const char* what, const ir::Value* v) {
  return require_static_tensor(what, v, {DataType::kFloat32});
}

Expected<DeconvPlan> plan_deconv(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kOnnxDomain || node.op_type() != "ConvTranspose")
    return unsupported("node %s: not a ConvTranspose", label.c_str());
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* b = node.input(2);
  const ir::Value* y = node.output(0);
  if (node.inputs().size() > 3 || node.outputs().size() != 1)
    return unsupported("node %s: %zu inputs and %zu outputs, expected at most 3 and 1", label.c_str(),
                       node.inputs().size(), node.outputs().size());
  KILN_RETURN_IF_ERROR(require_static_f32("X", x));
  KILN_RETURN_IF_ERROR(require_static_f32("Y", y));
  KILN_RETURN_IF_ERROR(require_initializer("W", w, DataType::kFloat32));  // packed once, at prepare
  if (b) KILN_RETURN_IF_ERROR(require_initializer("B", b, DataType::kFloat32));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" || node.attr("output_shape"))
    return unsupported("node %s: auto_pad / output_shape run on the reference kernel", label.c_str());
  DeconvPlan p;
  p.x_dims = x->shape().static_dims();
  p.y_dims = y->shape().static_dims();
  p.weights = w->initializer();
  p.w_dims = p.weights->dims();
  if (p.x_dims.size() != 4 || p.w_dims.size() != 4 || p.y_dims.size() != 4)
    return unsupported("node %s: 2-D transposed convolutions only", label.c_str());
  for (int64_t d : p.x_dims)
    if (d <= 0) return unsupported("node %s: empty input", label.c_str());
  p.group = node.attr_int("group", 1);
  const int64_t c = p.x_dims[1], m = p.w_dims[1] * p.group;
  if (p.group < 1 || c % p.group != 0 || p.w_dims[0] != c || p.y_dims[1] != m)
    return unsupported("node %s: group %lld does not fit X %s, W %s, Y %s", label.c_str(), (long long)p.group,
                       dims_to_string(p.x_dims).c_str(), dims_to_string(p.w_dims).c_str(),
                       dims_to_string(p.y_dims).c_str());
  if (b) {
    p.bias = b->initializer();
    if (p.bias->dims() != std::vector<int64_t>{m}) return unsupported("node %s: B must be [%lld]", label.c_str(), (long long)m);
  }
  const std::vector<int64_t> kernel = node.attr_ints("kernel_shape", {p.w_dims[2], p.w_dims[3]});
  const std::vector<int64_t> strides = node.attr_ints("strides", {1, 1});
  const std::vector<int64_t> dilations = node.attr_ints("dilations", {1, 1});
  const std::vector<int64_t> pads = node.attr_ints("pads", {0, 0, 0, 0});
  const std::vector<int64_t> out_pad = node.attr_ints("output_padding", {0, 0});
  if (kernel != std::vector<int64_t>{p.w_dims[2], p.w_dims[3]} || strides.size() != 2 || dilations.size() != 2 ||
      pads.size() != 4 || out_pad.size() != 2)
    return unsupported("node %s: kernel_shape %s (W gives %s), strides, dilations, pads or output_padding not 2-D",
                       label.c_str(), dims_to_string(kernel).c_str(),
                       dims_to_string({p.w_dims[2], p.w_dims[3]}).c_str());
  for (int d = 0; d < 2; ++d) {
    if (strides[d] < 1 || dilations[d] < 1 || pads[d] < 0 || pads[d + 2] < 0 || out_pad[d] < 0)
      return unsupported("node %s: invalid geometry", label.c_str());
    const int64_t end = pads[d + 2] - out_pad[d];
    if (end < 0) return unsupported("node %s: output_padding beyond the end pad", label.c_str());
    const int64_t span = (kernel[d] - 1) * dilations[d] + 1;
    const int64_t out = strides[d] * (p.x_dims[2 + d] - 1) + span - pads[d] - end;
    if (out != p.y_dims[2 + d])
      return unsupported("node %s: output %s does not match the geometry", label.c_str(), dims_to_string(p.y_dims).c_str());
    p.strides.push_back(strides[d]);
    p.dilations.push_back(dilations[d] - 1);  // oneDNN counts the gaps
    p.pad_l.push_back(pads[d]);
    p.pad_r.push_back(end);
  }
  return p;
}

// What both kernels keep of their node: the plan, the reference kernel for inputs other than
// those prepared, and the initializers they were prepared with.
struct DeconvKernelBase : Kernel {
  // Fills in the above for `node`; fails when its op has no reference kernel.
  Status init_base(const ir::Node& node, const DeconvPlan& p) {
    KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
    if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
    plan = p;
    reference = &schema->kernel_fn();
    w_initializer = *p.weights;
    if (p.bias) b_initializer = *p.bias;
    return ok_status();
  }
  // The run's inputs are those prepared (X's dims, W and B the initializers).
  bool as_prepared(const ops::KernelContext& ctx) const {
    const Tensor* x = ctx.input(0);
    const Tensor* w = ctx.input(1);
    const Tensor* b = ctx.input(2);
    return x && x->dtype() == DataType::kFloat32 && x->dims() == plan.x_dims && w &&
           w->raw_data() == w_initializer.raw_data() &&
           (b_initializer.defined() ? b && b->raw_data() == b_initializer.raw_data() : !b);
  }
  const ops::KernelFn* reference = nullptr;
  Tensor w_initializer, b_initializer;  // compared by address: a fed W or B runs the reference
  DeconvPlan plan;
};

class OnednnDeconvKernel final : public DeconvKernelBase {
 public:
  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    const Tensor* x = ctx.input(0);
    if (!as_prepared(ctx)) return (*reference)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan.y_dims, TensorInit::kUninitialized));
    const onednn::LayoutBridge& lb = layouts;
    char* ws = static_cast<char*>(onednn::thread_workspace(lb.workspace_bytes));
    if (!ws && lb.workspace_bytes > 0)
      return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(),
                                lb.workspace_bytes);
    try {
      onednn::Args args{{DNNL_ARG_WEIGHTS, &weights}};
      if (b_initializer.defined()) args.add(DNNL_ARG_BIAS, bias);
      lb.run(deconv, args, ws, x->raw_data(), y->raw_data(), onednn::thread_stream());
    } catch (const dnnl::error& e) {
      return internal_error("node %s: oneDNN deconvolution failed: %s", node.label().c_str(), e.what());
    }
    return ok_status();
  }
  std::string implementation() const override { return impl; }

  std::string impl;
  dnnl::deconvolution_forward deconv;
  onednn::LayoutBridge layouts;  // X's and Y's layouts to the primitive's
  memory weights, bias;
};


Expected<std::unique_ptr<Kernel>> prepare_deconv(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(DeconvPlan plan, plan_deconv(node));
  auto k = std::make_unique<OnednnDeconvKernel>();
  KILN_RETURN_IF_ERROR(k->init_base(node, plan));
  const DeconvPlan& p = k->plan;
  const auto f32 = memory::data_type::f32;
  const dnnl::engine& eng = onednn::cpu_engine();
  try {
    onednn::CreationThreadsScope threads;
    // ONNX's W is C x M/g x kH x kW: oneDNN's (g x) O/g x I/g x kH x kW stored as (g) i o h w.
    const int64_t g = p.group, c = p.x_dims[1], m = p.y_dims[1];
    memory::dims w_dims = g > 1 ? memory::dims{g, m / g, c / g, p.w_dims[2], p.w_dims[3]}
                                : memory::dims{m, c, p.w_dims[2], p.w_dims[3]};
    const memory::desc user_w_md(w_dims, f32, g > 1 ? memory::format_tag::giohw : memory::format_tag::iohw);
    k->layouts.user_src = memory::desc(onednn::to_dims(p.x_dims), f32, memory::format_tag::nchw);
    k->layouts.user_dst = memory::desc(onednn::to_dims(p.y_dims), f32, memory::format_tag::nchw);
    const memory::desc any_src(onednn::to_dims(p.x_dims), f32, memory::format_tag::any);
    const memory::desc any_dst(onednn::to_dims(p.y_dims), f32, memory::format_tag::any);
    const memory::desc any_w(w_dims, f32, memory::format_tag::any);
    const memory::desc bias_md = p.bias ? memory::desc({m}, f32, memory::format_tag::a) : memory::desc();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // Kiln's tensors are plain (NCHW) here: first ask for an implementation on them as they
    // are. Blocked formats would cost a reorder of the whole input and output per run, and
    // for few output channels (the DB head's 24 -> 1 of PP-OCR det) a 16-channel-padded
    // output: measured on PP-OCRv4 det at 544x704 (1 thread), the blocked path spent ~8 ms
    // per image in this node against ~1 ms for the plain one.
    auto make_pd = [&](const memory::desc& src, const memory::desc& dst) {
      dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::deconvolution_direct, src, any_w, bias_md, dst,
                                             p.strides, p.dilations, p.pad_l, p.pad_r);
      return dnnl::deconvolution_forward::primitive_desc(desc, attr, eng);
    };
    dnnl::deconvolution_forward::primitive_desc pd = make_pd(k->layouts.user_src, k->layouts.user_dst);
    if (onednn::implementation_name(pd).rfind("onednn:ref", 0) == 0) pd = make_pd(any_src, any_dst);
    k->impl = onednn::implementation_name(pd);
    if (k->impl.rfind("onednn:ref", 0) == 0)
      return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), k->impl.c_str());
    k->deconv = dnnl::deconvolution_forward(pd);
    k->layouts.plan(pd.src_desc(), pd.dst_desc(), pd.scratchpad_desc().get_size());
    // Pack the weights once.
    k->weights = onednn::pack(user_w_md, p.weights->raw_data(), pd.weights_desc());
    if (p.bias) {
      k->bias = memory(bias_md, eng);
      std::memcpy(k->bias.get_data_handle(), p.bias->raw_data(), p.bias->size_bytes());
    }
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no deconvolution for it: %s", node.label().c_str(), e.what());
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

// ---- Non-overlapping windows on Kiln's packed GEMM ----

// The plan when every input pixel writes its own kH x kW block of Y: strides equal to the kernel,
// no dilation, no pads, one group.
Expected<DeconvPlan> plan_gemm_deconv(const ir::Node& node) {
  static const bool enabled = [] {  // KILN_DECONV_GEMM=0: oneDNN's kernel only (A/B measurements)
    const char* v = std::getenv("KILN_DECONV_GEMM");
    return !v || std::strcmp(v, "0") != 0;
  }();
  if (!enabled) return unsupported("node %s: KILN_DECONV_GEMM=0", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(DeconvPlan p, plan_deconv(node));
  if (p.group != 1) return unsupported("node %s: groups run on oneDNN", node.label().c_str());
  for (int d = 0; d < 2; ++d)
    if (p.strides[static_cast<size_t>(d)] != p.w_dims[2 + d] || p.dilations[static_cast<size_t>(d)] != 0 ||
        p.pad_l[static_cast<size_t>(d)] != 0 || p.pad_r[static_cast<size_t>(d)] != 0)
      return unsupported("node %s: windows overlap or are padded (strides other than the kernel, pads, dilations)",
                         node.label().c_str());
  return p;
}

// A = X^T of one image from pixel p0 on: row i is pixel p0 + i, column k channel k.
class PixelRows final : public gemm::ASource {
 public:
  PixelRows(const float* x, int64_t pixels) : x_(x), pixels_(pixels) {}
  void pack(int64_t i0, int64_t rows, int64_t k0, int64_t kc, float* out) const override {
    const int64_t tile = gemm::tile_rows();
    for (int64_t k = 0; k < kc; ++k)
      std::memcpy(out + k * tile, x_ + (k0 + k) * pixels_ + i0, static_cast<size_t>(rows) * sizeof(float));
  }

 private:
  const float* x_;  // channel 0 at the band's first pixel
  int64_t pixels_;  // H * W: the channel stride
};

class GemmDeconvKernel final : public DeconvKernelBase {
 public:
  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!as_prepared(ctx)) return (*reference)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan.y_dims, TensorInit::kUninitialized));
    auto* band = static_cast<float*>(onednn::thread_workspace(band_bytes));
    if (!band)
      return resource_exhausted("node %s: cannot allocate a %zu-byte workspace", ctx.node().label().c_str(), band_bytes);
    const int64_t c = plan.x_dims[1], h = plan.x_dims[2], wd = plan.x_dims[3], m = plan.y_dims[1];
    const int64_t kh = plan.w_dims[2], kw = plan.w_dims[3], n_cols = m * kh * kw;
    const int64_t oh = plan.y_dims[2], ow = plan.y_dims[3];
    gemm::Epilogue epilogue;
    epilogue.row = bias_cols.empty() ? nullptr : bias_cols.data();
    for (int64_t n = 0; n < plan.x_dims[0]; ++n) {
      const float* xn = x->data<float>() + n * c * h * wd;
      float* yn = y->data<float>() + n * m * oh * ow;
      for (int64_t r0 = 0; r0 < h; r0 += band_rows) {
        const int64_t rows = std::min(band_rows, h - r0);
        // band[q, (o, a, b)] = sum_k X[k, pixel r0 * W + q] W[k, o, a, b] (+ B[o])
        gemm::multiply(rows * wd, PixelRows(xn + r0 * wd, h * wd), *packed_w, {band, n_cols, gemm::vector_floats()},
                       epilogue);
        // Y[o, (r0 + i) kH + a, j kW + b] = band[i W + j, (o, a, b)]: one output row per (o, a, i).
        parallel_for(0, m * kh, 1, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t o = t / kh, a = t % kh;
            for (int64_t i = 0; i < rows; ++i) {
              float* dst = yn + (o * oh + (r0 + i) * kh + a) * ow;
              const float* src = band + i * wd * n_cols + t * kw;
              for (int64_t j = 0; j < wd; ++j)
                for (int64_t bb = 0; bb < kw; ++bb) dst[j * kw + bb] = src[j * n_cols + bb];
            }
          }
        });
      }
    }
    return ok_status();
  }
  std::string implementation() const override { return std::string("kiln:gemm:") + gemm::target_name(); }

  std::shared_ptr<const gemm::PackedB> packed_w;  // W as [C, M kH kW]
  std::vector<float> bias_cols;                   // B[o] per column (o, a, b), or empty
  int64_t band_rows = 1;                          // input rows per GEMM
  size_t band_bytes = 0;                          // the workspace: band_rows * W pixels x M kH kW
};

// Bands of about this many bytes: a few L2-sized GEMM outputs, enough rows for both threads.
constexpr size_t kBandBytes = size_t{1} << 20;

Expected<std::unique_ptr<Kernel>> prepare_gemm_deconv(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(DeconvPlan plan, plan_gemm_deconv(node));
  auto k = std::make_unique<GemmDeconvKernel>();
  KILN_RETURN_IF_ERROR(k->init_base(node, plan));
  const int64_t c = plan.x_dims[1], wd = plan.x_dims[3], m = plan.y_dims[1];
  const int64_t per_output = plan.w_dims[2] * plan.w_dims[3], n_cols = m * per_output;
  // ONNX's W [C, M, kH, kW] is already B [C, M kH kW], row-major.
  k->packed_w = gemm::PackedB::pack_shared(plan.weights->data<float>(), c, n_cols, n_cols, 1);
  if (plan.bias) {
    k->bias_cols.resize(static_cast<size_t>(n_cols));
    for (int64_t col = 0; col < n_cols; ++col)
      k->bias_cols[static_cast<size_t>(col)] = plan.bias->data<float>()[col / per_output];
  }
  const size_t row_bytes = static_cast<size_t>(wd * n_cols) * sizeof(float);
  k->band_rows = std::clamp<int64_t>(static_cast<int64_t>(kBandBytes / row_bytes), 1, plan.x_dims[2]);
  k->band_bytes = static_cast<size_t>(k->band_rows) * row_bytes;
  note_workspace_need(k->band_bytes);
  return std::unique_ptr<Kernel>(std::move(k));
}

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "ConvTranspose",
                                    .device = DeviceKind::kCpu,
                                    .priority = 110,
                                    .name = "gemm_nonoverlapping",
                                    .applicable = [](const ir::Node& n) { return plan_gemm_deconv(n).status(); },
                                    .prepare = prepare_gemm_deconv}));

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "ConvTranspose",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = [](const ir::Node& n) { return plan_deconv(n).status(); },
                                    .prepare = prepare_deconv}));

}  // namespace kiln::kernels
