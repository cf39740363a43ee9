// oneDNN pooling kernels for ONNX MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool
// (float32, 1-D/2-D/3-D, strides, explicit and auto_pad pads, ceil_mode) on the plain N C D...
// layout, and for kiln Pooling, the same ops on the blocked NC1HWC0 layout (nChw8c/nChw16c):
// one primitive per node, created at prepare. On plain NCHW oneDNN 2.6 runs its
// "simple_nchw" loops (ResNet-50's 3x3/2 MaxPool: about 27 ms, as slow as Kiln's reference),
// on the blocked layout its jit kernels: layout_assignment puts pools inside blocked regions.
//
// What is left to the reference kernel (applicable() says no): MaxPool's Indices output and
// storage_order, windows that can lie wholly in the padding (a pad >= the dilated kernel: the
// reference gives -inf or 0 there, oneDNN does not define it), and AveragePool with
// count_include_pad and a ceil_mode overhang (ONNX counts the explicit pads but not the
// overhang, oneDNN's include-padding average counts the whole window). The average sums in
// float32 (the reference in double): results agree to float rounding. GlobalAveragePool,
// whose windows are whole feature maps, goes first to global_average_pool.cc, which sums
// accurately; its registration here is the fallback.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/lent_workspace.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/layout.h"
#include "ops/spatial_util.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

struct PoolPlan {
  std::vector<int64_t> x_dims, y_dims;                // logical N C D...
  std::vector<int64_t> x_tensor_dims, y_tensor_dims;  // N C1 D... C0 when blocked
  int64_t block = 0;                                  // C0 of kiln Pooling's NC1HWC0, 0: plain
  dnnl::algorithm algorithm = dnnl::algorithm::pooling_max;
  memory::dims kernel, strides, dilations, pad_l, pad_r;
  bool global = false;  // GlobalMaxPool / GlobalAveragePool
  DataType dtype = DataType::kFloat32;  // X's and Y's: float32, or uint8 / int8 for max pooling
};

Status require_static(const char* what, const ir::Value* v, DataType dtype) {
  return require_static_tensor(what, v, {dtype});
}

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

Expected<PoolPlan> plan_pool(const ir::Node& node) {
  const std::string label = node.label();
  // kiln Pooling names its ONNX op in `mode` and may hold blocked tensors (ops/layout.h).
  const bool kiln_pooling = node.domain() == ops::kKilnDomain && node.op_type() == "Pooling";
  const std::string op = kiln_pooling ? node.attr_string("mode", "") : node.op_type();
  const bool global = op == "GlobalMaxPool" || op == "GlobalAveragePool";
  const bool max = op == "MaxPool" || op == "GlobalMaxPool";
  if ((!kiln_pooling && node.domain() != ops::kOnnxDomain) || (!global && op != "MaxPool" && op != "AveragePool"))
    return unsupported("node %s: not a pooling op", label.c_str());
  if (node.num_outputs() != 1 || node.num_inputs() != 1)
    return unsupported("node %s: MaxPool's Indices output runs on the reference kernel", label.c_str());
  const ir::Value* x = node.input(0);
  const ir::Value* y = node.output(0);
  PoolPlan p;
  p.dtype = x ? x->dtype() : DataType::kUndefined;
  const bool int8_max = op == "MaxPool" && is_x8(p.dtype);  // ONNX's only int8 pool
  if (!(p.dtype == DataType::kFloat32 || int8_max))
    return unsupported("node %s: X dtype %s: only float32 (and uint8 and int8 for MaxPool)", label.c_str(),
                       dtype_name(p.dtype));
  KILN_RETURN_IF_ERROR(require_static("X", x, p.dtype));
  KILN_RETURN_IF_ERROR(require_static("Y", y, p.dtype));
  p.x_tensor_dims = p.x_dims = x->shape().static_dims();
  p.y_tensor_dims = p.y_dims = y->shape().static_dims();
  if (kiln_pooling && ops::is_blocked_format(node.attr_string("format", ops::kFormatPlain))) {
    p.block = node.attr_int("c0", 0);
    // int8 channels-last (compiler/passes/int8_layout.cc): one block of all channels, NHWC.
    const std::vector<int64_t>& xd = p.x_tensor_dims;
    const bool nhwc = is_x8(p.dtype) && xd.size() == 5 && xd[1] == 1 && xd[4] == p.block;
    if (p.block != 8 && p.block != 16 && !nhwc)
      return unsupported("node %s: blocks of %lld channels (oneDNN has 8 and 16)", label.c_str(), (long long)p.block);
    KILN_ASSIGN_OR_RETURN(Shape xs, ops::plain_shape(x->shape(), p.block));
    KILN_ASSIGN_OR_RETURN(Shape ys, ops::plain_shape(y->shape(), p.block));
    p.x_dims = xs.static_dims();
    p.y_dims = ys.static_dims();
    if (p.x_dims.size() != 4) return unsupported("node %s: blocked layouts for 2-D pooling only", label.c_str());
  }
  const size_t rank = p.x_dims.size();
  if (rank < 3 || rank > 5 || p.y_dims.size() != rank)
    return unsupported("node %s: X %s: 1-D, 2-D and 3-D pooling only", label.c_str(),
                       dims_to_string(p.x_dims).c_str());
  for (int64_t d : p.x_dims)
    if (d <= 0) return unsupported("node %s: empty input", label.c_str());
  const int n = static_cast<int>(rank) - 2;
  std::vector<int64_t> in(p.x_dims.begin() + 2, p.x_dims.end());
  p.global = global;
  if (global) {
    p.algorithm = max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
    for (int d = 0; d < n; ++d) {
      p.kernel.push_back(in[d]);
      p.strides.push_back(1);
      p.dilations.push_back(0);
      p.pad_l.push_back(0);
      p.pad_r.push_back(0);
    }
  } else {
    if (max && node.attr_int("storage_order", 0) != 0)
      return unsupported("node %s: storage_order runs on the reference kernel", label.c_str());
    KILN_ASSIGN_OR_RETURN(ops::WindowGeometry g, ops::window_geometry(node, in, {}, true));
    const bool include_pad = !max && node.attr_int("count_include_pad", 0) != 0;
    p.algorithm = max ? dnnl::algorithm::pooling_max
                      : (include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                     : dnnl::algorithm::pooling_avg_exclude_padding);
    for (int d = 0; d < n; ++d) {
      const int64_t span = (g.kernel[d] - 1) * g.dilations[d] + 1;
      if (g.pad_begin(d) >= span || g.pad_end(d) >= span)
        return unsupported("node %s: a pad as large as the window", label.c_str());
      // ceil_mode: the last window may run past the end pad; oneDNN wants pads that make its
      // own (floor) formula give the same output extent, so the end pad grows by the overhang.
      const int64_t needed = (g.out[d] - 1) * g.strides[d] + span - in[d] - g.pad_begin(d);
      const int64_t end_pad = std::max(g.pad_end(d), needed);
      if (end_pad >= span) return unsupported("node %s: window geometry oneDNN cannot express", label.c_str());
      if (end_pad > g.pad_end(d) && include_pad)
        return unsupported("node %s: count_include_pad with a ceil_mode overhang", label.c_str());
      p.kernel.push_back(g.kernel[d]);
      p.strides.push_back(g.strides[d]);
      p.dilations.push_back(g.dilations[d] - 1);  // oneDNN counts the gaps
      p.pad_l.push_back(g.pad_begin(d));
      p.pad_r.push_back(end_pad);
    }
  }
  std::vector<int64_t> expect{p.x_dims[0], p.x_dims[1]};
  for (int d = 0; d < n; ++d) {
    const int64_t span = (p.kernel[d] - 1) * (p.dilations[d] + 1) + 1;
    expect.push_back((in[d] + p.pad_l[d] + p.pad_r[d] - span) / p.strides[d] + 1);
  }
  if (expect != p.y_dims)
    return unsupported("node %s: output %s, the geometry gives %s", label.c_str(), dims_to_string(p.y_dims).c_str(),
                       dims_to_string(expect).c_str());
  return p;
}

class OnednnPoolKernel final : public Kernel {
 public:
  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != plan.dtype || x->dims() != plan.x_tensor_dims) return (*reference)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, plan.dtype, plan.y_tensor_dims, TensorInit::kUninitialized));
    if (channels_last) return run_channels_last(ctx, *x, *y);
    void* ws = onednn::thread_workspace(scratch_bytes);
    if (!ws && scratch_bytes > 0)
      return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(),
                                scratch_bytes);
    try {
      const memory& scratch = memories.get(0, onednn::bytes_desc(scratch_bytes), scratch_bytes > 0 ? ws : nullptr);
      const memory& src = memories.get(1, src_md, x->raw_data());
      const memory& dst = memories.get(2, dst_md, y->raw_data());
      dnnl::stream& s = onednn::thread_stream();
      onednn::Args{{DNNL_ARG_SRC, &src}, {DNNL_ARG_DST, &dst}, {DNNL_ARG_SCRATCHPAD, &scratch}}.execute(pool, s);
      s.wait();
    } catch (const dnnl::error& e) {
      return internal_error("node %s: oneDNN pooling failed: %s", node.label().c_str(), e.what());
    }
    return ok_status();
  }
  std::string implementation() const override { return impl; }

  // int8 on plain NCHW: through the channels-last layout of the primitive.
  Status run_channels_last(const ops::KernelContext& ctx, const Tensor& x, Tensor& y) const {
    char* ws = static_cast<char*>(onednn::thread_workspace(layouts.workspace_bytes));
    if (!ws && layouts.workspace_bytes > 0)
      return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", ctx.node().label().c_str(),
                                layouts.workspace_bytes);
    try {
      layouts.run(pool, onednn::Args{}, ws, x.raw_data(), y.raw_data(), onednn::thread_stream());
    } catch (const dnnl::error& e) {
      return internal_error("node %s: oneDNN pooling failed: %s", ctx.node().label().c_str(), e.what());
    }
    return ok_status();
  }

  const ops::KernelFn* reference = nullptr;  // inputs the kernel was not prepared for
  bool channels_last = false;
  onednn::LayoutBridge layouts;  // channels_last's
  PoolPlan plan;
  std::string impl;
  dnnl::pooling_v2_forward pool;
  memory::desc src_md, dst_md;
  onednn::RunMemories memories;  // run()'s scratch, src, dst
  size_t scratch_bytes = 0;
};

Expected<std::unique_ptr<Kernel>> prepare_pool(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(PoolPlan plan, plan_pool(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
  auto k = std::make_unique<OnednnPoolKernel>();
  k->plan = plan;
  k->reference = &schema->kernel_fn();
  const int rank = static_cast<int>(plan.x_dims.size());
  try {
    onednn::CreationThreadsScope threads;
    const memory::format_tag tag = plan.block == 0    ? onednn::plain_tag(rank)
                                   : plan.block == 8  ? memory::format_tag::nChw8c
                                   : plan.block == 16 ? memory::format_tag::nChw16c
                                                      : memory::format_tag::nhwc;  // int8 channels-last
    const memory::data_type dt = plan.dtype == DataType::kUInt8  ? memory::data_type::u8
                                 : plan.dtype == DataType::kInt8 ? memory::data_type::s8
                                                                 : memory::data_type::f32;
    k->channels_last = plan.dtype != DataType::kFloat32 && plan.block == 0;
    const memory::format_tag channels_last_tag = rank == 3   ? memory::format_tag::nwc
                                                 : rank == 4 ? memory::format_tag::nhwc
                                                             : memory::format_tag::ndhwc;
    k->src_md = memory::desc(onednn::to_dims(plan.x_dims), dt, k->channels_last ? channels_last_tag : tag);
    k->dst_md = memory::desc(onednn::to_dims(plan.y_dims), dt, k->channels_last ? channels_last_tag : tag);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, plan.algorithm, k->src_md, k->dst_md,
                                        plan.strides, plan.kernel, plan.dilations, plan.pad_l, plan.pad_r);
    dnnl::pooling_v2_forward::primitive_desc pd(desc, attr, onednn::cpu_engine());
    k->impl = onednn::implementation_name(pd);
    if (k->impl.rfind("onednn:ref", 0) == 0)
      return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), k->impl.c_str());
    // Windowed pooling on plain NCHW: oneDNN's simple_nchw loops are no faster than Kiln's
    // reference (measured above); global pools are a plain reduction it does well.
    if (plan.block == 0 && !plan.global && k->impl.find("simple_nchw") != std::string::npos)
      return unsupported("node %s: oneDNN offers only %s on NCHW", node.label().c_str(), k->impl.c_str());
    k->pool = dnnl::pooling_v2_forward(pd);
    k->scratch_bytes = pd.scratchpad_desc().get_size();
    note_workspace_need(k->scratch_bytes);  // run()'s on plain layouts; the bridge notes its own
    if (k->channels_last) {
      k->layouts.user_src = memory::desc(onednn::to_dims(plan.x_dims), dt, tag);
      k->layouts.user_dst = memory::desc(onednn::to_dims(plan.y_dims), dt, tag);
      k->layouts.plan(k->src_md, k->dst_md, k->scratch_bytes);
    }
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no pooling for it: %s", node.label().c_str(), e.what());
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

Status pool_applicable(const ir::Node& node) { return plan_pool(node).status(); }

}  // namespace

#define KILN_REGISTER_POOL_KERNEL(op)                                                           \
  KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,                               \
                                      .op_type = op,                                            \
                                      .device = DeviceKind::kCpu,                               \
                                      .priority = 100,                                          \
                                      .name = "onednn",                                         \
                                      .applicable = pool_applicable,                            \
                                      .prepare = prepare_pool}))

KILN_REGISTER_POOL_KERNEL("MaxPool");
KILN_REGISTER_POOL_KERNEL("AveragePool");
KILN_REGISTER_POOL_KERNEL("GlobalMaxPool");
KILN_REGISTER_POOL_KERNEL("GlobalAveragePool");
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "Pooling",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = pool_applicable,
                                    .prepare = prepare_pool}));

}  // namespace kiln::kernels
