// SIMD kernel for kiln LayerNorm and ONNX LayerNormalization (Y only): float32, static
// shapes, normalisation over X[axis:] (any axis: those dims are contiguous), Scale and Bias
// holding one value per normalised element (no broadcasting within X[axis:]). Highway, with
// the AVX-512 / AVX2 / baseline version picked at prepare (simd_dispatch.h); rows in parallel
// (parallel_for).
//
// Per row of n elements, three passes in float32: the sum of x - x[0] (shifting by a sample
// keeps the sum small when the mean is large against the spread), the sum of squared
// deviations from the mean (two-pass variance, as the reference), then
// y = (x - mean) * inv * scale + bias with inv = 1 / sqrt(var + epsilon) from double. The
// reference accumulates in double: results differ by float32 summation order
// (tests/kernels/norm_kernel_test.cc).
//
// Other nodes (Scale or Bias broadcast inside the normalised dims, other dtypes, the Mean /
// InvStdDev outputs, stash_type other than float32) stay on the reference kernel; runs whose
// inputs differ from the prepared ones run the reference kernel.
#ifndef KILN_KERNELS_CPU_LAYERNORM_SHARED_
#define KILN_KERNELS_CPU_LAYERNORM_SHARED_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/op_util.h"

namespace kiln::kernels::layernorm_simd {

struct Job {
  const float* x = nullptr;
  const float* scale = nullptr;
  const float* bias = nullptr;  // null: none
  float* y = nullptr;
  int64_t n = 0;  // elements per row
  double epsilon = 1e-5;
};

}  // namespace kiln::kernels::layernorm_simd

#endif  // KILN_KERNELS_CPU_LAYERNORM_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layernorm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::layernorm_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Rows [r0, r1) of the job.
void layernorm_rows(const Job& job, int64_t r0, int64_t r1) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = job.n;
  const int64_t full = n / lanes * lanes;  // elements in whole vectors
  const size_t tail = static_cast<size_t>(n - full);
  const auto tail_mask = hn::FirstN(d, tail);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = job.x + r * n;
    float* y = job.y + r * n;
    // Pass 1: the sum of x - x[0], in four accumulators.
    const V shift = hn::Set(d, x[0]);
    V s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 4 * lanes <= full; i += 4 * lanes) {
      s0 = hn::Add(s0, hn::Sub(hn::LoadU(d, x + i), shift));
      s1 = hn::Add(s1, hn::Sub(hn::LoadU(d, x + i + lanes), shift));
      s2 = hn::Add(s2, hn::Sub(hn::LoadU(d, x + i + 2 * lanes), shift));
      s3 = hn::Add(s3, hn::Sub(hn::LoadU(d, x + i + 3 * lanes), shift));
    }
    for (; i < full; i += lanes) s0 = hn::Add(s0, hn::Sub(hn::LoadU(d, x + i), shift));
    if (tail)
      s1 = hn::Add(s1, hn::IfThenElseZero(tail_mask,
                                          hn::Sub(hn::MaskedLoad(tail_mask, d, x + full), shift)));
    const float shifted_sum =
        hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
    const float mean = x[0] + shifted_sum / static_cast<float>(n);
    // Pass 2: the sum of squared deviations from the mean.
    const V vm = hn::Set(d, mean);
    V q0 = hn::Zero(d), q1 = hn::Zero(d), q2 = hn::Zero(d), q3 = hn::Zero(d);
    i = 0;
    for (; i + 4 * lanes <= full; i += 4 * lanes) {
      const V a = hn::Sub(hn::LoadU(d, x + i), vm), b = hn::Sub(hn::LoadU(d, x + i + lanes), vm);
      const V c = hn::Sub(hn::LoadU(d, x + i + 2 * lanes), vm);
      const V e = hn::Sub(hn::LoadU(d, x + i + 3 * lanes), vm);
      q0 = hn::MulAdd(a, a, q0);
      q1 = hn::MulAdd(b, b, q1);
      q2 = hn::MulAdd(c, c, q2);
      q3 = hn::MulAdd(e, e, q3);
    }
    for (; i < full; i += lanes) {
      const V a = hn::Sub(hn::LoadU(d, x + i), vm);
      q0 = hn::MulAdd(a, a, q0);
    }
    if (tail) {
      const V a =
          hn::IfThenElseZero(tail_mask, hn::Sub(hn::MaskedLoad(tail_mask, d, x + full), vm));
      q1 = hn::MulAdd(a, a, q1);
    }
    const double var = static_cast<double>(hn::GetLane(
                           hn::SumOfLanes(d, hn::Add(hn::Add(q0, q1), hn::Add(q2, q3))))) /
                       static_cast<double>(n);
    const V vinv = hn::Set(d, static_cast<float>(1.0 / std::sqrt(var + job.epsilon)));
    // Pass 3: y = (x - mean) * inv * scale + bias.
    const float* sc = job.scale;
    const float* bi = job.bias;
    for (i = 0; i < full; i += lanes) {
      const V a = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vm), vinv);
      const V out = bi ? hn::MulAdd(a, hn::LoadU(d, sc + i), hn::LoadU(d, bi + i))
                       : hn::Mul(a, hn::LoadU(d, sc + i));
      hn::StoreU(out, d, y + i);
    }
    if (tail) {
      const V a = hn::Mul(hn::Sub(hn::MaskedLoad(tail_mask, d, x + full), vm), vinv);
      const V s = hn::MaskedLoad(tail_mask, d, sc + full);
      const V out = bi ? hn::MulAdd(a, s, hn::MaskedLoad(tail_mask, d, bi + full)) : hn::Mul(a, s);
      hn::BlendedStore(out, tail_mask, d, y + full);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::layernorm_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using Dims = std::vector<int64_t>;
using layernorm_simd::Job;

Status require_static_f32(const char* what, const ir::Value* v) {
  return require_static_tensor(what, v, {DataType::kFloat32});
}

struct LayerNormPlan {
  std::string label;
  Dims x_dims, scale_dims, bias_dims;
  bool has_bias = false;
  int64_t rows = 0, n = 0;
  double epsilon = 1e-5;
};

// Whether `t` broadcasts to `norm` (right-aligned) with one value per element of `norm`.
bool one_per_element(const Dims& t, const Dims& norm) {
  if (t.size() > norm.size() || num_elements(t) != num_elements(norm)) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t nd = norm[norm.size() - t.size() + i];
    if (t[i] != nd && t[i] != 1) return false;
  }
  return true;
}

Expected<LayerNormPlan> plan_layernorm(const ir::Node& node) {
  LayerNormPlan p;
  p.label = node.label();
  const char* label = p.label.c_str();
  const bool kiln = node.domain() == ops::kKilnDomain && node.op_type() == "LayerNorm";
  const bool onnx = node.domain() == ops::kOnnxDomain && node.op_type() == "LayerNormalization";
  if (!kiln && !onnx) return unsupported("node %s: not a LayerNorm", label);
  if (node.inputs().size() < 2 || node.inputs().size() > 3)
    return unsupported("node %s: unexpected input count", label);
  // ONNX's Mean and InvStdDev outputs are not computed here.
  if (node.outputs().empty() || !node.output(0)) return unsupported("node %s: no output Y", label);
  for (size_t i = 1; i < node.outputs().size(); ++i)
    if (node.output(i)) return unsupported("node %s: outputs other than Y", label);
  if (onnx && node.attr_int("stash_type", 1) != 1)
    return unsupported("node %s: stash_type %lld: only 1 (float32)", label, (long long)node.attr_int("stash_type", 1));
  const ir::Value* bias = node.inputs().size() > 2 ? node.input(2) : nullptr;
  KILN_RETURN_IF_ERROR(require_static_f32("X", node.input(0)));
  KILN_RETURN_IF_ERROR(require_static_f32("Scale", node.input(1)));
  if (bias) KILN_RETURN_IF_ERROR(require_static_f32("Bias", bias));
  const ir::Value* y = node.output(0);
  if (y->dtype() != DataType::kFloat32 && y->dtype() != DataType::kUndefined)
    return unsupported("node %s: Y dtype %s: only float32", label, dtype_name(y->dtype()));
  p.x_dims = node.input(0)->shape().static_dims();
  const int rank = static_cast<int>(p.x_dims.size());
  if (rank < 1) return unsupported("node %s: X is a scalar", label);
  const int64_t axis_attr = node.attr_int("axis", -1);
  if (axis_attr < -rank || axis_attr >= rank)
    return unsupported("node %s: axis out of range", label);
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  const Dims norm(p.x_dims.begin() + axis, p.x_dims.end());
  p.n = num_elements(norm);
  if (p.n <= 0 || num_elements(p.x_dims) <= 0) return unsupported("node %s: empty X", label);
  p.rows = num_elements(p.x_dims) / p.n;
  p.scale_dims = node.input(1)->shape().static_dims();
  if (!one_per_element(p.scale_dims, norm))
    return unsupported("node %s: Scale %s is not one value per normalised element", label,
                       dims_to_string(p.scale_dims).c_str());
  if (bias) {
    p.has_bias = true;
    p.bias_dims = bias->shape().static_dims();
    if (!one_per_element(p.bias_dims, norm))
      return unsupported("node %s: Bias %s is not one value per normalised element", label,
                         dims_to_string(p.bias_dims).c_str());
  }
  const Shape& ys = y->shape();
  if (ys.has_rank() && ys.is_static() && ys.static_dims() != p.x_dims)
    return unsupported("node %s: declared output %s differs from X", label, ys.to_string().c_str());
  p.epsilon = node.attr_float("epsilon", 1e-5f);
  return p;
}

using RowsFn = void (*)(const Job&, int64_t, int64_t);

class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(LayerNormPlan plan, const ops::KernelFn* reference)
      : plan_(std::move(plan)), reference_(reference) {
    fn_ = KILN_SIMD_SELECT(kiln::kernels::layernorm_simd, layernorm_rows);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  bool inputs_as_prepared(const ops::KernelContext& ctx) const;

  LayerNormPlan plan_;
  const ops::KernelFn* reference_;
  RowsFn fn_ = nullptr;
  std::string implementation_;
};

bool LayerNormKernel::inputs_as_prepared(const ops::KernelContext& ctx) const {
  auto matches = [&](int i, const Dims& dims) {
    const Tensor* t = ctx.input(i);
    return t && t->dtype() == DataType::kFloat32 && t->dims() == dims;
  };
  if (!matches(0, plan_.x_dims) || !matches(1, plan_.scale_dims)) return false;
  if (plan_.has_bias) return matches(2, plan_.bias_dims);
  return ctx.num_inputs() < 3 || ctx.input(2) == nullptr;
}

// What the parallel tasks share; the closure captures only its address (no allocation in
// the std::function).
struct RunState {
  Job job;
  RowsFn fn;
};

Status LayerNormKernel::run(ops::KernelContext& ctx) const {
  if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan_.x_dims));
  RunState st;
  st.fn = fn_;
  st.job.x = ctx.input(0)->data<float>();
  st.job.scale = ctx.input(1)->data<float>();
  st.job.bias = plan_.has_bias ? ctx.input(2)->data<float>() : nullptr;
  st.job.y = y->data<float>();
  st.job.n = plan_.n;
  st.job.epsilon = plan_.epsilon;
  // Chunks of at least ~16K elements: below that a thread's start-up costs more than the rows.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / plan_.n);
  const RunState* s = &st;
  parallel_for(0, plan_.rows, grain, [s](int64_t r0, int64_t r1) { s->fn(s->job, r0, r1); });
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_layernorm(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(LayerNormPlan plan, plan_layernorm(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", plan.label.c_str());
  return std::unique_ptr<Kernel>(new LayerNormKernel(std::move(plan), &schema->kernel_fn()));
}

Status layernorm_applicable(const ir::Node& node) { return plan_layernorm(node).status(); }

KernelFactory layernorm_factory(const char* domain, const char* op_type) {
  return KernelFactory{.domain = domain,
                       .op_type = op_type,
                       .device = DeviceKind::kCpu,
                       .priority = 100,
                       .name = "simd",
                       .applicable = layernorm_applicable,
                       .prepare = prepare_layernorm};
}

}  // namespace

KILN_REGISTER_KERNEL(layernorm_factory(ops::kKilnDomain, "LayerNorm"));
KILN_REGISTER_KERNEL(layernorm_factory(ops::kOnnxDomain, "LayerNormalization"));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
