// conv_fusion: Conv [+ constant Mul/Add] [+ residual Add] [+ activation] -> kiln FusedConv
// (docs/fused-ops.md). Rewrites, applied to every ONNX Conv and to every FusedConv that
// has no activation yet (so the order in which fusions find a chain does not matter):
//   - Add(y, c) with a constant c that varies only along the channel axis ([C,1,1],
//     [1,C,1,1], a scalar, ...) folds into the bias B; Mul(y, s) with such a constant,
//     before any residual, folds into W and B (W' = W s per output channel, B' = B s), as
//     exporters write "learnable affine" blocks. Both only in float32/float64 with constant
//     W and B: folding in fp16 would round differently from the unfused graph;
//   - Add(y, Z) or Add(Z, y) with Z of y's shape becomes the residual input Z;
//   - one activation of the table in docs/fused-ops.md (Silu written Mul(y, Sigmoid(y));
//     kiln HardSwish/Gelu made by the earlier fusions) becomes `activation`;
//   - after it, Mul by a constant scalar and / or Add of one become the activation's
//     post-affine (`activation_post_scale`, `activation_post_shift`; pattern part "Affine"):
//     PP-LCNetV3 (PP-OCRv4) follows every HardSwish with a learnable a * y + b.
// Each intermediate value must have one consumer and not be pinned; shapes and float dtypes
// must be known. The pattern name lists what was absorbed: "Conv+Relu", "Conv+Add+Relu",
// "Conv+Bias+Clip", "Conv+Scale+Bias+HardSwish", ...; "Scale" is a folded constant Mul,
// "Bias" a folded constant Add, "Add" the residual. A Conv whose only change is folded
// constants stays an ONNX Conv (pattern "Conv+Bias", "Conv+Scale", ...); a Conv with
// nothing to absorb is left alone and not counted.
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/custom_expr.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

class ConvFuser {
 public:
  ConvFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());
    for (ir::Node* n : order) {
      if (removed_.count(n)) continue;
      bool conv = is_op(*n, "Conv");
      bool fused =
          is_op(*n, "FusedConv", ops::kKilnDomain) && n->attr_string("activation", "").empty();
      if (conv || fused) try_fuse(*n);
    }
    return fusion::finish(g_, removed_);
  }

 private:
  // The per-channel values of constant `c` when adding it to `y` (channel axis 1) only adds
  // a bias: c broadcasts to y without growing it and varies along axis 1 at most.
  bool channel_bias(const ir::Value* y, const ir::Value* c, std::vector<double>* bias) const {
    if (!fusion::constant(g_, c) || c->initializer()->dtype() != y->dtype()) return false;
    const Tensor& t = *c->initializer();
    const Shape& ys = y->shape();
    int r = ys.rank();
    if (r < 2 || t.rank() > r || !ys[1].is_static()) return false;
    int64_t channels = ys[1].value;
    bool per_channel = false;
    for (int i = 0; i < t.rank(); ++i) {
      int axis = r - t.rank() + i;
      int64_t d = t.dim(i);
      if (d == 1) continue;
      if (axis != 1 || d != channels) return false;
      per_channel = true;
    }
    bias->assign(static_cast<size_t>(channels), 0.0);
    for (int64_t ch = 0; ch < channels; ++ch)
      (*bias)[static_cast<size_t>(ch)] = t.element_as_double(per_channel ? ch : 0);
    return true;
  }

  // Clears a constant nothing reads any more, so it is not stored.
  void release(ir::Value* v) {
    if (v && uses_.unused(v) && fusion::constant(g_, v)) v->clear_initializer();
  }

  static void store(Tensor& t, int64_t i, double v) {
    if (t.dtype() == DataType::kFloat32)
      t.data<float>()[i] = static_cast<float>(v);
    else
      t.data<double>()[i] = v;
  }

  // Constants fold into B only in float32/float64 (fp16 would round differently from the
  // unfused graph), and only into a constant B of shape [C].
  bool foldable_bias(const ir::Node& conv, const ir::Value& y) const {
    if (y.dtype() != DataType::kFloat32 && y.dtype() != DataType::kFloat64) return false;
    if (y.shape().rank() < 2 || !y.shape()[1].is_static() || y.shape()[1].value < 1) return false;
    const ir::Value* b = conv.input(2);
    if (!b) return true;
    if (!fusion::constant(g_, b)) return false;
    const Tensor& t = *b->initializer();
    return t.dtype() == y.dtype() && t.rank() == 1 && t.dim(0) == y.shape()[1].value;
  }

  // Scales fold into a constant W [C, C_in/group, k...] of y's dtype.
  bool foldable_weight(const ir::Node& conv, const ir::Value& y) const {
    const ir::Value* w = conv.input(1);
    if (!fusion::constant(g_, w)) return false;
    const Tensor& t = *w->initializer();
    return t.dtype() == y.dtype() && t.rank() >= 3 && t.dim(0) == y.shape()[1].value;
  }

  // W with output channel o multiplied by scale[o].
  static Tensor scaled_weight(const ir::Value& w, const std::vector<double>& scale) {
    const Tensor& t = *w.initializer();
    Tensor out = Tensor::make(t.dtype(), t.dims());
    int64_t per_channel = t.num_elements() / t.dim(0);
    for (int64_t o = 0; o < t.dim(0); ++o) {
      double f = scale[static_cast<size_t>(o)];
      for (int64_t k = 0; k < per_channel; ++k) {
        int64_t i = o * per_channel + k;
        store(out, i, t.element_as_double(i) * f);
      }
    }
    return out;
  }

  // After the activation: Mul by a constant scalar and / or Add of one (in that order), the
  // activation's post-affine. Extends `chain` and moves `y` past what it takes. The scalar
  // must be a float32 value (the attribute's type) and leave y's shape as it is; y float32 or
  // float64 (fp16 kernels compute in float32 and round once, where the unfused graph rounds
  // after each op).
  bool match_post_affine(std::vector<ir::Node*>& chain, ir::Value*& y, float* scale,
                         float* shift) {
    if (y->dtype() != DataType::kFloat32 && y->dtype() != DataType::kFloat64) return false;
    bool matched = false;
    for (const char* op_type : {"Mul", "Add"}) {
      if (!fusion::fusable_intermediate(uses_, y)) break;
      ir::Node* op = uses_.consumers(y)[0];
      if (!is_op(*op, op_type) || op->num_inputs() != 2 || op->num_outputs() != 1) continue;
      ir::Value* other = op->input(0) == y ? op->input(1) : op->input(0);
      double c = 0;
      if (other == y || !other || !fusion::scalar_constant(g_, other, &c)) continue;
      if (static_cast<double>(static_cast<float>(c)) != c) continue;
      ir::Value* out = op->output(0);
      if (!fusion::known_float_tensor(out) || !(out->shape() == y->shape())) continue;
      (std::string(op_type) == "Mul" ? *scale : *shift) = static_cast<float>(c);
      chain.push_back(op);
      y = out;
      matched = true;
    }
    return matched;
  }

  void try_fuse(ir::Node& conv) {
    if (conv.num_outputs() != 1 || conv.num_inputs() < 2 || !conv.input(1)) return;
    ir::Value* y = conv.output(0);
    ir::Value* x = conv.input(0);
    if (!fusion::known_float_tensor(y) || !x || x->dtype() != y->dtype()) return;
    std::vector<ir::Value*> in(conv.inputs());
    in.resize(4, nullptr);
    std::vector<ir::Node*> chain = {&conv};
    std::vector<ir::Value*> folded_constants;
    // Folded constants: the result so far is conv_W(x) * scale + bias per channel (empty
    // vectors: nothing folded yet).
    std::vector<double> scale, bias;
    bool scaled = false, biased = false;
    const bool foldable_b = foldable_bias(conv, *y);
    const bool foldable_w = foldable_b && foldable_weight(conv, *y);
    bool new_z = false;
    auto start_folding = [&](size_t channels) {
      if (!scale.empty()) return;
      scale.assign(channels, 1.0);
      bias.assign(channels, 0.0);
      if (in[2])
        for (size_t ch = 0; ch < channels; ++ch)
          bias[ch] = in[2]->initializer()->element_as_double(static_cast<int64_t>(ch));
    };

    // Adds and Muls: per-channel constant ones fold into B (and W), one residual becomes Z.
    while (fusion::fusable_intermediate(uses_, y)) {
      ir::Node* op = uses_.consumers(y)[0];
      bool add = is_op(*op, "Add"), mul = is_op(*op, "Mul");
      if ((!add && !mul) || op->num_inputs() != 2 || op->num_outputs() != 1) break;
      ir::Value* other = op->input(0) == y ? op->input(1) : op->input(0);
      if (other == y || !other) break;
      ir::Value* out = op->output(0);
      if (!fusion::known_float_tensor(out) || !(out->shape() == y->shape())) break;
      std::vector<double> c;
      if (add && foldable_b && channel_bias(y, other, &c)) {
        start_folding(c.size());
        for (size_t i = 0; i < c.size(); ++i) bias[i] += c[i];
        biased = true;
        folded_constants.push_back(other);
      } else if (mul && foldable_w && !in[3] && channel_bias(y, other, &c)) {
        // (W x + b) * s = (W s) x + b s; a residual would be scaled too, so none yet.
        start_folding(c.size());
        for (size_t i = 0; i < c.size(); ++i) {
          scale[i] *= c[i];
          bias[i] *= c[i];
        }
        scaled = true;
        folded_constants.push_back(other);
      } else if (add && !in[3] && fusion::known_float_tensor(other) &&
                 other->dtype() == y->dtype() && other->shape() == y->shape()) {
        in[3] = other;
        new_z = true;
      } else {
        break;
      }
      chain.push_back(op);
      y = out;
    }

    fusion::Activation act;
    bool has_act = fusion::match_activation(g_, uses_, y, &act);
    float post_scale = 1.0f, post_shift = 0.0f;
    bool post_affine = false;
    if (has_act) {
      chain.insert(chain.end(), act.nodes.begin(), act.nodes.end());
      y = act.output;
      post_affine = match_post_affine(chain, y, &post_scale, &post_shift);
    }
    if (chain.size() == 1) return;

    std::string pattern = "Conv";
    if (scaled) pattern += "+Scale";
    if (biased) pattern += "+Bias";
    if (in[3]) pattern += "+Add";
    if (has_act) pattern += "+" + act.name + ops::custom_op_pattern_note(act.nodes);
    if (post_affine) pattern += "+Affine";

    ir::Value* old_w = conv.input(1);
    ir::Value* old_b = conv.input(2);
    if (scaled) in[1] = add_initializer(g_, old_w->name() + "_scaled", scaled_weight(*old_w, scale));
    if (!scale.empty()) {
      // B' = the folded bias, in y's dtype.
      int64_t channels = static_cast<int64_t>(bias.size());
      Tensor nb = Tensor::make(y->dtype(), {channels});
      for (int64_t ch = 0; ch < channels; ++ch) store(nb, ch, bias[static_cast<size_t>(ch)]);
      std::string base = old_b ? old_b->name() : old_w->name();
      in[2] = add_initializer(g_, base + "_biasadd", std::move(nb));
    }

    if (!new_z && !has_act) {
      // Only constants folded: the node keeps its op and takes the last node's output.
      if (conv.num_inputs() < 3) conv.inputs().resize(3, nullptr);
      uses_.set_input(&conv, 1, in[1]);
      uses_.set_input(&conv, 2, in[2]);
      ir::Value* old_y = conv.output(0);
      for (size_t i = 1; i < chain.size(); ++i) {
        uses_.forget_node(chain[i]);
        removed_.insert(chain[i]);
        chain[i]->output(0)->set_producer(nullptr, -1);
      }
      old_y->set_producer(nullptr, -1);
      conv.outputs()[0] = y;
      y->set_producer(&conv, 0);
    } else {
      while (!in.empty() && !in.back()) in.pop_back();
      ir::AttributeMap attrs = conv.attrs();
      ir::Node* n = fusion::add_fused_node(g_, uses_, "FusedConv", chain, in, y, removed_);
      n->attrs() = std::move(attrs);
      n->attrs().erase("activation");
      n->attrs().erase("activation_params");
      if (has_act) fusion::set_activation(*n, act);
      if (post_scale != 1.0f) n->attrs()["activation_post_scale"] = ir::Attribute::from_float(post_scale);
      if (post_shift != 0.0f) n->attrs()["activation_post_shift"] = ir::Attribute::from_float(post_shift);
    }
    if (scaled) release(old_w);
    if (!scale.empty()) release(old_b);
    for (ir::Value* c : folded_constants) release(c);
    ctx_.count_fusion(pattern);
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo conv_fusion_pass() {
  PassInfo p;
  p.name = "conv_fusion";
  p.min_level = 2;
  p.description = "Conv [+ bias Add] [+ residual Add] [+ activation] -> kiln FusedConv";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available("FusedConv")) {
      ctx.note("conv_fusion: kiln FusedConv is not registered; nothing fused");
      return ok_status();
    }
    ConvFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
