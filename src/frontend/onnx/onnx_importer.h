// ONNX -> Kiln IR. Reads a ModelProto (opsets 1 to the newest), its initializers (raw and
// typed fields, external data files next to the model), Constant nodes, symbolic input
// dims and graph inputs that have initializers (overridable constants), and subgraphs.
//
// Errors are Status values: a malformed protobuf, a dangling input name, a cycle, an
// external-data file that is missing or too short. Unsupported ops are reported all at
// once: one line per node with its name, op type, domain and opset.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::frontend {

struct ImportOptions {
  // Directory that external-data locations are relative to (default: the model's folder).
  std::string external_data_dir;
  // If true (default), fail when any node has no registered op schema, listing them all.
  bool require_supported_ops = true;
};

struct ImportResult {
  std::shared_ptr<ir::Graph> graph;
  std::string producer;        // producer_name + " " + producer_version
  int64_t ir_version = 0;
  std::string source_hash;     // hex XXH3-64 of the model bytes
};

Expected<ImportResult> import_onnx_file(const std::string& path, const ImportOptions& options = {});
Expected<ImportResult> import_onnx_bytes(const void* data, size_t size, const ImportOptions& options = {});

// Every node (subgraphs included) whose op has no schema at its opset:
// "node 'x' op Foo (domain ai.onnx, opset 17)". Empty if all are supported.
std::vector<std::string> list_unsupported_nodes(const ir::Graph& graph);

}  // namespace kiln::frontend
