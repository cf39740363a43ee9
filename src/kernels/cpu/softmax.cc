// SIMD kernel for ONNX Softmax over contiguous rows: float32, static shapes; from opset 13 the
// last axis (or an axis followed only by 1s), before 13 any axis (the input is coerced to
// [outer, rest], whose rows are contiguous). Highway, with the AVX-512 / AVX2 / baseline
// version picked at prepare (simd_dispatch.h); rows in parallel (parallel_for).
//
// Per row: the maximum, exp(x - max) with Highway's Exp (within 2 ulp of std::exp) and their
// float32 sum, then the product with 1 / sum, as the reference computes it (whose sum is in
// double: results differ by float32 summation order, tests/kernels/softmax_kernel_test.cc).
// A row holding NaN, or whose maximum is +inf or -inf, is NaN, as in the reference.
//
// Other axes (strided rows), dtypes and dynamic shapes stay on the reference kernel; runs
// whose input differs from the prepared one run the reference kernel.
#ifndef KILN_KERNELS_CPU_SOFTMAX_SHARED_
#define KILN_KERNELS_CPU_SOFTMAX_SHARED_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/op_util.h"

namespace kiln::kernels::softmax_simd {

struct Job {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t n = 0;  // elements per row
};

}  // namespace kiln::kernels::softmax_simd

#endif  // KILN_KERNELS_CPU_SOFTMAX_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/softmax.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::softmax_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Rows [r0, r1) of the job.
void softmax_rows(const Job& job, int64_t r0, int64_t r1) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = job.n;
  const int64_t full = n / lanes * lanes;
  const size_t tail = static_cast<size_t>(n - full);
  const auto tail_mask = hn::FirstN(d, tail);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const V neg_inf = hn::Set(d, -kInf);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = job.x + r * n;
    float* y = job.y + r * n;
    V vmax0 = neg_inf, vmax1 = neg_inf;
    auto nan_seen = hn::FirstN(d, 0);
    int64_t i = 0;
    for (; i + 2 * lanes <= full; i += 2 * lanes) {
      const V a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + i + lanes);
      nan_seen = hn::Or(nan_seen, hn::Or(hn::IsNaN(a), hn::IsNaN(b)));
      vmax0 = hn::Max(vmax0, a);
      vmax1 = hn::Max(vmax1, b);
    }
    for (; i < full; i += lanes) {
      const V a = hn::LoadU(d, x + i);
      nan_seen = hn::Or(nan_seen, hn::IsNaN(a));
      vmax0 = hn::Max(vmax0, a);
    }
    V xt = neg_inf;  // the tail, -inf in the lanes past the row
    if (tail) {
      xt = hn::IfThenElse(tail_mask, hn::MaskedLoad(tail_mask, d, x + full), neg_inf);
      nan_seen = hn::Or(nan_seen, hn::IsNaN(xt));
      vmax1 = hn::Max(vmax1, xt);
    }
    const float mx = hn::GetLane(hn::MaxOfLanes(d, hn::Max(vmax0, vmax1)));
    if (!hn::AllFalse(d, nan_seen) || !(mx > -kInf) || mx == kInf) {
      // The reference's exp(x - max) is NaN somewhere in the row, and so is its sum.
      std::fill(y, y + n, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const V vm = hn::Set(d, mx);
    V s0 = hn::Zero(d), s1 = hn::Zero(d);
    for (i = 0; i + 2 * lanes <= full; i += 2 * lanes) {
      const V a = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
      const V b = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + lanes), vm));
      s0 = hn::Add(s0, a);
      s1 = hn::Add(s1, b);
      hn::StoreU(a, d, y + i);
      hn::StoreU(b, d, y + i + lanes);
    }
    for (; i < full; i += lanes) {
      const V a = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
      s0 = hn::Add(s0, a);
      hn::StoreU(a, d, y + i);
    }
    V et = hn::Zero(d);
    if (tail) {
      et = hn::Exp(d, hn::Sub(xt, vm));  // 0 in the lanes past the row
      s1 = hn::Add(s1, et);
    }
    const V vinv = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1))));
    for (i = 0; i < full; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vinv), d, y + i);
    if (tail) hn::BlendedStore(hn::Mul(et, vinv), tail_mask, d, y + full);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::softmax_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using Dims = std::vector<int64_t>;
using softmax_simd::Job;

struct SoftmaxPlan {
  std::string label;
  Dims x_dims;
  int64_t rows = 0, n = 0;
};

Expected<SoftmaxPlan> plan_softmax(const ir::Node& node) {
  SoftmaxPlan p;
  p.label = node.label();
  const char* label = p.label.c_str();
  if (node.domain() != ops::kOnnxDomain || node.op_type() != "Softmax")
    return unsupported("node %s: not a Softmax", label);
  if (node.inputs().size() != 1 || node.outputs().size() != 1 || !node.output(0))
    return unsupported("node %s: %zu inputs and %zu outputs, expected 1 and 1", label, node.inputs().size(),
                       node.outputs().size());
  const ir::Value* x = node.input(0);
  KILN_RETURN_IF_ERROR(require_static_tensor("X", x, {DataType::kFloat32}));
  const ir::Value* y = node.output(0);
  if (y->dtype() != DataType::kFloat32 && y->dtype() != DataType::kUndefined)
    return unsupported("node %s: Y dtype %s: only float32", label, dtype_name(y->dtype()));
  p.x_dims = x->shape().static_dims();
  const int rank = static_cast<int>(p.x_dims.size());
  if (rank < 1) return unsupported("node %s: X is a scalar", label);
  const bool coerce_2d = node.opset() < 13;
  const int64_t axis_attr = node.attr_int("axis", coerce_2d ? 1 : -1);
  if (axis_attr < -rank || axis_attr >= rank)
    return unsupported("node %s: axis out of range", label);
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  // Rows are contiguous when the op normalises over X[axis:] (before 13), or over one axis
  // followed only by 1s.
  if (!coerce_2d)
    for (int i = axis + 1; i < rank; ++i)
      if (p.x_dims[static_cast<size_t>(i)] != 1)
        return unsupported("node %s: axis %d is not the last: strided rows", label, axis);
  p.n = num_elements(Dims(p.x_dims.begin() + axis, p.x_dims.end()));
  if (p.n <= 0 || num_elements(p.x_dims) <= 0) return unsupported("node %s: empty X", label);
  p.rows = num_elements(p.x_dims) / p.n;
  const Shape& ys = y->shape();
  if (ys.has_rank() && ys.is_static() && ys.static_dims() != p.x_dims)
    return unsupported("node %s: declared output %s differs from X", label, ys.to_string().c_str());
  return p;
}

using RowsFn = void (*)(const Job&, int64_t, int64_t);

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(SoftmaxPlan plan, const ops::KernelFn* reference)
      : plan_(std::move(plan)), reference_(reference) {
    fn_ = KILN_SIMD_SELECT(kiln::kernels::softmax_simd, softmax_rows);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  SoftmaxPlan plan_;
  const ops::KernelFn* reference_;
  RowsFn fn_ = nullptr;
  std::string implementation_;
};

// What the parallel tasks share; the closure captures only its address (no allocation in
// the std::function).
struct RunState {
  Job job;
  RowsFn fn;
};

Status SoftmaxKernel::run(ops::KernelContext& ctx) const {
  const Tensor* x = ctx.input(0);
  if (!x || x->dtype() != DataType::kFloat32 || x->dims() != plan_.x_dims)
    return (*reference_)(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan_.x_dims));
  RunState st;
  st.fn = fn_;
  st.job.x = x->data<float>();
  st.job.y = y->data<float>();
  st.job.n = plan_.n;
  // Chunks of at least ~16K elements: below that a thread's start-up costs more than the rows.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / plan_.n);
  const RunState* s = &st;
  parallel_for(0, plan_.rows, grain, [s](int64_t r0, int64_t r1) { s->fn(s->job, r0, r1); });
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_softmax(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(SoftmaxPlan plan, plan_softmax(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", plan.label.c_str());
  return std::unique_ptr<Kernel>(new SoftmaxKernel(std::move(plan), &schema->kernel_fn()));
}

Status softmax_applicable(const ir::Node& node) { return plan_softmax(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "Softmax",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = softmax_applicable,
                                    .prepare = prepare_softmax}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
