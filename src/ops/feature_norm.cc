// Normalizations by a statistic of the features: RMSNormalization (opset 23),
// LpNormalization (1, 22) and MeanVarianceNormalization (9, 13). Statistics accumulate in
// double; float16/bfloat16 run through float32.
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// ---- RMSNormalization ------------------------------------------------------------------------

Status rms_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* scale = ctx.input(1);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 1));
  if (!scale) return invalid_argument("node %s: scale is required", node.label().c_str());
  if (scale->dtype() != x.dtype())
    return invalid_argument("node %s: scale has dtype %s, input has %s", node.label().c_str(),
                            dtype_name(scale->dtype()), dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -1), x.rank()));
  const std::vector<int64_t> norm_dims(x.dims().begin() + axis, x.dims().end());
  Expected<std::vector<int64_t>> bd = broadcast_dims(node, norm_dims, scale->dims());
  if (!bd.ok() || *bd != norm_dims)
    return invalid_argument("node %s: scale %s does not broadcast to the normalized shape %s", node.label().c_str(),
                            dims_to_string(scale->dims()).c_str(), dims_to_string(norm_dims).c_str());
  const double eps = node.attr_float("epsilon", 1e-5f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  const int64_t inner = num_elements(norm_dims);
  if (x.num_elements() == 0 || inner == 0) return ok_status();
  const int64_t rows = x.num_elements() / inner;
  std::vector<int64_t> scale_off(static_cast<size_t>(inner));
  const std::vector<int64_t> strides[1] = {broadcast_strides(scale->dims(), norm_dims)};
  for_each_broadcast(norm_dims, strides, [&](int64_t i, const int64_t* off) { scale_off[static_cast<size_t>(i)] = off[0]; });
  dispatch_float(x.dtype(), [&]<typename T>() {
    parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* src = x.data<T>() + r * inner;
        T* dst = y->data<T>() + r * inner;
        double ss = 0;
        for (int64_t i = 0; i < inner; ++i) ss += static_cast<double>(src[i]) * src[i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(inner) + eps);
        for (int64_t i = 0; i < inner; ++i)
          dst[i] = static_cast<T>(src[i] * inv * static_cast<double>(scale->data<T>()[scale_off[static_cast<size_t>(i)]]));
      }
    });
  });
  return ok_status();
}

// ---- LpNormalization -------------------------------------------------------------------------

Status lp_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input", 1));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -1), x.rank()));
  const int64_t p = node.attr_int("p", 2);
  if (p != 1 && p != 2)
    return invalid_argument("node %s: p must be 1 or 2, got %lld", node.label().c_str(), (long long)p);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  const int64_t n = x.dim(axis);
  const int64_t inner = num_elements(std::vector<int64_t>(x.dims().begin() + axis + 1, x.dims().end()));
  const int64_t outer = num_elements(std::vector<int64_t>(x.dims().begin(), x.dims().begin() + axis));
  dispatch_float(x.dtype(), [&]<typename T>() {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        const T* src = x.data<T>() + o * n * inner + in;
        T* dst = y->data<T>() + o * n * inner + in;
        double norm = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = src[i * inner];
          norm += p == 1 ? std::abs(v) : v * v;
        }
        if (p == 2) norm = std::sqrt(norm);
        // A zero vector stays zero rather than turning into NaN.
        for (int64_t i = 0; i < n; ++i) dst[i * inner] = norm == 0 ? T(0) : static_cast<T>(src[i * inner] / norm);
      }
  });
  return ok_status();
}

// ---- MeanVarianceNormalization ---------------------------------------------------------------

Status mvn_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 1));
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
  for (int64_t a : node.attr_ints("axes", {0, 2, 3})) {
    KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, a, x.rank()));
    if (reduced[static_cast<size_t>(axis)])
      return invalid_argument("node %s: axis %lld is repeated", node.label().c_str(), (long long)a);
    reduced[static_cast<size_t>(axis)] = true;
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  if (x.num_elements() == 0) return ok_status();
  // Group of each element: its index with the reduced axes dropped.
  const std::vector<int64_t>& dims = x.dims();
  std::vector<int64_t> kept_dims;
  for (size_t i = 0; i < dims.size(); ++i) kept_dims.push_back(reduced[i] ? 1 : dims[i]);
  const int64_t groups = num_elements(kept_dims);
  const std::vector<int64_t> strides[1] = {broadcast_strides(kept_dims, dims)};
  std::vector<int64_t> group_of(static_cast<size_t>(x.num_elements()));
  for_each_broadcast(dims, strides, [&](int64_t i, const int64_t* off) { group_of[static_cast<size_t>(i)] = off[0]; });
  const double per_group = static_cast<double>(x.num_elements() / groups);
  dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<double> mean(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
    const T* src = x.data<T>();
    for (int64_t i = 0; i < x.num_elements(); ++i) mean[static_cast<size_t>(group_of[static_cast<size_t>(i)])] += src[i];
    for (double& m : mean) m /= per_group;
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const double dlt = src[i] - mean[static_cast<size_t>(group_of[static_cast<size_t>(i)])];
      sq[static_cast<size_t>(group_of[static_cast<size_t>(i)])] += dlt * dlt;
    }
    // ONNX's function body adds 1e-9 to the standard deviation (not to the variance).
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const size_t g = static_cast<size_t>(group_of[static_cast<size_t>(i)]);
      y->data<T>()[i] = static_cast<T>((src[i] - mean[g]) / (std::sqrt(sq[g] / per_group) + 1e-9));
    }
  });
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("RMSNormalization")
                     .since(23)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("axis", AttrKind::kInt)
                     .attr("epsilon", AttrKind::kFloat)
                     .attr("stash_type", AttrKind::kInt)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(rms_norm_kernel)));
KILN_REGISTER_OP(OpSchema("LpNormalization")
                     .since(1)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("axis", AttrKind::kInt)
                     .attr("p", AttrKind::kInt)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(lp_norm_kernel)));
KILN_REGISTER_OP(OpSchema("MeanVarianceNormalization")
                     .since(9)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("axes", AttrKind::kInts)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(mvn_kernel)));

}  // namespace kiln::ops
