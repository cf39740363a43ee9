// SIMD kernel for ONNX DynamicQuantizeLinear (float32 -> uint8 with a scale and zero point
// computed from the data): the activation quantiser of ONNX Runtime's dynamic-quantisation
// models (quantize_dynamic), in front of every MatMulInteger. Two passes over x, Highway
// (AVX-512 / AVX2 / baseline picked at prepare, simd_dispatch.h), each in parallel chunks:
//   1. min / max of x (NaN ignored, as the reference's std::min / std::max ignore it), the
//      range widened to include 0;
//   2. y = saturate(round_half_to_even(x / scale) + zero_point), NaN -> 0.
// scale = (max - min) / 255 (1 when max == min) and zero_point = round_half_to_even(
// clamp(-min / scale, 0, 255)) are computed once in scalar code with the reference's own
// float32 expressions, so the kernel is bit-exact with src/ops/quantize.cc: the min / max
// of a set does not depend on the order, and a float32 vector division rounds x / scale
// the same as the scalar one. Non-finite ranges (an infinity in x) run the reference.
#ifndef KILN_KERNELS_CPU_DYNAMIC_QUANTIZE_LINEAR_SHARED_
#define KILN_KERNELS_CPU_DYNAMIC_QUANTIZE_LINEAR_SHARED_

#include <cstdint>

namespace kiln::kernels::dynamic_quantize_simd {

struct Range {
  float lo = 0, hi = 0;
};

}  // namespace kiln::kernels::dynamic_quantize_simd

#endif  // KILN_KERNELS_CPU_DYNAMIC_QUANTIZE_LINEAR_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/dynamic_quantize_linear.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "kernels/cpu/quantize_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::dynamic_quantize_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace qs = quantize_simd::HWY_NAMESPACE;

// min / max of x[b, e) and 0. NaN lanes are replaced by 0 first: 0 is in the range anyway.
Range min_max(const float* x, int64_t b, int64_t e) {
  const qs::DF df;
  const qs::VF zero = hn::Zero(df);
  qs::VF lo = zero, hi = zero;
  auto step = [&](qs::VF v) {
    v = hn::IfThenElse(hn::IsNaN(v), zero, v);
    lo = hn::Min(lo, v);
    hi = hn::Max(hi, v);
  };
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = b;
  for (; i + lanes <= e; i += lanes) step(hn::LoadU(df, x + i));
  if (i < e) {  // the tail, zero-padded (0 is in the range anyway)
    HWY_ALIGN float tail[qs::kTailLanes] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(e - i) * sizeof(float));
    step(hn::LoadU(df, tail));
  }
  return Range{hn::GetLane(hn::MinOfLanes(df, lo)), hn::GetLane(hn::MaxOfLanes(df, hi))};
}

void quantize(const float* x, uint8_t* y, float scale, int32_t zero_point, int64_t b, int64_t e) {
  const qs::DF df;
  const qs::VF s = hn::Set(df, scale);
  const qs::QuantBounds<uint8_t> q(zero_point);
  qs::for_vectors(b, e, x, static_cast<const float*>(nullptr), y, [&](const float* p, const float*, uint8_t* out) {
    qs::store_quantized<true>(hn::Div(hn::LoadU(df, p), s), q, out);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::dynamic_quantize_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dynamic_quantize_linear.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels {
namespace {

using dynamic_quantize_simd::Range;
using MinMaxFn = Range (*)(const float*, int64_t, int64_t);
using QuantizeFn = void (*)(const float*, uint8_t*, float, int32_t, int64_t, int64_t);

// Elements per parallel chunk: ~64 KB of float32 per task.
constexpr int64_t kGrain = int64_t{1} << 14;

// Pass 1 over x[0, n): the scale and zero point; false when the range is not finite.
bool dynamic_quantize_params(MinMaxFn mm, const float* p, int64_t n, float* scale_out, int32_t* zero_point_out) {
  // Pass 1: per-chunk ranges (chunk c is [c * kGrain, ...)), then combined.
  const int64_t chunks = std::max<int64_t>(1, (n + kGrain - 1) / kGrain);
  std::vector<Range> parts(static_cast<size_t>(chunks));
  Range* part = parts.data();
  parallel_for(0, chunks, 1, [=](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) part[c] = mm(p, c * kGrain, std::min(n, (c + 1) * kGrain));
  });
  float lo = 0, hi = 0;
  for (const Range& r : parts) {
    lo = std::min(lo, r.lo);
    hi = std::max(hi, r.hi);
  }
  // An infinite range gives a non-finite scale or zero point: the reference's arithmetic.
  if (!std::isfinite(lo) || !std::isfinite(hi)) return false;
  // The reference's formulas, in the same float32 expressions.
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
  if (!std::isfinite(scale) || scale == 0.0f) return false;
  *scale_out = scale;
  *zero_point_out = static_cast<int32_t>(zp);
  return true;
}

// Pass 2: x[0, n) -> q.
void dynamic_quantize_values(QuantizeFn qf, const float* p, int64_t n, uint8_t* q, float scale, int32_t zero_point) {
  parallel_for(0, n, kGrain, [=](int64_t b, int64_t e) { qf(p, q, scale, zero_point, b, e); });
}

struct DqlPlan {};

Expected<DqlPlan> plan_dql(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kOnnxDomain || node.op_type() != "DynamicQuantizeLinear")
    return unsupported("node %s: not a DynamicQuantizeLinear", label.c_str());
  if (node.inputs().size() != 1 || !node.input(0) || node.outputs().size() != 3)
    return unsupported("node %s: expects one input and three outputs", label.c_str());
  for (size_t i = 0; i < 3; ++i)
    if (!node.output(static_cast<int>(i)))
      return unsupported("node %s: output %zu is omitted", label.c_str(), i);
  if (node.input(0)->dtype() != DataType::kFloat32)
    return unsupported("node %s: x is %s, only float32 is supported", label.c_str(),
                       dtype_name(node.input(0)->dtype()));
  return DqlPlan{};
}

class DqlKernel final : public Kernel {
 public:
  DqlKernel(DqlPlan, const ops::KernelFn* reference) : reference_(reference) {
    min_max_ = KILN_SIMD_SELECT(kiln::kernels::dynamic_quantize_simd, min_max);
    quantize_ = KILN_SIMD_SELECT(kiln::kernels::dynamic_quantize_simd, quantize);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  const ops::KernelFn* reference_;
  MinMaxFn min_max_ = nullptr;
  QuantizeFn quantize_ = nullptr;
  std::string implementation_;
};

Status DqlKernel::run(ops::KernelContext& ctx) const {
  const Tensor* x = ctx.input(0);
  if (!x || x->dtype() != DataType::kFloat32) return (*reference_)(ctx);  // its error message
  float scale = 0;
  int32_t zero_point = 0;
  if (!dynamic_quantize_params(min_max_, x->data<float>(), x->num_elements(), &scale, &zero_point))
    return (*reference_)(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kUInt8, x->dims(), TensorInit::kUninitialized));
  dynamic_quantize_values(quantize_, x->data<float>(), x->num_elements(), y->data<uint8_t>(), scale, zero_point);
  KILN_ASSIGN_OR_RETURN(Tensor * ys, ctx.allocate_output(1, DataType::kFloat32, {}));
  *ys->data<float>() = scale;
  KILN_ASSIGN_OR_RETURN(Tensor * yz, ctx.allocate_output(2, DataType::kUInt8, {}));
  *yz->data<uint8_t>() = static_cast<uint8_t>(zero_point);
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_dql(const ir::Node& node) {
  return prepare_with_reference<DqlKernel>(node, plan_dql);
}

Status dql_applicable(const ir::Node& node) { return plan_dql(node).status(); }

}  // namespace

bool dynamic_quantize_u8(const float* x, int64_t n, uint8_t* q, float* scale, uint8_t* zero_point) {
  static const MinMaxFn mm = KILN_SIMD_SELECT(kiln::kernels::dynamic_quantize_simd, min_max);
  static const QuantizeFn qf = KILN_SIMD_SELECT(kiln::kernels::dynamic_quantize_simd, quantize);
  int32_t zp = 0;
  if (!dynamic_quantize_params(mm, x, n, scale, &zp)) return false;
  dynamic_quantize_values(qf, x, n, q, *scale, zp);
  *zero_point = static_cast<uint8_t>(zp);
  return true;
}

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "DynamicQuantizeLinear",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = dql_applicable,
                                    .prepare = prepare_dql}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
