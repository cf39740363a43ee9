// oneDNN matmul kernels for ONNX MatMul and Gemm and kiln FusedMatMul and FusedGemm (float32,
// static shapes): batch broadcasting, 1-D operands, transA/transB as strides, Gemm's alpha as
// output scale, bias / C / Z as the primitive's bias, binary-add post-ops or a sum post-op, the
// activation as eltwise post-ops. One primitive per node, created at prepare.
//
// Y = act(alpha * A' B' + addends), where the addends are Gemm's beta * C or FusedMatMul's
// Bias and Z. Each addend takes the cheapest route oneDNN runs with a JIT implementation:
//   - the primitive's bias, when it varies along N only (Bias [N], C [1,N]) and alpha is 1;
//   - a binary_add post-op reading it with broadcasting (Z [M,N], C scalar, [B,1,N], ...);
//   - otherwise (shapes oneDNN 2.6's gemm-based matmul only runs on its reference path, such as
//     C [M,1], and beta != 1) the run writes beta * C into Y first and a sum post-op adds the
//     product to it: one O(M*N) pass beside the O(M*N*K) product.
// When B has no batch dims the batch dims of A fold into M (one [B*M, K] x [K, N] product;
// Kiln tensors are dense). An activation oneDNN 2.6 cannot express (HardSwish with other
// parameters, Clip with lo > hi) or computes less accurately than the unfused graph (Gelu,
// GeluTanh: see post_op_accurate) runs after the primitive: Gelu on the SIMD Gelu kernel's code
// (gelu.h), the others with the reference formula.
//
// Products with a constant B take Kiln's packed GEMM (gemm.h) instead where oneDNN has no
// brgemm matmul (CPUs without AVX-512; see prefer_packed_gemm).
//
// Constant B (an initializer) is put at prepare into the layout the primitive asks for
// (weights format "any"). Without AVX-512 oneDNN 2.6 runs f32 matmul on its gemm:jit, which
// asks for B as stored: the kernel then reads the initializer itself (no copy), and only a
// transposed B (Gemm's transB) is copied, once. B fed at run time is read in place through
// strides, transposed or not.
//
// A run whose inputs differ from the prepared ones (shape, dtype, or a constant B that a
// caller replaced by feeding the graph input it initializes) runs the reference kernel.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/lent_workspace.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"
#include "ops/op_util.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;
using Dims = std::vector<int64_t>;

// oneDNN's limit on tensor rank.
constexpr size_t kMaxRank = DNNL_MAX_NDIMS;
// Addends added as binary post-ops, at most (memories 6.. of the kernel's RunMemories).
constexpr size_t kMaxBinary = 8;
static_assert(6 + kMaxBinary <= onednn::RunMemories::kMaxMemories);

enum class AddendRoute { kBias, kBinary, kPrefill };

// An input added to the product: Gemm's C (scaled by beta) or FusedMatMul's Bias / Z.
struct Addend {
  int input = 0;
  Dims dims;     // as the input holds it
  Dims md_dims;  // right-aligned to the primitive's dst dims (same rank), 1 where it broadcasts
  float scale = 1.0f;
  AddendRoute route = AddendRoute::kBinary;
};

// Everything about a node the kernel needs, read and validated without oneDNN.
struct MatMulPlan {
  std::string label;
  Dims a_dims, b_dims, y_dims;  // as the inputs / output hold them
  // The primitive's view: src [..., M, K], weights [..., K, N], dst [..., M, N] (same rank).
  Dims src_dims, src_strides, wei_dims, wei_strides, dst_dims;
  int64_t n = 0;
  float alpha = 1.0f;
  std::vector<Addend> addends;
  ops::FusedActivation act;
  const Tensor* constant_b = nullptr;  // B's initializer, when B is constant
  // precision "bf16" (compiler/passes/precision_assignment.cc): A converted to bfloat16 by a
  // reorder before each run, constant B packed as bfloat16 at prepare, the product summed and
  // the addends and activation applied in float32 (oneDNN's bf16 matmul, AMX where present).
  bool bf16 = false;
};

Status require_static_f32(const char* what, const ir::Value* v) {
  return require_static_tensor(what, v, {DataType::kFloat32});
}

Dims row_major_strides(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

bool all_ones(const Dims& d, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i)
    if (d[i] != 1) return false;
  return true;
}

// `t` right-aligned against `y` when it broadcasts to `y` without growing it (each of its dims
// is 1 or y's), padded with leading 1s to y's rank; nullopt otherwise.
std::optional<Dims> align_addend(const Dims& t, const Dims& y) {
  if (t.size() > y.size()) return std::nullopt;
  Dims out(y.size() - t.size(), 1);
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t yd = y[y.size() - t.size() + i];
    if (t[i] != 1 && t[i] != yd) return std::nullopt;
    out.push_back(t[i]);
  }
  return out;
}

// Reads the addend input `i` of the node, aligned to y_dims; `y_to_full` maps those aligned
// dims to the dims of the unsqueezed [batch..., M, N] product (1-D operands drop M or N).
template <typename ToFull>
Status add_addend(const ir::Node& node, MatMulPlan& p, int i, float scale, ToFull y_to_full) {
  const ir::Value* v = node.input(static_cast<size_t>(i));
  if (!v) return ok_status();
  KILN_RETURN_IF_ERROR(require_static_f32(str_format("input %d", i).c_str(), v));
  Addend a;
  a.input = i;
  a.dims = v->shape().static_dims();
  std::optional<Dims> aligned = align_addend(a.dims, p.y_dims);
  if (!aligned)
    return unsupported("node %s: input %d %s does not broadcast to the output %s", p.label.c_str(),
                       i, dims_to_string(a.dims).c_str(), dims_to_string(p.y_dims).c_str());
  for (int64_t d : a.dims)
    if (d <= 0) return unsupported("node %s: input %d is empty", p.label.c_str(), i);
  a.md_dims = y_to_full(*aligned);
  a.scale = scale;
  p.addends.push_back(std::move(a));
  return ok_status();
}

// MatMul / FusedMatMul: numpy batch broadcasting, 1-D operands.
Status plan_matmul(const ir::Node& node, MatMulPlan& p, bool fused) {
  const Dims& a = p.a_dims;
  const Dims& b = p.b_dims;
  if (a.empty() || b.empty())
    return unsupported("node %s: MatMul operands must have rank >= 1", p.label.c_str());
  const Dims a2 = a.size() == 1 ? Dims{1, a[0]} : a;
  const Dims b2 = b.size() == 1 ? Dims{b[0], 1} : b;
  const int64_t m = a2[a2.size() - 2], k = a2.back(), kb = b2[b2.size() - 2], n = b2.back();
  if (k != kb)
    return unsupported("node %s: inner dims differ: A %s, B %s", p.label.c_str(),
                       dims_to_string(a).c_str(), dims_to_string(b).c_str());
  const Dims batch_a(a2.begin(), a2.end() - 2), batch_b(b2.begin(), b2.end() - 2);
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  if (nb + 2 > kMaxRank)
    return unsupported("node %s: rank above oneDNN's %zu", p.label.c_str(), kMaxRank);
  Dims pa(nb - batch_a.size(), 1), pb(nb - batch_b.size(), 1), batch(nb);
  pa.insert(pa.end(), batch_a.begin(), batch_a.end());
  pb.insert(pb.end(), batch_b.begin(), batch_b.end());
  for (size_t i = 0; i < nb; ++i) {
    if (pa[i] != pb[i] && pa[i] != 1 && pb[i] != 1)
      return unsupported("node %s: batch dims of A %s and B %s do not broadcast", p.label.c_str(),
                         dims_to_string(a).c_str(), dims_to_string(b).c_str());
    batch[i] = std::max(pa[i], pb[i]);
  }
  p.y_dims = batch;
  if (a.size() > 1) p.y_dims.push_back(m);
  if (b.size() > 1) p.y_dims.push_back(n);
  p.n = n;
  Dims full = batch;
  full.push_back(m);
  full.push_back(n);
  const bool a_1d = a.size() == 1, b_1d = b.size() == 1;
  auto to_full = [a_1d, b_1d](Dims d) {
    if (a_1d) d.insert(d.end() - (b_1d ? 0 : 1), 1);  // M was dropped: before N, or last
    if (b_1d) d.push_back(1);                         // N was dropped
    return d;
  };
  if (fused) {
    KILN_RETURN_IF_ERROR(add_addend(node, p, 2, 1.0f, to_full));
    KILN_RETURN_IF_ERROR(add_addend(node, p, 3, 1.0f, to_full));
  }
  // With no batch dims in B, A's batch dims fold into M when every addend either repeats
  // along all of them and M or has them all in full.
  bool fold = nb > 0 && all_ones(pb, 0, nb);
  for (const Addend& ad : p.addends) {
    const bool repeats = all_ones(ad.md_dims, 0, nb + 1);
    const bool complete = std::equal(ad.md_dims.begin(),
                                     ad.md_dims.begin() + static_cast<long>(nb + 1), full.begin());
    if (!repeats && !complete) fold = false;
  }
  if (fold) {
    const int64_t rows = num_elements(batch) * m;
    p.src_dims = {rows, k};
    p.wei_dims = {k, n};
    p.dst_dims = {rows, n};
    for (Addend& ad : p.addends) {
      const bool repeats = all_ones(ad.md_dims, 0, nb + 1);
      ad.md_dims = {repeats ? 1 : rows, ad.md_dims.back()};
    }
  } else {
    p.src_dims = pa;
    p.src_dims.push_back(m);
    p.src_dims.push_back(k);
    p.wei_dims = pb;
    p.wei_dims.push_back(k);
    p.wei_dims.push_back(n);
    p.dst_dims = full;
  }
  p.src_strides = row_major_strides(p.src_dims);
  p.wei_strides = row_major_strides(p.wei_dims);
  return ok_status();
}

// Gemm / FusedGemm: 2-D A and B, transposes as strides, alpha, beta * C.
Status plan_gemm(const ir::Node& node, MatMulPlan& p) {
  const Dims& a = p.a_dims;
  const Dims& b = p.b_dims;
  if (a.size() != 2 || b.size() != 2)
    return unsupported("node %s: Gemm operands must be 2-D", p.label.c_str());
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != kb)
    return unsupported("node %s: inner dims differ: A's %lld, B's %lld", p.label.c_str(), (long long)k, (long long)kb);
  p.y_dims = {m, n};
  p.n = n;
  p.src_dims = {m, k};
  p.src_strides = ta ? Dims{1, m} : Dims{k, 1};
  p.wei_dims = {k, n};
  p.wei_strides = tb ? Dims{1, k} : Dims{n, 1};
  p.dst_dims = {m, n};
  p.alpha = node.attr_float("alpha", 1.0f);
  const float beta = node.attr_float("beta", 1.0f);
  // The reference does not read C when beta is 0 (BLAS convention: NaN in C stays out).
  if (beta != 0.0f) KILN_RETURN_IF_ERROR(add_addend(node, p, 2, beta, [](Dims d) { return d; }));
  return ok_status();
}

// The plan for a MatMul / Gemm / FusedMatMul / FusedGemm node, or why this kernel does not take it.
Expected<MatMulPlan> plan_node(const ir::Node& node) {
  MatMulPlan p;
  p.label = node.label();
  const bool kiln = node.domain() == ops::kKilnDomain, onnx = node.domain() == ops::kOnnxDomain;
  const std::string& op = node.op_type();
  const bool fused = kiln && (op == "FusedMatMul" || op == "FusedGemm");
  const bool gemm = (onnx && op == "Gemm") || (kiln && op == "FusedGemm");
  const bool matmul = (onnx && op == "MatMul") || (kiln && op == "FusedMatMul");
  if (!gemm && !matmul) return unsupported("node %s: not a MatMul or Gemm", p.label.c_str());
  const size_t max_inputs = gemm ? 3 : (fused ? 4 : 2);
  if (node.inputs().size() < 2 || node.inputs().size() > max_inputs || node.outputs().size() != 1)
    return unsupported("node %s: %zu inputs and %zu outputs, expected 2 to %zu and 1", p.label.c_str(),
                       node.inputs().size(), node.outputs().size(), max_inputs);
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  KILN_RETURN_IF_ERROR(require_static_f32("A", a));
  KILN_RETURN_IF_ERROR(require_static_f32("B", b));
  if (!node.output(0)) return unsupported("node %s: Y is missing", p.label.c_str());
  // Y's type may not be inferred yet (kUndefined): the plan computes its shape.
  if (node.output(0)->dtype() != DataType::kFloat32 && node.output(0)->dtype() != DataType::kUndefined)
    return unsupported("node %s: Y dtype %s: only float32", p.label.c_str(), dtype_name(node.output(0)->dtype()));
  if (fused) {
    KILN_ASSIGN_OR_RETURN(p.act, ops::parse_fused_activation(node));
    Expected<int> parts = ops::bf16_parts(node);  // 0 or 1: bf16x3 is for FusedConv only
    if (!parts.ok()) return unsupported("%s", parts.status().message().c_str());
    p.bf16 = *parts == 1;
  } else if (node.has_attr("activation") || node.has_attr("activation_params")) {
    return unsupported("node %s: an activation attribute on an ONNX %s", p.label.c_str(), op.c_str());
  }
  p.a_dims = a->shape().static_dims();
  p.b_dims = b->shape().static_dims();
  for (const Dims* d : {&p.a_dims, &p.b_dims})
    for (int64_t x : *d)
      if (x <= 0) return unsupported("node %s: empty operand", p.label.c_str());
  if (gemm) {
    KILN_RETURN_IF_ERROR(plan_gemm(node, p));
  } else {
    KILN_RETURN_IF_ERROR(plan_matmul(node, p, fused));
  }
  for (int64_t x : p.dst_dims)
    if (x <= 0) return unsupported("node %s: empty output", p.label.c_str());
  // The graph's declared output shape, when known, must be the one computed here.
  const Shape& ys = node.output(0)->shape();
  if (ys.has_rank() && ys.is_static() && ys.static_dims() != p.y_dims)
    return unsupported("node %s: declared output %s, computed %s", p.label.c_str(),
                       ys.to_string().c_str(), dims_to_string(p.y_dims).c_str());
  if (b->has_initializer() && b->initializer()->dtype() == DataType::kFloat32 &&
      b->initializer()->dims() == p.b_dims)
    p.constant_b = b->initializer();
  if (p.bf16 && !p.constant_b)
    return unsupported("node %s: precision bf16 needs a constant B", p.label.c_str());
  return p;
}

// Whether oneDNN 2.6's eltwise post-op for `act` stays within rounding noise of the reference
// formula elementwise. Its gelu_erf and gelu_tanh do not in the negative tail, where the result
// is small: measured over [-30, 30], gelu_erf is off by up to 2e-4 of the value near x = -3.3
// (3.7e-7 absolute; the erf approximation's absolute error over a small 1 + erf), gelu_tanh by
// 1.5e-4 near x = -4.2. The unfused graph computes those values to float rounding, and the fused
// node must agree with it (compiler tests compare them elementwise to 1e-5), so Gelu runs after
// the primitive with the reference formula. Sigmoid, Tanh, Silu and HardSwish stay within 1e-7
// absolute and 2e-7 of the value; the piecewise-linear ones are exact.
bool post_op_accurate(const ops::FusedActivation& act) {
  return act.kind != ops::FusedActivationKind::kGelu &&
         act.kind != ops::FusedActivationKind::kGeluTanh;
}

memory::desc strided_md(const Dims& dims, const Dims& strides) {
  return memory::desc(onednn::to_dims(dims), memory::data_type::f32, onednn::to_dims(strides));
}

memory::desc plain_md(const Dims& dims) { return strided_md(dims, row_major_strides(dims)); }

class MatMulKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> create(const ir::Node& node);

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  // One way of routing the addends and the activation; `routes` is per addend.
  Status build(const std::vector<AddendRoute>& routes, bool activation_in_primitive);
  bool inputs_as_prepared(const ops::KernelContext& ctx) const;
  void prefill(const ops::KernelContext& ctx, float* y) const;

  // Kiln's packed GEMM instead of oneDNN (see use_packed_gemm), or false.
  bool use_packed_gemm();
  Status run_packed_gemm(const ops::KernelContext& ctx, float* y) const;

  MatMulPlan plan_;
  const ops::KernelFn* reference_ = nullptr;
  // The packed-GEMM route: B packed at prepare; the addends as the epilogue's row / full term.
  std::shared_ptr<const gemm::PackedB> gemm_b_;  // shared with the node's kernels at other shapes
  gemm::Epilogue gemm_epilogue_;
  int gemm_row_addend_ = -1, gemm_full_addend_ = -1;
  dnnl::matmul primitive_;
  memory::desc src_md_, wei_md_, bias_md_, dst_md_, scratchpad_md_;
  // bf16: A's float32 layout (src_md_) reordered into the workspace as src_bf16_md_, after
  // the scratchpad (which the reorder and the primitive share, one after the other).
  memory::desc src_bf16_md_;
  dnnl::reorder src_reorder_;
  size_t src_bf16_offset_ = 0;
  std::vector<memory::desc> binary_md_;  // per addend routed through a binary post-op
  std::vector<int> binary_arg_;          // per addend: the DNNL_ARG_ of its post-op source, or 0
  int bias_addend_ = -1;
  bool prefill_ = false;
  bool activation_after_ = false;
  size_t scratchpad_bytes_ = 0;
  // Constant B in the primitive's layout: our own buffer, or the initializer itself when the
  // primitive wants B as it is stored.
  std::shared_ptr<void> packed_b_;  // onednn::pack_shared
  Tensor constant_b_;
  const void* constant_b_data_ = nullptr;
  std::string implementation_;
  onednn::RunMemories memories_;  // run()'s
};

Status MatMulKernel::build(const std::vector<AddendRoute>& routes, bool activation_in_primitive) {
  const MatMulPlan& p = plan_;
  src_md_ = strided_md(p.src_dims, p.src_strides);
  const memory::desc wei_plain = strided_md(p.wei_dims, p.wei_strides);
  const auto compute = p.bf16 ? memory::data_type::bf16 : memory::data_type::f32;  // A's and B's
  const memory::desc wei_any(onednn::to_dims(p.wei_dims), compute, memory::format_tag::any);
  dst_md_ = plain_md(p.dst_dims);
  bias_md_ = memory::desc();
  bias_addend_ = -1;
  prefill_ = false;
  binary_arg_.assign(p.addends.size(), 0);
  binary_md_.assign(p.addends.size(), memory::desc());
  dnnl::post_ops po;
  int po_index = 0;
  size_t binary_count = 0;
  for (size_t i = 0; i < p.addends.size(); ++i)
    if (routes[i] == AddendRoute::kPrefill) prefill_ = true;
  if (prefill_) {
    po.append_sum(1.0f);  // Y holds the prefilled addends; the product is added to them
    ++po_index;
  }
  for (size_t i = 0; i < p.addends.size(); ++i) {
    const Addend& a = p.addends[i];
    if (routes[i] == AddendRoute::kBias) {
      bias_md_ = plain_md(a.md_dims);
      bias_addend_ = static_cast<int>(i);
    } else if (routes[i] == AddendRoute::kBinary) {
      binary_md_[i] = plain_md(a.md_dims);
      po.append_binary(dnnl::algorithm::binary_add, binary_md_[i]);
      binary_arg_[i] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(po_index) | DNNL_ARG_SRC_1;
      ++po_index;
      if (++binary_count > kMaxBinary)
        return unsupported("node %s: more than %zu addends as binary post-ops", p.label.c_str(), kMaxBinary);
    }
  }
  activation_after_ = !activation_in_primitive && !p.act.is_none();
  if (activation_in_primitive) KILN_RETURN_IF_ERROR(onednn::append_activation(p.act, po));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  attr.set_post_ops(po);
  try {
    onednn::CreationThreadsScope threads;
    const dnnl::engine& engine = onednn::cpu_engine();
    if (p.bf16) src_bf16_md_ = memory::desc(onednn::to_dims(p.src_dims), compute, onednn::plain_tag(static_cast<int>(p.src_dims.size())));
    dnnl::matmul::desc desc(p.bf16 ? src_bf16_md_ : src_md_, p.constant_b ? wei_any : wei_plain, bias_md_, dst_md_);
    dnnl::matmul::primitive_desc pd(desc, attr, engine);
    const std::string impl = onednn::implementation_name(pd);
    // oneDNN's reference implementation is a scalar loop nest: the other routings exist to
    // avoid it, and the reference kernel is the better fallback.
    if (impl.rfind("onednn:ref", 0) == 0) return unsupported("oneDNN offers only %s", impl.c_str());
    wei_md_ = pd.weights_desc();
    if (p.constant_b) {
      packed_b_.reset();
      constant_b_ = *p.constant_b;
      constant_b_data_ = p.constant_b->raw_data();
      // Shared with this node's kernels at other shapes (constant_b_ keeps the data alive).
      if (wei_md_ != wei_plain) packed_b_ = onednn::pack_shared(wei_plain, constant_b_data_, wei_md_);
    }
    primitive_ = dnnl::matmul(pd);
    scratchpad_md_ = pd.scratchpad_desc();
    scratchpad_bytes_ = scratchpad_md_.get_size();
    if (p.bf16) {
      size_t reorder_scratch = 0;
      src_reorder_ = onednn::make_reorder(src_md_, src_bf16_md_, reorder_scratch);
      scratchpad_bytes_ = std::max(scratchpad_bytes_, reorder_scratch);
      scratchpad_md_ = memory::desc({static_cast<memory::dim>(scratchpad_bytes_)}, memory::data_type::u8,
                                    memory::format_tag::a);
      src_bf16_offset_ = onednn::align64(scratchpad_bytes_);
    }
    // What run() asks thread_workspace for (the packed-GEMM path asks for nothing).
    note_workspace_need(p.bf16 ? src_bf16_offset_ + onednn::align64(src_bf16_md_.get_size()) : scratchpad_bytes_);
    implementation_ = impl;
  } catch (const dnnl::error& e) {
    return unsupported("oneDNN: %s", e.what());
  }
  return ok_status();
}

// Products with a constant B of at least kPackedGemmMinRows rows of A run on Kiln's packed
// GEMM (gemm.h) when their addends are a row vector ([N]: a bias, Gemm's C [1, N]) and / or a
// full [M, N] term (a residual); anything else (batched B, transposed A, broadcasts along M)
// stays on oneDNN. Fewer rows are matrix-vector products, where packing buys nothing.
constexpr int64_t kPackedGemmMinRows = 6;

// Whether oneDNN's float32 matmul primitive is its brgemm kernel (AVX-512), which packs a
// constant B once at prepare as the packed GEMM does and was faster than it: BERT-base 140-148
// vs 173-178 ms at one thread, 74-78 vs 95-97 at two. Without AVX-512 oneDNN 2.6 has only its
// gemm:jit, which packs B on every call, and the packed GEMM wins. KILN_PACKED_GEMM=1 / =0
// forces the choice (tests, comparisons), read at prepare.
bool prefer_packed_gemm() {
  if (const char* e = std::getenv("KILN_PACKED_GEMM"); e && *e) return std::string(e) != "0";
  static const bool brgemm = [] {
    try {
      const memory::desc a({64, 64}, memory::data_type::f32, memory::format_tag::ab);
      const memory::desc b({64, 64}, memory::data_type::f32, memory::format_tag::any);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, a), onednn::cpu_engine());
      return onednn::implementation_name(pd).find("brg") != std::string::npos;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return !brgemm;
}

bool MatMulKernel::use_packed_gemm() {
  const MatMulPlan& p = plan_;
  if (p.bf16 || !prefer_packed_gemm() || !p.constant_b || p.src_dims.size() != 2 || p.wei_dims.size() != 2)
    return false;
  const int64_t m = p.src_dims[0], k = p.src_dims[1], n = p.wei_dims[1];
  if (m < kPackedGemmMinRows || p.src_strides != Dims{k, 1}) return false;
  for (size_t i = 0; i < p.addends.size(); ++i) {
    const Addend& a = p.addends[i];
    int* slot = a.md_dims == Dims{1, n} ? &gemm_row_addend_
                : a.md_dims == Dims{m, n} ? &gemm_full_addend_ : nullptr;
    if (!slot || *slot >= 0) return false;
    *slot = static_cast<int>(i);
  }
  gemm_epilogue_.alpha = p.alpha;
  gemm_epilogue_.act = p.act;
  if (gemm_row_addend_ >= 0) gemm_epilogue_.row_scale = p.addends[gemm_row_addend_].scale;
  if (gemm_full_addend_ >= 0) gemm_epilogue_.full_scale = p.addends[gemm_full_addend_].scale;
  constant_b_ = *p.constant_b;  // keeps the packed data's source alive (pack_shared's key)
  gemm_b_ = gemm::PackedB::pack_shared(p.constant_b->data<float>(), k, n, p.wei_strides[0], p.wei_strides[1]);
  constant_b_data_ = p.constant_b->raw_data();
  implementation_ = std::string("kiln:gemm:") + gemm::target_name();
  return true;
}

Status MatMulKernel::run_packed_gemm(const ops::KernelContext& ctx, float* y) const {
  gemm::Epilogue ep = gemm_epilogue_;
  const int64_t n = gemm_b_->n();
  if (gemm_row_addend_ >= 0) ep.row = ctx.input(plan_.addends[gemm_row_addend_].input)->data<float>();
  if (gemm_full_addend_ >= 0) {
    ep.full = ctx.input(plan_.addends[gemm_full_addend_].input)->data<float>();  // [M, N], as Y
  }
  gemm::multiply(plan_.src_dims[0], ctx.input(0)->data<float>(), plan_.src_dims[1], *gemm_b_, y,
                 n, ep);
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> MatMulKernel::create(const ir::Node& node) {
  std::unique_ptr<MatMulKernel> k(new MatMulKernel);
  KILN_ASSIGN_OR_RETURN(k->plan_, plan_node(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn())
    return unsupported("node %s: no reference kernel", k->plan_.label.c_str());
  k->reference_ = &schema->kernel_fn();
  if (k->use_packed_gemm()) return std::unique_ptr<Kernel>(std::move(k));
  const MatMulPlan& p = k->plan_;
  const size_t na = p.addends.size();
  // The routings to try, best first: the bias route for the first addend that varies along N
  // only (when alpha is 1 and it is not scaled), binary post-ops for the others (unscaled
  // ones), the prefill for the rest; then everything through the prefill.
  std::vector<AddendRoute> preferred(na, AddendRoute::kPrefill);
  bool bias_taken = false;
  for (size_t i = 0; i < na; ++i) {
    const Addend& a = p.addends[i];
    if (a.scale != 1.0f) continue;
    const size_t r = a.md_dims.size();
    if (!bias_taken && p.alpha == 1.0f && all_ones(a.md_dims, 0, r - 1) &&
        a.md_dims[r - 1] == p.n) {
      preferred[i] = AddendRoute::kBias;
      bias_taken = true;
    } else {
      preferred[i] = AddendRoute::kBinary;
    }
  }
  std::vector<std::vector<AddendRoute>> routings = {preferred};
  std::vector<AddendRoute> no_bias = preferred;
  for (AddendRoute& r : no_bias)
    if (r == AddendRoute::kBias) r = AddendRoute::kBinary;
  if (no_bias != preferred) routings.push_back(no_bias);
  std::vector<AddendRoute> all_prefill(na, AddendRoute::kPrefill);
  if (all_prefill != routings.back()) routings.push_back(all_prefill);
  std::vector<bool> activation_modes;
  if (p.act.is_none() || (onednn::activation_supported(p.act) && post_op_accurate(p.act)))
    activation_modes.push_back(true);
  if (!p.act.is_none()) activation_modes.push_back(false);
  Status last;
  for (bool act_in : activation_modes)
    for (const auto& routes : routings) {
      last = k->build(routes, act_in);
      if (last.ok()) return std::unique_ptr<Kernel>(std::move(k));
    }
  last.add_context("node %s", p.label.c_str());
  return last;
}

bool MatMulKernel::inputs_as_prepared(const ops::KernelContext& ctx) const {
  auto matches = [&](int i, const Dims& dims) {
    const Tensor* t = ctx.input(i);
    return t && t->dtype() == DataType::kFloat32 && t->dims() == dims;
  };
  if (!matches(0, plan_.a_dims) || !matches(1, plan_.b_dims)) return false;
  if (constant_b_data_ && ctx.input(1)->raw_data() != constant_b_data_) return false;
  // The node's inputs are fixed, so a present addend was planned (or is Gemm's C with beta 0,
  // which the kernel does not read).
  for (const Addend& a : plan_.addends)
    if (!matches(a.input, a.dims)) return false;
  return true;
}

// Y = sum of scale * addend over the addends routed through the prefill, broadcast to Y.
void MatMulKernel::prefill(const ops::KernelContext& ctx, float* y) const {
  bool first = true;
  for (size_t i = 0; i < plan_.addends.size(); ++i) {
    const Addend& a = plan_.addends[i];
    if (binary_arg_[i] != 0 || static_cast<int>(i) == bias_addend_) continue;
    const float* src = ctx.input(a.input)->data<float>();
    const std::vector<int64_t> strides[1] = {ops::broadcast_strides(a.md_dims, plan_.dst_dims)};
    const float s = a.scale;
    if (first) {
      ops::for_each_broadcast(plan_.dst_dims, strides,
                              [&](int64_t o, const int64_t* off) { y[o] = s * src[off[0]]; });
    } else {
      ops::for_each_broadcast(plan_.dst_dims, strides,
                              [&](int64_t o, const int64_t* off) { y[o] += s * src[off[0]]; });
    }
    first = false;
  }
}

Status MatMulKernel::run(ops::KernelContext& ctx) const {
  if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan_.y_dims, TensorInit::kUninitialized));
  float* py = y->data<float>();
  if (gemm_b_) return run_packed_gemm(ctx, py);
  if (prefill_) prefill(ctx, py);
  void* scratchpad = nullptr;
  const size_t workspace_bytes =
      plan_.bf16 ? src_bf16_offset_ + onednn::align64(src_bf16_md_.get_size()) : scratchpad_bytes_;
  if (workspace_bytes > 0) {
    scratchpad = onednn::thread_workspace(workspace_bytes);
    if (!scratchpad)
      return resource_exhausted("node %s: no memory for a %zu-byte workspace", plan_.label.c_str(), workspace_bytes);
  }
  try {
    dnnl::stream& stream = onednn::thread_stream();
    const void* b = packed_b_ ? packed_b_.get() : ctx.input(1)->raw_data();
    // Memories 0..4: A, A in bf16, the scratchpad, B, Y; 5: the bias; 6...: binary addends.
    onednn::Args args;
    const memory& a_user = memories_.get(0, src_md_, ctx.input(0)->raw_data());
    if (plan_.bf16) {
      const memory& a_bf16 = memories_.get(1, src_bf16_md_, static_cast<char*>(scratchpad) + src_bf16_offset_);
      const memory& scratch = memories_.get(2, scratchpad_md_, scratchpad);
      onednn::Args{{DNNL_ARG_FROM, &a_user}, {DNNL_ARG_TO, &a_bf16}, {DNNL_ARG_SCRATCHPAD, &scratch}}.execute(
          src_reorder_, stream);
      args.add(DNNL_ARG_SRC, a_bf16);
    } else {
      args.add(DNNL_ARG_SRC, a_user);
    }
    args.add(DNNL_ARG_WEIGHTS, memories_.get(3, wei_md_, b)).add(DNNL_ARG_DST, memories_.get(4, dst_md_, py));
    if (bias_addend_ >= 0)
      args.add(DNNL_ARG_BIAS, memories_.get(5, bias_md_, ctx.input(plan_.addends[bias_addend_].input)->raw_data()));
    for (size_t i = 0, k = 0; i < plan_.addends.size(); ++i) {
      if (binary_arg_[i] == 0) continue;
      args.add(binary_arg_[i],
               memories_.get(6 + static_cast<int>(k++), binary_md_[i], ctx.input(plan_.addends[i].input)->raw_data()));
    }
    if (scratchpad) args.add(DNNL_ARG_SCRATCHPAD, memories_.get(2, scratchpad_md_, scratchpad));
    args.execute(primitive_, stream);
    stream.wait();
  } catch (const dnnl::error& e) {
    return internal_error("node %s: oneDNN matmul failed: %s", plan_.label.c_str(), e.what());
  }
  if (activation_after_) {
    if (plan_.act.kind == ops::FusedActivationKind::kGelu ||
        plan_.act.kind == ops::FusedActivationKind::kGeluTanh) {
      gelu_in_place(py, y->num_elements(), plan_.act.kind == ops::FusedActivationKind::kGeluTanh);
      if (plan_.act.has_post_affine()) {
        const ops::FusedActivation affine = plan_.act.post_affine_only();
        for (int64_t i = 0; i < y->num_elements(); ++i) py[i] = ops::fused_activation_value(affine, py[i]);
      }
    } else {
      ops::apply_fused_activation(plan_.act, py, y->num_elements());
    }
  }
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_matmul(const ir::Node& node) {
  return MatMulKernel::create(node);
}

Status matmul_applicable(const ir::Node& node) { return plan_node(node).status(); }

KernelFactory matmul_factory(const char* domain, const char* op_type) {
  return KernelFactory{.domain = domain,
                       .op_type = op_type,
                       .device = DeviceKind::kCpu,
                       .priority = 100,
                       .name = "gemm",  // Kiln's packed GEMM or a oneDNN matmul primitive
                       .applicable = matmul_applicable,
                       .prepare = prepare_matmul};
}

}  // namespace

KILN_REGISTER_KERNEL(matmul_factory(ops::kOnnxDomain, "MatMul"));
KILN_REGISTER_KERNEL(matmul_factory(ops::kOnnxDomain, "Gemm"));
KILN_REGISTER_KERNEL(matmul_factory(ops::kKilnDomain, "FusedMatMul"));
KILN_REGISTER_KERNEL(matmul_factory(ops::kKilnDomain, "FusedGemm"));

}  // namespace kiln::kernels
