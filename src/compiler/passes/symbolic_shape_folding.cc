// symbolic_shape_folding: shape computations over open dims, followed symbolically, for
// models compiled with open dims (batch, sequence length, image size). Exporters compute
// shapes at run time (Shape -> Gather -> Unsqueeze -> Concat, what `x.view(x.size(0),
// x.size(1), 12, 64)` or `torch.arange(x.size(1))` become); with static shapes constant_folding
// evaluates them, with open dims this pass follows them as dims (extents or named open dims):
//   - a Reshape whose target it can follow gets a constant target instead, written with
//     Reshape's own 0 (copy the input's dim) and -1 (infer it): exact when each element is
//     an extent or the input's dim at the same position, and at most one is anything else
//     (the element count then fixes it, as it fixed the computed value). ONNX Runtime's
//     ReshapeFusion does the same rewrite;
//   - ConstantOfShape, Range (start 0, step 1) and Expand whose shape it can follow get their
//     output dims named (a position embedding's `arange(seq)` is [seq], not a fresh unknown).
// Shape inference then names the dims downstream after the inputs' ([B, S, 768] -> [B, S, 12,
// 64]) instead of leaving them unknown, so the fusions that compare shapes by name (attention,
// LayerNorm, elementwise chains, residual adds) apply to a model compiled with open dims, and
// the shape computations become dead. Static shapes never get here: constant_folding has
// folded their computations already.
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
// Sweeps at most: one settles the chains of real models (each sweep re-infers as it goes);
// the bound only guards against a graph that keeps changing.
constexpr int kMaxRounds = 4;

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

class SymbolicShapeFolder {
 public:
  explicit SymbolicShapeFolder(ir::Graph& g) : g_(g) {}

  // One sweep in execution order, re-inferring each node before its readers are looked at,
  // so that a chain of reshapes (one per transformer layer) settles in one sweep. Returns the
  // nodes rewritten or newly typed.
  Expected<int> sweep() {
    SymbolicEvaluator eval;  // values are evaluated after everything upstream was re-inferred
    int changed = 0;
    for (const auto& n : g_.nodes()) {
      if (n->subgraphs().empty()) KILN_RETURN_IF_ERROR(ops::infer_node(*n));
      if (!n->domain().empty() || n->num_outputs() != 1 || !n->output(0)) continue;
      const std::string& op = n->op_type();
      bool rewritten = false;
      if (op == "Reshape") rewritten = fold_reshape_target(*n, eval);
      else if (op == "ConstantOfShape" || op == "Expand" || op == "Range") rewritten = name_output_dims(*n, eval);
      if (!rewritten) continue;
      ++changed;
      KILN_RETURN_IF_ERROR(ops::infer_node(*n));
    }
    return changed;
  }

 private:
  bool fold_reshape_target(ir::Node& n, SymbolicEvaluator& eval) {
    if (n.opset() < 5 || n.num_inputs() != 2) return false;
    const ir::Value* x = n.input(0);
    ir::Value* shape = n.input(1);
    if (!x || !shape || shape->has_initializer() || !x->shape().has_rank()) return false;
    auto target = eval.eval(shape);
    if (!target || target->scalar) return false;
    auto constant = constant_target(n, x->shape(), *target);
    if (!constant) return false;
    Tensor t = Tensor::make(DataType::kInt64, {static_cast<int64_t>(constant->size())});
    for (size_t i = 0; i < constant->size(); ++i) t.data<int64_t>()[i] = (*constant)[i];
    n.inputs()[1] = add_initializer(g_, n.name() + "_target", std::move(t));
    return true;
  }

  // The output dims the node's shape input (or Range's limit) stands for, set where inference
  // left them less known. True when the output's shape changed.
  bool name_output_dims(ir::Node& n, SymbolicEvaluator& eval) {
    ir::Value* y = n.output(0);
    std::optional<Shape> named;
    if (n.op_type() == "ConstantOfShape") {
      auto dims = eval.eval(n.input(0));
      if (dims && !dims->scalar) named = Shape(dims->elems);
    } else if (n.op_type() == "Expand" && n.num_inputs() == 2 && n.input(0) && n.input(0)->shape().has_rank()) {
      auto dims = eval.eval(n.input(1));
      if (dims && !dims->scalar) named = expanded(n.input(0)->shape(), Shape(dims->elems));
    } else if (n.op_type() == "Range" && n.num_inputs() == 3) {
      // [limit] for start 0 and delta 1: torch.arange(n).
      auto start = constant_ints(n.input(0)), delta = constant_ints(n.input(2));
      auto limit = eval.eval(n.input(1));
      if (start && delta && start->size() == 1 && delta->size() == 1 && (*start)[0] == 0 && (*delta)[0] == 1 &&
          limit && limit->elems.size() == 1)
        named = Shape({limit->elems[0]});
    }
    if (!named || !better_known(*named, y->shape())) return false;
    y->type().shape = *named;
    return true;
  }

  // NumPy broadcast of an input shape and an Expand target, dims known by value or name.
  static std::optional<Shape> expanded(const Shape& in, const Shape& target) {
    const int r = std::max(in.rank(), target.rank());
    std::vector<Dim> out(static_cast<size_t>(r));
    for (int i = 0; i < r; ++i) {
      const int a = i - (r - in.rank()), b = i - (r - target.rank());
      const Dim da = a >= 0 ? in[a] : Dim(1), db = b >= 0 ? target[b] : Dim(1);
      if (da.is_static() && da.value == 1) out[static_cast<size_t>(i)] = db;
      else if ((db.is_static() && db.value == 1) || da == db) out[static_cast<size_t>(i)] = da;
      else return std::nullopt;
    }
    return Shape(std::move(out));
  }

  // Whether `named` says more than `current`: same rank, and some dim known (by value or by
  // name) where the current one is unknown, with no known dim contradicted.
  static bool better_known(const Shape& named, const Shape& current) {
    auto known = [](const Dim& d) { return d.is_static() || !d.symbol.empty(); };
    if (!current.has_rank()) return true;
    if (current.rank() != named.rank()) return false;
    bool gains = false;
    for (int i = 0; i < named.rank(); ++i) {
      if (!known(named[i])) continue;
      if (current[i].is_static()) {
        if (!(named[i] == current[i])) return false;
      } else if (!(named[i] == current[i])) {
        gains = true;  // an unknown dim, or a name exporters invented (unk__3), becomes the input's
      }
    }
    return gains;
  }

  ir::Graph& g_;
};

}  // namespace

PassInfo symbolic_shape_folding_pass() {
  PassInfo p;
  p.name = "symbolic_shape_folding";
  p.min_level = 1;
  p.description = "shape computations over open dims followed symbolically: computed Reshape targets -> constants "
                  "with 0 and -1, ConstantOfShape/Range/Expand outputs named, so open dims keep their names";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    // Nothing to follow in a graph whose shape inputs are all constants (every static model,
    // after constant_folding): skip the sweeps.
    bool computed_shapes = false;
    for (const auto& n : g.nodes()) {
      const std::string& op = n->op_type();
      const size_t shape_input = op == "Range" ? 1 : op == "ConstantOfShape" ? 0 : 1;
      if (n->domain().empty() && (op == "Reshape" || op == "Expand" || op == "ConstantOfShape" || op == "Range") &&
          n->input(shape_input) && !n->input(shape_input)->has_initializer())
        computed_shapes = true;
    }
    if (!computed_shapes) return ok_status();
    SymbolicShapeFolder folder(g);
    int total = 0;
    bool settled = false;
    for (int round = 0; round < kMaxRounds && !settled; ++round) {
      KILN_ASSIGN_OR_RETURN(int n, folder.sweep(), "following shape computations");
      total += n;
      settled = n == 0;  // a sweep that changed nothing re-inferred every node: types are final
    }
    if (!settled) KILN_RETURN_IF_ERROR(ops::infer_graph(g), "re-inferring shapes after following shape computations");
    if (total > 0) {
      ctx.add_changed(total);
      ctx.note(str_format("symbolic_shape_folding: %d shape computations followed (Reshape targets made constant, "
                          "output dims named)", total));
    }
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
