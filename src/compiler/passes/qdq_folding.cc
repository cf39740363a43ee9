// qdq_folding: the QuantizeLinear / DequantizeLinear pairs of a QDQ model (what `kiln
// quantize`, ONNX Runtime's quantiser and PyTorch's exporter write) folded into integer
// operators, so that values stay int8 between them and the int8 kernels run
// (docs/quantization.md). Rewrites:
//
//   DQ(x) -> Conv(., DQ(w), b) [-> Relu | Clip] -> Q      =>  QLinearConv / kiln FusedQLinearConv
//   DQ(x) -> MaxPool -> Q  (same scale and zero point)    =>  MaxPool on the int8 values
//   DQ(x) -> GlobalAveragePool -> Q                        =>  kiln QLinearGlobalAveragePool
//   DQ(a) + DQ(b) [-> Relu | Clip] -> Q                    =>  kiln FusedQLinearAdd
//   DQ(a) -> MatMul|Gemm(., DQ(w)) [+ bias] [-> Relu | Clip] [-> Q]
//                                                          =>  QLinearMatMul / kiln FusedQLinearMatMul
//
// A MatMul / Gemm without a QuantizeLinear after it gets a float32 output (its consumers are
// float). Gemm: alpha = beta = 1, A not transposed; a transposed B ([N, K], scales per row)
// is stored transposed ([K, N], scales per column); C a float [N] (or DQ of int32) bias.
// MatMul: an Add of a constant [N] after it is the bias.
//
// Conditions, as ONNX Runtime's QDQ selectors: X and Y quantised per tensor (uint8 or int8)
// with constant scales and zero points; W a constant int8 tensor quantised per tensor or per
// output channel with zero points 0; the bias absent, a float constant, or DQ of an int32
// constant; every intermediate value read only by the chain. The bias becomes int32 of scale
// x_scale * w_scale[c]: round(b / (x_scale w_scale[c])), half to even, as the quantisers
// compute it (an int32 bias already at that scale is taken as it is). MaxPool commutes with a
// monotonic quantisation of one scale, so it runs on the int8 values exactly.
//
// The integer operators compute what the QDQ graph means up to rounding: the float graph
// rounds every product, the integer one sums exactly and rounds once when it requantises. The
// pass runs before constant folding, which would otherwise turn DQ(w) into float32 weights.
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

// A constant of the graph (not a feedable input).
const Tensor* constant_tensor(const ir::Graph& g, const ir::Value* v) {
  return fusion::constant(g, v) ? v->initializer() : nullptr;
}

// A DequantizeLinear or QuantizeLinear node's quantisation parameters.
struct QuantParams {
  ir::Node* node = nullptr;
  ir::Value* scale = nullptr;       // float32 constant
  ir::Value* zero_point = nullptr;  // constant, or null (0)
  int64_t axis = 1;
  bool per_tensor() const { return scale->initializer()->num_elements() == 1; }
};

// The parameters of `n` (a DequantizeLinear / QuantizeLinear) when they are constants, float32
// scales, and no block quantisation.
bool quant_params(const ir::Graph& g, ir::Node* n, QuantParams* p) {
  if (n->num_inputs() < 2 || n->num_outputs() != 1) return false;
  const Tensor* s = constant_tensor(g, n->input(1));
  if (!s || s->dtype() != DataType::kFloat32 || s->rank() > 1) return false;
  if (n->input(2) && !constant_tensor(g, n->input(2))) return false;
  if (n->attr_int("block_size", 0) != 0) return false;
  p->node = n;
  p->scale = n->input(1);
  p->zero_point = n->input(2);
  p->axis = n->attr_int("axis", 1);
  return true;
}

// `v` as the output of a DequantizeLinear with constant parameters.
bool dequantized(const ir::Graph& g, ir::Value* v, QuantParams* p) {
  ir::Node* n = v ? v->producer() : nullptr;
  if (!n || !is_op(*n, "DequantizeLinear") || !n->input(0)) return false;
  return quant_params(g, n, p);
}

float scalar_f32(const ir::Value* v) { return v->initializer()->data<float>()[0]; }

int64_t scalar_int(const ir::Value* v) { return v ? static_cast<int64_t>(v->initializer()->element_as_double(0)) : 0; }

bool all_zero(const ir::Value* zp) {
  if (!zp) return true;
  const Tensor& t = *zp->initializer();
  for (int64_t i = 0; i < t.num_elements(); ++i)
    if (t.element_as_double(i) != 0) return false;
  return true;
}

class QdqFolder {
 public:
  QdqFolder(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());
    // Scales and zero points computed from constants (PyTorch writes a bias's zero point as
    // Cast(ConstantOfShape(...))): evaluated now, since this pass runs before constant folding.
    for (ir::Node* n : order)
      if (is_op(*n, "QuantizeLinear") || is_op(*n, "DequantizeLinear"))
        for (size_t i : {size_t{1}, size_t{2}})
          if (ir::Value* v = n->input(i); v && !fusion::constant(g_, v))
            if (ir::Value* c = materialize(v, 0)) uses_.set_input(n, i, c);
    for (ir::Node* n : order) {
      if (removed_.count(n)) continue;
      if (is_op(*n, "Conv")) try_conv(*n);
      else if (is_op(*n, "MaxPool")) try_max_pool(*n);
      else if (is_op(*n, "GlobalAveragePool") && gap_available_) try_global_average_pool(*n);
      else if (is_op(*n, "MatMul") || is_op(*n, "Gemm")) try_matmul(*n);
      else if (is_op(*n, "Add") && add_available_) try_add(*n);
    }
    return fusion::finish(g_, removed_);
  }

 private:
  // `v` as a new constant when a small tree of deterministic nodes computes it from constants
  // (evaluated with the ops' reference kernels), else null.
  ir::Value* materialize(ir::Value* v, int depth) {
    if (fusion::constant(g_, v)) return v;
    ir::Node* p = v->producer();
    if (!p || depth > 4 || p->num_outputs() != 1 || !p->subgraphs().empty() || p->domain() != ops::kOnnxDomain ||
        p->op_type().rfind("Random", 0) == 0)
      return nullptr;
    std::vector<RuntimeValue> values(p->inputs().size());
    std::vector<const RuntimeValue*> inputs(p->inputs().size(), nullptr);
    for (size_t i = 0; i < p->inputs().size(); ++i) {
      if (!p->input(i)) continue;
      ir::Value* c = materialize(p->input(i), depth + 1);
      if (!c || c->initializer()->num_elements() > 4096) return nullptr;  // parameters, not tensors
      values[i] = RuntimeValue(*c->initializer());
      inputs[i] = &values[i];
    }
    auto schema = ops::schema_for(*p);
    if (!schema.ok() || !(*schema)->kernel_fn()) return nullptr;
    std::vector<RuntimeValue> results(1);
    ops::KernelContext kctx(*p, std::move(inputs), &results);
    if (!(*schema)->kernel_fn()(kctx).ok() || !results[0].is_tensor()) return nullptr;
    return add_initializer(g_, v->name() + "_const", results[0].tensor().clone());
  }

  // The QuantizeLinear that alone reads `y`, per tensor, into int8 / uint8.
  bool quantized_by(ir::Value* y, QuantParams* q) {
    if (!fusion::fusable_intermediate(uses_, y)) return false;
    ir::Node* n = uses_.consumers(y)[0];
    if (!is_op(*n, "QuantizeLinear") || n->input(0) != y || !quant_params(g_, n, q) || !q->per_tensor()) return false;
    return is_x8(n->output(0)->dtype());
  }

  // A Relu or a Clip with finite constant bounds that alone reads `y`, or null.
  ir::Node* activation_after(ir::Value* y, std::string* name, std::vector<float>* params) {
    if (!fusion::fusable_intermediate(uses_, y)) return nullptr;
    ir::Node* a = uses_.consumers(y)[0];
    if (a->num_outputs() != 1 || a->input(0) != y) return nullptr;
    float lo = 0, hi = 0;
    if (is_op(*a, "Relu")) {
      *name = "Relu";
      return a;
    }
    if (is_op(*a, "Clip") && fusion::clip_bounds(g_, *a, &lo, &hi) && lo <= hi && std::isfinite(lo) &&
        std::isfinite(hi)) {
      *name = "Clip";
      *params = {lo, hi};
      return a;
    }
    return nullptr;
  }

  // A zero point as an input: the node's, or a new 0 of `dtype` (`shape`: [] or [C]).
  ir::Value* zero_point_or_zeros(ir::Value* zp, DataType dtype, const std::vector<int64_t>& dims,
                                 const std::string& base) {
    if (zp) return zp;
    return add_initializer(g_, base + "_zero_point", Tensor::make(dtype, dims));
  }

  // QLinearConv's int32 B at scale x_scale * w_scale[c]: from a float constant, or DQ of an
  // int32 constant (kept when its scale is that already). Null `b`: no bias.
  bool int32_bias(ir::Value* b, float x_scale, const Tensor& w_scale, int64_t c_out, ir::Value** out,
                  ir::Node** bias_dq) {
    *out = nullptr;
    *bias_dq = nullptr;
    if (!b) return true;
    std::vector<double> real(static_cast<size_t>(c_out));
    std::vector<float> acc_scale(static_cast<size_t>(c_out));
    for (int64_t c = 0; c < c_out; ++c)
      acc_scale[static_cast<size_t>(c)] = x_scale * w_scale.data<float>()[w_scale.num_elements() == 1 ? 0 : c];
    QuantParams dq;
    if (const Tensor* t = constant_tensor(g_, b)) {
      if (t->dtype() != DataType::kFloat32 || t->num_elements() != c_out) return false;
      for (int64_t c = 0; c < c_out; ++c) real[static_cast<size_t>(c)] = t->data<float>()[c];
    } else if (dequantized(g_, b, &dq) && fusion::fusable_intermediate(uses_, b)) {
      const Tensor* q = constant_tensor(g_, dq.node->input(0));
      const Tensor& s = *dq.scale->initializer();
      if (!q || q->dtype() != DataType::kInt32 || q->num_elements() != c_out || !all_zero(dq.zero_point)) return false;
      if (s.num_elements() != 1 && s.num_elements() != c_out) return false;
      bool same_scale = true;
      for (int64_t c = 0; c < c_out; ++c) {
        const float sc = s.data<float>()[s.num_elements() == 1 ? 0 : c];
        same_scale = same_scale && sc == acc_scale[static_cast<size_t>(c)];
        real[static_cast<size_t>(c)] = static_cast<double>(q->data<int32_t>()[c]) * sc;
      }
      *bias_dq = dq.node;
      if (same_scale) {
        *out = dq.node->input(0);
        return true;
      }
    } else {
      return false;
    }
    Tensor t = Tensor::make(DataType::kInt32, {c_out});
    for (int64_t c = 0; c < c_out; ++c) {
      const double s = acc_scale[static_cast<size_t>(c)];
      if (!(s > 0)) return false;
      const double v = std::nearbyint(real[static_cast<size_t>(c)] / s);
      if (!(std::fabs(v) <= 2147483647.0)) return false;  // beyond int32: keep the float graph
      t.data<int32_t>()[c] = static_cast<int32_t>(v);
    }
    *out = add_initializer(g_, b->name() + "_int32", std::move(t));
    return true;
  }

  void try_conv(ir::Node& conv) {
    if (conv.num_inputs() < 2 || conv.num_outputs() != 1) return;
    QuantParams dx, dw, qy;
    if (!dequantized(g_, conv.input(0), &dx) || !dx.per_tensor() || !is_x8(dx.node->input(0)->dtype())) return;
    if (!dequantized(g_, conv.input(1), &dw)) return;
    const Tensor* w = constant_tensor(g_, dw.node->input(0));
    if (!w || w->dtype() != DataType::kInt8 || w->rank() < 3 || !all_zero(dw.zero_point)) return;
    const int64_t c_out = w->dim(0);
    const Tensor& w_scale = *dw.scale->initializer();
    if (!dw.per_tensor() && (w_scale.num_elements() != c_out || (dw.axis != 0 && dw.axis != -w->rank()))) return;
    std::vector<ir::Node*> chain{&conv};
    ir::Value* y = conv.output(0);
    std::string activation;
    std::vector<float> params;
    if (ir::Node* a = activation_after(y, &activation, &params)) {
      chain.push_back(a);
      y = a->output(0);
    }
    if (!quantized_by(y, &qy)) return;
    chain.push_back(qy.node);
    ir::Value* bias = nullptr;
    ir::Node* bias_dq = nullptr;
    if (!int32_bias(conv.input(2), scalar_f32(dx.scale), w_scale, c_out, &bias, &bias_dq)) return;
    if (bias_dq) chain.push_back(bias_dq);
    const std::string base = conv.name().empty() ? conv.output(0)->name() : conv.name();
    ir::Value* xq = dx.node->input(0);
    std::vector<ir::Value*> in{xq,
                               dx.scale,
                               zero_point_or_zeros(dx.zero_point, xq->dtype(), {}, base + "_x"),
                               dw.node->input(0),
                               dw.scale,
                               zero_point_or_zeros(dw.zero_point, DataType::kInt8, w_scale.dims(), base + "_w"),
                               qy.scale,
                               zero_point_or_zeros(qy.zero_point, qy.node->output(0)->dtype(), {}, base + "_y"),
                               bias};
    if (!bias) in.pop_back();
    ir::AttributeMap attrs = conv.attrs();
    ir::Node* n = nullptr;
    if (activation.empty()) {
      // Without an activation the ONNX operator says it all (QLinearConv exists since opset 10,
      // older than QuantizeLinear's 10 too).
      n = fusion::add_replacing_node(g_, uses_, "QLinearConv", ops::kOnnxDomain, conv.opset(), chain, in,
                                     qy.node->output(0), removed_);
    } else {
      n = fusion::add_fused_node(g_, uses_, "FusedQLinearConv", chain, in, qy.node->output(0), removed_);
      attrs["activation"] = ir::Attribute::from_string(activation);
      if (!params.empty()) attrs["activation_params"] = ir::Attribute::from_floats(params);
    }
    n->attrs() = std::move(attrs);
    drop_if_unused(dx.node);
    drop_if_unused(dw.node);
    ctx_.count_fusion("QDQ:Conv" + (activation.empty() ? std::string() : "+" + activation));
  }

  // The int8 weights [K, N] of DQ(w) for a product, with scales per column or per tensor:
  // `transposed` (Gemm's transB) reads w as [N, K] with scales per row and transposes it.
  bool product_weights(const QuantParams& dw, bool transposed, ir::Value** w_out, ir::Value** scale_out) {
    const Tensor* w = constant_tensor(g_, dw.node->input(0));
    if (!w || w->dtype() != DataType::kInt8 || w->rank() != 2 || !all_zero(dw.zero_point)) return false;
    const Tensor& s = *dw.scale->initializer();
    const int64_t out_axis = transposed ? 0 : 1;
    const int64_t n = w->dim(out_axis);
    if (!dw.per_tensor() && (s.num_elements() != n || (dw.axis != out_axis && dw.axis != out_axis - 2))) return false;
    *scale_out = dw.scale;
    if (!transposed) {
      *w_out = dw.node->input(0);
      return true;
    }
    const int64_t k = w->dim(1);
    Tensor t = Tensor::make(DataType::kInt8, {k, n});
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) t.data<int8_t>()[c * n + r] = w->data<int8_t>()[r * k + c];
    *w_out = add_initializer(g_, dw.node->input(0)->name() + "_t", std::move(t));
    return true;
  }

  void try_matmul(ir::Node& mm) {
    const bool gemm = is_op(mm, "Gemm");
    if (mm.num_outputs() != 1 || mm.num_inputs() < 2) return;
    if (gemm && (mm.attr_float("alpha", 1.0f) != 1.0f || mm.attr_float("beta", 1.0f) != 1.0f ||
                 mm.attr_int("transA", 0) != 0))
      return;
    QuantParams da, dw, qy;
    if (!dequantized(g_, mm.input(0), &da) || !da.per_tensor() || !is_x8(da.node->input(0)->dtype())) return;
    if (!dequantized(g_, mm.input(1), &dw)) return;
    ir::Value* w = nullptr;
    ir::Value* w_scale = nullptr;
    if (!product_weights(dw, gemm && mm.attr_int("transB", 0) != 0, &w, &w_scale)) return;
    const int64_t n = w->initializer()->dim(1);
    const ir::Value* a = mm.input(0);
    if (!a->shape().has_rank() || a->shape().rank() < 2 || (gemm && a->shape().rank() != 2)) return;
    std::vector<ir::Node*> chain{&mm};
    ir::Value* y = mm.output(0);
    ir::Value* bias_in = gemm ? mm.input(2) : nullptr;
    if (!gemm && fusion::fusable_intermediate(uses_, y)) {
      // MatMul + Add(constant [N]): the bias.
      ir::Node* add = uses_.consumers(y)[0];
      ir::Value* other = add->num_inputs() == 2 ? (add->input(0) == y ? add->input(1) : add->input(0)) : nullptr;
      const Tensor* c = other ? constant_tensor(g_, other) : nullptr;
      if (is_op(*add, "Add") && c && c->dtype() == DataType::kFloat32 && c->num_elements() == n &&
          c->dim(c->rank() - 1) == n && other != y) {
        bias_in = other;
        chain.push_back(add);
        y = add->output(0);
      }
    }
    std::string activation;
    std::vector<float> params;
    ir::Node* act = activation_after(y, &activation, &params);
    if (act) {
      chain.push_back(act);
      y = act->output(0);
    }
    const bool quantised_y = quantized_by(y, &qy);
    if (quantised_y) chain.push_back(qy.node);
    ir::Value* bias = nullptr;
    ir::Node* bias_dq = nullptr;
    if (!int32_bias(bias_in, scalar_f32(da.scale), *w_scale->initializer(), n, &bias, &bias_dq)) return;
    if (bias_dq) chain.push_back(bias_dq);
    const std::string base = mm.name().empty() ? mm.output(0)->name() : mm.name();
    ir::Value* aq = da.node->input(0);
    std::vector<ir::Value*> in{aq,
                               da.scale,
                               zero_point_or_zeros(da.zero_point, aq->dtype(), {}, base + "_a"),
                               w,
                               w_scale,
                               zero_point_or_zeros(nullptr, DataType::kInt8, w_scale->initializer()->dims(), base + "_b"),
                               quantised_y ? qy.scale : nullptr,
                               quantised_y ? zero_point_or_zeros(qy.zero_point, qy.node->output(0)->dtype(), {},
                                                                 base + "_y")
                                           : nullptr,
                               bias};
    while (!in.back()) in.pop_back();
    ir::Node* node = fusion::add_fused_node(g_, uses_, "FusedQLinearMatMul", chain, in,
                                            quantised_y ? qy.node->output(0) : y, removed_);
    if (!activation.empty()) node->attrs()["activation"] = ir::Attribute::from_string(activation);
    if (!params.empty()) node->attrs()["activation_params"] = ir::Attribute::from_floats(params);
    drop_if_unused(da.node);
    drop_if_unused(dw.node);
    std::string pattern = std::string("QDQ:") + (gemm ? "Gemm" : "MatMul");
    if (bias_in) pattern += "+Bias";
    if (!activation.empty()) pattern += "+" + activation;
    if (!quantised_y) pattern += "+Float";
    ctx_.count_fusion(pattern);
  }

  // The residual additions of quantised networks: both operands and the sum per tensor, one
  // int8 dtype.
  void try_add(ir::Node& add) {
    if (add.num_inputs() != 2 || add.num_outputs() != 1 || add.input(0) == add.input(1)) return;
    QuantParams da, db, qy;
    if (!dequantized(g_, add.input(0), &da) || !dequantized(g_, add.input(1), &db)) return;
    if (!da.per_tensor() || !db.per_tensor()) return;
    ir::Value* aq = da.node->input(0);
    ir::Value* bq = db.node->input(0);
    if (!is_x8(aq->dtype()) || bq->dtype() != aq->dtype()) return;
    std::vector<ir::Node*> chain{&add};
    ir::Value* y = add.output(0);
    std::string activation;
    std::vector<float> params;
    if (ir::Node* a = activation_after(y, &activation, &params)) {
      chain.push_back(a);
      y = a->output(0);
    }
    if (!quantized_by(y, &qy) || qy.node->output(0)->dtype() != aq->dtype()) return;
    chain.push_back(qy.node);
    const std::string base = add.name().empty() ? add.output(0)->name() : add.name();
    std::vector<ir::Value*> in{aq,
                               da.scale,
                               zero_point_or_zeros(da.zero_point, aq->dtype(), {}, base + "_a"),
                               bq,
                               db.scale,
                               zero_point_or_zeros(db.zero_point, bq->dtype(), {}, base + "_b"),
                               qy.scale,
                               zero_point_or_zeros(qy.zero_point, aq->dtype(), {}, base + "_y")};
    ir::Node* n = fusion::add_fused_node(g_, uses_, "FusedQLinearAdd", chain, in, qy.node->output(0), removed_);
    if (!activation.empty()) n->attrs()["activation"] = ir::Attribute::from_string(activation);
    if (!params.empty()) n->attrs()["activation_params"] = ir::Attribute::from_floats(params);
    drop_if_unused(da.node);
    drop_if_unused(db.node);
    ctx_.count_fusion("QDQ:Add" + (activation.empty() ? std::string() : "+" + activation));
  }

  void try_max_pool(ir::Node& pool) {
    if (pool.num_outputs() != 1 || pool.num_inputs() != 1) return;  // Indices: not int8
    QuantParams dx, qy;
    if (!dequantized(g_, pool.input(0), &dx) || !dx.per_tensor()) return;
    ir::Value* xq = dx.node->input(0);
    if (!is_x8(xq->dtype()) || !quantized_by(pool.output(0), &qy)) return;
    if (qy.node->output(0)->dtype() != xq->dtype() || scalar_f32(qy.scale) != scalar_f32(dx.scale) ||
        scalar_int(qy.zero_point) != scalar_int(dx.zero_point))
      return;
    ir::AttributeMap attrs = pool.attrs();
    // MaxPool takes int8 / uint8 since opset 12; a QDQ model (QuantizeLinear: opset 10) may be
    // older, and the attributes did not change since 11 (12 added only the types).
    if (pool.opset() < 11) return;
    ir::Node* n = fusion::add_replacing_node(g_, uses_, "MaxPool", ops::kOnnxDomain, std::max<int64_t>(12, pool.opset()),
                                             {&pool, qy.node}, {xq}, qy.node->output(0), removed_);
    n->attrs() = std::move(attrs);
    drop_if_unused(dx.node);
    ctx_.count_fusion("QDQ:MaxPool");
  }

  // The pool of a classifier's head: the mean of the int8 values in int32, requantised once
  // (ops/qlinear_global_average_pool.cc), as ONNX Runtime's QLinearGlobalAveragePool. X and Y
  // per tensor, one dtype; the scales may differ.
  void try_global_average_pool(ir::Node& pool) {
    if (pool.num_inputs() != 1 || pool.num_outputs() != 1) return;
    QuantParams dx, qy;
    if (!dequantized(g_, pool.input(0), &dx) || !dx.per_tensor()) return;
    ir::Value* xq = dx.node->input(0);
    if (!is_x8(xq->dtype()) || !quantized_by(pool.output(0), &qy) || qy.node->output(0)->dtype() != xq->dtype()) return;
    const std::string base = pool.name().empty() ? pool.output(0)->name() : pool.name();
    std::vector<ir::Value*> in{xq, dx.scale, zero_point_or_zeros(dx.zero_point, xq->dtype(), {}, base + "_x"), qy.scale,
                               zero_point_or_zeros(qy.zero_point, xq->dtype(), {}, base + "_y")};
    fusion::add_fused_node(g_, uses_, "QLinearGlobalAveragePool", {&pool, qy.node}, in, qy.node->output(0), removed_);
    drop_if_unused(dx.node);
    ctx_.count_fusion("QDQ:GlobalAveragePool");
  }

  // A DequantizeLinear whose output nothing reads any more goes with the chain it fed.
  void drop_if_unused(ir::Node* dq) {
    if (removed_.count(dq) || !uses_.unused(dq->output(0))) return;
    uses_.forget_node(dq);
    removed_.insert(dq);
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
  // kiln FusedQLinearAdd is registered (its kernels and inference exist).
  const bool add_available_ = fusion::kiln_op_available("FusedQLinearAdd");
  const bool gap_available_ = fusion::kiln_op_available("QLinearGlobalAveragePool");
};

}  // namespace

PassInfo qdq_folding_pass() {
  PassInfo p;
  p.name = "qdq_folding";
  p.min_level = 2;
  p.description = "DequantizeLinear/QuantizeLinear around Conv, MatMul, Gemm, Add, MaxPool and GlobalAveragePool -> int8 operators";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available("FusedQLinearConv")) {
      ctx.note("qdq_folding: kiln FusedQLinearConv is not registered; nothing folded");
      return ok_status();
    }
    QdqFolder f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
