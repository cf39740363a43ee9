// The compile report of `kiln compile` (issue 5): the JSON written by --report and the
// summary printed after a compile.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "ir/graph.h"

namespace kiln::tools {

// The report as JSON:
//   compile_ms; nodes {before, after}; passes [{name, changed, ms, notes?, fusions?}];
//   fusions {pattern: count} (summed over passes); kernels {"Op/impl": count};
//   per_shape_kernels (nodes with open dims on fast kernels prepared per input shape at run
//   time); reference_fallbacks [node names]; reference_fallback_reasons [{node, op, reason,
//   shape_related}] (kernels::plan_kernel: shape_related when open dims are why); memory {arena_bytes, naive_bytes, lower_bound_bytes,
//   weights_bytes, dynamic_values} (of `compiled.graph`; absent when it cannot be planned);
//   variants [{shapes {input: dims}, arena_bytes}] (one per shape bucket, or one entry with
//   the model's input shapes for a model compiled for one set of shapes).
// Kernels and fallbacks cover the nodes of subgraphs too, since their kernels run as well.
nlohmann::json make_compile_report(const compiler::CompiledModel& compiled, double compile_ms);

// Writes `report` to `path` (pretty-printed JSON). Errors name the file.
Status write_compile_report(const std::string& path, const nlohmann::json& report);

// The printed summary: compiler notes, passes that changed something, nodes before -> after,
// the top fusions, the nodes on fast kernels (when any), the arena vs naive vs lower bound
// in MB, the weights and compile time.
void print_compile_summary(std::FILE* out, const compiler::CompiledModel& compiled, const nlohmann::json& report,
                           const std::string& model_path, const std::string& output_path, int opt_level);

}  // namespace kiln::tools
