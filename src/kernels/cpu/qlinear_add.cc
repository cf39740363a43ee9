// SIMD kernel for kiln FusedQLinearAdd (src/ops/fused_qlinear_add.cc): the residual Add of an
// int8 network, uint8 or int8, A and B of the same shape or one of them a single element,
// constant per-tensor scales and zero points, no activation, Relu or Clip. Highway, the
// AVX-512 / AVX2 / baseline version picked at prepare (simd_dispatch.h); chunks in parallel
// (parallel_for).
//
// Per vector of float32 lanes, the reference's steps with the same float32 roundings:
//   fa = (int32(A) - za) -> float32, times sa      (exact integer, one rounding)
//   fb = the same for B
//   v  = (fa + fb) / sc                            a division, as QuantizeLinear does
//   C  = clamp(NearestInt(v) + zc, c_lo, c_hi)
// with [c_lo, c_hi] the type's range narrowed to the activation's bounds quantised
// (Q(0) for Relu, Q(lo) and Q(hi) for Clip): quantisation is monotonic, so clamping the
// quantised value equals quantising the clamped one, exactly. The products are kept apart
// from the sum (quantize_simd-inl.h `rounded`: no FMA contraction, which would move ~1% of
// the outputs by one step), and the division is a true division rather than a multiply by
// 1 / sc, so the kernel is bit-exact with the reference. The division costs ~12% (one
// Zen 5 core, [1,256,56,56] uint8: 0.104 ns per element, 0.093 with a multiply by the
// reciprocal; AVX2 0.26 / 0.235; the reference ~12 ns); a reciprocal, or folding sa / sc
// and sb / sc, would move an output by one step wherever the scaled sum lies within
// float32 rounding of a .5 tie. The time goes to the ~20 vector instructions per 16
// elements (widening, conversions, narrowing), not to memory: 3 bytes per element.
//
// Scales that are not finite and positive, NaN Clip bounds, other broadcasts and inputs
// other than the prepared constants run the reference kernel.
#ifndef KILN_KERNELS_CPU_QLINEAR_ADD_SHARED_
#define KILN_KERNELS_CPU_QLINEAR_ADD_SHARED_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"

namespace kiln::kernels::qlinear_add_simd {

struct Job {
  const void* a = nullptr;
  const void* b = nullptr;  // null: B is the single element b0
  int32_t b0 = 0;
  void* c = nullptr;
  float a_scale = 1, b_scale = 1, c_scale = 1;
  int32_t a_zero_point = 0, b_zero_point = 0, c_zero_point = 0;
  int32_t c_lo = 0, c_hi = 0;  // C's range within the type: the activation's, quantised
};

}  // namespace kiln::kernels::qlinear_add_simd

#endif  // KILN_KERNELS_CPU_QLINEAR_ADD_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/qlinear_add.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/quantize_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::qlinear_add_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace qs = quantize_simd::HWY_NAMESPACE;

template <typename T>
HWY_INLINE void qadd_range(const Job& job, int64_t begin, int64_t end) {
  const qs::DF df;
  const qs::DI di;
  const qs::VF sa = hn::Set(df, job.a_scale), sb = hn::Set(df, job.b_scale), sc = hn::Set(df, job.c_scale);
  const qs::VI za = hn::Set(di, job.a_zero_point), zb = hn::Set(di, job.b_zero_point);
  const qs::QuantBounds<T> q(job.c_zero_point, job.c_lo, job.c_hi);
  // A single-element B: its dequantised value, computed as the lanes compute it.
  const qs::VF fb0 = qs::rounded(hn::Mul(hn::ConvertTo(df, hn::Sub(hn::Set(di, job.b0), zb)), sb));
  qs::for_vectors(begin, end, static_cast<const T*>(job.a), static_cast<const T*>(job.b), static_cast<T*>(job.c),
                  [&](const T* a, const T* b, T* c) {
                    const qs::VF fa = qs::rounded(hn::Mul(qs::load_centered(a, za), sa));
                    const qs::VF fb = b ? qs::rounded(hn::Mul(qs::load_centered(b, zb), sb)) : fb0;
                    qs::store_quantized<false>(hn::Div(hn::Add(fa, fb), sc), q, c);
                  });
}

void qadd_u8(const Job& job, int64_t b, int64_t e) { qadd_range<uint8_t>(job, b, e); }
void qadd_s8(const Job& job, int64_t b, int64_t e) { qadd_range<int8_t>(job, b, e); }

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::qlinear_add_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using qlinear_add_simd::Job;
using RangeFn = void (*)(const Job&, int64_t, int64_t);

// Elements per parallel chunk (~96 KB of traffic per task).
constexpr int64_t kGrain = int64_t{1} << 15;

constexpr int kA = 0, kAScale = 1, kAZeroPoint = 2, kB = 3, kBScale = 4, kBZeroPoint = 5, kCScale = 6,
              kCZeroPoint = 7;

const Tensor* constant_input(const ir::Node& node, int i) {
  const ir::Value* v = static_cast<size_t>(i) < node.inputs().size() ? node.input(i) : nullptr;
  return v && v->has_initializer() ? v->initializer() : nullptr;
}

struct QAddPlan {
  DataType dtype = DataType::kUInt8;
  std::vector<int64_t> dims;  // C's (and the full operand's)
  bool swap = false;          // A is the single element: the kernel runs B + A
  bool scalar_b = false;      // (after the swap) B is a single element
  Job job;                    // scales, zero points and bounds; pointers set per run
  std::vector<Tensor> constants;  // inputs 1, 2, 4, 5, 6, 7 as prepared (undefined where absent)
};

constexpr int kConstantInputs[] = {kAScale, kAZeroPoint, kBScale, kBZeroPoint, kCScale, kCZeroPoint};

Expected<QAddPlan> plan_qadd(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kKilnDomain || node.op_type() != "FusedQLinearAdd")
    return unsupported("node %s: not a FusedQLinearAdd", label.c_str());
  const ir::Value* a = node.input(kA);
  const ir::Value* b = node.inputs().size() > kB ? node.input(kB) : nullptr;
  const ir::Value* c = node.outputs().size() == 1 ? node.output(0) : nullptr;
  if (!a || !b || !c) return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  QAddPlan p;
  p.dtype = a->dtype();
  if ((p.dtype != DataType::kUInt8 && p.dtype != DataType::kInt8) || b->dtype() != p.dtype || c->dtype() != p.dtype)
    return unsupported("node %s: A %s, B %s, C %s: all uint8 or all int8 only", label.c_str(), dtype_name(p.dtype),
                       dtype_name(b->dtype()), dtype_name(c->dtype()));
  for (const ir::Value* v : {a, b, c})
    if (!v->shape().has_rank() || !v->shape().is_static())
      return unsupported("node %s: %s %s: open dims (static shapes only)", label.c_str(),
                         v == a ? "A" : v == b ? "B" : "C", v->type().to_string().c_str());
  const std::vector<int64_t> ad = a->shape().static_dims(), bd = b->shape().static_dims();
  p.dims = c->shape().static_dims();
  const int64_t an = kiln::num_elements(ad), bn = kiln::num_elements(bd);
  if (ad == bd && p.dims == ad) {
  } else if (bn == 1 && p.dims == ad) {
    p.scalar_b = true;
  } else if (an == 1 && p.dims == bd) {
    p.scalar_b = p.swap = true;
  } else {
    return unsupported("node %s: A and B must have the same shape, or one be a single element", label.c_str());
  }
  for (int i : kConstantInputs) {
    const bool present = static_cast<size_t>(i) < node.inputs().size() && node.input(i);
    const Tensor* t = constant_input(node, i);
    if (present && (!t || t->num_elements() != 1))
      return unsupported("node %s: input %d must be one constant value", label.c_str(), i);
    const DataType want = i == kAScale || i == kBScale || i == kCScale ? DataType::kFloat32 : p.dtype;
    if (t && t->dtype() != want)
      return unsupported("node %s: input %d is %s, not %s", label.c_str(), i, dtype_name(t->dtype()), dtype_name(want));
    p.constants.push_back(t ? *t : Tensor());
  }
  auto scale = [&](int i, float& out) -> Status {
    const Tensor* t = constant_input(node, i);
    if (!t) return unsupported("node %s: scale (input %d) is missing", label.c_str(), i);
    out = *t->data<float>();
    // Normal (a denormal divisor would be 0 under DAZ) and small enough that no product or
    // sum overflows: the sum is then never NaN.
    if (!std::isnormal(out) || out <= 0 || out > 0x1p100f)
      return unsupported("node %s: scale (input %d) %g is not in [FLT_MIN, 2^100]", label.c_str(), i, out);
    return ok_status();
  };
  auto zero_point = [&](int i) -> int32_t {
    const Tensor* t = constant_input(node, i);
    return t ? static_cast<int32_t>(t->element_as_int64(0)) : 0;
  };
  Job& j = p.job;
  KILN_RETURN_IF_ERROR(scale(p.swap ? kBScale : kAScale, j.a_scale));
  KILN_RETURN_IF_ERROR(scale(p.swap ? kAScale : kBScale, j.b_scale));
  KILN_RETURN_IF_ERROR(scale(kCScale, j.c_scale));
  j.a_zero_point = zero_point(p.swap ? kBZeroPoint : kAZeroPoint);
  j.b_zero_point = zero_point(p.swap ? kAZeroPoint : kBZeroPoint);
  j.c_zero_point = zero_point(kCZeroPoint);
  KILN_ASSIGN_OR_RETURN(ops::FusedActivation act, ops::parse_fused_activation(node));
  if (act.has_post_affine()) return unsupported("node %s: a post-affine activation", label.c_str());
  // The activation as bounds on C: quantisation is monotonic (a float32 division by a
  // positive scale, then rounding), so Q(clamp(s, lo, hi)) = clamp(Q(s), Q(lo), Q(hi)),
  // exactly, with Q(lo) and Q(hi) computed as the reference quantises (saturated).
  const double t_lo = p.dtype == DataType::kUInt8 ? 0 : -128, t_hi = p.dtype == DataType::kUInt8 ? 255 : 127;
  auto quantised = [&](float x) {
    const float v = x / j.c_scale;
    return static_cast<int32_t>(std::clamp(std::nearbyint(static_cast<double>(v)) + j.c_zero_point, t_lo, t_hi));
  };
  j.c_lo = static_cast<int32_t>(t_lo);
  j.c_hi = static_cast<int32_t>(t_hi);
  if (act.kind == ops::FusedActivationKind::kRelu) {
    j.c_lo = quantised(0.0f);
  } else if (act.kind == ops::FusedActivationKind::kClip) {
    if (std::isnan(act.p0) || std::isnan(act.p1)) return unsupported("node %s: NaN Clip bounds", label.c_str());
    j.c_lo = quantised(act.p0);
    j.c_hi = quantised(act.p1);  // below c_lo when lo > hi: C is then Q(hi), as Clip gives hi
  } else if (!act.is_none()) {
    return unsupported("node %s: activation other than Relu / Clip", label.c_str());
  }
  return p;
}

class QAddKernel final : public Kernel {
 public:
  QAddKernel(QAddPlan plan, const ops::KernelFn* reference) : plan_(std::move(plan)), reference_(reference) {
    fn_ = plan_.dtype == DataType::kUInt8 ? KILN_SIMD_SELECT(kiln::kernels::qlinear_add_simd, qadd_u8)
                                          : KILN_SIMD_SELECT(kiln::kernels::qlinear_add_simd, qadd_s8);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  bool inputs_as_prepared(const ops::KernelContext& ctx) const {
    const Tensor* a = ctx.input(kA);
    const Tensor* b = ctx.input(kB);
    if (!a || !b || a->dtype() != plan_.dtype || b->dtype() != plan_.dtype) return false;
    const Tensor* full = plan_.swap ? b : a;
    const Tensor* other = plan_.swap ? a : b;
    if (full->dims() != plan_.dims || (plan_.scalar_b ? other->num_elements() != 1 : other->dims() != plan_.dims))
      return false;
    for (size_t k = 0; k < plan_.constants.size(); ++k) {
      const int i = kConstantInputs[k];
      const Tensor* t = i < ctx.num_inputs() ? ctx.input(i) : nullptr;
      const Tensor& want = plan_.constants[k];
      if (!want.defined() ? t != nullptr : (!t || t->raw_data() != want.raw_data())) return false;
    }
    return true;
  }

  QAddPlan plan_;
  const ops::KernelFn* reference_;
  RangeFn fn_ = nullptr;
  std::string implementation_;
};

struct RunState {
  Job job;
  RangeFn fn;
};

Status QAddKernel::run(ops::KernelContext& ctx) const {
  if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
  const Tensor* a = ctx.input(plan_.swap ? kB : kA);
  const Tensor* b = ctx.input(plan_.swap ? kA : kB);
  KILN_ASSIGN_OR_RETURN(Tensor * c, ctx.allocate_output(0, plan_.dtype, plan_.dims, TensorInit::kUninitialized));
  RunState st{plan_.job, fn_};
  st.job.a = a->raw_data();
  st.job.c = c->raw_data();
  if (plan_.scalar_b)
    st.job.b0 = static_cast<int32_t>(b->element_as_int64(0));
  else
    st.job.b = b->raw_data();
  const RunState* s = &st;
  parallel_for(0, c->num_elements(), kGrain, [s](int64_t b, int64_t e) { s->fn(s->job, b, e); });
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_qadd(const ir::Node& node) {
  return prepare_with_reference<QAddKernel>(node, plan_qadd);
}

Status qadd_applicable(const ir::Node& node) { return plan_qadd(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "FusedQLinearAdd",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = qadd_applicable,
                                    .prepare = prepare_qadd}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
