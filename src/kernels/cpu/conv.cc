// oneDNN convolution kernels for ONNX Conv and kiln FusedConv (float32, 1-D/2-D/3-D, groups
// and depthwise, strides, dilations, explicit and auto_pad pads; FusedConv's bias, residual Z
// and activation as post-ops): weights pre-packed at prepare, one primitive per node. A
// FusedConv whose x_format / y_format is NC1HWC0 (the layout_assignment pass) reads / writes
// oneDNN's nChw8c / nChw16c directly, the layout the primitive computes in: no reorder.
//
// Y = act(conv(X, W) + B + Z) runs as one primitive: the bias is the convolution's own bias,
// Z a binary-add post-op reading Z on large blocked maps, else a sum post-op on a destination
// initialised with Z (either way before the eltwise post-ops of the activation, onednn_util.h's
// mapping). 3x3 stride-1 convolutions take oneDNN's Winograd kernel where it has one
// (kWinogradMinPixels). precision bf16 2-D convolutions between NC1HWC0 tensors of 16-channel
// blocks run oneDNN's jit_bf16 kernels on them as they are: X converted to bfloat16 in its own
// layout (nChw16c, the layout bridge's reorder: 0.1 ns per element), Y and Z read and written
// in place; on ResNet-50 (Zen 5, one thread) 26 ms per run against 29 through NHWC and 43 in
// float32; an X or Z stored in bfloat16 (another such convolution's output, y_dtype) is read
// as it is, and a bfloat16 Y written by the primitive (with a bfloat16 Y or Z the residual
// always goes through the binary post-op: the sum post-op would add Z rounded, or need it in
// Y's bytes). Other bf16 / bf16x3 2-D convolutions compute in NHWC through Kiln's own
// conversions (bf16_layout.h, run_nhwc). A plain source and destination stay plain
// N C D... for the graph; the primitive picks its own layout (format "any") and the run
// reorders X into it and Y back, through the thread's workspace (a Z into the destination's
// layout). Measured on ResNet-50 (-O3, batch 1; this machine's oneDNN runs its AVX2 kernels),
// one thread, best of 15 runs in three alternated rounds on a shared machine: "any" + reorders
// 123-168 ms, plain nchw source and destination 280-386 ms (oneDNN then runs im2col + sgemm, "gemm:jit", for every conv;
// even for the 1x1 convs alone plain is 3x slower: 168 vs 57 ms per run). With "any" the
// activation reorders cost about 12 ms of ~128 ms per run at 1 thread (DNNL_VERBOSE): what a
// layout pass keeping activations blocked between convs would save.
//
// A run whose inputs differ from those prepared for (shape, or a W / B tensor other than the
// node's initializer, which a caller may override by feeding the graph input) runs the
// reference kernel. Primitives are created for the thread count kiln::num_threads() gives at
// prepare (oneDNN fixes it at creation).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/bf16_layout.h"
#include "kernels/cpu/lent_workspace.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"
#include "ops/layout.h"
#include "ops/spatial_util.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

// Everything about a node the kernel needs, read and validated without oneDNN.
struct ConvPlan {
  std::vector<int64_t> x_dims, w_dims, y_dims;  // logical N C D... (plain) dims
  // The tensors' own dims: the logical ones, or N C1 D... C0 for a blocked X / Y (and Z).
  std::vector<int64_t> x_tensor_dims, y_tensor_dims;
  int64_t x_block = 0, y_block = 0;  // C0 of a channel-blocked X / Y (ops/layout.h), 0: plain
  int64_t group = 1;
  ops::WindowGeometry geo;
  const Tensor* weights = nullptr;  // the node's initializers, read at prepare
  const Tensor* bias = nullptr;     // null: no bias
  bool has_z = false;
  ops::FusedActivation act;
  // precision (compiler/passes/precision_assignment.cc): 0 float32; 1 "bf16", the primitive
  // reads X and W as bfloat16 (W packed so at prepare) and accumulates, adds B and Z and
  // writes Y in float32; 3 "bf16x3", X and W split into bfloat16 pairs (bf16_layout.h).
  int bf16_parts = 0;
  // X, Y and Z are float32, or bfloat16 between bf16 convolutions on 16-channel blocks (X and
  // Z the output of one, Y read only by them, as X or Z: precision_assignment's y_dtype).
  DataType x_dtype = DataType::kFloat32, y_dtype = DataType::kFloat32, z_dtype = DataType::kFloat32;
};

Status require_static_f32_or_bf16(const char* what, const ir::Value* v) {
  return require_static_tensor(what, v, {DataType::kFloat32, DataType::kBFloat16});
}

// The plan for a Conv / FusedConv node, or why this kernel does not take it.
Expected<ConvPlan> plan_conv(const ir::Node& node) {
  const std::string label = node.label();
  const bool fused = node.domain() == ops::kKilnDomain && node.op_type() == "FusedConv";
  if (!fused && !(node.domain() == ops::kOnnxDomain && node.op_type() == "Conv"))
    return unsupported("node %s: not a Conv or FusedConv", label.c_str());
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* b = node.input(2);
  const ir::Value* z = fused ? node.input(3) : nullptr;
  const ir::Value* y = node.output(0);
  if (node.inputs().size() > (fused ? 4u : 3u) || node.outputs().size() != 1)
    return unsupported("node %s: %zu inputs and %zu outputs, expected at most %u and 1", label.c_str(),
                       node.inputs().size(), node.outputs().size(), fused ? 4u : 3u);
  KILN_RETURN_IF_ERROR(require_static_f32_or_bf16("X", x));
  KILN_RETURN_IF_ERROR(require_static_f32_or_bf16("Y", y));
  KILN_RETURN_IF_ERROR(require_initializer("W", w, DataType::kFloat32));  // packed once, at prepare
  if (b) KILN_RETURN_IF_ERROR(require_initializer("B", b, DataType::kFloat32));
  ConvPlan p;
  p.x_tensor_dims = x->shape().static_dims();
  p.y_tensor_dims = y->shape().static_dims();
  p.x_dims = p.x_tensor_dims;
  p.y_dims = p.y_tensor_dims;
  if (fused) {
    // Blocked layouts: the primitive reads and writes oneDNN's nChw8c / nChw16c, which are
    // the same bytes as Kiln's NC1HWC0 when C is a multiple of the block.
    const std::string xf = node.attr_string("x_format", ops::kFormatPlain);
    const std::string yf = node.attr_string("y_format", ops::kFormatPlain);
    if (!ops::valid_format(xf) || !ops::valid_format(yf))
      return unsupported("node %s: unknown x_format / y_format", label.c_str());
    const int64_t c0 = node.attr_int("c0", 0);
    if ((ops::is_blocked_format(xf) || ops::is_blocked_format(yf)) && c0 != 8 && c0 != 16)
      return unsupported("node %s: blocks of %lld channels (oneDNN has 8 and 16)", label.c_str(), (long long)c0);
    if (ops::is_blocked_format(xf)) {
      KILN_ASSIGN_OR_RETURN(Shape ps, ops::plain_shape(x->shape(), c0));
      p.x_dims = ps.static_dims();
      p.x_block = c0;
    }
    if (ops::is_blocked_format(yf)) {
      KILN_ASSIGN_OR_RETURN(Shape ps, ops::plain_shape(y->shape(), c0));
      p.y_dims = ps.static_dims();
      p.y_block = c0;
    }
    if ((p.x_block || p.y_block) && p.x_dims.size() != 4)
      return unsupported("node %s: blocked layouts for 2-D convolutions only", label.c_str());
  }
  p.weights = w->initializer();
  p.w_dims = p.weights->dims();
  const size_t rank = p.x_dims.size();
  if (rank < 3 || rank > 5 || p.w_dims.size() != rank || p.y_dims.size() != rank)
    return unsupported("node %s: X %s, W %s: 1-D, 2-D and 3-D convolutions only", label.c_str(),
                       dims_to_string(p.x_dims).c_str(), dims_to_string(p.w_dims).c_str());
  for (int64_t d : p.x_dims)
    if (d <= 0) return unsupported("node %s: empty input %s", label.c_str(), dims_to_string(p.x_dims).c_str());
  for (int64_t d : p.w_dims)
    if (d <= 0) return unsupported("node %s: empty weight %s", label.c_str(), dims_to_string(p.w_dims).c_str());
  p.group = node.attr_int("group", 1);
  const int64_t c_in = p.x_dims[1], c_out = p.w_dims[0];
  if (p.group < 1 || c_out % p.group != 0 || c_in != p.w_dims[1] * p.group)
    return unsupported("node %s: group %lld with %lld input channels per group does not fit X %s and W %s",
                       label.c_str(), (long long)p.group, (long long)p.w_dims[1], dims_to_string(p.x_dims).c_str(),
                       dims_to_string(p.w_dims).c_str());
  if (b) {
    p.bias = b->initializer();
    if (p.bias->dims() != std::vector<int64_t>{c_out})
      return unsupported("node %s: B %s, expected [%lld]", label.c_str(), dims_to_string(p.bias->dims()).c_str(),
                         (long long)c_out);
  }
  KILN_ASSIGN_OR_RETURN(p.geo, ops::window_geometry(node, std::vector<int64_t>(p.x_dims.begin() + 2, p.x_dims.end()),
                                                    std::vector<int64_t>(p.w_dims.begin() + 2, p.w_dims.end()),
                                                    false));
  std::vector<int64_t> expect{p.x_dims[0], c_out};
  expect.insert(expect.end(), p.geo.out.begin(), p.geo.out.end());
  if (expect != p.y_dims)
    return unsupported("node %s: output %s, the geometry gives %s", label.c_str(), dims_to_string(p.y_dims).c_str(),
                       dims_to_string(expect).c_str());
  if (p.bf16_parts == 3 && rank != 4)
    return unsupported("node %s: bf16x3 for 2-D convolutions only", label.c_str());
  if (z) {
    KILN_RETURN_IF_ERROR(require_static_f32_or_bf16("residual Z", z));
    if (z->shape().static_dims() != p.y_tensor_dims)
      return unsupported("node %s: residual Z %s, expected Y's shape %s", label.c_str(),
                         dims_to_string(z->shape().static_dims()).c_str(), dims_to_string(p.y_tensor_dims).c_str());
    p.has_z = true;
    p.z_dtype = z->dtype();
  }
  if (fused) {
    Expected<int> parts = ops::bf16_parts(node);
    if (!parts.ok()) return unsupported("%s", parts.status().message().c_str());
    p.bf16_parts = *parts;
    p.x_dtype = x->dtype();
    p.y_dtype = y->dtype();
    KILN_ASSIGN_OR_RETURN(p.act, ops::parse_fused_activation(node));
    if (!onednn::activation_supported(p.act))
      return unsupported("node %s: activation has no oneDNN post-op", label.c_str());
  }
  const bool bf16_tensors =
      p.x_dtype == DataType::kBFloat16 || p.y_dtype == DataType::kBFloat16 || p.z_dtype == DataType::kBFloat16;
  if (bf16_tensors && !(p.bf16_parts == 1 && rank == 4 && p.x_block == 16 && p.y_block == 16))
    return unsupported("node %s: bfloat16 X, Y or Z only for precision bf16 between 16-channel blocks", label.c_str());
  return p;
}

class OnednnConvKernel final : public Kernel {
 public:
  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return impl_; }
  // Whether the run's inputs are those prepared for: shapes, dtypes, and the very weight and
  // bias tensors (a caller may feed a graph input that an initializer only defaults).
  bool inputs_as_prepared(const ops::KernelContext& ctx) const;

  const ops::KernelFn* reference = nullptr;  // runs inputs the kernel was not prepared for
  // The node's W and B initializers (shared handles: their storage stays alive, so a fed
  // tensor cannot come back at the same address), compared by address at each run.
  Tensor w_initializer, b_initializer;

  ConvPlan plan;
  std::string impl_;
  dnnl::convolution_forward conv;
  onednn::LayoutBridge layouts;  // X's and Y's (and Z's) layouts to the primitive's
  memory weights;                // packed into the primitive's format at prepare
  std::shared_ptr<void> weights_buffer;  // weights' storage when shared (onednn::pack_shared)
  memory bias;                   // empty when the node has none
  bool z_binary = false;         // Z read by a binary post-op (else summed onto a copy in Y)
  memory::desc z_md;             // Z's layout: Y's, in Z's dtype

  // 2-D bf16 / bf16x3 convolutions compute in NHWC (the layout of oneDNN's AMX and
  // AVX512-BF16 kernels): X converted (and split) into the workspace after the scratchpad,
  // Y written there as NHWC float32 and converted to its layout (bf16_layout.h).
  struct Nhwc {
    bool on = false;
    bf16::ActivationLayout x, y;
    memory::desc src, dst;
    size_t scratch_bytes = 0, src_offset = 0, dst_offset = 0, workspace_bytes = 0;
    onednn::RunMemories memories;  // run_nhwc's scratch, src, dst
  } nhwc;
  onednn::RunMemories z_memories;  // the residual Z in its user layout
  Status run_nhwc(ops::KernelContext& ctx, const Tensor* x, const Tensor* z, Tensor* y) const;
};

bool OnednnConvKernel::inputs_as_prepared(const ops::KernelContext& ctx) const {
  auto matches = [&](int i, DataType dtype, const std::vector<int64_t>& dims) {
    const Tensor* t = ctx.input(i);
    return t && t->dtype() == dtype && t->dims() == dims;
  };
  if (!matches(0, plan.x_dtype, plan.x_tensor_dims) ||
      (plan.has_z && !matches(3, plan.z_dtype, plan.y_tensor_dims)))
    return false;
  const Tensor* w = ctx.input(1);
  const Tensor* b = ctx.input(2);
  if (!w || w->raw_data() != w_initializer.raw_data() || w->dims() != plan.w_dims) return false;
  if (!b_initializer.defined()) return b == nullptr;
  return b && b->raw_data() == b_initializer.raw_data() && b->dims() == b_initializer.dims();
}

Status OnednnConvKernel::run(ops::KernelContext& ctx) const {
  const ir::Node& node = ctx.node();
  if (!inputs_as_prepared(ctx)) return (*reference)(ctx);
  const Tensor* x = ctx.input(0);
  const Tensor* z = plan.has_z ? ctx.input(3) : nullptr;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, plan.y_dtype, plan.y_tensor_dims, TensorInit::kUninitialized));
  if (nhwc.on) return run_nhwc(ctx, x, z, y);
  const onednn::LayoutBridge& lb = layouts;
  char* ws = static_cast<char*>(onednn::thread_workspace(lb.workspace_bytes));
  if (!ws && lb.workspace_bytes > 0)
    return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(),
                              lb.workspace_bytes);
  dnnl::stream& s = onednn::thread_stream();
  try {
    const onednn::LayoutBridge::Bound m = lb.bind(ws, x->raw_data(), y->raw_data());
    if (z && !z_binary) {
      if (lb.reorder_dst) {
        const memory& z_user = z_memories.get(0, z_md, z->raw_data());
        onednn::Args{{DNNL_ARG_FROM, &z_user}, {DNNL_ARG_TO, &m.dst}, {DNNL_ARG_SCRATCHPAD, &m.scratch}}.execute(
            lb.dst_in_reorder, s);
      } else {
        const float* zp = z->data<float>();
        float* yp = y->data<float>();
        parallel_for(0, y->num_elements(), int64_t{1} << 16, [&](int64_t b, int64_t e) {
          std::memcpy(yp + b, zp + b, static_cast<size_t>(e - b) * sizeof(float));
        });
      }
    }
    if (lb.reorder_src)
      onednn::Args{{DNNL_ARG_FROM, &m.x_user}, {DNNL_ARG_TO, &m.src}, {DNNL_ARG_SCRATCHPAD, &m.scratch}}.execute(
          lb.src_reorder, s);
    onednn::Args args{{DNNL_ARG_SRC, &m.src}, {DNNL_ARG_WEIGHTS, &weights}, {DNNL_ARG_DST, &m.dst},
                      {DNNL_ARG_SCRATCHPAD, &m.scratch}};
    if (b_initializer.defined()) args.add(DNNL_ARG_BIAS, bias);
    if (z_binary) args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, z_memories.get(0, z_md, z->raw_data()));
    args.execute(conv, s);
    if (lb.reorder_dst)
      onednn::Args{{DNNL_ARG_FROM, &m.dst}, {DNNL_ARG_TO, &m.y_user}, {DNNL_ARG_SCRATCHPAD, &m.scratch}}.execute(
          lb.dst_reorder, s);
    s.wait();
  } catch (const dnnl::error& e) {
    return internal_error("node %s: oneDNN convolution failed: %s", node.label().c_str(), e.what());
  }
  return ok_status();
}

Status OnednnConvKernel::run_nhwc(ops::KernelContext& ctx, const Tensor* x, const Tensor* z, Tensor* y) const {
  const ir::Node& node = ctx.node();
  char* ws = static_cast<char*>(onednn::thread_workspace(nhwc.workspace_bytes));
  if (!ws)
    return resource_exhausted("node %s: cannot allocate a %zu-byte workspace", node.label().c_str(),
                              nhwc.workspace_bytes);
  float* dst = reinterpret_cast<float*>(ws + nhwc.dst_offset);
  bf16::to_nhwc_bf16(x->data<float>(), nhwc.x, plan.bf16_parts, plan.group,
                     reinterpret_cast<uint16_t*>(ws + nhwc.src_offset));
  if (z) bf16::layout_to_nhwc(z->data<float>(), nhwc.y, dst);  // the sum post-op adds to it
  dnnl::stream& s = onednn::thread_stream();
  try {
    const memory& scratch =
        nhwc.memories.get(0, onednn::bytes_desc(nhwc.scratch_bytes), nhwc.scratch_bytes > 0 ? ws : nullptr);
    const memory& src = nhwc.memories.get(1, nhwc.src, ws + nhwc.src_offset);
    const memory& dst_mem = nhwc.memories.get(2, nhwc.dst, dst);
    onednn::Args args{{DNNL_ARG_SRC, &src}, {DNNL_ARG_WEIGHTS, &weights}, {DNNL_ARG_DST, &dst_mem},
                      {DNNL_ARG_SCRATCHPAD, &scratch}};
    if (b_initializer.defined()) args.add(DNNL_ARG_BIAS, bias);
    args.execute(conv, s);
    s.wait();
  } catch (const dnnl::error& e) {
    return internal_error("node %s: oneDNN convolution failed: %s", node.label().c_str(), e.what());
  }
  bf16::nhwc_to_layout(dst, nhwc.y, y->data<float>());
  return ok_status();
}

// oneDNN's tag for a tensor of `rank` dims: plain, or channel-blocked by `block` (8 or 16).
memory::format_tag tensor_tag(int rank, int64_t block) {
  if (block == 8) return memory::format_tag::nChw8c;
  if (block == 16) return memory::format_tag::nChw16c;
  return onednn::plain_tag(rank);
}

// Whether the primitive picks its own source/destination layout (reordering around each run)
// instead of running on plain N C D... directly; see the measurement in the file header.
// Blocked (NC1HWC0) tensors are handed over as they are instead: with "any", oneDNN 2.6 on
// AVX-512 picks its brgconv kernels, which compute in NHWC, and the two reorders per run cost
// 21 of 60 ms of ResNet-50 at one thread (ONEDNN_VERBOSE), more than brgconv gains over the
// nChw16c jit kernels. Only if oneDNN has no jit kernel for the blocked layout does "any" get
// a second try.
constexpr bool kPrimitiveChoosesLayout = true;

// Float32 3x3 stride-1 convolutions with at least this many output pixels run oneDNN's
// Winograd F(2x2, 3x3) kernel where it has one (AVX-512, blocked layouts), within 1e-6 of
// max|y| of the direct kernel. In ResNet-50 at one thread (kiln profile, per node) it took
// 1.8-2x less time at 56x56 and 28x28, 1.15x at 14x14 and 1.02x at 7x7, where the weights
// (16/9 as large once transformed) come from memory each run; smaller maps stay direct.
// One deviation from the direct kernel: a NaN or Inf in X reaches every output of the tiles
// whose transformed input holds it (a few pixels around it), not only those whose window holds
// it (tests/kernels/conv_kernel_test.cc, WinogradSpreadsNonFiniteWithinItsTile).
constexpr int64_t kWinogradMinPixels = 7 * 7;

// A residual Z on a map of at least this many output pixels is read by a binary post-op;
// smaller ones are copied into Y for a sum post-op. Measured with oneDNN 2.6's jit_1x1 kernel
// (1x1 convs of ResNet-50's bottlenecks with their residual, one thread): 0.62 vs 0.80 ms
// (binary vs copy + sum) at 56x56, 0.55 vs 0.62 at 28x28, 0.54 vs 0.56 at 14x14, but 0.58 vs
// 0.51 at 7x7.
constexpr int64_t kResidualBinaryMinPixels = 14 * 14;

bool winograd_candidate(const ConvPlan& p) {
  if (p.bf16_parts || p.x_dims.size() != 4 || p.group != 1 || p.w_dims[2] != 3 || p.w_dims[3] != 3) return false;
  for (int d = 0; d < 2; ++d)
    if (p.geo.strides[d] != 1 || p.geo.dilations[d] != 1) return false;
  return p.y_dims[2] * p.y_dims[3] >= kWinogradMinPixels;
}

Expected<std::unique_ptr<Kernel>> prepare_conv(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(ConvPlan plan, plan_conv(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
  auto k = std::make_unique<OnednnConvKernel>();
  k->plan = plan;
  k->reference = &schema->kernel_fn();
  k->w_initializer = *plan.weights;
  if (plan.bias) k->b_initializer = *plan.bias;
  const ConvPlan& p = k->plan;
  const int rank = static_cast<int>(p.x_dims.size());
  const int n = rank - 2;
  const dnnl::engine& eng = onednn::cpu_engine();
  const auto f32 = memory::data_type::f32;
  try {
    onednn::CreationThreadsScope threads;
    // Weights: ONNX's M x C/g x k... is oneDNN's g x M/g x C/g x k... with the same bytes.
    memory::dims w_dims = onednn::to_dims(p.w_dims);
    int w_rank = rank;
    if (p.group > 1) {
      w_dims[0] /= p.group;
      w_dims.insert(w_dims.begin(), p.group);
      ++w_rank;
    }
    const auto bf16 = memory::data_type::bf16;
    k->layouts.user_src = memory::desc(onednn::to_dims(p.x_dims), p.x_dtype == DataType::kBFloat16 ? bf16 : f32,
                                       tensor_tag(rank, p.x_block));
    k->layouts.user_dst = memory::desc(onednn::to_dims(p.y_dims), p.y_dtype == DataType::kBFloat16 ? bf16 : f32,
                                       tensor_tag(rank, p.y_block));
    k->z_md = memory::desc(onednn::to_dims(p.y_dims), p.z_dtype == DataType::kBFloat16 ? bf16 : f32,
                           tensor_tag(rank, p.y_block));
    const memory::desc user_w_md(w_dims, f32, onednn::plain_tag(w_rank));
    const auto compute = p.bf16_parts ? memory::data_type::bf16 : f32;  // X's and W's in the primitive
    const memory::desc any_src(onednn::to_dims(p.x_dims), compute, memory::format_tag::any);
    const memory::desc any_dst(onednn::to_dims(p.y_dims), f32, memory::format_tag::any);
    const memory::desc any_w(w_dims, compute, memory::format_tag::any);
    const memory::desc bias_md = p.bias ? memory::desc({p.w_dims[0]}, f32, memory::format_tag::a) : memory::desc();
    memory::dims strides, dilations, pad_l, pad_r;
    for (int d = 0; d < n; ++d) {
      strides.push_back(p.geo.strides[d]);
      dilations.push_back(p.geo.dilations[d] - 1);  // oneDNN counts the gaps
      pad_l.push_back(p.geo.pad_begin(d));
      pad_r.push_back(p.geo.pad_end(d));
    }
    // bf16 between 16-channel blocked tensors: a bfloat16 nChw16c source, Y as it is. Other
    // bf16 / bf16x3 2-D convolutions: NHWC source with parts x C channels, NHWC destination.
    const int parts = p.bf16_parts;
    const bool bf16_blocked = parts == 1 && rank == 4 && p.x_block == 16 && p.y_block == 16;
    k->nhwc.on = parts > 0 && rank == 4 && !bf16_blocked;
    std::vector<float> split_w;  // bf16x3: the weights over 3 x C/g input channels
    // fp32 blocked tensors go to the primitive as they are (see kPrimitiveChoosesLayout).
    const bool keep_blocked = (parts == 0 || bf16_blocked) && (p.x_block || p.y_block);
    const bool user_src = !kPrimitiveChoosesLayout || (parts == 0 && p.x_block);
    const bool user_dst = !kPrimitiveChoosesLayout || ((parts == 0 || bf16_blocked) && p.y_block);
    memory::desc src_md = user_src ? k->layouts.user_src : any_src;
    memory::desc dst_md = user_dst ? k->layouts.user_dst : any_dst;
    if (bf16_blocked) src_md = memory::desc(onednn::to_dims(p.x_dims), compute, memory::format_tag::nChw16c);
    memory::desc w_md = any_w;
    memory::desc user_w = user_w_md;
    if (k->nhwc.on) {
      k->nhwc.x = bf16::ActivationLayout{p.x_dims[0], p.x_dims[1], p.x_dims[2], p.x_dims[3], p.x_block};
      k->nhwc.y = bf16::ActivationLayout{p.y_dims[0], p.y_dims[1], p.y_dims[2], p.y_dims[3], p.y_block};
      src_md = memory::desc({p.x_dims[0], p.x_dims[1] * parts, p.x_dims[2], p.x_dims[3]}, compute,
                            memory::format_tag::nhwc);
      dst_md = memory::desc(onednn::to_dims(p.y_dims), f32, memory::format_tag::nhwc);
      if (parts == 3) {
        memory::dims split_dims = w_dims;
        split_dims[p.group > 1 ? 2 : 1] *= 3;
        const int64_t kernel_elems = p.w_dims[2] * p.w_dims[3];
        split_w.resize(static_cast<size_t>(p.w_dims[0] * p.w_dims[1] * 3 * kernel_elems));
        bf16::split_weights_bf16x3(p.weights->data<float>(), p.w_dims[0], p.w_dims[1], kernel_elems, split_w.data());
        w_md = memory::desc(split_dims, compute, memory::format_tag::any);
        user_w = memory::desc(split_dims, f32, onednn::plain_tag(w_rank));
      }
    }
    // Z, added before the activation (act(conv + B + Z)): a binary post-op reading Z where the
    // primitive writes the tensor's own blocked layout on a large enough map, else a sum post-op
    // on a destination first filled with Z (see kResidualBinaryMinPixels).
    dnnl::post_ops activation_only;
    KILN_RETURN_IF_ERROR(onednn::append_activation(p.act, activation_only));
    auto attr_for = [&](bool z_binary) {
      dnnl::post_ops po;
      if (p.has_z && z_binary) po.append_binary(dnnl::algorithm::binary_add, k->z_md);
      if (p.has_z && !z_binary) po.append_sum(1.0f);
      (void)onednn::append_activation(p.act, po);  // cannot fail: it just succeeded above
      dnnl::primitive_attr attr;
      attr.set_post_ops(po);
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      return attr;
    };
    auto make_pd = [&](const memory::desc& src, const memory::desc& dst, bool z_binary,
                       dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src, w_md, bias_md, dst, strides,
                                           dilations, pad_l, pad_r);
      return dnnl::convolution_forward::primitive_desc(desc, attr_for(z_binary), eng);
    };
    // The first of: Winograd (where it applies), then the direct kernel, each with Z as a
    // binary post-op (where it applies), then as a sum. A reference implementation does not
    // count.
    auto is_ref = [](const dnnl::convolution_forward::primitive_desc& d) {
      return onednn::implementation_name(d).rfind("onednn:ref", 0) == 0;
    };
    dnnl::convolution_forward::primitive_desc pd;
    // A bfloat16 Y or Z takes Z only through the binary post-op: the sum post-op adds Z
    // copied into Y (rounded to a bfloat16 Y; a bfloat16 Z is not float32 Y's bytes).
    const bool bf16_y_with_z = p.has_z && (p.y_dtype == DataType::kBFloat16 || p.z_dtype == DataType::kBFloat16);
    const bool try_binary = p.has_z && !k->nhwc.on && keep_blocked && p.y_block &&
                            (bf16_y_with_z || p.y_dims[2] * p.y_dims[3] >= kResidualBinaryMinPixels);
    for (dnnl::algorithm alg : {dnnl::algorithm::convolution_winograd, dnnl::algorithm::convolution_direct}) {
      if (alg == dnnl::algorithm::convolution_winograd && !winograd_candidate(p)) continue;
      for (bool z_binary : {true, false}) {
        if (pd || (z_binary && !try_binary)) continue;
        try {
          dnnl::convolution_forward::primitive_desc d = make_pd(src_md, dst_md, z_binary, alg);
          if (!is_ref(d)) {
            pd = d;
            k->z_binary = z_binary;
          }
        } catch (const dnnl::error&) {
          // Not for this CPU, layout or post-ops: the next choice.
        }
      }
    }
    if (bf16_y_with_z && !k->z_binary)
      return unsupported("node %s: no oneDNN binary post-op for a residual onto a bfloat16 Y", node.label().c_str());
    if (!pd) pd = make_pd(src_md, dst_md, false);
    if (keep_blocked && is_ref(pd)) pd = make_pd(any_src, any_dst, false);
    k->conv = dnnl::convolution_forward(pd);
    k->impl_ = onednn::implementation_name(pd);
    // oneDNN's reference convolution is far slower than Kiln's im2col + GEMM reference.
    if (k->impl_.rfind("onednn:ref", 0) == 0)
      return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), k->impl_.c_str());
    if (k->nhwc.on) {
      OnednnConvKernel::Nhwc& b = k->nhwc;
      b.src = pd.src_desc();
      b.dst = pd.dst_desc();
      b.scratch_bytes = pd.scratchpad_desc().get_size();
      b.src_offset = onednn::align64(b.scratch_bytes);
      b.dst_offset = b.src_offset + onednn::align64(b.src.get_size());
      b.workspace_bytes = b.dst_offset + onednn::align64(b.dst.get_size());
      note_workspace_need(b.workspace_bytes);  // run_nhwc's; the layout bridge notes its own
    } else {
      k->layouts.plan(pd.src_desc(), pd.dst_desc(), pd.scratchpad_desc().get_size(), p.has_z);
    }

    // Pack the weights once, into memory oneDNN owns.
    if (split_w.empty()) {
      // Shared with this node's kernels at other shapes (w_initializer keeps the data alive).
      k->weights_buffer = onednn::pack_shared(user_w, p.weights->raw_data(), pd.weights_desc());
      k->weights = memory(pd.weights_desc(), onednn::cpu_engine(), k->weights_buffer.get());
    } else {
      k->weights = onednn::pack(user_w, split_w.data(), pd.weights_desc());
    }
    if (p.bias) {
      k->bias = memory(bias_md, eng);
      std::memcpy(k->bias.get_data_handle(), p.bias->raw_data(), p.bias->size_bytes());
    }
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no convolution for it: %s", node.label().c_str(), e.what());
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

Status conv_applicable(const ir::Node& node) { return plan_conv(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "Conv",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = conv_applicable,
                                    .prepare = prepare_conv}));
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "FusedConv",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = conv_applicable,
                                    .prepare = prepare_conv}));

}  // namespace kiln::kernels
