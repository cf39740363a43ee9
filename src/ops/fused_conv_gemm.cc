// Kiln's fused FusedConv, FusedGemm and FusedMatMul (domain kiln, docs/fused-ops.md):
// schemas, inference and reference kernels. Each runs the ONNX reference kernel it
// replaces (Conv, Gemm, MatMul) on the fused node, then adds the bias / residual and
// applies the activation in place, in the order the unfused graph computes them.
#include <vector>

#include "ops/elementwise_common.h"
#include "ops/fused_activation.h"
#include "ops/layout.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

bool is_float_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// Inference-time checks common to the three ops: required inputs, float dtypes that
// agree, and a valid activation.
Status check_precision(InferContext& ctx);

// Whether input i of a FusedConv with float32 weights is a bfloat16 activation: X or the
// residual Z stored so by the convolution that wrote it (y_dtype, precision_assignment).
bool bf16_activation(const InferContext& ctx, int i) {
  return (i == 0 || i == 3) && ctx.node().op_type() == "FusedConv" && ctx.has_input(1) && ctx.has_input(i) &&
         ctx.input_type(i).dtype == DataType::kBFloat16 && ctx.input_type(1).dtype == DataType::kFloat32;
}

Status check_fused_inputs(InferContext& ctx, int required) {
  const ir::Node& node = ctx.node();
  KILN_RETURN_IF_ERROR(parse_fused_activation(node).status());
  KILN_RETURN_IF_ERROR(check_precision(ctx));
  for (int i = 0; i < required; ++i)
    if (!ctx.has_input(i)) return invalid_argument("node %s: required input %d is missing", node.label().c_str(), i);
  // A FusedConv's X and Z may be bfloat16 beside float32 weights (bf16_activation); the
  // computation is float32's.
  const DataType dt = bf16_activation(ctx, 0) ? DataType::kFloat32 : ctx.input_type(0).dtype;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || bf16_activation(ctx, i)) continue;
    const DataType t = ctx.input_type(i).dtype;
    if (t == DataType::kUndefined) continue;
    if (!is_float_type(t))
      return invalid_argument(
          "node %s: input %d has dtype %s; the fused ops take float32, float64, float16 or "
          "bfloat16",
          node.label().c_str(), i, dtype_name(t));
    if (dt != DataType::kUndefined && t != dt)
      return invalid_argument("node %s: input %d has dtype %s, input 0 has %s", node.label().c_str(), i, dtype_name(t),
                              dtype_name(dt));
  }
  return ok_status();
}

// Inference for an input added to Y that must broadcast to Y without changing Y's shape
// (`exact`: it must have Y's shape). Unknown dims of Y are refined from the input's where
// the input's extent is not 1.
Status check_addend_shape(InferContext& ctx, int i, const char* what, bool exact) {
  if (!ctx.has_input(i)) return ok_status();
  const ir::Node& node = ctx.node();
  const Shape& t = ctx.input_type(i).shape;
  ir::TensorType& out = ctx.output(0);
  if (exact && t.has_rank() && !out.shape.has_rank()) {
    out.shape = t;  // Z has Y's shape
    return ok_status();
  }
  if (!t.has_rank() || !out.shape.has_rank()) return ok_status();
  const int yr = out.shape.rank(), tr = t.rank();
  if (tr > yr || (exact && tr != yr))
    return invalid_argument("node %s: %s %s does not %s the output %s", node.label().c_str(), what,
                            t.to_string().c_str(), exact ? "have the shape of" : "broadcast to",
                            out.shape.to_string().c_str());
  for (int d = 0; d < tr; ++d) {
    const Dim& td = t[d];
    Dim& yd = out.shape[yr - tr + d];
    if (!td.is_static()) continue;
    if (yd.is_static()) {
      if (td.value != yd.value && (exact || td.value != 1))
        return invalid_argument("node %s: %s %s does not %s the output %s", node.label().c_str(), what,
                                t.to_string().c_str(), exact ? "have the shape of" : "broadcast to",
                                out.shape.to_string().c_str());
    } else if (exact || td.value != 1) {
      yd = td;
    }
  }
  return ok_status();
}

// y += t, t broadcasting to y's dims without changing them (`exact`: same dims).
Status add_into(const ir::Node& node, Tensor& y, const Tensor* t, const char* what, bool exact) {
  if (!t) return ok_status();
  if (t->dtype() != y.dtype())
    return invalid_argument("node %s: %s has dtype %s, the output %s", node.label().c_str(), what,
                            dtype_name(t->dtype()), dtype_name(y.dtype()));
  bool fits = exact ? t->dims() == y.dims() : false;
  if (!exact) {
    Expected<std::vector<int64_t>> bd = broadcast_dims(node, y.dims(), t->dims());
    fits = bd.ok() && *bd == y.dims();
  }
  if (!fits)
    return invalid_argument("node %s: %s %s does not %s the output %s", node.label().c_str(), what,
                            dims_to_string(t->dims()).c_str(), exact ? "have the shape of" : "broadcast to",
                            dims_to_string(y.dims()).c_str());
  if (y.num_elements() == 0) return ok_status();
  dispatch_float(y.dtype(), [&]<typename T>() {
    T* py = y.data<T>();
    const T* pt = t->data<T>();
    if (t->dims() == y.dims()) {
      for (int64_t i = 0; i < y.num_elements(); ++i) py[i] += pt[i];
      return;
    }
    const std::vector<int64_t> strides[1] = {broadcast_strides(t->dims(), y.dims())};
    for_each_broadcast(y.dims(), strides, [&](int64_t o, const int64_t* off) { py[o] += pt[off[0]]; });
  });
  return ok_status();
}

// The kernel body shared by the three ops: ONNX reference on the first `onnx_inputs`
// inputs, then the addends (input index, name, exact shape), then the activation.
struct Addend {
  int input;
  const char* what;
  bool exact;
};

Status check_precision(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int parts, bf16_parts(ctx.node()));
  const DataType x = ctx.input_type(0).dtype;
  if (parts && x != DataType::kFloat32 && x != DataType::kUndefined && !(parts == 1 && bf16_activation(ctx, 0)))
    return invalid_argument("node %s: precision %s takes float32 inputs, not %s", ctx.node().label().c_str(),
                            ctx.node().attr_string("precision", "").c_str(), dtype_name(ctx.input_type(0).dtype));
  return ok_status();
}

inline float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

// A float32 copy of `t` with every element rounded to the nearest bfloat16.
Tensor rounded_to_bf16(const Tensor& t) {
  Tensor r = Tensor::make(DataType::kFloat32, t.dims());
  const float* src = t.data<float>();
  float* dst = r.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) dst[i] = round_bf16(src[i]);
  return r;
}

// bf16x3 operands: `t` (N x C x ..., or W: O x C/g x ...) with axis 1 tripled per group of
// `groups`: the parts `order` (true: hi, false: lo) in turn.
Tensor split_bf16x3(const Tensor& t, int64_t groups, const bool (&order)[3]) {
  std::vector<int64_t> dims = t.dims();
  const int64_t outer = dims[0], c = dims[1], cg = c / groups;
  const int64_t inner = t.num_elements() / (outer * c);
  dims[1] = 3 * c;
  Tensor r = Tensor::make(DataType::kFloat32, dims);
  const float* src = t.data<float>();
  float* dst = r.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t g = ch / cg, cl = ch % cg;
      for (int part = 0; part < 3; ++part) {
        float* d = dst + ((o * 3 * c) + g * 3 * cg + part * cg + cl) * inner;
        const float* s = src + (o * c + ch) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const float hi = round_bf16(s[i]);
          d[i] = order[part] ? hi : round_bf16(s[i] - hi);
        }
      }
    }
  return r;
}

Status fused_kernel(KernelContext& ctx, const char* onnx_op, int onnx_inputs, std::vector<Addend> addends) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(FusedActivation act, parse_fused_activation(node));
  for (int i = 0; i < 2; ++i)
    if (!ctx.input(i)) return invalid_argument("node %s: required input %d is missing", node.label().c_str(), i);
  const DataType dt = ctx.input(0)->dtype();
  if (dt != DataType::kFloat32 && dt != DataType::kFloat64) return unsupported_dtype(node, dt);
  KILN_ASSIGN_OR_RETURN(const int parts, bf16_parts(node));
  std::vector<RuntimeValue> rounded;
  std::vector<const RuntimeValue*> first_inputs;
  if (parts) {
    for (int i = 0; i < 2; ++i)
      if (ctx.input(i)->dtype() != DataType::kFloat32)
        return invalid_argument("node %s: precision %s takes float32 inputs, input %d is %s", node.label().c_str(),
                                node.attr_string("precision", "").c_str(), i, dtype_name(ctx.input(i)->dtype()));
    if (parts == 1) {
      for (int i = 0; i < 2; ++i) rounded.emplace_back(rounded_to_bf16(*ctx.input(i)));
    } else {
      const Tensor& x = *ctx.input(0);
      const Tensor& w = *ctx.input(1);
      const int64_t group = node.attr_int("group", 1);
      if (x.dims().size() < 3 || w.dims().size() != x.dims().size() || group < 1 || x.dims()[1] % group != 0 ||
          w.dims()[1] * group != x.dims()[1])
        return invalid_argument("node %s: X %s and W %s do not fit group %lld", node.label().c_str(),
                                dims_to_string(x.dims()).c_str(), dims_to_string(w.dims()).c_str(), (long long)group);
      rounded.emplace_back(split_bf16x3(x, group, {true, true, false}));
      rounded.emplace_back(split_bf16x3(w, 1, {true, false, true}));
    }
    for (const RuntimeValue& v : rounded) first_inputs.push_back(&v);
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, run_onnx_reference(ctx, onnx_op, onnx_inputs, first_inputs));
  for (const Addend& a : addends) KILN_RETURN_IF_ERROR(add_into(node, y, ctx.input(a.input), a.what, a.exact));
  KILN_RETURN_IF_ERROR(apply_fused_activation(node, act, y));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

// ---- FusedConv -------------------------------------------------------------------------

// X's and Y's layouts (Z has Y's): plain NCHW, or channel-blocked NC1HWC0 with c0 channels
// per block (ops/layout.h), which the layout_assignment pass sets between convolutions.
struct ConvFormats {
  bool x_blocked = false;
  bool y_blocked = false;
  int64_t c0 = 0;
  bool any_blocked() const { return x_blocked || y_blocked; }
};

Expected<ConvFormats> conv_formats(const ir::Node& node) {
  ConvFormats f;
  const std::string x = node.attr_string("x_format", kFormatPlain);
  const std::string y = node.attr_string("y_format", kFormatPlain);
  if (!valid_format(x) || !valid_format(y))
    return invalid_argument("node %s: x_format '%s' / y_format '%s': expected %s or %s", node.label().c_str(),
                            x.c_str(), y.c_str(), kFormatPlain, kFormatBlocked);
  f.x_blocked = is_blocked_format(x);
  f.y_blocked = is_blocked_format(y);
  f.c0 = node.attr_int("c0", 0);
  if (f.any_blocked() && (f.c0 <= 0 || f.c0 > 64))
    return invalid_argument("node %s: a blocked format needs c0 in 1..64, got %lld", node.label().c_str(),
                            (long long)f.c0);
  return f;
}

Status infer_fused_conv_plain(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(run_onnx_inference(ctx, "Conv"));
  return check_addend_shape(ctx, 3, "residual Z", true);
}

// The node's y_dtype (kUndefined when it has none), checked against W's dtype.
Expected<DataType> y_dtype_attr(const ir::Node& node, DataType w) {
  if (!node.has_attr("y_dtype")) return DataType::kUndefined;
  const std::string name = node.attr_string("y_dtype", "");
  const std::optional<DataType> t = dtype_from_name(name);
  if (!t || (*t != DataType::kFloat32 && *t != DataType::kBFloat16))
    return invalid_argument("node %s: y_dtype '%s': expected float32 or bfloat16", node.label().c_str(), name.c_str());
  if (w != DataType::kFloat32 && w != DataType::kUndefined)
    return invalid_argument("node %s: y_dtype needs float32 weights, W is %s", node.label().c_str(), dtype_name(w));
  return *t;
}

// Y's dtype: X's; float32 for a bfloat16 X with float32 weights; y_dtype ("float32" or
// "bfloat16", float32 weights only) where the node gives one: Y rounded to bfloat16 (to
// nearest even) after the activation.
Status infer_conv_output_dtype(InferContext& ctx) {
  ir::TensorType& y = ctx.output(0);
  if (bf16_activation(ctx, 0)) y.dtype = DataType::kFloat32;
  KILN_ASSIGN_OR_RETURN(DataType t, y_dtype_attr(ctx.node(), ctx.has_input(1) ? ctx.input_type(1).dtype : DataType::kUndefined));
  if (t != DataType::kUndefined) y.dtype = t;
  return ok_status();
}

Status infer_fused_conv(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_fused_inputs(ctx, 2));
  KILN_ASSIGN_OR_RETURN(ConvFormats f, conv_formats(ctx.node()));
  if (!f.any_blocked()) {
    KILN_RETURN_IF_ERROR(infer_fused_conv_plain(ctx));
  } else {
    KILN_RETURN_IF_ERROR(infer_on_plain_view(ctx, f.c0, {f.x_blocked, false, false, f.y_blocked}, f.y_blocked,
                                             infer_fused_conv_plain));
  }
  return infer_conv_output_dtype(ctx);
}

Status fused_conv_plain(KernelContext& ctx) { return fused_kernel(ctx, "Conv", 3, {{3, "residual Z", true}}); }

// Blocked layouts: the plain computation on the plain views (ops/layout.h).
Status fused_conv_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(ConvFormats f, conv_formats(ctx.node()));
  if (!f.any_blocked()) return fused_conv_plain(ctx);
  return run_on_plain_view(ctx, f.c0, {f.x_blocked, false, false, f.y_blocked}, f.y_blocked, fused_conv_plain);
}

// The reference for FusedConv's dtypes: half types through float32 (with_half_as_float),
// a bfloat16 X or Z beside float32 weights converted to float32 (the output then float32),
// and Y rounded to bfloat16 last where y_dtype asks for it.
KernelFn fused_conv_reference() {
  KernelFn through_float = with_half_as_float(fused_conv_kernel);
  return [through_float](KernelContext& ctx) -> Status {
    const ir::Node& node = ctx.node();
    const Tensor* w = ctx.input(1);
    auto bf16_input = [&](int i) {  // bf16_activation's test on the run's tensors
      const Tensor* t = ctx.input(i);
      return t && w && t->dtype() == DataType::kBFloat16 && w->dtype() == DataType::kFloat32;
    };
    KILN_ASSIGN_OR_RETURN(DataType y_dtype, y_dtype_attr(node, w ? w->dtype() : DataType::kUndefined));
    const bool bf16_y = y_dtype == DataType::kBFloat16;
    if (!bf16_input(0) && !bf16_input(3) && !bf16_y) return through_float(ctx);
    RuntimeValue as_float[2];  // X's, Z's
    std::vector<const RuntimeValue*> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.value(i));
    for (int i : {0, 3}) {
      if (!bf16_input(i)) continue;
      RuntimeValue& v = as_float[i == 0 ? 0 : 1];
      v = half_to_float(*ctx.input(i));
      inputs[static_cast<size_t>(i)] = &v;
    }
    std::vector<RuntimeValue> outputs(1);
    KernelContext inner(node, std::move(inputs), &outputs, ctx.subgraphs());
    KILN_RETURN_IF_ERROR(through_float(inner));
    RuntimeValue& y = outputs[0];
    if (bf16_y && y.is_tensor() && y.tensor().dtype() == DataType::kFloat32)
      ctx.set_output(0, float_to_half(y.tensor(), DataType::kBFloat16));
    else
      ctx.set_output_value(0, std::move(y));
    return ok_status();
  };
}

// ---- FusedGemm -------------------------------------------------------------------------

Status infer_fused_gemm(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_fused_inputs(ctx, 2));
  KILN_RETURN_IF_ERROR(run_onnx_inference(ctx, "Gemm"));
  if (ctx.has_input(2) && ctx.input_type(2).shape.has_rank() && ctx.input_type(2).shape.rank() > 2)
    return invalid_argument("node %s: C %s has rank > 2", ctx.node().label().c_str(),
                            ctx.input_type(2).shape.to_string().c_str());
  return check_addend_shape(ctx, 2, "C", false);  // C broadcasts to [M, N] in one direction
}

Status fused_gemm_kernel(KernelContext& ctx) { return fused_kernel(ctx, "Gemm", 3, {}); }

// ---- FusedMatMul -----------------------------------------------------------------------

Status infer_fused_matmul(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_fused_inputs(ctx, 2));
  KILN_RETURN_IF_ERROR(run_onnx_inference(ctx, "MatMul"));
  KILN_RETURN_IF_ERROR(check_addend_shape(ctx, 2, "Bias", false));
  return check_addend_shape(ctx, 3, "residual Z", false);
}

Status fused_matmul_kernel(KernelContext& ctx) {
  return fused_kernel(ctx, "MatMul", 2, {{2, "Bias", false}, {3, "residual Z", false}});
}

OpSchema fused_schema(const char* name, int max_inputs) {
  return OpSchema(name, kKilnDomain)
      .since(1, kKilnOpset)
      .inputs(2, max_inputs)
      .outputs(1, 1)
      .attr("activation", AttrKind::kString)
      .attr("activation_params", AttrKind::kFloats)
      .attr("activation_post_scale", AttrKind::kFloat)
      .attr("activation_post_shift", AttrKind::kFloat)
      .attr("precision", AttrKind::kString);
}

}  // namespace

KILN_REGISTER_OP(fused_schema("FusedConv", 4)
                     .attr("auto_pad", AttrKind::kString)
                     .attr("dilations", AttrKind::kInts)
                     .attr("group", AttrKind::kInt)
                     .attr("kernel_shape", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .attr("x_format", AttrKind::kString)
                     .attr("y_format", AttrKind::kString)
                     .attr("c0", AttrKind::kInt)
                     .attr("y_dtype", AttrKind::kString)
                     .infer(infer_fused_conv)
                     .kernel(fused_conv_reference())
                     .doc("Y = act(Conv(X, W, B) + Z) (docs/fused-ops.md)"));
KILN_REGISTER_OP(fused_schema("FusedGemm", 3)
                     .attr("alpha", AttrKind::kFloat)
                     .attr("beta", AttrKind::kFloat)
                     .attr("transA", AttrKind::kInt)
                     .attr("transB", AttrKind::kInt)
                     .infer(infer_fused_gemm)
                     .kernel(with_half_as_float(fused_gemm_kernel))
                     .doc("Y = act(alpha A' B' + beta C) (docs/fused-ops.md)"));
KILN_REGISTER_OP(fused_schema("FusedMatMul", 4)
                     .infer(infer_fused_matmul)
                     .kernel(with_half_as_float(fused_matmul_kernel))
                     .doc("Y = act(MatMul(A, B) + Bias + Z) (docs/fused-ops.md)"));

}  // namespace kiln::ops
