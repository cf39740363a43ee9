// dynamic_quant_fusion: ONNX Runtime's dynamic quantisation of a linear layer (quantize_dynamic)
// becomes one kiln FusedDynamicQuantMatMul (docs/quantization.md), pattern
// "FusedDynamicQuantMatMul":
//
//   DynamicQuantizeLinear(x) -> (x_q, x_scale, x_zp)
//   MatMulInteger(x_q, w, x_zp[, w_zp]) -> Cast(to float) -> Mul(., Mul(x_scale, w_scale))
//   [-> Add(., bias)]                      ->  FusedDynamicQuantMatMul(x, w, w_scale[, bias])
//
// when w is a constant int8 [K, N] with zero point 0 (absent, or constant zeros, scalar or per
// column: ORT's default symmetric int8 weights), w_scale a constant float32 scalar or [N], bias
// a constant float32 [N], x a float32 tensor of rank 2 or more, and every intermediate read by
// the chain only. One DynamicQuantizeLinear may feed several chains (ORT quantises a shared
// input once: attention's Q, K and V projections); it goes when all of them are fused, and
// nothing is fused otherwise.
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

struct Chain {
  std::vector<ir::Node*> nodes;  // MatMulInteger, Cast, Mul(scales), Mul, [Add]
  ir::Value* w = nullptr;
  ir::Value* w_scale = nullptr;
  ir::Value* bias = nullptr;
  ir::Value* y = nullptr;
};

class DynamicQuantFuser {
 public:
  DynamicQuantFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());
    for (ir::Node* n : order)
      if (is_op(*n, "DynamicQuantizeLinear")) try_fuse(*n);
    return fusion::finish(g_, removed_);
  }

 private:
  const Tensor* initializer(const ir::Value* v) const {
    return v && fusion::constant(g_, v) && v->has_initializer() ? v->initializer() : nullptr;
  }

  static bool all_zero(const Tensor& t) {
    for (int64_t i = 0; i < t.num_elements(); ++i)
      if (t.data<int8_t>()[i] != 0) return false;
    return true;
  }

  // A float32 constant with one value or n values (rank <= 1).
  const Tensor* per_column_float(const ir::Value* v, int64_t n, bool allow_scalar) const {
    const Tensor* t = initializer(v);
    if (!t || t->dtype() != DataType::kFloat32 || t->rank() > 1) return nullptr;
    if (t->num_elements() == n || (allow_scalar && t->num_elements() == 1)) return t;
    return nullptr;
  }

  ir::Node* sole_consumer(const ir::Value* v) const {
    if (!fusion::fusable_intermediate(uses_, v)) return nullptr;
    return uses_.consumers(v)[0];
  }

  // The chain from MatMulInteger `mi` reading d's outputs, or false.
  bool match_chain(ir::Node& mi, const ir::Node& d, Chain* c) const {
    ir::Value* x_q = d.output(0);
    ir::Value* x_scale = d.output(1);
    ir::Value* x_zp = d.output(2);
    if (!is_op(mi, "MatMulInteger") || mi.num_inputs() < 3 || mi.num_outputs() != 1 || mi.input(0) != x_q ||
        mi.input(1) == x_q || mi.input(2) != x_zp)
      return false;
    const Tensor* w = initializer(mi.input(1));
    if (!w || w->dtype() != DataType::kInt8 || w->rank() != 2) return false;
    const int64_t n = w->dim(1);
    if (mi.num_inputs() > 3 && mi.input(3)) {
      const Tensor* wz = initializer(mi.input(3));
      if (!wz || wz->dtype() != DataType::kInt8 || wz->rank() > 1 ||
          (wz->num_elements() != 1 && wz->num_elements() != n) || !all_zero(*wz))
        return false;
    }
    ir::Node* cast = sole_consumer(mi.output(0));
    if (!cast || !is_op(*cast, "Cast") || cast->num_outputs() != 1 ||
        cast->attr_int("to", 0) != static_cast<int64_t>(DataType::kFloat32))
      return false;
    ir::Node* mul = sole_consumer(cast->output(0));
    if (!mul || !is_op(*mul, "Mul") || mul->num_inputs() != 2 || mul->num_outputs() != 1) return false;
    ir::Value* scales = mul->input(0) == cast->output(0) ? mul->input(1) : mul->input(0);
    if (scales == cast->output(0) || !fusion::fusable_intermediate(uses_, scales)) return false;
    ir::Node* smul = scales->producer();
    if (!smul || !is_op(*smul, "Mul") || smul->num_inputs() != 2 || smul->num_outputs() != 1) return false;
    ir::Value* ws = smul->input(0) == x_scale ? smul->input(1) : (smul->input(1) == x_scale ? smul->input(0) : nullptr);
    if (!ws || !per_column_float(ws, n, true)) return false;
    c->nodes = {&mi, cast, smul, mul};
    c->w = mi.input(1);
    c->w_scale = ws;
    c->y = mul->output(0);
    if (ir::Node* add = sole_consumer(c->y); add && is_op(*add, "Add") && add->num_inputs() == 2 &&
                                             add->num_outputs() == 1) {
      ir::Value* b = add->input(0) == c->y ? add->input(1) : add->input(0);
      if (b != c->y && per_column_float(b, n, false)) {
        c->nodes.push_back(add);
        c->bias = b;
        c->y = add->output(0);
      }
    }
    // The result must have x's dims with N last: no broadcast grew it.
    const ir::Value* x = d.input(0);
    if (!fusion::known_float_tensor(c->y) || c->y->dtype() != DataType::kFloat32 || !x->shape().has_rank() ||
        !c->y->shape().has_rank() || x->shape().rank() < 2 || c->y->shape().rank() != x->shape().rank())
      return false;
    for (size_t i = 0; i + 1 < x->shape().rank(); ++i)
      if (!(x->shape()[i] == c->y->shape()[i])) return false;
    return c->y->shape()[x->shape().rank() - 1] == Dim(n);
  }

  void try_fuse(ir::Node& d) {
    if (d.num_inputs() != 1 || d.num_outputs() != 3 || !d.input(0) || d.input(0)->dtype() != DataType::kFloat32)
      return;
    for (int i = 0; i < 3; ++i)
      if (!d.output(i) || uses_.pinned(d.output(i))) return;
    // Every reader of x_q must start a chain; x_scale and x_zp are read by those chains only.
    std::vector<Chain> chains;
    std::unordered_set<const ir::Node*> mis, smuls;
    for (ir::Node* mi : uses_.consumers(d.output(0))) {
      Chain c;
      if (mis.count(mi) || !match_chain(*mi, d, &c)) return;
      mis.insert(mi);
      smuls.insert(c.nodes[2]);
      chains.push_back(std::move(c));
    }
    if (chains.empty()) return;
    for (const ir::Node* r : uses_.consumers(d.output(1)))
      if (!smuls.count(r)) return;
    for (const ir::Node* r : uses_.consumers(d.output(2)))
      if (!mis.count(r)) return;
    for (const Chain& c : chains) {
      std::vector<ir::Value*> inputs = {d.input(0), c.w, c.w_scale};
      if (c.bias) inputs.push_back(c.bias);
      fusion::add_fused_node(g_, uses_, "FusedDynamicQuantMatMul", c.nodes, inputs, c.y, removed_);
      ctx_.count_fusion("FusedDynamicQuantMatMul");
    }
    removed_.insert(&d);
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo dynamic_quant_fusion_pass() {
  PassInfo p;
  p.name = "dynamic_quant_fusion";
  p.min_level = 2;
  p.description =
      "DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale * w_scale) [-> Add(bias)] -> kiln "
      "FusedDynamicQuantMatMul";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available("FusedDynamicQuantMatMul")) {
      ctx.note("dynamic_quant_fusion: kiln FusedDynamicQuantMatMul is not registered; nothing fused");
      return ok_status();
    }
    DynamicQuantFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
