// Sequence and optional ops: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
// SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap,
// Optional, OptionalHasElement and OptionalGetElement. Sequences are immutable values
// (RuntimeValue shares items by pointer), so every op that "changes" one builds a new
// item list; items themselves are never copied.
#include <algorithm>
#include <climits>
#include <optional>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;
using ir::TypeKind;

// ---- Type helpers ---------------------------------------------------------------------------

ir::TensorType typed(DataType dtype, Shape shape, TypeKind kind) {
  ir::TensorType t{dtype, std::move(shape)};
  t.kind = kind;
  return t;
}

// The common shape of two items: equal dims stay, differing ones become unknown.
Shape merge_item_shapes(const Shape& a, const Shape& b) {
  if (!a.has_rank() || !b.has_rank() || a.rank() != b.rank()) return Shape::unknown_rank();
  Shape out = a;
  for (int i = 0; i < a.rank(); ++i)
    if (!(a[i] == b[i])) out[i] = Dim();
  return out;
}

bool is_sequence_kind(TypeKind k) { return k == TypeKind::kSequence || k == TypeKind::kOptionalSequence; }

// ---- Kernel helpers -------------------------------------------------------------------------

Expected<const RuntimeValue*> sequence_input(const KernelContext& ctx, int i, const char* what) {
  const RuntimeValue* v = ctx.value(i);
  if (!v || !v->is_sequence())
    return invalid_argument("node %s: %s must be a sequence, got %s", ctx.node().label().c_str(), what,
                            v ? v->description().c_str() : "nothing");
  return v;
}

Expected<const Tensor*> tensor_input(const KernelContext& ctx, int i, const char* what) {
  const Tensor* t = ctx.input(i);
  if (!t) {
    const RuntimeValue* v = ctx.value(i);
    return invalid_argument("node %s: %s must be a tensor, got %s", ctx.node().label().c_str(), what,
                            v ? v->description().c_str() : "nothing");
  }
  return t;
}

// A position input in [-n, n - 1] (or [-n, n] when `allow_end`), as an index in [0, n].
Expected<int64_t> position(const KernelContext& ctx, const Tensor& t, int64_t n, bool allow_end) {
  const ir::Node& node = ctx.node();
  if (t.rank() != 0 && !(t.rank() == 1 && t.dim(0) == 1))
    return invalid_argument("node %s: position must be a scalar, got %s", node.label().c_str(),
                            t.description().c_str());
  KILN_ASSIGN_OR_RETURN(int64_t p, scalar_index(node, t, "position"));
  const int64_t hi = allow_end ? n : n - 1;
  if (p < -n || p > hi)
    return invalid_argument("node %s: position %lld is out of range [%lld, %lld] for a sequence of %lld items",
                            node.label().c_str(), (long long)p, (long long)-n, (long long)hi, (long long)n);
  return p < 0 ? p + n : p;
}

Status check_item_dtype(const ir::Node& node, DataType seq_dtype, const Tensor& t, const char* what) {
  if (seq_dtype != DataType::kUndefined && t.dtype() != seq_dtype)
    return invalid_argument("node %s: %s is %s, the sequence holds %s", node.label().c_str(), what,
                            t.description().c_str(), dtype_name(seq_dtype));
  return ok_status();
}

// Concatenates `items` along `axis`; with `new_axis` each item first gets an extent-1 axis
// at `axis` (so the result stacks them). Items must agree on dtype and on every other dim.
Expected<Tensor> concat_items(const ir::Node& node, const std::vector<Tensor>& items, int64_t axis_attr,
                              bool new_axis) {
  if (items.empty())
    return invalid_argument("node %s: cannot concatenate an empty sequence", node.label().c_str());
  const Tensor& first = items.front();
  const int rank = first.rank();
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, axis_attr, new_axis ? rank + 1 : rank));
  for (size_t k = 0; k < items.size(); ++k) {
    const Tensor& t = items[k];
    bool ok = t.dtype() == first.dtype() && t.rank() == rank;
    for (int d = 0; ok && d < rank; ++d)
      if ((new_axis || d != axis) && t.dim(d) != first.dim(d)) ok = false;
    if (!ok)
      return invalid_argument("node %s: item %zu is %s, item 0 is %s; they differ %s", node.label().c_str(), k,
                              t.description().c_str(), first.description().c_str(),
                              new_axis ? "(stacking needs equal shapes)" : "off the concatenation axis");
  }
  // Every item as [outer, extent along axis, inner]; with new_axis the extent is 1.
  std::vector<int64_t> out_dims = first.dims();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= first.dim(d);
  for (int d = new_axis ? axis : axis + 1; d < rank; ++d) inner *= first.dim(d);
  std::vector<int64_t> extents;
  int64_t total = 0;
  for (const Tensor& t : items) {
    extents.push_back(new_axis ? 1 : t.dim(axis));
    total += extents.back();
  }
  if (new_axis)
    out_dims.insert(out_dims.begin() + axis, total);
  else
    out_dims[static_cast<size_t>(axis)] = total;
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(first.dtype(), out_dims), "node %s", node.label().c_str());
  if (out.num_elements() == 0) return out;
  KILN_RETURN_IF_ERROR(dispatch_copy_type(node, first.dtype(), [&]<typename T>() {
    T* dst = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (size_t k = 0; k < items.size(); ++k) {
        const int64_t run = extents[k] * inner;
        copy_run(dst, items[k].data<T>() + o * run, run);
        dst += run;
      }
  }));
  return out;
}

// ---- SequenceEmpty, SequenceConstruct, SequenceLength ---------------------------------------

Expected<DataType> empty_dtype(const ir::Node& node) {
  const int64_t dt = node.attr_int("dtype", static_cast<int64_t>(DataType::kFloat32));
  if (dt < INT32_MIN || dt > INT32_MAX || !dtype_is_valid(static_cast<int32_t>(dt)) ||
      dt == static_cast<int64_t>(DataType::kUndefined))
    return invalid_argument("node %s: dtype %lld is not a valid data type", node.label().c_str(), (long long)dt);
  return static_cast<DataType>(dt);
}

Status infer_sequence_empty(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType dt, empty_dtype(ctx.node()));
  ctx.output(0) = typed(dt, Shape::unknown_rank(), TypeKind::kSequence);
  return ok_status();
}

Status sequence_empty_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType dt, empty_dtype(ctx.node()));
  ctx.set_output_value(0, RuntimeValue::sequence(dt, {}));
  return ok_status();
}

Status infer_sequence_construct(InferContext& ctx) {
  DataType dt = DataType::kUndefined;
  std::optional<Shape> shape;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const ir::TensorType& t = ctx.input_type(i);
    if (dt == DataType::kUndefined) dt = t.dtype;
    if (t.dtype != DataType::kUndefined && t.dtype != dt)
      return invalid_argument("node %s: input %d is %s, input 0 is %s; sequence items share one dtype",
                              ctx.node().label().c_str(), i, dtype_name(t.dtype), dtype_name(dt));
    shape = shape ? merge_item_shapes(*shape, t.shape) : t.shape;
  }
  ctx.output(0) = typed(dt, shape.value_or(Shape::unknown_rank()), TypeKind::kSequence);
  return ok_status();
}

Status sequence_construct_kernel(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, i, ("input " + std::to_string(i)).c_str()));
    if (!items.empty() && t->dtype() != items[0].dtype())
      return invalid_argument("node %s: input %d is %s, input 0 is %s; sequence items share one dtype",
                              ctx.node().label().c_str(), i, t->description().c_str(),
                              items[0].description().c_str());
    items.push_back(*t);
  }
  if (items.empty()) return invalid_argument("node %s has no inputs", ctx.node().label().c_str());
  const DataType dt = items[0].dtype();
  ctx.set_output_value(0, RuntimeValue::sequence(dt, std::move(items)));
  return ok_status();
}

Status infer_sequence_length(InferContext& ctx) {
  ctx.set_output(0, DataType::kInt64, Shape{});
  return ok_status();
}

Status sequence_length_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const RuntimeValue* seq, sequence_input(ctx, 0, "input_sequence"));
  ctx.set_output(0, Tensor::scalar<int64_t>(static_cast<int64_t>(seq->items().size())));
  return ok_status();
}

// ---- SequenceInsert, SequenceAt, SequenceErase ----------------------------------------------

Status infer_sequence_insert(InferContext& ctx) {
  const ir::TensorType& seq = ctx.input_type(0);
  const ir::TensorType& item = ctx.input_type(1);
  if (seq.dtype != DataType::kUndefined && item.dtype != DataType::kUndefined && seq.dtype != item.dtype)
    return invalid_argument("node %s: inserting %s into a sequence of %s", ctx.node().label().c_str(),
                            dtype_name(item.dtype), dtype_name(seq.dtype));
  const DataType dt = seq.dtype != DataType::kUndefined ? seq.dtype : item.dtype;
  // The sequence's item shape is unknown (unknown rank) when it may be empty, so a merge
  // with it stays unknown; that is the safe answer.
  ctx.output(0) = typed(dt, merge_item_shapes(seq.shape, item.shape), TypeKind::kSequence);
  return ok_status();
}

Status sequence_insert_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const RuntimeValue* seq, sequence_input(ctx, 0, "input_sequence"));
  KILN_ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, 1, "tensor"));
  KILN_RETURN_IF_ERROR(check_item_dtype(node, seq->sequence_dtype(), *t, "the inserted tensor"));
  std::vector<Tensor> items = seq->items();
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t pos = n;
  if (const Tensor* p = ctx.input(2)) {
    KILN_ASSIGN_OR_RETURN(pos, position(ctx, *p, n, /*allow_end=*/true));
  }
  items.insert(items.begin() + pos, *t);
  ctx.set_output_value(0, RuntimeValue::sequence(t->dtype(), std::move(items)));
  return ok_status();
}

Status infer_sequence_at(InferContext& ctx) {
  const ir::TensorType& seq = ctx.input_type(0);
  ctx.set_output(0, seq.dtype, seq.shape);
  return ok_status();
}

Status sequence_at_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const RuntimeValue* seq, sequence_input(ctx, 0, "input_sequence"));
  KILN_ASSIGN_OR_RETURN(const Tensor* p, tensor_input(ctx, 1, "position"));
  const int64_t n = static_cast<int64_t>(seq->items().size());
  KILN_ASSIGN_OR_RETURN(int64_t pos, position(ctx, *p, n, /*allow_end=*/false));
  ctx.set_output(0, seq->items()[static_cast<size_t>(pos)]);
  return ok_status();
}

Status infer_sequence_erase(InferContext& ctx) {
  ctx.output(0) = ctx.input_type(0);
  ctx.output(0).kind = TypeKind::kSequence;
  return ok_status();
}

Status sequence_erase_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const RuntimeValue* seq, sequence_input(ctx, 0, "input_sequence"));
  std::vector<Tensor> items = seq->items();
  const int64_t n = static_cast<int64_t>(items.size());
  if (n == 0) return invalid_argument("node %s: cannot erase from an empty sequence", ctx.node().label().c_str());
  int64_t pos = n - 1;
  if (const Tensor* p = ctx.input(1)) {
    KILN_ASSIGN_OR_RETURN(pos, position(ctx, *p, n, /*allow_end=*/false));
  }
  items.erase(items.begin() + pos);
  ctx.set_output_value(0, RuntimeValue::sequence(seq->sequence_dtype(), std::move(items)));
  return ok_status();
}

// ---- SplitToSequence ------------------------------------------------------------------------

// The chunk lengths along an axis of extent `dim`: all 1 without `split`; chunks of a
// scalar split's length (the last one shorter if it does not divide); or the 1-D list,
// which must sum to `dim`.
Expected<std::vector<int64_t>> chunk_lengths(const ir::Node& node, int64_t dim, const Tensor* split) {
  if (!split) return std::vector<int64_t>(static_cast<size_t>(dim), 1);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, index_values(node, *split, "split"));
  if (split->rank() == 0) {
    const int64_t len = v[0];
    if (len <= 0)
      return invalid_argument("node %s: split length %lld must be positive", node.label().c_str(), (long long)len);
    std::vector<int64_t> out(static_cast<size_t>(dim / len), len);
    if (dim % len) out.push_back(dim % len);
    return out;
  }
  if (split->rank() != 1)
    return invalid_argument("node %s: split must be a scalar or 1-D, got %s", node.label().c_str(),
                            split->description().c_str());
  int64_t sum = 0;
  for (int64_t len : v) {
    if (len < 0)
      return invalid_argument("node %s: split %s has a negative length", node.label().c_str(),
                              dims_to_string(v).c_str());
    if (len > dim || sum > dim - len)
      return invalid_argument("node %s: split %s exceeds the axis extent %lld", node.label().c_str(),
                              dims_to_string(v).c_str(), (long long)dim);
    sum += len;
  }
  if (sum != dim)
    return invalid_argument("node %s: split %s sums to %lld, the axis extent is %lld", node.label().c_str(),
                            dims_to_string(v).c_str(), (long long)sum, (long long)dim);
  return v;
}

Status infer_split_to_sequence(InferContext& ctx) {
  const ir::TensorType& x = ctx.input_type(0);
  Shape item = Shape::unknown_rank();
  if (x.shape.has_rank()) {
    if (x.shape.rank() == 0)
      return invalid_argument("node %s: cannot split a scalar", ctx.node().label().c_str());
    KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0), x.shape.rank()));
    item = x.shape;
    if (!ctx.has_input(1)) {
      if (ctx.node().attr_int("keepdims", 1) == 0)
        item.dims().erase(item.dims().begin() + axis);
      else
        item[axis] = Dim(1);
    } else {
      // Equal chunk lengths give a static extent; otherwise (or when unknown) it varies.
      std::optional<std::vector<int64_t>> split = constant_ints(ctx, 1);
      item[axis] = Dim();
      if (split && !split->empty() && x.shape[axis].is_static()) {
        const Tensor* st = ctx.input_constant(1);
        auto lengths = chunk_lengths(ctx.node(), x.shape[axis].value, st);
        if (lengths.ok() && !lengths->empty() &&
            std::all_of(lengths->begin(), lengths->end(), [&](int64_t l) { return l == lengths->front(); }))
          item[axis] = Dim(lengths->front());
      }
    }
  }
  ctx.output(0) = typed(x.dtype, std::move(item), TypeKind::kSequence);
  return ok_status();
}

Status split_to_sequence_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const Tensor* xp, tensor_input(ctx, 0, "input"));
  const Tensor& x = *xp;
  if (x.rank() == 0) return invalid_argument("node %s: cannot split a scalar", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", 0), x.rank()));
  const Tensor* split = ctx.input(1);
  const bool squeeze = !split && node.attr_int("keepdims", 1) == 0;
  const int64_t dim = x.dim(axis);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lengths, chunk_lengths(node, dim, split));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  std::vector<Tensor> items;
  items.reserve(lengths.size());
  int64_t offset = 0;
  for (int64_t len : lengths) {
    std::vector<int64_t> dims = x.dims();
    if (squeeze)
      dims.erase(dims.begin() + axis);
    else
      dims[static_cast<size_t>(axis)] = len;
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(x.dtype(), dims), "node %s", node.label().c_str());
    if (t.num_elements() > 0) {
      KILN_RETURN_IF_ERROR(dispatch_copy_type(node, x.dtype(), [&]<typename T>() {
        for (int64_t o = 0; o < outer; ++o)
          copy_run(t.data<T>() + o * len * inner, x.data<T>() + (o * dim + offset) * inner, len * inner);
      }));
    }
    offset += len;
    items.push_back(std::move(t));
  }
  ctx.set_output_value(0, RuntimeValue::sequence(x.dtype(), std::move(items)));
  return ok_status();
}

// ---- ConcatFromSequence ---------------------------------------------------------------------

Status infer_concat_from_sequence(InferContext& ctx) {
  const ir::TensorType& seq = ctx.input_type(0);
  const bool new_axis = ctx.node().attr_int("new_axis", 0) != 0;
  Shape out = Shape::unknown_rank();
  if (seq.shape.has_rank()) {
    const int rank = seq.shape.rank();
    KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0),
                                                   new_axis ? rank + 1 : rank));
    out = seq.shape;
    if (new_axis)
      out.dims().insert(out.dims().begin() + axis, Dim());
    else
      out[axis] = Dim();
  }
  ctx.set_output(0, seq.dtype, std::move(out));
  return ok_status();
}

Status concat_from_sequence_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const RuntimeValue* seq, sequence_input(ctx, 0, "input_sequence"));
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(Tensor out, concat_items(node, seq->items(), node.attr_int("axis", 0),
                                                 node.attr_int("new_axis", 0) != 0));
  ctx.set_output(0, std::move(out));
  return ok_status();
}

// ---- SequenceMap ----------------------------------------------------------------------------

Expected<const ir::Graph*> map_body(const ir::Node& node) {
  const ir::Attribute* a = node.attr("body");
  if (!a || a->kind != AttrKind::kGraph || !a->g)
    return invalid_argument("node %s has no graph attribute 'body'", node.label().c_str());
  return a->g.get();
}

Status infer_sequence_map(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, map_body(ctx.node()));
  if (static_cast<int>(body->outputs().size()) != ctx.num_outputs())
    return invalid_argument("node %s has %d outputs but its body has %zu", ctx.node().label().c_str(),
                            ctx.num_outputs(), body->outputs().size());
  for (int k = 0; k < ctx.num_outputs(); ++k) {
    const ir::TensorType& bt = body->outputs()[static_cast<size_t>(k)]->type();
    ctx.output(k) = typed(bt.dtype, bt.shape, TypeKind::kSequence);
  }
  return ok_status();
}

Status sequence_map_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, map_body(node));
  if (!ctx.subgraphs())
    return failed_precondition("node %s needs a runtime that executes subgraphs", node.label().c_str());
  const int n_in = ctx.num_inputs();
  const int n_out = ctx.num_outputs();
  if (static_cast<int>(body->inputs().size()) != n_in || static_cast<int>(body->outputs().size()) != n_out)
    return invalid_argument("node %s: body takes %zu inputs and gives %zu outputs; the node has %d and %d",
                            node.label().c_str(), body->inputs().size(), body->outputs().size(), n_in, n_out);
  KILN_ASSIGN_OR_RETURN(const RuntimeValue* seq0, sequence_input(ctx, 0, "input_sequence"));
  const size_t n = seq0->items().size();
  // Additional inputs: a sequence is mapped item by item (it must have the same length);
  // a tensor is passed whole to every iteration.
  std::vector<RuntimeValue> body_in(static_cast<size_t>(n_in));
  for (int j = 1; j < n_in; ++j) {
    const RuntimeValue* v = ctx.value(j);
    if (!v || v->is_none())
      return invalid_argument("node %s: additional input %d is missing", node.label().c_str(), j);
    if (v->is_sequence() && v->items().size() != n)
      return invalid_argument("node %s: input %d is a sequence of %zu items, input 0 has %zu", node.label().c_str(),
                              j, v->items().size(), n);
    if (v->is_tensor()) body_in[static_cast<size_t>(j)] = *v;
  }
  std::vector<std::vector<Tensor>> results(static_cast<size_t>(n_out));
  for (size_t i = 0; i < n; ++i) {
    body_in[0] = seq0->items()[i];
    for (int j = 1; j < n_in; ++j)
      if (ctx.value(j)->is_sequence()) body_in[static_cast<size_t>(j)] = ctx.value(j)->items()[i];
    KILN_ASSIGN_OR_RETURN(std::vector<RuntimeValue> outs, ctx.subgraphs()->run(*body, body_in),
                          "in iteration %zu of node %s", i, node.label().c_str());
    if (static_cast<int>(outs.size()) != n_out)
      return internal_error("node %s: body gave %zu outputs", node.label().c_str(), outs.size());
    for (int k = 0; k < n_out; ++k) {
      RuntimeValue& o = outs[static_cast<size_t>(k)];
      if (!o.is_tensor())
        return invalid_argument("node %s: body output %d is %s, expected a tensor", node.label().c_str(), k,
                                o.description().c_str());
      std::vector<Tensor>& r = results[static_cast<size_t>(k)];
      if (!r.empty() && o.tensor().dtype() != r[0].dtype())
        return invalid_argument("node %s: body output %d changes dtype from %s to %s", node.label().c_str(), k,
                                dtype_name(r[0].dtype()), dtype_name(o.tensor().dtype()));
      r.push_back(std::move(o.tensor()));
    }
  }
  for (int k = 0; k < n_out; ++k) {
    std::vector<Tensor>& r = results[static_cast<size_t>(k)];
    // An empty result takes the body's declared output dtype.
    const DataType dt = r.empty() ? body->outputs()[static_cast<size_t>(k)]->dtype() : r[0].dtype();
    ctx.set_output_value(k, RuntimeValue::sequence(dt, std::move(r)));
  }
  return ok_status();
}

// ---- Optional, OptionalHasElement, OptionalGetElement ---------------------------------------

// The optional of a tensor or sequence type (an optional type stays as it is).
TypeKind optional_of(TypeKind k) {
  return is_sequence_kind(k) ? TypeKind::kOptionalSequence : TypeKind::kOptionalTensor;
}

Status infer_optional(InferContext& ctx) {
  if (ctx.has_input(0)) {
    ctx.output(0) = ctx.input_type(0);
    ctx.output(0).kind = optional_of(ctx.input_type(0).kind);
    return ok_status();
  }
  // An empty Optional is typed by its 'type' attribute, which the frontend turned into
  // its output's type.
  const ir::Value* out = ctx.node().output(0);
  if (!out || out->type().is_tensor())
    return invalid_argument("node %s has no input and no type for its empty output", ctx.node().label().c_str());
  ctx.output(0) = out->type();
  return ok_status();
}

Status optional_kernel(KernelContext& ctx) {
  const RuntimeValue* v = ctx.value(0);
  ctx.set_output_value(0, v ? *v : RuntimeValue());
  return ok_status();
}

Status infer_optional_has_element(InferContext& ctx) {
  ctx.set_output(0, DataType::kBool, Shape{});
  return ok_status();
}

Status optional_has_element_kernel(KernelContext& ctx) {
  const RuntimeValue* v = ctx.value(0);
  ctx.set_output(0, Tensor::scalar<bool>(v != nullptr && !v->is_none()));
  return ok_status();
}

Status infer_optional_get_element(InferContext& ctx) {
  ctx.output(0) = ctx.input_type(0);
  ctx.output(0).kind = is_sequence_kind(ctx.input_type(0).kind) ? TypeKind::kSequence : TypeKind::kTensor;
  return ok_status();
}

Status optional_get_element_kernel(KernelContext& ctx) {
  const RuntimeValue* v = ctx.value(0);
  if (!v || v->is_none())
    return invalid_argument("node %s: the optional input is empty", ctx.node().label().c_str());
  ctx.set_output_value(0, *v);
  return ok_status();
}

// ---- Registration ---------------------------------------------------------------------------

KILN_REGISTER_OP(OpSchema("SequenceEmpty").since(11).inputs(0, 0).outputs(1, 1).attr("dtype", AttrKind::kInt)
                     .infer(infer_sequence_empty).kernel(sequence_empty_kernel));
KILN_REGISTER_OP(OpSchema("SequenceConstruct").since(11).inputs(1, -1).outputs(1, 1)
                     .infer(infer_sequence_construct).kernel(sequence_construct_kernel));
KILN_REGISTER_OP(OpSchema("SequenceInsert").since(11).inputs(2, 3).outputs(1, 1).infer(infer_sequence_insert)
                     .kernel(sequence_insert_kernel));
KILN_REGISTER_OP(OpSchema("SequenceAt").since(11).inputs(2, 2).outputs(1, 1).infer(infer_sequence_at)
                     .kernel(sequence_at_kernel));
KILN_REGISTER_OP(OpSchema("SequenceErase").since(11).inputs(1, 2).outputs(1, 1).infer(infer_sequence_erase)
                     .kernel(sequence_erase_kernel));
KILN_REGISTER_OP(OpSchema("SequenceLength").since(11).inputs(1, 1).outputs(1, 1).infer(infer_sequence_length)
                     .kernel(sequence_length_kernel));
KILN_REGISTER_OP(OpSchema("SplitToSequence").since(11).inputs(1, 2).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .attr("keepdims", AttrKind::kInt).infer(infer_split_to_sequence)
                     .kernel(split_to_sequence_kernel));
KILN_REGISTER_OP(OpSchema("ConcatFromSequence").since(11).inputs(1, 1).outputs(1, 1)
                     .required_attr("axis", AttrKind::kInt).attr("new_axis", AttrKind::kInt)
                     .infer(infer_concat_from_sequence).kernel(concat_from_sequence_kernel));
KILN_REGISTER_OP(OpSchema("SequenceMap").since(17).inputs(1, -1).outputs(1, -1)
                     .required_attr("body", AttrKind::kGraph).infer(infer_sequence_map).kernel(sequence_map_kernel));
// Optional's 'type' attribute is a TypeProto: the frontend turns it into the output's type.
KILN_REGISTER_OP(OpSchema("Optional").since(15).inputs(0, 1).outputs(1, 1).infer(infer_optional)
                     .kernel(optional_kernel));
// From opset 18 the input may be omitted (an empty optional) or a plain tensor or sequence.
KILN_REGISTER_OP(OpSchema("OptionalHasElement").since(15, 17).inputs(1, 1).outputs(1, 1)
                     .infer(infer_optional_has_element).kernel(optional_has_element_kernel));
KILN_REGISTER_OP(OpSchema("OptionalHasElement").since(18).inputs(0, 1).outputs(1, 1)
                     .infer(infer_optional_has_element).kernel(optional_has_element_kernel));
KILN_REGISTER_OP(OpSchema("OptionalGetElement").since(15).inputs(1, 1).outputs(1, 1)
                     .infer(infer_optional_get_element).kernel(optional_get_element_kernel));

}  // namespace
}  // namespace kiln::ops
