// reshape_target_folding: a Reshape whose target shape is computed at run time from the
// shapes of other values (Shape -> Gather -> Unsqueeze -> Concat, what exporters emit for
// `x.view(x.size(0), x.size(1), 12, 64)`) gets a constant target instead, written with
// Reshape's own 0 (copy the input's dim) and -1 (infer it), when the computation can be
// followed symbolically. Shape inference then names the output's open dims after the
// input's ([B, S, 768] -> [B, S, 12, 64]) instead of leaving them unknown, so the fusions
// that need to know shapes by name (attention, LayerNorm, elementwise chains, residual adds)
// still apply to a model compiled with open dims, and the shape computation itself becomes
// dead. ONNX Runtime's ReshapeFusion does the same rewrite.
//
// Only exact rewrites: each target element must be a known extent, or the input's dim at
// the same position (same symbol: copied with 0), and at most one element may be anything
// else (-1; the element count then fixes it, as it fixed the computed value). Static shapes
// never get here: constant_folding has folded their shape computations already.
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

// Longest shape vector followed; real targets have rank <= 8.
constexpr size_t kMaxElements = 16;
// Rounds of (rewrite, re-inference): each round names the dims the next Reshapes read.
constexpr int kMaxRounds = 8;

// An integer tensor of rank 0 or 1 whose elements are known as Dims: an extent, a named open
// dim, or unknown (Dim() with no symbol).
struct SymbolicInts {
  std::vector<Dim> elems;
  bool scalar = false;
};

bool is_int_index_type(DataType t) { return t == DataType::kInt64 || t == DataType::kInt32; }

std::optional<std::vector<int64_t>> constant_ints(const ir::Value* v) {
  if (!v || !v->has_initializer()) return std::nullopt;
  const Tensor& t = *v->initializer();
  if (!is_int_index_type(t.dtype()) || t.rank() > 1 || t.num_elements() > static_cast<int64_t>(kMaxElements))
    return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(static_cast<int64_t>(t.element_as_double(i)));
  return out;
}

class SymbolicEvaluator {
 public:
  // The elements of `v`, or nullopt when they cannot be followed.
  std::optional<SymbolicInts> eval(const ir::Value* v, int depth = 0) {
    if (!v || depth > 64) return std::nullopt;
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    std::optional<SymbolicInts> r = compute(v, depth);
    memo_[v] = r;
    return r;
  }

 private:
  std::optional<SymbolicInts> compute(const ir::Value* v, int depth) {
    if (auto c = constant_ints(v)) {
      SymbolicInts s;
      s.scalar = v->initializer()->rank() == 0;
      for (int64_t x : *c) s.elems.push_back(Dim(x));
      return s;
    }
    const ir::Node* n = v->producer();
    if (!n || !n->domain().empty() || n->num_outputs() != 1) return std::nullopt;
    const std::string& op = n->op_type();
    if (op == "Shape") return shape_of(*n);
    if (op == "Identity" || (op == "Cast" && is_int_index_type(v->dtype()))) return eval(n->input(0), depth + 1);
    if (op == "Gather") return gather(*n, depth);
    if (op == "Unsqueeze" || op == "Squeeze") return unsqueeze_or_squeeze(*n, depth);
    if (op == "Concat") return concat(*n, depth);
    if (op == "Slice") return slice(*n, depth);
    return std::nullopt;
  }

  static std::optional<SymbolicInts> shape_of(const ir::Node& n) {
    const ir::Value* x = n.input(0);
    if (!x || !x->type().is_tensor() || !x->shape().has_rank()) return std::nullopt;
    const int64_t rank = x->shape().rank();
    int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    SymbolicInts s;
    for (int64_t i = start; i < end; ++i) s.elems.push_back(x->shape()[static_cast<int>(i)]);
    return s;
  }

  std::optional<SymbolicInts> gather(const ir::Node& n, int depth) {
    if (n.attr_int("axis", 0) != 0) return std::nullopt;
    auto data = eval(n.input(0), depth + 1);
    auto idx = constant_ints(n.input(1));
    if (!data || data->scalar || !idx) return std::nullopt;
    SymbolicInts s;
    s.scalar = n.input(1)->initializer()->rank() == 0;
    const int64_t size = static_cast<int64_t>(data->elems.size());
    for (int64_t i : *idx) {
      if (i < 0) i += size;
      if (i < 0 || i >= size) return std::nullopt;
      s.elems.push_back(data->elems[static_cast<size_t>(i)]);
    }
    return s;
  }

  // Between a scalar and a one-element vector only (the form shape computations use).
  std::optional<SymbolicInts> unsqueeze_or_squeeze(const ir::Node& n, int depth) {
    auto in = eval(n.input(0), depth + 1);
    if (!in || in->elems.size() != 1) return std::nullopt;
    const ir::Value* y = n.output(0);
    if (!y->shape().has_rank() || y->shape().rank() > 1) return std::nullopt;
    in->scalar = y->shape().rank() == 0;
    return in;
  }

  std::optional<SymbolicInts> concat(const ir::Node& n, int depth) {
    SymbolicInts s;
    for (const ir::Value* in : n.inputs()) {
      auto part = eval(in, depth + 1);
      if (!part || part->scalar) return std::nullopt;
      s.elems.insert(s.elems.end(), part->elems.begin(), part->elems.end());
      if (s.elems.size() > kMaxElements) return std::nullopt;
    }
    return s;
  }

  // Slice of a vector along axis 0 with constant starts / ends (steps 1); opsets 1-9 give
  // them as attributes.
  std::optional<SymbolicInts> slice(const ir::Node& n, int depth) {
    auto data = eval(n.input(0), depth + 1);
    if (!data || data->scalar) return std::nullopt;
    std::optional<std::vector<int64_t>> starts, ends, axes, steps;
    if (n.opset() < 10) {
      starts = n.attr_ints("starts");
      ends = n.attr_ints("ends");
      if (n.has_attr("axes")) axes = n.attr_ints("axes");
    } else {
      if (n.num_inputs() < 3) return std::nullopt;
      starts = constant_ints(n.input(1));
      ends = constant_ints(n.input(2));
      if (n.num_inputs() > 3 && n.input(3)) {
        axes = constant_ints(n.input(3));
        if (!axes) return std::nullopt;
      }
      if (n.num_inputs() > 4 && n.input(4)) {
        steps = constant_ints(n.input(4));
        if (!steps || steps->size() != 1 || (*steps)[0] != 1) return std::nullopt;
      }
    }
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (axes && (axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1))) return std::nullopt;
    const int64_t size = static_cast<int64_t>(data->elems.size());
    int64_t b = (*starts)[0], e = (*ends)[0];
    if (b < 0) b += size;
    if (e < 0) e += size;
    b = std::clamp<int64_t>(b, 0, size);
    e = std::clamp<int64_t>(e, b, size);
    SymbolicInts s;
    s.elems.assign(data->elems.begin() + b, data->elems.begin() + e);
    return s;
  }

  std::unordered_map<const ir::Value*, std::optional<SymbolicInts>> memo_;
};

// The constant target equal to `target` for input `in`: 0 where the element is the input's
// dim at that position, -1 for at most one element not otherwise known.
std::optional<std::vector<int64_t>> constant_target(const ir::Node& reshape, const Shape& in,
                                                    const SymbolicInts& target) {
  const bool allowzero = reshape.opset() >= 14 && reshape.attr_int("allowzero", 0) != 0;
  std::vector<int64_t> out;
  bool inferred = false;
  for (size_t i = 0; i < target.elems.size(); ++i) {
    const Dim& d = target.elems[i];
    if (d.is_static()) {
      if (d.value == -1) {
        if (inferred) return std::nullopt;
        inferred = true;
      }
      out.push_back(d.value);
      continue;
    }
    const bool copy = !allowzero && !d.symbol.empty() && static_cast<int>(i) < in.rank() &&
                      in[static_cast<int>(i)] == d;
    if (copy) {
      out.push_back(0);
    } else {
      if (inferred) return std::nullopt;
      inferred = true;
      out.push_back(-1);
    }
  }
  return out;
}

class ReshapeTargetFolder {
 public:
  explicit ReshapeTargetFolder(ir::Graph& g) : g_(g) {}

  // One sweep; returns the Reshapes rewritten.
  int sweep() {
    SymbolicEvaluator eval;  // fresh each sweep: inference has renamed dims since
    int rewritten = 0;
    for (const auto& n : g_.nodes()) {
      if (!n->domain().empty() || n->op_type() != "Reshape" || n->opset() < 5 || n->num_inputs() != 2) continue;
      const ir::Value* x = n->input(0);
      ir::Value* shape = n->input(1);
      if (!x || !shape || shape->has_initializer() || !x->shape().has_rank()) continue;
      auto target = eval.eval(shape);
      if (!target || target->scalar) continue;
      auto constant = constant_target(*n, x->shape(), *target);
      if (!constant) continue;
      Tensor t = Tensor::make(DataType::kInt64, {static_cast<int64_t>(constant->size())});
      for (size_t i = 0; i < constant->size(); ++i) t.data<int64_t>()[i] = (*constant)[i];
      n->inputs()[1] = new_initializer(n->name() + "_target", std::move(t));
      ++rewritten;
    }
    return rewritten;
  }

 private:
  ir::Value* new_initializer(const std::string& base, Tensor t) {
    std::string name = base;
    for (int k = 1; g_.find_value(name); ++k) name = base + "_" + std::to_string(k);
    ir::Value* v = g_.get_or_add_value(name);
    v->type().dtype = t.dtype();
    v->type().shape = t.shape();
    v->set_initializer(std::move(t));
    return v;
  }

  ir::Graph& g_;
};

}  // namespace

PassInfo reshape_target_folding_pass() {
  PassInfo p;
  p.name = "reshape_target_folding";
  p.min_level = 1;
  p.description = "Reshape targets computed from open dims (Shape/Gather/Concat chains) -> constants with 0 and -1, "
                  "so open dims keep their names through reshapes";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    ReshapeTargetFolder folder(g);
    int total = 0;
    for (int round = 0; round < kMaxRounds; ++round) {
      int n = folder.sweep();
      if (n == 0) break;
      total += n;
      KILN_RETURN_IF_ERROR(ops::infer_graph(g), "re-inferring shapes after folding Reshape targets");
    }
    if (total > 0) {
      ctx.add_changed(total);
      ctx.note(str_format("reshape_target_folding: %d Reshape targets made constant", total));
    }
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
