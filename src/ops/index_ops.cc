// Ops that compute or select positions: NonZero, TopK, CumSum, Trilu, Compress and
// ReverseSequence.
#include <algorithm>
#include <numeric>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < d.size(); ++i) p *= d[i];
  return p;
}

// Calls fn.template operator()<T, K>() where T is the stored element type and K the type
// values are compared/accumulated in (float for float16/bfloat16). `load` converts.
template <typename T>
struct Loader {
  static auto load(T v) { return v; }
};
template <>
struct Loader<Float16> {
  static float load(Float16 v) { return fp16_to_float(v.bits); }
};
template <>
struct Loader<BFloat16> {
  static float load(BFloat16 v) { return bf16_to_float(v.bits); }
};
template <typename T, typename K>
T store_as(K v) {
  if constexpr (std::is_same_v<T, Float16>) return Float16{float_to_fp16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{float_to_bf16(static_cast<float>(v))};
  else return static_cast<T>(v);
}

template <typename Fn>
bool dispatch_arith(DataType t, Fn&& fn) {
  if (t == DataType::kFloat16) {
    fn.template operator()<Float16>();
    return true;
  }
  if (t == DataType::kBFloat16) {
    fn.template operator()<BFloat16>();
    return true;
  }
  return dispatch_numeric(t, fn);
}

// ---- NonZero ---------------------------------------------------------------------------------

Status infer_nonzero(InferContext& ctx) {
  const Shape& s = ctx.input_type(0).shape;
  ctx.set_output(0, DataType::kInt64, s.has_rank() ? Shape{Dim(std::max(s.rank(), 1)), Dim()} : Shape{Dim(), Dim()});
  return ok_status();
}

Status nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const int64_t n = x.num_elements();
  std::vector<int64_t> hits;
  bool ok = dispatch_arith(x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    for (int64_t i = 0; i < n; ++i)
      if (Loader<T>::load(p[i]) != 0) hits.push_back(i);
  });
  if (!ok)
    return unsupported("node %s: dtype %s is not supported", ctx.node().label().c_str(), dtype_name(x.dtype()));
  // A scalar counts as a 1-D tensor of one element, as ONNX Runtime treats it.
  const int rank = std::max(x.rank(), 1);
  std::vector<int64_t> dims = x.rank() == 0 ? std::vector<int64_t>{1} : x.dims();
  const int64_t nnz = static_cast<int64_t>(hits.size());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt64, {rank, nnz}));
  const std::vector<int64_t> strides = contiguous_strides(dims);
  for (int64_t j = 0; j < nnz; ++j) {
    int64_t rem = hits[static_cast<size_t>(j)];
    for (int d = 0; d < rank; ++d) {
      y->data<int64_t>()[d * nnz + j] = rem / strides[static_cast<size_t>(d)];
      rem %= strides[static_cast<size_t>(d)];
    }
  }
  return ok_status();
}

// ---- TopK ----------------------------------------------------------------------------------------

Status infer_topk(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    ctx.set_output(1, DataType::kInt64, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", -1), in.shape.rank()));
  Shape out = in.shape;
  Dim k;
  if (ctx.node().opset() < 10) {
    k = Dim(ctx.node().attr_int("k", 0));
  } else if (const Tensor* t = ctx.input_constant(1); t && t->num_elements() == 1 && !dtype_is_float(t->dtype())) {
    k = Dim(t->element_as_int64(0));
  }
  if (k.is_static() && in.shape[axis].is_static() && k.value > in.shape[axis].value)
    return invalid_argument("node %s: k = %lld exceeds axis %d of extent %lld", ctx.node().label().c_str(),
                            (long long)k.value, axis, (long long)in.shape[axis].value);
  out[axis] = k;
  ctx.set_output(0, in.dtype, out);
  ctx.set_output(1, DataType::kInt64, out);
  return ok_status();
}

Status topk_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.rank() < 1) return invalid_argument("node %s: input must have rank >= 1", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -1), x.rank()));
  int64_t k;
  if (ctx.opset() < 10) {
    k = node.attr_int("k", -1);
  } else {
    if (!ctx.input(1)) return invalid_argument("node %s: input K is missing", node.label().c_str());
    KILN_ASSIGN_OR_RETURN(k, scalar_index(node, *ctx.input(1), "K"));
  }
  const int64_t dim = x.dim(axis);
  if (k < 0 || k > dim)
    return invalid_argument("node %s: k = %lld is out of range for axis %d of extent %lld", node.label().c_str(),
                            (long long)k, axis, (long long)dim);
  const bool largest = ctx.opset() < 11 || node.attr_int("largest", 1) != 0;
  std::vector<int64_t> out = x.dims();
  out[static_cast<size_t>(axis)] = k;
  KILN_ASSIGN_OR_RETURN(Tensor * vals, ctx.allocate_output(0, x.dtype(), out));
  KILN_ASSIGN_OR_RETURN(Tensor * idxs, ctx.allocate_output(1, DataType::kInt64, out));
  const int64_t outer = product(x.dims(), 0, static_cast<size_t>(axis));
  const int64_t inner = product(x.dims(), static_cast<size_t>(axis) + 1, x.dims().size());
  std::vector<int64_t> order(static_cast<size_t>(dim));
  bool ok = dispatch_arith(x.dtype(), [&]<typename T>() {
    using K = decltype(Loader<T>::load(T{}));
    std::vector<K> line(static_cast<size_t>(dim));
    const T* src = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * dim * inner + in;
        for (int64_t j = 0; j < dim; ++j) line[static_cast<size_t>(j)] = Loader<T>::load(src[base + j * inner]);
        std::iota(order.begin(), order.end(), 0);
        // Ties go to the lower index, as the spec requires.
        auto cmp = [&](int64_t a, int64_t b) {
          K va = line[static_cast<size_t>(a)], vb = line[static_cast<size_t>(b)];
          if (va != vb) return largest ? va > vb : va < vb;
          return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
        const int64_t obase = o * k * inner + in;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t s = order[static_cast<size_t>(j)];
          vals->data<T>()[obase + j * inner] = src[base + s * inner];
          idxs->data<int64_t>()[obase + j * inner] = s;
        }
      }
  });
  if (!ok) return unsupported("node %s: dtype %s is not supported", node.label().c_str(), dtype_name(x.dtype()));
  return ok_status();
}

// ---- CumSum --------------------------------------------------------------------------------------

Status cumsum_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!ctx.input(1)) return invalid_argument("node %s: axis input is missing", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(int64_t axis_v, scalar_index(node, *ctx.input(1), "axis"));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, axis_v, x.rank()));
  const bool exclusive = node.attr_int("exclusive", 0) != 0;
  const bool reverse = node.attr_int("reverse", 0) != 0;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  const int64_t dim = x.dim(axis);
  const int64_t outer = product(x.dims(), 0, static_cast<size_t>(axis));
  const int64_t inner = product(x.dims(), static_cast<size_t>(axis) + 1, x.dims().size());
  bool ok = x.dtype() != DataType::kBool && dispatch_arith(x.dtype(), [&]<typename T>() {
    using K = decltype(Loader<T>::load(T{}));
    const T* src = x.data<T>();
    T* dst = y->data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        K acc = 0;
        for (int64_t s = 0; s < dim; ++s) {
          const int64_t j = reverse ? dim - 1 - s : s;
          const int64_t at = (o * dim + j) * inner + in;
          const K v = Loader<T>::load(src[at]);
          if (exclusive) {
            dst[at] = store_as<T>(acc);
            acc = static_cast<K>(acc + v);
          } else {
            acc = static_cast<K>(acc + v);
            dst[at] = store_as<T>(acc);
          }
        }
      }
  });
  if (!ok) return unsupported("node %s: dtype %s is not supported", node.label().c_str(), dtype_name(x.dtype()));
  return ok_status();
}

// ---- Trilu -------------------------------------------------------------------------------------------

Status trilu_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.rank() < 2) return invalid_argument("node %s: input must have rank >= 2, got %s", node.label().c_str(),
                                            dims_to_string(x.dims()).c_str());
  int64_t k = 0;
  if (ctx.input(1)) {
    KILN_ASSIGN_OR_RETURN(k, scalar_index(node, *ctx.input(1), "k"));
  }
  const bool upper = node.attr_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mats = rows * cols == 0 ? 0 : x.num_elements() / (rows * cols);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  return dispatch_copy_type(node, x.dtype(), [&]<typename T>() {
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i) {
        const T* src = x.data<T>() + (m * rows + i) * cols;
        T* dst = y->data<T>() + (m * rows + i) * cols;
        // Kept columns: j >= i + k (upper) or j <= i + k (lower); the rest stay zero.
        const int64_t lo = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
        const int64_t hi = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
        if (hi > lo) copy_run(dst + lo, src + lo, hi - lo);
      }
  });
}

// ---- Compress --------------------------------------------------------------------------------------

Status infer_compress(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (!ctx.node().has_attr("axis")) {
    ctx.set_output(0, in.dtype, Shape{Dim()});
    return ok_status();
  }
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0), in.shape.rank()));
  Shape out = in.shape;
  out[axis] = Dim();
  ctx.set_output(0, in.dtype, std::move(out));
  return ok_status();
}

Status compress_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& cond = *ctx.input(1);
  if (cond.dtype() != DataType::kBool || cond.rank() != 1)
    return invalid_argument("node %s: condition must be a 1-D bool tensor, got %s", node.label().c_str(),
                            cond.description().c_str());
  const bool has_axis = node.has_attr("axis");
  int axis = 0;
  std::vector<int64_t> dims = {x.num_elements()};
  if (has_axis) {
    KILN_ASSIGN_OR_RETURN(axis, normalize_axis(node, node.attr_int("axis", 0), x.rank()));
    dims = x.dims();
  }
  const int64_t dim = dims[static_cast<size_t>(axis)];
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < cond.num_elements(); ++i) {
    if (!cond.data<bool>()[i]) continue;
    if (i >= dim)
      return out_of_range("node %s: condition selects index %lld but the axis has extent %lld",
                          node.label().c_str(), (long long)i, (long long)dim);
    picked.push_back(i);
  }
  const int64_t outer = product(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = product(dims, static_cast<size_t>(axis) + 1, dims.size());
  std::vector<int64_t> out = dims;
  out[static_cast<size_t>(axis)] = static_cast<int64_t>(picked.size());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out));
  return dispatch_copy_type(node, x.dtype(), [&]<typename T>() {
    T* dst = y->data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t p : picked) {
        copy_run(dst, x.data<T>() + (o * dim + p) * inner, inner);
        dst += inner;
      }
  });
}

// ---- ReverseSequence -------------------------------------------------------------------------------

Status reverse_sequence_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& lens_t = *ctx.input(1);
  const int64_t batch_axis = node.attr_int("batch_axis", 1);
  const int64_t time_axis = node.attr_int("time_axis", 0);
  if (x.rank() < 2) return invalid_argument("node %s: input must have rank >= 2", node.label().c_str());
  if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) || batch_axis == time_axis)
    return invalid_argument("node %s: batch_axis and time_axis must be 0 and 1 in some order",
                            node.label().c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lens, index_values(node, lens_t, "sequence_lens"));
  const int64_t batch = x.dim(static_cast<int>(batch_axis));
  const int64_t time = x.dim(static_cast<int>(time_axis));
  if (lens_t.rank() != 1 || static_cast<int64_t>(lens.size()) != batch)
    return invalid_argument("node %s: sequence_lens must be [%lld], got %s", node.label().c_str(),
                            (long long)batch, dims_to_string(lens_t.dims()).c_str());
  for (int64_t l : lens)
    if (l < 0 || l > time)
      return out_of_range("node %s: sequence length %lld is out of range [0, %lld]", node.label().c_str(),
                          (long long)l, (long long)time);
  const int64_t inner = product(x.dims(), 2, x.dims().size());
  const std::vector<int64_t> xs = contiguous_strides(x.dims());
  const int64_t ts = xs[static_cast<size_t>(time_axis)], bs = xs[static_cast<size_t>(batch_axis)];
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  return dispatch_copy_type(node, x.dtype(), [&]<typename T>() {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t t = 0; t < time; ++t) {
        const int64_t from = t < len ? len - 1 - t : t;
        copy_run(y->data<T>() + t * ts + b * bs, x.data<T>() + from * ts + b * bs, inner);
      }
    }
  });
}

Status infer_same(InferContext& ctx) { return infer_same_as_input(ctx); }

KILN_REGISTER_OP(OpSchema("NonZero").since(9).inputs(1, 1).outputs(1, 1).infer(infer_nonzero).kernel(nonzero_kernel));
KILN_REGISTER_OP(OpSchema("TopK").since(1, 9).inputs(1, 1).outputs(2, 2).attr("axis", AttrKind::kInt)
                     .required_attr("k", AttrKind::kInt).infer(infer_topk).kernel(topk_kernel));
KILN_REGISTER_OP(OpSchema("TopK").since(10).inputs(2, 2).outputs(2, 2).attr("axis", AttrKind::kInt)
                     .attr("largest", AttrKind::kInt).attr("sorted", AttrKind::kInt).infer(infer_topk)
                     .kernel(topk_kernel));
KILN_REGISTER_OP(OpSchema("CumSum").since(11).inputs(2, 2).outputs(1, 1).attr("exclusive", AttrKind::kInt)
                     .attr("reverse", AttrKind::kInt).infer(infer_same).kernel(cumsum_kernel));
KILN_REGISTER_OP(OpSchema("Trilu").since(14).inputs(1, 2).outputs(1, 1).attr("upper", AttrKind::kInt)
                     .infer(infer_same).kernel(trilu_kernel));
KILN_REGISTER_OP(OpSchema("Compress").since(9).inputs(2, 2).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_compress).kernel(compress_kernel));
KILN_REGISTER_OP(OpSchema("ReverseSequence").since(10).inputs(2, 2).outputs(1, 1)
                     .attr("batch_axis", AttrKind::kInt).attr("time_axis", AttrKind::kInt).infer(infer_same)
                     .kernel(reverse_sequence_kernel));

}  // namespace
}  // namespace kiln::ops
