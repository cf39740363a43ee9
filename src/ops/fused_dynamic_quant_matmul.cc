// kiln FusedDynamicQuantMatMul (domain kiln, docs/quantization.md): ONNX Runtime's dynamic
// quantisation of a linear layer in one node, made by the dynamic_quant_fusion pass from
//
//   DynamicQuantizeLinear(x) -> (x_q, x_scale, x_zp)
//   MatMulInteger(x_q, w, x_zp[, w_zp = 0]) -> Cast(float) -> Mul(., Mul(x_scale, w_scale))
//   [-> Add(bias)]
//
// Inputs: x float32 [..., K], w int8 [K, N] (zero point 0), w_scale float32 (one value or N),
// bias float32 [N] (optional). Output float32 [..., N]:
//
//   y[m, n] = float32(float32(acc[m, n]) * float32(x_scale * w_scale[n])) [+ bias[n]]
//
// acc the int32 MatMulInteger of DynamicQuantizeLinear's x_q and w: every step the float32
// operation the unfused graph performs, in the same order, so the reference kernel equals
// the unfused graph bit for bit.
#include <vector>

#include "ops/fused_activation.h"

namespace kiln::ops {
namespace {

Status infer_fused_dynamic_quant_matmul(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const Shape& x = ctx.input_type(0).shape;
  const Shape& w = ctx.input_type(1).shape;
  if (ctx.input_type(0).dtype != DataType::kFloat32 || ctx.input_type(1).dtype != DataType::kInt8)
    return invalid_argument("node %s: FusedDynamicQuantMatMul takes float32 x and int8 w, got %s and %s",
                            node.label().c_str(), dtype_name(ctx.input_type(0).dtype),
                            dtype_name(ctx.input_type(1).dtype));
  if (w.has_rank() && w.rank() != 2)
    return invalid_argument("node %s: FusedDynamicQuantMatMul takes a 2-D w, got %s", node.label().c_str(),
                            w.to_string().c_str());
  Shape out = Shape::unknown_rank();
  if (x.has_rank() && x.rank() >= 2 && w.has_rank()) {
    std::vector<Dim> dims = x.dims();
    dims.back() = w[1];
    out = Shape(dims);
  }
  ctx.set_output(0, DataType::kFloat32, out);
  return ok_status();
}

Status fused_dynamic_quant_matmul_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  for (int i : {0, 1, 2})
    if (!ctx.input(i)) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor& w_scale = *ctx.input(2);
  const Tensor* bias = ctx.input(3);
  if (x.dtype() != DataType::kFloat32 || x.rank() < 2 || w.dtype() != DataType::kInt8 || w.rank() != 2)
    return invalid_argument("node %s: x must be float32 [..., K] and w int8 [K, N], got %s and %s",
                            node.label().c_str(), x.description().c_str(), w.description().c_str());
  const int64_t n = w.dim(1);
  if (w_scale.dtype() != DataType::kFloat32 || (w_scale.num_elements() != 1 && w_scale.num_elements() != n))
    return invalid_argument("node %s: w_scale %s: float32, one value or N = %lld", node.label().c_str(),
                            w_scale.description().c_str(), static_cast<long long>(n));
  if (bias && (bias->dtype() != DataType::kFloat32 || bias->num_elements() != n))
    return invalid_argument("node %s: bias %s: float32 with N = %lld values", node.label().c_str(),
                            bias->description().c_str(), static_cast<long long>(n));
  // 1. DynamicQuantizeLinear's three outputs, by its reference kernel.
  const OpSchema* dql = OpRegistry::instance().find(kOnnxDomain, "DynamicQuantizeLinear", kMaxOpset);
  if (!dql || !dql->kernel_fn())
    return internal_error("node %s: no reference kernel for DynamicQuantizeLinear", node.label().c_str());
  std::vector<RuntimeValue> q(3);
  {
    KernelContext inner(node, {ctx.value(0)}, &q, ctx.subgraphs());
    KILN_RETURN_IF_ERROR(dql->kernel_fn()(inner));
  }
  // 2. The int32 products, as MatMulInteger computes them.
  KILN_ASSIGN_OR_RETURN(Tensor acc, run_onnx_reference(ctx, "MatMulInteger", 3, {&q[0], ctx.value(1), &q[2]}));
  // 3. Cast, Mul(x_scale, w_scale), Mul, Add: each a float32 operation.
  const float sx = q[1].tensor().data<float>()[0];
  std::vector<float> scale(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) scale[static_cast<size_t>(c)] = sx * w_scale.data<float>()[w_scale.num_elements() == 1 ? 0 : c];
  Tensor y = Tensor::make(DataType::kFloat32, acc.dims());
  const int32_t* pa = acc.data<int32_t>();
  float* py = y.data<float>();
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const int64_t c = i % n;
    float v = static_cast<float>(pa[i]) * scale[static_cast<size_t>(c)];
    if (bias) v = v + bias->data<float>()[c];
    py[i] = v;
  }
  ctx.set_output(0, std::move(y));
  return ok_status();
}

// Inputs: x, w, w_scale, bias (optional).
KILN_REGISTER_OP(OpSchema("FusedDynamicQuantMatMul", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(3, 4)
                     .outputs(1, 1)
                     .infer(infer_fused_dynamic_quant_matmul)
                     .kernel(fused_dynamic_quant_matmul_kernel)
                     .doc("y = Cast(MatMulInteger(DynamicQuantizeLinear(x), w)) * x_scale * w_scale [+ bias] "
                          "(docs/quantization.md)"));

}  // namespace
}  // namespace kiln::ops
