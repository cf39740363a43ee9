// `kiln inspect`: what a model holds: inputs, outputs, op histogram, opsets, weights,
// producer and target.
#include <algorithm>
#include <cstdio>
#include <map>

#include "ops/aipp.h"
#include "tools/inspect_report.h"
#include "tools/node_table.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
  bool nodes = false;  // --nodes: the node table (tools/node_table.h)
};

int run_inspect(const InspectArgs& args) {
  auto inspected = inspect_model(args.model);
  if (!inspected.ok()) return report_error("inspect", inspected.status().to_string());
  if (args.json) {
    std::printf("%s\n", inspect_json(args.model, *inspected, args.nodes).dump(2).c_str());
    return 0;
  }
  const ir::Graph* graph = inspected->graph.get();
  const model::ModelInfo& info = inspected->info;
  const std::vector<std::string>& unsupported = inspected->unsupported;
  const model::LoadedModel& kiln_model = inspected->kiln_model;
  const bool is_kiln = inspected->is_kiln;
  std::map<std::string, int> hist;
  size_t nodes = 0, subgraph_nodes = 0;
  count_ops(*graph, hist, &nodes, &subgraph_nodes);
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
  if (const size_t packed = graph->prepacked_bytes())
    std::printf("pre-packed weights: %.2f MB, in the layouts this CPU's kernels use (the %.2f MB of originals they "
                "replace stay in the file's cold tail, not read at load)\n",
                static_cast<double>(packed) / 1e6, static_cast<double>(graph->cold_weight_bytes()) / 1e6);
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
