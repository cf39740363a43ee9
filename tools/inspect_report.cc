// What `kiln inspect` shows of a model file (tools/inspect_report.h).
#include "tools/inspect_report.h"

#include <utility>

#include "frontend/onnx/onnx_importer.h"
#include "ops/aipp.h"
#include "tools/model_source.h"
#include "tools/node_table.h"

namespace kiln::tools {
namespace {

nlohmann::json values_json(const std::vector<ir::Value*>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (const ir::Value* v : values) {
    nlohmann::json dims = nlohmann::json::array();
    if (v->shape().has_rank())
      for (const Dim& d : v->shape().dims()) dims.push_back(d.is_static() ? nlohmann::json(d.value) : nlohmann::json(d.to_string()));
    out.push_back({{"name", v->name()},
                   {"dtype", dtype_name(v->dtype())},
                   {"shape", v->shape().has_rank() ? dims : nlohmann::json(nullptr)},
                   {"has_default", v->has_initializer()}});
  }
  return out;
}

}  // namespace

Expected<InspectedModel> inspect_model(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ModelKind kind, sniff_model_kind(path));
  InspectedModel m;
  m.is_kiln = kind == ModelKind::kKiln;
  if (m.is_kiln) {
    KILN_ASSIGN_OR_RETURN(model::LoadedModel loaded, model::load_model(path));
    m.graph = loaded.graph;
    m.info = loaded.info;
    m.kiln_model = std::move(loaded);
  } else {
    frontend::ImportOptions options;
    options.require_supported_ops = false;
    KILN_ASSIGN_OR_RETURN(auto imported, frontend::import_onnx_file(path, options));
    m.graph = imported.graph;
    m.info.producer = imported.producer;
    m.info.source_hash = imported.source_hash;
    m.unsupported = frontend::list_unsupported_nodes(*m.graph);
  }
  return m;
}

void count_ops(const ir::Graph& g, std::map<std::string, int>& hist, size_t* nodes, size_t* subgraph_nodes) {
  for (const auto& n : g.nodes()) {
    std::string key = n->domain().empty() ? n->op_type() : n->domain() + "." + n->op_type();
    const std::string precision = n->attr_string("precision", "fp32");
    if (precision != "fp32") key += " [" + precision + "]";
    ++hist[key];
    ++*nodes;
    for (const ir::Graph* sub : n->subgraphs()) {
      size_t inner = 0;
      count_ops(*sub, hist, &inner, subgraph_nodes);
      *subgraph_nodes += inner;
    }
  }
}

nlohmann::json inspect_json(const std::string& path, const InspectedModel& m, bool node_table) {
  std::map<std::string, int> hist;
  size_t nodes = 0, subgraph_nodes = 0;
  count_ops(*m.graph, hist, &nodes, &subgraph_nodes);
  const ir::Graph* graph = m.graph.get();
  const model::ModelInfo& info = m.info;
  const model::LoadedModel& kiln_model = m.kiln_model;
  nlohmann::json j;
  j["file"] = path;
  j["format"] = m.is_kiln ? "kiln" : "onnx";
  j["inputs"] = values_json(graph->inputs());
  j["outputs"] = values_json(graph->outputs());
  for (const ir::Value* v : graph->inputs())
    if (const ir::Node* aipp = ops::aipp_node_for_input(*graph, v))
      j["aipp"][v->name()] = ops::aipp_description(*aipp);
  j["nodes"] = nodes;                    // the graph's own, as kiln compile counts them
  j["subgraph_nodes"] = subgraph_nodes;  // inside If/Loop/Scan bodies (also in op_histogram)
  j["op_histogram"] = hist;
  j["opsets"] = graph->opset_imports();
  j["weight_bytes"] = graph->weight_bytes();
  j["prepacked_bytes"] = graph->prepacked_bytes();
  j["cold_weight_bytes"] = graph->cold_weight_bytes();
  j["producer"] = info.producer;
  j["source_hash"] = info.source_hash;
  if (m.is_kiln) {
    j["format_version"] = info.format_version;
    j["kiln_version"] = info.kiln_version;
    j["source_name"] = info.source_name;
    j["target"] = {{"arch", info.target_arch}, {"features", info.target_features}};
    j["checksum"] = str_format("%016llx", (unsigned long long)info.checksum);
    j["file_bytes"] = kiln_model.file_size;
    j["weight_section_bytes"] = kiln_model.weight_bytes;
    if (kiln_model.bucket_kind != model::BucketKind::kNone) {
      nlohmann::json buckets = nlohmann::json::array();
      for (const model::LoadedVariant& v : kiln_model.variants)
        buckets.push_back({{"shapes", v.shapes}, {"nodes", v.graph->nodes().size()}});
      j["buckets"] = {{"kind", model::bucket_kind_name(kiln_model.bucket_kind)},
                      {"variants", std::move(buckets)},
                      {"pad_values", kiln_model.pad_values},
                      {"dynamic_graph", kiln_model.dynamic_graph != nullptr}};
    }
  } else {
    j["unsupported_nodes"] = m.unsupported;
  }
  if (node_table) j["node_table"] = node_table_json(*graph);
  return j;
}

}  // namespace kiln::tools
