// Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare (one table, one
// shared kernel; axes an attribute or, from opset 13 for ReduceSum and 18 for the rest, an
// input) and ArgMax/ArgMin.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// ---- axes and output shape -----------------------------------------------------------

// Which input dims a node reduces. With noop_with_empty_axes and no axes nothing is
// reduced: every element is its own reduction (ReduceSumSquare then squares, as ONNX's
// reference does).
struct ReduceAxes {
  std::vector<bool> reduced;  // per input dim
  bool keepdims = true;
};

Expected<ReduceAxes> resolve_axes(const ir::Node& node, const std::vector<int64_t>& axes, int rank) {
  ReduceAxes r;
  r.keepdims = node.attr_int("keepdims", 1) != 0;
  const bool noop = node.attr_int("noop_with_empty_axes", 0) != 0;
  r.reduced.assign(static_cast<size_t>(rank), false);
  if (axes.empty()) {
    // No axes (omitted or empty): reduce everything, or nothing with noop_with_empty_axes.
    if (!noop) r.reduced.assign(static_cast<size_t>(rank), true);
    return r;
  }
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int ax, normalize_axis(node, a, rank));
    if (r.reduced[static_cast<size_t>(ax)])
      return invalid_argument("node %s: axis %lld is repeated", node.label().c_str(), (long long)a);
    r.reduced[static_cast<size_t>(ax)] = true;
  }
  return r;
}

bool axes_from_input(const ir::Node& node) {
  return node.opset() >= (node.op_type() == "ReduceSum" ? 13 : 18);
}

std::vector<Dim> reduced_shape(const Shape& in, const ReduceAxes& r) {
  std::vector<Dim> out;
  for (int i = 0; i < in.rank(); ++i) {
    if (!r.reduced[static_cast<size_t>(i)])
      out.push_back(in[i]);
    else if (r.keepdims)
      out.push_back(Dim(1));
  }
  return out;
}

// ---- the shared kernel ---------------------------------------------------------------------

// Geometry of one reduction: output elements walk the kept dims, each visits the
// reduced dims of the input.
struct ReducePlan {
  std::vector<int64_t> out_dims;
  std::vector<int64_t> kept_dims, kept_strides;
  std::vector<int64_t> red_dims, red_strides;
  int64_t out_count = 0;
  int64_t red_count = 1;
};

ReducePlan make_plan(const std::vector<int64_t>& dims, const ReduceAxes& r) {
  ReducePlan p;
  std::vector<int64_t> strides = contiguous_strides(dims);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (r.reduced[i]) {
      p.red_dims.push_back(dims[i]);
      p.red_strides.push_back(strides[i]);
      p.red_count *= dims[i];
      if (r.keepdims) p.out_dims.push_back(1);
    } else {
      p.kept_dims.push_back(dims[i]);
      p.kept_strides.push_back(strides[i]);
      p.out_dims.push_back(dims[i]);
    }
  }
  p.out_count = num_elements(p.kept_dims);
  return p;
}

// Calls cb(x) for every input element reduced into the output element at `base`.
template <typename T, typename Cb>
void visit_reduced(const ReducePlan& p, const T* src, int64_t base, std::vector<int64_t>& idx, Cb&& cb) {
  if (p.red_count == 0) return;
  const int rank = static_cast<int>(p.red_dims.size());
  if (rank == 0) {
    cb(src[base]);
    return;
  }
  std::fill(idx.begin(), idx.end(), 0);
  const int64_t len = p.red_dims.back(), step = p.red_strides.back();
  int64_t off = base;
  while (true) {
    const T* q = src + off;
    if (step == 1)
      for (int64_t i = 0; i < len; ++i) cb(q[i]);
    else
      for (int64_t i = 0; i < len; ++i) cb(q[i * step]);
    int d = rank - 2;
    for (; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      if (++idx[du] < p.red_dims[du]) {
        off += p.red_strides[du];
        break;
      }
      off -= p.red_strides[du] * (p.red_dims[du] - 1);
      idx[du] = 0;
    }
    if (d < 0) return;
  }
}

// Accumulators: double for floats, 64-bit wrap-around integers for integers.
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                               std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

template <typename T>
T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(v);
  else
    return double_to_int<T>(v);
}

// ---- reference reductions -------------------------------------------------------------------
// reduce(visit, count): visit(cb) calls cb on every element of one reduction.

struct SumR {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    Acc<T> acc = 0;
    visit([&](T x) { acc += static_cast<Acc<T>>(x); });
    return static_cast<T>(acc);
  }
};

struct MeanR {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t n) {
    Acc<T> acc = 0;
    visit([&](T x) { acc += static_cast<Acc<T>>(x); });
    return from_double<T>(static_cast<double>(acc) / static_cast<double>(n));
  }
};

struct ProdR {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    Acc<T> acc = 1;
    visit([&](T x) { acc *= static_cast<Acc<T>>(x); });
    return static_cast<T>(acc);
  }
};

// Empty reductions give the lowest (Max) or highest (Min) value, -inf / +inf for floats.
// Bool inputs (opset 20) reduce as any (Max) and all (Min).
struct MaxR {
  static constexpr TypeSet kTypes = kTypeNumeric | kTypeBool;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    T acc = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                 : std::numeric_limits<T>::lowest();
    visit([&](T x) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x)) acc = x;
      }
      if (x > acc) acc = x;
    });
    return acc;
  }
};

struct MinR {
  static constexpr TypeSet kTypes = kTypeNumeric | kTypeBool;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    T acc = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                 : std::numeric_limits<T>::max();
    visit([&](T x) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x)) acc = x;
      }
      if (x < acc) acc = x;
    });
    return acc;
  }
};

struct L1R {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    Acc<T> acc = 0;
    visit([&](T x) {
      if constexpr (std::is_unsigned_v<T>)
        acc += x;
      else
        acc += static_cast<Acc<T>>(x < T(0) ? -static_cast<Acc<T>>(x) : static_cast<Acc<T>>(x));
    });
    return static_cast<T>(acc);
  }
};

struct L2R {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    double acc = 0;
    visit([&](T x) { acc += static_cast<double>(x) * static_cast<double>(x); });
    return from_double<T>(std::sqrt(acc));
  }
};

struct SumSquareR {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    Acc<T> acc = 0;
    visit([&](T x) { acc += static_cast<Acc<T>>(x) * static_cast<Acc<T>>(x); });
    return static_cast<T>(acc);
  }
};

struct LogSumR {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    double acc = 0;
    visit([&](T x) { acc += static_cast<double>(x); });
    return from_double<T>(std::log(acc));
  }
};

// Shifted by the maximum so that exp never overflows.
struct LogSumExpR {
  static constexpr TypeSet kTypes = kTypeNumeric;
  template <typename T, typename V>
  static T reduce(V&& visit, int64_t) {
    double m = -std::numeric_limits<double>::infinity();
    visit([&](T x) { m = std::max(m, static_cast<double>(x)); });
    if (!std::isfinite(m)) return from_double<T>(m);
    double acc = 0;
    visit([&](T x) { acc += std::exp(static_cast<double>(x) - m); });
    return from_double<T>(m + std::log(acc));
  }
};

template <typename Op>
Status reduce_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), Op::kTypes));
  std::vector<int64_t> axes;
  if (axes_from_input(node)) {
    KILN_ASSIGN_OR_RETURN(axes, int_list_input(ctx, 1));
  } else {
    axes = node.attr_ints("axes");
  }
  KILN_ASSIGN_OR_RETURN(ReduceAxes r, resolve_axes(node, axes, x.rank()));
  const ReducePlan p = make_plan(x.dims(), r);
  Tensor xf = half_to_float(x);
  Tensor yf = Tensor::make(xf.dtype(), p.out_dims);
  dispatch_types<Op::kTypes & ~kTypeHalf>(xf.dtype(), [&]<typename T>() {
    const T* src = xf.data<T>();
    T* dst = yf.data<T>();
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.red_count));
    parallel_for(0, p.out_count, grain, [&](int64_t b, int64_t e) {
      std::vector<int64_t> idx(p.red_dims.size());
      for (int64_t o = b; o < e; ++o) {
        int64_t base = 0, rest = o;
        for (size_t d = p.kept_dims.size(); d-- > 0;) {
          base += (rest % p.kept_dims[d]) * p.kept_strides[d];
          rest /= p.kept_dims[d];
        }
        auto visit = [&](auto&& cb) { visit_reduced(p, src, base, idx, cb); };
        dst[o] = Op::template reduce<T>(visit, p.red_count);
      }
    });
  });
  ctx.set_output(0, dtype_is_half(x.dtype()) ? float_to_half(yf, x.dtype()) : yf);
  return ok_status();
}

Status infer_reduce(InferContext& ctx, TypeSet types) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::Node& node = ctx.node();
  const ir::TensorType& in = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, in.dtype, types));
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (axes_from_input(node)) {
    if (ctx.has_input(1)) {
      const Tensor* c = ctx.input_constant(1);
      if (!c) {
        // Axes computed at run time: the rank survives only with keepdims.
        Shape out = Shape::unknown_rank();
        if (keepdims && in.shape.has_rank()) out = Shape(std::vector<Dim>(static_cast<size_t>(in.shape.rank())));
        ctx.set_output(0, in.dtype, out);
        return ok_status();
      }
      if (c->dtype() != DataType::kInt64 && c->dtype() != DataType::kInt32)
        return invalid_argument("node %s: axes must be int64, got %s", node.label().c_str(), dtype_name(c->dtype()));
      axes = c->to_int64_vector();
    }
  } else {
    axes = node.attr_ints("axes");
  }
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(ReduceAxes r, resolve_axes(node, axes, in.shape.rank()));
  ctx.set_output(0, in.dtype, Shape(reduced_shape(in.shape, r)));
  return ok_status();
}

struct ReduceEntry {
  const char* name;
  TypeSet types;
  KernelFn kernel;
};

template <typename Op>
ReduceEntry entry(const char* name) {
  return ReduceEntry{name, Op::kTypes, &reduce_kernel<Op>};
}

const ReduceEntry kReduceOps[] = {
    entry<SumR>("ReduceSum"),       entry<MeanR>("ReduceMean"),
    entry<MaxR>("ReduceMax"),       entry<MinR>("ReduceMin"),
    entry<ProdR>("ReduceProd"),     entry<L1R>("ReduceL1"),
    entry<L2R>("ReduceL2"),         entry<LogSumR>("ReduceLogSum"),
    entry<LogSumExpR>("ReduceLogSumExp"), entry<SumSquareR>("ReduceSumSquare"),
};

// ---- ArgMax / ArgMin -------------------------------------------------------------------

// Index of the first (or, with select_last_index, last) extreme along `axis`; NaN counts
// as the extreme, as in NumPy.
template <bool kMax>
Status arg_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeNumeric));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 0), x.rank()));
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  const bool last = node.attr_int("select_last_index", 0) != 0;
  const int64_t n = x.dim(axis);
  if (n == 0)
    return invalid_argument("node %s: cannot take the arg%s of an empty axis %d of %s", node.label().c_str(),
                            kMax ? "max" : "min", axis, x.description().c_str());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  std::vector<int64_t> out_dims;
  for (int i = 0; i < x.rank(); ++i) {
    if (i != axis)
      out_dims.push_back(x.dim(i));
    else if (keepdims)
      out_dims.push_back(1);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt64, out_dims));
  Tensor xf = half_to_float(x);
  dispatch_types<kTypeNumeric & ~kTypeHalf>(xf.dtype(), [&]<typename T>() {
    const T* src = xf.data<T>();
    int64_t* dst = y->data<int64_t>();
    parallel_for(0, outer * inner, std::max<int64_t>(1, kElementwiseGrain / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* p = src + (o / inner) * n * inner + (o % inner);
        int64_t best = 0;
        T bv = p[0];
        for (int64_t i = 1; i < n; ++i) {
          const T v = p[i * inner];
          bool take;
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(bv)) {
              take = last && std::isnan(v);
            } else if (std::isnan(v)) {
              take = true;
            } else {
              take = kMax ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv));
            }
          } else {
            take = kMax ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv));
          }
          if (take) {
            best = i;
            bv = v;
          }
        }
        dst[o] = best;
      }
    });
  });
  return ok_status();
}

Status infer_arg(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::Node& node = ctx.node();
  const ir::TensorType& in = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, in.dtype, kTypeNumeric));
  if (!in.shape.has_rank()) {
    ctx.set_output(0, DataType::kInt64, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 0), in.shape.rank()));
  ReduceAxes r;
  r.keepdims = node.attr_int("keepdims", 1) != 0;
  r.reduced.assign(static_cast<size_t>(in.shape.rank()), false);
  r.reduced[static_cast<size_t>(axis)] = true;
  ctx.set_output(0, DataType::kInt64, Shape(reduced_shape(in.shape, r)));
  return ok_status();
}

int register_reduce_ops() {
  for (const ReduceEntry& e : kReduceOps) {
    const TypeSet types = e.types;
    auto infer = [types](InferContext& ctx) { return infer_reduce(ctx, types); };
    const int64_t moved = std::string(e.name) == "ReduceSum" ? 13 : 18;
    OpRegistry::instance().add(OpSchema(e.name)
                                   .since(1, moved - 1)
                                   .inputs(1, 1)
                                   .outputs(1, 1)
                                   .attr("axes", ir::AttrKind::kInts)
                                   .attr("keepdims", ir::AttrKind::kInt)
                                   .infer(infer)
                                   .kernel(e.kernel));
    OpRegistry::instance().add(OpSchema(e.name)
                                   .since(moved)
                                   .inputs(1, 2)
                                   .outputs(1, 1)
                                   .attr("keepdims", ir::AttrKind::kInt)
                                   .attr("noop_with_empty_axes", ir::AttrKind::kInt)
                                   .infer(infer)
                                   .kernel(e.kernel));
  }
  for (bool is_max : {true, false}) {
    KernelFn k = is_max ? KernelFn(&arg_kernel<true>) : KernelFn(&arg_kernel<false>);
    const char* name = is_max ? "ArgMax" : "ArgMin";
    OpRegistry::instance().add(OpSchema(name)
                                   .since(1, 11)
                                   .inputs(1, 1)
                                   .outputs(1, 1)
                                   .attr("axis", ir::AttrKind::kInt)
                                   .attr("keepdims", ir::AttrKind::kInt)
                                   .infer(infer_arg)
                                   .kernel(k));
    OpRegistry::instance().add(OpSchema(name)
                                   .since(12)
                                   .inputs(1, 1)
                                   .outputs(1, 1)
                                   .attr("axis", ir::AttrKind::kInt)
                                   .attr("keepdims", ir::AttrKind::kInt)
                                   .attr("select_last_index", ir::AttrKind::kInt)
                                   .infer(infer_arg)
                                   .kernel(k));
  }
  return static_cast<int>(std::size(kReduceOps)) * 2 + 4;
}

[[maybe_unused]] const int kRegistered = register_reduce_ops();

}  // namespace
}  // namespace kiln::ops
