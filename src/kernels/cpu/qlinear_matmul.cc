// oneDNN int8 matmul kernels for ONNX QLinearMatMul and kiln FusedQLinearMatMul (bias,
// Relu / Clip, float32 output): uint8 or int8 A [..., M, K] quantised per tensor, constant
// int8 B [K, N] per tensor or per column with zero points 0, uint8 / int8 Y per tensor or a
// float32 Y. oneDNN's VNNI kernels (brgemm) accumulate in int32 and requantise in the
// epilogue:
//
//   y = saturate(round(act((acc + bias[n]) * a_scale * b_scale[n] / y_scale)) + y_zero_point)
//   y = act((acc + bias[n]) * a_scale * b_scale[n])                      (float32 output)
//
// with acc the exact sum of a_q * b_q minus a_zero_point's share (a runtime source zero
// point). The leading dims of A are one M (B is 2-D): A is read as [M, K] in place and Y
// written as [M, N] in place, no reorder; B is packed once at prepare.
//
// Inputs other than the prepared ones run the reference kernel.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/lowp.h"
#include "kernels/cpu/int8_epilogue.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

memory::data_type dnnl_type(DataType t) {
  return t == DataType::kUInt8 ? memory::data_type::u8
         : t == DataType::kInt8 ? memory::data_type::s8
                                : memory::data_type::f32;
}

const Tensor* constant_input(const ir::Node& node, int i) {
  const ir::Value* v = node.input(i);
  return v && v->has_initializer() ? v->initializer() : nullptr;
}

double scalar(const Tensor& t) { return lowp_to_double(t.dtype(), t.raw_data(), 0); }

struct QMatMulPlan {
  std::vector<int64_t> a_dims, y_dims;
  int64_t m = 0, k = 0, n = 0;
  DataType a_dtype = DataType::kUInt8, y_dtype = DataType::kUInt8;  // y float32: dequantised
  std::vector<float> output_scales;  // per column
  int32_t a_zero_point = 0, y_zero_point = 0;
  std::vector<float> bias;  // as float32 (int8_epilogue.h), empty when absent
  ops::FusedActivation act;
  const Tensor* b = nullptr;
};

Expected<QMatMulPlan> plan_qmatmul(const ir::Node& node) {
  const std::string label = node.label();
  const bool fused = node.domain() == ops::kKilnDomain && node.op_type() == "FusedQLinearMatMul";
  if (!fused && !(node.domain() == ops::kOnnxDomain && node.op_type() == "QLinearMatMul"))
    return unsupported("node %s: not a QLinearMatMul or FusedQLinearMatMul", label.c_str());
  const ir::Value* a = node.input(0);
  const ir::Value* y = node.output(0);
  if (!a || !y || node.num_outputs() != 1) return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  for (int i = 1; i < node.num_inputs(); ++i)
    if (node.input(i) && !node.input(i)->has_initializer())
      return unsupported("node %s: input %d must be a constant (initializer)", label.c_str(), i);
  QMatMulPlan p;
  p.a_dtype = a->dtype();
  p.y_dtype = y->dtype();
  if (!is_x8(p.a_dtype))
    return unsupported("node %s: A dtype %s: only int8 and uint8", label.c_str(), dtype_name(p.a_dtype));
  if (!(is_x8(p.y_dtype) || (fused && p.y_dtype == DataType::kFloat32)))
    return unsupported("node %s: Y dtype %s: only int8 and uint8%s", label.c_str(), dtype_name(p.y_dtype),
                       fused ? " (and float32)" : "");
  for (const ir::Value* v : {a, y}) {
    const char* what = v == a ? "A" : "Y";
    if (!v->shape().has_rank() || !v->shape().is_static())
      return unsupported("node %s: %s %s: open dims (static shapes only)", label.c_str(), what,
                         v->type().to_string().c_str());
    if (v->shape().rank() < 2)
      return unsupported("node %s: %s %s: rank 2 or more only", label.c_str(), what, v->type().to_string().c_str());
  }
  const Tensor* a_scale = constant_input(node, 1);
  const Tensor* a_zp = constant_input(node, 2);
  const Tensor* b = constant_input(node, 3);
  const Tensor* b_scale = constant_input(node, 4);
  const Tensor* b_zp = constant_input(node, 5);
  const Tensor* y_scale = constant_input(node, 6);
  const Tensor* y_zp = constant_input(node, 7);
  const Tensor* bias = constant_input(node, 8);
  const bool quantised_y = is_x8(p.y_dtype);
  if (!a_scale || !b || !b_scale || (quantised_y && (!y_scale || !y_zp)))
    return unsupported("node %s: scales, B and Y's zero point must be given", label.c_str());
  if (b->dtype() != DataType::kInt8 || b->rank() != 2) return unsupported("node %s: B must be int8 [K, N]", label.c_str());
  p.k = b->dim(0);
  p.n = b->dim(1);
  p.a_dims = a->shape().static_dims();
  p.y_dims = y->shape().static_dims();
  if (p.a_dims.back() != p.k) return unsupported("node %s: A's last dim is not K", label.c_str());
  p.m = 1;
  for (size_t i = 0; i + 1 < p.a_dims.size(); ++i) p.m *= p.a_dims[i];
  std::vector<int64_t> expect = p.a_dims;
  expect.back() = p.n;
  if (expect != p.y_dims) return unsupported("node %s: Y's shape is not A's with N", label.c_str());
  for (const Tensor* s : {a_scale, b_scale, y_scale})
    if (s && s->dtype() != DataType::kFloat32) return unsupported("node %s: scales must be float32", label.c_str());
  if (a_scale->num_elements() != 1 || (a_zp && a_zp->num_elements() != 1) ||
      (quantised_y && (y_scale->num_elements() != 1 || y_zp->num_elements() != 1)))
    return unsupported("node %s: A and Y quantised per tensor only", label.c_str());
  if (a_zp && a_zp->dtype() != p.a_dtype) return unsupported("node %s: a_zero_point's dtype is not A's", label.c_str());
  if (quantised_y && y_zp->dtype() != p.y_dtype)
    return unsupported("node %s: y_zero_point's dtype is not Y's", label.c_str());
  if (b_scale->num_elements() != 1 && b_scale->num_elements() != p.n)
    return unsupported("node %s: b_scale must be a scalar or have N values", label.c_str());
  KILN_RETURN_IF_ERROR(int8::check_symmetric_weights(node, b_zp));
  const double sa = scalar(*a_scale);
  const double sy = quantised_y ? scalar(*y_scale) : 1.0;
  for (int64_t c = 0; c < p.n; ++c) {
    const double sb = b_scale->data<float>()[b_scale->num_elements() == 1 ? 0 : c];
    const double acc_scale = static_cast<float>(sa * sb);  // as the reference rounds it
    p.output_scales.push_back(static_cast<float>(quantised_y ? acc_scale / sy : acc_scale));
  }
  p.a_zero_point = a_zp ? static_cast<int32_t>(scalar(*a_zp)) : 0;
  p.y_zero_point = quantised_y ? static_cast<int32_t>(scalar(*y_zp)) : 0;
  KILN_RETURN_IF_ERROR(int8::check_output_scales(node, p.output_scales));
  KILN_ASSIGN_OR_RETURN(p.bias, int8::float_bias(node, bias, p.n));
  p.b = b;
  if (fused) {
    KILN_ASSIGN_OR_RETURN(p.act, int8::epilogue_activation(node, quantised_y ? sy : 0.0));
  }
  return p;
}

class OnednnQMatMulKernel final : public Kernel {
 public:
  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    const Tensor* a = ctx.input(0);
    bool as_prepared = a && a->dtype() == plan.a_dtype && a->dims() == plan.a_dims;
    for (size_t i = 0; as_prepared && i < constants.size(); ++i) {
      const Tensor* t = ctx.input(static_cast<int>(i) + 1);
      as_prepared = !constants[i].defined() ? t == nullptr : (t && t->raw_data() == constants[i].raw_data());
    }
    if (!as_prepared) return (*reference)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, plan.y_dtype, plan.y_dims, TensorInit::kUninitialized));
    char* ws = static_cast<char*>(onednn::thread_workspace(scratch_bytes));
    if (!ws && scratch_bytes > 0)
      return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(),
                                scratch_bytes);
    try {
      const memory& scratch = memories.get(0, onednn::bytes_desc(scratch_bytes), scratch_bytes > 0 ? ws : nullptr);
      const memory& src = memories.get(1, src_md, a->raw_data());
      const memory& dst = memories.get(2, dst_md, y->raw_data());
      onednn::Args args{{DNNL_ARG_SRC, &src},
                        {DNNL_ARG_WEIGHTS, &weights},
                        {DNNL_ARG_DST, &dst},
                        {DNNL_ARG_SCRATCHPAD, &scratch}};
      if (plan.a_zero_point != 0) args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, a_zero_point);
      if (plan.y_zero_point != 0) args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, y_zero_point);
      if (!plan.bias.empty()) args.add(DNNL_ARG_BIAS, bias);
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
  std::vector<Tensor> constants;  // inputs 1.. (undefined where absent), compared by address
  QMatMulPlan plan;
  std::string impl;
  dnnl::matmul matmul;
  memory::desc src_md, dst_md;
  memory weights, bias, a_zero_point, y_zero_point;
  std::shared_ptr<void> weights_buffer;
  onednn::RunMemories memories;  // scratch, src, dst
  size_t scratch_bytes = 0;
};

Expected<std::unique_ptr<Kernel>> prepare_qmatmul(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(QMatMulPlan plan, plan_qmatmul(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
  auto k = std::make_unique<OnednnQMatMulKernel>();
  k->plan = std::move(plan);
  k->reference = &schema->kernel_fn();
  for (int i = 1; i < node.num_inputs(); ++i) {
    const Tensor* t = constant_input(node, i);
    k->constants.push_back(t ? *t : Tensor());
  }
  const QMatMulPlan& p = k->plan;
  try {
    onednn::CreationThreadsScope threads;
    const auto ab = memory::format_tag::ab;
    k->src_md = memory::desc({p.m, p.k}, dnnl_type(p.a_dtype), ab);
    k->dst_md = memory::desc({p.m, p.n}, dnnl_type(p.y_dtype), ab);
    const memory::desc user_w({p.k, p.n}, memory::data_type::s8, ab);
    const memory::desc any_w({p.k, p.n}, memory::data_type::s8, memory::format_tag::any);
    const memory::desc bias_md =
        p.bias.empty() ? memory::desc() : memory::desc({1, p.n}, memory::data_type::f32, ab);
    dnnl::post_ops po;
    KILN_RETURN_IF_ERROR(onednn::append_activation(p.act, po));
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_output_scales(p.output_scales.size() == 1 ? 0 : 1 << 1, p.output_scales);
    // Zero points only where they are not 0 (oneDNN's compensation pass costs otherwise).
    if (p.a_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (p.y_zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(k->src_md, any_w, bias_md, k->dst_md), attr,
                                    onednn::cpu_engine());
    k->impl = onednn::implementation_name(pd);
    if (k->impl.rfind("onednn:ref", 0) == 0)
      return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), k->impl.c_str());
    k->matmul = dnnl::matmul(pd);
    k->scratch_bytes = pd.scratchpad_desc().get_size();
    k->weights_buffer = onednn::pack_shared(user_w, p.b->raw_data(), pd.weights_desc());
    k->weights = memory(pd.weights_desc(), onednn::cpu_engine(), k->weights_buffer.get());
    if (!p.bias.empty()) k->bias = int8::float_memory(bias_md, p.bias);
    k->a_zero_point = onednn::s32_scalar(p.a_zero_point);
    k->y_zero_point = onednn::s32_scalar(p.y_zero_point);
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no int8 matmul for it: %s", node.label().c_str(), e.what());
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

Status qmatmul_applicable(const ir::Node& node) { return plan_qmatmul(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "QLinearMatMul",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = qmatmul_applicable,
                                    .prepare = prepare_qmatmul}));
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "FusedQLinearMatMul",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = qmatmul_applicable,
                                    .prepare = prepare_qmatmul}));

}  // namespace kiln::kernels
