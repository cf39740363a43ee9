// Control flow: If, Loop and Scan (opset 8 with its batch axis, and 9+). The kernels run
// their body graphs through the runtime's SubgraphRunner; values a body reads from
// enclosing graphs are resolved by the runtime, so the kernels only pass the body's formal
// inputs.
#include <algorithm>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/tensor_copy.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

Expected<const ir::Graph*> body_graph(const ir::Node& node, const char* name) {
  const ir::Attribute* a = node.attr(name);
  if (!a || a->kind != AttrKind::kGraph || !a->g)
    return invalid_argument("node %s has no graph attribute '%s'", node.label().c_str(), name);
  return a->g.get();
}

Expected<SubgraphRunner*> runner_of(const KernelContext& ctx) {
  if (!ctx.subgraphs())
    return failed_precondition("node %s needs a runtime that executes subgraphs", ctx.node().label().c_str());
  return ctx.subgraphs();
}

Expected<bool> bool_scalar(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.dtype() != DataType::kBool || t.num_elements() != 1)
    return invalid_argument("node %s: %s must be one bool, got %s", node.label().c_str(), what,
                            t.description().c_str());
  return t.data<bool>()[0];
}

// Nothing is known about a type: no kind, dtype or rank (e.g. an untyped body output).
bool type_unknown(const ir::TensorType& t) {
  return t.is_tensor() && t.dtype == DataType::kUndefined && !t.shape.has_rank();
}

// The common kind of two branch outputs: an unknown side takes the other's; a tensor and
// an optional tensor (a branch that may give none) make an optional, likewise sequences.
ir::TypeKind merge_kinds(const ir::TensorType& a, const ir::TensorType& b) {
  using ir::TypeKind;
  if (type_unknown(a)) return b.kind;
  if (type_unknown(b) || a.kind == b.kind) return a.kind;
  auto optional_of = [](TypeKind k) {
    return k == TypeKind::kTensor ? TypeKind::kOptionalTensor
                                  : k == TypeKind::kSequence ? TypeKind::kOptionalSequence : k;
  };
  if (optional_of(a.kind) == b.kind) return b.kind;
  if (optional_of(b.kind) == a.kind) return a.kind;
  return a.kind;
}

// The common type of two branch outputs: equal dims stay, differing ones become unknown.
ir::TensorType merge_branch_types(const ir::TensorType& a, const ir::TensorType& b) {
  ir::TensorType out = a;
  out.kind = merge_kinds(a, b);
  if (out.dtype == DataType::kUndefined) out.dtype = b.dtype;
  if (!a.shape.has_rank() || !b.shape.has_rank() || a.shape.rank() != b.shape.rank()) {
    out.shape = Shape::unknown_rank();
    return out;
  }
  for (int i = 0; i < a.shape.rank(); ++i)
    if (!(a.shape[i] == b.shape[i])) out.shape[i] = Dim();
  return out;
}

// Stacks equally shaped slices along a new axis `axis` (in [0, slice rank]); slice t
// goes to position t, or T-1-t when `reverse`.
Expected<Tensor> stack(const ir::Node& node, const std::vector<Tensor>& slices, int64_t axis, bool reverse,
                       const char* what) {
  const Tensor& first = slices.front();
  for (const Tensor& s : slices)
    if (s.dtype() != first.dtype() || s.dims() != first.dims())
      return invalid_argument("node %s: %s changes from %s to %s across iterations", node.label().c_str(), what,
                              first.description().c_str(), s.description().c_str());
  KILN_ASSIGN_OR_RETURN(int ax, normalize_axis(node, axis, first.rank() + 1));
  const int64_t n = static_cast<int64_t>(slices.size());
  std::vector<int64_t> dims = first.dims();
  dims.insert(dims.begin() + ax, n);
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(first.dtype(), dims), "node %s: %s", node.label().c_str(),
                        what);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= first.dim(d);
  for (int d = ax; d < first.rank(); ++d) inner *= first.dim(d);
  KILN_RETURN_IF_ERROR(dispatch_copy_type(node, first.dtype(), [&]<typename T>() {
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = reverse ? n - 1 - t : t;
      const T* src = slices[static_cast<size_t>(t)].data<T>();
      for (int64_t o = 0; o < outer; ++o) copy_run(out.data<T>() + (o * n + pos) * inner, src + o * inner, inner);
    }
  }));
  return out;
}

// An empty scan output for a loop that ran no iteration: [0] + the body's declared
// slice shape when it is static, else [0].
Expected<Tensor> empty_scan_output(const ir::Node& node, const ir::Value& decl) {
  if (decl.dtype() == DataType::kUndefined)
    return invalid_argument("node %s: scan output '%s' has no declared dtype and the loop ran no iteration",
                            node.label().c_str(), decl.name().c_str());
  std::vector<int64_t> dims = {0};
  if (decl.shape().is_static()) {
    std::vector<int64_t> s = decl.shape().static_dims();
    dims.insert(dims.end(), s.begin(), s.end());
  }
  return Tensor::allocate(decl.dtype(), dims);
}

// ---- If -----------------------------------------------------------------------------------------

Status infer_if(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const ir::Graph* then_g, body_graph(ctx.node(), "then_branch"));
  KILN_ASSIGN_OR_RETURN(const ir::Graph* else_g, body_graph(ctx.node(), "else_branch"));
  const int n = ctx.num_outputs();
  if (static_cast<int>(then_g->outputs().size()) != n || static_cast<int>(else_g->outputs().size()) != n)
    return invalid_argument("node %s has %d outputs but its branches have %zu and %zu", ctx.node().label().c_str(),
                            n, then_g->outputs().size(), else_g->outputs().size());
  for (int i = 0; i < n; ++i)
    ctx.output(i) = merge_branch_types(then_g->outputs()[static_cast<size_t>(i)]->type(),
                                       else_g->outputs()[static_cast<size_t>(i)]->type());
  return ok_status();
}

Status if_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  if (!ctx.input(0)) return invalid_argument("node %s: cond input is missing", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(bool cond, bool_scalar(node, *ctx.input(0), "cond"));
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(node, cond ? "then_branch" : "else_branch"));
  KILN_ASSIGN_OR_RETURN(SubgraphRunner * runner, runner_of(ctx));
  KILN_ASSIGN_OR_RETURN(std::vector<RuntimeValue> outs, runner->run(*body, {}), "in %s of node %s",
                        cond ? "then_branch" : "else_branch", node.label().c_str());
  if (static_cast<int>(outs.size()) != ctx.num_outputs())
    return invalid_argument("node %s: branch produced %zu outputs, the node has %d", node.label().c_str(),
                            outs.size(), ctx.num_outputs());
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output_value(i, std::move(outs[static_cast<size_t>(i)]));
  return ok_status();
}

// A body output that must be a tensor (a cond, a scan slice).
Expected<Tensor> tensor_output(const ir::Node& node, RuntimeValue v, const char* what) {
  if (!v.is_tensor())
    return invalid_argument("node %s: %s is %s, expected a tensor", node.label().c_str(), what, v.description().c_str());
  return std::move(v.tensor());
}

// ---- Loop ---------------------------------------------------------------------------------------

Status infer_loop(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(ctx.node(), "body"));
  // Trailing omitted inputs (M only, no carried values) may be dropped by a writer.
  const int n_carried = std::max(ctx.num_inputs() - 2, 0);
  const int n_scan = ctx.num_outputs() - n_carried;
  if (n_scan < 0 || static_cast<int>(body->outputs().size()) != 1 + n_carried + n_scan)
    return invalid_argument("node %s: body has %zu outputs; expected 1 + %d carried + %d scan",
                            ctx.node().label().c_str(), body->outputs().size(), n_carried, std::max(n_scan, 0));
  for (int i = 0; i < n_carried; ++i) {
    const ir::TensorType& bt = body->outputs()[static_cast<size_t>(1 + i)]->type();
    ir::TensorType out = bt;
    if (ctx.has_input(2 + i)) {
      const ir::TensorType& in = ctx.input_type(2 + i);
      out.shape = merge_branch_types(in, bt).shape;
      if (in.dtype != DataType::kUndefined) out.dtype = in.dtype;
      // The body's kind is the loop's (ONNX types the output by the body); an initial
      // optional that the body turns into a plain sequence still gives a sequence.
      if (type_unknown(bt)) out.kind = in.kind;
    }
    ctx.output(i) = out;
  }
  for (int k = 0; k < n_scan; ++k) {
    const ir::TensorType& bt = body->outputs()[static_cast<size_t>(1 + n_carried + k)]->type();
    Shape s = Shape::unknown_rank();
    if (bt.shape.has_rank()) {
      std::vector<Dim> d = {Dim()};
      d.insert(d.end(), bt.shape.dims().begin(), bt.shape.dims().end());
      s = Shape(std::move(d));
    }
    ctx.set_output(n_carried + k, bt.dtype, std::move(s));
  }
  return ok_status();
}

Status loop_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(node, "body"));
  KILN_ASSIGN_OR_RETURN(SubgraphRunner * runner, runner_of(ctx));
  const int n_carried = std::max(ctx.num_inputs() - 2, 0);
  const int n_scan = ctx.num_outputs() - n_carried;
  if (n_scan < 0)
    return invalid_argument("node %s: %d inputs and %d outputs do not describe a loop", node.label().c_str(),
                            ctx.num_inputs(), ctx.num_outputs());
  if (static_cast<int>(body->inputs().size()) != 2 + n_carried ||
      static_cast<int>(body->outputs().size()) != 1 + n_carried + n_scan)
    return invalid_argument("node %s: body takes %zu inputs and gives %zu outputs; expected %d and %d",
                            node.label().c_str(), body->inputs().size(), body->outputs().size(), 2 + n_carried,
                            1 + n_carried + n_scan);
  const Tensor* trip_t = ctx.input(0);
  const Tensor* cond_t = ctx.input(1);
  if (!trip_t && !cond_t)
    return invalid_argument("node %s has neither a trip count nor a condition: it would never end",
                            node.label().c_str());
  int64_t trips = 0;
  if (trip_t) {
    KILN_ASSIGN_OR_RETURN(trips, scalar_index(node, *trip_t, "trip count M"));
  }
  bool cond = true;
  if (cond_t) {
    KILN_ASSIGN_OR_RETURN(cond, bool_scalar(node, *cond_t, "cond"));
  }
  // Loop-carried values may be tensors, sequences or optionals.
  std::vector<RuntimeValue> inputs(static_cast<size_t>(2 + n_carried));
  for (int i = 0; i < n_carried; ++i) {
    const RuntimeValue* v = ctx.value(2 + i);
    if (!v) return invalid_argument("node %s: loop-carried input %d is missing", node.label().c_str(), i);
    inputs[static_cast<size_t>(2 + i)] = *v;
  }
  std::vector<std::vector<Tensor>> scans(static_cast<size_t>(n_scan));
  int64_t i = 0;
  for (; (!trip_t || i < trips) && cond; ++i) {
    inputs[0] = Tensor::scalar<int64_t>(i);
    inputs[1] = Tensor::scalar<bool>(cond);
    KILN_ASSIGN_OR_RETURN(std::vector<RuntimeValue> outs, runner->run(*body, inputs),
                          "in iteration %lld of node %s", (long long)i, node.label().c_str());
    if (static_cast<int>(outs.size()) != 1 + n_carried + n_scan)
      return internal_error("node %s: body gave %zu outputs", node.label().c_str(), outs.size());
    // Without a cond input the body's cond output is ignored (a plain for loop).
    if (cond_t) {
      KILN_ASSIGN_OR_RETURN(Tensor c, tensor_output(node, std::move(outs[0]), "the body's cond output"));
      KILN_ASSIGN_OR_RETURN(cond, bool_scalar(node, c, "body cond output"));
    }
    for (int c = 0; c < n_carried; ++c) inputs[static_cast<size_t>(2 + c)] = std::move(outs[static_cast<size_t>(1 + c)]);
    for (int k = 0; k < n_scan; ++k) {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_output(node, std::move(outs[static_cast<size_t>(1 + n_carried + k)]),
                                                    "a scan output"));
      scans[static_cast<size_t>(k)].push_back(std::move(t));
    }
  }
  for (int c = 0; c < n_carried; ++c) ctx.set_output_value(c, std::move(inputs[static_cast<size_t>(2 + c)]));
  for (int k = 0; k < n_scan; ++k) {
    const std::vector<Tensor>& s = scans[static_cast<size_t>(k)];
    if (s.empty()) {
      KILN_ASSIGN_OR_RETURN(Tensor e, empty_scan_output(node, *body->outputs()[static_cast<size_t>(1 + n_carried + k)]));
      ctx.set_output(n_carried + k, std::move(e));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Tensor t, stack(node, s, 0, false, "a scan output"));
    ctx.set_output(n_carried + k, std::move(t));
  }
  return ok_status();
}

// ---- Scan (opset 9+) ---------------------------------------------------------------------------

struct ScanAttrs {
  int n_state = 0, n_in = 0, n_out = 0;
  std::vector<int64_t> in_dirs, out_dirs, in_axes, out_axes;
};

Expected<ScanAttrs> scan_attrs(const ir::Node& node, int num_inputs, int num_outputs) {
  ScanAttrs a;
  a.n_in = static_cast<int>(node.attr_int("num_scan_inputs", -1));
  a.n_state = num_inputs - a.n_in;
  a.n_out = num_outputs - a.n_state;
  if (a.n_in < 1 || a.n_state < 0 || a.n_out < 0)
    return invalid_argument("node %s: num_scan_inputs %d does not fit %d inputs and %d outputs",
                            node.label().c_str(), a.n_in, num_inputs, num_outputs);
  auto list = [&](const char* name, int n, std::vector<int64_t>& dst) -> Status {
    dst = node.attr_ints(name, std::vector<int64_t>(static_cast<size_t>(n), 0));
    if (static_cast<int>(dst.size()) != n)
      return invalid_argument("node %s: %s has %zu entries, expected %d", node.label().c_str(), name, dst.size(), n);
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(list("scan_input_directions", a.n_in, a.in_dirs));
  KILN_RETURN_IF_ERROR(list("scan_output_directions", a.n_out, a.out_dirs));
  KILN_RETURN_IF_ERROR(list("scan_input_axes", a.n_in, a.in_axes));
  KILN_RETURN_IF_ERROR(list("scan_output_axes", a.n_out, a.out_axes));
  return a;
}

Status infer_scan(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(ctx.node(), "body"));
  KILN_ASSIGN_OR_RETURN(ScanAttrs a, scan_attrs(ctx.node(), ctx.num_inputs(), ctx.num_outputs()));
  if (static_cast<int>(body->outputs().size()) != a.n_state + a.n_out)
    return invalid_argument("node %s: body has %zu outputs, expected %d", ctx.node().label().c_str(),
                            body->outputs().size(), a.n_state + a.n_out);
  for (int i = 0; i < a.n_state; ++i)
    if (ctx.has_input(i)) ctx.output(i) = ctx.input_type(i);
  // The scan length is the extent of the first scan input along its axis.
  Dim len;
  if (ctx.has_input(a.n_state) && ctx.input_type(a.n_state).shape.has_rank()) {
    const ir::TensorType& s0 = ctx.input_type(a.n_state);
    int64_t ax = a.in_axes[0] < 0 ? a.in_axes[0] + s0.shape.rank() : a.in_axes[0];
    if (ax >= 0 && ax < s0.shape.rank()) len = s0.shape[static_cast<int>(ax)];
  }
  for (int k = 0; k < a.n_out; ++k) {
    const ir::TensorType& bt = body->outputs()[static_cast<size_t>(a.n_state + k)]->type();
    Shape s = Shape::unknown_rank();
    if (bt.shape.has_rank()) {
      int r = bt.shape.rank() + 1;
      int64_t ax = a.out_axes[static_cast<size_t>(k)];
      if (ax < 0) ax += r;
      if (ax >= 0 && ax < r) {
        std::vector<Dim> d = bt.shape.dims();
        d.insert(d.begin() + ax, len);
        s = Shape(std::move(d));
      }
    }
    ctx.set_output(a.n_state + k, bt.dtype, std::move(s));
  }
  return ok_status();
}

// Slice t of x along `axis` (the axis removed).
Expected<Tensor> take_slice(const ir::Node& node, const Tensor& x, int axis, int64_t t) {
  std::vector<int64_t> dims = x.dims();
  dims.erase(dims.begin() + axis);
  std::vector<int64_t> xs = contiguous_strides(x.dims());
  const int64_t offset = t * xs[static_cast<size_t>(axis)];
  xs.erase(xs.begin() + axis);
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(x.dtype(), dims), "node %s", node.label().c_str());
  if (out.num_elements() > 0) KILN_RETURN_IF_ERROR(strided_copy_tensor(node, x, offset, out, dims, xs));
  return out;
}

Status scan_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(node, "body"));
  KILN_ASSIGN_OR_RETURN(SubgraphRunner * runner, runner_of(ctx));
  KILN_ASSIGN_OR_RETURN(ScanAttrs a, scan_attrs(node, ctx.num_inputs(), ctx.num_outputs()));
  if (static_cast<int>(body->inputs().size()) != a.n_state + a.n_in ||
      static_cast<int>(body->outputs().size()) != a.n_state + a.n_out)
    return invalid_argument("node %s: body takes %zu inputs and gives %zu outputs; expected %d and %d",
                            node.label().c_str(), body->inputs().size(), body->outputs().size(), a.n_state + a.n_in,
                            a.n_state + a.n_out);
  std::vector<RuntimeValue> inputs(static_cast<size_t>(a.n_state + a.n_in));
  for (int i = 0; i < a.n_state + a.n_in; ++i) {
    if (!ctx.input(i)) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
    if (i < a.n_state) inputs[static_cast<size_t>(i)] = *ctx.input(i);
  }
  int64_t len = -1;
  std::vector<int> axes(static_cast<size_t>(a.n_in));
  for (int j = 0; j < a.n_in; ++j) {
    const Tensor& x = *ctx.input(a.n_state + j);
    if (x.rank() < 1) return invalid_argument("node %s: scan input %d is a scalar", node.label().c_str(), j);
    KILN_ASSIGN_OR_RETURN(axes[static_cast<size_t>(j)], normalize_axis(node, a.in_axes[static_cast<size_t>(j)], x.rank()));
    const int64_t l = x.dim(axes[static_cast<size_t>(j)]);
    if (len >= 0 && l != len)
      return invalid_argument("node %s: scan inputs have different lengths (%lld vs %lld)", node.label().c_str(),
                              (long long)len, (long long)l);
    len = l;
  }
  std::vector<std::vector<Tensor>> scans(static_cast<size_t>(a.n_out));
  for (int64_t t = 0; t < len; ++t) {
    for (int j = 0; j < a.n_in; ++j) {
      const int64_t pos = a.in_dirs[static_cast<size_t>(j)] != 0 ? len - 1 - t : t;
      KILN_ASSIGN_OR_RETURN(Tensor slice,
                            take_slice(node, *ctx.input(a.n_state + j), axes[static_cast<size_t>(j)], pos));
      inputs[static_cast<size_t>(a.n_state + j)] = std::move(slice);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<RuntimeValue> outs, runner->run(*body, inputs),
                          "in iteration %lld of node %s", (long long)t, node.label().c_str());
    if (static_cast<int>(outs.size()) != a.n_state + a.n_out)
      return internal_error("node %s: body gave %zu outputs", node.label().c_str(), outs.size());
    for (int i = 0; i < a.n_state; ++i) inputs[static_cast<size_t>(i)] = std::move(outs[static_cast<size_t>(i)]);
    for (int k = 0; k < a.n_out; ++k) {
      KILN_ASSIGN_OR_RETURN(Tensor s, tensor_output(node, std::move(outs[static_cast<size_t>(a.n_state + k)]),
                                                    "a scan output"));
      scans[static_cast<size_t>(k)].push_back(std::move(s));
    }
  }
  for (int i = 0; i < a.n_state; ++i) ctx.set_output_value(i, std::move(inputs[static_cast<size_t>(i)]));
  for (int k = 0; k < a.n_out; ++k) {
    const std::vector<Tensor>& s = scans[static_cast<size_t>(k)];
    if (s.empty()) {
      KILN_ASSIGN_OR_RETURN(Tensor e, empty_scan_output(node, *body->outputs()[static_cast<size_t>(a.n_state + k)]));
      ctx.set_output(a.n_state + k, std::move(e));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Tensor t, stack(node, s, a.out_axes[static_cast<size_t>(k)],
                                          a.out_dirs[static_cast<size_t>(k)] != 0, "a scan output"));
    ctx.set_output(a.n_state + k, std::move(t));
  }
  return ok_status();
}

// ---- Scan (opset 8) ------------------------------------------------------------------------------

// Opset 8's Scan has a batch axis: inputs are an optional sequence_lens [batch], the states
// [batch, ...] and the scan inputs [batch, seq, ...]; `directions` reverses scan inputs.
// Each batch entry runs the body over its own length; scan outputs [batch, seq, ...] are
// zero past an entry's length.
struct Scan8Attrs {
  int n_state = 0, n_in = 0, n_out = 0;
  std::vector<int64_t> dirs;
};

Expected<Scan8Attrs> scan8_attrs(const ir::Node& node, const ir::Graph& body, int num_inputs, int num_outputs) {
  Scan8Attrs a;
  a.n_in = static_cast<int>(node.attr_int("num_scan_inputs", -1));
  a.n_state = num_inputs - 1 - a.n_in;
  a.n_out = num_outputs - a.n_state;
  if (a.n_in < 1 || a.n_state < 0 || a.n_out < 0)
    return invalid_argument(
        "node %s: num_scan_inputs %d does not fit %d inputs (sequence_lens first) and %d outputs",
        node.label().c_str(), a.n_in, num_inputs, num_outputs);
  a.dirs = node.attr_ints("directions", std::vector<int64_t>(static_cast<size_t>(a.n_in), 0));
  if (static_cast<int>(a.dirs.size()) != a.n_in)
    return invalid_argument("node %s: directions has %zu entries, expected %d", node.label().c_str(), a.dirs.size(),
                            a.n_in);
  if (static_cast<int>(body.inputs().size()) != a.n_state + a.n_in ||
      static_cast<int>(body.outputs().size()) != a.n_state + a.n_out)
    return invalid_argument("node %s: body takes %zu inputs and gives %zu outputs; expected %d and %d",
                            node.label().c_str(), body.inputs().size(), body.outputs().size(), a.n_state + a.n_in,
                            a.n_state + a.n_out);
  return a;
}

Status infer_scan8(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(ctx.node(), "body"));
  KILN_ASSIGN_OR_RETURN(Scan8Attrs a, scan8_attrs(ctx.node(), *body, ctx.num_inputs(), ctx.num_outputs()));
  for (int i = 0; i < a.n_state; ++i)
    if (ctx.has_input(1 + i)) ctx.output(i) = ctx.input_type(1 + i);
  Dim batch, len;
  if (ctx.has_input(1 + a.n_state) && ctx.input_type(1 + a.n_state).shape.rank() >= 2) {
    batch = ctx.input_type(1 + a.n_state).shape[0];
    len = ctx.input_type(1 + a.n_state).shape[1];
  }
  for (int k = 0; k < a.n_out; ++k) {
    const ir::TensorType& bt = body->outputs()[static_cast<size_t>(a.n_state + k)]->type();
    Shape s = Shape::unknown_rank();
    if (bt.shape.has_rank()) {
      std::vector<Dim> d = bt.shape.dims();
      d.insert(d.begin(), {batch, len});
      s = Shape(std::move(d));
    }
    ctx.set_output(a.n_state + k, bt.dtype, std::move(s));
  }
  return ok_status();
}

Status scan8_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(const ir::Graph* body, body_graph(node, "body"));
  KILN_ASSIGN_OR_RETURN(SubgraphRunner * runner, runner_of(ctx));
  KILN_ASSIGN_OR_RETURN(Scan8Attrs a, scan8_attrs(node, *body, ctx.num_inputs(), ctx.num_outputs()));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    if (!t) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
    const int min_rank = i > a.n_state ? 2 : 1;
    if (t->rank() < min_rank)
      return invalid_argument("node %s: input %d is %s; it needs a batch axis%s", node.label().c_str(), i,
                              t->description().c_str(), min_rank == 2 ? " and a sequence axis" : "");
  }
  const Tensor& first = *ctx.input(1 + a.n_state);
  const int64_t batch = first.dim(0), max_len = first.dim(1);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor& t = *ctx.input(i);
    if (t.dim(0) != batch || (i > a.n_state && t.dim(1) != max_len))
      return invalid_argument("node %s: input %d is %s; expected batch %lld%s", node.label().c_str(), i,
                              t.description().c_str(), (long long)batch,
                              i > a.n_state ? " and the first scan input's length" : "");
  }
  if (batch < 1) return invalid_argument("node %s: the batch is empty", node.label().c_str());
  std::vector<int64_t> lens(static_cast<size_t>(batch), max_len);
  if (const Tensor* sl = ctx.input(0)) {
    KILN_ASSIGN_OR_RETURN(lens, index_values(node, *sl, "sequence_lens"));
    if (static_cast<int64_t>(lens.size()) != batch)
      return invalid_argument("node %s: sequence_lens has %zu entries for a batch of %lld", node.label().c_str(),
                              lens.size(), (long long)batch);
    for (int64_t l : lens)
      if (l < 0 || l > max_len)
        return invalid_argument("node %s: sequence length %lld is outside [0, %lld]", node.label().c_str(),
                                (long long)l, (long long)max_len);
  }
  std::vector<std::vector<Tensor>> final_states(static_cast<size_t>(a.n_state));
  std::vector<std::vector<Tensor>> scan_outs(static_cast<size_t>(a.n_out));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    std::vector<RuntimeValue> inputs(static_cast<size_t>(a.n_state + a.n_in));
    for (int i = 0; i < a.n_state; ++i) {
      KILN_ASSIGN_OR_RETURN(Tensor s, take_slice(node, *ctx.input(1 + i), 0, b));
      inputs[static_cast<size_t>(i)] = std::move(s);
    }
    std::vector<Tensor> seqs;
    for (int j = 0; j < a.n_in; ++j) {
      KILN_ASSIGN_OR_RETURN(Tensor s, take_slice(node, *ctx.input(1 + a.n_state + j), 0, b));
      seqs.push_back(std::move(s));
    }
    std::vector<std::vector<Tensor>> slices(static_cast<size_t>(a.n_out));
    for (int64_t t = 0; t < len; ++t) {
      for (int j = 0; j < a.n_in; ++j) {
        const int64_t pos = a.dirs[static_cast<size_t>(j)] != 0 ? len - 1 - t : t;
        KILN_ASSIGN_OR_RETURN(Tensor x, take_slice(node, seqs[static_cast<size_t>(j)], 0, pos));
        inputs[static_cast<size_t>(a.n_state + j)] = std::move(x);
      }
      KILN_ASSIGN_OR_RETURN(std::vector<RuntimeValue> outs, runner->run(*body, inputs),
                            "in batch %lld iteration %lld of node %s", (long long)b, (long long)t,
                            node.label().c_str());
      if (static_cast<int>(outs.size()) != a.n_state + a.n_out)
        return internal_error("node %s: body gave %zu outputs", node.label().c_str(), outs.size());
      for (int i = 0; i < a.n_state; ++i) inputs[static_cast<size_t>(i)] = std::move(outs[static_cast<size_t>(i)]);
      for (int k = 0; k < a.n_out; ++k) {
        KILN_ASSIGN_OR_RETURN(Tensor s, tensor_output(node, std::move(outs[static_cast<size_t>(a.n_state + k)]),
                                                      "a scan output"));
        slices[static_cast<size_t>(k)].push_back(std::move(s));
      }
    }
    for (int i = 0; i < a.n_state; ++i) {
      KILN_ASSIGN_OR_RETURN(Tensor s, tensor_output(node, std::move(inputs[static_cast<size_t>(i)]), "a state"));
      final_states[static_cast<size_t>(i)].push_back(std::move(s));
    }
    for (int k = 0; k < a.n_out; ++k) {
      std::vector<Tensor>& s = slices[static_cast<size_t>(k)];
      Tensor per_batch;
      if (s.empty()) {
        KILN_ASSIGN_OR_RETURN(per_batch,
                              empty_scan_output(node, *body->outputs()[static_cast<size_t>(a.n_state + k)]));
        if (max_len > 0)
          return unsupported("node %s: a batch entry of length 0 among longer ones is not supported",
                             node.label().c_str());
      } else {
        // Zero slices past this entry's length.
        while (static_cast<int64_t>(s.size()) < max_len) {
          KILN_ASSIGN_OR_RETURN(Tensor z, Tensor::allocate(s.front().dtype(), s.front().dims()), "node %s",
                                node.label().c_str());
          s.push_back(std::move(z));
        }
        KILN_ASSIGN_OR_RETURN(per_batch, stack(node, s, 0, false, "a scan output"));
      }
      scan_outs[static_cast<size_t>(k)].push_back(std::move(per_batch));
    }
  }
  for (int i = 0; i < a.n_state; ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, stack(node, final_states[static_cast<size_t>(i)], 0, false, "a state"));
    ctx.set_output(i, std::move(t));
  }
  for (int k = 0; k < a.n_out; ++k) {
    KILN_ASSIGN_OR_RETURN(Tensor t, stack(node, scan_outs[static_cast<size_t>(k)], 0, false, "a scan output"));
    ctx.set_output(a.n_state + k, std::move(t));
  }
  return ok_status();
}

KILN_REGISTER_OP(OpSchema("If").since(1).inputs(1, 1).outputs(1, -1).required_attr("then_branch", AttrKind::kGraph)
                     .required_attr("else_branch", AttrKind::kGraph).infer(infer_if).kernel(if_kernel));
KILN_REGISTER_OP(OpSchema("Loop").since(1).inputs(0, -1).outputs(0, -1).required_attr("body", AttrKind::kGraph)
                     .infer(infer_loop).kernel(loop_kernel));
// sequence_lens (input 0) may be omitted, so no input index is required by the schema; the
// kernel checks the counts against num_scan_inputs.
KILN_REGISTER_OP(OpSchema("Scan").since(8, 8).inputs(0, -1).outputs(1, -1).required_attr("body", AttrKind::kGraph)
                     .required_attr("num_scan_inputs", AttrKind::kInt).attr("directions", AttrKind::kInts)
                     .infer(infer_scan8).kernel(scan8_kernel));
KILN_REGISTER_OP(OpSchema("Scan").since(9).inputs(1, -1).outputs(1, -1).required_attr("body", AttrKind::kGraph)
                     .required_attr("num_scan_inputs", AttrKind::kInt).attr("scan_input_directions", AttrKind::kInts)
                     .attr("scan_output_directions", AttrKind::kInts).attr("scan_input_axes", AttrKind::kInts)
                     .attr("scan_output_axes", AttrKind::kInts).infer(infer_scan).kernel(scan_kernel));

}  // namespace
}  // namespace kiln::ops
