// attention_fusion: the scaled dot-product attention block exporters write for
// BERT-style models,
//   s = MatMul(Q, Kt) [-> Div(s, c) or Mul(s, c)] [-> Add(s, mask)] -> Softmax(last axis)
//   -> MatMul(probs, V)
// becomes one kiln Attention(Q, K, V, Mask) with scale 1/c or c (docs/fused-ops.md). When
// Kt is a Transpose swapping the last two axes of K that nothing else reads, the Transpose
// is absorbed (k_transposed = 0); otherwise Kt itself is passed with k_transposed = 1.
#include <cmath>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::fusable_intermediate;
using fusion::is_op;
using fusion::known_float_tensor;

class AttentionFuser {
 public:
  AttentionFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    if (!fusion::kiln_op_available("Attention")) return ok_status();
    std::vector<ir::Node*> nodes;  // snapshot: fusing appends nodes
    for (const auto& n : g_.nodes()) nodes.push_back(n.get());
    for (ir::Node* n : nodes)
      if (!removed_.count(n) && is_op(*n, "Softmax") && fuse(*n)) ctx_.count_fusion("Attention");
    return fusion::finish(g_, removed_);
  }

 private:
  // The producer of intermediate `v` when it is an ONNX `op` not yet fused, else null.
  ir::Node* producer(const ir::Value* v, const char* op) const {
    if (!fusable_intermediate(uses_, v)) return nullptr;
    ir::Node* p = v->producer();
    if (!p || removed_.count(p) || !is_op(*p, op) || p->num_outputs() != 1) return nullptr;
    return p;
  }

  // Whether Softmax `sm` normalises over the last axis of its rank-`rank` input.
  static bool softmax_over_last_axis(const ir::Node& sm, int rank) {
    // Before opset 13 the input is coerced to 2-D at `axis` (default 1): the same as a
    // softmax over the last axis only when axis is the last axis.
    int64_t axis = sm.attr_int("axis", sm.opset() < 13 ? 1 : -1);
    if (axis < -rank || axis >= rank) return false;
    if (axis < 0) axis += rank;
    return axis == rank - 1;
  }

  // Whether Transpose `t` swaps the last two axes of its rank-`rank` input.
  static bool swaps_last_two(const ir::Node& t, int rank) {
    if (rank < 2) return false;
    std::vector<int64_t> perm = t.has_attr("perm") ? t.attr_ints("perm") : std::vector<int64_t>{};
    if (!t.has_attr("perm")) {  // default: reversed axes, a swap of the last two only for rank 2
      if (rank != 2) return false;
      return true;
    }
    if (static_cast<int>(perm.size()) != rank) return false;
    for (int i = 0; i < rank - 2; ++i)
      if (perm[static_cast<size_t>(i)] != i) return false;
    return perm[static_cast<size_t>(rank - 2)] == rank - 1 &&
           perm[static_cast<size_t>(rank - 1)] == rank - 2;
  }

  bool fuse(ir::Node& sm) {
    ir::Value* in = sm.input(0);
    ir::Value* probs = sm.output(0);
    if (!in || !probs || sm.num_inputs() != 1 || !known_float_tensor(in)) return false;
    const int rank = in->shape().rank();
    if (rank < 2 || !softmax_over_last_axis(sm, rank)) return false;
    const DataType dtype = in->dtype();

    // Forward: probs -> MatMul(probs, V).
    if (!fusable_intermediate(uses_, probs)) return false;
    ir::Node* pv = uses_.consumers(probs)[0];
    if (!is_op(*pv, "MatMul") || pv->num_inputs() != 2 || pv->input(0) != probs ||
        pv->input(1) == probs)
      return false;
    ir::Value* v = pv->input(1);
    ir::Value* y = pv->output(0);
    if (!known_float_tensor(v) || v->dtype() != dtype || v->shape().rank() < 2 || !y) return false;

    // Backward: [Add(mask)] <- [Div/Mul(c)] <- MatMul(Q, Kt).
    std::vector<ir::Node*> chain;  // in execution order, built back to front
    ir::Value* cur = in;
    ir::Value* mask = nullptr;
    ir::Node* qk = nullptr;
    double scale = 1.0;
    if (ir::Node* add = producer(cur, "Add")) {
      // The scores are the operand produced by the scaling or the first MatMul.
      for (int i = 0; i < 2 && !mask; ++i) {
        ir::Value* s = add->input(static_cast<size_t>(i));
        ir::Value* m = add->input(static_cast<size_t>(1 - i));
        if (!s || !m || s == m || !s->shape().has_rank() || !(s->shape() == in->shape())) continue;
        if (producer(s, "MatMul") || producer(s, "Div") || producer(s, "Mul")) {
          if (!m->type().is_tensor() || m->dtype() != dtype || !m->shape().has_rank() ||
              m->shape().rank() > rank)
            continue;
          mask = m;
          cur = s;
        }
      }
      if (!mask) return false;
      chain.push_back(add);
    }
    ir::Node* sc = producer(cur, "Div");
    if (!sc) sc = producer(cur, "Mul");
    if (sc && sc->num_inputs() == 2) {
      double c = 0;
      const bool div = sc->op_type() == "Div";
      ir::Value* s = nullptr;
      for (int i = 0; i < 2 && !s; ++i) {
        if (div && i == 0) continue;  // Div(s, c) only: c / s is not a scaling
        ir::Value* k = sc->input(static_cast<size_t>(i));
        ir::Value* other = sc->input(static_cast<size_t>(1 - i));
        if (fusion::scalar_constant(g_, k, &c) && k->initializer()->rank() <= rank &&
            std::isfinite(c) && c != 0.0 && producer(other, "MatMul"))
          s = other;
      }
      if (s) {
        scale = div ? 1.0 / c : c;
        chain.push_back(sc);
        cur = s;
      }
    }
    qk = producer(cur, "MatMul");
    if (!qk || qk->num_inputs() != 2 || !(cur->shape() == in->shape()) || cur->dtype() != dtype)
      return false;
    chain.push_back(qk);
    ir::Value* q = qk->input(0);
    ir::Value* kt = qk->input(1);
    if (!known_float_tensor(q) || !known_float_tensor(kt) || q->dtype() != dtype ||
        kt->dtype() != dtype || q->shape().rank() < 2 || kt->shape().rank() < 2)
      return false;
    if (!(y->shape().has_rank()) || y->dtype() != dtype) return false;

    // K: absorb a Transpose swapping the last two axes that only the first MatMul reads.
    ir::Value* k = kt;
    int64_t k_transposed = 1;
    if (ir::Node* t = producer(kt, "Transpose")) {
      ir::Value* kin = t->input(0);
      if (known_float_tensor(kin) && kin->dtype() == dtype &&
          swaps_last_two(*t, kin->shape().rank())) {
        k = kin;
        k_transposed = 0;
        chain.push_back(t);
      }
    }
    std::vector<ir::Node*> ordered(chain.rbegin(), chain.rend());
    ordered.push_back(&sm);
    ordered.push_back(pv);
    std::vector<ir::Value*> inputs = {q, k, v};
    if (mask) inputs.push_back(mask);
    ir::Node* att = fusion::add_fused_node(g_, uses_, "Attention", ordered, inputs, y, removed_);
    att->attrs()["scale"] = ir::Attribute::from_float(static_cast<float>(scale));
    att->attrs()["k_transposed"] = ir::Attribute::from_int(k_transposed);
    return true;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo attention_fusion_pass() {
  PassInfo p;
  p.name = "attention_fusion";
  p.min_level = 2;
  p.description =
      "fuse MatMul, scale (Div/Mul), mask Add, Softmax(last axis), MatMul into kiln Attention";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    AttentionFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
