// SIMD kernel for kiln Gelu (docs/fused-ops.md), erf and tanh forms: float32, any shape
// (elementwise over the flat tensor). Highway, with the AVX-512 / AVX2 / baseline version
// picked at prepare (simd_dispatch.h); chunks in parallel (parallel_for).
//
// The operations and their order are the reference's (ops/fused_activation.cc), without FMA
// across them: erf form 0.5 * x * (1 + erf(x * 0.70710678)), tanh form
// 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x))). erf is Eigen's float
// rational approximation (x * P(x^2) / Q(x^2) on x clamped to [-4, 4]; erf(4) is 1 in float32
// to within 1.5e-8), measured within 3.8 float32 eps of the exact erf at 2M points of
// [-6, 6]; tanh is Highway's (within 4 ulp). The difference to the reference is then an
// absolute error of a few eps in 1 + erf / 1 + tanh, times 0.5 |x|
// (tests/kernels/norm_kernel_test.cc).
//
// Other dtypes stay on the reference kernel.
#ifndef KILN_KERNELS_CPU_GELU_SHARED_
#define KILN_KERNELS_CPU_GELU_SHARED_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/op_util.h"

namespace kiln::kernels::gelu_simd {

struct Job {
  const float* x = nullptr;
  float* y = nullptr;
};

}  // namespace kiln::kernels::gelu_simd

#endif  // KILN_KERNELS_CPU_GELU_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gelu.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::gelu_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

HWY_INLINE V erf_approx(D d, V x) {
  x = hn::Min(hn::Max(x, hn::Set(d, -4.0f)), hn::Set(d, 4.0f));
  const V x2 = hn::Mul(x, x);
  V p = hn::Set(d, -2.72614225801306e-10f);
  p = hn::MulAdd(p, x2, hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(p, x2, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(p, x2, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(p, x2, hn::Set(d, -1.60960333262415e-02f));
  p = hn::Mul(p, x);
  V q = hn::Set(d, -1.45660718464996e-05f);
  q = hn::MulAdd(q, x2, hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.42647390514189e-02f));
  return hn::Div(p, q);
}

template <bool kTanh>
HWY_INLINE V gelu(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  V t;
  if constexpr (kTanh) {
    // k * (x + 0.044715 * x * x * x), rounded as the reference writes it.
    const V cube = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, 0.044715f), x), x), x);
    t = hn::Tanh(d, hn::Mul(hn::Set(d, 0.7978845608028654f), hn::Add(x, cube)));
  } else {
    t = erf_approx(d, hn::Mul(x, hn::Set(d, 0.7071067811865476f)));
  }
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(one, t));
}

// Elements [b, e) of the job.
template <bool kTanh>
HWY_INLINE void gelu_range(const Job& job, int64_t b, int64_t e) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = b;
  for (; i + lanes <= e; i += lanes)
    hn::StoreU(gelu<kTanh>(d, hn::LoadU(d, job.x + i)), d, job.y + i);
  if (i < e) {
    const auto m = hn::FirstN(d, static_cast<size_t>(e - i));
    hn::BlendedStore(gelu<kTanh>(d, hn::MaskedLoad(m, d, job.x + i)), m, d, job.y + i);
  }
}

void gelu_erf(const Job& job, int64_t b, int64_t e) { gelu_range<false>(job, b, e); }
void gelu_tanh(const Job& job, int64_t b, int64_t e) { gelu_range<true>(job, b, e); }

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::gelu_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using gelu_simd::Job;
using RangeFn = void (*)(const Job&, int64_t, int64_t);

// Whether the kernel takes the node, and in which form.
Expected<bool> plan_gelu(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kKilnDomain || node.op_type() != "Gelu")
    return unsupported("node %s: not a kiln Gelu", label.c_str());
  if (node.inputs().size() != 1 || node.outputs().size() != 1 || !node.output(0))
    return unsupported("node %s: unexpected input/output count", label.c_str());
  const ir::Value* x = node.input(0);
  if (!x || x->dtype() != DataType::kFloat32)
    return unsupported("node %s: X dtype %s: only float32", label.c_str(), x ? dtype_name(x->dtype()) : "missing");
  const DataType yt = node.output(0)->dtype();
  if (yt != DataType::kFloat32 && yt != DataType::kUndefined)
    return unsupported("node %s: Y dtype %s: only float32", label.c_str(), dtype_name(yt));
  const std::string a = node.attr_string("approximate", "none");
  if (a != "none" && a != "tanh")
    return unsupported("node %s: approximate \"%s\"", label.c_str(), a.c_str());
  return a == "tanh";
}

class GeluKernel final : public Kernel {
 public:
  GeluKernel(bool tanh_form, const ops::KernelFn* reference) : reference_(reference) {
    fn_ = tanh_form ? KILN_SIMD_SELECT(kiln::kernels::gelu_simd, gelu_tanh)
                    : KILN_SIMD_SELECT(kiln::kernels::gelu_simd, gelu_erf);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  const ops::KernelFn* reference_;
  RangeFn fn_ = nullptr;
  std::string implementation_;
};

struct RunState {
  Job job;
  RangeFn fn;
};

Status GeluKernel::run(ops::KernelContext& ctx) const {
  const Tensor* x = ctx.input(0);
  if (!x || x->dtype() != DataType::kFloat32) return (*reference_)(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, x->dims()));
  RunState st;
  st.fn = fn_;
  st.job.x = x->data<float>();
  st.job.y = y->data<float>();
  const RunState* s = &st;
  parallel_for(0, x->num_elements(), int64_t{1} << 14,
               [s](int64_t b, int64_t e) { s->fn(s->job, b, e); });
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_gelu(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(bool tanh_form, plan_gelu(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn())
    return unsupported("node %s: no reference kernel", node.label().c_str());
  return std::unique_ptr<Kernel>(new GeluKernel(tanh_form, &schema->kernel_fn()));
}

Status gelu_applicable(const ir::Node& node) { return plan_gelu(node).status(); }

}  // namespace

namespace {

RangeFn in_place_fn(bool tanh_form) {
  static const RangeFn erf_fn = KILN_SIMD_SELECT(kiln::kernels::gelu_simd, gelu_erf);
  static const RangeFn tanh_fn = KILN_SIMD_SELECT(kiln::kernels::gelu_simd, gelu_tanh);
  return tanh_form ? tanh_fn : erf_fn;
}

}  // namespace

void gelu_span(float* y, int64_t n, bool tanh_form) {
  Job job;
  job.x = y;
  job.y = y;
  in_place_fn(tanh_form)(job, 0, n);
}

void gelu_in_place(float* y, int64_t n, bool tanh_form) {
  RunState st;
  st.fn = in_place_fn(tanh_form);
  st.job.x = y;
  st.job.y = y;
  const RunState* s = &st;
  parallel_for(0, n, int64_t{1} << 14, [s](int64_t b, int64_t e) { s->fn(s->job, b, e); });
}

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "Gelu",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = gelu_applicable,
                                    .prepare = prepare_gelu}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
