// matmul_fusion: MatMul [+ Add(Bias)] [+ Add(Z)] [+ activation] -> kiln FusedMatMul and
// Gemm + activation -> kiln FusedGemm (docs/fused-ops.md). An Add operand (constant or not,
// either operand order) is taken when it broadcasts to the MatMul's output shape without
// growing it; activations are those of the table in docs/fused-ops.md. Every intermediate
// must have one consumer and not be pinned; shapes and float dtypes must be known.
// Pattern names list the absorbed ops: "MatMul+Add", "MatMul+Add+Add", "MatMul+Add+Gelu",
// "MatMul+Relu", "Gemm+Relu". A MatMul or Gemm with nothing to absorb is left alone.
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/custom_expr.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

// Whether `t` broadcasts to shape `y` (numpy rules) without changing it.
bool broadcasts_to(const Shape& t, const Shape& y) {
  if (!t.has_rank() || !y.has_rank() || t.rank() > y.rank()) return false;
  for (int i = 0; i < t.rank(); ++i) {
    const Dim& d = t[i];
    const Dim& e = y[y.rank() - t.rank() + i];
    if (d.is_static() && d.value == 1) continue;
    if (!(d == e)) return false;
  }
  return true;
}

class MatMulFuser {
 public:
  MatMulFuser(ir::Graph& g, PassContext& ctx, bool matmul, bool gemm)
      : g_(g), ctx_(ctx), uses_(g), matmul_(matmul), gemm_(gemm) {}

  Status run() {
    std::vector<ir::Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());
    for (ir::Node* n : order) {
      if (removed_.count(n)) continue;
      if (matmul_ && is_op(*n, "MatMul"))
        try_matmul(*n);
      else if (gemm_ && is_op(*n, "Gemm"))
        try_gemm(*n);
    }
    return fusion::finish(g_, removed_);
  }

 private:
  void try_matmul(ir::Node& mm) {
    if (mm.num_inputs() != 2 || mm.num_outputs() != 1) return;
    ir::Value* y = mm.output(0);
    if (!fusion::known_float_tensor(y) || !mm.input(0) || mm.input(0)->dtype() != y->dtype())
      return;
    const Shape out_shape = y->shape();
    std::vector<ir::Value*> in = {mm.input(0), mm.input(1)};
    std::vector<ir::Node*> chain = {&mm};
    std::string pattern = "MatMul";
    while (in.size() < 4 && fusion::fusable_intermediate(uses_, y)) {
      ir::Node* add = uses_.consumers(y)[0];
      if (!is_op(*add, "Add") || add->num_inputs() != 2 || add->num_outputs() != 1) break;
      ir::Value* other = add->input(0) == y ? add->input(1) : add->input(0);
      if (!other || other == y) break;
      if (!fusion::known_float_tensor(other) || other->dtype() != y->dtype() ||
          !broadcasts_to(other->shape(), out_shape))
        break;
      ir::Value* out = add->output(0);
      if (!fusion::known_float_tensor(out) || !(out->shape() == out_shape)) break;
      in.push_back(other);
      chain.push_back(add);
      pattern += "+Add";
      y = out;
    }
    fusion::Activation act;
    bool has_act = fusion::match_activation(g_, uses_, y, &act);
    if (has_act) {
      chain.insert(chain.end(), act.nodes.begin(), act.nodes.end());
      y = act.output;
      pattern += "+" + act.name + ops::custom_op_pattern_note(act.nodes);
    }
    if (chain.size() == 1) return;
    ir::Node* n = fusion::add_fused_node(g_, uses_, "FusedMatMul", chain, in, y, removed_);
    if (has_act) fusion::set_activation(*n, act);
    ctx_.count_fusion(pattern);
  }

  void try_gemm(ir::Node& gemm) {
    // Gemm-6 and older had a `broadcast` attribute FusedGemm does not take.
    if (gemm.opset() < 7 || gemm.num_outputs() != 1 || gemm.num_inputs() < 2) return;
    ir::Value* y = gemm.output(0);
    if (!fusion::known_float_tensor(y)) return;
    fusion::Activation act;
    if (!fusion::match_activation(g_, uses_, y, &act)) return;
    std::vector<ir::Node*> chain = {&gemm};
    chain.insert(chain.end(), act.nodes.begin(), act.nodes.end());
    ir::AttributeMap attrs = gemm.attrs();
    ir::Node* n =
        fusion::add_fused_node(g_, uses_, "FusedGemm", chain, gemm.inputs(), act.output, removed_);
    n->attrs() = std::move(attrs);
    fusion::set_activation(*n, act);
    ctx_.count_fusion("Gemm+" + act.name + ops::custom_op_pattern_note(act.nodes));
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  bool matmul_, gemm_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo matmul_fusion_pass() {
  PassInfo p;
  p.name = "matmul_fusion";
  p.min_level = 2;
  p.description =
      "MatMul [+ Add] [+ Add] [+ activation] -> kiln FusedMatMul; Gemm + activation -> kiln "
      "FusedGemm";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    bool matmul = fusion::kiln_op_available("FusedMatMul");
    bool gemm = fusion::kiln_op_available("FusedGemm");
    if (!matmul) ctx.note("matmul_fusion: kiln FusedMatMul is not registered; MatMul not fused");
    if (!gemm) ctx.note("matmul_fusion: kiln FusedGemm is not registered; Gemm not fused");
    if (!matmul && !gemm) return ok_status();
    MatMulFuser f(g, ctx, matmul, gemm);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
