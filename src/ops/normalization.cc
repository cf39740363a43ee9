// Normalization (ONNX opsets 1..23): BatchNormalization (inference at every opset, the
// opset < 9 `spatial` attribute, training_mode from 14), InstanceNormalization,
// LayerNormalization (17, with its Mean/InvStdDev outputs), GroupNormalization (18, 21)
// and LRN. Statistics accumulate in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

Status check_same_dtype(const ir::Node& node, const Tensor& x, const Tensor* t, const char* what) {
  if (t && t->dtype() != x.dtype())
    return invalid_argument("node %s: %s has dtype %s, input has %s", node.label().c_str(), what,
                            dtype_name(t->dtype()), dtype_name(x.dtype()));
  return ok_status();
}

Status check_elements(const ir::Node& node, const Tensor* t, int64_t expected, const char* what) {
  if (t && t->num_elements() != expected)
    return invalid_argument("node %s: %s has shape %s, expected %lld elements", node.label().c_str(), what,
                            dims_to_string(t->dims()).c_str(), (long long)expected);
  return ok_status();
}

// Mean and (population) variance of n values.
template <typename T>
void moments(const T* x, int64_t n, double* mean, double* var) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const double m = n > 0 ? s / static_cast<double>(n) : 0.0;
  double v = 0;
  for (int64_t i = 0; i < n; ++i) v += (x[i] - m) * (x[i] - m);
  *mean = m;
  *var = n > 0 ? v / static_cast<double>(n) : 0.0;
}

// ---- BatchNormalization --------------------------------------------------------------

Status infer_batch_norm(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  ctx.set_output(0, xt.dtype, xt.shape);
  const ir::TensorType& mt = ctx.input_type(3);
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, mt.dtype, mt.shape);
  return ok_status();
}

Status batch_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* params[4] = {ctx.input(1), ctx.input(2), ctx.input(3), ctx.input(4)};
  const char* names[4] = {"scale", "B", "input_mean", "input_var"};
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 2));
  const bool training = node.opset() >= 14 && node.attr_int("training_mode", 0) != 0;
  if (node.opset() < 14 && ctx.num_outputs() > 1)
    return unsupported("node %s: training outputs of BatchNormalization before opset 14 are not supported",
                       node.label().c_str());
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t inner = c > 0 && n > 0 ? x.num_elements() / (n * c) : 0;
  // Before opset 9, spatial=0 gives per-activation parameters of shape C x D1 x ... x Dn.
  const bool per_activation = node.opset() < 9 && node.attr_int("spatial", 1) == 0;
  const int64_t param_size = per_activation ? c * inner : c;
  for (int i = 0; i < 4; ++i) {
    KILN_RETURN_IF_ERROR(check_same_dtype(node, x, params[i], names[i]));
    KILN_RETURN_IF_ERROR(check_elements(node, params[i], param_size, names[i]));
  }
  const double eps = node.attr_float("epsilon", 1e-5f);
  const double momentum = node.attr_float("momentum", 0.9f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  Tensor* running_mean = nullptr;
  Tensor* running_var = nullptr;
  if (training && ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(running_mean, ctx.allocate_output(1, x.dtype(), params[2]->dims()));
  }
  if (training && ctx.num_outputs() > 2) {
    KILN_ASSIGN_OR_RETURN(running_var, ctx.allocate_output(2, x.dtype(), params[3]->dims()));
  }
  if (x.num_elements() == 0) return ok_status();
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* scale = params[0]->data<T>();
    const T* bias = params[1]->data<T>();
    const T* mean = params[2]->data<T>();
    const T* var = params[3]->data<T>();
    T* py = y->data<T>();
    // Batch statistics per channel (training) or the running ones (inference).
    std::vector<double> m(static_cast<size_t>(param_size)), v(static_cast<size_t>(param_size));
    if (training) {
      for (int64_t ch = 0; ch < c; ++ch) {
        double s = 0, ss = 0;
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < inner; ++i) s += px[(b * c + ch) * inner + i];
        const double mu = s / static_cast<double>(n * inner);
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < inner; ++i) {
            const double d = px[(b * c + ch) * inner + i] - mu;
            ss += d * d;
          }
        m[ch] = mu;
        v[ch] = ss / static_cast<double>(n * inner);
        if (running_mean) running_mean->data<T>()[ch] = static_cast<T>(mean[ch] * momentum + mu * (1 - momentum));
        if (running_var) running_var->data<T>()[ch] = static_cast<T>(var[ch] * momentum + v[ch] * (1 - momentum));
      }
    } else {
      for (int64_t i = 0; i < param_size; ++i) {
        m[i] = mean[i];
        v[i] = var[i];
      }
    }
    parallel_for(0, n * c, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t ch = r % c;
        const T* src = px + r * inner;
        T* dst = py + r * inner;
        if (!per_activation) {
          // One channel per row: its factor once (the same double arithmetic as per element).
          const double a = static_cast<double>(scale[ch]) / std::sqrt(v[ch] + eps);
          const double mu = m[ch], b = bias[ch];
          for (int64_t i = 0; i < inner; ++i) dst[i] = static_cast<T>((src[i] - mu) * a + b);
          continue;
        }
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t p = ch * inner + i;
          const double a = static_cast<double>(scale[p]) / std::sqrt(v[p] + eps);
          dst[i] = static_cast<T>((src[i] - m[p]) * a + bias[p]);
        }
      }
    });
  });
  return ok_status();
}

// ---- InstanceNormalization -----------------------------------------------------------

Status instance_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* scale = ctx.input(1);
  const Tensor* bias = ctx.input(2);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 3));
  const int64_t n = x.dim(0), c = x.dim(1);
  for (auto [t, what] : {std::pair{scale, "scale"}, std::pair{bias, "B"}}) {
    KILN_RETURN_IF_ERROR(check_same_dtype(node, x, t, what));
    KILN_RETURN_IF_ERROR(check_elements(node, t, c, what));
  }
  const double eps = node.attr_float("epsilon", 1e-5f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  if (x.num_elements() == 0) return ok_status();
  const int64_t inner = x.num_elements() / (n * c);
  dispatch_float(x.dtype(), [&]<typename T>() {
    parallel_for(0, n * c, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* src = x.data<T>() + r * inner;
        T* dst = y->data<T>() + r * inner;
        double mean, var;
        moments(src, inner, &mean, &var);
        const double a = scale->data<T>()[r % c] / std::sqrt(var + eps), b = bias->data<T>()[r % c];
        for (int64_t i = 0; i < inner; ++i) dst[i] = static_cast<T>((src[i] - mean) * a + b);
      }
    });
  });
  return ok_status();
}

// ---- LayerNormalization --------------------------------------------------------------

Status infer_layer_norm(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  ctx.set_output(0, xt.dtype, xt.shape);
  if (ctx.num_outputs() < 2) return ok_status();
  Shape stat = Shape::unknown_rank();
  if (xt.shape.has_rank()) {
    KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", -1), xt.shape.rank()));
    std::vector<Dim> dims(xt.shape.dims().begin(), xt.shape.dims().begin() + axis);
    dims.resize(static_cast<size_t>(xt.shape.rank()), Dim(1));
    stat = Shape(dims);
  }
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, xt.dtype, stat);
  return ok_status();
}

Status layer_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* scale = ctx.input(1);
  const Tensor* bias = ctx.input(2);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 1));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -1), x.rank()));
  const std::vector<int64_t> norm_dims(x.dims().begin() + axis, x.dims().end());
  // Scale and B broadcast (right-aligned) to the normalized dims X[axis:].
  std::vector<int64_t> scale_strides, bias_strides;
  for (auto [t, what, strides] : {std::tuple{scale, "Scale", &scale_strides}, std::tuple{bias, "B", &bias_strides}}) {
    if (!t) continue;
    KILN_RETURN_IF_ERROR(check_same_dtype(node, x, t, what));
    Expected<std::vector<int64_t>> bd = broadcast_dims(node, norm_dims, t->dims());
    if (!bd.ok() || *bd != norm_dims)
      return invalid_argument("node %s: %s %s does not broadcast to the normalized shape %s", node.label().c_str(),
                              what, dims_to_string(t->dims()).c_str(), dims_to_string(norm_dims).c_str());
    *strides = broadcast_strides(t->dims(), norm_dims);
  }
  const double eps = node.attr_float("epsilon", 1e-5f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  std::vector<int64_t> stat_dims(x.dims().begin(), x.dims().begin() + axis);
  stat_dims.resize(static_cast<size_t>(x.rank()), 1);
  Tensor* mean_out = nullptr;
  Tensor* inv_out = nullptr;
  if (ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(mean_out, ctx.allocate_output(1, x.dtype(), stat_dims));
  }
  if (ctx.num_outputs() > 2) {
    KILN_ASSIGN_OR_RETURN(inv_out, ctx.allocate_output(2, x.dtype(), stat_dims));
  }
  const int64_t inner = num_elements(norm_dims);
  if (x.num_elements() == 0 || inner == 0) return ok_status();
  const int64_t rows = x.num_elements() / inner;
  // Flat offset into Scale/B of each normalized position.
  std::vector<int64_t> scale_off(static_cast<size_t>(inner)), bias_off(static_cast<size_t>(inner));
  {
    const std::vector<int64_t> strides[2] = {scale ? scale_strides : std::vector<int64_t>(norm_dims.size(), 0),
                                             bias ? bias_strides : std::vector<int64_t>(norm_dims.size(), 0)};
    for_each_broadcast(norm_dims, strides, [&](int64_t i, const int64_t* off) {
      scale_off[static_cast<size_t>(i)] = off[0];
      bias_off[static_cast<size_t>(i)] = off[1];
    });
  }
  dispatch_float(x.dtype(), [&]<typename T>() {
    parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* src = x.data<T>() + r * inner;
        T* dst = y->data<T>() + r * inner;
        double mean, var;
        moments(src, inner, &mean, &var);
        const double inv = 1.0 / std::sqrt(var + eps);
        for (int64_t i = 0; i < inner; ++i) {
          double v = (src[i] - mean) * inv;
          if (scale) v *= scale->data<T>()[scale_off[i]];
          if (bias) v += bias->data<T>()[bias_off[i]];
          dst[i] = static_cast<T>(v);
        }
        if (mean_out) mean_out->data<T>()[r] = static_cast<T>(mean);
        if (inv_out) inv_out->data<T>()[r] = static_cast<T>(inv);
      }
    });
  });
  return ok_status();
}

// ---- GroupNormalization --------------------------------------------------------------

Status group_norm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* scale = ctx.input(1);
  const Tensor* bias = ctx.input(2);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 2));
  const int64_t groups = node.attr_int("num_groups", 0);
  const int64_t n = x.dim(0), c = x.dim(1);
  if (groups < 1 || c % groups != 0)
    return invalid_argument("node %s: num_groups %lld must be >= 1 and divide the %lld channels",
                            node.label().c_str(), (long long)groups, (long long)c);
  // Opset 18 had one scale/bias per group; opset 21 made them per channel.
  const bool per_channel = node.opset() >= 21;
  for (auto [t, what] : {std::pair{scale, "scale"}, std::pair{bias, "bias"}}) {
    KILN_RETURN_IF_ERROR(check_same_dtype(node, x, t, what));
    KILN_RETURN_IF_ERROR(check_elements(node, t, per_channel ? c : groups, what));
  }
  const double eps = node.attr_float("epsilon", 1e-5f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  if (x.num_elements() == 0) return ok_status();
  const int64_t spatial = x.num_elements() / (n * c);
  const int64_t channels_per_group = c / groups;
  const int64_t group_size = channels_per_group * spatial;
  dispatch_float(x.dtype(), [&]<typename T>() {
    parallel_for(0, n * groups, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* src = x.data<T>() + r * group_size;
        T* dst = y->data<T>() + r * group_size;
        double mean, var;
        moments(src, group_size, &mean, &var);
        const double inv = 1.0 / std::sqrt(var + eps);
        const int64_t g = r % groups;
        for (int64_t cc = 0; cc < channels_per_group; ++cc) {
          const int64_t p = per_channel ? g * channels_per_group + cc : g;
          const double a = scale->data<T>()[p] * inv, b = bias->data<T>()[p];
          for (int64_t i = cc * spatial; i < (cc + 1) * spatial; ++i) dst[i] = static_cast<T>((src[i] - mean) * a + b);
        }
      }
    });
  });
  return ok_status();
}

// ---- LRN -------------------------------------------------------------------------------

Status lrn_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 2));
  const int64_t size = node.attr_int("size", 0);
  if (size < 1) return invalid_argument("node %s: size must be >= 1, got %lld", node.label().c_str(), (long long)size);
  const double alpha = node.attr_float("alpha", 1e-4f), beta = node.attr_float("beta", 0.75f),
               bias = node.attr_float("bias", 1.0f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  if (x.num_elements() == 0) return ok_status();
  const int64_t n = x.dim(0), c = x.dim(1), inner = x.num_elements() / (n * c);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  dispatch_float(x.dtype(), [&]<typename T>() {
    parallel_for(0, n * c, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / c, ch = r % c;
        const int64_t lo = std::max<int64_t>(0, ch - before), hi = std::min(c - 1, ch + after);
        for (int64_t i = 0; i < inner; ++i) {
          double sq = 0;
          for (int64_t k = lo; k <= hi; ++k) {
            const double v = x.data<T>()[(b * c + k) * inner + i];
            sq += v * v;
          }
          const T v = x.data<T>()[r * inner + i];
          y->data<T>()[r * inner + i] = static_cast<T>(v / std::pow(bias + alpha / size * sq, beta));
        }
      }
    });
  });
  return ok_status();
}

}  // namespace

// Opsets 1-5 add only consumed_inputs (a memory hint); is_test (1-6) changes nothing when
// only Y is asked for, which is all Kiln computes before opset 14.
KILN_REGISTER_OP(OpSchema("BatchNormalization")
                     .since(1)
                     .inputs(5, 5)
                     .outputs(1, 5)
                     .attr("epsilon", AttrKind::kFloat)
                     .attr("momentum", AttrKind::kFloat)
                     .attr("spatial", AttrKind::kInt)
                     .attr("is_test", AttrKind::kInt)
                     .attr("training_mode", AttrKind::kInt)
                     .infer(infer_batch_norm)
                     .kernel(with_half_as_float(batch_norm_kernel)));
KILN_REGISTER_OP(OpSchema("InstanceNormalization")
                     .since(1)
                     .inputs(3, 3)
                     .outputs(1, 1)
                     .attr("epsilon", AttrKind::kFloat)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(instance_norm_kernel)));
KILN_REGISTER_OP(OpSchema("LayerNormalization")
                     .since(17)
                     .inputs(2, 3)
                     .outputs(1, 3)
                     .attr("axis", AttrKind::kInt)
                     .attr("epsilon", AttrKind::kFloat)
                     .attr("stash_type", AttrKind::kInt)
                     .infer(infer_layer_norm)
                     .kernel(with_half_as_float(layer_norm_kernel)));
KILN_REGISTER_OP(OpSchema("GroupNormalization")
                     .since(18)
                     .inputs(3, 3)
                     .outputs(1, 1)
                     .required_attr("num_groups", AttrKind::kInt)
                     .attr("epsilon", AttrKind::kFloat)
                     .attr("stash_type", AttrKind::kInt)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(group_norm_kernel)));
KILN_REGISTER_OP(OpSchema("LRN")
                     .since(1)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("size", AttrKind::kInt)
                     .attr("alpha", AttrKind::kFloat)
                     .attr("beta", AttrKind::kFloat)
                     .attr("bias", AttrKind::kFloat)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(lrn_kernel)));

}  // namespace kiln::ops
