// oneDNN int8 convolution kernels for ONNX QLinearConv and kiln FusedQLinearConv (its Relu /
// Clip in the epilogue): uint8 or int8 X, int8 weights with zero points 0 (symmetric, per
// tensor or per output channel, what quantisers write), uint8 or int8 Y. On AVX512-VNNI
// oneDNN runs its x8s8s32x kernels: int32 accumulation of 4 byte products per lane and
// instruction, the requantisation fused into the epilogue:
//
//   y = saturate(round(act((acc + B) * x_scale * w_scale[c] / y_scale)) + y_zero_point)
//
// with acc the int32 sum of x_q * w_q over the window minus x_zero_point's share, which
// oneDNN computes from a runtime source zero point (padding counts as x_zero_point: the real
// value 0, as ONNX pads the real tensor). oneDNN 2.6 adds the bias to the accumulator before
// the output scale, so QLinearConv's int32 B (of scale x_scale * w_scale) is passed as it is,
// converted to float32 (int8_epilogue.h: exact below 2^24, within float32 rounding above).
//
// X and Y are channels-last ([N, 1, H, W, C], NHWC's bytes: FusedQLinearConv's x_format /
// y_format, set by the int8_layout pass between int8 operators) or plain N C H W. The
// primitive picks its own layouts (format "any": NHWC for the VNNI kernels), so channels-last
// tensors go in and out as they are; plain ones are reordered through the thread's workspace
// (measured on an int8 ResNet-50 at one thread: 7.5 ms of reorders against 11.9 ms of
// convolutions when every tensor was plain).
//
// A FusedQLinearConv with a residual R (ops/fused_qlinear.cc: inputs 9..13) adds it in the
// same epilogue: on a channels-last Y as oneDNN's binary post-op reading R where it is (see
// prepare_qconv), else as its sum post-op, R first copied into Y (nothing to copy when Y was
// planned over R's bytes; reordered into the workspace's destination when Y is plain and the
// primitive writes NHWC). Either computes, in units of y_scale,
//
//   y = saturate(round(act(clip(acc', C_lo, C_hi) + R_scale / y_scale * (R - R_zero_point))) + y_zero_point)
//
// with acc' = (acc + B) * x_scale * w_scale[c] / y_scale (the output scales) and [C_lo, C_hi]
// the range of the convolution's own quantisation C in units of y_scale (an eltwise clip
// before the sum): C's saturation is kept, its rounding is not (at most one step from the QDQ
// graph, docs/quantization.md). R has Y's dtype, shape and layout.
//
// Inputs other than the prepared ones (a shape, or a constant a caller replaced by feeding
// it) run the reference kernel.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/lowp.h"
#include "core/parallel.h"
#include "kernels/cpu/int8_epilogue.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"
#include "ops/layout.h"
#include "ops/spatial_util.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

memory::data_type dnnl_x8(DataType t) { return t == DataType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8; }

// Inputs that must be constants: scales, zero points, W and B; with a residual (input 9)
// its scale and zero point and those of the convolution's own output (10..13).
constexpr int kConstantInputs[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13};
constexpr int kResidual = 9, kResidualScale = 10, kResidualZeroPoint = 11, kConvScale = 12, kConvZeroPoint = 13;

// The residual of a FusedQLinearConv, as its epilogue takes it.
struct QConvResidual {
  bool on = false;
  DataType dtype = DataType::kUInt8;
  float scale = 1;  // R_scale / y_scale: the sum post-op's scale
  int32_t zero_point = 0;
  float conv_lo = 0, conv_hi = 0;  // the range of C, in units of y_scale
};

struct QConvPlan {
  std::vector<int64_t> x_dims, w_dims, y_dims;  // logical N C D...
  std::vector<int64_t> x_tensor_dims, y_tensor_dims;  // [N, 1, H, W, C] when channels-last
  bool x_channels_last = false, y_channels_last = false;
  DataType x_dtype = DataType::kUInt8, y_dtype = DataType::kUInt8;
  int64_t group = 1;
  ops::WindowGeometry geo;
  std::vector<float> output_scales;  // x_scale * w_scale[c] / y_scale, per output channel
  int32_t x_zero_point = 0, y_zero_point = 0;
  std::vector<float> bias;  // B as float32, empty when absent
  ops::FusedActivation act;
  QConvResidual residual;
  const Tensor* weights = nullptr;
  std::vector<const Tensor*> constants;  // kConstantInputs (null where absent)
};

double scalar(const Tensor& t) { return lowp_to_double(t.dtype(), t.raw_data(), 0); }

const Tensor* constant_input(const ir::Node& node, int i) {
  const ir::Value* v = node.input(i);
  return v && v->has_initializer() ? v->initializer() : nullptr;
}

bool x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

// Inputs 9..13 of a FusedQLinearConv with a residual: R like Y (its tensor shape and dtype, in
// Y's layout), constant scalars for the rest.
Expected<QConvResidual> plan_residual(const ir::Node& node, const QConvPlan& p, double y_scale) {
  const std::string label = node.label();
  const ir::Value* r = node.input(kResidual);
  KILN_RETURN_IF_ERROR(require_static_tensor("R", r, {DataType::kInt8, DataType::kUInt8}));
  if (r->shape().static_dims() != p.y_tensor_dims || r->dtype() != p.y_dtype)
    return unsupported("node %s: R must have Y's shape and dtype", label.c_str());
  for (int i = kResidualScale; i <= kConvZeroPoint; ++i)
    if (!constant_input(node, i) || constant_input(node, i)->num_elements() != 1)
      return unsupported("node %s: input %d must be a constant scalar", label.c_str(), i);
  const Tensor& r_scale = *constant_input(node, kResidualScale);
  const Tensor& r_zp = *constant_input(node, kResidualZeroPoint);
  const Tensor& c_scale = *constant_input(node, kConvScale);
  const Tensor& c_zp = *constant_input(node, kConvZeroPoint);
  if (r_scale.dtype() != DataType::kFloat32 || c_scale.dtype() != DataType::kFloat32 || r_zp.dtype() != r->dtype() ||
      !x8(c_zp.dtype()))
    return unsupported("node %s: residual scales must be float32, zero points int8 / uint8", label.c_str());
  QConvResidual res;
  res.on = true;
  res.dtype = r->dtype();
  res.scale = static_cast<float>(scalar(r_scale) / y_scale);
  res.zero_point = static_cast<int32_t>(scalar(r_zp));
  const double sc = scalar(c_scale), zc = scalar(c_zp);
  const bool u8 = c_zp.dtype() == DataType::kUInt8;
  res.conv_lo = static_cast<float>(((u8 ? 0.0 : -128.0) - zc) * sc / y_scale);
  res.conv_hi = static_cast<float>(((u8 ? 255.0 : 127.0) - zc) * sc / y_scale);
  if (!(std::isfinite(res.scale) && res.scale > 0 && std::isfinite(res.conv_lo) && std::isfinite(res.conv_hi)))
    return unsupported("node %s: residual scales must be finite and positive", label.c_str());
  return res;
}

Expected<QConvPlan> plan_qconv(const ir::Node& node) {
  const std::string label = node.label();
  const bool fused = node.domain() == ops::kKilnDomain && node.op_type() == "FusedQLinearConv";
  if (!fused && !(node.domain() == ops::kOnnxDomain && node.op_type() == "QLinearConv"))
    return unsupported("node %s: not a QLinearConv or FusedQLinearConv", label.c_str());
  const ir::Value* x = node.input(0);
  const ir::Value* y = node.output(0);
  if (node.outputs().size() != 1 || !x || !y) return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  KILN_RETURN_IF_ERROR(require_static_tensor("X", x, {DataType::kInt8, DataType::kUInt8}));
  KILN_RETURN_IF_ERROR(require_static_tensor("Y", y, {DataType::kInt8, DataType::kUInt8}));
  QConvPlan p;
  for (int i : kConstantInputs) {
    const ir::Value* v = i < static_cast<int>(node.num_inputs()) ? node.input(i) : nullptr;
    if (v && !v->has_initializer())
      return unsupported("node %s: input %d must be a constant (initializer)", label.c_str(), i);
    p.constants.push_back(constant_input(node, i));
  }
  for (int i = 1; i <= 7; ++i)
    if (!constant_input(node, i)) return unsupported("node %s: input %d is missing", label.c_str(), i);
  const Tensor& x_scale = *constant_input(node, 1);
  const Tensor& x_zp = *constant_input(node, 2);
  const Tensor& w = *constant_input(node, 3);
  const Tensor& w_scale = *constant_input(node, 4);
  const Tensor& w_zp = *constant_input(node, 5);
  const Tensor& y_scale = *constant_input(node, 6);
  const Tensor& y_zp = *constant_input(node, 7);
  const Tensor* b = constant_input(node, 8);
  p.x_dtype = x->dtype();
  p.y_dtype = y->dtype();
  if (w.dtype() != DataType::kInt8) return unsupported("node %s: W must be int8 (oneDNN's s8 weights)", label.c_str());
  if (x_zp.dtype() != p.x_dtype || y_zp.dtype() != p.y_dtype)
    return unsupported("node %s: zero points must have their operands' dtypes", label.c_str());
  for (const Tensor* s : {&x_scale, &w_scale, &y_scale})
    if (s->dtype() != DataType::kFloat32) return unsupported("node %s: scales must be float32", label.c_str());
  if (x_scale.num_elements() != 1 || x_zp.num_elements() != 1 || y_scale.num_elements() != 1 || y_zp.num_elements() != 1)
    return unsupported("node %s: per-tensor X and Y quantisation only", label.c_str());
  KILN_RETURN_IF_ERROR(int8::check_symmetric_weights(node, &w_zp));
  p.x_tensor_dims = p.x_dims = x->shape().static_dims();
  p.y_tensor_dims = p.y_dims = y->shape().static_dims();
  p.w_dims = w.dims();
  // Channels-last X / Y: [N, 1, H, W, C] holds N C H W in NHWC order.
  auto unblock = [&](const char* attr, std::vector<int64_t>& dims, bool& channels_last) -> Status {
    const std::string f = fused ? node.attr_string(attr, ops::kFormatPlain) : ops::kFormatPlain;
    if (!ops::is_blocked_format(f)) return ok_status();
    if (dims.size() != 5 || dims[1] != 1)
      return unsupported("node %s: a channels-last tensor is [N, 1, H, W, C]", label.c_str());
    dims = {dims[0], dims[4], dims[2], dims[3]};
    channels_last = true;
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(unblock("x_format", p.x_dims, p.x_channels_last));
  KILN_RETURN_IF_ERROR(unblock("y_format", p.y_dims, p.y_channels_last));
  const size_t rank = p.x_dims.size();
  if (rank < 3 || rank > 5 || p.w_dims.size() != rank || p.y_dims.size() != rank)
    return unsupported("node %s: 1-D, 2-D and 3-D convolutions only", label.c_str());
  for (int64_t d : p.x_dims)
    if (d <= 0) return unsupported("node %s: empty input", label.c_str());
  p.group = node.attr_int("group", 1);
  const int64_t c_in = p.x_dims[1], c_out = p.w_dims[0];
  if (p.group < 1 || c_out % p.group != 0 || c_in != p.w_dims[1] * p.group)
    return unsupported("node %s: group %lld does not fit X and W", label.c_str(), (long long)p.group);
  if (w_scale.num_elements() != 1 && w_scale.num_elements() != c_out)
    return unsupported("node %s: w_scale must be a scalar or have C_out values", label.c_str());
  if (b && (b->dtype() != DataType::kInt32 || b->num_elements() != c_out))
    return unsupported("node %s: B must be int32 [C_out]", label.c_str());
  KILN_ASSIGN_OR_RETURN(p.geo, ops::window_geometry(node, std::vector<int64_t>(p.x_dims.begin() + 2, p.x_dims.end()),
                                                    std::vector<int64_t>(p.w_dims.begin() + 2, p.w_dims.end()),
                                                    false));
  std::vector<int64_t> expect{p.x_dims[0], c_out};
  expect.insert(expect.end(), p.geo.out.begin(), p.geo.out.end());
  if (expect != p.y_dims) return unsupported("node %s: output shape does not fit the geometry", label.c_str());
  const double sx = scalar(x_scale), sy = scalar(y_scale);
  for (int64_t c = 0; c < c_out; ++c) {
    const double sw = lowp_to_double(w_scale.dtype(), w_scale.raw_data(), w_scale.num_elements() == 1 ? 0 : c);
    // As the reference computes it (scale_ratio, float32 scales): float32(float32(sx sw) / sy).
    p.output_scales.push_back(static_cast<float>(static_cast<double>(static_cast<float>(sx * sw)) / sy));
  }
  p.x_zero_point = static_cast<int32_t>(scalar(x_zp));
  p.y_zero_point = static_cast<int32_t>(scalar(y_zp));
  KILN_RETURN_IF_ERROR(int8::check_output_scales(node, p.output_scales));
  KILN_ASSIGN_OR_RETURN(p.bias, int8::float_bias(node, b, c_out));
  p.weights = &w;
  if (fused) {
    KILN_ASSIGN_OR_RETURN(p.act, int8::epilogue_activation(node, sy));
  }
  if (fused && static_cast<int>(node.num_inputs()) > kResidual && node.input(kResidual)) {
    KILN_ASSIGN_OR_RETURN(p.residual, plan_residual(node, p, sy));
  }
  return p;
}

class OnednnQConvKernel final : public Kernel {
 public:
  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return impl_; }

  const ops::KernelFn* reference = nullptr;
  std::vector<Tensor> constants;  // the node's constant inputs 1..8 (undefined where absent)
  QConvPlan plan;
  std::string impl_;
  dnnl::convolution_forward conv;
  onednn::LayoutBridge layouts;
  memory weights;
  std::shared_ptr<void> weights_buffer;
  memory bias;
  memory x_zero_point, y_zero_point;  // s32 scalars, runtime zero points
  onednn::RunMemories residual_memories;  // R in Y's layout (binary post-op, or reordered in)
  bool residual_binary = false;           // R read by a binary post-op, else summed onto Y
  memory::desc residual_md;               // R's layout for the binary post-op

  bool inputs_as_prepared(const ops::KernelContext& ctx) const {
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != plan.x_dtype || x->dims() != plan.x_tensor_dims) return false;
    for (size_t i = 0; i < constants.size(); ++i) {
      const Tensor* t = ctx.input(kConstantInputs[i]);
      if (!constants[i].defined() ? t != nullptr : (!t || t->raw_data() != constants[i].raw_data())) return false;
    }
    if (plan.residual.on) {
      const Tensor* r = ctx.input(kResidual);
      if (!r || r->dtype() != plan.residual.dtype || r->dims() != plan.y_tensor_dims) return false;
    }
    return true;
  }
};

Status OnednnQConvKernel::run(ops::KernelContext& ctx) const {
  const ir::Node& node = ctx.node();
  if (!inputs_as_prepared(ctx)) return (*reference)(ctx);
  const Tensor* x = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, plan.y_dtype, plan.y_tensor_dims, TensorInit::kUninitialized));
  const onednn::LayoutBridge& lb = layouts;
  char* ws = static_cast<char*>(onednn::thread_workspace(lb.workspace_bytes));
  if (!ws && lb.workspace_bytes > 0)
    return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(),
                              lb.workspace_bytes);
  const void* r = plan.residual.on ? ctx.input(kResidual)->raw_data() : nullptr;
  if (r && !residual_binary && !lb.reorder_dst && r != y->raw_data()) {
    // The sum post-op adds to the destination's bytes: R first (Y's layout and dtype). Split
    // only above 1 MiB: below, a fork-join costs more than the copy.
    const char* rp = static_cast<const char*>(r);
    char* yp = static_cast<char*>(y->raw_data());
    parallel_for(0, y->num_elements(), int64_t{1} << 20, [&](int64_t b, int64_t e) {
      std::memcpy(yp + b, rp + b, static_cast<size_t>(e - b));
    });
  }
  try {
    if (r && lb.reorder_dst) {
      // Y plain, the primitive's destination NHWC in the workspace: R reordered into it.
      const onednn::LayoutBridge::Bound m = lb.bind(ws, x->raw_data(), y->raw_data());
      const memory& r_user = residual_memories.get(0, lb.user_dst, r);
      onednn::Args{{DNNL_ARG_FROM, &r_user}, {DNNL_ARG_TO, &m.dst}, {DNNL_ARG_SCRATCHPAD, &m.scratch}}.execute(
          lb.dst_in_reorder, onednn::thread_stream());
    }
    onednn::Args args{{DNNL_ARG_WEIGHTS, &weights}};
    if (plan.x_zero_point != 0) args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, x_zero_point);
    if (plan.y_zero_point != 0) args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, y_zero_point);
    if (!plan.bias.empty()) args.add(DNNL_ARG_BIAS, bias);
    if (r && residual_binary)
      args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, residual_memories.get(0, residual_md, r));
    lb.run(conv, args, ws, x->raw_data(), y->raw_data(), onednn::thread_stream());
  } catch (const dnnl::error& e) {
    return internal_error("node %s: oneDNN int8 convolution failed: %s", node.label().c_str(), e.what());
  }
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_qconv(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(QConvPlan plan, plan_qconv(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
  auto k = std::make_unique<OnednnQConvKernel>();
  k->plan = std::move(plan);
  k->reference = &schema->kernel_fn();
  for (const Tensor* t : k->plan.constants) k->constants.push_back(t ? *t : Tensor());
  const QConvPlan& p = k->plan;
  const int rank = static_cast<int>(p.x_dims.size());
  try {
    onednn::CreationThreadsScope threads;
    const memory::dims w_dims = onednn::grouped_weight_dims(p.w_dims, p.group);
    const int w_rank = static_cast<int>(w_dims.size());
    const auto s8 = memory::data_type::s8;
    k->layouts.user_src = memory::desc(onednn::to_dims(p.x_dims), dnnl_x8(p.x_dtype),
                                       p.x_channels_last ? memory::format_tag::nhwc : onednn::plain_tag(rank));
    k->layouts.user_dst = memory::desc(onednn::to_dims(p.y_dims), dnnl_x8(p.y_dtype),
                                       p.y_channels_last ? memory::format_tag::nhwc : onednn::plain_tag(rank));
    const memory::desc user_w(w_dims, s8, onednn::plain_tag(w_rank));
    const memory::desc any_src(onednn::to_dims(p.x_dims), dnnl_x8(p.x_dtype), memory::format_tag::any);
    const memory::desc any_dst(onednn::to_dims(p.y_dims), dnnl_x8(p.y_dtype), memory::format_tag::any);
    const memory::desc any_w(w_dims, s8, memory::format_tag::any);
    const memory::desc bias_md =
        p.bias.empty() ? memory::desc() : memory::desc({p.w_dims[0]}, memory::data_type::f32, memory::format_tag::a);
    const onednn::ConvWindow cw = onednn::conv_window(p.geo);
    dnnl::post_ops activation_only;
    KILN_RETURN_IF_ERROR(onednn::append_activation(p.act, activation_only));
    // A residual as a binary post-op (R read where it is) or as a sum (R copied into Y first).
    // The binary one is in units of R_scale until a linear post-op takes the sum to y_scale's:
    // acc * x_scale w_scale / R_scale, clipped, + R, then * R_scale / y_scale - R_zero_point
    // R_scale / y_scale.
    auto make_pd = [&](bool binary) {
      const QConvResidual& r = p.residual;
      std::vector<float> scales = p.output_scales;
      dnnl::post_ops po;
      if (r.on) {
        const float to_r = binary ? 1.0f / r.scale : 1.0f;
        for (float& v : scales) v *= to_r;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, r.conv_lo * to_r, r.conv_hi * to_r);
        if (binary) {
          po.append_binary(dnnl::algorithm::binary_add, k->residual_md);
          po.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, r.scale, -static_cast<float>(r.zero_point) * r.scale);
        } else {
          po.append_sum(r.scale, r.zero_point, dnnl_x8(r.dtype));
        }
      }
      (void)onednn::append_activation(p.act, po);  // cannot fail: it just succeeded above
      dnnl::primitive_attr attr;
      attr.set_post_ops(po);
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      // Per output channel: dim 0 of the weights, or dims 0 and 1 (g, oc/g) with groups, which
      // is dim 1 of the destination either way.
      attr.set_output_scales(scales.size() == 1 ? 0 : 1 << 1, scales);
      // Zero points only where they are not 0: with one, oneDNN runs a compensation pass (and
      // picks other kernels); the outputs of a Relu quantised uint8 have zero point 0.
      if (p.x_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      if (p.y_zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           any_src, any_w, bias_md, binary ? k->layouts.user_dst : any_dst, cw.strides,
                                           cw.dilations, cw.pad_l, cw.pad_r);
      return dnnl::convolution_forward::primitive_desc(desc, attr, onednn::cpu_engine());
    };
    // The binary post-op where oneDNN has a fast kernel for it (a channels-last Y, R in its
    // layout): in a probe of ResNet-50's four residual shapes it ran jit_int8_1x1 at 196, 152,
    // 129, 129 us at one thread against brgconv_1x1 with the sum and the copy at 213, 163, 132,
    // 131, and at two threads at 100, 86, 79, 71 against 316, 167, 115, 86 (the copy, by one
    // thread, of what both threads' caches hold). Else the sum.
    dnnl::convolution_forward::primitive_desc pd;
    if (p.residual.on && p.y_channels_last) {
      k->residual_md = k->layouts.user_dst;
      try {
        pd = make_pd(true);
        k->residual_binary = onednn::implementation_name(pd).rfind("onednn:ref", 0) != 0;
      } catch (const dnnl::error&) {
        k->residual_binary = false;  // not for this CPU or shape: the sum
      }
    }
    if (!k->residual_binary) pd = make_pd(false);
    k->impl_ = onednn::implementation_name(pd);
    // oneDNN's reference int8 convolution is no fast kernel: the node then runs Kiln's own
    // reference, which the compile report names.
    if (k->impl_.rfind("onednn:ref", 0) == 0)
      return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), k->impl_.c_str());
    k->conv = dnnl::convolution_forward(pd);
    k->layouts.plan(pd.src_desc(), pd.dst_desc(), pd.scratchpad_desc().get_size(), p.residual.on && !k->residual_binary);
    k->weights_buffer = onednn::pack_shared(user_w, p.weights->raw_data(), pd.weights_desc());
    k->weights = memory(pd.weights_desc(), onednn::cpu_engine(), k->weights_buffer.get());
    if (!p.bias.empty()) k->bias = int8::float_memory(bias_md, p.bias);
    k->x_zero_point = onednn::s32_scalar(p.x_zero_point);
    k->y_zero_point = onednn::s32_scalar(p.y_zero_point);
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no int8 convolution for it: %s", node.label().c_str(), e.what());
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

Status qconv_applicable(const ir::Node& node) { return plan_qconv(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "QLinearConv",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = qconv_applicable,
                                    .prepare = prepare_qconv}));
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "FusedQLinearConv",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = qconv_applicable,
                                    .prepare = prepare_qconv}));

}  // namespace kiln::kernels
