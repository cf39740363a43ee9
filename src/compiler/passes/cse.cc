// Common-subexpression elimination: two nodes with the same op, attributes and inputs
// compute the same values, so the later one's outputs are replaced by the earlier one's.
// Nodes with randomness or with subgraphs are never merged.
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {
namespace {

// Ops whose outputs differ from run to run (or, for Dropout, may in training mode).
bool nondeterministic(const ir::Node& n) {
  static const std::unordered_set<std::string> kOps = {
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
      "Dropout"};
  return kOps.count(n.op_type()) > 0;
}

void append_bits(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }

// Appends the exact content of a tensor; false for strings (left unmerged, rare as attributes).
bool append_tensor(std::string& key, const Tensor& t) {
  if (t.dtype() == DataType::kString) return false;
  int32_t dt = static_cast<int32_t>(t.dtype());
  append_bits(key, &dt, sizeof dt);
  int64_t rank = t.rank();
  append_bits(key, &rank, sizeof rank);
  for (int64_t d : t.dims()) append_bits(key, &d, sizeof d);
  if (t.size_bytes()) append_bits(key, t.raw_data(), t.size_bytes());
  return true;
}

// A byte string equal for two nodes exactly when they compute the same thing; false when
// the node must not be merged.
bool node_key(const ir::Node& n, std::string& key) {
  if (nondeterministic(n) || !n.subgraphs().empty() || n.num_outputs() == 0) return false;
  key = n.domain() + '\0' + n.op_type() + '\0' + std::to_string(n.opset()) + '\0';
  for (const ir::Value* v : n.inputs()) {
    const void* p = v;
    append_bits(key, &p, sizeof p);
  }
  key += '\0';
  for (const auto& [name, a] : n.attrs()) {
    key += name;
    key += '\0';
    int32_t kind = static_cast<int32_t>(a.kind);
    append_bits(key, &kind, sizeof kind);
    switch (a.kind) {
      case ir::AttrKind::kFloat: append_bits(key, &a.f, sizeof a.f); break;
      case ir::AttrKind::kInt: append_bits(key, &a.i, sizeof a.i); break;
      case ir::AttrKind::kString: key += std::to_string(a.s.size()) + ':' + a.s; break;
      case ir::AttrKind::kFloats:
        key += std::to_string(a.floats.size()) + ':';
        if (!a.floats.empty()) append_bits(key, a.floats.data(), a.floats.size() * sizeof(float));
        break;
      case ir::AttrKind::kInts:
        key += std::to_string(a.ints.size()) + ':';
        if (!a.ints.empty()) append_bits(key, a.ints.data(), a.ints.size() * sizeof(int64_t));
        break;
      case ir::AttrKind::kStrings:
        key += std::to_string(a.strings.size()) + ':';
        for (const std::string& s : a.strings) key += std::to_string(s.size()) + ':' + s;
        break;
      case ir::AttrKind::kTensor:
        if (!append_tensor(key, a.t)) return false;
        break;
      case ir::AttrKind::kTensors:
        key += std::to_string(a.tensors.size()) + ':';
        for (const Tensor& t : a.tensors)
          if (!append_tensor(key, t)) return false;
        break;
      case ir::AttrKind::kGraph:
      case ir::AttrKind::kGraphs:
        return false;
    }
  }
  return true;
}

}  // namespace

PassInfo cse_pass() {
  PassInfo p;
  p.name = "cse";
  p.min_level = 1;
  p.description = "merge nodes with the same op, attributes and inputs";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    GraphUses uses(g);
    std::unordered_map<std::string, ir::Node*> seen;
    std::unordered_set<const ir::Node*> removed;
    std::string key;
    // One forward sweep suffices: merging a node redirects its consumers to the survivor
    // before they are keyed, so chains of duplicates collapse in the same sweep.
    for (const auto& owned : g.nodes()) {
      ir::Node* n = owned.get();
      if (!node_key(*n, key)) continue;
      auto [it, inserted] = seen.emplace(key, n);
      if (inserted) continue;
      ir::Node* keep = it->second;
      bool can_merge = keep->num_outputs() == n->num_outputs();
      for (int i = 0; can_merge && i < n->num_outputs(); ++i) {
        ir::Value* dup = n->output(static_cast<size_t>(i));
        ir::Value* orig = keep->output(static_cast<size_t>(i));
        if ((dup == nullptr) != (orig == nullptr)) can_merge = false;
        else if (dup && uses.pinned(dup)) can_merge = false;
      }
      if (!can_merge) continue;
      for (int i = 0; i < n->num_outputs(); ++i)
        if (ir::Value* dup = n->output(static_cast<size_t>(i))) uses.replace_uses(dup, keep->output(static_cast<size_t>(i)));
      uses.forget_node(n);
      removed.insert(n);
    }
    g.remove_nodes_if([&](const ir::Node& n) { return removed.count(&n) > 0; });
    ctx.add_changed(static_cast<int>(removed.size()));
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
