// `kiln compile`: ONNX in, offline .kiln model out (like ATC), or a pre-check only.
#include <chrono>
#include <cstdio>

#include "compiler/compiler.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct CompileArgs {
  std::string model;
  std::string output;
  std::string input_shape;
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

int run_compile(const CompileArgs& args) {
  compiler::CompileOptions options;
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
  if (!args.quiet) {
    for (const auto& n : compiled->notes) std::printf("note: %s\n", n.c_str());
    std::printf("compiled %s -> %s: %zu nodes, %.1f MB of weights, %.0f ms\n", args.model.c_str(),
                args.output.c_str(), compiled->graph->nodes().size(),
                static_cast<double>(compiled->graph->weight_bytes()) / 1e6, ms);
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  app.add_option("model", args->model, "ONNX model to compile")->required();
  app.add_option("-o,--output", args->output, "Offline model to write (.kiln)");
  app.add_option("--input-shape", args->input_shape,
                 "Fix input shapes, as ATC's --input_shape: \"x:1,3,224,224;y:1,128\"");
  app.add_flag("--check", args->check,
               "Only check the model: list unsupported operators and shape problems (like ATC --mode=3)");
  app.add_flag("-q,--quiet", args->quiet, "Print nothing on success");
  return [args] { return run_compile(*args); };
}

KILN_REGISTER_SUBCOMMAND("compile", "Compile an ONNX model into an offline .kiln model", setup);

}  // namespace
}  // namespace kiln::tools
