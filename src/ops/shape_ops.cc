// Shape ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Identity,
// Dropout (inference), ConstantOfShape, Constant, Range, EyeLike. Schema, inference and
// reference kernel of each. Ops that only relabel dims return views of their input.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// Length of a 1-D input when its shape is known, else -1.
int64_t static_length_1d(const InferContext& ctx, int i) {
  if (!ctx.has_input(i)) return -1;
  const Shape& s = ctx.input_type(i).shape;
  if (!s.has_rank() || s.rank() != 1 || !s[0].is_static()) return -1;
  return s[0].value;
}

// ---- Shape, Size ----------------------------------------------------------------------

// Shape-15 start/end: clamp into [0, rank] after adding rank to negatives.
std::pair<int64_t, int64_t> shape_range(const ir::Node& node, int64_t rank) {
  if (node.opset() < 15) return {0, rank};
  int64_t start = node.attr_int("start", 0);
  int64_t end = node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  return {start, std::max(start, end)};
}

Status infer_shape(InferContext& ctx) {
  const Shape& in = ctx.input_type(0).shape;
  if (!in.has_rank()) {
    ctx.set_output(0, DataType::kInt64, unknown_dims(1));
    return ok_status();
  }
  auto [start, end] = shape_range(ctx.node(), in.rank());
  ctx.set_output(0, DataType::kInt64, Shape{Dim(end - start)});
  return ok_status();
}

Status shape_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  auto [start, end] = shape_range(ctx.node(), x.rank());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt64, {end - start}));
  for (int64_t i = start; i < end; ++i) y->data<int64_t>()[i - start] = x.dim(static_cast<int>(i));
  return ok_status();
}

Status infer_size(InferContext& ctx) {
  ctx.set_output(0, DataType::kInt64, Shape{});
  return ok_status();
}

Status size_kernel(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<int64_t>(ctx.input(0)->num_elements()));
  return ok_status();
}

// ---- Reshape ----------------------------------------------------------------------------

// Resolves a Reshape target against the input dims (unknown input dims are -1 and
// make dependent output dims unknown, also -1). Validates 0/-1 use and the element count.
Expected<std::vector<int64_t>> reshape_dims(const ir::Node& node, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& target, bool in_known) {
  const bool allowzero = node.opset() >= 14 && node.attr_int("allowzero", 0) != 0;
  std::vector<int64_t> out(target.size());
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == -1) {
      if (infer_at >= 0)
        return invalid_argument("node %s: shape %s has more than one -1", node.label().c_str(),
                                dims_to_string(target).c_str());
      infer_at = static_cast<int>(i);
      out[i] = -1;
    } else if (t == 0 && !allowzero) {
      if (in_known && i >= in.size())
        return invalid_argument("node %s: shape %s copies dim %zu (0) but the input %s has rank %zu",
                                node.label().c_str(), dims_to_string(target).c_str(), i,
                                dims_to_string(in).c_str(), in.size());
      out[i] = i < in.size() ? in[i] : -1;
    } else if (t < 0) {
      return invalid_argument("node %s: shape %s has negative dim %lld", node.label().c_str(),
                              dims_to_string(target).c_str(), (long long)t);
    } else {
      has_zero |= t == 0;
      out[i] = t;
    }
  }
  if (allowzero && has_zero && infer_at >= 0)
    return invalid_argument("node %s: shape %s has both 0 and -1 with allowzero=1", node.label().c_str(),
                            dims_to_string(target).c_str());
  int64_t in_count = 1;
  bool in_static = in_known;
  for (int64_t d : in) {
    if (d < 0) in_static = false;
    else in_count *= d;
  }
  int64_t known = 1;
  bool out_static = true;
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == infer_at) continue;
    if (out[i] < 0) out_static = false;
    else known *= out[i];
  }
  if (!in_static) return out;
  if (infer_at >= 0) {
    if (!out_static) return out;
    if (known == 0 || in_count % known != 0)
      return invalid_argument("node %s: cannot reshape %s (%lld elements) to %s", node.label().c_str(),
                              dims_to_string(in).c_str(), (long long)in_count, dims_to_string(target).c_str());
    out[static_cast<size_t>(infer_at)] = in_count / known;
  } else if (out_static && known != in_count) {
    return invalid_argument("node %s: cannot reshape %s (%lld elements) to %s (%lld elements)",
                            node.label().c_str(), dims_to_string(in).c_str(), (long long)in_count,
                            dims_to_string(target).c_str(), (long long)known);
  }
  return out;
}

Shape shape_from_maybe_dims(const std::vector<int64_t>& dims) {
  std::vector<Dim> out;
  for (int64_t d : dims) out.push_back(d >= 0 ? Dim(d) : Dim());
  return Shape(std::move(out));
}

// Input dims as int64 with -1 for unknown ones (symbols are carried separately).
std::vector<int64_t> maybe_dims(const Shape& s) {
  std::vector<int64_t> out;
  for (const Dim& d : s.dims()) out.push_back(d.is_static() ? d.value : -1);
  return out;
}

// The one open output dim of a Reshape whose input has named open dims: what is left of the
// input's extents once the output's known ones are divided out. [B, S, 12, 64] -> [0, 0, -1]
// gives [B, S, 768]; [B, 120, 1, W] -> [0, 120, -1] gives [B, 120, W]. Left unknown unless
// exactly one symbol (and no static factor) or only a static extent remains.
void resolve_symbolic_infer_dim(const Shape& in, Shape* out) {
  if (!in.has_rank()) return;
  int open_at = -1;
  for (int i = 0; i < out->rank(); ++i) {
    const Dim& d = (*out)[i];
    if (d.is_static() || !d.symbol.empty()) continue;
    if (open_at >= 0) return;  // two unknown dims
    open_at = i;
  }
  if (open_at < 0) return;
  std::vector<std::string> symbols;  // the input's open dims, by name
  int64_t in_static = 1;
  for (const Dim& d : in.dims()) {
    if (d.is_static()) in_static *= d.value;
    else if (d.symbol.empty()) return;
    else symbols.push_back(d.symbol);
  }
  int64_t out_static = 1;
  for (int i = 0; i < out->rank(); ++i) {
    if (i == open_at) continue;
    const Dim& d = (*out)[i];
    if (d.is_static()) {
      out_static *= d.value;
      continue;
    }
    auto it = std::find(symbols.begin(), symbols.end(), d.symbol);
    if (it == symbols.end()) return;  // an output symbol the input does not have
    symbols.erase(it);
  }
  if (out_static == 0 || in_static % out_static != 0) return;
  const int64_t rest = in_static / out_static;
  if (symbols.empty()) (*out)[open_at] = Dim(rest);
  else if (symbols.size() == 1 && rest == 1) (*out)[open_at] = Dim::symbolic(symbols[0]);
}

// Opsets 1-4 take the target shape from the `shape` attribute instead of input 1.
std::optional<std::vector<int64_t>> reshape_target(const InferContext& ctx) {
  if (ctx.node().opset() < 5) return ctx.node().attr_ints("shape");
  return constant_ints(ctx, 1);
}

Status infer_reshape(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (auto target = reshape_target(ctx)) {
    std::vector<int64_t> in_dims = in.shape.has_rank() ? maybe_dims(in.shape) : std::vector<int64_t>{};
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out,
                          reshape_dims(ctx.node(), in_dims, *target, in.shape.has_rank()));
    Shape s = shape_from_maybe_dims(out);
    // A copied dim (0) keeps its symbol ("batch").
    const bool allowzero = ctx.node().opset() >= 14 && ctx.node().attr_int("allowzero", 0) != 0;
    for (size_t i = 0; i < target->size(); ++i)
      if ((*target)[i] == 0 && !allowzero && in.shape.has_rank() && static_cast<int>(i) < in.shape.rank())
        s[static_cast<int>(i)] = in.shape[static_cast<int>(i)];
    resolve_symbolic_infer_dim(in.shape, &s);
    ctx.set_output(0, in.dtype, std::move(s));
    return ok_status();
  }
  int64_t n = static_length_1d(ctx, 1);
  ctx.set_output(0, in.dtype, n >= 0 ? unknown_dims(n) : Shape::unknown_rank());
  return ok_status();
}

Status reshape_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> target = ctx.node().attr_ints("shape");
  if (ctx.opset() >= 5) {
    const Tensor* shape = ctx.input(1);
    if (!shape) return invalid_argument("node %s: the shape input is missing", ctx.node().label().c_str());
    if (shape->rank() != 1)
      return invalid_argument("node %s: shape input must be 1-D, got %s", ctx.node().label().c_str(),
                              dims_to_string(shape->dims()).c_str());
    KILN_ASSIGN_OR_RETURN(target, index_values(ctx.node(), *shape, "shape"));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out, reshape_dims(ctx.node(), x.dims(), target, true));
  ctx.set_output(0, x.reshaped(std::move(out)));
  return ok_status();
}

// ---- Flatten ------------------------------------------------------------------------------

Expected<int> flatten_axis(const ir::Node& node, int rank) {
  int64_t axis = node.attr_int("axis", 1);
  if (axis < -rank || axis > rank)
    return invalid_argument("node %s: axis %lld is out of range for rank %d", node.label().c_str(),
                            (long long)axis, rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Status infer_flatten(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, unknown_dims(2));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int axis, flatten_axis(ctx.node(), in.shape.rank()));
  Dim a(1), b(1);
  for (int i = 0; i < in.shape.rank(); ++i) {
    Dim& acc = i < axis ? a : b;
    const Dim& d = in.shape[i];
    if (acc.is_static() && d.is_static()) {
      acc.value *= d.value;
    } else if (acc.is_static() && acc.value == 1 && d.value != 0) {
      acc = d;  // a single symbolic factor keeps its name
    } else {
      acc = Dim();
    }
  }
  ctx.set_output(0, in.dtype, Shape{a, b});
  return ok_status();
}

Status flatten_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(int axis, flatten_axis(ctx.node(), x.rank()));
  int64_t a = 1;
  for (int i = 0; i < axis; ++i) a *= x.dim(i);
  int64_t b = 1;
  for (int i = axis; i < x.rank(); ++i) b *= x.dim(i);
  ctx.set_output(0, x.reshaped({a, b}));
  return ok_status();
}

// ---- Squeeze, Unsqueeze ------------------------------------------------------------------

// Axes from the attribute (opset < 13) or input 1 (13+). `known` false when the input
// is not a compile-time constant (inference only).
struct AxesArg {
  bool given = false;
  bool known = true;   // values known (false: a runtime input)
  int64_t count = -1;  // number of axes when known, even if the values are not
  std::vector<int64_t> axes;
};

AxesArg axes_for_infer(const InferContext& ctx) {
  AxesArg a;
  if (ctx.node().opset() < 13) {
    if (const ir::Attribute* at = ctx.node().attr("axes")) {
      a.given = true;
      a.axes = at->ints;
      a.count = static_cast<int64_t>(a.axes.size());
    }
    return a;
  }
  if (!ctx.has_input(1)) return a;
  a.given = true;
  if (auto v = constant_ints(ctx, 1)) {
    a.axes = *v;
    a.count = static_cast<int64_t>(a.axes.size());
  } else {
    a.known = false;
    a.count = static_length_1d(ctx, 1);
  }
  return a;
}

Expected<AxesArg> axes_for_kernel(const KernelContext& ctx) {
  AxesArg a;
  if (ctx.opset() < 13) {
    if (const ir::Attribute* at = ctx.node().attr("axes")) {
      a.given = true;
      a.axes = at->ints;
    }
    return a;
  }
  if (!ctx.input(1)) return a;
  a.given = true;
  KILN_ASSIGN_OR_RETURN(a.axes, index_values(ctx.node(), *ctx.input(1), "axes"));
  return a;
}

// Normalised, duplicate-free axes for a rank.
Expected<std::vector<int>> normalize_axes(const ir::Node& node, const std::vector<int64_t>& axes, int rank) {
  std::vector<int> out;
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int n, normalize_axis(node, a, rank));
    if (std::find(out.begin(), out.end(), n) != out.end())
      return invalid_argument("node %s: axis %lld is repeated", node.label().c_str(), (long long)a);
    out.push_back(n);
  }
  return out;
}

Expected<std::vector<int64_t>> squeeze_dims(const ir::Node& node, const std::vector<int64_t>& in,
                                            const AxesArg& axes) {
  std::vector<int64_t> out;
  if (!axes.given) {
    for (int64_t d : in)
      if (d != 1) out.push_back(d);
    return out;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int> ax, normalize_axes(node, axes.axes, static_cast<int>(in.size())));
  for (int a : ax)
    if (in[static_cast<size_t>(a)] != 1 && in[static_cast<size_t>(a)] >= 0)
      return invalid_argument("node %s: cannot squeeze axis %d of shape %s (extent is not 1)",
                              node.label().c_str(), a, dims_to_string(in).c_str());
  for (size_t i = 0; i < in.size(); ++i)
    if (std::find(ax.begin(), ax.end(), static_cast<int>(i)) == ax.end()) out.push_back(in[i]);
  return out;
}

Status infer_squeeze(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  AxesArg axes = axes_for_infer(ctx);
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  if (axes.given && !axes.known) {
    ctx.set_output(0, in.dtype,
                   axes.count >= 0 ? unknown_dims(in.shape.rank() - axes.count) : Shape::unknown_rank());
    return ok_status();
  }
  if (!axes.given) {
    // Without axes every extent-1 dim goes; an unknown dim might be 1.
    std::vector<Dim> out;
    for (const Dim& d : in.shape.dims()) {
      if (!d.is_static()) {
        ctx.set_output(0, in.dtype, Shape::unknown_rank());
        return ok_status();
      }
      if (d.value != 1) out.push_back(d);
    }
    ctx.set_output(0, in.dtype, Shape(std::move(out)));
    return ok_status();
  }
  // Validates the axes (extent 1 where known); symbols are kept below.
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, squeeze_dims(ctx.node(), maybe_dims(in.shape), axes));
  (void)dims;
  KILN_ASSIGN_OR_RETURN(std::vector<int> ax, normalize_axes(ctx.node(), axes.axes, in.shape.rank()));
  std::vector<Dim> out;
  for (int i = 0; i < in.shape.rank(); ++i)
    if (std::find(ax.begin(), ax.end(), i) == ax.end()) out.push_back(in.shape[i]);
  ctx.set_output(0, in.dtype, Shape(std::move(out)));
  return ok_status();
}

Status squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(AxesArg axes, axes_for_kernel(ctx));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out, squeeze_dims(ctx.node(), x.dims(), axes));
  ctx.set_output(0, x.reshaped(std::move(out)));
  return ok_status();
}

// Output dims of Unsqueeze; `in` entries may be Dim() (inference).
Expected<std::vector<Dim>> unsqueeze_dims(const ir::Node& node, const std::vector<Dim>& in,
                                          const std::vector<int64_t>& axes) {
  const int out_rank = static_cast<int>(in.size() + axes.size());
  KILN_ASSIGN_OR_RETURN(std::vector<int> ax, normalize_axes(node, axes, out_rank));
  std::vector<Dim> out;
  size_t k = 0;
  for (int i = 0; i < out_rank; ++i) {
    if (std::find(ax.begin(), ax.end(), i) != ax.end()) out.push_back(Dim(1));
    else out.push_back(in[k++]);
  }
  return out;
}

Status infer_unsqueeze(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  AxesArg axes = axes_for_infer(ctx);
  if (!in.shape.has_rank() || (ctx.node().opset() >= 13 && !axes.given)) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  if (!axes.known) {
    ctx.set_output(0, in.dtype,
                   axes.count >= 0 ? unknown_dims(in.shape.rank() + axes.count) : Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Dim> out, unsqueeze_dims(ctx.node(), in.shape.dims(), axes.axes));
  ctx.set_output(0, in.dtype, Shape(std::move(out)));
  return ok_status();
}

Status unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(AxesArg axes, axes_for_kernel(ctx));
  if (!axes.given) return invalid_argument("node %s: axes are required", ctx.node().label().c_str());
  std::vector<Dim> in(x.dims().begin(), x.dims().end());
  KILN_ASSIGN_OR_RETURN(std::vector<Dim> out, unsqueeze_dims(ctx.node(), in, axes.axes));
  std::vector<int64_t> dims;
  for (const Dim& d : out) dims.push_back(d.value);
  ctx.set_output(0, x.reshaped(std::move(dims)));
  return ok_status();
}

// ---- Expand ---------------------------------------------------------------------------------

Status infer_expand(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (auto target = constant_ints(ctx, 1)) {
    for (int64_t d : *target)
      if (d < 0)
        return invalid_argument("node %s: shape %s has a negative dim", ctx.node().label().c_str(),
                                dims_to_string(*target).c_str());
    KILN_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(ctx.node(), in.shape, Shape::from_static(*target)));
    ctx.set_output(0, in.dtype, std::move(s));
    return ok_status();
  }
  int64_t n = static_length_1d(ctx, 1);
  if (n >= 0 && in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, unknown_dims(std::max<int64_t>(n, in.shape.rank())));
  } else {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
  }
  return ok_status();
}

Status expand_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor* shape = ctx.input(1);
  if (!shape || shape->rank() != 1)
    return invalid_argument("node %s: shape input must be a 1-D tensor", ctx.node().label().c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> target, index_values(ctx.node(), *shape, "shape"));
  for (int64_t d : target)
    if (d < 0)
      return invalid_argument("node %s: shape %s has a negative dim", ctx.node().label().c_str(),
                              dims_to_string(target).c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out, broadcast_dims(ctx.node(), x.dims(), target));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out));
  return strided_copy_tensor(ctx.node(), x, 0, *y, out, broadcast_strides(x.dims(), out));
}

// ---- Identity, Dropout -------------------------------------------------------------------

// Passes any value through: a tensor (sharing its storage), a sequence or an optional.
Status identity_kernel(KernelContext& ctx) {
  const RuntimeValue* v = ctx.value(0);
  if (!v) return invalid_argument("node %s: input is missing", ctx.node().label().c_str());
  ctx.set_output_value(0, *v);
  return ok_status();
}

DataType dropout_mask_dtype(const ir::Node& node, DataType in) {
  return node.opset() >= 10 ? DataType::kBool : in;
}

Status infer_dropout(InferContext& ctx) {
  ctx.output(0) = ctx.input_type(0);
  if (ctx.num_outputs() > 1)
    ctx.set_output(1, dropout_mask_dtype(ctx.node(), ctx.input_type(0).dtype), ctx.input_type(0).shape);
  return ok_status();
}

// Training-mode Dropout: keeps x / (1 - ratio) where u >= ratio, u uniform in [0, 1) drawn
// per element in row-major order from MT19937 seeded with `seed` and turned into doubles
// as NumPy's legacy RandomState does, so a seeded node gives the ONNX reference's mask.
// Without a seed the generator is seeded from std::random_device.
Status dropout_training(KernelContext& ctx, const Tensor& x, double ratio) {
  const ir::Node& node = ctx.node();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return invalid_argument("node %s: ratio %g must be in [0, 1)", node.label().c_str(), ratio);
  const DataType t = x.dtype();
  if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16 && t != DataType::kBFloat16)
    return invalid_argument("node %s: dtype %s is not supported", node.label().c_str(), dtype_name(t));
  std::mt19937 gen(node.has_attr("seed") ? static_cast<uint32_t>(node.attr_int("seed", 0)) : std::random_device{}());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, t, x.dims()));
  Tensor* mask = nullptr;
  if (ctx.num_outputs() > 1 && node.outputs()[1]) {
    KILN_ASSIGN_OR_RETURN(mask, ctx.allocate_output(1, DataType::kBool, x.dims()));
  }
  const double scale = 1.0 / (1.0 - ratio);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const uint32_t a = gen() >> 5, b = gen() >> 6;
    const double u = (a * 67108864.0 + b) / 9007199254740992.0;
    const bool keep = u >= ratio;
    if (mask) mask->data<bool>()[i] = keep;
    switch (t) {
      case DataType::kFloat32:
        y->data<float>()[i] = keep ? x.data<float>()[i] / static_cast<float>(1.0 - ratio) : 0.0f;
        break;
      case DataType::kFloat64:
        y->data<double>()[i] = keep ? x.data<double>()[i] * scale : 0.0;
        break;
      case DataType::kFloat16:
        y->data<uint16_t>()[i] = float_to_fp16(keep ? static_cast<float>(x.element_as_double(i) * scale) : 0.0f);
        break;
      default:
        y->data<uint16_t>()[i] = float_to_bf16(keep ? static_cast<float>(x.element_as_double(i) * scale) : 0.0f);
        break;
    }
  }
  return ok_status();
}

Status dropout_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  if (ctx.opset() >= 12 && ctx.input(2)) {
    const Tensor& training = *ctx.input(2);
    if (training.num_elements() != 1 || training.dtype() != DataType::kBool)
      return invalid_argument("node %s: training_mode must be a bool scalar", ctx.node().label().c_str());
    double ratio = ctx.input(1) && ctx.input(1)->num_elements() == 1 ? ctx.input(1)->element_as_double(0) : 0.5;
    if (training.data<bool>()[0] && ratio != 0.0) return dropout_training(ctx, x, ratio);
  }
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) {
    DataType mt = dropout_mask_dtype(ctx.node(), x.dtype());
    KILN_ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output(1, mt, x.dims()));
    if (mt == DataType::kBool) {
      std::fill_n(mask->data<bool>(), mask->num_elements(), true);
    } else {
      // Opset 7-9 typed the mask like the input; every element is kept (1).
      for (int64_t i = 0; i < mask->num_elements(); ++i) {
        switch (mt) {
          case DataType::kFloat32: mask->data<float>()[i] = 1.0f; break;
          case DataType::kFloat64: mask->data<double>()[i] = 1.0; break;
          case DataType::kFloat16: mask->data<uint16_t>()[i] = float_to_fp16(1.0f); break;
          case DataType::kBFloat16: mask->data<uint16_t>()[i] = float_to_bf16(1.0f); break;
          default:
            return unsupported("node %s: dtype %s", ctx.node().label().c_str(), dtype_name(mt));
        }
      }
    }
  }
  return ok_status();
}

// ---- ConstantOfShape, Constant --------------------------------------------------------------

Expected<Tensor> constant_of_shape_value(const ir::Node& node) {
  const ir::Attribute* a = node.attr("value");
  if (!a) return Tensor::scalar<float>(0.0f);
  if (a->kind != AttrKind::kTensor || a->t.num_elements() != 1)
    return invalid_argument("node %s: 'value' must be a one-element tensor", node.label().c_str());
  return a->t;
}

Status infer_constant_of_shape(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Tensor value, constant_of_shape_value(ctx.node()));
  if (auto target = constant_ints(ctx, 0)) {
    for (int64_t d : *target)
      if (d < 0)
        return invalid_argument("node %s: shape %s has a negative dim", ctx.node().label().c_str(),
                                dims_to_string(*target).c_str());
    ctx.set_output(0, value.dtype(), Shape::from_static(*target));
    return ok_status();
  }
  int64_t n = static_length_1d(ctx, 0);
  ctx.set_output(0, value.dtype(), n >= 0 ? unknown_dims(n) : Shape::unknown_rank());
  return ok_status();
}

// Fills every element of `t` with element 0 of `value` (same dtype).
Status fill_with(const ir::Node& node, Tensor& t, const Tensor& value) {
  return dispatch_copy_type(node, t.dtype(), [&]<typename T>() {
    const T v = value.data<T>()[0];
    std::fill_n(t.data<T>(), t.num_elements(), v);
  });
}

Status constant_of_shape_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Tensor value, constant_of_shape_value(ctx.node()));
  const Tensor& shape = *ctx.input(0);
  if (shape.rank() != 1)
    return invalid_argument("node %s: shape input must be 1-D, got %s", ctx.node().label().c_str(),
                            dims_to_string(shape.dims()).c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, index_values(ctx.node(), shape, "shape"));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, value.dtype(), dims));
  return fill_with(ctx.node(), *y, value);
}

// The value a Constant node holds, from whichever one attribute is set.
Expected<Tensor> constant_value(const ir::Node& node) {
  static const char* const kNames[] = {"value",       "value_float", "value_floats", "value_int",
                                       "value_ints",  "value_string", "value_strings", "sparse_value"};
  const ir::Attribute* found = nullptr;
  std::string which;
  for (const char* n : kNames) {
    if (const ir::Attribute* a = node.attr(n)) {
      if (found)
        return invalid_argument("node %s sets both '%s' and '%s'; exactly one is allowed",
                                node.label().c_str(), which.c_str(), n);
      found = a;
      which = n;
    }
  }
  if (!found) return invalid_argument("node %s has no value attribute", node.label().c_str());
  auto kind_error = [&]() {
    return invalid_argument("node %s: attribute '%s' has kind %s", node.label().c_str(), which.c_str(),
                            ir::attr_kind_name(found->kind));
  };
  if (which == "sparse_value")
    return unsupported("node %s: sparse_value constants are not supported", node.label().c_str());
  if (which == "value") {
    if (found->kind != AttrKind::kTensor || !found->t.defined()) return kind_error();
    return found->t;
  }
  if (which == "value_float") {
    if (found->kind == AttrKind::kFloat) return Tensor::scalar<float>(found->f);
    if (found->kind == AttrKind::kInt) return Tensor::scalar<float>(static_cast<float>(found->i));
    return kind_error();
  }
  if (which == "value_floats") {
    if (found->kind != AttrKind::kFloats) return kind_error();
    return Tensor::from_vector<float>(found->floats);
  }
  if (which == "value_int") {
    if (found->kind != AttrKind::kInt) return kind_error();
    return Tensor::scalar<int64_t>(found->i);
  }
  if (which == "value_ints") {
    if (found->kind != AttrKind::kInts) return kind_error();
    return Tensor::from_vector<int64_t>(found->ints);
  }
  if (which == "value_string") {
    if (found->kind != AttrKind::kString) return kind_error();
    return Tensor::scalar<std::string>(found->s);
  }
  if (found->kind != AttrKind::kStrings) return kind_error();
  return Tensor::from_vector<std::string>(found->strings);
}

Status infer_constant(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Tensor v, constant_value(ctx.node()));
  ctx.set_output(0, v.dtype(), v.shape());
  return ok_status();
}

Status constant_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Tensor v, constant_value(ctx.node()));
  ctx.set_output(0, std::move(v));
  return ok_status();
}

// ---- Range ------------------------------------------------------------------------------------

bool range_dtype_ok(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16 || t == DataType::kInt16 || t == DataType::kInt32 || t == DataType::kInt64;
}

// Element count max(ceil((limit - start) / delta), 0), validated.
Expected<int64_t> range_count(const ir::Node& node, double start, double limit, double delta, bool integral,
                              int64_t istart, int64_t ilimit, int64_t idelta) {
  if (delta == 0) return invalid_argument("node %s: delta is 0", node.label().c_str());
  double n;
  if (integral) {
    // Exact integer ceil division avoids double rounding on large int64 values.
    __int128 span = static_cast<__int128>(ilimit) - istart;
    __int128 q = span / idelta;
    if ((span % idelta != 0) && ((span < 0) == (idelta < 0))) ++q;
    n = static_cast<double>(q);
  } else {
    n = std::ceil((limit - start) / delta);
  }
  if (!(n >= 0)) n = 0;  // also catches NaN
  if (n > static_cast<double>(std::numeric_limits<int32_t>::max()))
    return invalid_argument("node %s: range of %.0f elements is too large", node.label().c_str(), n);
  return static_cast<int64_t>(n);
}

Status infer_range(InferContext& ctx) {
  DataType t = ctx.input_type(0).dtype;
  const Tensor* s = ctx.input_constant(0);
  const Tensor* l = ctx.input_constant(1);
  const Tensor* d = ctx.input_constant(2);
  if (s && l && d && s->num_elements() == 1 && l->num_elements() == 1 && d->num_elements() == 1 &&
      range_dtype_ok(s->dtype())) {
    bool integral = dtype_is_integer(s->dtype());
    KILN_ASSIGN_OR_RETURN(int64_t n, range_count(ctx.node(), s->element_as_double(0), l->element_as_double(0),
                                                 d->element_as_double(0), integral, s->element_as_int64(0),
                                                 l->element_as_int64(0), d->element_as_int64(0)));
    ctx.set_output(0, t, Shape{Dim(n)});
    return ok_status();
  }
  ctx.set_output(0, t, unknown_dims(1));
  return ok_status();
}

Status range_kernel(KernelContext& ctx) {
  const Tensor* in[3] = {ctx.input(0), ctx.input(1), ctx.input(2)};
  DataType t = in[0]->dtype();
  if (!range_dtype_ok(t))
    return invalid_argument("node %s: dtype %s is not supported", ctx.node().label().c_str(), dtype_name(t));
  for (int i = 0; i < 3; ++i) {
    if (in[i]->dtype() != t)
      return invalid_argument("node %s: inputs must share one dtype (%s vs %s)", ctx.node().label().c_str(),
                              dtype_name(t), dtype_name(in[i]->dtype()));
    if (in[i]->num_elements() != 1)
      return invalid_argument("node %s: input %d must be a scalar, got %s", ctx.node().label().c_str(), i,
                              dims_to_string(in[i]->dims()).c_str());
  }
  bool integral = dtype_is_integer(t);
  KILN_ASSIGN_OR_RETURN(int64_t n, range_count(ctx.node(), in[0]->element_as_double(0), in[1]->element_as_double(0),
                                               in[2]->element_as_double(0), integral, in[0]->element_as_int64(0),
                                               in[1]->element_as_int64(0), in[2]->element_as_int64(0)));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, t, {n}));
  if (t == DataType::kFloat16 || t == DataType::kBFloat16) {
    // Half types: start + i * delta in float32, rounded once to the output type.
    const float start = static_cast<float>(in[0]->element_as_double(0));
    const float delta = static_cast<float>(in[2]->element_as_double(0));
    uint16_t* py = y->data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      const float v = start + static_cast<float>(i) * delta;
      py[i] = t == DataType::kFloat16 ? float_to_fp16(v) : float_to_bf16(v);
    }
    return ok_status();
  }
  dispatch_numeric(t, [&]<typename T>() {
    const T start = in[0]->data<T>()[0];
    const T delta = in[2]->data<T>()[0];
    // start + i * delta, as the spec's reference loop accumulates in the input type.
    for (int64_t i = 0; i < n; ++i) y->data<T>()[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  });
  return ok_status();
}

// ---- EyeLike ------------------------------------------------------------------------------------

Expected<DataType> eyelike_dtype(const ir::Node& node, DataType in) {
  const ir::Attribute* a = node.attr("dtype");
  if (!a) return in;
  if (!dtype_is_valid(static_cast<int32_t>(a->i)) || a->i == 0)
    return invalid_argument("node %s: dtype %lld is not a tensor type", node.label().c_str(), (long long)a->i);
  return static_cast<DataType>(a->i);
}

Status infer_eyelike(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  KILN_ASSIGN_OR_RETURN(DataType t, eyelike_dtype(ctx.node(), in.dtype));
  if (in.shape.has_rank() && in.shape.rank() != 2)
    return invalid_argument("node %s: input must be 2-D, got %s", ctx.node().label().c_str(),
                            in.shape.to_string().c_str());
  ctx.set_output(0, t, in.shape.has_rank() ? in.shape : unknown_dims(2));
  return ok_status();
}

Status eyelike_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  if (x.rank() != 2)
    return invalid_argument("node %s: input must be 2-D, got %s", ctx.node().label().c_str(),
                            dims_to_string(x.dims()).c_str());
  KILN_ASSIGN_OR_RETURN(DataType t, eyelike_dtype(ctx.node(), x.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, t, x.dims()));
  const int64_t k = ctx.node().attr_int("k", 0);
  const int64_t rows = x.dim(0), cols = x.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c = r + k;
    if (c < 0 || c >= cols) continue;
    int64_t i = r * cols + c;
    switch (t) {
      case DataType::kFloat16: y->data<uint16_t>()[i] = float_to_fp16(1.0f); break;
      case DataType::kBFloat16: y->data<uint16_t>()[i] = float_to_bf16(1.0f); break;
      default:
        if (!dispatch_numeric(t, [&]<typename T>() { y->data<T>()[i] = static_cast<T>(1); }))
          return invalid_argument("node %s: dtype %s is not supported", ctx.node().label().c_str(),
                                  dtype_name(t));
    }
  }
  return ok_status();
}

// ---- Registration ------------------------------------------------------------------------

KILN_REGISTER_OP(OpSchema("Shape").since(1).inputs(1, 1).outputs(1, 1).attr("start", AttrKind::kInt)
                     .attr("end", AttrKind::kInt).infer(infer_shape).kernel(shape_kernel));
KILN_REGISTER_OP(OpSchema("Size").since(1).inputs(1, 1).outputs(1, 1).infer(infer_size).kernel(size_kernel));
KILN_REGISTER_OP(OpSchema("Reshape").since(1, 4).inputs(1, 1).outputs(1, 1).attr("shape", AttrKind::kInts)
                     .infer(infer_reshape).kernel(reshape_kernel));
KILN_REGISTER_OP(OpSchema("Reshape").since(5).inputs(2, 2).outputs(1, 1).attr("allowzero", AttrKind::kInt)
                     .infer(infer_reshape).kernel(reshape_kernel));
KILN_REGISTER_OP(OpSchema("Flatten").since(1).inputs(1, 1).outputs(1, 1).attr("axis", AttrKind::kInt)
                     .infer(infer_flatten).kernel(flatten_kernel));
KILN_REGISTER_OP(OpSchema("Squeeze").since(1, 12).inputs(1, 1).outputs(1, 1).attr("axes", AttrKind::kInts)
                     .infer(infer_squeeze).kernel(squeeze_kernel));
KILN_REGISTER_OP(OpSchema("Squeeze").since(13).inputs(1, 2).outputs(1, 1).infer(infer_squeeze)
                     .kernel(squeeze_kernel));
KILN_REGISTER_OP(OpSchema("Unsqueeze").since(1, 12).inputs(1, 1).outputs(1, 1)
                     .required_attr("axes", AttrKind::kInts).infer(infer_unsqueeze).kernel(unsqueeze_kernel));
KILN_REGISTER_OP(OpSchema("Unsqueeze").since(13).inputs(2, 2).outputs(1, 1).infer(infer_unsqueeze)
                     .kernel(unsqueeze_kernel));
KILN_REGISTER_OP(OpSchema("Expand").since(8).inputs(2, 2).outputs(1, 1).infer(infer_expand).kernel(expand_kernel));
KILN_REGISTER_OP(OpSchema("Identity").since(1).inputs(1, 1).outputs(1, 1).infer(infer_same_as_input)
                     .kernel(identity_kernel));
// Opsets 1-6 add is_test (training is never run: both modes give the inference result)
// and consumed_inputs (a memory hint).
KILN_REGISTER_OP(OpSchema("Dropout").since(1, 11).inputs(1, 1).outputs(1, 2).attr("ratio", AttrKind::kFloat)
                     .infer(infer_dropout).kernel(dropout_kernel));
KILN_REGISTER_OP(OpSchema("Dropout").since(12).inputs(1, 3).outputs(1, 2).attr("seed", AttrKind::kInt)
                     .infer(infer_dropout).kernel(dropout_kernel));
KILN_REGISTER_OP(OpSchema("ConstantOfShape").since(9).inputs(1, 1).outputs(1, 1).attr("value", AttrKind::kTensor)
                     .infer(infer_constant_of_shape).kernel(constant_of_shape_kernel));
KILN_REGISTER_OP(OpSchema("Constant").since(1).inputs(0, 0).outputs(1, 1).infer(infer_constant)
                     .kernel(constant_kernel));
KILN_REGISTER_OP(OpSchema("Range").since(11).inputs(3, 3).outputs(1, 1).infer(infer_range).kernel(range_kernel));
KILN_REGISTER_OP(OpSchema("EyeLike").since(9).inputs(1, 1).outputs(1, 1).attr("dtype", AttrKind::kInt)
                     .attr("k", AttrKind::kInt).infer(infer_eyelike).kernel(eyelike_kernel));

}  // namespace
}  // namespace kiln::ops
