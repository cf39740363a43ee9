// The compile report: JSON for --report and the summary printed after `kiln compile`.
#include "tools/compile_report.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include "compiler/memory_plan.h"
#include "kernels/kernel_registry.h"

namespace kiln::tools {
namespace {

template <typename Fn>
void for_each_node(const ir::Graph& graph, const Fn& fn) {
  for (const auto& n : graph.nodes()) {
    fn(*n);
    for (const ir::Graph* sub : n->subgraphs()) for_each_node(*sub, fn);
  }
}

// Dims as JSON: extents as numbers, symbolic dims by name ("?" when unnamed).
nlohmann::json shape_json(const Shape& shape) {
  if (!shape.has_rank()) return nullptr;
  nlohmann::json dims = nlohmann::json::array();
  for (const Dim& d : shape.dims()) dims.push_back(d.is_static() ? nlohmann::json(d.value) : nlohmann::json(d.to_string()));
  return dims;
}

// The user-fed inputs of `graph` (inputs without a default) and their shapes.
nlohmann::json input_shapes_json(const ir::Graph& graph) {
  nlohmann::json shapes = nlohmann::json::object();
  for (const ir::Value* v : graph.inputs())
    if (!v->has_initializer()) shapes[v->name()] = shape_json(v->shape());
  return shapes;
}

// The arena of one graph, or null when it cannot be planned (the report stays useful).
nlohmann::json arena_json(const ir::Graph& graph) {
  Expected<compiler::MemoryPlan> plan = compiler::plan_memory(graph);
  return plan.ok() ? nlohmann::json(plan->arena_bytes) : nlohmann::json(nullptr);
}

double mb(const nlohmann::json& bytes) { return bytes.get<double>() / 1e6; }

}  // namespace

nlohmann::json make_compile_report(const compiler::CompiledModel& compiled, double compile_ms) {
  const ir::Graph& graph = *compiled.graph;
  nlohmann::json j;
  j["compile_ms"] = compile_ms;
  j["nodes"] = {{"before", compiled.nodes_before}, {"after", graph.nodes().size()}};

  nlohmann::json passes = nlohmann::json::array();
  std::map<std::string, int> fusions;
  for (const compiler::PassRecord& r : compiled.passes) {
    nlohmann::json p = {{"name", r.name}, {"changed", r.changed}, {"ms", r.ms}};
    if (!r.notes.empty()) p["notes"] = r.notes;
    if (!r.fusions.empty()) p["fusions"] = r.fusions;
    passes.push_back(std::move(p));
    for (const auto& [pattern, count] : r.fusions) fusions[pattern] += count;
  }
  j["passes"] = std::move(passes);
  j["fusions"] = fusions;

  std::map<std::string, int> kernels;
  nlohmann::json fallbacks = nlohmann::json::array();
  nlohmann::json reasons = nlohmann::json::array();
  int per_shape = 0;
  for_each_node(graph, [&](const ir::Node& n) {
    const kernels::KernelPlan plan = kernels::plan_kernel(n);
    std::string op = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
    ++kernels[op + "/" + plan.implementation];
    if (plan.per_shape) ++per_shape;
    if (plan.implementation != "reference") return;
    fallbacks.push_back(n.name());
    reasons.push_back({{"node", n.name()}, {"op", op}, {"reason", plan.reason}, {"shape_related", plan.shape_related}});
  });
  j["kernels"] = kernels;
  // Nodes with open dims on fast kernels prepared per concrete shape at run time.
  j["per_shape_kernels"] = per_shape;
  j["reference_fallbacks"] = std::move(fallbacks);
  j["reference_fallback_reasons"] = std::move(reasons);

  // Which convolutions and products compute in which precision (--precision; the nodes'
  // `precision` attribute, float32 when absent), with the pass's reasons for those kept fp32.
  std::map<std::string, std::map<std::string, int>> by_precision;  // precision -> op -> nodes
  for_each_node(graph, [&](const ir::Node& n) {
    static const char* const kProducts[] = {"Conv", "MatMul", "Gemm", "FusedConv", "FusedMatMul", "FusedGemm"};
    if (std::find(std::begin(kProducts), std::end(kProducts), n.op_type()) == std::end(kProducts)) return;
    const std::string op = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
    ++by_precision[n.attr_string("precision", "fp32")][op];
  });
  nlohmann::json precision = {{"mode", compiler::precision_name(compiled.precision)}, {"nodes", by_precision}};
  for (const compiler::PassRecord& r : compiled.passes)
    if (r.name == "precision_assignment" && !r.notes.empty()) precision["notes"] = r.notes;
  j["precision"] = std::move(precision);

  // The runtime plans its own memory; this plan is the compiler's account of it, so a graph
  // it cannot plan only loses the memory section.
  Expected<compiler::MemoryPlan> plan = compiler::plan_memory(graph);
  if (plan.ok()) {
    // The arena the .kiln carries and the runtime lays its executions out in (kilnmdlQuerySize's
    // work size; model/arena_plan.h): null for a graph that cannot be planned ahead.
    Expected<std::optional<model::ArenaPlan>> runtime_plan = model::plan_arena(graph);
    const bool has_runtime_plan = runtime_plan.ok() && runtime_plan->has_value();
    j["memory"] = {{"arena_bytes", plan->arena_bytes},
                   {"runtime_arena_bytes",
                    has_runtime_plan ? nlohmann::json((*runtime_plan)->arena_bytes) : nlohmann::json(nullptr)},
                   {"naive_bytes", plan->naive_bytes},
                   {"lower_bound_bytes", plan->lower_bound_bytes},
                   {"weights_bytes", plan->weights_bytes},
                   {"cold_weights_bytes", plan->cold_weights_bytes},
                   {"prepacked_bytes", plan->prepacked_bytes},
                   {"dynamic_values", plan->dynamic_values},
                   {"inplace_values", plan->inplace_count},
                   {"strategy", plan->strategy}};
  }

  nlohmann::json variants = nlohmann::json::array();
  if (compiled.variants.empty()) {
    variants.push_back({{"shapes", input_shapes_json(graph)},
                        {"arena_bytes", plan.ok() ? nlohmann::json(plan->arena_bytes) : nlohmann::json(nullptr)}});
  } else {
    for (const compiler::CompiledVariant& v : compiled.variants) {
      nlohmann::json shapes = nlohmann::json::object();
      for (const auto& [name, dims] : v.shapes) shapes[name] = dims;
      variants.push_back({{"shapes", std::move(shapes)},
                          {"arena_bytes", v.graph ? arena_json(*v.graph) : nlohmann::json(nullptr)}});
    }
  }
  j["variants"] = std::move(variants);
  return j;
}

Status write_compile_report(const std::string& path, const nlohmann::json& report) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return invalid_argument("cannot write report '%s'", path.c_str());
  f << report.dump(2) << "\n";
  if (!f) return invalid_argument("error writing report '%s'", path.c_str());
  return ok_status();
}

void print_compile_summary(std::FILE* out, const compiler::CompiledModel& compiled, const nlohmann::json& report,
                           const std::string& model_path, const std::string& output_path, int opt_level) {
  for (const auto& n : compiled.notes) std::fprintf(out, "note: %s\n", n.c_str());
  std::string changed;
  for (const compiler::PassRecord& r : compiled.passes)
    if (r.changed) changed += str_format("%s%s %d", changed.empty() ? "" : ", ", r.name.c_str(), r.changed);
  std::fprintf(out, "passes (-O%d): %s\n", opt_level, changed.empty() ? "nothing changed" : changed.c_str());

  // Fusions, most applied first; the five most frequent name the pattern mix.
  std::vector<std::pair<std::string, int>> fusions;
  int total_fusions = 0;
  for (const auto& [pattern, count] : report["fusions"].items()) {
    fusions.emplace_back(pattern, count.get<int>());
    total_fusions += count.get<int>();
  }
  std::stable_sort(fusions.begin(), fusions.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string top;
  constexpr size_t kTopFusions = 5;
  for (size_t i = 0; i < fusions.size() && i < kTopFusions; ++i)
    top += str_format("%s%s x%d", i ? ", " : "", fusions[i].first.c_str(), fusions[i].second);
  if (fusions.size() > kTopFusions) top += str_format(", %zu more patterns", fusions.size() - kTopFusions);
  std::fprintf(out, "nodes: %zu -> %zu; fusions: %s\n", compiled.nodes_before, compiled.graph->nodes().size(),
               fusions.empty() ? "none" : str_format("%d (%s)", total_fusions, top.c_str()).c_str());

  // Fast kernels, most used first (nothing is printed while every node is on a reference kernel).
  std::vector<std::pair<std::string, int>> fast;
  int total_nodes = 0, fast_nodes = 0;
  for (const auto& [key, count] : report["kernels"].items()) {
    total_nodes += count.get<int>();
    if (key.size() >= 10 && key.compare(key.size() - 10, 10, "/reference") == 0) continue;
    fast.emplace_back(key, count.get<int>());
    fast_nodes += count.get<int>();
  }
  if (!fast.empty()) {
    std::stable_sort(fast.begin(), fast.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string kinds;
    for (const auto& [key, count] : fast) kinds += str_format("%s%s x%d", kinds.empty() ? "" : ", ", key.c_str(), count);
    std::fprintf(out, "kernels: %d of %d nodes on fast kernels (%s)\n", fast_nodes, total_nodes, kinds.c_str());
  }

  if (int per_shape = report["per_shape_kernels"].get<int>(); per_shape > 0)
    std::fprintf(out, "open dims: %d nodes on fast kernels prepared per input shape at run time\n", per_shape);
  // The reference fallbacks whose shape_related is `shape_related`, and a printer of the
  // first `listed` of them, one "'node' (op): reason" line each.
  auto fallbacks_where = [&report](bool shape_related) {
    std::vector<const nlohmann::json*> found;
    for (const auto& r : report["reference_fallback_reasons"])
      if (r["shape_related"].get<bool>() == shape_related) found.push_back(&r);
    return found;
  };
  auto list_fallbacks = [out](const std::vector<const nlohmann::json*>& fallbacks, size_t listed) {
    for (size_t i = 0; i < fallbacks.size() && i < listed; ++i)
      std::fprintf(out, "  '%s' (%s): %s\n", (*fallbacks[i])["node"].get<std::string>().c_str(),
                   (*fallbacks[i])["op"].get<std::string>().c_str(),
                   (*fallbacks[i])["reason"].get<std::string>().c_str());
    if (fallbacks.size() > listed)
      std::fprintf(out, "  ... %zu more in the report's reference_fallback_reasons (--report)\n",
                   fallbacks.size() - listed);
  };
  // The trap of graph compilers: a node that silently runs an order of magnitude slower
  // because a dim is open. Say which and what would fix it.
  if (const auto shape_fallbacks = fallbacks_where(true); !shape_fallbacks.empty()) {
    std::fprintf(out, "warning: %zu nodes run on reference kernels because of open dims; fix the shapes with "
                      "--input-shape or compile shape buckets with --dynamic-dims:\n",
                 shape_fallbacks.size());
    list_fallbacks(shape_fallbacks, 10);
  }
  // The other fallbacks, each with every fast kernel's refusal, so that a user sees what to
  // change (a constant weight, a dtype) without a debug log.
  if (const auto other_fallbacks = fallbacks_where(false); !other_fallbacks.empty()) {
    std::fprintf(out, "reference kernels: %zu nodes:\n", other_fallbacks.size());
    list_fallbacks(other_fallbacks, 5);
  }

  if (report.contains("memory")) {
    const nlohmann::json& m = report["memory"];
    std::fprintf(out, "memory: arena %.2f MB vs naive %.2f MB vs lower bound %.2f MB", mb(m["arena_bytes"]),
                 mb(m["naive_bytes"]), mb(m["lower_bound_bytes"]));
    if (!m["runtime_arena_bytes"].is_null())
      std::fprintf(out, "; the .kiln's runtime arena %.2f MB (kilnmdlQuerySize's work size)", mb(m["runtime_arena_bytes"]));
    int dynamic = m["dynamic_values"].get<int>();
    if (dynamic) std::fprintf(out, "; %d values sized at run time (fix shapes with --input-shape)", dynamic);
    std::fprintf(out, "\n");
  }
  if (compiled.variants.size() > 1) {
    std::string arenas;
    for (const auto& v : report["variants"])
      arenas += str_format("%s%.2f", arenas.empty() ? "" : ", ", v["arena_bytes"].is_null() ? 0.0 : mb(v["arena_bytes"]));
    std::fprintf(out, "variants: %zu shape buckets, arenas %s MB\n", compiled.variants.size(), arenas.c_str());
  }
  std::fprintf(out, "compiled %s -> %s: %zu -> %zu nodes, %.1f MB of weights, %.0f ms\n", model_path.c_str(),
               output_path.c_str(), compiled.nodes_before, compiled.graph->nodes().size(),
               static_cast<double>(compiled.graph->weight_bytes()) / 1e6, report["compile_ms"].get<double>());
}

}  // namespace kiln::tools
