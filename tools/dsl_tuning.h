// The DSL kernels of a compiled graph and their tuned schedules (docs/dsl.md, "Tuning"): what
// kiln tune MODEL tunes and kiln compile --tuning-db applies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/tuning.h"
#include "ir/graph.h"
#include "ops/custom_expr.h"

namespace kiln::tools {

// A node that runs a DSL-generated kernel: a kiln.DslElementwise at the top level or inside a
// FusedElementwise's body (custom ops, docs/dsl.md).
struct DslKernelNode {
  ir::Node* node = nullptr;
  std::string label;      // the node, and the fused node holding it
  ops::CustomExpr expr;   // its bound compute
  int num_inputs = 0;
  std::string signature;  // kernels::dsl_tile_signature: the tuning database's op
  int64_t elements = 0;   // elements of its output per run (0 when not static)
};

// Every DSL-kernel node of `g` (and of FusedElementwise bodies), in graph order. Errors: a
// compute that does not parse (a malformed model).
Expected<std::vector<DslKernelNode>> find_dsl_kernel_nodes(ir::Graph& g);

struct TunedDslNode {
  std::string node, signature;
  int64_t split = 0;
};

// Sets dsl_split on every DSL-kernel node whose signature has an entry for this target in `db`
// (shape [1, kernels::kDslTileElements]); the others keep the default schedule (the attribute is
// removed). Returns the nodes given a tuned schedule.
Expected<std::vector<TunedDslNode>> apply_tuning_db(ir::Graph& g, const std::vector<dsl::TuningEntry>& db);

}  // namespace kiln::tools
