// What `kiln inspect` shows of a model file, shared by the command and the Python package
// (kiln.inspect): the model opened without running anything, and its --json form.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "ir/graph.h"
#include "model/kiln_model.h"

namespace kiln::tools {

struct InspectedModel {
  bool is_kiln = false;
  std::shared_ptr<ir::Graph> graph;
  model::ModelInfo info;
  std::vector<std::string> unsupported;  // an .onnx's nodes without a kernel
  model::LoadedModel kiln_model;         // shape buckets and file size of a .kiln
};

// A .kiln is loaded (validated), an .onnx imported even with unsupported operators.
Expected<InspectedModel> inspect_model(const std::string& path);

// Op type -> nodes; a node computing in reduced precision (kiln compile --precision) counts
// as "op [bf16]" / "op [bf16x3]". `nodes` counts the graph's own nodes, `subgraph_nodes`
// those inside If/Loop/Scan bodies: kiln compile's "A -> B nodes" and its report count the
// graph's own nodes, so that is the number "nodes:" shows (issue 24: they disagreed).
void count_ops(const ir::Graph& g, std::map<std::string, int>& hist, size_t* nodes, size_t* subgraph_nodes);

// `kiln inspect --json`: file, format ("kiln" or "onnx"), inputs/outputs [{name, dtype,
// shape (open dims by name, null for an unknown rank), has_default}], aipp, nodes,
// subgraph_nodes, op_histogram, opsets, weight_bytes, producer, source_hash; for a .kiln
// also format_version, kiln_version, source_name, target, checksum, file_bytes,
// weight_section_bytes and buckets; for an .onnx unsupported_nodes. `node_table` adds the
// node table (tools/node_table.h).
nlohmann::json inspect_json(const std::string& path, const InspectedModel& m, bool node_table);

}  // namespace kiln::tools
