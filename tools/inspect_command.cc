// `kiln inspect`: what a model holds: inputs, outputs, op histogram, opsets, weights,
// producer and target.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "frontend/onnx/onnx_importer.h"
#include "ops/aipp.h"
#include "tools/model_source.h"
#include "tools/node_table.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
  bool nodes = false;  // --nodes: the node table (tools/node_table.h)
};

// Op type -> nodes; a node computing in reduced precision (kiln compile --precision) counts
// as "op [bf16]" / "op [bf16x3]". `nodes` counts the graph's own nodes, `subgraph_nodes`
// those inside If/Loop/Scan bodies: kiln compile's "A -> B nodes" and its report count the
// graph's own nodes, so that is the number "nodes:" shows (issue 24: they disagreed).
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

int run_inspect(const InspectArgs& args) {
  auto kind = sniff_model_kind(args.model);
  if (!kind.ok()) return report_error("inspect", kind.status().to_string());
  std::shared_ptr<ir::Graph> graph;
  model::ModelInfo info;
  std::vector<std::string> unsupported;
  model::LoadedModel kiln_model;  // shape buckets and file size of a .kiln
  if (*kind == ModelKind::kKiln) {
    auto loaded = model::load_model(args.model);
    if (!loaded.ok()) return report_error("inspect", loaded.status().to_string());
    graph = loaded->graph;
    info = loaded->info;
    kiln_model = std::move(loaded).value();
  } else {
    frontend::ImportOptions options;
    options.require_supported_ops = false;
    auto imported = frontend::import_onnx_file(args.model, options);
    if (!imported.ok()) return report_error("inspect", imported.status().to_string());
    graph = imported->graph;
    info.producer = imported->producer;
    info.source_hash = imported->source_hash;
    unsupported = frontend::list_unsupported_nodes(*graph);
  }
  std::map<std::string, int> hist;
  size_t nodes = 0, subgraph_nodes = 0;
  count_ops(*graph, hist, &nodes, &subgraph_nodes);
  const bool is_kiln = *kind == ModelKind::kKiln;

  if (args.json) {
    nlohmann::json j;
    j["file"] = args.model;
    j["format"] = is_kiln ? "kiln" : "onnx";
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
    j["producer"] = info.producer;
    j["source_hash"] = info.source_hash;
    if (is_kiln) {
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
      j["unsupported_nodes"] = unsupported;
    }
    if (args.nodes) j["node_table"] = node_table_json(*graph);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %s model\n", args.model.c_str(), is_kiln ? "Kiln offline" : "ONNX");
  if (!info.producer.empty()) std::printf("producer: %s\n", info.producer.c_str());
  if (is_kiln) {
    std::printf("format version %u, compiled by kiln %s from %s (source hash %s)\n", info.format_version,
                info.kiln_version.c_str(), info.source_name.c_str(), info.source_hash.c_str());
    std::string features;
    for (const auto& f : info.target_features) features += " " + f;
    std::printf("target: %s,%s\n", info.target_arch.c_str(), features.c_str());
    std::printf("checksum: %016llx\n", (unsigned long long)info.checksum);
  }
  std::string opsets;
  for (const auto& [domain, version] : graph->opset_imports())
    opsets += (opsets.empty() ? "" : ", ") + (domain.empty() ? std::string("ai.onnx") : domain) + " " + std::to_string(version);
  std::printf("opsets: %s\n", opsets.c_str());
  for (const ir::Value* v : graph->inputs()) {
    std::printf("input  %s: %s%s\n", v->name().c_str(), v->type().to_string().c_str(),
                v->has_initializer() ? " (has a default)" : "");
    if (const ir::Node* aipp = ops::aipp_node_for_input(*graph, v))
      std::printf("       %s\n", ops::aipp_description(*aipp).c_str());
  }
  for (const ir::Value* v : graph->outputs()) std::printf("output %s: %s\n", v->name().c_str(), v->type().to_string().c_str());
  std::printf("weights: %.2f MB\n", static_cast<double>(graph->weight_bytes()) / 1e6);
  if (is_kiln && kiln_model.bucket_kind != model::BucketKind::kNone) {
    // The inputs and ops above are the first bucket's; the weight section holds every
    // bucket's weights, each stored once.
    std::printf("shape buckets (%s, %zu; weight section %.2f MB, file %.2f MB):\n",
                model::bucket_kind_name(kiln_model.bucket_kind), kiln_model.variants.size(),
                static_cast<double>(kiln_model.weight_bytes) / 1e6, static_cast<double>(kiln_model.file_size) / 1e6);
    for (size_t k = 0; k < kiln_model.variants.size(); ++k) {
      std::string shapes;
      for (const auto& [name, dims] : kiln_model.variants[k].shapes) {
        auto pad = kiln_model.pad_values.find(name);
        shapes += (shapes.empty() ? "" : "  ") + name + dims_to_string(dims);
        if (k == 0 && pad != kiln_model.pad_values.end()) shapes += str_format(" (pad %g)", pad->second);
      }
      std::printf("  %zu: %s  (%zu nodes)\n", k + 1, shapes.c_str(), kiln_model.variants[k].graph->nodes().size());
    }
    if (kiln_model.dynamic_graph)
      std::printf("  dynamic graph for shapes no bucket fits: %zu nodes\n", kiln_model.dynamic_graph->nodes().size());
  }
  if (subgraph_nodes)
    std::printf("nodes: %zu (plus %zu in If/Loop/Scan bodies; the op counts below include them)\n", nodes,
                subgraph_nodes);
  else
    std::printf("nodes: %zu\n", nodes);
  std::vector<std::pair<std::string, int>> sorted(hist.begin(), hist.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [op, count] : sorted) std::printf("  %6d  %s\n", count, op.c_str());
  if (!unsupported.empty()) {
    std::printf("unsupported operators (%zu nodes):\n", unsupported.size());
    for (const auto& line : unsupported) std::printf("  %s\n", line.c_str());
  }
  if (args.nodes) {
    std::printf("node table (kernel: fast family, per shape when open dims are prepared at run time, or "
                "reference and why):\n");
    print_node_table(stdout, *graph);
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  app.add_option("model", args->model, "Model file (.onnx or .kiln)")->required();
  app.add_flag("--json", args->json, "Print the result as one JSON object");
  app.add_flag("--nodes", args->nodes,
               "List every node: op, kernel (fast, per shape, or reference and why), shapes and layout");
  return [args] { return run_inspect(*args); };
}

KILN_REGISTER_SUBCOMMAND("inspect", "Show a model's inputs, outputs, operators, weights and target", setup);

}  // namespace
}  // namespace kiln::tools
