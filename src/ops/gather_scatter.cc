// Indexed reads and writes: Gather, GatherElements, GatherND, ScatterND, ScatterElements
// (and the deprecated Scatter), OneHot. Negative indices count from the end of their
// axis; any index out of range is an error naming the node, the index and the extent.
#include <algorithm>
#include <cmath>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// Index in [-dim, dim) made non-negative; error otherwise.
inline Status fix_index(const ir::Node& node, int64_t& i, int64_t dim, int axis) {
  if (i < -dim || i >= dim)
    return out_of_range("node %s: index %lld is out of range for axis %d of extent %lld", node.label().c_str(),
                        (long long)i, axis, (long long)dim);
  if (i < 0) i += dim;
  return ok_status();
}

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < d.size(); ++i) p *= d[i];
  return p;
}

// ---- Gather ------------------------------------------------------------------------------------

Status infer_gather(InferContext& ctx) {
  const ir::TensorType& data = ctx.input_type(0);
  const ir::TensorType& idx = ctx.input_type(1);
  if (!data.shape.has_rank() || !idx.shape.has_rank()) {
    ctx.set_output(0, data.dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0), data.shape.rank()));
  std::vector<Dim> out;
  for (int i = 0; i < axis; ++i) out.push_back(data.shape[i]);
  for (const Dim& d : idx.shape.dims()) out.push_back(d);
  for (int i = axis + 1; i < data.shape.rank(); ++i) out.push_back(data.shape[i]);
  ctx.set_output(0, data.dtype, Shape(std::move(out)));
  return ok_status();
}

Status gather_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& data = *ctx.input(0);
  const Tensor& indices = *ctx.input(1);
  if (data.rank() < 1) return invalid_argument("node %s: data must have rank >= 1", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 0), data.rank()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, index_values(node, indices, "indices"));
  const int64_t dim = data.dim(axis);
  for (int64_t& i : idx) KILN_RETURN_IF_ERROR(fix_index(node, i, dim, axis));
  std::vector<int64_t> out(data.dims().begin(), data.dims().begin() + axis);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), data.dims().begin() + axis + 1, data.dims().end());
  const int64_t outer = product(data.dims(), 0, static_cast<size_t>(axis));
  const int64_t inner = product(data.dims(), static_cast<size_t>(axis) + 1, data.dims().size());
  const int64_t n = static_cast<int64_t>(idx.size());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, data.dtype(), out));
  return dispatch_copy_type(node, data.dtype(), [&]<typename T>() {
    const T* src = data.data<T>();
    T* dst = y->data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j, dst += inner)
        copy_run(dst, src + (o * dim + idx[static_cast<size_t>(j)]) * inner, inner);
  });
}

// ---- GatherElements, ScatterElements ------------------------------------------------------------

// For each element of an `indices` tensor, the flat offset into `data` it addresses
// (its own coordinates, with the axis coordinate replaced by the index value).
Expected<std::vector<int64_t>> element_offsets(const ir::Node& node, const std::vector<int64_t>& data_dims,
                                               const Tensor& indices, int axis) {
  const int rank = static_cast<int>(data_dims.size());
  if (indices.rank() != rank)
    return invalid_argument("node %s: indices have rank %d, data rank %d", node.label().c_str(), indices.rank(),
                            rank);
  for (int d = 0; d < rank; ++d)
    if (d != axis && indices.dim(d) > data_dims[static_cast<size_t>(d)])
      return invalid_argument("node %s: indices shape %s exceeds data shape %s on axis %d", node.label().c_str(),
                              dims_to_string(indices.dims()).c_str(), dims_to_string(data_dims).c_str(), d);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, index_values(node, indices, "indices"));
  const std::vector<int64_t> ds = contiguous_strides(data_dims);
  const int64_t dim = data_dims[static_cast<size_t>(axis)];
  std::vector<int64_t> coord(static_cast<size_t>(rank), 0);
  int64_t base = 0;  // offset of coord with the axis coordinate set to 0
  for (size_t e = 0; e < idx.size(); ++e) {
    KILN_RETURN_IF_ERROR(fix_index(node, idx[e], dim, axis));
    idx[e] = base + idx[e] * ds[static_cast<size_t>(axis)];
    for (int d = rank - 1; d >= 0; --d) {
      const size_t du = static_cast<size_t>(d);
      const int64_t step = d == axis ? 0 : ds[du];
      if (++coord[du] < indices.dim(d)) {
        base += step;
        break;
      }
      base -= step * (indices.dim(d) - 1);
      coord[du] = 0;
    }
  }
  return idx;
}

Status infer_gather_elements(InferContext& ctx) {
  ctx.set_output(0, ctx.input_type(0).dtype, ctx.input_type(1).shape);
  return ok_status();
}

Status gather_elements_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& data = *ctx.input(0);
  const Tensor& indices = *ctx.input(1);
  if (data.rank() < 1) return invalid_argument("node %s: data must have rank >= 1", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 0), data.rank()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> off, element_offsets(node, data.dims(), indices, axis));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, data.dtype(), indices.dims()));
  return dispatch_copy_type(node, data.dtype(), [&]<typename T>() {
    for (size_t e = 0; e < off.size(); ++e) y->data<T>()[e] = data.data<T>()[off[e]];
  });
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Expected<Reduction> reduction_of(const ir::Node& node) {
  std::string r = node.attr_string("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add" && node.opset() >= 16) return Reduction::kAdd;
  if (r == "mul" && node.opset() >= 16) return Reduction::kMul;
  if (r == "max" && node.opset() >= 18) return Reduction::kMax;
  if (r == "min" && node.opset() >= 18) return Reduction::kMin;
  return invalid_argument("node %s: reduction '%s' is not supported at opset %lld", node.label().c_str(),
                          r.c_str(), (long long)node.opset());
}

template <typename T>
inline T combine(T a, T b, Reduction r) {
  switch (r) {
    case Reduction::kAdd: return static_cast<T>(a + b);
    case Reduction::kMul: return static_cast<T>(a * b);
    case Reduction::kMax: return std::max(a, b);
    case Reduction::kMin: return std::min(a, b);
    case Reduction::kNone: break;
  }
  return b;
}

// A write of `len` consecutive update elements at `src` into the output at `dst`.
struct Run {
  int64_t dst, src, len;
};

// Applies the runs in order (later writes win; reductions accumulate).
Status apply_runs(const ir::Node& node, Tensor& out, const Tensor& updates, Reduction r,
                  const std::vector<Run>& runs) {
  if (r == Reduction::kNone) {
    return dispatch_copy_type(node, out.dtype(), [&]<typename T>() {
      for (const Run& run : runs) copy_run(out.data<T>() + run.dst, updates.data<T>() + run.src, run.len);
    });
  }
  if (out.dtype() == DataType::kFloat16 || out.dtype() == DataType::kBFloat16) {
    const bool h = out.dtype() == DataType::kFloat16;
    uint16_t* o = out.data<uint16_t>();
    const uint16_t* u = updates.data<uint16_t>();
    for (const Run& run : runs)
      for (int64_t k = 0; k < run.len; ++k) {
        float a = h ? fp16_to_float(o[run.dst + k]) : bf16_to_float(o[run.dst + k]);
        float b = h ? fp16_to_float(u[run.src + k]) : bf16_to_float(u[run.src + k]);
        float c = combine(a, b, r);
        o[run.dst + k] = h ? float_to_fp16(c) : float_to_bf16(c);
      }
    return ok_status();
  }
  if (out.dtype() == DataType::kBool || out.dtype() == DataType::kString ||
      !dispatch_numeric(out.dtype(), [&]<typename T>() {
        T* o = out.data<T>();
        const T* u = updates.data<T>();
        for (const Run& run : runs)
          for (int64_t k = 0; k < run.len; ++k) o[run.dst + k] = combine(o[run.dst + k], u[run.src + k], r);
      }))
    return unsupported("node %s: reduction on dtype %s is not supported", node.label().c_str(),
                       dtype_name(out.dtype()));
  return ok_status();
}

Status scatter_elements_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& data = *ctx.input(0);
  const Tensor& indices = *ctx.input(1);
  const Tensor& updates = *ctx.input(2);
  if (data.rank() < 1) return invalid_argument("node %s: data must have rank >= 1", node.label().c_str());
  if (updates.dtype() != data.dtype() || updates.dims() != indices.dims())
    return invalid_argument("node %s: updates %s must match indices shape %s and data dtype %s",
                            node.label().c_str(), updates.description().c_str(),
                            dims_to_string(indices.dims()).c_str(), dtype_name(data.dtype()));
  KILN_ASSIGN_OR_RETURN(Reduction r, reduction_of(node));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 0), data.rank()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> off, element_offsets(node, data.dims(), indices, axis));
  Tensor out = data.clone();
  std::vector<Run> runs(off.size());
  for (size_t e = 0; e < off.size(); ++e) runs[e] = Run{off[e], static_cast<int64_t>(e), 1};
  KILN_RETURN_IF_ERROR(apply_runs(node, out, updates, r, runs));
  ctx.set_output(0, std::move(out));
  return ok_status();
}

// ---- GatherND, ScatterND --------------------------------------------------------------------

Status infer_gather_nd(InferContext& ctx) {
  const ir::TensorType& data = ctx.input_type(0);
  const ir::TensorType& idx = ctx.input_type(1);
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  if (!data.shape.has_rank() || !idx.shape.has_rank() || idx.shape.rank() < 1 ||
      !idx.shape[idx.shape.rank() - 1].is_static()) {
    ctx.set_output(0, data.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const int64_t k = idx.shape[idx.shape.rank() - 1].value;
  if (b < 0 || b >= std::min<int64_t>(data.shape.rank(), idx.shape.rank()) || k < 1 || b + k > data.shape.rank())
    return invalid_argument("node %s: indices %s (batch_dims %lld) do not fit data %s", ctx.node().label().c_str(),
                            idx.shape.to_string().c_str(), (long long)b, data.shape.to_string().c_str());
  std::vector<Dim> out(idx.shape.dims().begin(), idx.shape.dims().end() - 1);
  for (int i = static_cast<int>(b + k); i < data.shape.rank(); ++i) out.push_back(data.shape[i]);
  ctx.set_output(0, data.dtype, Shape(std::move(out)));
  return ok_status();
}

// Validates GatherND/ScatterND geometry and returns, per index tuple, the flat offset
// (in elements) of the addressed slice of `data`, plus the slice size.
struct NdPlan {
  std::vector<int64_t> offsets;
  int64_t slice = 1;
};

Expected<NdPlan> nd_plan(const ir::Node& node, const std::vector<int64_t>& data_dims, const Tensor& indices,
                         int64_t b) {
  const int r = static_cast<int>(data_dims.size());
  const int q = indices.rank();
  if (q < 1 || r < 1) return invalid_argument("node %s: data and indices must have rank >= 1", node.label().c_str());
  const int64_t k = indices.dim(q - 1);
  if (b < 0 || b >= std::min(r, q) || k < 1 || b + k > r)
    return invalid_argument("node %s: indices %s (batch_dims %lld) do not fit data %s", node.label().c_str(),
                            dims_to_string(indices.dims()).c_str(), (long long)b, dims_to_string(data_dims).c_str());
  for (int i = 0; i < b; ++i)
    if (indices.dim(i) != data_dims[static_cast<size_t>(i)])
      return invalid_argument("node %s: batch dim %d of indices %s differs from data %s", node.label().c_str(), i,
                              dims_to_string(indices.dims()).c_str(), dims_to_string(data_dims).c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, index_values(node, indices, "indices"));
  NdPlan plan;
  plan.slice = product(data_dims, static_cast<size_t>(b + k), data_dims.size());
  const int64_t batch_stride = product(data_dims, static_cast<size_t>(b), data_dims.size());
  const int64_t per_batch = product(indices.dims(), static_cast<size_t>(b), static_cast<size_t>(q - 1));
  const std::vector<int64_t> ds = contiguous_strides(data_dims);
  const int64_t tuples = static_cast<int64_t>(idx.size()) / k;
  plan.offsets.resize(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (per_batch > 0 ? t / per_batch : 0) * batch_stride;
    for (int64_t j = 0; j < k; ++j) {
      int64_t v = idx[static_cast<size_t>(t * k + j)];
      const int axis = static_cast<int>(b + j);
      KILN_RETURN_IF_ERROR(fix_index(node, v, data_dims[static_cast<size_t>(axis)], axis));
      off += v * ds[static_cast<size_t>(axis)];
    }
    plan.offsets[static_cast<size_t>(t)] = off;
  }
  return plan;
}

Status gather_nd_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& data = *ctx.input(0);
  const Tensor& indices = *ctx.input(1);
  const int64_t b = node.attr_int("batch_dims", 0);
  KILN_ASSIGN_OR_RETURN(NdPlan plan, nd_plan(node, data.dims(), indices, b));
  std::vector<int64_t> out(indices.dims().begin(), indices.dims().end() - 1);
  out.insert(out.end(), data.dims().begin() + b + indices.dim(indices.rank() - 1), data.dims().end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, data.dtype(), out));
  return dispatch_copy_type(node, data.dtype(), [&]<typename T>() {
    for (size_t t = 0; t < plan.offsets.size(); ++t)
      copy_run(y->data<T>() + static_cast<int64_t>(t) * plan.slice, data.data<T>() + plan.offsets[t], plan.slice);
  });
}

Status scatter_nd_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& data = *ctx.input(0);
  const Tensor& indices = *ctx.input(1);
  const Tensor& updates = *ctx.input(2);
  KILN_ASSIGN_OR_RETURN(Reduction r, reduction_of(node));
  KILN_ASSIGN_OR_RETURN(NdPlan plan, nd_plan(node, data.dims(), indices, 0));
  std::vector<int64_t> expect(indices.dims().begin(), indices.dims().end() - 1);
  expect.insert(expect.end(), data.dims().begin() + indices.dim(indices.rank() - 1), data.dims().end());
  if (updates.dtype() != data.dtype() || updates.dims() != expect)
    return invalid_argument("node %s: updates are %s, expected %s%s", node.label().c_str(),
                            updates.description().c_str(), dtype_name(data.dtype()),
                            dims_to_string(expect).c_str());
  Tensor out = data.clone();
  std::vector<Run> runs(plan.offsets.size());
  for (size_t t = 0; t < runs.size(); ++t)
    runs[t] = Run{plan.offsets[t], static_cast<int64_t>(t) * plan.slice, plan.slice};
  KILN_RETURN_IF_ERROR(apply_runs(node, out, updates, r, runs));
  ctx.set_output(0, std::move(out));
  return ok_status();
}

// ---- OneHot -------------------------------------------------------------------------------------

Status infer_one_hot(InferContext& ctx) {
  const ir::TensorType& idx = ctx.input_type(0);
  const DataType dtype = ctx.input_type(2).dtype;
  if (!idx.shape.has_rank()) {
    ctx.set_output(0, dtype, Shape::unknown_rank());
    return ok_status();
  }
  const int out_rank = idx.shape.rank() + 1;
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", -1), out_rank));
  Dim depth;
  if (const Tensor* d = ctx.input_constant(1); d && d->num_elements() == 1) {
    double v = d->element_as_double(0);
    if (!(v >= 0)) return invalid_argument("node %s: depth %g is negative", ctx.node().label().c_str(), v);
    depth = Dim(static_cast<int64_t>(v));
  }
  std::vector<Dim> out = idx.shape.dims();
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, dtype, Shape(std::move(out)));
  return ok_status();
}

Status one_hot_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& indices = *ctx.input(0);
  const Tensor& depth_t = *ctx.input(1);
  const Tensor& values = *ctx.input(2);
  if (depth_t.num_elements() != 1)
    return invalid_argument("node %s: depth must hold one value, got %s", node.label().c_str(),
                            dims_to_string(depth_t.dims()).c_str());
  if (values.num_elements() != 2)
    return invalid_argument("node %s: values must hold [off, on], got %s", node.label().c_str(),
                            dims_to_string(values.dims()).c_str());
  if (indices.dtype() == DataType::kString || depth_t.dtype() == DataType::kString)
    return invalid_argument("node %s: indices and depth must be numeric", node.label().c_str());
  const double dv = depth_t.element_as_double(0);
  if (!(dv >= 0) || dv > 1e12)
    return invalid_argument("node %s: depth %g is not a valid extent", node.label().c_str(), dv);
  const int64_t depth = static_cast<int64_t>(dv);
  const int out_rank = indices.rank() + 1;
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -1), out_rank));
  std::vector<int64_t> out = indices.dims();
  out.insert(out.begin() + axis, depth);
  const int64_t suffix = product(indices.dims(), static_cast<size_t>(axis), indices.dims().size());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, values.dtype(), out));
  const int64_t n = indices.num_elements();
  return dispatch_copy_type(node, values.dtype(), [&]<typename T>() {
    const T off = values.data<T>()[0];
    const T on = values.data<T>()[1];
    T* dst = y->data<T>();
    std::fill_n(dst, y->num_elements(), off);
    for (int64_t i = 0; i < n; ++i) {
      // Float indices truncate toward zero, as the spec's cast to int64 does.
      int64_t v;
      if (dtype_is_float(indices.dtype())) {
        const double dv_i = indices.element_as_double(i);
        if (!(std::fabs(dv_i) < 9.2e18)) continue;  // NaN or beyond int64: matches no class
        v = static_cast<int64_t>(dv_i);
      } else {
        v = indices.element_as_int64(i);
      }
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue;  // out of range: the row stays all "off"
      const int64_t p = i / suffix, s = i % suffix;
      dst[(p * depth + v) * suffix + s] = on;
    }
  });
}

KILN_REGISTER_OP(OpSchema("Gather").since(1).inputs(2, 2).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_gather).kernel(gather_kernel));
KILN_REGISTER_OP(OpSchema("GatherElements").since(11).inputs(2, 2).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_gather_elements).kernel(gather_elements_kernel));
KILN_REGISTER_OP(OpSchema("GatherND").since(11).inputs(2, 2).outputs(1, 1).attr("batch_dims", AttrKind::kInt)
                     .infer(infer_gather_nd).kernel(gather_nd_kernel));
KILN_REGISTER_OP(OpSchema("ScatterND").since(11).inputs(3, 3).outputs(1, 1).attr("reduction", AttrKind::kString)
                     .infer(infer_same_as_input).kernel(scatter_nd_kernel));
KILN_REGISTER_OP(OpSchema("ScatterElements").since(11).inputs(3, 3).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .attr("reduction", AttrKind::kString).infer(infer_same_as_input)
                     .kernel(scatter_elements_kernel));
KILN_REGISTER_OP(OpSchema("Scatter").since(9, 10).inputs(3, 3).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_same_as_input).kernel(scatter_elements_kernel));
KILN_REGISTER_OP(OpSchema("OneHot").since(9).inputs(3, 3).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_one_hot).kernel(one_hot_kernel));

}  // namespace
}  // namespace kiln::ops
