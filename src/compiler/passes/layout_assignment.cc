// layout_assignment: keeps activations between convolutions (and the pools among them) in
// the channel-blocked layout NC1HWC0 (ops/layout.h; nChw8c on AVX2, nChw16c on AVX-512 — the
// CPU twin of CANN's 5HD), the layout oneDNN's convolution and pooling kernels compute in. Without it every convolution reorders
// its input from NCHW into the blocked layout and its output back (about a tenth of
// ResNet-50's time at one thread, measured in src/kernels/cpu/conv.cc).
//
// The rule, per value V (float32, 4-D with C known, C a multiple of the block, not a graph output
// or a name a subgraph reads): V is stored blocked when its producer is a blockable
// convolution and at least one consumer reads it blocked (a blockable convolution reading V
// as X, or as the residual Z of a convolution whose output can be blocked, or a blockable
// pool), or when its producer is a blockable pool whose input is blocked (pools compute in
// their input's layout). A convolution or pool is blockable when it will run on a fast kernel
// (the kernel registry says so: blocking a reference-kernel node only adds conversions) and
// is a plain or depthwise 2-D convolution, or a 2-D Max/Average/GlobalMax/GlobalAverage pool.
// Then:
//   - each blockable conv reads X and writes Y (and reads Z) in their values' layouts
//     (FusedConv's x_format / y_format / c0; an ONNX Conv becomes a FusedConv to carry them);
//     a pool in a blocked region becomes a kiln Pooling with format NC1HWC0;
//   - every other reader of a blocked value reads one shared kiln TransData back to NCHW,
//     and a blocked-output conv whose Z is plain reads a TransData of Z to NC1HWC0:
//     conversions only at the boundaries;
//   - a TransData pair that undoes itself (NC1HWC0 -> NCHW -> NC1HWC0) is removed.
// The pass's record counts the values stored blocked plus the conversions inserted, and a
// note gives both.
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "core/cpu_features.h"
#include "compiler/passes/passes.h"
#include "kernels/kernel_registry.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

bool is_conv(const ir::Node& n) {
  return (n.domain() == ops::kOnnxDomain && n.op_type() == "Conv") ||
         (n.domain() == ops::kKilnDomain && n.op_type() == "FusedConv");
}

bool is_pool(const ir::Node& n) {
  const std::string& op = n.op_type();
  return n.domain() == ops::kOnnxDomain &&
         (op == "MaxPool" || op == "AveragePool" || op == "GlobalMaxPool" || op == "GlobalAveragePool");
}

class LayoutAssigner {
 public:
  LayoutAssigner(ir::Graph& g, PassContext& ctx, int64_t c0) : g_(g), ctx_(ctx), uses_(g), c0_(c0) {}

  Status run() {
    // Graph order throughout (producers before readers, and the compiled model does not
    // depend on hashing).
    for (const auto& n : g_.nodes()) {
      if (blockable_conv(*n)) convs_.insert(n.get());
      if (blockable_pool(*n)) pools_.insert(n.get());
      if (convs_.count(n.get()) || pools_.count(n.get())) order_.push_back(n.get());
    }
    std::vector<ir::Value*> blocked;
    for (ir::Node* n : order_) {
      ir::Value* y = n->output(0);
      if (!value_blockable(y)) continue;
      // A conv blocks its output for blocked readers; a pool computes in its input's layout.
      const bool block = convs_.count(n) ? has_blocking_consumer(y) : blocked_.count(n->input(0)) > 0;
      if (!block) continue;
      blocked.push_back(y);
      blocked_.insert(y);
    }
    if (blocked.empty()) return ok_status();

    // Rewrite: formats on the convs and pools, TransData for the other readers.
    int conversions = 0;
    for (ir::Value* v : blocked) conversions += unblock_for_plain_readers(v);
    for (ir::Node* n : order_) conversions += convs_.count(n) ? set_conv_formats(n) : set_pool_format(n);
    for (ir::Value* v : blocked) {
      KILN_ASSIGN_OR_RETURN(Shape bs, ops::blocked_shape(v->shape(), c0_));
      v->type().shape = bs;
    }
    ctx_.add_changed(static_cast<int>(blocked.size()) + conversions);
    ctx_.note(str_format("layout_assignment: %zu values in NC1HWC0 (c0 = %lld), %d TransData", blocked.size(),
                         (long long)c0_, conversions));
    KILN_RETURN_IF_ERROR(fusion::finish(g_, removed_));
    return g_.topological_sort();  // the TransData nodes were appended
  }

 private:
  // A fast kernel exists (the kernel registry says so: blocking a reference-kernel node only
  // adds conversions) for a plain or depthwise 2-D float32 convolution.
  bool blockable_conv(const ir::Node& n) const {
    if (!is_conv(n) || n.num_outputs() != 1) return false;
    if (n.domain() == ops::kKilnDomain &&
        (n.attr_string("x_format", ops::kFormatPlain) != ops::kFormatPlain ||
         n.attr_string("y_format", ops::kFormatPlain) != ops::kFormatPlain))
      return false;  // already assigned
    const ir::Value* x = n.input(0);
    const ir::Value* y = n.output(0);
    if (!fusion::f32_4d_known_channels(x) || !fusion::f32_4d_known_channels(y)) return false;
    const int64_t c = x->shape()[1].value, m = y->shape()[1].value;
    const int64_t group = n.attr_int("group", 1);
    if (group != 1 && !(group == c && group == m)) return false;
    return kernels::has_fast_kernel(n);
  }

  // A 2-D float32 pool with one output whose oneDNN kernel takes it (the kernel computes the
  // kiln Pooling twin in the blocked layout with the same geometry).
  bool blockable_pool(const ir::Node& n) const {
    return is_pool(n) && n.num_outputs() == 1 && fusion::f32_4d_known_channels(n.input(0)) && fusion::f32_4d_known_channels(n.output(0)) &&
           n.input(0)->shape()[1].value % c0_ == 0 && kernels::has_fast_kernel(n);
  }

  bool value_blockable(const ir::Value* v) const {
    return fusion::f32_4d_known_channels(v) && v->shape()[1].value % c0_ == 0 && !uses_.pinned(v);
  }

  // A consumer that would read `v` blocked: a blockable conv reading it as X, or as Z of a
  // conv whose own output can be blocked, or a blockable pool.
  bool has_blocking_consumer(const ir::Value* v) const {
    for (ir::Node* c : uses_.consumers(v)) {
      if (pools_.count(c) && value_blockable(c->output(0))) return true;
      if (!convs_.count(c)) continue;
      if (c->input(0) == v) return true;
      if (c->num_inputs() > 3 && c->input(3) == v && value_blockable(c->output(0))) return true;
    }
    return false;
  }

  // Whether `reader` reads its input `slot` blocked after the rewrite.
  bool reads_blocked(ir::Node* reader, size_t slot) const {
    if (pools_.count(reader)) return slot == 0 && blocked_.count(reader->output(0)) > 0;
    if (!convs_.count(reader)) return false;
    if (slot == 0) return true;
    if (slot == 3) return blocked_.count(reader->output(0)) > 0;
    return false;
  }

  ir::Value* new_value(const std::string& base, const ir::Value* like) {
    std::string name = base;
    for (int k = 1; g_.find_value(name); ++k) name = base + "_" + std::to_string(k);
    ir::Value* v = g_.get_or_add_value(name);
    v->type() = like->type();
    return v;
  }

  ir::Node* add_trans_data(ir::Value* in, ir::Value* out, bool to_blocked) {
    ir::Node* n = g_.add_node(out->name() + "_transdata", "TransData", ops::kKilnDomain, ops::kKilnOpset, {nullptr},
                              {out});
    uses_.set_input(n, 0, in);
    n->attrs()["src_format"] = ir::Attribute::from_string(to_blocked ? ops::kFormatPlain : ops::kFormatBlocked);
    n->attrs()["dst_format"] = ir::Attribute::from_string(to_blocked ? ops::kFormatBlocked : ops::kFormatPlain);
    n->attrs()["c0"] = ir::Attribute::from_int(c0_);
    g_.opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
    return n;
  }

  // Points every reader of blocked `v` that needs NCHW at one TransData of it.
  int unblock_for_plain_readers(ir::Value* v) {
    ir::Value* plain = nullptr;
    const std::vector<ir::Node*> readers = uses_.consumers(v);
    std::unordered_set<ir::Node*> seen;
    for (ir::Node* r : readers) {
      if (!seen.insert(r).second) continue;
      for (size_t slot = 0; slot < r->inputs().size(); ++slot) {
        if (r->input(static_cast<int>(slot)) != v || reads_blocked(r, slot)) continue;
        if (!plain) {
          plain = new_value(v->name() + "_nchw", v);
          add_trans_data(v, plain, false);
        }
        uses_.set_input(r, slot, plain);
      }
    }
    return plain ? 1 : 0;
  }

  // Sets the formats of one blockable conv from its values' layouts; a plain Z of a
  // blocked-output conv gets a TransData (or, when Z is itself a TransData of a blocked
  // value, that value: the pair undoes itself).
  int set_conv_formats(ir::Node* conv) {
    const bool xb = blocked_.count(conv->input(0)) > 0;
    const bool yb = blocked_.count(conv->output(0)) > 0;
    if (!xb && !yb) return 0;
    if (conv->domain() == ops::kOnnxDomain) conv = replace_with_kiln_op(conv, "FusedConv");
    conv->attrs()["x_format"] = ir::Attribute::from_string(xb ? ops::kFormatBlocked : ops::kFormatPlain);
    conv->attrs()["y_format"] = ir::Attribute::from_string(yb ? ops::kFormatBlocked : ops::kFormatPlain);
    conv->attrs()["c0"] = ir::Attribute::from_int(c0_);
    if (conv->num_inputs() <= 3 || !conv->input(3) || !yb || blocked_.count(conv->input(3))) return 0;
    ir::Value* z = conv->input(3);
    const ir::Node* p = z->producer();
    if (p && is_op(*p, "TransData", ops::kKilnDomain) && blocked_.count(p->input(0))) {
      uses_.set_input(conv, 3, p->input(0));  // Z = TransData(blocked) back to NC1HWC0: read it directly
      return 0;
    }
    ir::Value* zb = new_value(z->name() + "_nc1hwc0", z);
    Expected<Shape> bs = ops::blocked_shape(z->shape(), c0_);
    zb->type().shape = *bs;  // Z has Y's shape, whose channels are a multiple of c0
    add_trans_data(z, zb, true);
    uses_.set_input(conv, 3, zb);
    return 1;
  }

  // A pool inside a blocked region becomes kiln Pooling in NC1HWC0.
  int set_pool_format(ir::Node* pool) {
    if (!blocked_.count(pool->output(0))) return 0;
    const std::string mode = pool->op_type();
    pool = replace_with_kiln_op(pool, "Pooling");
    pool->attrs()["mode"] = ir::Attribute::from_string(mode);
    pool->attrs()["format"] = ir::Attribute::from_string(ops::kFormatBlocked);
    pool->attrs()["c0"] = ir::Attribute::from_int(c0_);
    return 0;
  }

  // The same node as kiln op `op` (same inputs, output, name and attributes).
  ir::Node* replace_with_kiln_op(ir::Node* node, const char* op) {
    std::vector<ir::Value*> inputs(node->inputs().begin(), node->inputs().end());
    ir::AttributeMap attrs = node->attrs();
    ir::Value* y = node->output(0);
    ir::Node* n = fusion::add_fused_node(g_, uses_, op, {node}, inputs, y, removed_);
    n->set_name(node->name());
    n->attrs() = std::move(attrs);
    for (auto* set : {&convs_, &pools_})
      if (set->erase(node)) set->insert(n);
    return n;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  int64_t c0_;
  std::unordered_set<ir::Node*> convs_, pools_;
  std::vector<ir::Node*> order_;  // the blockable convs and pools in graph order
  std::unordered_set<const ir::Value*> blocked_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

int64_t layout_channel_block(const PassContext& ctx) {
  if (ctx.options().channel_block > 0) return ctx.options().channel_block;
  return cpu_features().avx512f ? 16 : 8;  // the compiling CPU's convolution kernels
}

PassInfo layout_assignment_pass() {
  PassInfo p;
  p.name = "layout_assignment";
  p.min_level = 3;
  p.description = "activations between fast convolutions in the blocked NC1HWC0 layout";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available("FusedConv") || !fusion::kiln_op_available("TransData")) {
      ctx.note("layout_assignment: kiln FusedConv / TransData are not registered; nothing changed");
      return ok_status();
    }
    LayoutAssigner a(g, ctx, layout_channel_block(ctx));
    return a.run();
  };
  return p;
}

}  // namespace kiln::compiler
