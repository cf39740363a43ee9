// ONNX ModelProto -> Kiln IR: model checks and opsets, graphs (inputs, initializers,
// value types, nodes, attributes, subgraphs with outer-scope reads), the unsupported-op
// report, and the import entry points.
#include "frontend/onnx/onnx_importer.h"

#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "frontend/onnx/function_inliner.h"
#include "frontend/onnx/tensor_proto.h"
#include "ops/registry.h"

namespace kiln::frontend {

namespace {

// Oldest default-domain opset Kiln imports. Ops register their legacy versions (opsets
// 1..6: legacy broadcast/axis attributes, consumed_inputs, is_test) where they differ.
constexpr int64_t kMinOpset = 1;

using ir::Value;

std::string normalize_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }
const char* domain_label(const std::string& d) { return d.empty() ? "ai.onnx" : d.c_str(); }

// The names defined in one graph being built, with a link to the enclosing graph's scope
// so that subgraphs can resolve outer-scope reads.
struct Scope {
  ir::Graph* graph;
  const Scope* parent;
};

class Importer {
 public:
  Importer(std::map<std::string, int64_t> opsets, int64_t ir_version, std::string external_data_dir)
      : opsets_(std::move(opsets)), ir_version_(ir_version) {
    tensor_ctx_.external_data_dir = std::move(external_data_dir);
  }

  // Reserves every node name given in the model (subgraphs too), so that names generated
  // for unnamed nodes never collide with a name that appears later.
  void reserve_names(const onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      if (!n.name().empty()) given_names_.insert(n.name());
      for (const auto& a : n.attribute()) {
        if (a.has_g()) reserve_names(a.g());
        for (const auto& sub : a.graphs()) reserve_names(sub);
      }
    }
  }

  Status convert_graph(const onnx::GraphProto& gp, ir::Graph& g, const Scope* parent);

 private:
  Expected<ir::TensorType> convert_type(const onnx::TypeProto& tp, const std::string& what,
                                        bool required);
  Status apply_value_info(const onnx::ValueInfoProto& vi, ir::Graph& g, bool required,
                          const char* role);
  Value* resolve(const std::string& name, const Scope& scope);
  Status convert_attribute(const onnx::AttributeProto& ap, const std::string& node_label,
                           const Scope& scope, ir::Attribute* out);
  Status convert_node(const onnx::NodeProto& np, const Scope& scope);
  std::string unique_node_name(const onnx::NodeProto& np);

  std::map<std::string, int64_t> opsets_;
  int64_t ir_version_;
  TensorProtoContext tensor_ctx_;
  std::unordered_set<std::string> given_names_;
  std::unordered_set<std::string> used_names_;
  std::unordered_map<std::string, int64_t> name_counters_;
};

// A tensor type's element type and shape; `what` names the value in errors.
Expected<ir::TensorType> tensor_type_of(const onnx::TypeProto::Tensor& tt, const std::string& what) {
  ir::TensorType t;
  KILN_ASSIGN_OR_RETURN(t.dtype, dtype_from_onnx(tt.elem_type(), what));
  if (!tt.has_shape()) return t;  // unknown rank
  std::vector<Dim> dims;
  dims.reserve(static_cast<size_t>(tt.shape().dim_size()));
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      dims.emplace_back(d.dim_value());
    else if (d.has_dim_param() && !d.dim_param().empty())
      dims.push_back(Dim::symbolic(d.dim_param()));
    else
      dims.emplace_back();  // unknown extent (some exporters write -1 for it)
  }
  t.shape = Shape(std::move(dims));
  return t;
}

const char* type_case_name(const onnx::TypeProto& tp) {
  return tp.has_tensor_type()          ? "a tensor"
         : tp.has_sequence_type()      ? "a sequence"
         : tp.has_map_type()           ? "a map"
         : tp.has_optional_type()      ? "an optional"
         : tp.has_sparse_tensor_type() ? "a sparse tensor"
                                       : "a non-tensor value";
}

// A sequence's element type: a tensor (possibly untyped: the sequence is then typed by
// inference). Sequences of sequences, maps or optionals are not supported.
Expected<ir::TensorType> sequence_type_of(const onnx::TypeProto::Sequence& st, const std::string& what) {
  ir::TensorType t;
  if (st.has_elem_type() && st.elem_type().value_case() != onnx::TypeProto::VALUE_NOT_SET) {
    if (!st.elem_type().has_tensor_type())
      return unsupported("%s is a sequence of %s; Kiln sequences hold tensors", what.c_str(),
                         type_case_name(st.elem_type()));
    KILN_ASSIGN_OR_RETURN(t, tensor_type_of(st.elem_type().tensor_type(), what));
  }
  t.kind = ir::TypeKind::kSequence;
  return t;
}

// Tensors, sequences of tensors and optionals of either. `required` is true for graph
// inputs and outputs: a type Kiln cannot represent there is an error; elsewhere (value_info)
// it is left to inference.
Expected<ir::TensorType> convert_type_proto(const onnx::TypeProto& tp, const std::string& what,
                                            bool required) {
  ir::TensorType t;
  if (tp.value_case() == onnx::TypeProto::VALUE_NOT_SET) return t;  // untyped: inference fills it
  Expected<ir::TensorType> converted = unsupported("%s is %s; Kiln values are tensors, sequences of tensors "
                                                   "and optionals of either",
                                                   what.c_str(), type_case_name(tp));
  if (tp.has_tensor_type()) {
    converted = tensor_type_of(tp.tensor_type(), what);
  } else if (tp.has_sequence_type()) {
    converted = sequence_type_of(tp.sequence_type(), what);
  } else if (tp.has_optional_type()) {
    const onnx::TypeProto& inner = tp.optional_type().elem_type();
    if (inner.has_tensor_type()) {
      converted = tensor_type_of(inner.tensor_type(), what);
      if (converted.ok()) converted->kind = ir::TypeKind::kOptionalTensor;
    } else if (inner.has_sequence_type()) {
      converted = sequence_type_of(inner.sequence_type(), what);
      if (converted.ok()) converted->kind = ir::TypeKind::kOptionalSequence;
    } else {
      converted = unsupported("%s is an optional of %s; Kiln optionals hold tensors or sequences of tensors",
                              what.c_str(), type_case_name(inner));
    }
  }
  if (!converted.ok() && !required && converted.status().code() == StatusCode::kUnsupported) return t;
  return converted;
}

Expected<ir::TensorType> Importer::convert_type(const onnx::TypeProto& tp, const std::string& what,
                                                bool required) {
  return convert_type_proto(tp, what, required);
}

Status Importer::apply_value_info(const onnx::ValueInfoProto& vi, ir::Graph& g, bool required,
                                  const char* role) {
  Value* v = g.find_value(vi.name());
  if (!v) return ok_status();
  if (!vi.has_type()) return ok_status();
  KILN_ASSIGN_OR_RETURN(
      ir::TensorType t,
      convert_type(vi.type(), std::string(role) + " '" + vi.name() + "'", required));
  if (t.dtype != DataType::kUndefined) v->type().dtype = t.dtype;
  if (t.shape.has_rank()) v->type().shape = t.shape;
  // A declared kind is kept even when its element type is left to inference.
  if (!(t.is_tensor() && t.dtype == DataType::kUndefined && !t.shape.has_rank())) v->type().kind = t.kind;
  return ok_status();
}

ir::Value* Importer::resolve(const std::string& name, const Scope& scope) {
  if (Value* v = scope.graph->find_value(name)) return v;
  if (!scope.parent) return nullptr;
  Value* outer = resolve(name, *scope.parent);
  if (!outer) return nullptr;
  // Each graph between the definition and the reader gets its own outer-scope value, so
  // every level keeps the value alive while its nodes run.
  Value* v = *scope.graph->add_value(name);
  v->set_outer_scope(true);
  v->type() = outer->type();
  return v;
}

std::string Importer::unique_node_name(const onnx::NodeProto& np) {
  if (!np.name().empty() && used_names_.insert(np.name()).second) return np.name();
  // Unnamed, or a name used twice: "<name or op type>_N" with the first free N.
  std::string base = np.name().empty() ? np.op_type() : np.name();
  int64_t& counter = name_counters_[base];
  for (;;) {
    std::string candidate = base + "_" + std::to_string(counter++);
    if (!given_names_.count(candidate) && used_names_.insert(candidate).second) return candidate;
  }
}

Status Importer::convert_attribute(const onnx::AttributeProto& ap, const std::string& node_label,
                                   const Scope& scope, ir::Attribute* out) {
  const std::string what = "attribute '" + ap.name() + "' of node " + node_label;
  if (ap.has_ref_attr_name() && !ap.ref_attr_name().empty())
    return invalid_argument("%s refers to function attribute '%s' outside a function body",
                       what.c_str(), ap.ref_attr_name().c_str());
  using AP = onnx::AttributeProto;
  AP::AttributeType type = ap.type();
  if (type == AP::UNDEFINED) {
    // IR version 1 files have no attribute type; take it from the field that is set.
    if (ap.has_f())
      type = AP::FLOAT;
    else if (ap.has_i())
      type = AP::INT;
    else if (ap.has_s())
      type = AP::STRING;
    else if (ap.has_t())
      type = AP::TENSOR;
    else if (ap.has_g())
      type = AP::GRAPH;
    else if (ap.has_sparse_tensor())
      type = AP::SPARSE_TENSOR;
    else if (ap.floats_size())
      type = AP::FLOATS;
    else if (ap.ints_size())
      type = AP::INTS;
    else if (ap.strings_size())
      type = AP::STRINGS;
    else if (ap.tensors_size())
      type = AP::TENSORS;
    else if (ap.graphs_size())
      type = AP::GRAPHS;
    else
      return invalid_argument("%s has no type and no value", what.c_str());
  }
  auto subgraph = [&](const onnx::GraphProto& gp,
                      const std::string& fallback_name) -> Expected<std::shared_ptr<ir::Graph>> {
    auto g = std::make_shared<ir::Graph>(gp.name().empty() ? fallback_name : gp.name());
    KILN_RETURN_IF_ERROR(convert_graph(gp, *g, &scope), "in %s", what.c_str());
    return g;
  };
  ir::Attribute& a = *out;
  switch (type) {
    case AP::FLOAT:
      a = ir::Attribute::from_float(ap.f());
      return ok_status();
    case AP::INT:
      a = ir::Attribute::from_int(ap.i());
      return ok_status();
    case AP::STRING:
      a = ir::Attribute::from_string(ap.s());
      return ok_status();
    case AP::FLOATS:
      a = ir::Attribute::from_floats(std::vector<float>(ap.floats().begin(), ap.floats().end()));
      return ok_status();
    case AP::INTS:
      a = ir::Attribute::from_ints(std::vector<int64_t>(ap.ints().begin(), ap.ints().end()));
      return ok_status();
    case AP::STRINGS:
      a.kind = ir::AttrKind::kStrings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      return ok_status();
    case AP::TENSOR: {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(ap.t(), tensor_ctx_, what));
      a = ir::Attribute::from_tensor(std::move(t));
      return ok_status();
    }
    case AP::TENSORS:
      a.kind = ir::AttrKind::kTensors;
      for (int i = 0; i < ap.tensors_size(); ++i) {
        KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(ap.tensors(i), tensor_ctx_,
                                                          what + " tensor " + std::to_string(i)));
        a.tensors.push_back(std::move(t));
      }
      return ok_status();
    case AP::GRAPH: {
      KILN_ASSIGN_OR_RETURN(auto g, subgraph(ap.g(), ap.name()));
      a = ir::Attribute::from_graph(std::move(g));
      return ok_status();
    }
    case AP::GRAPHS:
      a.kind = ir::AttrKind::kGraphs;
      for (int i = 0; i < ap.graphs_size(); ++i) {
        KILN_ASSIGN_OR_RETURN(auto g, subgraph(ap.graphs(i), ap.name() + "_" + std::to_string(i)));
        a.graphs.push_back(std::move(g));
      }
      return ok_status();
    case AP::SPARSE_TENSOR:
    case AP::SPARSE_TENSORS:
      return unsupported("%s is a sparse tensor; sparse tensors are not supported", what.c_str());
    case AP::TYPE_PROTO:
    case AP::TYPE_PROTOS:
      return unsupported("%s is a type; type attributes are not supported", what.c_str());
    default:
      return invalid_argument("%s has unknown attribute type %d", what.c_str(),
                              static_cast<int>(type));
  }
}

Status Importer::convert_node(const onnx::NodeProto& np, const Scope& scope) {
  ir::Graph& g = *scope.graph;
  const std::string name = unique_node_name(np);
  const std::string domain = normalize_domain(np.domain());
  const std::string label =
      "'" + name + "' (" + (domain.empty() ? "" : domain + ".") + np.op_type() + ")";
  if (np.op_type().empty()) return invalid_argument("node '%s' has no op_type", name.c_str());
  auto opset = opsets_.find(domain);
  if (opset == opsets_.end())
    return invalid_argument(
        "node %s is in domain '%s', which the model does not import (no opset_import "
        "entry)",
        label.c_str(), domain_label(domain));
  std::vector<Value*> inputs;
  inputs.reserve(static_cast<size_t>(np.input_size()));
  for (int i = 0; i < np.input_size(); ++i) {
    const std::string& in = np.input(i);
    if (in.empty()) {
      inputs.push_back(nullptr);  // omitted optional input
      continue;
    }
    Value* v = resolve(in, scope);
    if (!v)
      return invalid_argument(
          "node %s input %d '%s' is not defined by any node, graph input or initializer%s",
          label.c_str(), i, in.c_str(), scope.parent ? " (nor by an enclosing graph)" : "");
    inputs.push_back(v);
  }
  std::vector<Value*> outputs;
  outputs.reserve(static_cast<size_t>(np.output_size()));
  for (const std::string& out : np.output())
    outputs.push_back(out.empty() ? nullptr : g.find_value(out));
  ir::AttributeMap attrs;
  std::optional<ir::TensorType> optional_type;
  for (const auto& ap : np.attribute()) {
    if (ap.name().empty())
      return invalid_argument("node %s has an attribute with no name", label.c_str());
    if (attrs.count(ap.name()) || (optional_type && ap.name() == "type"))
      return invalid_argument("node %s has attribute '%s' twice", label.c_str(), ap.name().c_str());
    // Optional's 'type' (a TypeProto) only types its output, so it becomes that output's
    // type instead of an attribute (the IR has no type-valued attributes).
    if (domain.empty() && np.op_type() == "Optional" && ap.name() == "type" &&
        (ap.type() == onnx::AttributeProto::TYPE_PROTO || ap.has_tp())) {
      KILN_ASSIGN_OR_RETURN(
          ir::TensorType t,
          convert_type(ap.tp(), "attribute 'type' of node " + label, /*required=*/true));
      if (t.kind != ir::TypeKind::kTensor && t.kind != ir::TypeKind::kSequence)
        return unsupported("node %s: attribute 'type' is %s; an Optional holds a tensor or a sequence",
                           label.c_str(), t.to_string().c_str());
      t.kind = t.kind == ir::TypeKind::kTensor ? ir::TypeKind::kOptionalTensor
                                               : ir::TypeKind::kOptionalSequence;
      optional_type = t;
      continue;
    }
    KILN_RETURN_IF_ERROR(convert_attribute(ap, label, scope, &attrs[ap.name()]));
  }
  if (optional_type && !outputs.empty() && outputs[0]) outputs[0]->type() = *optional_type;
  ir::Node* n =
      g.add_node(name, np.op_type(), domain, opset->second, std::move(inputs), std::move(outputs));
  n->attrs() = std::move(attrs);
  return ok_status();
}

Status Importer::convert_graph(const onnx::GraphProto& gp, ir::Graph& g, const Scope* parent) {
  g.opset_imports() = opsets_;
  if (gp.sparse_initializer_size() > 0)
    return unsupported(
        "graph '%s' has sparse initializers ('%s'); sparse tensors are not supported",
        g.name().c_str(), gp.sparse_initializer(0).values().name().c_str());
  // Every name the graph defines is created first, so that nodes may appear in any
  // order and subgraphs can resolve reads of values produced later in this graph.
  std::unordered_map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& tp : gp.initializer()) {
    if (tp.name().empty())
      return invalid_argument("graph '%s' has an initializer with no name", g.name().c_str());
    if (!initializers.emplace(tp.name(), &tp).second)
      return invalid_argument("graph '%s' has two initializers named '%s'", g.name().c_str(),
                              tp.name().c_str());
  }
  std::unordered_set<std::string> input_names;
  for (const auto& vi : gp.input()) {
    const std::string what = "graph '" + g.name() + "' input '" + vi.name() + "'";
    if (vi.name().empty())
      return invalid_argument("graph '%s' has an input with no name", g.name().c_str());
    if (!input_names.insert(vi.name()).second)
      return invalid_argument("%s is listed twice", what.c_str());
    // Before IR version 4 every initializer had to be listed as an input too; such inputs
    // are plain constants. From IR 4 on, an input with an initializer is an overridable
    // constant: a graph input whose default is the initializer.
    if (initializers.count(vi.name()) && ir_version_ < 4) continue;
    KILN_ASSIGN_OR_RETURN(Value * v, g.add_value(vi.name()), "in graph '%s'", g.name().c_str());
    g.inputs().push_back(v);
    KILN_RETURN_IF_ERROR(apply_value_info(vi, g, /*required=*/true, "graph input"));
  }
  for (const auto& tp : gp.initializer()) {
    Value* v = g.find_value(tp.name());
    if (!v) {
      KILN_ASSIGN_OR_RETURN(v, g.add_value(tp.name()), "in graph '%s'", g.name().c_str());
    }
    KILN_ASSIGN_OR_RETURN(Tensor t,
                          tensor_from_proto(tp, tensor_ctx_, "initializer '" + tp.name() + "'"));
    if (v->dtype() != DataType::kUndefined && v->dtype() != t.dtype())
      return invalid_argument("graph input '%s' is declared %s but its initializer is %s",
                              tp.name().c_str(), dtype_name(v->dtype()), t.description().c_str());
    const Shape& declared = v->shape();
    bool shape_ok = !declared.has_rank() || declared.rank() == t.rank();
    for (int i = 0; shape_ok && declared.has_rank() && i < declared.rank(); ++i)
      shape_ok = !declared[i].is_static() || declared[i].value == t.dim(i);
    if (!shape_ok)
      return invalid_argument("graph input '%s' is declared %s but its initializer is %s",
                              tp.name().c_str(), v->type().to_string().c_str(),
                              t.description().c_str());
    if (v->dtype() == DataType::kUndefined) v->type().dtype = t.dtype();
    if (!v->shape().has_rank()) v->type().shape = t.shape();
    v->set_initializer(std::move(t));
  }
  for (const auto& np : gp.node()) {
    for (const std::string& out : np.output()) {
      if (out.empty()) continue;
      auto added = g.add_value(out);
      if (!added.ok())
        return invalid_argument(
            "node '%s' (%s) output '%s' is already defined (by another node, a graph input "
            "or an initializer)",
            np.name().c_str(), np.op_type().c_str(), out.c_str());
    }
  }
  for (const auto& vi : gp.value_info())
    KILN_RETURN_IF_ERROR(apply_value_info(vi, g, /*required=*/false, "value"));

  Scope scope{&g, parent};
  for (const auto& np : gp.node())
    KILN_RETURN_IF_ERROR(convert_node(np, scope), "in graph '%s'", g.name().c_str());

  for (const auto& vi : gp.output()) {
    if (vi.name().empty())
      return invalid_argument("graph '%s' has an output with no name", g.name().c_str());
    Value* v = resolve(vi.name(), scope);
    if (!v)
      return invalid_argument(
          "graph '%s' output '%s' is not produced by any node, graph input or initializer",
          g.name().c_str(), vi.name().c_str());
    g.outputs().push_back(v);
    if (!v->is_outer_scope())
      KILN_RETURN_IF_ERROR(apply_value_info(vi, g, /*required=*/true, "graph output"));
  }
  return g.topological_sort();
}

void collect_unsupported(const ir::Graph& g, std::vector<std::string>& out) {
  const auto& registry = ops::OpRegistry::instance();
  for (const auto& n : g.nodes()) {
    if (!registry.find(n->domain(), n->op_type(), n->opset()))
      out.push_back(str_format("node '%s' op %s (domain %s, opset %lld)", n->name().c_str(),
                               n->op_type().c_str(), domain_label(n->domain()),
                               static_cast<long long>(n->opset())));
    for (const ir::Graph* sub : n->subgraphs()) collect_unsupported(*sub, out);
  }
}

// Reads the model's opset imports, checking the default domain's version.
Expected<std::map<std::string, int64_t>> read_opsets(const onnx::ModelProto& model,
                                                     const std::string& source) {
  std::map<std::string, int64_t> opsets;
  for (const auto& op : model.opset_import()) {
    std::string domain = normalize_domain(op.domain());
    int64_t& v = opsets[domain];
    v = std::max(v, op.version());
  }
  // IR versions 1 and 2 predate opset_import and mean opset 1.
  if (!opsets.count("") && model.ir_version() < 3) opsets[""] = 1;
  auto it = opsets.find("");
  if (it != opsets.end() && (it->second < kMinOpset || it->second > ops::kMaxOpset))
    return unsupported(
        "%s: the model uses ONNX opset %lld; Kiln imports opsets %lld to %lld (convert the model "
        "with onnx.version_converter)",
        source.c_str(), static_cast<long long>(it->second), static_cast<long long>(kMinOpset),
        static_cast<long long>(ops::kMaxOpset));
  return opsets;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Expected<ImportResult> import_model(const void* data, size_t size, const ImportOptions& options,
                                    const std::string& source, std::string external_data_dir) {
  if (size > static_cast<size_t>(INT_MAX))
    return unsupported(
        "%s: the model is %zu bytes; a single ONNX protobuf is limited to 2 GB (store the weights "
        "as external data)",
        source.c_str(), size);
  onnx::ModelProto model;
  bool parsed = false;
  try {
    parsed = model.ParseFromArray(data, static_cast<int>(size));
  } catch (const std::exception& e) {
    parsed = false;
  } catch (...) {
    parsed = false;
  }
  if (!parsed)
    return invalid_argument("%s: not a valid ONNX model (protobuf parse failed)", source.c_str());
  if (!model.has_graph())
    return invalid_argument("%s: not a valid ONNX model (it has no graph)", source.c_str());
  KILN_RETURN_IF_ERROR(inline_model_functions(model), "%s", source.c_str());
  KILN_ASSIGN_OR_RETURN(auto opsets, read_opsets(model, source));

  ImportResult result;
  result.ir_version = model.ir_version();
  result.producer = model.producer_name();
  if (!model.producer_version().empty())
    result.producer += (result.producer.empty() ? "" : " ") + model.producer_version();
  result.source_hash = hex64(XXH3_64bits(data, size));

  Importer importer(
      std::move(opsets), model.ir_version(),
      options.external_data_dir.empty() ? std::move(external_data_dir) : options.external_data_dir);
  importer.reserve_names(model.graph());
  auto graph =
      std::make_shared<ir::Graph>(model.graph().name().empty() ? "main" : model.graph().name());
  KILN_RETURN_IF_ERROR(importer.convert_graph(model.graph(), *graph, nullptr), "%s",
                       source.c_str());
  KILN_RETURN_IF_ERROR(ir::verify(*graph), "%s", source.c_str());

  graph->metadata()["producer"] = result.producer;
  graph->metadata()["source_hash"] = result.source_hash;
  if (!model.doc_string().empty()) graph->metadata()["doc_string"] = model.doc_string();

  if (options.require_supported_ops) {
    std::vector<std::string> bad = list_unsupported_nodes(*graph);
    if (!bad.empty()) {
      // One line, every node: the CLI prints errors as single lines.
      std::string msg =
          str_format("unsupported operators (%zu node%s): ", bad.size(), bad.size() == 1 ? "" : "s");
      for (size_t i = 0; i < bad.size(); ++i) msg += (i ? "; " : "") + bad[i];
      return Status(StatusCode::kUnsupported, std::move(msg)).add_context("%s", source.c_str());
    }
  }
  result.graph = std::move(graph);
  return result;
}

}  // namespace

std::vector<std::string> list_unsupported_nodes(const ir::Graph& graph) {
  std::vector<std::string> out;
  collect_unsupported(graph, out);
  return out;
}

Expected<ImportResult> import_onnx_bytes(const void* data, size_t size,
                                         const ImportOptions& options) {
  if (!data && size) return invalid_argument("import_onnx_bytes: null data with size %zu", size);
  // Bytes have no folder: external data needs options.external_data_dir.
  return import_model(data ? data : "", size, options, "model bytes", std::string());
}

Expected<ImportResult> import_onnx_file(const std::string& path, const ImportOptions& options) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return not_found("cannot open ONNX model '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument("'%s' is not a regular file", path.c_str());
  size_t size = static_cast<size_t>(st.st_size);
  if (size > static_cast<size_t>(INT_MAX))
    return unsupported(
        "%s: the model is %zu bytes; a single ONNX protobuf is limited to 2 GB (store the weights "
        "as external data)",
        path.c_str(), size);
  std::string bytes(size, '\0');
  if (size && std::fread(bytes.data(), 1, size, f.get()) != size)
    return data_loss("%s: reading %zu bytes failed", path.c_str(), size);
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return import_model(bytes.data(), bytes.size(), options, path, std::move(dir));
}

}  // namespace kiln::frontend
