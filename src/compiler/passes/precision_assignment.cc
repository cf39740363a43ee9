// precision_assignment: the compute precision of each convolution and matrix product
// (`kiln compile --precision fp32|bf16|mixed`, ATC's --precision_mode; `--keep-dtype`).
//
// A node the pass puts in bfloat16 gets the attribute `precision` (a kiln FusedConv,
// FusedMatMul or FusedGemm; an ONNX Conv / MatMul / Gemm becomes its fused form, with no
// addend and no activation, to carry it; docs/fused-ops.md):
//   "bf16":   X (A) and W (B) rounded to bfloat16 (round to nearest even), the products exact
//             and summed in float32;
//   "bf16x3": X and W each split into two bfloat16 (hi + lo), three bf16 products summed in
//             float32 (kernels/cpu/bf16_layout.h): about 16 significant bits instead of 8,
//             for three times the bf16 work (still 2-4x less time than float32 on AMX).
// The bias, the residual and the activation are applied in float32. Tensors between nodes
// stay float32, so every other op (Softmax, LayerNorm, reductions, exp / log, elementwise
// chains) computes in float32 in every mode; the one exception: a bf16 convolution's output
// that only bf16 convolutions read, as X or residual, is stored in bfloat16
// (store_bf16_activations).
//
// Candidates: Conv, MatMul, Gemm and their fused forms on float32 with a constant weight W / B
// (a layer's parameters, packed into bfloat16 once when the model loads).
//   fp32  (default): nothing changes; the pass does nothing.
//   bf16:  every candidate in "bf16", except the --keep-dtype ones: fastest.
//   mixed: products (MatMul, Gemm) in "bf16", 2-D convolutions in "bf16x3" where their input
//          outweighs their weights (split_pays), other convolutions in "bf16", convolutions
//          that a cost model of this CPU's kernels finds faster in float32 in float32
//          (bf16_pays: the conversions of the bf16 route cost more than bf16 saves on
//          convolutions with few FLOPs per element); where bf16x3 itself runs slower than
//          float32 (AVX512-BF16 without AMX), single bf16 instead, but for the first sixth of
//          the convolutions (early_convolutions), which stay float32; and the model's final
//          layer in float32: for each graph output, the last
//          candidate (in execution order) it depends on (ResNet's classifier, BERT's last
//          feed-forward output and pooler). Why the convolutions get the split: a stack of
//          convolutions carries every layer's rounding into the next (BatchNorm is folded,
//          nothing renormalises), and one bf16 rounding per layer left ResNet-50's logits at
//          cosine 0.99813 to float32's (bench/ort_compare); a transformer renormalises after
//          every sub-layer (LayerNorm), and BERT-base with bf16 products stays at 0.99999.
// Depthwise convolutions (one input channel per group) stay float32 in both modes: they are
// memory-bound, and oneDNN's bfloat16 kernels for them ran slower than its float32 ones
// (MobileNetV2's 17 took 37 ms per run in bf16x3 against ~3 ms in float32).
// --keep-dtype entries name nodes (a node's name, a part of a fused node's "a+b+c" name, or
// its output's name) or op types (ONNX's, which also match the fused forms: "Conv" keeps
// FusedConv nodes); an entry that matches nothing is reported in a note.
//
// The pass is required (it runs at every -O level, after the fusions and layout assignment,
// so the fused nodes are the ones marked) and records one note per mode decision: the counts
// per op type and each node kept in float32 with the reason.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "core/logging.h"
#include "kernels/kernel_registry.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

// The fused form of each candidate op, and the ONNX op type of each.
struct CandidateOp {
  const char* onnx;
  const char* fused;
};
constexpr CandidateOp kCandidateOps[] = {{"Conv", "FusedConv"}, {"MatMul", "FusedMatMul"}, {"Gemm", "FusedGemm"}};

// The ONNX op type of a candidate op (Conv for Conv and FusedConv), or null.
const char* candidate_base_op(const ir::Node& n) {
  for (const CandidateOp& c : kCandidateOps) {
    if (n.domain() == ops::kOnnxDomain && n.op_type() == c.onnx) return c.onnx;
    if (n.domain() == ops::kKilnDomain && n.op_type() == c.fused) return c.onnx;
  }
  return nullptr;
}

const char* fused_op_for(const char* base) {
  for (const CandidateOp& c : kCandidateOps)
    if (std::string(base) == c.onnx) return c.fused;
  return nullptr;
}

bool float32_tensor(const ir::Value* v) { return v && v->dtype() == DataType::kFloat32; }

// A layer: float32 in and out, constant float32 weights in input 1.
bool is_candidate(const ir::Graph& g, const ir::Node& n) {
  if (!candidate_base_op(n) || n.num_outputs() != 1 || n.num_inputs() < 2) return false;
  const ir::Value* w = n.input(1);
  return float32_tensor(n.input(0)) && float32_tensor(n.output(0)) && float32_tensor(w) &&
         fusion::constant(g, w);
}

bool is_depthwise(const ir::Node& n) {
  if (std::string(candidate_base_op(n)) != "Conv") return false;
  const ir::Value* w = n.input(1);
  return n.attr_int("group", 1) > 1 && w->shape().has_rank() && w->shape().rank() >= 2 && w->shape()[1].is_static() &&
         w->shape()[1].value == 1;
}

std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream ss(name);
  std::string part;
  while (std::getline(ss, part, '+'))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// The --keep-dtype entry that matches `n`, or null.
const std::string* keep_entry_for(const ir::Node& n, const std::vector<std::string>& keep) {
  const std::vector<std::string> parts = split_name(n.name());
  for (const std::string& k : keep) {
    if (k == n.name() || k == n.op_type() || k == candidate_base_op(n) || (n.output(0) && k == n.output(0)->name()) ||
        std::find(parts.begin(), parts.end(), k) != parts.end())
      return &k;
  }
  return nullptr;
}

// For each graph output, the last candidate in execution order that it depends on.
std::unordered_set<const ir::Node*> final_layers(const ir::Graph& g, const std::unordered_set<const ir::Node*>& cands) {
  std::unordered_map<const ir::Node*, size_t> order;
  for (size_t i = 0; i < g.nodes().size(); ++i) order[g.nodes()[i].get()] = i;
  std::unordered_set<const ir::Node*> finals;
  for (const ir::Value* out : g.outputs()) {
    std::vector<const ir::Node*> stack;
    std::unordered_set<const ir::Node*> seen;
    if (out->producer()) stack.push_back(out->producer());
    const ir::Node* last = nullptr;
    while (!stack.empty()) {
      const ir::Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      if (cands.count(n) && (!last || order[n] > order[last])) last = n;
      for (const ir::Value* in : n->inputs())
        if (in && in->producer()) stack.push_back(in->producer());
    }
    if (last) finals.insert(last);
  }
  return finals;
}

// The same node as its fused form (same inputs, output, name and attributes).
ir::Node* to_fused_form(ir::Graph& g, GraphUses& uses, ir::Node* node, std::unordered_set<const ir::Node*>& removed) {
  const char* fused = fused_op_for(candidate_base_op(*node));
  std::vector<ir::Value*> inputs(node->inputs().begin(), node->inputs().end());
  ir::AttributeMap attrs = node->attrs();
  ir::Node* n = fusion::add_fused_node(g, uses, fused, {node}, inputs, node->output(0), removed);
  n->set_name(node->name());
  n->attrs() = std::move(attrs);
  return n;
}

// Whether mixed gives a convolution the split bf16x3: a 2-D convolution (W O x C/g x kh x kw)
// whose input holds at least as many elements as its weights. The split triples the bf16 work
// and the weight bytes read per run (hi, lo and hi again): cheap where the activations
// dominate (the early, high-resolution layers, which are also where a rounding travels
// through the most layers), and no gain over float32 where the weights do: with every
// ResNet-50 convolution in bf16x3 the convolutions took 35 ms at one thread (ONEDNN_VERBOSE),
// most of it in the deep layers reading 3x their bf16 weights, against about 50 ms in fp32.
// There single bf16 halves the weight bytes instead.
bool split_pays(const ir::Node& n) {
  if (std::string(candidate_base_op(n)) != "Conv") return false;
  const ir::Value* x = n.input(0);
  const ir::Value* w = n.input(1);
  if (!w->shape().has_rank() || w->shape().rank() != 4 || !w->shape().is_static()) return false;
  if (!x->shape().has_rank() || !x->shape().is_static()) return false;
  return x->shape().num_elements() >= w->shape().num_elements();
}

// Whether the bf16 convolution kernel reads X and writes Y in their own NC1HWC0 layout with
// blocks of 16 channels (kernels/cpu/conv.cc: oneDNN's jit_bf16 kernels compute in nChw16c;
// X is only converted to bfloat16, Y written as it is) instead of through NHWC.
bool bf16_in_own_layout(const ir::Node& n, int parts) {
  return parts == 1 && n.domain() == ops::kKilnDomain && n.attr_int("c0", 0) == 16 &&
         ops::is_blocked_format(n.attr_string("x_format", ops::kFormatPlain)) &&
         ops::is_blocked_format(n.attr_string("y_format", ops::kFormatPlain));
}

// Whether bf16 (`parts` 1) or bf16x3 (3) runs a float32 convolution faster than float32 on
// this CPU, by a cost model of the kernels: float32 at kFp32Rate, each bf16 pass at the AMX or
// AVX512-BF16 rate, plus the conversions of the bf16 route: X into NHWC bfloat16 (parts halves
// per element) and Y back from NHWC float32 at kConvertSeconds per element, or, for a
// convolution between NC1HWC0 tensors (bf16_in_own_layout), X into bfloat16 in place at
// kConvertInPlaceSeconds. Rates measured with oneDNN 2.6 on ResNet-50's and MobileNetV2's
// convolutions, one core: float32 ~160 GFLOP/s, AMX ~1000 per pass, AVX512-BF16 ~250 (400-450
// on the jit_bf16 kernels with the weights in cache, Zen 5), conversions ~0.5 ns per element
// through NHWC, ~0.1 in place (oneDNN's f32 -> bf16 reorder of nChw16c: 80 us for ResNet-50's
// 802816-element 256 x 56 x 56 maps). MobileNetV2's first convolutions (3 -> 32 and 1x1
// 32 -> 16 at 112x112, 20-40 FLOPs per converted element) ran 3-6x slower in bf16x3 than in
// float32.
bool bf16_pays(const ir::Node& n, int parts) {
  constexpr double kFp32Rate = 160e9, kAmxRate = 1000e9, kAvx512Bf16Rate = 250e9;
  constexpr double kConvertSeconds = 0.5e-9, kConvertInPlaceSeconds = 0.1e-9;
  if (std::string(candidate_base_op(n)) != "Conv") return true;  // products: A is small beside B
  const ir::Value* x = n.input(0);
  const ir::Value* w = n.input(1);
  const ir::Value* y = n.output(0);
  for (const ir::Value* v : {x, w, y})
    if (!v->shape().has_rank() || !v->shape().is_static()) return true;
  const kernels::Bf16Support hw = kernels::cpu_bf16_support();
  if (!hw.avx512) return true;  // no rates to compare: what the mode asks for
  const double w_elems = static_cast<double>(w->shape().num_elements());
  const double y_elems = static_cast<double>(y->shape().num_elements());
  const double flops = 2.0 * y_elems * w_elems / static_cast<double>(w->shape()[0].value);
  const double x_elems = static_cast<double>(x->shape().num_elements());
  const double fp32 = flops / kFp32Rate;
  const double convert = bf16_in_own_layout(n, parts) ? x_elems * kConvertInPlaceSeconds
                                                      : (x_elems * (1 + parts) / 2.0 + y_elems) * kConvertSeconds;
  const double bf16 = parts * flops / (hw.amx ? kAmxRate : kAvx512Bf16Rate) + convert;
  return bf16 < fp32;
}

// The convolutions among the first kEarlyConvolutionShare of a model's convolutions (in
// execution order): where mixed wants bf16x3 but this CPU runs it slower than float32, these
// stay float32 and later ones take single bf16. A rounding of an early layer's input travels
// through every layer after it: ResNet-50 (random weights, white-noise input, Zen 5) came to
// cosine 0.99812 to float32 with all 53 convolutions in bf16, 0.99818 with the first in fp32,
// 0.99940 with the first 5, 0.99968 with the first 8 (one sixth), 0.99981 with the first 11,
// for 26.1, 26.3, 27.2 and 28-33 ms per run at one thread (float32: 42.9).
constexpr double kEarlyConvolutionShare = 1.0 / 6.0;

std::unordered_set<const ir::Node*> early_convolutions(const ir::Graph& g, const std::unordered_set<const ir::Node*>& cands) {
  std::vector<const ir::Node*> convs;
  for (const auto& n : g.nodes())
    if (cands.count(n.get()) && std::string(candidate_base_op(*n)) == "Conv") convs.push_back(n.get());
  const size_t early = static_cast<size_t>(static_cast<double>(convs.size()) * kEarlyConvolutionShare);
  return std::unordered_set<const ir::Node*>(convs.begin(), convs.begin() + static_cast<std::ptrdiff_t>(early));
}

// Whether a FusedConv runs in single bf16 between NC1HWC0 tensors of 16-channel blocks: the
// kernel's route that reads X and writes Y in place (bf16_in_own_layout).
bool bf16_blocked_conv(const ir::Node& n) {
  return n.domain() == ops::kKilnDomain && n.op_type() == "FusedConv" &&
         n.attr_string("precision", "") == "bf16" && bf16_in_own_layout(n, 1);
}

// Stores in bfloat16 the outputs of bf16 convolutions that only bf16 convolutions read, as
// their X or their residual Z. A reader rounds X to bfloat16 before computing, so for X
// storing it rounded changes no result (the producer's kernel rounds to nearest even, as the
// reader's conversion did); it saves each reader that conversion and halves the tensor's
// bytes. A residual read so is added rounded to bfloat16 (by 2^-8 of its value at most: 8
// significant bits) instead of in float32. A value some other op reads, or a graph output,
// stays float32. On ResNet-50
// (mixed, Zen 5) the conversions took 1.0 ms of 27 per run at one thread and 2.1 of 15 at two
// (ONEDNN_VERBOSE, oneDNN's f32 -> bf16 reorder of nChw16c). `kiln run`, medians of 30,
// alternated: the 31 outputs read only as X stored (the two inside each bottleneck whose
// convolutions run in bf16, the three between stages) took two threads from 18.4 / 17.9 ms to
// 16.0 / 16.3; the 13 read as residuals too, one thread 27.0 / 27.4 -> 26.4 / 26.3 ms, two
// 14.7 / 14.6 -> 14.3 / 14.3, cosine to float32's logits 0.999681 -> 0.999666.
// Returns how many values it changed.
int store_bf16_activations(ir::Graph& g) {
  GraphUses uses(g);
  int stored = 0;
  for (const auto& n : g.nodes()) {
    if (!bf16_blocked_conv(*n)) continue;
    ir::Value* y = n->output(0);
    if (!y || y->dtype() != DataType::kFloat32 || uses.pinned(y) || uses.consumers(y).empty()) continue;
    bool only_bf16_activation = true;
    for (const ir::Node* c : uses.consumers(y)) {
      bool as_x_or_z = bf16_blocked_conv(*c);
      for (int i = 1; i < 3; ++i) as_x_or_z = as_x_or_z && c->input(static_cast<size_t>(i)) != y;  // not W or B
      only_bf16_activation = only_bf16_activation && as_x_or_z;
    }
    if (!only_bf16_activation) continue;
    n->attrs()["y_dtype"] = ir::Attribute::from_string(dtype_name(DataType::kBFloat16));
    y->type().dtype = DataType::kBFloat16;
    ++stored;
  }
  return stored;
}

std::string counts_text(const std::map<std::string, int>& counts) {
  std::string s;
  for (const auto& [op, n] : counts) s += str_format("%s%s x%d", s.empty() ? "" : ", ", op.c_str(), n);
  return s;
}

Status assign_precision(ir::Graph& g, PassContext& ctx) {
  const Precision mode = ctx.options().precision;
  if (mode == Precision::kFp32) return ok_status();
  for (const char* op : {"FusedConv", "FusedMatMul", "FusedGemm"})
    if (!fusion::kiln_op_available(op))
      return internal_error("precision_assignment: kiln %s is not registered", op);
  const std::vector<std::string>& keep = ctx.options().keep_dtype;

  std::unordered_set<const ir::Node*> cands;
  for (const auto& n : g.nodes())
    if (is_candidate(g, *n)) cands.insert(n.get());
  const std::unordered_set<const ir::Node*> finals =
      mode == Precision::kMixed ? final_layers(g, cands) : std::unordered_set<const ir::Node*>{};
  const std::unordered_set<const ir::Node*> early =
      mode == Precision::kMixed ? early_convolutions(g, cands) : std::unordered_set<const ir::Node*>{};

  GraphUses uses(g);
  std::unordered_set<const ir::Node*> removed;
  std::set<std::string> keep_used;
  std::map<std::string, int> bf16_counts;
  std::vector<std::string> kept;
  int depthwise = 0, slower = 0;
  std::vector<ir::Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* node : nodes) {
    if (!cands.count(node)) continue;
    if (const std::string* k = keep_entry_for(*node, keep)) {
      keep_used.insert(*k);
      kept.push_back(str_format("%s (--keep-dtype %s)", node->name().c_str(), k->c_str()));
      continue;
    }
    if (is_depthwise(*node)) {
      ++depthwise;
      continue;
    }
    if (finals.count(node)) {
      kept.push_back(str_format("%s (final layer)", node->name().c_str()));
      continue;
    }
    bool split = mode == Precision::kMixed && split_pays(*node);
    if (mode == Precision::kMixed && ctx.options().precision_cost_model) {
      // bf16x3 slower than float32 here (no AMX): single bf16 past the early convolutions, on
      // the blocked route only. Through NHWC oneDNN's brgconv kernels ran some of them far
      // below the model's rate (PP-OCRv4 det's 96 -> 24 3x3 at 160x160: 20-38 ms in bf16
      // against 10.8 in float32 Winograd, Zen 5).
      if (split && !bf16_pays(*node, 3) && !early.count(node) && bf16_in_own_layout(*node, 1)) split = false;
      if (!bf16_pays(*node, split ? 3 : 1)) {
        ++slower;
        continue;
      }
    }
    if (node->domain() == ops::kOnnxDomain) node = to_fused_form(g, uses, node, removed);
    node->attrs()["precision"] = ir::Attribute::from_string(split ? "bf16x3" : "bf16");
    ++bf16_counts["kiln." + node->op_type() + (split ? " bf16x3" : " bf16")];
    ctx.add_changed(1);
  }
  KILN_RETURN_IF_ERROR(fusion::finish(g, removed));
  const int stored = store_bf16_activations(g);

  int total = 0;
  for (const auto& [op, n] : bf16_counts) total += n;
  ctx.note(str_format("precision %s: %d nodes in bf16%s%s", precision_name(mode), total,
                      bf16_counts.empty() ? "" : " (", bf16_counts.empty() ? "" : (counts_text(bf16_counts) + ")").c_str()));
  if (stored) ctx.note(str_format("%d convolution outputs stored in bf16 (read only by bf16 convolutions, as X or Z)", stored));
  if (slower) kept.insert(kept.begin(), str_format("%d convolutions faster in fp32 here", slower));
  if (depthwise) kept.insert(kept.begin(), str_format("%d depthwise convolutions", depthwise));
  if (!kept.empty()) {
    std::string list;
    for (const std::string& k : kept) list += (list.empty() ? "" : ", ") + k;
    ctx.note(str_format("kept in fp32: %s", list.c_str()));
  }
  for (const std::string& k : keep)
    if (!keep_used.count(k)) ctx.note(str_format("--keep-dtype %s matches no convolution or matrix product", k.c_str()));
  if (total > 0 && !kernels::cpu_bf16_support().avx512)
    ctx.note("this CPU has no AVX512-BF16: here the bf16 nodes run on emulated or reference kernels, slower than fp32");
  return ok_status();
}

}  // namespace

// Indexed by Precision.
constexpr const char* kPrecisionNames[] = {"fp32", "bf16", "mixed"};

const char* precision_name(Precision p) { return kPrecisionNames[static_cast<int>(p)]; }

std::optional<Precision> precision_from_name(const std::string& name) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kMixed})
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

PassInfo precision_assignment_pass() {
  PassInfo p;
  p.name = "precision_assignment";
  p.min_level = 0;
  p.required = true;
  p.description = "bf16 compute for convolutions and matrix products (--precision bf16|mixed, --keep-dtype)";
  p.run = assign_precision;
  return p;
}

}  // namespace kiln::compiler
