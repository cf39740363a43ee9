// Algebraic simplification: removes nodes that compute their input unchanged (Identity,
// inference Dropout, no-op Reshape/Transpose/Cast/Pad, x*1, x+0, x-0, x/1, lossless Cast
// round trips) and shortens Transpose and Reshape chains. A value that is a graph output
// (or read by a subgraph) is never replaced, so output names stay stable.
#include <unordered_set>

#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {
namespace {

// Same dtype and the same shape, every dim known: static, or open under the same name (a
// name stands for one extent, so x * 1 over [batch, 768] is x even when batch is open).
bool same_known_type(const ir::Value* a, const ir::Value* b) {
  if (!a->type().is_tensor() || !b->type().is_tensor() || a->dtype() != b->dtype() ||
      a->dtype() == DataType::kUndefined || !a->shape().has_rank() || !(a->shape() == b->shape()))
    return false;
  for (const Dim& d : a->shape().dims())
    if (!d.is_static() && d.symbol.empty()) return false;
  return true;
}

// Whether every element of a constant equals `want` (numeric, non-complex dtypes only).
bool all_equal(const ir::Value* v, double want) {
  if (!v || !v->has_initializer()) return false;
  const Tensor& t = *v->initializer();
  switch (t.dtype()) {
    case DataType::kString: case DataType::kComplex64: case DataType::kComplex128: case DataType::kUndefined:
      return false;
    default: break;
  }
  if (t.num_elements() == 0) return false;
  for (int64_t i = 0; i < t.num_elements(); ++i)
    if (t.element_as_double(i) != want) return false;
  return true;
}

// Whether every value of `from` converts to `to` and back unchanged.
bool lossless_widening(DataType from, DataType to) {
  using D = DataType;
  auto any = [&](std::initializer_list<D> l) { for (D d : l) if (d == to) return true; return false; };
  switch (from) {
    case D::kFloat16: case D::kBFloat16: return any({D::kFloat32, D::kFloat64});
    case D::kFloat32: return to == D::kFloat64;
    case D::kInt8: return any({D::kInt16, D::kInt32, D::kInt64, D::kFloat32, D::kFloat64});
    case D::kUInt8:
      return any({D::kInt16, D::kUInt16, D::kInt32, D::kUInt32, D::kInt64, D::kUInt64, D::kFloat32, D::kFloat64});
    case D::kInt16: return any({D::kInt32, D::kInt64, D::kFloat32, D::kFloat64});
    case D::kUInt16: return any({D::kInt32, D::kUInt32, D::kInt64, D::kUInt64, D::kFloat32, D::kFloat64});
    case D::kInt32: return any({D::kInt64, D::kFloat64});
    case D::kUInt32: return any({D::kInt64, D::kUInt64, D::kFloat64});
    default: return false;
  }
}

// The permutation a Transpose applies (ONNX default: reversed axes); empty if unknown.
std::vector<int64_t> transpose_perm(const ir::Node& n) {
  if (n.has_attr("perm")) return n.attr_ints("perm");
  const ir::Value* x = n.input(0);
  if (!x || !x->shape().has_rank()) return {};
  std::vector<int64_t> p(static_cast<size_t>(x->shape().rank()));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>(p.size() - 1 - i);
  return p;
}

bool is_identity_perm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

bool is_valid_perm(const std::vector<int64_t>& p) {
  std::vector<bool> seen(p.size(), false);
  for (int64_t a : p) {
    if (a < 0 || a >= static_cast<int64_t>(p.size()) || seen[static_cast<size_t>(a)]) return false;
    seen[static_cast<size_t>(a)] = true;
  }
  return true;
}

bool is_default_op(const ir::Node& n, const char* op) { return n.domain().empty() && n.op_type() == op; }

class Simplifier {
 public:
  explicit Simplifier(ir::Graph& g) : g_(g), uses_(g) {}

  // One sweep over the nodes; returns the number of rewrites.
  int sweep() {
    int changed = 0;
    for (const auto& owned : g_.nodes()) {
      ir::Node* n = owned.get();
      if (removed_.count(n)) continue;
      if (try_rewrite(*n)) ++changed;
    }
    g_.remove_nodes_if([&](const ir::Node& n) { return removed_.count(&n) > 0; });
    removed_.clear();
    return changed;
  }

 private:
  // Replaces the single output of `n` by `x` and drops `n`, when that output may go.
  bool forward(ir::Node& n, ir::Value* x) {
    ir::Value* y = n.output(0);
    if (!x || !y || uses_.pinned(y)) return false;
    for (size_t i = 1; i < n.outputs().size(); ++i)
      if (n.output(i) && !uses_.unused(n.output(i))) return false;
    uses_.replace_uses(y, x);
    drop(n);
    return true;
  }

  void drop(ir::Node& n) {
    uses_.forget_node(&n);
    removed_.insert(&n);
  }

  // After rewiring a consumer away from `v`, removes its producer if nothing reads it now.
  void drop_if_unused(ir::Value* v) {
    ir::Node* p = v->producer();
    if (!p || removed_.count(p)) return;
    for (const ir::Value* o : p->outputs())
      if (o && !uses_.unused(o)) return;
    drop(*p);
  }

  bool try_rewrite(ir::Node& n) {
    if (!n.domain().empty() || n.num_outputs() < 1 || !n.output(0) || !n.input(0)) return false;
    const std::string& op = n.op_type();
    ir::Value* x = n.input(0);
    ir::Value* y = n.output(0);
    if (op == "Identity") return forward(n, x);
    if (op == "Dropout") return inference_dropout(n) && forward(n, x);
    if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten") {
      if (same_known_type(x, y)) return forward(n, x);
      if (op == "Reshape") return reshape_chain(n);
      return false;
    }
    if (op == "Transpose") {
      std::vector<int64_t> perm = transpose_perm(n);
      if (!perm.empty() && is_identity_perm(perm) && x->shape().has_rank() &&
          x->shape().rank() == static_cast<int>(perm.size()))
        return forward(n, x);
      return transpose_chain(n, perm);
    }
    if (op == "Cast") {
      if (x->type().is_tensor() && x->dtype() != DataType::kUndefined &&
          n.attr_int("to", -1) == static_cast<int64_t>(x->dtype()))
        return forward(n, x);
      return cast_round_trip(n);
    }
    if (op == "Pad") return noop_pad(n) && same_known_type(x, y) && forward(n, x);
    if (op == "Mul" || op == "Add" || op == "Sub" || op == "Div") return binary_identity(n);
    return false;
  }

  // Dropout computes the identity in inference mode and when its mask output is unused.
  bool inference_dropout(const ir::Node& n) {
    if (n.opset() < 7) return false;  // older Dropout had is_test: leave it alone
    const ir::Value* mode = n.input(2);
    if (!mode) return true;
    return mode->has_initializer() && mode->initializer()->num_elements() == 1 &&
           mode->initializer()->element_as_double(0) == 0.0;
  }

  bool noop_pad(const ir::Node& n) {
    std::vector<int64_t> pads;
    if (n.opset() < 11) {
      pads = n.attr_ints("pads");
    } else {
      const ir::Value* p = n.input(1);
      if (!p || !p->has_initializer()) return false;
      pads = p->initializer()->to_int64_vector();
    }
    for (int64_t v : pads)
      if (v != 0) return false;
    return true;
  }

  // Reshape(Reshape(x, s1), s2) -> Reshape(x, s2): s2 may not copy dims (0) from the
  // intermediate, whose shape differs from x's.
  bool reshape_chain(ir::Node& n) {
    ir::Value* mid = n.input(0);
    ir::Node* first = mid->producer();
    if (!first || removed_.count(first) || !is_default_op(*first, "Reshape") || uses_.num_consumers(mid) != 1 ||
        uses_.pinned(mid) || !first->input(0))
      return false;
    const ir::Value* s2 = n.input(1);
    if (!s2 || !s2->has_initializer()) return false;
    if (n.attr_int("allowzero", 0) == 0)
      for (int64_t d : s2->initializer()->to_int64_vector())
        if (d == 0) return false;
    uses_.set_input(&n, 0, first->input(0));
    drop_if_unused(mid);
    return true;
  }

  // Transpose(Transpose(x, p1), p2) = Transpose(x, p1[p2[i]]); removed when that is the identity.
  bool transpose_chain(ir::Node& n, const std::vector<int64_t>& p2) {
    ir::Value* mid = n.input(0);
    ir::Node* first = mid->producer();
    if (!first || removed_.count(first) || !is_default_op(*first, "Transpose") || uses_.num_consumers(mid) != 1 ||
        uses_.pinned(mid) || !first->input(0))
      return false;
    std::vector<int64_t> p1 = transpose_perm(*first);
    if (p1.empty() || p1.size() != p2.size() || !is_valid_perm(p1) || !is_valid_perm(p2)) return false;
    std::vector<int64_t> composed(p2.size());
    for (size_t i = 0; i < p2.size(); ++i) composed[i] = p1[static_cast<size_t>(p2[i])];
    ir::Value* x = first->input(0);
    if (is_identity_perm(composed) && !uses_.pinned(n.output(0))) {
      forward(n, x);
    } else {
      uses_.set_input(&n, 0, x);
      n.attrs()["perm"] = ir::Attribute::from_ints(composed);
    }
    drop_if_unused(mid);
    return true;
  }

  // Cast(Cast(x, wide), x.dtype) -> Cast(x, x.dtype), a no-op the next sweep removes,
  // when every x value survives the trip through `wide`.
  bool cast_round_trip(ir::Node& n) {
    ir::Value* mid = n.input(0);
    ir::Node* first = mid->producer();
    if (!first || removed_.count(first) || !is_default_op(*first, "Cast") || !first->input(0)) return false;
    ir::Value* x = first->input(0);
    if (!x->type().is_tensor() || n.attr_int("to", -1) != static_cast<int64_t>(x->dtype())) return false;
    if (!mid->type().is_tensor() || !lossless_widening(x->dtype(), mid->dtype())) return false;
    uses_.set_input(&n, 0, x);
    drop_if_unused(mid);
    return true;
  }

  // x*1, 1*x, x+0, 0+x, x-0, x/1: only when the constant's broadcast changes neither the
  // output's shape nor its dtype. Exact for every value except x+0 on x = -0.0 (the
  // reference gives +0.0): equal as numbers, as every graph compiler treats it.
  bool binary_identity(ir::Node& n) {
    const std::string& op = n.op_type();
    ir::Value* a = n.input(0);
    ir::Value* b = n.input(1);
    ir::Value* y = n.output(0);
    if (!a || !b) return false;
    double unit = (op == "Mul" || op == "Div") ? 1.0 : 0.0;
    bool commutative = op == "Mul" || op == "Add";
    if (all_equal(b, unit) && same_known_type(a, y)) return forward(n, a);
    if (commutative && all_equal(a, unit) && same_known_type(b, y)) return forward(n, b);
    return false;
  }

  ir::Graph& g_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo algebraic_simplify_pass() {
  PassInfo p;
  p.name = "algebraic_simplify";
  p.min_level = 1;
  p.description = "remove identities and no-op reshapes/transposes/casts/pads, shorten transpose and reshape chains";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    // Each rewrite removes or shortens something, so this terminates; the bound is a guard.
    for (int round = 0; round < 32; ++round) {
      Simplifier s(g);
      int changed = s.sweep();
      ctx.add_changed(changed);
      if (!changed) break;
    }
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
