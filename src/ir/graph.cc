// The Kiln IR: graph construction, lookup and ordering.
#include "ir/graph.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace kiln::ir {

std::string TensorType::to_string() const {
  std::string t = std::string(dtype_name(dtype)) + shape.to_string();
  switch (kind) {
    case TypeKind::kTensor: return t;
    case TypeKind::kSequence: return "seq(" + t + ")";
    case TypeKind::kOptionalTensor: return "optional(" + t + ")";
    case TypeKind::kOptionalSequence: return "optional(seq(" + t + "))";
  }
  return t;
}

const Attribute* Node::attr(const std::string& name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? nullptr : &it->second;
}

int64_t Node::attr_int(const std::string& name, int64_t fallback) const {
  const Attribute* a = attr(name);
  return a && a->kind == AttrKind::kInt ? a->i : fallback;
}

float Node::attr_float(const std::string& name, float fallback) const {
  const Attribute* a = attr(name);
  if (!a) return fallback;
  if (a->kind == AttrKind::kFloat) return a->f;
  if (a->kind == AttrKind::kInt) return static_cast<float>(a->i);
  return fallback;
}

std::string Node::attr_string(const std::string& name, const std::string& fallback) const {
  const Attribute* a = attr(name);
  return a && a->kind == AttrKind::kString ? a->s : fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
  const Attribute* a = attr(name);
  return a && a->kind == AttrKind::kInts ? a->ints : fallback;
}

std::vector<float> Node::attr_floats(const std::string& name, std::vector<float> fallback) const {
  const Attribute* a = attr(name);
  return a && a->kind == AttrKind::kFloats ? a->floats : fallback;
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& [name, a] : attrs_) {
    if (a.kind == AttrKind::kGraph && a.g) out.push_back(a.g.get());
    if (a.kind == AttrKind::kGraphs)
      for (const auto& g : a.graphs)
        if (g) out.push_back(g.get());
  }
  return out;
}

std::string Node::label() const {
  std::string op = domain_.empty() ? op_type_ : domain_ + "." + op_type_;
  return "'" + name_ + "' (" + op + ")";
}

Expected<Value*> Graph::add_value(const std::string& name) {
  if (by_name_.count(name)) return invalid_argument("value '%s' is defined twice", name.c_str());
  values_.push_back(std::make_unique<Value>(name));
  Value* v = values_.back().get();
  by_name_[name] = v;
  return v;
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Status Graph::rename_value(Value* value, const std::string& name) {
  if (by_name_.count(name)) return invalid_argument("value '%s' is defined twice", name.c_str());
  auto it = by_name_.find(value->name());
  if (it == by_name_.end() || it->second != value)
    return invalid_argument("value '%s' is not in graph '%s'", value->name().c_str(), name_.c_str());
  by_name_.erase(it);
  value->set_name(name);
  by_name_[name] = value;
  return ok_status();
}

Value* Graph::get_or_add_value(const std::string& name) {
  if (Value* v = find_value(name)) return v;
  return *add_value(name);
}

Node* Graph::add_node(std::string name, std::string op_type, std::string domain, int64_t opset,
                      std::vector<Value*> inputs, std::vector<Value*> outputs) {
  nodes_.push_back(std::make_unique<Node>(std::move(name), std::move(op_type), std::move(domain), opset));
  Node* n = nodes_.back().get();
  n->inputs() = std::move(inputs);
  n->outputs() = std::move(outputs);
  for (size_t i = 0; i < n->outputs().size(); ++i)
    if (n->outputs()[i]) n->outputs()[i]->set_producer(n, static_cast<int>(i));
  return n;
}

namespace {

// Adds to `out` every value a node reads, including values its subgraphs read from
// the enclosing scope (a Loop body reading an outer tensor depends on its producer).
void collect_reads(const Node& n, std::vector<const Value*>& out, const Graph& owner);

void collect_outer_reads(const Graph& sub, std::vector<std::string>& names) {
  for (const auto& v : sub.values())
    if (v->is_outer_scope()) names.push_back(v->name());
  for (const auto& n : sub.nodes())
    for (Graph* g : n->subgraphs()) collect_outer_reads(*g, names);
}

void collect_reads(const Node& n, std::vector<const Value*>& out, const Graph& owner) {
  for (const Value* v : n.inputs())
    if (v) out.push_back(v);
  for (Graph* g : n.subgraphs()) {
    std::vector<std::string> names;
    collect_outer_reads(*g, names);
    for (const auto& name : names)
      if (const Value* v = owner.find_value(name)) out.push_back(v);
  }
}

}  // namespace

Status Graph::topological_sort() {
  // Kahn's algorithm, stable: among ready nodes the original order wins.
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  std::vector<std::vector<size_t>> users(nodes_.size());
  std::vector<int> pending(nodes_.size(), 0);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    std::vector<const Value*> reads;
    collect_reads(*nodes_[i], reads, *this);
    std::unordered_set<const Node*> seen;
    for (const Value* v : reads) {
      const Node* p = v->producer();
      if (!p || !index.count(p) || !seen.insert(p).second) continue;
      users[index[p]].push_back(i);
      ++pending[i];
    }
  }
  std::vector<size_t> order;
  order.reserve(nodes_.size());
  std::vector<size_t> ready;
  for (size_t i = nodes_.size(); i-- > 0;)
    if (pending[i] == 0) ready.push_back(i);
  // `ready` is a stack kept in descending order so the smallest index pops first.
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (size_t u : users[i]) {
      if (--pending[u] == 0) {
        auto pos = std::upper_bound(ready.begin(), ready.end(), u, std::greater<size_t>());
        ready.insert(pos, u);
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (pending[i] > 0)
        return invalid_argument("graph '%s' has a cycle through node %s", name_.c_str(),
                                nodes_[i]->label().c_str());
  }
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  for (size_t i : order) sorted.push_back(std::move(nodes_[i]));
  nodes_ = std::move(sorted);
  return ok_status();
}

Status Graph::reorder_nodes(const std::vector<const Node*>& order) {
  if (order.size() != nodes_.size())
    return invalid_argument("graph '%s': a new node order lists %zu nodes, the graph has %zu", name_.c_str(),
                            order.size(), nodes_.size());
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  std::unordered_set<const Node*> placed;
  for (const Node* n : order) {
    if (!n || !index.count(n) || !placed.insert(n).second)
      return invalid_argument("graph '%s': a new node order is not a permutation of its nodes", name_.c_str());
    for (const Value* v : node_reads(*n)) {
      const Node* p = v->producer();
      if (p && index.count(p) && !placed.count(p))
        return invalid_argument("graph '%s': a new node order runs %s before %s, which produces its input '%s'",
                                name_.c_str(), n->label().c_str(), p->label().c_str(), v->name().c_str());
    }
  }
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  for (const Node* n : order) sorted.push_back(std::move(nodes_[index[n]]));
  nodes_ = std::move(sorted);
  return ok_status();
}

std::vector<const Value*> Graph::node_reads(const Node& node) const {
  std::vector<const Value*> reads;
  collect_reads(node, reads, *this);
  return reads;
}

size_t Graph::initializer_bytes() const {
  size_t total = 0;
  for (const auto& v : values_)
    if (v->has_initializer()) total += v->initializer()->size_bytes();
  for (const auto& n : nodes_)
    for (Graph* g : n->subgraphs()) total += g->initializer_bytes();
  return total;
}

size_t Graph::weight_bytes() const {
  size_t total = 0;
  for (const auto& v : values_)
    if (v->has_initializer()) total += v->initializer()->size_bytes();
  for (const auto& n : nodes_) {
    for (const auto& [name, a] : n->attrs()) {
      if (name == kPrepackedAttr || name == kPrepackedKeyAttr) continue;  // prepacked_bytes()
      if (a.kind == AttrKind::kTensor) total += a.t.size_bytes();
      if (a.kind == AttrKind::kTensors)
        for (const Tensor& t : a.tensors) total += t.size_bytes();
    }
    for (Graph* g : n->subgraphs()) total += g->weight_bytes();
  }
  return total;
}

size_t Graph::prepacked_bytes() const {
  size_t total = 0;
  for (const auto& n : nodes_) {
    if (const Attribute* a = n->attr(kPrepackedAttr))
      for (const Tensor& t : a->tensors) total += t.size_bytes();
    for (Graph* g : n->subgraphs()) total += g->prepacked_bytes();
  }
  return total;
}

size_t Graph::cold_weight_bytes() const {
  size_t total = 0;
  std::unordered_set<const void*> seen;
  for (const Value* v : prepacked_only_initializers(*this))
    if (seen.insert(v->initializer()->raw_data()).second) total += v->initializer()->size_bytes();
  return total;
}

namespace {

void add_outer_reads(const Graph& g, std::unordered_set<std::string>& names) {
  for (const auto& v : g.values())
    if (v->is_outer_scope()) names.insert(v->name());
  for (const auto& n : g.nodes())
    for (const Graph* sub : n->subgraphs()) add_outer_reads(*sub, names);
}

}  // namespace

std::vector<const Value*> prepacked_only_initializers(const Graph& g) {
  std::unordered_map<const Value*, bool> packed_only;  // per initializer read by a node
  std::unordered_set<std::string> read_by_subgraphs;
  for (const auto& n : g.nodes()) {
    const Attribute* packed = n->attr(kPrepackedInputAttr);
    for (size_t k = 0; k < n->inputs().size(); ++k) {
      const Value* v = n->inputs()[k];
      if (!v || !v->has_initializer()) continue;
      const bool is_packed = packed && packed->kind == AttrKind::kInts &&
                             std::find(packed->ints.begin(), packed->ints.end(), static_cast<int64_t>(k)) !=
                                 packed->ints.end();
      auto [it, fresh] = packed_only.emplace(v, is_packed);
      if (!fresh) it->second = it->second && is_packed;
    }
    for (const Graph* sub : n->subgraphs()) add_outer_reads(*sub, read_by_subgraphs);
  }
  for (const Value* v : g.inputs()) packed_only[v] = false;  // a caller may feed or read it
  for (const Value* v : g.outputs()) packed_only[v] = false;
  std::vector<const Value*> out;
  for (const auto& v : g.values()) {  // in the graph's order, not the map's
    auto it = packed_only.find(v.get());
    if (it != packed_only.end() && it->second && v->initializer()->raw_data() &&
        !read_by_subgraphs.count(v->name()))
      out.push_back(v.get());
  }
  return out;
}

}  // namespace kiln::ir
