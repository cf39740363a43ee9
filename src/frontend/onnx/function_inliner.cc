// Inlining of model-local ONNX functions into the graphs that call them.
#include "frontend/onnx/function_inliner.h"

#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace kiln::frontend {
namespace {

using NodeList = google::protobuf::RepeatedPtrField<onnx::NodeProto>;
using FunctionMap = std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*>;

std::string normalize(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

std::string call_label(const onnx::NodeProto& n) {
  return "'" + (n.name().empty() ? n.op_type() : n.name()) + "' (" +
         (n.domain().empty() ? "" : n.domain() + ".") + n.op_type() + ")";
}

// How one call renames the body's values: formal parameters to the call's names, values
// the body produces to prefixed names; anything else (names local to a subgraph) stays.
struct Renaming {
  std::unordered_map<std::string, std::string> formal;
  std::unordered_set<std::string> produced;
  std::string prefix;

  std::string operator()(const std::string& name) const {
    if (name.empty()) return name;
    auto it = formal.find(name);
    if (it != formal.end()) return it->second;
    return produced.count(name) ? prefix + name : name;
  }
};

void rename_graph(onnx::GraphProto& g, const Renaming& rename);

// Renames a body node's value references (and those of its subgraphs, which may read body
// values from their enclosing scope).
void rename_node(onnx::NodeProto& n, const Renaming& rename) {
  for (std::string& in : *n.mutable_input()) in = rename(in);
  for (std::string& out : *n.mutable_output()) out = rename(out);
  for (onnx::AttributeProto& a : *n.mutable_attribute()) {
    if (a.has_g()) rename_graph(*a.mutable_g(), rename);
    for (onnx::GraphProto& sub : *a.mutable_graphs()) rename_graph(sub, rename);
  }
}

void rename_graph(onnx::GraphProto& g, const Renaming& rename) {
  for (onnx::NodeProto& n : *g.mutable_node()) rename_node(n, rename);
  // A subgraph output may be a body value read from the enclosing scope.
  for (onnx::ValueInfoProto& out : *g.mutable_output()) out.set_name(rename(out.name()));
}

void bind_attributes_in_graph(onnx::GraphProto& g, const onnx::NodeProto& call);

// Replaces attributes that refer to a function attribute by the call's value of it; an
// attribute the call does not give is dropped (the op's default then applies).
void bind_attributes(onnx::NodeProto& n, const onnx::NodeProto& call) {
  google::protobuf::RepeatedPtrField<onnx::AttributeProto> bound;
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.ref_attr_name().empty()) {
      onnx::AttributeProto* copy = bound.Add();
      *copy = a;
      if (copy->has_g()) bind_attributes_in_graph(*copy->mutable_g(), call);
      for (onnx::GraphProto& sub : *copy->mutable_graphs()) bind_attributes_in_graph(sub, call);
      continue;
    }
    for (const onnx::AttributeProto& given : call.attribute()) {
      if (given.name() != a.ref_attr_name()) continue;
      onnx::AttributeProto* copy = bound.Add();
      *copy = given;
      copy->set_name(a.name());
      break;
    }
  }
  *n.mutable_attribute() = std::move(bound);
}

void bind_attributes_in_graph(onnx::GraphProto& g, const onnx::NodeProto& call) {
  for (onnx::NodeProto& n : *g.mutable_node()) bind_attributes(n, call);
}

class Inliner {
 public:
  explicit Inliner(const FunctionMap& functions) : functions_(functions) {}

  // Expands the calls among a graph's nodes and inside its subgraphs.
  Status expand_graph(onnx::GraphProto& g, int depth) {
    NodeList expanded;
    KILN_RETURN_IF_ERROR(expand_nodes(g.node(), &expanded, depth));
    *g.mutable_node() = std::move(expanded);
    return ok_status();
  }

 private:
  Status expand_nodes(const NodeList& nodes, NodeList* out, int depth) {
    for (const onnx::NodeProto& n : nodes) {
      auto it = functions_.find({normalize(n.domain()), n.op_type()});
      if (it != functions_.end()) {
        KILN_RETURN_IF_ERROR(expand_call(n, *it->second, out, depth));
        continue;
      }
      onnx::NodeProto* copy = out->Add();
      *copy = n;
      for (onnx::AttributeProto& a : *copy->mutable_attribute()) {
        if (a.has_g()) KILN_RETURN_IF_ERROR(expand_graph(*a.mutable_g(), depth));
        for (onnx::GraphProto& sub : *a.mutable_graphs()) KILN_RETURN_IF_ERROR(expand_graph(sub, depth));
      }
    }
    return ok_status();
  }

  Status expand_call(const onnx::NodeProto& call, const onnx::FunctionProto& fn, NodeList* out, int depth) {
    const std::string label = call_label(call);
    if (depth >= kMaxFunctionDepth)
      return invalid_argument("node %s: function calls nest deeper than %d (a recursive function?)",
                              label.c_str(), kMaxFunctionDepth);
    if (call.input_size() > fn.input_size() || call.output_size() > fn.output_size())
      return invalid_argument("node %s has %d inputs and %d outputs; function '%s' takes %d and %d", label.c_str(),
                              call.input_size(), call.output_size(), fn.name().c_str(), fn.input_size(),
                              fn.output_size());
    Renaming rename;
    rename.prefix = (call.name().empty() ? call.op_type() : call.name()) + "/__fn" + std::to_string(counter_++) + "/";
    for (int i = 0; i < fn.input_size(); ++i)
      rename.formal[fn.input(i)] = i < call.input_size() ? call.input(i) : std::string();
    // An output the call does not ask for stays a (prefixed) body value: later body nodes
    // may read it.
    for (int i = 0; i < fn.output_size(); ++i)
      if (i < call.output_size() && !call.output(i).empty()) rename.formal[fn.output(i)] = call.output(i);
    for (const onnx::NodeProto& n : fn.node())
      for (const std::string& o : n.output()) rename.produced.insert(o);
    for (int i = 0; i < fn.output_size(); ++i)
      if (!rename.formal.count(fn.output(i))) rename.produced.insert(fn.output(i));

    NodeList body;
    for (const onnx::NodeProto& n : fn.node()) {
      onnx::NodeProto* copy = body.Add();
      *copy = n;
      if (!copy->name().empty()) copy->set_name(rename.prefix + copy->name());
      rename_node(*copy, rename);
      bind_attributes(*copy, call);
    }
    KILN_RETURN_IF_ERROR(expand_nodes(body, out, depth + 1), "in function '%s' called by node %s",
                         fn.name().c_str(), label.c_str());
    return ok_status();
  }

  const FunctionMap& functions_;
  int64_t counter_ = 0;
};

}  // namespace

Status inline_model_functions(onnx::ModelProto& model) {
  if (model.functions_size() == 0) return ok_status();
  FunctionMap functions;
  for (const onnx::FunctionProto& fn : model.functions()) {
    if (fn.name().empty()) return invalid_argument("a model-local function has no name");
    if (!functions.emplace(std::make_pair(normalize(fn.domain()), fn.name()), &fn).second)
      return invalid_argument("model-local function '%s' (domain '%s') is defined twice", fn.name().c_str(),
                              fn.domain().c_str());
  }
  std::map<std::string, int64_t> imported;
  for (const onnx::OperatorSetIdProto& op : model.opset_import()) imported[normalize(op.domain())] = op.version();
  for (const onnx::FunctionProto& fn : model.functions()) {
    for (const onnx::OperatorSetIdProto& op : fn.opset_import()) {
      if (imported.count(normalize(op.domain()))) continue;
      imported[normalize(op.domain())] = op.version();
      *model.add_opset_import() = op;
    }
  }
  Inliner inliner(functions);
  return inliner.expand_graph(*model.mutable_graph(), 0);
}

}  // namespace kiln::frontend
