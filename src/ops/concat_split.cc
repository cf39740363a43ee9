// Concat, Split, Tile and Pad: ops that join, cut, repeat or border tensors along axes.
// Concat and Split move contiguous runs; Tile is a strided read; Pad maps each output
// coordinate per axis through a small table (constant, reflect, edge, wrap).
#include <algorithm>
#include <optional>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// ---- Concat ---------------------------------------------------------------------------------

// Opsets 1-3 made axis optional with default 1; from 4 it is required.
int64_t concat_axis(const ir::Node& node) { return node.attr_int("axis", node.opset() < 4 ? 1 : 0); }

Status infer_concat(InferContext& ctx) {
  int rank = -1;
  DataType dtype = DataType::kUndefined;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (dtype == DataType::kUndefined) dtype = ctx.input_type(i).dtype;
    if (ctx.input_type(i).shape.has_rank()) rank = ctx.input_type(i).shape.rank();
  }
  if (rank < 0) {
    ctx.set_output(0, dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), concat_axis(ctx.node()), rank));
  std::vector<Dim> out(static_cast<size_t>(rank));
  Dim sum(0);
  bool first = true;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Shape& s = ctx.input_type(i).shape;
    if (!s.has_rank()) {
      sum = Dim();
      continue;
    }
    if (s.rank() != rank)
      return invalid_argument("node %s: input %d has rank %d, expected %d", ctx.node().label().c_str(), i,
                              s.rank(), rank);
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      Dim& o = out[static_cast<size_t>(d)];
      if (first || (!o.is_static() && s[d].is_static())) {
        o = s[d];
      } else if (o.is_static() && s[d].is_static() && o.value != s[d].value) {
        return invalid_argument("node %s: input %d has shape %s, which differs off axis %d",
                                ctx.node().label().c_str(), i, s.to_string().c_str(), axis);
      }
    }
    sum = sum.is_static() && s[axis].is_static() ? Dim(sum.value + s[axis].value) : Dim();
    first = false;
  }
  out[static_cast<size_t>(axis)] = sum;
  ctx.set_output(0, dtype, Shape(std::move(out)));
  return ok_status();
}

Status concat_kernel(KernelContext& ctx) {
  std::vector<const Tensor*> ins;
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.input(i)) ins.push_back(ctx.input(i));
  if (ins.empty()) return invalid_argument("node %s has no inputs", ctx.node().label().c_str());
  const Tensor& first = *ins[0];
  const int rank = first.rank();
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), concat_axis(ctx.node()), rank));
  std::vector<int64_t> out = first.dims();
  out[static_cast<size_t>(axis)] = 0;
  for (size_t k = 0; k < ins.size(); ++k) {
    const Tensor& t = *ins[k];
    if (t.dtype() != first.dtype())
      return invalid_argument("node %s: input %zu is %s, input 0 is %s", ctx.node().label().c_str(), k,
                              dtype_name(t.dtype()), dtype_name(first.dtype()));
    bool ok = t.rank() == rank;
    for (int d = 0; ok && d < rank; ++d)
      if (d != axis && t.dim(d) != first.dim(d)) ok = false;
    if (!ok)
      return invalid_argument("node %s: input %zu has shape %s, incompatible with %s on axis %d",
                              ctx.node().label().c_str(), k, dims_to_string(t.dims()).c_str(),
                              dims_to_string(first.dims()).c_str(), axis);
    out[static_cast<size_t>(axis)] += t.dim(axis);
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out[static_cast<size_t>(d)];
  for (int d = axis + 1; d < rank; ++d) inner *= out[static_cast<size_t>(d)];
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, first.dtype(), out));
  const int64_t out_row = out[static_cast<size_t>(axis)] * inner;
  return dispatch_copy_type(ctx.node(), first.dtype(), [&]<typename T>() {
    int64_t col = 0;
    for (const Tensor* t : ins) {
      const int64_t run = t->dim(axis) * inner;
      const T* src = t->data<T>();
      T* dst = y->data<T>() + col;
      for (int64_t o = 0; o < outer; ++o) copy_run(dst + o * out_row, src + o * run, run);
      col += run;
    }
  });
}

// ---- Split ------------------------------------------------------------------------------------

// Chunk sizes along the axis of extent `dim` (-1 when unknown), from the split
// attribute/input, num_outputs (18+) or an equal division. Empty `split` = not given.
Expected<std::vector<int64_t>> split_sizes(const ir::Node& node, int64_t dim, const std::vector<int64_t>& split,
                                           bool split_given, int n_out) {
  if (split_given) {
    if (static_cast<int>(split.size()) != n_out)
      return invalid_argument("node %s: split has %zu entries for %d outputs", node.label().c_str(),
                              split.size(), n_out);
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) return invalid_argument("node %s: split %s has a negative size", node.label().c_str(),
                                         dims_to_string(split).c_str());
      sum += s;
    }
    if (dim >= 0 && sum != dim)
      return invalid_argument("node %s: split %s sums to %lld, the axis has %lld", node.label().c_str(),
                              dims_to_string(split).c_str(), (long long)sum, (long long)dim);
    return split;
  }
  int64_t n = n_out;
  if (node.opset() >= 18) {
    const ir::Attribute* a = node.attr("num_outputs");
    if (a) {
      if (a->i != n_out)
        return invalid_argument("node %s: num_outputs is %lld but the node has %d outputs",
                                node.label().c_str(), (long long)a->i, n_out);
    }
  }
  if (n <= 0) return invalid_argument("node %s has no outputs", node.label().c_str());
  if (dim < 0) return std::vector<int64_t>(static_cast<size_t>(n), -1);
  std::vector<int64_t> out;
  if (node.opset() >= 18) {
    // Chunks of ceil(dim / n); the last one takes what is left.
    int64_t chunk = (dim + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) out.push_back(std::clamp<int64_t>(dim - i * chunk, 0, chunk));
    return out;
  }
  if (dim % n != 0)
    return invalid_argument("node %s: axis of extent %lld does not split into %lld equal parts",
                            node.label().c_str(), (long long)dim, (long long)n);
  return std::vector<int64_t>(static_cast<size_t>(n), dim / n);
}

Status infer_split(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (!in.shape.has_rank()) {
    for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0), in.shape.rank()));
  std::vector<int64_t> split;
  bool given = false, known = true;
  if (ctx.node().opset() < 13) {
    if (const ir::Attribute* a = ctx.node().attr("split")) {
      split = a->ints;
      given = true;
    }
  }
  // Opset 1 takes the sizes from the attribute or from an optional input 1; 13+ from input 1.
  if (!given && (ctx.node().opset() >= 13 || ctx.node().opset() == 1) && ctx.has_input(1)) {
    given = true;
    if (auto v = constant_ints(ctx, 1)) split = *v;
    else known = false;
  }
  const Dim& d = in.shape[axis];
  std::vector<int64_t> sizes(static_cast<size_t>(ctx.num_outputs()), -1);
  if (known) {
    KILN_ASSIGN_OR_RETURN(sizes, split_sizes(ctx.node(), d.is_static() ? d.value : -1, split, given,
                                             ctx.num_outputs()));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    Shape s = in.shape;
    int64_t sz = sizes[static_cast<size_t>(i)];
    s[axis] = sz >= 0 ? Dim(sz) : Dim();
    ctx.set_output(i, in.dtype, std::move(s));
  }
  return ok_status();
}

Status split_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0), x.rank()));
  std::vector<int64_t> split;
  bool given = false;
  if (ctx.opset() < 13) {
    if (const ir::Attribute* a = ctx.node().attr("split")) {
      split = a->ints;
      given = true;
    }
  }
  if (!given && (ctx.opset() >= 13 || ctx.opset() == 1) && ctx.input(1)) {
    KILN_ASSIGN_OR_RETURN(split, index_values(ctx.node(), *ctx.input(1), "split"));
    given = true;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                        split_sizes(ctx.node(), x.dim(axis), split, given, ctx.num_outputs()));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t in_row = x.dim(axis) * inner;
  int64_t col = 0;
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    std::vector<int64_t> dims = x.dims();
    dims[static_cast<size_t>(axis)] = sizes[static_cast<size_t>(i)];
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(i, x.dtype(), dims));
    const int64_t run = sizes[static_cast<size_t>(i)] * inner;
    KILN_RETURN_IF_ERROR(dispatch_copy_type(ctx.node(), x.dtype(), [&]<typename T>() {
      for (int64_t o = 0; o < outer; ++o) copy_run(y->data<T>() + o * run, x.data<T>() + o * in_row + col, run);
    }));
    col += run;
  }
  return ok_status();
}

// ---- Tile ---------------------------------------------------------------------------------------

Status infer_tile(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  auto reps = constant_ints(ctx, 1);
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, reps ? unknown_dims(static_cast<int>(reps->size())) : Shape::unknown_rank());
    return ok_status();
  }
  if (!reps) {
    ctx.set_output(0, in.dtype, unknown_dims(in.shape.rank()));
    return ok_status();
  }
  if (static_cast<int>(reps->size()) != in.shape.rank())
    return invalid_argument("node %s: repeats has %zu entries for an input of rank %d",
                            ctx.node().label().c_str(), reps->size(), in.shape.rank());
  std::vector<Dim> out;
  for (int i = 0; i < in.shape.rank(); ++i) {
    int64_t r = (*reps)[static_cast<size_t>(i)];
    if (r < 0)
      return invalid_argument("node %s: repeats %s has a negative entry", ctx.node().label().c_str(),
                              dims_to_string(*reps).c_str());
    const Dim& d = in.shape[i];
    out.push_back(r == 1 ? d : (d.is_static() ? Dim(d.value * r) : (r == 0 ? Dim(0) : Dim())));
  }
  ctx.set_output(0, in.dtype, Shape(std::move(out)));
  return ok_status();
}

Status tile_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor* r = ctx.input(1);
  if (!r || r->rank() != 1)
    return invalid_argument("node %s: repeats must be a 1-D tensor", ctx.node().label().c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> reps, index_values(ctx.node(), *r, "repeats"));
  if (static_cast<int>(reps.size()) != x.rank())
    return invalid_argument("node %s: repeats has %zu entries for an input of rank %d",
                            ctx.node().label().c_str(), reps.size(), x.rank());
  // Output dim d of extent reps[d] * x[d] is the pair (rep, i): a 2*rank strided read
  // with stride 0 on every rep axis.
  std::vector<int64_t> out, dims, strides;
  std::vector<int64_t> xs = contiguous_strides(x.dims());
  for (int d = 0; d < x.rank(); ++d) {
    if (reps[static_cast<size_t>(d)] < 0)
      return invalid_argument("node %s: repeats %s has a negative entry", ctx.node().label().c_str(),
                              dims_to_string(reps).c_str());
    out.push_back(reps[static_cast<size_t>(d)] * x.dim(d));
    dims.push_back(reps[static_cast<size_t>(d)]);
    strides.push_back(0);
    dims.push_back(x.dim(d));
    strides.push_back(xs[static_cast<size_t>(d)]);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out));
  return strided_copy_tensor(ctx.node(), x, 0, *y, dims, strides);
}

// ---- Pad -----------------------------------------------------------------------------------------

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

Expected<PadMode> pad_mode(const ir::Node& node) {
  std::string m = node.attr_string("mode", "constant");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  if (m == "wrap" && node.opset() >= 19) return PadMode::kWrap;
  return invalid_argument("node %s: pad mode '%s' is not supported at opset %lld", node.label().c_str(),
                          m.c_str(), (long long)node.opset());
}

// Per-axis (begin, end) pads for a rank, from attr (< 11) or inputs pads/axes (11+).
Expected<std::vector<int64_t>> full_pads(const ir::Node& node, int rank, const std::vector<int64_t>& pads,
                                         const std::vector<int64_t>* axes) {
  std::vector<int64_t> out(static_cast<size_t>(2 * rank), 0);
  if (!axes) {
    if (static_cast<int>(pads.size()) != 2 * rank)
      return invalid_argument("node %s: pads has %zu entries, expected %d for rank %d", node.label().c_str(),
                              pads.size(), 2 * rank, rank);
    return pads;
  }
  if (pads.size() != 2 * axes->size())
    return invalid_argument("node %s: pads has %zu entries for %zu axes", node.label().c_str(), pads.size(),
                            axes->size());
  const size_t n = axes->size();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t k = 0; k < n; ++k) {
    KILN_ASSIGN_OR_RETURN(int a, normalize_axis(node, (*axes)[k], rank));
    if (seen[static_cast<size_t>(a)])
      return invalid_argument("node %s: axis %d is repeated", node.label().c_str(), a);
    seen[static_cast<size_t>(a)] = true;
    out[static_cast<size_t>(a)] = pads[k];
    out[static_cast<size_t>(a + rank)] = pads[k + n];
  }
  return out;
}

Status infer_pad(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(pad_mode(ctx.node()).status());
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const int rank = in.shape.rank();
  std::optional<std::vector<int64_t>> pads, axes;
  bool axes_known = true;
  if (ctx.node().opset() < 11) {
    pads = ctx.node().attr_ints(ctx.node().opset() < 2 ? "paddings" : "pads");
  } else {
    pads = constant_ints(ctx, 1);
    if (ctx.has_input(3)) {
      axes = constant_ints(ctx, 3);
      axes_known = axes.has_value();
    }
  }
  if (!pads || !axes_known) {
    ctx.set_output(0, in.dtype, unknown_dims(rank));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> p, full_pads(ctx.node(), rank, *pads, axes ? &*axes : nullptr));
  std::vector<Dim> out;
  for (int d = 0; d < rank; ++d) {
    const Dim& x = in.shape[d];
    int64_t add = p[static_cast<size_t>(d)] + p[static_cast<size_t>(d + rank)];
    if (!x.is_static()) {
      out.push_back(add == 0 ? x : Dim());
      continue;
    }
    if (x.value + add < 0)
      return invalid_argument("node %s: pads %s make axis %d negative", ctx.node().label().c_str(),
                              dims_to_string(p).c_str(), d);
    out.push_back(Dim(x.value + add));
  }
  ctx.set_output(0, in.dtype, Shape(std::move(out)));
  return ok_status();
}

// Sets element 0 of `dst` (dtype fixed) to `v`, for Pad-2's float `value` attribute.
Status scalar_from_double(const ir::Node& node, Tensor& dst, double v) {
  switch (dst.dtype()) {
    case DataType::kFloat16: dst.data<uint16_t>()[0] = float_to_fp16(static_cast<float>(v)); return ok_status();
    case DataType::kBFloat16: dst.data<uint16_t>()[0] = float_to_bf16(static_cast<float>(v)); return ok_status();
    case DataType::kString: return ok_status();
    default: break;
  }
  if (!dispatch_numeric(dst.dtype(), [&]<typename T>() { dst.data<T>()[0] = static_cast<T>(v); }))
    return unsupported("node %s: dtype %s is not supported", node.label().c_str(), dtype_name(dst.dtype()));
  return ok_status();
}

// Source index of output coordinate o along an axis of extent n padded by `begin`;
// -1 means the constant value.
int64_t pad_source(PadMode mode, int64_t o, int64_t begin, int64_t n) {
  int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : n - 1;
    case PadMode::kWrap: return ((i % n) + n) % n;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

Status pad_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const int rank = x.rank();
  KILN_ASSIGN_OR_RETURN(PadMode mode, pad_mode(node));
  std::vector<int64_t> raw_pads;
  std::optional<std::vector<int64_t>> axes;
  KILN_ASSIGN_OR_RETURN(Tensor value, Tensor::allocate(x.dtype(), {}), "node %s", node.label().c_str());
  if (ctx.opset() < 11) {
    raw_pads = node.attr_ints(node.opset() < 2 ? "paddings" : "pads");
    KILN_RETURN_IF_ERROR(scalar_from_double(node, value, node.attr_float("value", 0.0f)));
  } else {
    if (!ctx.input(1)) return invalid_argument("node %s: pads input is missing", node.label().c_str());
    KILN_ASSIGN_OR_RETURN(raw_pads, index_values(node, *ctx.input(1), "pads"));
    if (const Tensor* c = ctx.input(2)) {
      if (c->dtype() != x.dtype() || c->num_elements() != 1)
        return invalid_argument("node %s: constant_value must be one %s value, got %s", node.label().c_str(),
                                dtype_name(x.dtype()), c->description().c_str());
      value = *c;
    }
    if (ctx.input(3)) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> a, index_values(node, *ctx.input(3), "axes"));
      axes = std::move(a);
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pads, full_pads(node, rank, raw_pads, axes ? &*axes : nullptr));
  std::vector<int64_t> out(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const size_t du = static_cast<size_t>(d);
    out[du] = x.dim(d) + pads[du] + pads[du + static_cast<size_t>(rank)];
    if (out[du] < 0)
      return invalid_argument("node %s: pads %s make axis %d of %s negative", node.label().c_str(),
                              dims_to_string(pads).c_str(), d, dims_to_string(x.dims()).c_str());
    if (mode != PadMode::kConstant && x.dim(d) == 0 && out[du] > 0)
      return invalid_argument("node %s: cannot pad an empty axis %d in this mode", node.label().c_str(), d);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out));
  if (y->num_elements() == 0) return ok_status();
  if (rank == 0) return dispatch_copy_type(node, x.dtype(), [&]<typename T>() { y->data<T>()[0] = x.data<T>()[0]; });
  // Per axis, the source index of each output coordinate (-1: constant).
  std::vector<std::vector<int64_t>> map(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d)
    for (int64_t o = 0; o < out[static_cast<size_t>(d)]; ++o)
      map[static_cast<size_t>(d)].push_back(pad_source(mode, o, pads[static_cast<size_t>(d)], x.dim(d)));
  const std::vector<int64_t> xs = contiguous_strides(x.dims());
  const int last = rank - 1;
  const int64_t inner = out[static_cast<size_t>(last)];
  const int64_t rows = y->num_elements() / inner;
  // The inner interior [lo, hi) maps to a contiguous source run.
  const int64_t lo = std::clamp<int64_t>(pads[static_cast<size_t>(last)], 0, inner);
  const int64_t hi = std::clamp<int64_t>(pads[static_cast<size_t>(last)] + x.dim(last), lo, inner);
  const std::vector<int64_t>& imap = map[static_cast<size_t>(last)];
  return dispatch_copy_type(node, x.dtype(), [&]<typename T>() {
    const T fill = value.data<T>()[0];
    const T* src = x.data<T>();
    T* dst = y->data<T>();
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (int64_t r = 0; r < rows; ++r, dst += inner) {
      int64_t base = 0;
      bool constant_row = false;
      for (int d = 0; d < last; ++d) {
        int64_t s = map[static_cast<size_t>(d)][static_cast<size_t>(idx[static_cast<size_t>(d)])];
        if (s < 0) constant_row = true;
        else base += s * xs[static_cast<size_t>(d)];
      }
      if (constant_row) {
        std::fill_n(dst, inner, fill);
      } else {
        for (int64_t o = 0; o < lo; ++o) dst[o] = imap[static_cast<size_t>(o)] < 0 ? fill : src[base + imap[static_cast<size_t>(o)]];
        if (hi > lo) copy_run(dst + lo, src + base + imap[static_cast<size_t>(lo)], hi - lo);
        for (int64_t o = hi; o < inner; ++o) dst[o] = imap[static_cast<size_t>(o)] < 0 ? fill : src[base + imap[static_cast<size_t>(o)]];
      }
      for (int d = last - 1; d >= 0; --d) {
        if (++idx[static_cast<size_t>(d)] < out[static_cast<size_t>(d)]) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
  });
}

KILN_REGISTER_OP(OpSchema("Concat").since(1, 3).inputs(1, -1).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_concat).kernel(concat_kernel));
KILN_REGISTER_OP(OpSchema("Concat").since(4).inputs(1, -1).outputs(1, 1).required_attr("axis", AttrKind::kInt)
                     .infer(infer_concat).kernel(concat_kernel));
KILN_REGISTER_OP(OpSchema("Split").since(1, 1).inputs(1, 2).outputs(1, -1).attr("axis", AttrKind::kInt)
                     .attr("split", AttrKind::kInts).infer(infer_split).kernel(split_kernel));
KILN_REGISTER_OP(OpSchema("Split").since(2, 12).inputs(1, 1).outputs(1, -1).attr("axis", AttrKind::kInt)
                     .attr("split", AttrKind::kInts).infer(infer_split).kernel(split_kernel));
KILN_REGISTER_OP(OpSchema("Split").since(13, 17).inputs(1, 2).outputs(1, -1).attr("axis", AttrKind::kInt)
                     .infer(infer_split).kernel(split_kernel));
KILN_REGISTER_OP(OpSchema("Split").since(18).inputs(1, 2).outputs(1, -1).attr("axis", AttrKind::kInt)
                     .attr("num_outputs", AttrKind::kInt).infer(infer_split).kernel(split_kernel));
KILN_REGISTER_OP(OpSchema("Tile").since(6).inputs(2, 2).outputs(1, 1).infer(infer_tile).kernel(tile_kernel));
// Opset 1 named the pads attribute `paddings`.
KILN_REGISTER_OP(OpSchema("Pad").since(1, 1).inputs(1, 1).outputs(1, 1).required_attr("paddings", AttrKind::kInts)
                     .attr("mode", AttrKind::kString).attr("value", AttrKind::kFloat).infer(infer_pad)
                     .kernel(pad_kernel));
KILN_REGISTER_OP(OpSchema("Pad").since(2, 10).inputs(1, 1).outputs(1, 1).required_attr("pads", AttrKind::kInts)
                     .attr("mode", AttrKind::kString).attr("value", AttrKind::kFloat).infer(infer_pad)
                     .kernel(pad_kernel));
KILN_REGISTER_OP(OpSchema("Pad").since(11, 17).inputs(2, 3).outputs(1, 1).attr("mode", AttrKind::kString)
                     .infer(infer_pad).kernel(pad_kernel));
KILN_REGISTER_OP(OpSchema("Pad").since(18).inputs(2, 4).outputs(1, 1).attr("mode", AttrKind::kString)
                     .infer(infer_pad).kernel(pad_kernel));

}  // namespace
}  // namespace kiln::ops
