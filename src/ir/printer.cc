// Readable text dump of the IR.
#include <sstream>

#include "ir/graph.h"

namespace kiln::ir {

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::kFloat: return "float";
    case AttrKind::kInt: return "int";
    case AttrKind::kString: return "string";
    case AttrKind::kTensor: return "tensor";
    case AttrKind::kGraph: return "graph";
    case AttrKind::kFloats: return "floats";
    case AttrKind::kInts: return "ints";
    case AttrKind::kStrings: return "strings";
    case AttrKind::kTensors: return "tensors";
    case AttrKind::kGraphs: return "graphs";
  }
  return "unknown";
}

namespace {

template <typename T, typename F>
std::string list_to_string(const std::vector<T>& v, F f) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += f(v[i]);
  }
  return s + "]";
}

std::string float_str(float f) {
  std::ostringstream os;
  os << f;
  return os.str();
}

void print_graph(const Graph& g, std::ostringstream& os, const std::string& indent);

}  // namespace

std::string Attribute::to_string() const {
  switch (kind) {
    case AttrKind::kFloat: return float_str(f);
    case AttrKind::kInt: return std::to_string(i);
    case AttrKind::kString: return "\"" + s + "\"";
    case AttrKind::kTensor: return "tensor " + t.description();
    case AttrKind::kGraph: return "<graph " + (g ? g->name() : std::string("null")) + ">";
    case AttrKind::kFloats: return list_to_string(floats, float_str);
    case AttrKind::kInts: return list_to_string(ints, [](int64_t x) { return std::to_string(x); });
    case AttrKind::kStrings: return list_to_string(strings, [](const std::string& x) { return "\"" + x + "\""; });
    case AttrKind::kTensors: return list_to_string(tensors, [](const Tensor& x) { return x.description(); });
    case AttrKind::kGraphs: return list_to_string(graphs, [](const std::shared_ptr<Graph>& x) { return x ? x->name() : "null"; });
  }
  return "?";
}

namespace {

void print_graph(const Graph& g, std::ostringstream& os, const std::string& indent) {
  os << indent << "graph " << g.name() << " (";
  for (size_t i = 0; i < g.inputs().size(); ++i)
    os << (i ? ", " : "") << "%" << g.inputs()[i]->name() << ": " << g.inputs()[i]->type().to_string();
  os << ") {\n";
  for (const auto& v : g.values())
    if (v->has_initializer())
      os << indent << "  const %" << v->name() << ": " << v->initializer()->description() << "\n";
  for (const auto& n : g.nodes()) {
    os << indent << "  ";
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      const Value* v = n->outputs()[i];
      os << (i ? ", " : "") << (v ? "%" + v->name() + ": " + v->type().to_string() : std::string("_"));
    }
    os << " = " << (n->domain().empty() ? "" : n->domain() + ".") << n->op_type() << "(";
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      const Value* v = n->inputs()[i];
      os << (i ? ", " : "") << (v ? "%" + v->name() : std::string("_"));
    }
    os << ")";
    if (!n->attrs().empty()) {
      os << " {";
      bool first = true;
      for (const auto& [name, a] : n->attrs()) {
        os << (first ? "" : ", ") << name << "=" << a.to_string();
        first = false;
      }
      os << "}";
    }
    os << "  # " << n->name() << "\n";
    for (Graph* sub : n->subgraphs()) print_graph(*sub, os, indent + "    ");
  }
  os << indent << "  return ";
  for (size_t i = 0; i < g.outputs().size(); ++i) os << (i ? ", " : "") << "%" << g.outputs()[i]->name();
  os << "\n" << indent << "}\n";
}

}  // namespace

std::string to_text(const Graph& graph) {
  std::ostringstream os;
  print_graph(graph, os, "");
  return os.str();
}

}  // namespace kiln::ir
