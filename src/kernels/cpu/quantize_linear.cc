// SIMD kernels for ONNX QuantizeLinear (float32 -> uint8 / int8) and DequantizeLinear
// (uint8 / int8 -> float32) with one constant (initializer) scale and zero point: the float
// boundaries of an int8 network. Any shape (elementwise over the flat tensor). Highway, the
// AVX-512 / AVX2 / baseline version picked at prepare (simd_dispatch.h); chunks in parallel
// (parallel_for).
//
// Bit-exact with the reference kernels (src/ops/quantize.cc), which compute in double:
//   QuantizeLinear   y = saturate(round_half_to_even(x / scale) + zero_point), NaN -> lowest.
//     The reference rounds x / scale to float32 (NumPy's float32 division); a float32 vector
//     division gives the same correctly rounded quotient.
//   DequantizeLinear y = float32((x - zero_point) * scale): the product of an exact 9-bit
//     integer and a float32 is exact in double, so one float32 multiply rounds it the same.
// Per-axis and blocked scales, other dtypes, the precision attribute and inputs other than
// the prepared constants run the reference kernel.
//
// One Zen 5 core, [1,256,56,56] (kernels_test --gtest_filter='*Timing*'): QuantizeLinear
// 0.07-0.08 ns per element, DequantizeLinear 0.05-0.06 (the reference: ~8 and ~5.5).
#ifndef KILN_KERNELS_CPU_QUANTIZE_LINEAR_SHARED_
#define KILN_KERNELS_CPU_QUANTIZE_LINEAR_SHARED_

#include <cstdint>
#include <memory>
#include <string>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels::quantize_linear_simd {

struct Job {
  const void* x = nullptr;
  void* y = nullptr;
  float scale = 1;
  int32_t zero_point = 0;
};

}  // namespace kiln::kernels::quantize_linear_simd

#endif  // KILN_KERNELS_CPU_QUANTIZE_LINEAR_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/quantize_linear.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/quantize_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::quantize_linear_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace qs = quantize_simd::HWY_NAMESPACE;

template <typename T>
HWY_INLINE void quantize_range(const Job& job, int64_t b, int64_t e) {
  const qs::DF df;
  const qs::VF scale = hn::Set(df, job.scale);
  const qs::QuantBounds<T> q(job.zero_point);
  qs::for_vectors(b, e, static_cast<const float*>(job.x), static_cast<const float*>(nullptr), static_cast<T*>(job.y),
                  [&](const float* x, const float*, T* y) {
                    qs::store_quantized<true>(hn::Div(hn::LoadU(df, x), scale), q, y);
                  });
}

template <typename T>
HWY_INLINE void dequantize_range(const Job& job, int64_t b, int64_t e) {
  const qs::DF df;
  const qs::VF scale = hn::Set(df, job.scale);
  const qs::VI zp = hn::Set(qs::DI(), job.zero_point);
  qs::for_vectors(b, e, static_cast<const T*>(job.x), static_cast<const T*>(nullptr), static_cast<float*>(job.y),
                  [&](const T* x, const T*, float* y) { hn::StoreU(hn::Mul(qs::load_centered(x, zp), scale), df, y); });
}

void quantize_u8(const Job& job, int64_t b, int64_t e) { quantize_range<uint8_t>(job, b, e); }
void quantize_s8(const Job& job, int64_t b, int64_t e) { quantize_range<int8_t>(job, b, e); }
void dequantize_u8(const Job& job, int64_t b, int64_t e) { dequantize_range<uint8_t>(job, b, e); }
void dequantize_s8(const Job& job, int64_t b, int64_t e) { dequantize_range<int8_t>(job, b, e); }

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::quantize_linear_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using quantize_linear_simd::Job;
using RangeFn = void (*)(const Job&, int64_t, int64_t);

// Elements per parallel chunk: ~64 KB of float32 per task.
constexpr int64_t kGrain = int64_t{1} << 14;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

const Tensor* constant_input(const ir::Node& node, size_t i) {
  const ir::Value* v = i < node.inputs().size() ? node.input(static_cast<int>(i)) : nullptr;
  return v && v->has_initializer() ? v->initializer() : nullptr;
}

// What the kernel runs: the direction, the 8-bit type and the constants it was prepared for.
struct QdqPlan {
  bool quantize = true;
  DataType q_type = DataType::kUInt8;  // y of QuantizeLinear, x of DequantizeLinear
  Tensor scale, zero_point;            // the initializers (zero_point undefined when absent)
};

Expected<QdqPlan> plan_qdq(const ir::Node& node) {
  const std::string label = node.label();
  QdqPlan p;
  if (node.domain() != ops::kOnnxDomain || (node.op_type() != "QuantizeLinear" && node.op_type() != "DequantizeLinear"))
    return unsupported("node %s: not a QuantizeLinear or DequantizeLinear", label.c_str());
  p.quantize = node.op_type() == "QuantizeLinear";
  const size_t n_in = node.inputs().size();
  if (n_in < 2 || n_in > 3 || node.outputs().size() != 1 || !node.input(0) || !node.output(0))
    return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  const Tensor* scale = constant_input(node, 1);
  if (!scale || scale->dtype() != DataType::kFloat32 || scale->num_elements() != 1)
    return unsupported("node %s: the scale must be one constant float32 value (per tensor)", label.c_str());
  const ir::Value* zp_value = n_in == 3 ? node.input(2) : nullptr;
  const Tensor* zp = constant_input(node, 2);
  if (zp_value && (!zp || zp->num_elements() != 1))
    return unsupported("node %s: the zero point must be one constant value", label.c_str());
  const DataType x = node.input(0)->dtype(), y = node.output(0)->dtype();
  if (p.quantize) {
    if (x != DataType::kFloat32 || !is_x8(y))
      return unsupported("node %s: float32 to uint8 / int8 only", label.c_str());
    if (node.opset() >= 25 && node.attr_int("precision", 0) != 0 &&
        node.attr_int("precision", 0) != static_cast<int64_t>(DataType::kFloat32))
      return unsupported("node %s: a precision other than float32", label.c_str());
    p.q_type = y;
  } else {
    if (!is_x8(x) || y != DataType::kFloat32)
      return unsupported("node %s: uint8 / int8 to float32 only", label.c_str());
    p.q_type = x;
  }
  if (node.opset() >= 21 && node.attr_int("block_size", 0) != 0)
    return unsupported("node %s: blocked quantisation", label.c_str());
  if (zp && zp->dtype() != p.q_type)
    return unsupported("node %s: the zero point is %s, not %s", label.c_str(), dtype_name(zp->dtype()),
                       dtype_name(p.q_type));
  p.scale = *scale;
  if (zp) p.zero_point = *zp;
  return p;
}

class QdqKernel final : public Kernel {
 public:
  QdqKernel(QdqPlan plan, const ops::KernelFn* reference) : plan_(std::move(plan)), reference_(reference) {
    const bool u8 = plan_.q_type == DataType::kUInt8;
    if (plan_.quantize)
      fn_ = u8 ? KILN_SIMD_SELECT(kiln::kernels::quantize_linear_simd, quantize_u8)
               : KILN_SIMD_SELECT(kiln::kernels::quantize_linear_simd, quantize_s8);
    else
      fn_ = u8 ? KILN_SIMD_SELECT(kiln::kernels::quantize_linear_simd, dequantize_u8)
               : KILN_SIMD_SELECT(kiln::kernels::quantize_linear_simd, dequantize_s8);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
    job_.scale = *plan_.scale.data<float>();
    job_.zero_point = plan_.zero_point.defined() ? static_cast<int32_t>(plan_.zero_point.element_as_int64(0)) : 0;
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  // Whether the inputs are the ones the kernel was prepared for (a caller may feed others).
  bool inputs_as_prepared(const ops::KernelContext& ctx) const {
    const Tensor* x = ctx.input(0);
    const Tensor* zp = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    return x && x->dtype() == (plan_.quantize ? DataType::kFloat32 : plan_.q_type) && ctx.input(1) &&
           ctx.input(1)->raw_data() == plan_.scale.raw_data() &&
           (plan_.zero_point.defined() ? zp && zp->raw_data() == plan_.zero_point.raw_data() : !zp);
  }

  QdqPlan plan_;
  const ops::KernelFn* reference_;
  RangeFn fn_ = nullptr;
  Job job_;
  std::string implementation_;
};

struct RunState {
  Job job;
  RangeFn fn;
};

Status QdqKernel::run(ops::KernelContext& ctx) const {
  if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
  const Tensor* x = ctx.input(0);
  const DataType y_type = plan_.quantize ? plan_.q_type : DataType::kFloat32;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_type, x->dims(), TensorInit::kUninitialized));
  RunState st{job_, fn_};
  st.job.x = x->raw_data();
  st.job.y = y->raw_data();
  const RunState* s = &st;
  parallel_for(0, x->num_elements(), kGrain, [s](int64_t b, int64_t e) { s->fn(s->job, b, e); });
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_qdq(const ir::Node& node) {
  return prepare_with_reference<QdqKernel>(node, plan_qdq);
}

Status qdq_applicable(const ir::Node& node) { return plan_qdq(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "QuantizeLinear",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = qdq_applicable,
                                    .prepare = prepare_qdq}));
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "DequantizeLinear",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = qdq_applicable,
                                    .prepare = prepare_qdq}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
