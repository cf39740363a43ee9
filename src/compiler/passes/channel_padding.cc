// channel_padding: widens a value between convolutions whose channel count is not a multiple
// of the NC1HWC0 block (layout_assignment) to the next multiple, with the extra channels
// exactly zero, so that it can be stored blocked instead of plain NCHW.
//
// Why: layout_assignment blocks only values whose channels fill whole blocks. MobileNetV2's
// 24-channel maps (c0 = 16 on AVX-512) stayed NCHW, and the four 1x1 convolutions writing or
// reading them ran at 95-130 GFLOP/s against 150-190 for their blocked neighbours (one
// thread, Zen 5, `kiln profile`): ~0.75 ms of ~4.8 per run.
//
// The rewrite, for a value V of C channels widened to C' (C rounded up to the block):
//   - V's producer, a convolution, gets C' - C more output channels whose weights and bias
//     are zero. Its activation maps 0 to 0 (relu, clip around 0, hardswish, gelu, silu,
//     tanh, leaky relu), so those channels are 0; a residual Z it adds is a widened value too.
//   - every reader is a convolution reading V as X, whose weights get C' - C more input
//     channels of zeros (they add exact zeros to every sum), or reading V as its residual
//     Z, whose own output is then a widened value of the same C'.
// The graph computes what it computed before; only the widened values differ (renamed
// "<name>_cpad", so tools matching values by name across graphs do not compare them). It
// pays where the widening is small beside the speed of the blocked kernels: C' <= 1.5 C
// (24 -> 32; not 8 -> 16). The pass's note says how many values it widened.
//
// Conditions: V float32, 4-D with known channels, not a graph output or a name a subgraph reads; the
// convolutions 2-D, ungrouped, with constant float32 weights (and bias), on fast kernels
// (the kernel registry says so), their formats not yet assigned.
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

// Widen only while the extra channels cost at most half the value's own (see the header).
constexpr double kMaxGrowth = 1.5;

class ChannelPadder {
 public:
  ChannelPadder(ir::Graph& g, PassContext& ctx, int64_t c0) : g_(g), ctx_(ctx), uses_(g), c0_(c0) {}

  Status run() {
    for (const auto& n : g_.nodes()) {
      ir::Node* p = n.get();
      if (!paddable_conv(*p)) continue;
      ir::Value* y = p->output(0);
      const int64_t c = y->shape()[1].value;
      const int64_t wide = (c + c0_ - 1) / c0_ * c0_;
      if (c % c0_ == 0 || static_cast<double>(wide) > kMaxGrowth * static_cast<double>(c)) continue;
      if (uses_.pinned(y) || uses_.consumers(y).empty()) continue;
      if (all_readers_paddable(y)) widened_[y] = wide;
    }
    drop_unmatched_residuals();
    if (widened_.empty()) return ok_status();

    // Every conv next to a widened value, with how its weights grow; rewritten in graph order
    // so the new initializers' names and order do not depend on where the nodes live in memory.
    std::vector<ir::Value*> values;
    for (const auto& n : g_.nodes())
      for (ir::Value* v : n->outputs())
        if (widened_.count(v)) values.push_back(v);
    std::unordered_map<const ir::Node*, std::pair<int64_t, int64_t>> grow;  // (output, input channels)
    for (ir::Value* v : values) {
      grow[v->producer()].first = widened_[v];
      for (ir::Node* r : uses_.consumers(v))
        if (r->input(0) == v) grow[r].second = widened_[v];
    }
    for (const auto& n : g_.nodes()) {
      auto it = grow.find(n.get());
      if (it != grow.end()) KILN_RETURN_IF_ERROR(widen_weights(n.get(), it->second.first, it->second.second));
    }
    for (ir::Value* v : values) rename_widened(v);

    ctx_.add_changed(static_cast<int>(values.size()));
    ctx_.note(str_format("channel_padding: %zu values widened to whole blocks of %lld channels (%s)", values.size(),
                         (long long)c0_, widening_text().c_str()));
    return ok_status();
  }

 private:
  // A 2-D ungrouped convolution with constant float32 weights (and bias) on a fast kernel,
  // formats not assigned, whose activation maps 0 to 0.
  bool paddable_conv(const ir::Node& n) const {
    const bool onnx = n.domain() == ops::kOnnxDomain && n.op_type() == "Conv";
    const bool fused = n.domain() == ops::kKilnDomain && n.op_type() == "FusedConv";
    if ((!onnx && !fused) || n.num_outputs() != 1 || n.num_inputs() < 2) return false;
    if (n.attr_int("group", 1) != 1) return false;
    if (fused && (n.attr_string("x_format", ops::kFormatPlain) != ops::kFormatPlain ||
                  n.attr_string("y_format", ops::kFormatPlain) != ops::kFormatPlain ||
                  !n.attr_string("precision", "").empty()))
      return false;
    if (!fusion::f32_4d_known_channels(n.input(0)) || !fusion::f32_4d_known_channels(n.output(0))) return false;
    const ir::Value* w = n.input(1);
    if (!fusion::constant(g_, w) || w->initializer()->dtype() != DataType::kFloat32 || w->initializer()->rank() != 4)
      return false;
    const ir::Value* b = n.num_inputs() > 2 ? n.input(2) : nullptr;
    if (b && (!fusion::constant(g_, b) || b->initializer()->dtype() != DataType::kFloat32 || b->initializer()->rank() != 1))
      return false;
    if (fused) {
      Expected<ops::FusedActivation> act = ops::parse_fused_activation(n);
      if (!act.ok() || ops::fused_activation_value(*act, 0.0f) != 0.0f) return false;
    }
    return kernels::has_fast_kernel(n);
  }

  // Every reader of `v` is a paddable conv reading it as X (not as W or B), or as the
  // residual Z of a FusedConv.
  bool all_readers_paddable(const ir::Value* v) const {
    for (ir::Node* r : uses_.consumers(v)) {
      if (!paddable_conv(*r)) return false;
      for (size_t i = 1; i < r->inputs().size(); ++i)
        if (r->input(i) == v && !(i == 3 && r->op_type() == "FusedConv")) return false;
    }
    return true;
  }

  // A residual and the output it is added into are widened together or not at all: drops
  // values until every widened Z feeds a widened output of the same width and every widened
  // output's Z (if any) is widened alike.
  void drop_unmatched_residuals() {
    for (bool dropped = true; dropped;) {
      dropped = false;
      for (auto it = widened_.begin(); it != widened_.end();) {
        ir::Value* v = it->first;
        const int64_t wide = it->second;
        bool ok = true;
        ir::Node* p = v->producer();
        if (p->num_inputs() > 3 && p->input(3)) ok = width_of(p->input(3)) == wide;
        for (ir::Node* r : uses_.consumers(v))
          if (r->num_inputs() > 3 && r->input(3) == v) ok = ok && width_of(r->output(0)) == wide;
        if (ok) {
          ++it;
        } else {
          it = widened_.erase(it);
          dropped = true;
        }
      }
    }
  }

  int64_t width_of(ir::Value* v) const {
    auto it = widened_.find(v);
    return it == widened_.end() ? 0 : it->second;
  }

  // W [M, C, kh, kw] -> [M', C', kh, kw] and B [M] -> [M'] (0 keeps a dimension), zero-filled.
  Status widen_weights(ir::Node* n, int64_t out_channels, int64_t in_channels) {
    ir::Value* w = n->input(1);
    const Tensor& wt = *w->initializer();
    const int64_t m = wt.dim(0), c = wt.dim(1), k = wt.dim(2) * wt.dim(3);
    const int64_t m2 = out_channels ? out_channels : m, c2 = in_channels ? in_channels : c;
    KILN_ASSIGN_OR_RETURN(Tensor nw, Tensor::allocate(DataType::kFloat32, {m2, c2, wt.dim(2), wt.dim(3)}));
    for (int64_t o = 0; o < m; ++o)
      std::memcpy(nw.data<float>() + o * c2 * k, wt.data<float>() + o * c * k, static_cast<size_t>(c * k) * sizeof(float));
    uses_.set_input(n, 1, add_initializer(g_, w->name() + "_cpad", std::move(nw)));
    release(w);
    ir::Value* b = n->num_inputs() > 2 ? n->input(2) : nullptr;
    if (b && out_channels) {
      const Tensor& bt = *b->initializer();
      KILN_ASSIGN_OR_RETURN(Tensor nb, Tensor::allocate(DataType::kFloat32, {m2}));
      std::memcpy(nb.data<float>(), bt.data<float>(), static_cast<size_t>(bt.dim(0)) * sizeof(float));
      uses_.set_input(n, 2, add_initializer(g_, b->name() + "_cpad", std::move(nb)));
      release(b);
    }
    return ok_status();
  }

  ir::Value* new_value(const std::string& base) {
    std::string name = base;
    for (int k = 1; g_.find_value(name); ++k) name = base + "_" + std::to_string(k);
    return g_.get_or_add_value(name);
  }

  // Clears an initializer nothing reads any more, so the weights are not stored twice.
  void release(ir::Value* v) {
    if (uses_.unused(v) && fusion::constant(g_, v)) v->clear_initializer();
  }

  // The widened value replaces `v` under a new name, with C' channels.
  void rename_widened(ir::Value* v) {
    ir::Value* wide = new_value(v->name() + "_cpad");
    wide->type() = v->type();
    std::vector<Dim> dims = v->shape().dims();
    widening_[{dims[1].value, widened_[v]}]++;
    dims[1] = Dim(widened_[v]);
    wide->type().shape = Shape(std::move(dims));
    ir::Node* p = v->producer();
    uses_.replace_uses(v, wide);
    v->set_producer(nullptr, -1);
    p->outputs()[0] = wide;
    wide->set_producer(p, 0);
  }

  std::string widening_text() const {
    std::string s;
    for (const auto& [from_to, n] : widening_)
      s += str_format("%s%d from %lld to %lld", s.empty() ? "" : ", ", n, (long long)from_to.first,
                      (long long)from_to.second);
    return s;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  int64_t c0_;
  std::unordered_map<ir::Value*, int64_t> widened_;  // value -> its channels after widening
  std::map<std::pair<int64_t, int64_t>, int> widening_;    // (channels, widened) -> values
};

}  // namespace

PassInfo channel_padding_pass() {
  PassInfo p;
  p.name = "channel_padding";
  p.min_level = 3;
  p.description = "values between convolutions widened with zero channels to whole NC1HWC0 blocks";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    ChannelPadder padder(g, ctx, layout_channel_block(ctx));
    return padder.run();
  };
  return p;
}

}  // namespace kiln::compiler
