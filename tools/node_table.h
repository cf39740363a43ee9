// `kiln inspect MODEL --nodes`: every node with its op, the kernel it runs on (fast, fast per
// input shape, or reference and why), its input and output shapes and its layout.
#pragma once

#include <cstdio>

#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace kiln::tools {

// One entry per node in execution order (subgraph nodes follow their parent, with `graph`
// naming the subgraph): {index, name, op, graph, kernel, per_shape, reason?, inputs
// [{name, type}], outputs [...], layout}.
nlohmann::json node_table_json(const ir::Graph& graph);

// The same as a table, one node per line.
void print_node_table(std::FILE* out, const ir::Graph& graph);

}  // namespace kiln::tools
