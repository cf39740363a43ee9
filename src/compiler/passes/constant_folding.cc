// Constant folding and shape-subgraph folding, iterated with shape inference to a fixed point:
// Shape/Size of statically shaped values become constants, nodes whose inputs are all
// constants are evaluated with their reference kernels, and re-inference then makes the
// consumers (typically Reshape) static, which may expose more Shape nodes to fold.
#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

// Rounds of (folding, inference). Each round folds at least one node, and the shape chains of
// real models (BERT, detection heads) settle in two or three; the bound only guards the compile
// time against pathological graphs.
constexpr int kMaxRounds = 16;
// An output larger than this and than all the node's inputs together is left to run time, so
// ConstantOfShape/Expand/Tile/Range do not blow up the weight file.
constexpr size_t kMaxGrowthBytes = size_t{1} << 20;

// Ops whose outputs differ from run to run (Dropout may be in training mode; in inference
// mode algebraic_simplify removes it).
bool nondeterministic(const ir::Node& n) {
  static const std::unordered_set<std::string> kOps = {
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
      "Dropout"};
  return n.domain().empty() && kOps.count(n.op_type()) > 0;
}

class Folder {
 public:
  Folder(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx) {
    for (const ir::Value* v : g.inputs()) graph_inputs_.insert(v);
  }

  // One forward sweep; the nodes are in topological order, so a chain of foldable nodes
  // folds in the same sweep. Returns the number of nodes folded.
  Expected<int> sweep() {
    GraphUses uses(g_);
    std::unordered_set<const ir::Node*> folded;
    std::vector<ir::Value*> freed_candidates;
    for (const auto& owned : g_.nodes()) {
      ir::Node* n = owned.get();
      if (skipped_.count(n) || !n->subgraphs().empty() || n->num_outputs() == 0 || nondeterministic(*n))
        continue;
      bool keep = false;
      for (const ir::Value* v : n->outputs())
        // A graph output keeps its producer (and its name). Optionals and sequences have no
        // initializer form.
        if (v && (uses.pinned(v) || !v->type().is_tensor())) keep = true;
      if (keep) continue;
      std::vector<Tensor> results;
      if (!evaluate(*n, results)) continue;
      for (int i = 0; i < n->num_outputs(); ++i) {
        ir::Value* v = n->output(static_cast<size_t>(i));
        if (!v) continue;
        Tensor& t = results[static_cast<size_t>(i)];
        v->set_producer(nullptr, -1);
        v->type().dtype = t.dtype();
        v->type().shape = t.shape();
        v->set_initializer(std::move(t));
      }
      for (ir::Value* in : n->inputs())
        if (in) freed_candidates.push_back(in);
      uses.forget_node(n);
      folded.insert(n);
    }
    g_.remove_nodes_if([&](const ir::Node& n) { return folded.count(&n) > 0; });
    // Constants only the folded nodes read are dropped so the weight file does not carry them.
    for (ir::Value* v : freed_candidates)
      if (v->has_initializer() && uses.unused(v) && !graph_inputs_.count(v)) v->clear_initializer();
    return static_cast<int>(folded.size());
  }

 private:
  // A constant the compiler may read: an initializer that is not also a graph input (those
  // are defaults the caller may override).
  bool is_constant(const ir::Value* v) const { return v->has_initializer() && !graph_inputs_.count(v); }

  // Fills `out` with the node's output tensors when it can be folded.
  bool evaluate(const ir::Node& n, std::vector<Tensor>& out) {
    if (n.domain().empty() && (n.op_type() == "Shape" || n.op_type() == "Size")) return fold_shape_op(n, out);
    size_t input_bytes = 0;
    std::vector<RuntimeValue> values(n.inputs().size());
    std::vector<const RuntimeValue*> inputs(n.inputs().size(), nullptr);
    for (size_t i = 0; i < n.inputs().size(); ++i) {
      const ir::Value* v = n.inputs()[i];
      if (!v) continue;  // omitted optional input
      if (!is_constant(v)) return false;
      values[i] = RuntimeValue(*v->initializer());
      inputs[i] = &values[i];
      input_bytes += v->initializer()->size_bytes();
    }
    // When inference already knows a static output size, a blow-up is refused before running.
    for (const ir::Value* v : n.outputs())
      if (v && v->type().is_tensor() && v->shape().is_static() &&
          too_big(n, static_cast<int64_t>(dtype_bytes(v->dtype(), v->shape().num_elements())), input_bytes))
        return false;
    auto schema = ops::schema_for(n);
    if (!schema.ok() || !(*schema)->kernel_fn()) return false;
    std::vector<RuntimeValue> results(n.outputs().size());
    ops::KernelContext kctx(n, std::move(inputs), &results);
    Status s = (*schema)->kernel_fn()(kctx);
    if (!s.ok()) {
      // Left for run time, where the same error names the node if the node is ever reached.
      skipped_.insert(&n);
      ctx_.note(str_format("constant_folding: not folding %s: %s", n.label().c_str(), s.to_string().c_str()));
      return false;
    }
    out.clear();
    for (size_t i = 0; i < results.size(); ++i) {
      if (!n.outputs()[i]) {
        out.emplace_back();
        continue;
      }
      if (!results[i].is_tensor()) return false;  // sequences and optionals stay as nodes
      const Tensor& t = results[i].tensor();
      if (too_big(n, static_cast<int64_t>(t.size_bytes()), input_bytes)) return false;
      // A kernel may return a view of an input (Reshape, Identity); the folded value must own
      // its data, since later passes may rewrite or drop the input's initializer.
      out.push_back(shares_input_storage(n, t) ? t.clone() : std::move(results[i].tensor()));
    }
    return true;
  }

  static bool shares_input_storage(const ir::Node& n, const Tensor& t) {
    auto lo = reinterpret_cast<uintptr_t>(t.raw_data());
    uintptr_t hi = lo + t.size_bytes();
    for (const ir::Value* v : n.inputs()) {
      if (!v || !v->has_initializer()) continue;
      auto in_lo = reinterpret_cast<uintptr_t>(v->initializer()->raw_data());
      uintptr_t in_hi = in_lo + v->initializer()->size_bytes();
      if (lo < in_hi && in_lo < hi) return true;
      if (lo == in_lo) return true;  // empty tensors viewing the same place
    }
    return false;
  }

  bool too_big(const ir::Node& n, int64_t bytes, size_t input_bytes) {
    if (bytes <= static_cast<int64_t>(kMaxGrowthBytes) || bytes <= static_cast<int64_t>(input_bytes)) return false;
    if (skipped_.insert(&n).second)
      ctx_.note(str_format("constant_folding: not folding %s: its output (%lld bytes) would be much larger than "
                           "its constant inputs (%zu bytes); computed at run time instead",
                           n.label().c_str(), static_cast<long long>(bytes), input_bytes));
    return true;
  }

  // Shape (with its start/end slice) and Size of a value whose needed dims are static.
  bool fold_shape_op(const ir::Node& n, std::vector<Tensor>& out) {
    if (n.num_inputs() < 1 || n.num_outputs() != 1 || !n.input(0) || !n.output(0)) return false;
    const ir::TensorType& type = n.input(0)->type();
    if (!type.is_tensor() || !type.shape.has_rank()) return false;
    const Shape& shape = type.shape;
    int64_t rank = shape.rank();
    int64_t start = 0, end = rank;
    if (n.op_type() == "Shape") {
      start = n.attr_int("start", 0);
      end = n.attr_int("end", rank);
      if (start < 0) start += rank;
      if (end < 0) end += rank;
      start = std::min(std::max<int64_t>(start, 0), rank);
      end = std::min(std::max<int64_t>(end, start), rank);
    }
    for (int64_t i = start; i < end; ++i)
      if (!shape[static_cast<int>(i)].is_static()) return false;
    out.clear();
    if (n.op_type() == "Shape") {
      Tensor t = Tensor::make(DataType::kInt64, {end - start});
      for (int64_t i = start; i < end; ++i) t.data<int64_t>()[i - start] = shape[static_cast<int>(i)].value;
      out.push_back(std::move(t));
    } else {
      Tensor t = Tensor::make(DataType::kInt64, {});
      t.data<int64_t>()[0] = shape.num_elements();
      out.push_back(std::move(t));
    }
    return true;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  std::unordered_set<const ir::Value*> graph_inputs_;
  std::unordered_set<const ir::Node*> skipped_;  // refused once: not tried again in later rounds
};

}  // namespace

PassInfo constant_folding_pass() {
  PassInfo p;
  p.name = "constant_folding";
  p.min_level = 1;
  p.description = "evaluate nodes with constant inputs and Shape/Size of static shapes, re-inferring shapes "
                  "to a fixed point";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    Folder folder(g, ctx);
    int total = 0, rounds = 0;
    while (rounds < kMaxRounds) {
      ++rounds;
      KILN_ASSIGN_OR_RETURN(int folded, folder.sweep());
      if (folded == 0) break;
      total += folded;
      KILN_RETURN_IF_ERROR(ops::infer_graph(g), "shape inference after constant folding");
    }
    ctx.add_changed(total);
    if (total) ctx.note(str_format("constant_folding: folded %d nodes into constants in %d rounds", total, rounds));
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
