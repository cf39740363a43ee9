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
// DB head's 2x2 / stride 2 upsampling of PP-OCR det) run first on a direct kernel instead
// (DirectDeconvKernel): each input pixel writes its own kH x kW block of Y, a C-term dot product
// per output, with no workspace at all. oneDNN's plain-layout deconvolution (gemm-based) mallocs
// its GEMM packing buffers on every call, 5.1 MB per thread for det's first ConvTranspose (issue
// 33); a first version of this kernel on Kiln's packed GEMM (X^T W into the workspace, then
// scattered) took det's 24 -> 1 head 4.0-4.8 ms against oneDNN's 1.2 (a 4-column product).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
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

// ---- Non-overlapping windows, computed directly ----

// The plan when every input pixel writes its own kH x kW block of Y: strides equal to the kernel,
// no dilation, no pads, one group.
Expected<DeconvPlan> plan_direct_deconv(const ir::Node& node) {
  static const bool enabled = [] {  // KILN_DECONV_DIRECT=0: oneDNN's kernel only (A/B measurements)
    const char* v = std::getenv("KILN_DECONV_DIRECT");
    return !v || std::strcmp(v, "0") != 0;
  }();
  if (!enabled) return unsupported("node %s: KILN_DECONV_DIRECT=0", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(DeconvPlan p, plan_deconv(node));
  if (p.group != 1) return unsupported("node %s: groups run on oneDNN", node.label().c_str());
  for (int d = 0; d < 2; ++d)
    if (p.strides[static_cast<size_t>(d)] != p.w_dims[2 + d] || p.dilations[static_cast<size_t>(d)] != 0 ||
        p.pad_l[static_cast<size_t>(d)] != 0 || p.pad_r[static_cast<size_t>(d)] != 0)
      return unsupported("node %s: windows overlap or are padded (strides other than the kernel, pads, dilations)",
                         node.label().c_str());
  return p;
}

// Each output row (image n, channel o, kernel row a, input row i) is kW interleaved rows of
// B[o] + sum_c W[c, o, a, b] X[n, c, i, :], each computed in a short accumulator (vectorised
// over the pixels of the row, the channels' rows of X staying in L1) and stored at stride kW.
class DirectDeconvKernel final : public DeconvKernelBase {
 public:
  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!as_prepared(ctx)) return (*reference)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan.y_dims, TensorInit::kUninitialized));
    const int64_t images = plan.x_dims[0], c = plan.x_dims[1], h = plan.x_dims[2], wd = plan.x_dims[3];
    const int64_t m = plan.y_dims[1], kh = plan.w_dims[2], kw = plan.w_dims[3];
    const int64_t oh = plan.y_dims[2], ow = plan.y_dims[3];
    const float* px = x->data<float>();
    const float* pw = w_initializer.data<float>();
    const float* pb = b_initializer.defined() ? b_initializer.data<float>() : nullptr;
    float* py = y->data<float>();
    parallel_for(0, images * m * kh * h, 4, [&](int64_t t0, int64_t t1) {
      float acc[kAccFloats];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i = t % h, a = t / h % kh, o = t / (h * kh) % m, n = t / (h * kh * m);
        const float* xn = px + (n * c * h + i) * wd;  // X[n, 0, i, 0]
        float* dst_row = py + ((n * m + o) * oh + i * kh + a) * ow;
        for (int64_t b = 0; b < kw; ++b)
          for (int64_t j0 = 0; j0 < wd; j0 += kAccFloats) {
            const int64_t len = std::min<int64_t>(kAccFloats, wd - j0);
            std::fill(acc, acc + len, pb ? pb[o] : 0.0f);
            for (int64_t k = 0; k < c; ++k) {
              const float wv = pw[((k * m + o) * kh + a) * kw + b];
              const float* xr = xn + k * h * wd + j0;
              for (int64_t j = 0; j < len; ++j) acc[j] += wv * xr[j];
            }
            float* dst = dst_row + j0 * kw + b;
            for (int64_t j = 0; j < len; ++j) dst[j * kw] = acc[j];
          }
      }
    });
    return ok_status();
  }
  std::string implementation() const override { return "kiln:direct"; }

 private:
  static constexpr int64_t kAccFloats = 256;  // pixels per accumulator: 1 KiB, in L1
};

Expected<std::unique_ptr<Kernel>> prepare_direct_deconv(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(DeconvPlan plan, plan_direct_deconv(node));
  auto k = std::make_unique<DirectDeconvKernel>();
  KILN_RETURN_IF_ERROR(k->init_base(node, plan));
  return std::unique_ptr<Kernel>(std::move(k));
}

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "ConvTranspose",
                                    .device = DeviceKind::kCpu,
                                    .priority = 110,
                                    .name = "direct_nonoverlapping",
                                    .applicable = [](const ir::Node& n) { return plan_direct_deconv(n).status(); },
                                    .prepare = prepare_direct_deconv}));

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "ConvTranspose",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = [](const ir::Node& n) { return plan_deconv(n).status(); },
                                    .prepare = prepare_deconv}));

}  // namespace kiln::kernels
