// hardswish_fusion: the two ways exporters write hard-swish become one kiln HardSwish
// (docs/fused-ops.md), pattern "HardSwish":
//   Mul(x, HardSigmoid(x; alpha, beta)), either operand order -> HardSwish(x; alpha, beta);
//   x * Clip(x + k, 0, h) / h (the division also written Mul(., 1/h), before or after the
//   multiplication by x; Relu6 is exported as Clip(0, 6)) -> HardSwish(x; 1/h, k/h).
#include <cmath>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

class HardSwishFuser {
 public:
  HardSwishFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());
    for (ir::Node* n : order) {
      if (removed_.count(n)) continue;
      if (is_op(*n, "HardSigmoid"))
        try_hard_sigmoid(*n);
      else if (is_op(*n, "Clip"))
        try_clip(*n);
    }
    return fusion::finish(g_, removed_);
  }

 private:
  // The other operand of binary `n` when one is `v`; null otherwise.
  static ir::Value* other_operand(const ir::Node& n, const ir::Value* v) {
    if (n.num_inputs() != 2) return nullptr;
    if (n.input(0) == v) return n.input(1);
    if (n.input(1) == v) return n.input(0);
    return nullptr;
  }

  // The single node reading fusable intermediate `v`, or null.
  ir::Node* sole_consumer(const ir::Value* v) const {
    if (!fusion::fusable_intermediate(uses_, v)) return nullptr;
    return uses_.consumers(v)[0];
  }

  // A scaling of `v` by a scalar constant: Div(v, s) -> 1/s, Mul(v, t) or Mul(t, v) -> t.
  bool scale_of(const ir::Node& n, const ir::Value* v, double* scale) const {
    if (n.num_inputs() != 2 || n.num_outputs() != 1) return false;
    double c = 0;
    if (is_op(n, "Div")) {
      if (n.input(0) != v || !fusion::scalar_constant(g_, n.input(1), &c) || c == 0) return false;
      *scale = 1.0 / c;
      return true;
    }
    if (is_op(n, "Mul")) {
      ir::Value* o = other_operand(n, v);
      if (!o || o == v || !fusion::scalar_constant(g_, o, &c)) return false;
      *scale = c;
      return true;
    }
    return false;
  }

  void try_hard_sigmoid(ir::Node& h) {
    ir::Value* x = h.input(0);
    ir::Value* s = h.output(0);
    if (h.num_inputs() != 1 || h.num_outputs() != 1 || !fusion::known_float_tensor(x)) return;
    ir::Node* m = sole_consumer(s);
    if (!m || !is_op(*m, "Mul") || m->num_outputs() != 1 || other_operand(*m, s) != x) return;
    fuse({&h, m}, x, h.attr_float("alpha", 0.2f), h.attr_float("beta", 0.5f));
  }

  void try_clip(ir::Node& c) {
    float lo = 0, hi = 0;
    if (c.num_outputs() != 1 || !fusion::clip_bounds(g_, c, &lo, &hi)) return;
    if (lo != 0.0f || !(hi > 0.0f) || std::isinf(hi)) return;
    ir::Value* a = c.input(0);
    if (!fusion::fusable_intermediate(uses_, a)) return;
    ir::Node* add = a->producer();
    if (!is_op(*add, "Add") || add->num_inputs() != 2 || add->num_outputs() != 1) return;
    double k = 0;
    ir::Value* x = nullptr;
    if (fusion::scalar_constant(g_, add->input(1), &k))
      x = add->input(0);
    else if (fusion::scalar_constant(g_, add->input(0), &k))
      x = add->input(1);
    if (!fusion::known_float_tensor(x) || fusion::constant(g_, x)) return;

    ir::Value* clipped = c.output(0);
    ir::Node* n1 = sole_consumer(clipped);
    if (!n1) return;
    double scale = 0;
    ir::Node* n2 = nullptr;
    if (is_op(*n1, "Mul") && n1->num_outputs() == 1 && other_operand(*n1, clipped) == x) {
      // (x * clip) / h
      n2 = sole_consumer(n1->output(0));
      if (!n2 || !scale_of(*n2, n1->output(0), &scale)) return;
    } else if (scale_of(*n1, clipped, &scale)) {
      // x * (clip / h)
      n2 = sole_consumer(n1->output(0));
      if (!n2 || !is_op(*n2, "Mul") || n2->num_outputs() != 1 ||
          other_operand(*n2, n1->output(0)) != x)
        return;
    } else {
      return;
    }
    // clip(x + k, 0, h) * scale = clip(scale x + scale k, 0, 1) only when h * scale = 1.
    if (std::fabs(static_cast<double>(hi) * scale - 1.0) > 1e-6) return;
    fuse({add, &c, n1, n2}, x, static_cast<float>(scale), static_cast<float>(k * scale));
  }

  void fuse(const std::vector<ir::Node*>& nodes, ir::Value* x, float alpha, float beta) {
    ir::Value* y = nodes.back()->output(0);
    // A scalar constant of higher rank than x would have grown the result.
    if (!fusion::known_float_tensor(y) || y->dtype() != x->dtype() || !(y->shape() == x->shape()))
      return;
    ir::Node* n = fusion::add_fused_node(g_, uses_, "HardSwish", nodes, {x}, y, removed_);
    n->attrs()["alpha"] = ir::Attribute::from_float(alpha);
    n->attrs()["beta"] = ir::Attribute::from_float(beta);
    ctx_.count_fusion("HardSwish");
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo hardswish_fusion_pass() {
  PassInfo p;
  p.name = "hardswish_fusion";
  p.min_level = 2;
  p.description = "Mul(x, HardSigmoid(x)) and x * Clip(x + 3, 0, 6) / 6 -> kiln HardSwish";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available("HardSwish")) {
      ctx.note("hardswish_fusion: kiln HardSwish is not registered; nothing fused");
      return ok_status();
    }
    HardSwishFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
