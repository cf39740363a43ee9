// gelu_fusion: the two GELU decompositions exporters write become one kiln Gelu
// (docs/fused-ops.md):
//   erf form   0.5 x (1 + erf(x / sqrt 2))              (Div(x, sqrt 2) or Mul(x, 1/sqrt 2))
//   tanh form  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (Pow(x, 3) or Mul(x, Mul(x, x)))
// with the 0.5 applied to x, to (1 + f) or to the product, as Mul(0.5) or Div(2), operands in
// either order. ONNX Gelu (opset 20) becomes kiln Gelu too. Constants must match their true
// values within 1e-4 relative.
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

using fusion::constant;
using fusion::fusable_intermediate;
using fusion::is_op;

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kKappa = 0.044715;

// The other input of a binary node reading `v` (null when `v` is not an input).
ir::Value* other_input(const ir::Node& n, const ir::Value* v) {
  if (n.num_inputs() != 2) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

class GeluFuser {
 public:
  GeluFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    if (!fusion::kiln_op_available("Gelu")) return ok_status();
    std::vector<ir::Node*> nodes;  // snapshot: fusing appends nodes
    for (const auto& n : g_.nodes()) nodes.push_back(n.get());
    for (ir::Node* n : nodes) {
      if (removed_.count(n)) continue;
      if (is_op(*n, "Erf")) {
        if (fuse_erf(*n)) ctx_.count_fusion("Gelu");
      } else if (is_op(*n, "Tanh")) {
        if (fuse_tanh(*n)) ctx_.count_fusion("GeluTanh");
      } else if (is_op(*n, "Gelu")) {
        if (convert_onnx_gelu(*n)) ctx_.count_fusion("onnx:Gelu");
      }
    }
    return fusion::finish(g_, removed_);
  }

 private:
  // A one-element float constant equal to `want` within 1e-4 relative, of rank at most
  // rank_, so that broadcasting it keeps x's shape. A float16/bfloat16 constant may also
  // be `want` rounded to its type (sqrt 2 is 1.4140625 in float16, 1.1e-4 away).
  bool is_const(const ir::Value* v, double want) const {
    double c;
    if (!v || !fusion::scalar_constant(g_, v, &c) || v->initializer()->rank() > rank_) return false;
    double rel = 1e-4;
    if (v->initializer()->dtype() == DataType::kFloat16) rel = std::ldexp(1.0, -11);  // half an ulp
    if (v->initializer()->dtype() == DataType::kBFloat16) rel = std::ldexp(1.0, -8);
    return std::fabs(c - want) <= rel * std::fabs(want);
  }

  // Pow's exponent 3: a one-element constant of any numeric type.
  bool exponent_three(const ir::Value* v) const {
    if (!constant(g_, v)) return false;
    const Tensor& t = *v->initializer();
    if (t.num_elements() != 1 || t.rank() > rank_) return false;
    if (!fusion::fusable_dtype(t.dtype()) && !dtype_is_integer(t.dtype())) return false;
    return t.element_as_double(0) == 3.0;
  }

  // The non-constant operand of Mul(v, c) / Mul(c, v) with c = want; else null.
  ir::Value* mul_by(const ir::Node* n, double want) const {
    if (!n || !is_op(*n, "Mul") || n->num_inputs() != 2) return nullptr;
    if (is_const(n->input(1), want)) return n->input(0);
    if (is_const(n->input(0), want)) return n->input(1);
    return nullptr;
  }

  // The dividend of Div(v, c) with c = want; else null.
  ir::Value* div_by(const ir::Node* n, double want) const {
    if (!n || !is_op(*n, "Div") || n->num_inputs() != 2) return nullptr;
    return is_const(n->input(1), want) ? n->input(0) : nullptr;
  }

  // Halving: Mul(v, 0.5) or Div(v, 2) -> v.
  ir::Value* halved(const ir::Node* n) const {
    ir::Value* v = mul_by(n, 0.5);
    return v ? v : div_by(n, 2.0);
  }

  // The single consumer of intermediate `v`, or null.
  ir::Node* next(const ir::Value* v) const {
    if (!fusable_intermediate(uses_, v)) return nullptr;
    return uses_.consumers(v)[0];
  }

  // The producer of intermediate `v`, or null.
  ir::Node* producer(const ir::Value* v) const {
    if (!fusable_intermediate(uses_, v)) return nullptr;
    ir::Node* p = v->producer();
    return p && !removed_.count(p) ? p : nullptr;
  }

  bool set_x(ir::Value* x) {
    if (!fusion::known_float_tensor(x)) return false;
    rank_ = x->shape().rank();
    return true;
  }

  // Erf(x / sqrt 2), then the common tail.
  bool fuse_erf(ir::Node& erf) {
    ir::Node* scale = producer(erf.input(0));
    if (!scale) return false;
    // The constant's rank is checked once x (and its rank) is known.
    ir::Value* x = nullptr;
    for (ir::Value* cand : scale->inputs()) {
      if (!cand || !set_x(cand)) continue;
      if (div_by(scale, kSqrt2) == cand || mul_by(scale, kInvSqrt2) == cand) x = cand;
      if (x) break;
    }
    if (!x) return false;
    std::vector<ir::Node*> chain = {scale, &erf};
    return fuse_tail(x, erf.output(0), chain, "none");
  }

  // Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), then the common tail.
  bool fuse_tanh(ir::Node& tanh) {
    ir::Node* outer = producer(tanh.input(0));
    if (!outer || !is_op(*outer, "Mul")) return false;
    for (int side = 0; side < 2; ++side) {
      // outer = Mul(sum, sqrt(2/pi)); sum = Add(x, Mul(cube, kappa)).
      ir::Value* sum_v = outer->input(static_cast<size_t>(side));
      ir::Node* sum = producer(sum_v);
      if (!sum || !is_op(*sum, "Add") || sum->num_inputs() != 2) continue;
      for (int xs = 0; xs < 2; ++xs) {
        ir::Value* x = sum->input(static_cast<size_t>(xs));
        ir::Value* m = sum->input(static_cast<size_t>(1 - xs));
        if (x == m || !set_x(x)) continue;
        if (mul_by(outer, kSqrt2OverPi) != sum_v) continue;
        ir::Node* kappa_mul = producer(m);
        ir::Value* cube_v = mul_by(kappa_mul, kKappa);
        ir::Node* cube = cube_v ? producer(cube_v) : nullptr;
        if (!cube) continue;
        std::vector<ir::Node*> chain;
        if (is_op(*cube, "Pow") && cube->input(0) == x && exponent_three(cube->input(1))) {
          chain = {cube};
        } else if (is_op(*cube, "Mul")) {
          ir::Value* sq_v = other_input(*cube, x);
          ir::Node* sq = sq_v && sq_v != x ? producer(sq_v) : nullptr;
          if (!sq || !is_op(*sq, "Mul") || sq->input(0) != x || sq->input(1) != x) continue;
          chain = {sq, cube};
        } else {
          continue;
        }
        chain.insert(chain.end(), {kappa_mul, sum, outer, &tanh});
        return fuse_tail(x, tanh.output(0), chain, "tanh");
      }
    }
    return false;
  }

  // f -> Add(f, 1) = a -> one of x*a*0.5 (Mul(Mul(x, a), 0.5)), x*(a*0.5), (x*0.5)*a, with
  // Div(2) for Mul(0.5) and operands in any order.
  bool fuse_tail(ir::Value* x, ir::Value* f, std::vector<ir::Node*> chain,
                 const char* approximate) {
    ir::Node* add = next(f);
    if (!add || !is_op(*add, "Add")) return false;
    ir::Value* one = other_input(*add, f);
    if (!one || one == f || !is_const(one, 1.0)) return false;
    chain.push_back(add);
    ir::Value* a = add->output(0);
    ir::Node* m1 = next(a);
    if (!m1) return false;
    ir::Node* last = nullptr;
    if (is_op(*m1, "Mul") && m1->num_inputs() == 2) {
      ir::Value* o = other_input(*m1, a);
      if (!o || o == a) return false;
      if (o == x) {  // (x * a) * 0.5
        ir::Node* m2 = next(m1->output(0));
        if (!m2 || halved(m2) != m1->output(0)) return false;
        chain.insert(chain.end(), {m1, m2});
        last = m2;
      } else if (is_const(o, 0.5)) {  // x * (a * 0.5)
        ir::Node* m2 = next(m1->output(0));
        if (!m2 || !is_op(*m2, "Mul") || other_input(*m2, m1->output(0)) != x) return false;
        chain.insert(chain.end(), {m1, m2});
        last = m2;
      } else {  // (x * 0.5) * a
        ir::Node* h = producer(o);
        if (!h || halved(h) != x) return false;
        chain.insert(chain.end(), {h, m1});
        last = m1;
      }
    } else if (halved(m1) == a) {  // x * (a / 2)
      ir::Node* m2 = next(m1->output(0));
      if (!m2 || !is_op(*m2, "Mul") || other_input(*m2, m1->output(0)) != x) return false;
      chain.insert(chain.end(), {m1, m2});
      last = m2;
    } else {
      return false;
    }
    ir::Value* y = last->output(0);
    if (!y || y->dtype() != x->dtype() || !(y->shape() == x->shape())) return false;
    ir::Node* gelu = fusion::add_fused_node(g_, uses_, "Gelu", chain, {x}, y, removed_);
    gelu->attrs()["approximate"] = ir::Attribute::from_string(approximate);
    return true;
  }

  bool convert_onnx_gelu(ir::Node& n) {
    ir::Value* x = n.input(0);
    ir::Value* y = n.output(0);
    if (!x || !y || n.num_inputs() != 1 || !fusion::known_float_tensor(x)) return false;
    std::string approximate = n.attr_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh") return false;
    ir::Node* gelu = fusion::add_fused_node(g_, uses_, "Gelu", {&n}, {x}, y, removed_);
    gelu->attrs()["approximate"] = ir::Attribute::from_string(approximate);
    return true;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
  int rank_ = 0;  // rank of the candidate x: constants may not have a larger one
};

}  // namespace

PassInfo gelu_fusion_pass() {
  PassInfo p;
  p.name = "gelu_fusion";
  p.min_level = 2;
  p.description = "fuse GELU in erf form and tanh form, and ONNX Gelu, into kiln Gelu";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    GeluFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
