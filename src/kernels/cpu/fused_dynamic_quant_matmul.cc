// Kernel for kiln FusedDynamicQuantMatMul (src/ops/fused_dynamic_quant_matmul.cc): float32 x
// [..., M, K] quantised on the fly to uint8 by DynamicQuantizeLinear's SIMD passes
// (dynamic_quantize_linear.h, bit-exact with its reference), then one oneDNN int8 matmul (VNNI,
// brgemm) with a constant int8 w [K, N] packed at prepare and a float32 epilogue:
//
//   acc   = sum_k (x_q - x_zp) * w                          int32 (runtime source zero point)
//   y     = float32(acc) * float32(x_scale * w_scale[n])    (runtime output scales)
//   y    += bias[n]                                          (binary post-op, float32)
//
// the unfused graph's Cast, Mul and Add in the same order. x and the quantised activation are
// read in place as [M, K] (leading dims are one M); the activation lives in the thread's
// workspace next to oneDNN's scratchpad. Inputs other than the prepared ones, and an x holding
// an infinity, run the reference kernel.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/dynamic_quantize_linear.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

struct DqMatMulPlan {
  std::vector<int64_t> x_dims, y_dims;
  int64_t m = 0, k = 0, n = 0;
  std::vector<float> w_scale;  // 1 or N values
  const Tensor* w = nullptr;
  const Tensor* w_scale_tensor = nullptr;
  const Tensor* bias = nullptr;
};

Expected<DqMatMulPlan> plan_dq_matmul(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kKilnDomain || node.op_type() != "FusedDynamicQuantMatMul")
    return unsupported("node %s: not a FusedDynamicQuantMatMul", label.c_str());
  if (!onednn::int8_sums_exact())
    return unsupported("node %s: this CPU has no VNNI (oneDNN's int8 sums would saturate)", label.c_str());
  if (node.num_inputs() < 3 || node.num_outputs() != 1 || !node.input(0) || !node.input(1) || !node.input(2) ||
      !node.output(0))
    return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  KILN_RETURN_IF_ERROR(require_static_tensor("x", node.input(0), {DataType::kFloat32}));
  KILN_RETURN_IF_ERROR(require_initializer("w", node.input(1), DataType::kInt8));
  KILN_RETURN_IF_ERROR(require_initializer("w_scale", node.input(2), DataType::kFloat32));
  DqMatMulPlan p;
  p.w = node.input(1)->initializer();
  if (p.w->rank() != 2) return unsupported("node %s: w %s: only 2-D", label.c_str(), p.w->description().c_str());
  p.k = p.w->dim(0);
  p.n = p.w->dim(1);
  p.x_dims = node.input(0)->shape().static_dims();
  if (p.x_dims.size() < 2 || p.x_dims.back() != p.k)
    return unsupported("node %s: x %s is not [..., M, K = %lld]", label.c_str(),
                       node.input(0)->type().to_string().c_str(), static_cast<long long>(p.k));
  p.m = 1;
  for (size_t i = 0; i + 1 < p.x_dims.size(); ++i) p.m *= p.x_dims[i];
  p.y_dims = p.x_dims;
  p.y_dims.back() = p.n;
  if (p.m == 0 || p.k == 0 || p.n == 0) return unsupported("node %s: empty operands", label.c_str());
  p.w_scale_tensor = node.input(2)->initializer();
  const int64_t ns = p.w_scale_tensor->num_elements();
  if (ns != 1 && ns != p.n) return unsupported("node %s: w_scale has %lld values, not 1 or N", label.c_str(),
                                               static_cast<long long>(ns));
  p.w_scale.assign(p.w_scale_tensor->data<float>(), p.w_scale_tensor->data<float>() + ns);
  if (node.num_inputs() > 3 && node.input(3)) {
    KILN_RETURN_IF_ERROR(require_initializer("bias", node.input(3), DataType::kFloat32));
    p.bias = node.input(3)->initializer();
    if (p.bias->num_elements() != p.n) return unsupported("node %s: bias does not have N values", label.c_str());
  }
  return p;
}

class DqMatMulKernel final : public Kernel {
 public:
  DqMatMulKernel(DqMatMulPlan p, const ops::KernelFn* ref) : reference(ref), plan(std::move(p)) {}
  // Packs w and makes the int8 matmul with its epilogue (prepare_planned).
  Status init(const ir::Node& node);
  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    const Tensor* x = ctx.input(0);
    const Tensor* w = ctx.input(1);
    const Tensor* ws = ctx.input(2);
    const Tensor* b = node.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const bool as_prepared = x && x->dtype() == DataType::kFloat32 && x->dims() == plan.x_dims && w &&
                             w->raw_data() == plan.w->raw_data() && ws &&
                             ws->raw_data() == plan.w_scale_tensor->raw_data() &&
                             (plan.bias ? b && b->raw_data() == plan.bias->raw_data() : !b);
    if (!as_prepared) return (*reference)(ctx);
    char* ws_mem = static_cast<char*>(onednn::thread_workspace(workspace_bytes));
    if (!ws_mem)
      return resource_exhausted("node %s: cannot allocate a %zu-byte workspace", node.label().c_str(),
                                workspace_bytes);
    uint8_t* q = reinterpret_cast<uint8_t*>(ws_mem + q_offset);
    float* scales = reinterpret_cast<float*>(ws_mem + scales_offset);
    float x_scale = 0;
    uint8_t x_zp = 0;
    if (!dynamic_quantize_u8(x->data<float>(), plan.m * plan.k, q, &x_scale, &x_zp)) return (*reference)(ctx);
    // float32(x_scale * w_scale[n]): the unfused graph's Mul(x_scale, w_scale).
    for (size_t c = 0; c < plan.w_scale.size(); ++c) scales[c] = x_scale * plan.w_scale[c];
    const int32_t zp = x_zp;
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan.y_dims, TensorInit::kUninitialized));
    try {
      const memory& scratch = memories.get(0, onednn::bytes_desc(scratch_bytes), scratch_bytes > 0 ? ws_mem : nullptr);
      const memory& src = memories.get(1, src_md, q);
      const memory& dst = memories.get(2, dst_md, y->raw_data());
      const memory& scale_mem = memories.get(3, scales_md, scales);
      const memory& zp_mem = memories.get(4, zp_md, &zp);
      onednn::Args args{{DNNL_ARG_SRC, &src},
                        {DNNL_ARG_WEIGHTS, &weights},
                        {DNNL_ARG_DST, &dst},
                        {DNNL_ARG_SCRATCHPAD, &scratch}};
      args.add(DNNL_ARG_ATTR_OUTPUT_SCALES, scale_mem);
      args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp_mem);
      if (plan.bias) args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bias);
      dnnl::stream& s = onednn::thread_stream();
      args.execute(matmul, s);
      s.wait();
    } catch (const dnnl::error& e) {
      return internal_error("node %s: oneDNN int8 matmul failed: %s", node.label().c_str(), e.what());
    }
    return ok_status();
  }
  std::string implementation() const override { return impl; }

  const ops::KernelFn* reference = nullptr;
  DqMatMulPlan plan;
  std::string impl;
  dnnl::matmul matmul;
  memory::desc src_md, dst_md, scales_md, zp_md;
  memory weights, bias;
  std::shared_ptr<void> weights_buffer;
  onednn::RunMemories memories;  // scratch, src, dst, output scales, source zero point
  size_t scratch_bytes = 0, q_offset = 0, scales_offset = 0, workspace_bytes = 0;
};

Status DqMatMulKernel::init(const ir::Node& node) {
  const DqMatMulPlan& p = plan;
  try {
    onednn::CreationThreadsScope threads;
    const auto ab = memory::format_tag::ab;
    src_md = memory::desc({p.m, p.k}, memory::data_type::u8, ab);
    dst_md = memory::desc({p.m, p.n}, memory::data_type::f32, ab);
    const int64_t num_scales = static_cast<int64_t>(p.w_scale.size());
    scales_md = memory::desc({num_scales}, memory::data_type::f32, memory::format_tag::a);
    zp_md = memory::desc({1}, memory::data_type::s32, memory::format_tag::a);
    const memory::desc user_w({p.k, p.n}, memory::data_type::s8, ab);
    const memory::desc any_w({p.k, p.n}, memory::data_type::s8, memory::format_tag::any);
    const memory::desc bias_md({1, p.n}, memory::data_type::f32, ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_output_scales(num_scales == 1 ? 0 : 1 << 1, {DNNL_RUNTIME_F32_VAL});
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (p.bias) {
      dnnl::post_ops po;
      po.append_binary(dnnl::algorithm::binary_add, bias_md);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, any_w, dst_md), attr, onednn::cpu_engine());
    KILN_ASSIGN_OR_RETURN(impl, onednn::fast_implementation(node, pd));
    matmul = dnnl::matmul(pd);
    scratch_bytes = pd.scratchpad_desc().get_size();
    q_offset = onednn::align64(scratch_bytes);
    scales_offset = q_offset + onednn::align64(static_cast<size_t>(p.m * p.k));
    workspace_bytes = scales_offset + static_cast<size_t>(num_scales) * sizeof(float);
    weights_buffer = onednn::pack_shared(user_w, p.w->raw_data(), pd.weights_desc());
    weights = memory(pd.weights_desc(), onednn::cpu_engine(), weights_buffer.get());
    if (p.bias) bias = memory(bias_md, onednn::cpu_engine(), const_cast<void*>(p.bias->raw_data()));
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no int8 matmul for it: %s", node.label().c_str(), e.what());
  }
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_dq_matmul(const ir::Node& node) {
  return onednn::prepare_planned<DqMatMulKernel>(node, plan_dq_matmul);
}

Status dq_matmul_applicable(const ir::Node& node) { return plan_dq_matmul(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "FusedDynamicQuantMatMul",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = dq_matmul_applicable,
                                    .prepare = prepare_dq_matmul}));

}  // namespace kiln::kernels
