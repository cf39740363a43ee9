// SIMD kernel for kiln HardSwish (docs/fused-ops.md): y = x * max(0, min(1, alpha * x + beta)),
// float32, any shape. Most HardSwish nodes end up inside a FusedConv's epilogue; this kernel
// runs those that cannot (after a non-convolution, or between the DequantizeLinear and the
// QuantizeLinear of an int8 model, where PP-LCNet's blocks put them). Highway, the AVX-512 /
// AVX2 / baseline version picked at prepare (simd_dispatch.h); chunks in parallel.
//
// Bit-exact with the reference (ops/fused_activation.cc): for ONNX's parameters (1/6, 0.5) it
// divides by 6 as ONNX HardSwish does; for others alpha * x + beta is one fused multiply-add,
// as the compilers contract the reference's expression (GCC and Clang both do by default on
// FMA targets; Highway's MulAdd is a multiply and an add where the target has no FMA, as the
// reference is there).
#ifndef KILN_KERNELS_CPU_HARDSWISH_SHARED_
#define KILN_KERNELS_CPU_HARDSWISH_SHARED_

#include <cstdint>
#include <memory>
#include <string>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"

namespace kiln::kernels::hardswish_simd {

struct Job {
  const float* x = nullptr;
  float* y = nullptr;
  float alpha = 1.0f / 6.0f, beta = 0.5f;
};

}  // namespace kiln::kernels::hardswish_simd

#endif  // KILN_KERNELS_CPU_HARDSWISH_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/hardswish.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::hardswish_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

template <bool kOnnx>
HWY_INLINE V hardswish(D d, V x, V alpha, V beta) {
  V t;
  if constexpr (kOnnx) {
    t = hn::Add(hn::Div(x, hn::Set(d, 6.0f)), beta);
  } else {
    t = hn::MulAdd(alpha, x, beta);
  }
  t = hn::Max(hn::Zero(d), hn::Min(hn::Set(d, 1.0f), t));
  return hn::Mul(x, t);
}

template <bool kOnnx>
HWY_INLINE void hardswish_range(const Job& job, int64_t b, int64_t e) {
  const D d;
  const V alpha = hn::Set(d, job.alpha), beta = hn::Set(d, job.beta);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = b;
  for (; i + lanes <= e; i += lanes) hn::StoreU(hardswish<kOnnx>(d, hn::LoadU(d, job.x + i), alpha, beta), d, job.y + i);
  if (i < e) {
    const auto m = hn::FirstN(d, static_cast<size_t>(e - i));
    hn::BlendedStore(hardswish<kOnnx>(d, hn::MaskedLoad(m, d, job.x + i), alpha, beta), m, d, job.y + i);
  }
}

void hardswish_onnx(const Job& job, int64_t b, int64_t e) { hardswish_range<true>(job, b, e); }
void hardswish_general(const Job& job, int64_t b, int64_t e) { hardswish_range<false>(job, b, e); }

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::hardswish_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using hardswish_simd::Job;
using RangeFn = void (*)(const Job&, int64_t, int64_t);

Expected<ops::FusedActivation> plan_hardswish(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kKilnDomain || node.op_type() != "HardSwish")
    return unsupported("node %s: not a kiln HardSwish", label.c_str());
  if (node.inputs().size() != 1 || node.outputs().size() != 1 || !node.output(0))
    return unsupported("node %s: unexpected input/output count", label.c_str());
  const ir::Value* x = node.input(0);
  if (!x || x->dtype() != DataType::kFloat32)
    return unsupported("node %s: X dtype %s: only float32", label.c_str(), x ? dtype_name(x->dtype()) : "missing");
  ops::FusedActivation act;
  act.kind = ops::FusedActivationKind::kHardSwish;
  act.p0 = node.attr_float("alpha", 1.0f / 6.0f);
  act.p1 = node.attr_float("beta", 0.5f);
  return act;
}

class HardSwishKernel final : public Kernel {
 public:
  HardSwishKernel(const ops::FusedActivation& act, const ops::KernelFn* reference) : reference_(reference) {
    job_.alpha = act.p0;
    job_.beta = act.p1;
    const bool onnx = act.p0 == 1.0f / 6.0f && act.p1 == 0.5f;  // the reference's own test
    fn_ = onnx ? KILN_SIMD_SELECT(kiln::kernels::hardswish_simd, hardswish_onnx)
               : KILN_SIMD_SELECT(kiln::kernels::hardswish_simd, hardswish_general);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
  }

  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != DataType::kFloat32) return (*reference_)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, x->dims()));
    Job job = job_;
    job.x = x->data<float>();
    job.y = y->data<float>();
    const RangeFn fn = fn_;
    parallel_for(0, x->num_elements(), int64_t{1} << 14, [&job, fn](int64_t b, int64_t e) { fn(job, b, e); });
    return ok_status();
  }
  std::string implementation() const override { return implementation_; }

 private:
  const ops::KernelFn* reference_;
  Job job_;
  RangeFn fn_ = nullptr;
  std::string implementation_;
};

Expected<std::unique_ptr<Kernel>> prepare_hardswish(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(ops::FusedActivation act, plan_hardswish(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
  return std::unique_ptr<Kernel>(new HardSwishKernel(act, &schema->kernel_fn()));
}

Status hardswish_applicable(const ir::Node& node) { return plan_hardswish(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "HardSwish",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = hardswish_applicable,
                                    .prepare = prepare_hardswish}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
