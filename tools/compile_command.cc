// `kiln compile`: ONNX in, offline .kiln model out (like ATC), or a pre-check only.
#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "compiler/pass_manager.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct CompileArgs {
  std::string model;
  std::string output;
  std::string input_shape;
  int opt_level = 3;
  std::vector<std::string> disabled_passes;
  std::string fusion_switch_file;
  std::string report;
  bool list_passes = false;
  bool check = false;
  bool quiet = false;
};

int run_check(const CompileArgs& args, const compiler::CompileOptions& options) {
  auto report = compiler::check_onnx_file(args.model, options);
  if (!report.ok()) return report_error("compile", report.status().to_string());
  for (const auto& n : report->notes) std::printf("note: %s\n", n.c_str());
  if (!report->unsupported_nodes.empty()) {
    std::printf("unsupported operators (%zu nodes):\n", report->unsupported_nodes.size());
    for (const auto& line : report->unsupported_nodes) std::printf("  %s\n", line.c_str());
  }
  if (!report->shape_problems.empty()) {
    std::printf("shape problems (%zu):\n", report->shape_problems.size());
    for (const auto& line : report->shape_problems) std::printf("  %s\n", line.c_str());
  }
  if (report->ok()) {
    std::printf("%s: check passed: every operator is supported and shapes infer\n", args.model.c_str());
    return 0;
  }
  return kExitError;
}

int list_passes(const compiler::PassOptions& options) {
  std::printf("%-24s %-6s %-8s %s\n", "pass", "level", "status", "what it does");
  for (const compiler::PassInfo& p : compiler::PassRegistry::instance().passes()) {
    const char* status = p.required ? "required" : compiler::pass_enabled(p, options) ? "on" : "off";
    std::printf("%-24s -O%-4d %-8s %s\n", p.name.c_str(), p.min_level, status, p.description.c_str());
  }
  return 0;
}

// The compile report (issue 5): timings, node counts, per-pass records and, once the graph
// is final, the memory plan's three numbers plus the weights.
Status write_report(const std::string& path, const compiler::CompiledModel& compiled, double compile_ms,
                    const compiler::MemoryPlan* plan) {
  nlohmann::json j;
  j["compile_ms"] = compile_ms;
  j["nodes"] = {{"before", compiled.nodes_before}, {"after", compiled.graph->nodes().size()}};
  nlohmann::json passes = nlohmann::json::array();
  for (const compiler::PassRecord& r : compiled.passes) {
    nlohmann::json p = {{"name", r.name}, {"changed", r.changed}, {"ms", r.ms}};
    if (!r.notes.empty()) p["notes"] = r.notes;
    passes.push_back(std::move(p));
  }
  j["passes"] = std::move(passes);
  if (plan)
    j["memory"] = {{"arena_bytes", plan->arena_bytes},
                   {"naive_bytes", plan->naive_bytes},
                   {"lower_bound_bytes", plan->lower_bound_bytes},
                   {"weights_bytes", plan->weights_bytes},
                   {"dynamic_values", plan->dynamic_values}};
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return invalid_argument("cannot write report '%s'", path.c_str());
  f << j.dump(2) << "\n";
  if (!f) return invalid_argument("error writing report '%s'", path.c_str());
  return ok_status();
}

int run_compile(const CompileArgs& args) {
  compiler::CompileOptions options;
  options.passes.opt_level = args.opt_level;
  options.passes.disabled.insert(args.disabled_passes.begin(), args.disabled_passes.end());
  if (!args.fusion_switch_file.empty()) {
    auto off = compiler::parse_fusion_switch_file(args.fusion_switch_file);
    if (!off.ok()) return report_error("compile", off.status().to_string());
    options.passes.disabled.insert(off->begin(), off->end());
  }
  Status valid = compiler::validate_pass_options(options.passes);
  if (!valid.ok()) return report_error("compile", valid.to_string());
  if (args.list_passes) return list_passes(options.passes);
  if (args.model.empty()) return report_error("compile", "no model given: kiln compile MODEL.onnx -o MODEL.kiln");
  auto shapes = compiler::parse_input_shapes(args.input_shape);
  if (!shapes.ok()) return report_error("compile", shapes.status().to_string());
  options.input_shapes = *shapes;
  if (args.check) return run_check(args, options);
  if (args.output.empty()) return report_error("compile", "no output file: give -o MODEL.kiln (or --check)");

  auto start = std::chrono::steady_clock::now();
  auto compiled = compiler::compile_onnx_file(args.model, options);
  if (!compiled.ok()) return report_error("compile", compiled.status().to_string());
  Status s = model::write_model(*compiled->graph, compiled->info, args.output);
  if (!s.ok()) return report_error("compile", s.to_string());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The plan is informational here (the runtime plans its own memory), so a graph it cannot
  // plan only loses the memory section of the report.
  Expected<compiler::MemoryPlan> plan = compiler::plan_memory(*compiled->graph);
  if (!args.report.empty()) {
    Status r = write_report(args.report, *compiled, ms, plan.ok() ? &*plan : nullptr);
    if (!r.ok()) return report_error("compile", r.to_string());
  }
  if (!args.quiet) {
    for (const auto& n : compiled->notes) std::printf("note: %s\n", n.c_str());
    std::string changed;
    for (const compiler::PassRecord& r : compiled->passes)
      if (r.changed) changed += str_format("%s%s %d", changed.empty() ? "" : ", ", r.name.c_str(), r.changed);
    std::printf("passes (-O%d): %s\n", args.opt_level, changed.empty() ? "nothing changed" : changed.c_str());
    if (plan.ok()) {
      std::printf("memory: arena %.2f MB (lower bound %.2f MB, naive %.2f MB)", plan->arena_bytes / 1e6,
                  plan->lower_bound_bytes / 1e6, plan->naive_bytes / 1e6);
      if (plan->dynamic_values)
        std::printf(", %d values sized at run time (fix shapes with --input-shape)", plan->dynamic_values);
      std::printf("\n");
    }
    std::printf("compiled %s -> %s: %zu -> %zu nodes, %.1f MB of weights, %.0f ms\n", args.model.c_str(),
                args.output.c_str(), compiled->nodes_before, compiled->graph->nodes().size(),
                static_cast<double>(compiled->graph->weight_bytes()) / 1e6, ms);
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  app.add_option("model", args->model, "ONNX model to compile");
  app.add_option("-o,--output", args->output, "Offline model to write (.kiln)");
  app.add_option("--input-shape", args->input_shape,
                 "Fix input shapes, as ATC's --input_shape: \"x:1,3,224,224;y:1,128\"");
  app.add_option("-O,--opt-level", args->opt_level, "Optimisation level 0..3 (default 3); -O0 runs only what "
                                                     "correctness needs")
      ->check(CLI::Range(0, 3));
  app.add_option("--disable-pass", args->disabled_passes, "Switch a pass off (repeatable; see --list-passes)");
  app.add_option("--fusion-switch-file", args->fusion_switch_file,
                 "ATC-style switch file: lines 'PassName:off', or JSON "
                 "{\"Switch\":{\"GraphFusion\":{\"NAME\":\"off\",\"ALL\":\"off\"}}}");
  app.add_option("--report", args->report, "Write the compile report (JSON) to this file");
  app.add_flag("--list-passes", args->list_passes, "List the passes, their levels and whether they run");
  app.add_flag("--check", args->check,
               "Only check the model: list unsupported operators and shape problems (like ATC --mode=3)");
  app.add_flag("-q,--quiet", args->quiet, "Print nothing on success");
  return [args] { return run_compile(*args); };
}

KILN_REGISTER_SUBCOMMAND("compile", "Compile an ONNX model into an offline .kiln model", setup);

}  // namespace
}  // namespace kiln::tools
