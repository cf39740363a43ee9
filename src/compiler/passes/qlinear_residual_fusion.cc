// qlinear_residual_fusion: the residual addition of a quantised network folded into the
// epilogue of the int8 convolution before it (docs/quantization.md, "The residual in the
// epilogue"), after int8_layout, so that the sum is not a pass of its own over memory:
//
//   [Fused]QLinearConv(x, ..., C_scale, C_zero_point[, B])   (no activation)
//     -> C -> kiln FusedQLinearAdd(C, R) [Relu | Clip] -> Y
//   =>  FusedQLinearConv(x, ..., Y_scale, Y_zero_point, B, R, R_scale, R_zero_point,
//                        C_scale, C_zero_point) [Relu | Clip] -> Y
//
// The fused epilogue keeps C's saturation but not its rounding to a multiple of C_scale, so
// Y may differ from the QDQ graph's (and ONNX Runtime's) by one quantisation step: by at most
// one when C_scale < 2 Y_scale, the only case fused (with a margin for float32 rounding). When
// both operands are such convolutions the one with the smaller C_scale / Y_scale takes the
// other's output as R. `kiln compile --disable-pass qlinear_residual_fusion` keeps the exact
// path (a FusedQLinearAdd pass, bit-exact with the QDQ graph up to float32 ties).
//
// Conditions: C read only by the addition, its quantisation that of the addition's operand
// (scale and zero point equal), C, R and Y one shape and layout (no broadcast). Channels-last
// (int8_layout's) is the fast case; plain Y and R cost the kernel two reorders.
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

// C_scale / Y_scale below this keeps |Y - Y_qdq| <= 1 step: the bound is C_scale / (2 Y_scale)
// plus float32 rounding of values up to 255 steps (about 1e-4 step); 1.99 leaves 0.005.
constexpr double kMaxScaleRatio = 1.99;

const Tensor* constant_tensor(const ir::Graph& g, const ir::Value* v) {
  return v && fusion::constant(g, v) ? v->initializer() : nullptr;
}

double scalar(const Tensor* t) { return t->element_as_double(0); }

class ResidualFolder {
 public:
  ResidualFolder(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> adds;
    for (const auto& n : g_.nodes())
      if (is_op(*n, "FusedQLinearAdd", ops::kKilnDomain)) adds.push_back(n.get());
    for (ir::Node* add : adds) try_add(*add);
    KILN_RETURN_IF_ERROR(fusion::finish(g_, removed_));
    for (ir::Node* n : fused_) KILN_RETURN_IF_ERROR(ops::infer_node(*n));
    return ok_status();
  }

 private:
  // Operand `i` (0: A, 1: B) of `add` as the output of a convolution the epilogue can take
  // the sum into, with C_scale / Y_scale in *ratio; else null.
  ir::Node* foldable_conv(const ir::Node& add, int i, double* ratio) {
    const int in = i == 0 ? 0 : 3;
    ir::Value* c = add.input(in);
    ir::Node* conv = c ? c->producer() : nullptr;
    if (!conv || removed_.count(conv) ||
        !(is_op(*conv, "FusedQLinearConv", ops::kKilnDomain) || is_op(*conv, "QLinearConv")))
      return nullptr;
    if (conv->num_inputs() > 9 || conv->output(0) != c || !fusion::fusable_intermediate(uses_, c)) return nullptr;
    if (!conv->attr_string("activation", "").empty()) return nullptr;
    // C's quantisation is the operand's: scale and zero point equal (Q and DQ of one pair).
    const Tensor* cs = constant_tensor(g_, conv->input(6));
    const Tensor* cz = constant_tensor(g_, conv->input(7));
    const Tensor* as = constant_tensor(g_, add.input(in + 1));
    const Tensor* az = constant_tensor(g_, add.input(in + 2));
    const Tensor* ys = constant_tensor(g_, add.input(6));
    if (!cs || !cz || !as || !az || !ys || cs->num_elements() != 1 || cz->num_elements() != 1 ||
        as->num_elements() != 1 || az->num_elements() != 1 || ys->num_elements() != 1)
      return nullptr;
    if (cs->dtype() != DataType::kFloat32 || as->dtype() != DataType::kFloat32 || scalar(cs) != scalar(as) ||
        cz->dtype() != az->dtype() || scalar(cz) != scalar(az))
      return nullptr;
    *ratio = scalar(cs) / scalar(ys);
    return *ratio > 0 && *ratio < kMaxScaleRatio ? conv : nullptr;
  }

  void try_add(ir::Node& add) {
    if (add.num_inputs() != 8 || add.num_outputs() != 1) return;
    for (int i : {0, 3, 7})
      if (!add.input(i)) return;
    ir::Value* y = add.output(0);
    const ir::Value* a = add.input(0);
    const ir::Value* b = add.input(3);
    if (a == b || !a->shape().is_static() || a->shape() != b->shape() || a->shape() != y->shape()) return;
    double ratio[2] = {0, 0};
    ir::Node* convs[2] = {foldable_conv(add, 0, &ratio[0]), foldable_conv(add, 1, &ratio[1])};
    const int pick = !convs[0] ? 1 : !convs[1] ? 0 : ratio[1] < ratio[0] ? 1 : 0;
    ir::Node* conv = convs[pick];
    if (!conv) return;
    const int r_in = pick == 0 ? 3 : 0;  // the other operand
    std::vector<ir::Value*> in(14, nullptr);
    for (int i = 0; i < 9; ++i) in[static_cast<size_t>(i)] = conv->input(static_cast<size_t>(i));
    in[6] = add.input(6);
    in[7] = add.input(7);
    in[9] = add.input(static_cast<size_t>(r_in));
    in[10] = add.input(static_cast<size_t>(r_in + 1));
    in[11] = add.input(static_cast<size_t>(r_in + 2));
    in[12] = conv->input(6);
    in[13] = conv->input(7);
    ir::AttributeMap attrs = conv->attrs();
    for (const char* key : {"activation", "activation_params"}) {
      attrs.erase(key);
      if (add.attrs().count(key)) attrs[key] = add.attrs().at(key);
    }
    const std::string act = add.attr_string("activation", "");
    ir::Node* n = fusion::add_fused_node(g_, uses_, "FusedQLinearConv", {conv, &add}, in, y, removed_);
    n->attrs() = std::move(attrs);
    fused_.push_back(n);
    ctx_.count_fusion("QDQ:Conv+Add" + (act.empty() ? std::string() : "+" + act));
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
  std::vector<ir::Node*> fused_;
};

}  // namespace

PassInfo qlinear_residual_fusion_pass() {
  PassInfo p;
  p.name = "qlinear_residual_fusion";
  p.min_level = 3;
  p.description =
      "int8 residual Add [+ Relu] into the epilogue of the convolution before it (within one step of the QDQ graph)";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    ResidualFolder f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
