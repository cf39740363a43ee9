// Helpers shared by op families.
#include "ops/op_util.h"

#include <algorithm>

namespace kiln::ops {

Expected<int> normalize_axis(const ir::Node& node, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    return invalid_argument("node %s: axis %lld is out of range for rank %d", node.label().c_str(),
                            (long long)axis, rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Expected<std::vector<int64_t>> broadcast_dims(const ir::Node& node, const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return invalid_argument("node %s: shapes %s and %s do not broadcast", node.label().c_str(),
                              dims_to_string(a).c_str(), dims_to_string(b).c_str());
    }
  }
  return out;
}

Expected<Shape> broadcast_shapes(const ir::Node& node, const Shape& a, const Shape& b) {
  if (!a.has_rank() || !b.has_rank()) return Shape::unknown_rank();
  int rank = std::max(a.rank(), b.rank());
  std::vector<Dim> out(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    Dim da = i < rank - a.rank() ? Dim(1) : a[i - (rank - a.rank())];
    Dim db = i < rank - b.rank() ? Dim(1) : b[i - (rank - b.rank())];
    Dim& o = out[static_cast<size_t>(i)];
    if (da.is_static() && db.is_static()) {
      if (da.value == db.value || db.value == 1) {
        o = da;
      } else if (da.value == 1) {
        o = db;
      } else {
        return invalid_argument("node %s: shapes %s and %s do not broadcast", node.label().c_str(),
                                a.to_string().c_str(), b.to_string().c_str());
      }
    } else if (da.is_static()) {
      o = da.value == 1 ? db : da;
    } else if (db.is_static()) {
      o = db.value == 1 ? da : db;
    } else {
      o = da == db ? da : Dim();
    }
  }
  return Shape(std::move(out));
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims) {
  std::vector<int64_t> out(out_dims.size(), 0);
  std::vector<int64_t> in = contiguous_strides(in_dims);
  size_t off = out_dims.size() - in_dims.size();
  for (size_t i = 0; i < in_dims.size(); ++i) out[i + off] = in_dims[i] == 1 ? 0 : in[i];
  return out;
}

Status infer_same_as_input(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  ctx.output(0) = ctx.input_type(0);
  return ok_status();
}

Status infer_broadcast(InferContext& ctx) {
  Shape shape;
  bool first = true;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (first) {
      shape = ctx.input_type(i).shape;
      first = false;
      continue;
    }
    KILN_ASSIGN_OR_RETURN(shape, broadcast_shapes(ctx.node(), shape, ctx.input_type(i).shape));
  }
  ctx.set_output(0, ctx.has_input(0) ? ctx.input_type(0).dtype : DataType::kUndefined, shape);
  return ok_status();
}

Status infer_broadcast_bool(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(infer_broadcast(ctx));
  ctx.output(0).dtype = DataType::kBool;
  return ok_status();
}

std::optional<std::vector<int64_t>> constant_ints(const InferContext& ctx, int i) {
  const Tensor* t = ctx.input_constant(i);
  if (!t || (t->dtype() != DataType::kInt64 && t->dtype() != DataType::kInt32)) return std::nullopt;
  return t->to_int64_vector();
}

Shape unknown_dims(int64_t rank) { return Shape(std::vector<Dim>(static_cast<size_t>(std::max<int64_t>(rank, 0)))); }

Expected<std::vector<int64_t>> int_list_input(const KernelContext& ctx, int i) {
  const Tensor* t = ctx.input(i);
  if (!t) return std::vector<int64_t>{};
  if (t->dtype() != DataType::kInt64 && t->dtype() != DataType::kInt32)
    return invalid_argument("node %s: input %d must be int64, got %s", ctx.node().label().c_str(), i,
                            dtype_name(t->dtype()));
  return t->to_int64_vector();
}

}  // namespace kiln::ops
