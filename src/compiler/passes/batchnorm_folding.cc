// batchnorm_folding: an inference BatchNormalization reading the output of a Conv,
// ConvTranspose or Gemm with constant weights is folded into that node's weights and bias
// (W' = W * s per output channel, B' = (B - mean) * s + bias, s = scale / sqrt(var + eps)),
// and the BatchNormalization node is removed.
#include <cmath>
#include <map>
#include <string>
#include <unordered_set>

#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"
#include "core/logging.h"

namespace kiln::compiler {
namespace {

// Weight dtypes the fold writes. fp16/bf16 weights are left alone: rounding the folded
// weights to 11 (8) mantissa bits changes results more than the unfused graph does.
bool foldable_dtype(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }

// Direct element access: the weights of a large model are tens of millions of elements.
double load(const Tensor& t, int64_t i) {
  if (t.dtype() == DataType::kFloat32) return static_cast<double>(t.data<float>()[i]);
  return t.data<double>()[i];
}

void store(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DataType::kFloat32)
    t.data<float>()[i] = static_cast<float>(v);
  else
    t.data<double>()[i] = v;
}

class BatchNormFolder {
 public:
  BatchNormFolder(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {
    graph_inputs_.insert(g.inputs().begin(), g.inputs().end());
  }

  int run() {
    int folded = 0;
    for (const auto& owned : g_.nodes()) {
      ir::Node* bn = owned.get();
      if (removed_.count(bn) || !bn->domain().empty() || bn->op_type() != "BatchNormalization")
        continue;
      if (try_fold(*bn)) ++folded;
    }
    g_.remove_nodes_if([&](const ir::Node& n) { return removed_.count(&n) > 0; });
    for (const auto& [op, count] : into_)
      ctx_.note(str_format("folded %d BatchNormalization into %s", count, op.c_str()));
    return folded;
  }

 private:
  // A constant the compiled model owns: an initializer the user cannot feed.
  bool constant(const ir::Value* v) const {
    return v && v->has_initializer() && !graph_inputs_.count(v) && !v->is_outer_scope();
  }

  // The per-channel factors s and shifts t = bias - mean * s of an inference BatchNorm
  // with `channels` channels; false when it is not one this pass folds.
  bool bn_affine(const ir::Node& bn, int64_t channels, std::vector<double>& s,
                 std::vector<double>& t) {
    if (bn.opset() < 7 || bn.num_inputs() != 5) return false;
    if (bn.opset() < 9 && bn.attr_int("spatial", 1) == 0) return false;
    if (bn.attr_int("training_mode", 0) != 0) return false;
    // Extra outputs exist only in training mode; a graph reading them is not inference.
    for (int i = 1; i < bn.num_outputs(); ++i) {
      const ir::Value* extra = bn.output(static_cast<size_t>(i));
      if (extra && !uses_.unused(extra)) return false;
    }
    const ir::Value* params[4] = {bn.input(1), bn.input(2), bn.input(3), bn.input(4)};
    for (const ir::Value* p : params) {
      if (!constant(p) || !dtype_is_float(p->initializer()->dtype())) return false;
      const Tensor& pt = *p->initializer();
      if (pt.rank() != 1 || pt.dim(0) != channels) return false;
    }
    double eps = bn.attr_float("epsilon", 1e-5f);
    s.resize(static_cast<size_t>(channels));
    t.resize(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      double scale = params[0]->initializer()->element_as_double(c);
      double bias = params[1]->initializer()->element_as_double(c);
      double mean = params[2]->initializer()->element_as_double(c);
      double var = params[3]->initializer()->element_as_double(c);
      if (!(var + eps > 0.0)) return false;  // negative variance or NaN: leave it to the kernel
      double f = scale / std::sqrt(var + eps);
      s[static_cast<size_t>(c)] = f;
      t[static_cast<size_t>(c)] = bias - mean * f;
    }
    return true;
  }

  bool try_fold(ir::Node& bn) {
    ir::Value* x = bn.input(0);
    ir::Value* y = bn.output(0);
    if (!x || !y) return false;
    ir::Node* p = x->producer();
    if (!p || removed_.count(p) || !p->domain().empty() || x->producer_output() != 0) return false;
    const std::string& op = p->op_type();
    if (op != "Conv" && op != "ConvTranspose" && op != "Gemm") return false;
    // The producer's result is needed unnormalised elsewhere, or under its own name.
    if (uses_.num_consumers(x) != 1 || uses_.pinned(x)) return false;
    for (int i = 1; i < p->num_outputs(); ++i)
      if (p->output(static_cast<size_t>(i))) return false;
    ir::Value* w = p->input(1);
    if (!constant(w) || !foldable_dtype(w->initializer()->dtype())) return false;
    if (!x->type().is_tensor() || x->dtype() != w->initializer()->dtype()) return false;
    ir::Value* b = p->input(2);
    if (b && !constant(b)) return false;
    if (b && !foldable_dtype(b->initializer()->dtype())) return false;
    const Tensor& wt = *w->initializer();

    if (op == "Gemm") return fold_gemm(bn, *p, wt);

    // Conv: W [M, C/group, k...]; ConvTranspose: W [C, M/group, k...].
    if (wt.rank() < 3) return false;
    int64_t group = p->attr_int("group", 1);
    if (group < 1) return false;
    int64_t m = op == "Conv" ? wt.dim(0) : wt.dim(1) * group;
    if (op == "ConvTranspose" && wt.dim(0) % group != 0) return false;
    if (x->shape().has_rank() && x->shape().rank() != wt.rank()) return false;
    if (b && (b->initializer()->rank() != 1 || b->initializer()->dim(0) != m)) return false;
    std::vector<double> s, t;
    if (!bn_affine(bn, m, s, t)) return false;

    Tensor nw = Tensor::make(wt.dtype(), wt.dims());
    int64_t inner = 1;  // elements per (dim0, dim1) pair
    for (int i = 2; i < wt.rank(); ++i) inner *= wt.dim(i);
    int64_t d0 = wt.dim(0), d1 = wt.dim(1);
    int64_t in_per_group = op == "ConvTranspose" ? d0 / group : 0;
    for (int64_t i = 0; i < d0; ++i) {
      for (int64_t j = 0; j < d1; ++j) {
        int64_t ch = op == "Conv" ? i : (i / in_per_group) * d1 + j;
        double f = s[static_cast<size_t>(ch)];
        int64_t base = (i * d1 + j) * inner;
        for (int64_t k = 0; k < inner; ++k) store(nw, base + k, load(wt, base + k) * f);
      }
    }
    Tensor nb = Tensor::make(wt.dtype(), {m});
    for (int64_t c = 0; c < m; ++c) {
      double b0 = b ? b->initializer()->element_as_double(c) : 0.0;
      store(nb, c, b0 * s[static_cast<size_t>(c)] + t[static_cast<size_t>(c)]);
    }
    rewire(bn, *p, std::move(nw), std::move(nb));
    return true;
  }

  // Gemm: Y = alpha * A' * B' + beta * C, BN over Y's columns (the features).
  bool fold_gemm(ir::Node& bn, ir::Node& p, const Tensor& wt) {
    if (wt.rank() != 2) return false;
    const ir::Value* x = p.output(0);
    if (x->shape().has_rank() && x->shape().rank() != 2) return false;
    bool trans_b = p.attr_int("transB", 0) != 0;
    int64_t n = trans_b ? wt.dim(0) : wt.dim(1);
    double beta = p.attr_float("beta", 1.0f);
    const ir::Value* c = p.input(2);
    // C must broadcast along rows (a per-column or scalar bias): one folded row holds it.
    if (c) {
      const Tensor& ct = *c->initializer();
      if (ct.rank() > 2) return false;
      if (ct.rank() == 2 && ct.dim(0) != 1) return false;
      if (ct.rank() >= 1 && ct.dims().back() != 1 && ct.dims().back() != n) return false;
    }
    std::vector<double> s, t;
    if (!bn_affine(bn, n, s, t)) return false;

    Tensor nw = Tensor::make(wt.dtype(), wt.dims());
    for (int64_t i = 0; i < wt.dim(0); ++i)
      for (int64_t j = 0; j < wt.dim(1); ++j) {
        int64_t e = i * wt.dim(1) + j;
        store(nw, e, load(wt, e) * s[static_cast<size_t>(trans_b ? i : j)]);
      }
    Tensor nb = Tensor::make(wt.dtype(), {n});
    for (int64_t j = 0; j < n; ++j) {
      double cj = 0.0;
      if (c) {
        const Tensor& ct = *c->initializer();
        cj = ct.element_as_double(ct.num_elements() == 1 ? 0 : j);
      }
      store(nb, j, beta * cj * s[static_cast<size_t>(j)] + t[static_cast<size_t>(j)]);
    }
    p.attrs()["beta"] = ir::Attribute::from_float(1.0f);  // beta is folded into the new C
    rewire(bn, p, std::move(nw), std::move(nb));
    return true;
  }

  ir::Value* new_initializer(const ir::Value* like, const std::string& suffix, Tensor t) {
    std::string base = (like ? like->name() : "bias") + suffix;
    return add_initializer(g_, base, std::move(t));
  }

  // Clears an initializer nothing reads any more, so the weights are not stored twice.
  void release(ir::Value* v) {
    if (v && uses_.unused(v) && constant(v)) v->clear_initializer();
  }

  // `p` reads the new weights and bias and produces the BatchNorm's output value, so a
  // graph output keeps its name.
  void rewire(ir::Node& bn, ir::Node& p, Tensor w, Tensor b) {
    ir::Value* old_w = p.input(1);
    ir::Value* old_b = p.input(2);
    ir::Value* old_x = p.output(0);
    ir::Value* y = bn.output(0);
    uses_.set_input(&p, 1, new_initializer(old_w, "_bnfolded", std::move(w)));
    ir::Value* nb =
        new_initializer(old_b ? old_b : old_w, old_b ? "_bnfolded" : "_bnbias", std::move(b));
    if (p.num_inputs() < 3) p.inputs().resize(3, nullptr);
    uses_.set_input(&p, 2, nb);
    uses_.forget_node(&bn);
    removed_.insert(&bn);
    for (size_t i = 1; i < 5; ++i) release(bn.input(i));
    release(old_w);
    release(old_b);
    old_x->set_producer(nullptr, -1);
    p.outputs()[0] = y;
    y->set_producer(&p, 0);
    ++into_[p.op_type()];
  }

  ir::Graph& g_;
  PassContext& ctx_;
  std::map<std::string, int> into_;  // folds per producer op, for the report note
  GraphUses uses_;
  std::unordered_set<const ir::Value*> graph_inputs_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo batchnorm_folding_pass() {
  PassInfo p;
  p.name = "batchnorm_folding";
  p.min_level = 1;
  p.description =
      "fold inference BatchNormalization into the weights of a preceding Conv/ConvTranspose/Gemm";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    BatchNormFolder f(g, ctx);
    ctx.add_changed(f.run());
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
