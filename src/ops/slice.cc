// Slice: opset 1 (starts/ends/axes attributes) and 10+ (inputs, with steps, negative
// steps and NumPy-style clamping). One strided read of the input.
#include <algorithm>
#include <limits>
#include <optional>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

// Start, step and count along one axis of extent `dim` after ONNX's clamping rules.
struct AxisSlice {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

AxisSlice clamp_slice(int64_t start, int64_t end, int64_t step, int64_t dim) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  AxisSlice s;
  s.step = step;
  if (dim == 0) return s;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    s.count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    // -step cannot overflow: step == INT64_MIN is treated as a huge negative step.
    const int64_t neg = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
    s.count = start > end ? (start - end + neg - 1) / neg : 0;
  }
  s.start = s.count > 0 ? start : 0;
  return s;
}

// Checks lengths and normalises axes (default 0..n-1) and steps (default 1).
Status normalize_args(const ir::Node& node, SliceArgs& a, int rank) {
  if (a.starts.size() != a.ends.size())
    return invalid_argument("node %s: starts has %zu entries, ends %zu", node.label().c_str(), a.starts.size(),
                            a.ends.size());
  const size_t n = a.starts.size();
  if (a.axes.empty()) {
    for (size_t i = 0; i < n; ++i) a.axes.push_back(static_cast<int64_t>(i));
  }
  if (a.steps.empty()) a.steps.assign(n, 1);
  if (a.axes.size() != n || a.steps.size() != n)
    return invalid_argument("node %s: starts, ends, axes and steps must have one length (%zu, %zu, %zu, %zu)",
                            node.label().c_str(), n, a.ends.size(), a.axes.size(), a.steps.size());
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(int ax, normalize_axis(node, a.axes[i], rank));
    if (seen[static_cast<size_t>(ax)])
      return invalid_argument("node %s: axis %lld is repeated", node.label().c_str(), (long long)a.axes[i]);
    seen[static_cast<size_t>(ax)] = true;
    a.axes[i] = ax;
    if (a.steps[i] == 0) return invalid_argument("node %s: step on axis %d is 0", node.label().c_str(), ax);
  }
  return ok_status();
}

Status infer_slice(InferContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  const int rank = in.shape.rank();
  SliceArgs a;
  bool known = true;
  if (ctx.node().opset() < 10) {
    a.starts = ctx.node().attr_ints("starts");
    a.ends = ctx.node().attr_ints("ends");
    a.axes = ctx.node().attr_ints("axes");
  } else {
    auto get = [&](int i, std::vector<int64_t>& dst) {
      if (!ctx.has_input(i)) return;
      if (auto v = constant_ints(ctx, i)) dst = *v;
      else known = false;
    };
    get(1, a.starts);
    get(2, a.ends);
    get(3, a.axes);
    get(4, a.steps);
  }
  Shape out = in.shape;
  if (!known) {
    // Axes alone may still say which dims keep their extent.
    auto axes = ctx.node().opset() >= 10 && ctx.has_input(3) ? constant_ints(ctx, 3) : std::nullopt;
    for (int d = 0; d < rank; ++d) {
      bool sliced = true;
      if (axes) {
        sliced = false;
        for (int64_t ax : *axes)
          if (ax == d || ax + rank == d) sliced = true;
      }
      if (sliced) out[d] = Dim();
    }
    ctx.set_output(0, in.dtype, std::move(out));
    return ok_status();
  }
  KILN_RETURN_IF_ERROR(normalize_args(ctx.node(), a, rank));
  for (size_t i = 0; i < a.axes.size(); ++i) {
    const int ax = static_cast<int>(a.axes[i]);
    const Dim& d = in.shape[ax];
    if (d.is_static()) {
      out[ax] = Dim(clamp_slice(a.starts[i], a.ends[i], a.steps[i], d.value).count);
    } else if (!(a.starts[i] == 0 && a.steps[i] == 1 && a.ends[i] >= std::numeric_limits<int32_t>::max())) {
      out[ax] = Dim();  // a full slice [0:INT_MAX:1] keeps even a symbolic dim
    }
  }
  ctx.set_output(0, in.dtype, std::move(out));
  return ok_status();
}

Status slice_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  SliceArgs a;
  if (ctx.opset() < 10) {
    a.starts = node.attr_ints("starts");
    a.ends = node.attr_ints("ends");
    a.axes = node.attr_ints("axes");
  } else {
    const char* names[] = {"starts", "ends", "axes", "steps"};
    std::vector<int64_t>* dst[] = {&a.starts, &a.ends, &a.axes, &a.steps};
    for (int i = 1; i <= 4; ++i) {
      const Tensor* t = ctx.input(i);
      if (!t) {
        if (i <= 2) return invalid_argument("node %s: input '%s' is missing", node.label().c_str(), names[i - 1]);
        continue;
      }
      if (t->rank() != 1)
        return invalid_argument("node %s: %s must be 1-D, got %s", node.label().c_str(), names[i - 1],
                                dims_to_string(t->dims()).c_str());
      KILN_ASSIGN_OR_RETURN(*dst[i - 1], index_values(node, *t, names[i - 1]));
    }
  }
  KILN_RETURN_IF_ERROR(normalize_args(node, a, x.rank()));
  std::vector<int64_t> out = x.dims();
  const std::vector<int64_t> xs = contiguous_strides(x.dims());
  std::vector<int64_t> strides = xs;
  int64_t offset = 0;
  for (size_t i = 0; i < a.axes.size(); ++i) {
    const size_t ax = static_cast<size_t>(a.axes[i]);
    AxisSlice s = clamp_slice(a.starts[i], a.ends[i], a.steps[i], x.dim(static_cast<int>(ax)));
    out[ax] = s.count;
    // A single picked element needs no stride (and a huge step must not overflow).
    strides[ax] = s.count > 1 ? xs[ax] * s.step : 0;
    offset += s.start * xs[ax];
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out));
  if (y->num_elements() == 0) return ok_status();
  return strided_copy_tensor(node, x, offset, *y, out, strides);
}

KILN_REGISTER_OP(OpSchema("Slice").since(1, 9).inputs(1, 1).outputs(1, 1).required_attr("starts", AttrKind::kInts)
                     .required_attr("ends", AttrKind::kInts).attr("axes", AttrKind::kInts).infer(infer_slice)
                     .kernel(slice_kernel));
KILN_REGISTER_OP(OpSchema("Slice").since(10).inputs(3, 5).outputs(1, 1).infer(infer_slice).kernel(slice_kernel));

}  // namespace
}  // namespace kiln::ops
