// int8_layout: channels-last int8 activations between the int8 operators that qdq_folding
// made (docs/quantization.md). oneDNN's int8 convolutions compute in NHWC; a plain N C H W
// tensor costs a reorder into NHWC before every convolution and one back after it (measured on
// an int8 ResNet-50 at one thread: 7.5 ms of reorders against 11.9 ms of convolutions). So a
// uint8 / int8 value [N, C, H, W] that a 2-D QLinearConv / FusedQLinearConv writes and only
// such convolutions (as X) and kiln FusedQLinearAdd nodes read is stored channels-last: its
// shape becomes [N, 1, H, W, C] (NC1HWC0 with one block of all C channels: NHWC's bytes), and
// the convolutions say so in x_format / y_format (a QLinearConv becomes a FusedQLinearConv
// without activation), and an int8 MaxPool between such values becomes kiln Pooling with
// c0 = C, and a kiln QLinearGlobalAveragePool reading one takes it as it is (x_format; its
// [N, C, 1, 1] output has NHWC's bytes already). FusedQLinearAdd is elementwise: it runs on any layout as long as its
// two operands and its sum share it, so an addition's three values change together or not at
// all. Graph inputs and outputs keep their layout.
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

bool is_qconv(const ir::Node& n) {
  return is_op(n, "QLinearConv") || is_op(n, "FusedQLinearConv", ops::kKilnDomain);
}
bool is_qadd(const ir::Node& n) { return is_op(n, "FusedQLinearAdd", ops::kKilnDomain); }

// A 2-D MaxPool of int8 values (what qdq_folding makes of DQ -> MaxPool -> Q): it runs
// channels-last as kiln Pooling with one block of all channels.
bool is_qpool(const ir::Node& n) {
  if (!is_op(n, "MaxPool") || n.num_outputs() != 1 || n.attr_int("storage_order", 0) != 0) return false;
  const ir::Value* x = n.input(0);
  return x && (x->dtype() == DataType::kUInt8 || x->dtype() == DataType::kInt8) && x->shape().has_rank() &&
         x->shape().rank() == 4;
}

// A kiln QLinearGlobalAveragePool of a plain 2-D image: it reads channels-last as it is.
bool is_qgap(const ir::Node& n) {
  if (!is_op(n, "QLinearGlobalAveragePool", ops::kKilnDomain)) return false;
  const ir::Value* x = n.input(0);
  return x && x->shape().has_rank() && x->shape().rank() == 4 &&
         n.attr_string("x_format", ops::kFormatPlain) == ops::kFormatPlain;
}

// A 2-D int8 convolution whose formats this pass may set: plain so far, W [M, C/g, kh, kw].
bool layout_capable_conv(const ir::Node& n) {
  if (!is_qconv(n)) return false;
  const ir::Value* w = n.input(3);
  if (!w || !w->shape().has_rank() || w->shape().rank() != 4) return false;
  return n.attr_string("x_format", ops::kFormatPlain) == ops::kFormatPlain &&
         n.attr_string("y_format", ops::kFormatPlain) == ops::kFormatPlain;
}

class Int8Layout {
 public:
  Int8Layout(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::unordered_set<ir::Value*> chosen;
    for (const auto& n : g_.nodes())
      if ((layout_capable_conv(*n) || is_qadd(*n) || is_qpool(*n)) && candidate(n->output(0)))
        chosen.insert(n->output(0));
    // An addition's operands and sum change together, and a pool's input and output.
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& n : g_.nodes()) {
        std::vector<ir::Value*> vs;
        if (is_qadd(*n)) vs = {n->input(0), n->input(3), n->output(0)};
        if (is_qpool(*n)) vs = {n->input(0), n->output(0)};
        bool all = true;
        for (ir::Value* v : vs) all = all && chosen.count(v);
        if (all) continue;
        for (ir::Value* v : vs) changed = chosen.erase(v) > 0 || changed;
      }
    }
    if (chosen.empty()) return ok_status();
    // Formats on the convolutions (a QLinearConv becomes a FusedQLinearConv), then shapes.
    std::vector<ir::Node*> convs;
    for (const auto& n : g_.nodes())
      if (layout_capable_conv(*n) && (chosen.count(n->input(0)) || chosen.count(n->output(0)))) convs.push_back(n.get());
    std::unordered_set<const ir::Node*> removed;
    for (ir::Node* conv : convs) {
      ir::Node* n = conv;
      if (is_op(*conv, "QLinearConv")) {
        ir::AttributeMap attrs = conv->attrs();
        n = fusion::add_fused_node(g_, uses_, "FusedQLinearConv", {conv}, conv->inputs(), conv->output(0), removed);
        n->set_name(conv->name());
        n->attrs() = std::move(attrs);
      }
      if (chosen.count(n->input(0))) n->attrs()["x_format"] = ir::Attribute::from_string(ops::kFormatBlocked);
      if (chosen.count(n->output(0))) n->attrs()["y_format"] = ir::Attribute::from_string(ops::kFormatBlocked);
    }
    for (const auto& n : g_.nodes())
      if (is_qgap(*n) && chosen.count(n->input(0))) n->attrs()["x_format"] = ir::Attribute::from_string(ops::kFormatBlocked);
    // The pools between channels-last values become kiln Pooling (NC1HWC0 with C0 = C).
    std::vector<ir::Node*> pools;
    for (const auto& n : g_.nodes())
      if (is_qpool(*n) && chosen.count(n->input(0))) pools.push_back(n.get());
    for (ir::Node* pool : pools) {
      ir::AttributeMap attrs = pool->attrs();
      const int64_t c = pool->input(0)->shape()[1].value;
      ir::Node* n = fusion::add_fused_node(g_, uses_, "Pooling", {pool}, pool->inputs(), pool->output(0), removed);
      n->set_name(pool->name());
      n->attrs() = std::move(attrs);
      n->attrs()["mode"] = ir::Attribute::from_string("MaxPool");
      n->attrs()["format"] = ir::Attribute::from_string(ops::kFormatBlocked);
      n->attrs()["c0"] = ir::Attribute::from_int(c);
    }
    for (ir::Value* v : chosen) {
      KILN_ASSIGN_OR_RETURN(Shape s, ops::blocked_shape(v->shape(), v->shape()[1].value));
      v->type().shape = std::move(s);
    }
    KILN_RETURN_IF_ERROR(fusion::finish(g_, removed));
    // The changed nodes agree with their new shapes.
    for (const auto& n : g_.nodes())
      if (is_qconv(*n) || is_qadd(*n) || is_op(*n, "Pooling", ops::kKilnDomain) ||
          is_op(*n, "QLinearGlobalAveragePool", ops::kKilnDomain))
        KILN_RETURN_IF_ERROR(ops::infer_node(*n));
    ctx_.count_fusion("int8 NHWC values", static_cast<int>(chosen.size()));
    return ok_status();
  }

 private:
  // An int8 [N, C, H, W] value only channels-last-capable int8 operators read.
  bool candidate(ir::Value* v) const {
    if (!v || (v->dtype() != DataType::kUInt8 && v->dtype() != DataType::kInt8) || uses_.pinned(v)) return false;
    const Shape& s = v->shape();
    if (!s.has_rank() || s.rank() != 4 || !s.is_static()) return false;
    const auto& readers = uses_.consumers(v);
    if (readers.empty()) return false;
    for (const ir::Node* r : readers) {
      const bool as_x = layout_capable_conv(*r) && r->input(0) == v && r->input(3) != v;
      const bool as_operand = is_qadd(*r) && (r->input(0) == v || r->input(3) == v) && r->input(0) != r->input(3);
      const bool pooled = (is_qpool(*r) || is_qgap(*r)) && r->input(0) == v;
      if (!as_x && !as_operand && !pooled) return false;
    }
    return true;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
};

}  // namespace

PassInfo int8_layout_pass() {
  PassInfo p;
  p.name = "int8_layout";
  p.min_level = 3;
  p.description = "channels-last (NHWC) int8 values between int8 convolutions and additions";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    Int8Layout l(g, ctx);
    return l.run();
  };
  return p;
}

}  // namespace kiln::compiler
