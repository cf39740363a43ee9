// `kiln compile`: ONNX in, offline .kiln model out (like ATC), or a pre-check only.
#include <algorithm>
#include <filesystem>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "compiler/custom_op_plugin.h"
#include "tools/custom_ops_source.h"
#include "compiler/memory_plan.h"
#include "compiler/pass_manager.h"
#include "ir/value_bytes.h"
#include "profiler/profiler.h"
#include "preprocess/aipp_config.h"
#include "tools/cli_options.h"
#include "tools/compile_report.h"
#include "tools/dsl_tuning.h"
#include "tools/model_source.h"
#include "tools/shape_options.h"
#include "tools/apps_module.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct CompileArgs {
  std::string model;
  std::string output;
  std::string input_shape;
  std::string dynamic_batch;  // shape buckets (compiler.h)
  std::string dynamic_dims;
  std::string pad_value;
  std::string precision = "fp32";
  std::string keep_dtype;
  std::string calibration;  // --precision int8: the calibration data (kiln quantize --calibration)
  std::string preprocess;   // ... and how its images become the input
  int opt_level = 3;
  std::vector<std::string> disabled_passes;
  std::string fusion_switch_file;
  std::string insert_op_conf;  // AIPP configuration (docs/aipp.md)
  std::string report;
  std::vector<std::string> custom_ops;  // plugin libraries (docs/dsl.md)
  std::string tuning_db;                // kiln tune's database: schedules of DSL kernels (docs/dsl.md)
  bool list_passes = false;
  bool check = false;
  bool quiet = false;
  bool no_prepack = false;
};

// --tuning-db: the schedules kiln tune recorded for the graphs' DSL kernels (every variant's
// graph); the nodes tuned in the first graph are returned for the report.
Expected<std::vector<TunedDslNode>> apply_tuning_db_option(const std::string& path, compiler::CompiledModel& m) {
  if (path.empty()) return std::vector<TunedDslNode>{};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("tuning database %s: no such file", path.c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<dsl::TuningEntry> db, dsl::read_tuning_db(path));
  for (const compiler::CompiledVariant& v : m.variants)
    if (v.graph && v.graph != m.graph) KILN_RETURN_IF_ERROR(apply_tuning_db(*v.graph, db).status());
  if (m.dynamic_graph) KILN_RETURN_IF_ERROR(apply_tuning_db(*m.dynamic_graph, db).status());
  return apply_tuning_db(*m.graph, db);
}

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

// --input-shape / --dynamic-batch-size / --dynamic-dims (Kiln's or ATC's forms,
// shape_options.h) / --pad-value into `options`; progress per bucket unless -q.
Status parse_shape_and_bucket_options(const CompileArgs& args, compiler::CompileOptions& options) {
  KILN_RETURN_IF_ERROR(apply_shape_options(args.input_shape, args.dynamic_dims, args.dynamic_batch, options));
  KILN_ASSIGN_OR_RETURN(options.pad_values, compiler::parse_pad_values(args.pad_value));
  if (!options.pad_values.empty() && options.dynamic_batch.empty() && options.dynamic_dims.empty())
    return invalid_argument("--pad-value needs --dynamic-batch-size or --dynamic-dims (it is what padding to a "
                            "bucket's shape fills)");
  if (!args.quiet) options.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  return ok_status();
}

// The memory of the machine compiling, which is the CPU device's target.
size_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
}

// Refuses a model whose shapes cannot run in this machine's memory: a value larger than the
// memory, or a planned arena larger than it. It would otherwise compile, and fail (or, in
// kernel preparation, take minutes) only when run.
Status check_memory(const compiler::CompiledModel& compiled) {
  const size_t memory = physical_memory_bytes();
  std::vector<const ir::Graph*> graphs = {compiled.graph.get()};
  for (const compiler::CompiledVariant& v : compiled.variants) graphs.push_back(v.graph.get());
  for (const ir::Graph* g : graphs) {
    KILN_RETURN_IF_ERROR(ir::check_values_fit(*g, memory, "this machine's"));
    Expected<compiler::MemoryPlan> plan = compiler::plan_memory(*g);
    if (plan.ok() && plan->arena_bytes > memory) {
      ir::LargestValue big = ir::largest_value(*g);
      return resource_exhausted("the planned activation memory needs %s, more than this machine's memory (%s); "
                                "its largest value is '%s' (%s, %s): give smaller input shapes",
                                ir::bytes_text(plan->arena_bytes).c_str(), ir::bytes_text(memory).c_str(),
                                big.value ? big.value->name().c_str() : "?",
                                big.value ? big.value->type().to_string().c_str() : "?",
                                ir::bytes_text(big.bytes).c_str());
    }
  }
  return ok_status();
}

// --precision int8: `kiln quantize` into a temporary QDQ model (--keep-dtype's node names and op
// types stay float), which the compile then reads instead of the float model. Returns the
// exit code; `qdq_path` is set on success.
int quantize_for_compile(const CompileArgs& args, std::string* qdq_path, std::string* work_dir) {
  if (args.calibration.empty())
    return usage_error("compile", "--precision int8 needs --calibration DATA (kiln quantize's calibration data)");
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-int8-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return report_error("compile", "cannot create a temporary folder for the int8 model");
  *work_dir = tmpl;
  // Quantisation is `kiln quantize`'s code, in the apps module (apps_module.h).
  auto quant = load_apps_module();
  if (!quant.ok()) return report_error("compile", "--precision int8: " + quant.status().to_string());
  QuantizeArgs q;
  q.model = args.model;
  q.calibration = args.calibration;
  q.preprocess = args.preprocess;
  q.output = *work_dir + "/model.int8.onnx";
  q.report = *work_dir + "/quantize.json";
  if (!args.keep_dtype.empty()) {
    auto keep = compiler::parse_keep_dtype(args.keep_dtype);
    if (!keep.ok()) return report_error("compile", keep.status().to_string());
    std::vector<std::string> ops = (*quant)->default_quant_op_types();
    for (const std::string& k : *keep) {
      auto it = std::find(ops.begin(), ops.end(), k);
      if (it != ops.end())
        ops.erase(it);  // an op type: none of its nodes quantised
      else
        q.exclude += (q.exclude.empty() ? "" : ",") + k;  // a node name
    }
    if (ops.empty()) return usage_error("compile", "--keep-dtype keeps every quantisable op type float");
    for (const std::string& op : ops) q.op_types += (q.op_types.empty() ? "" : ",") + op;
  }
  if (!args.quiet) std::printf("quantising %s to int8 (calibration: %s)\n", args.model.c_str(), args.calibration.c_str());
  const int rc = (*quant)->run_quantize(q);
  if (rc == 0) *qdq_path = q.output;
  return rc;
}

int run_compile(const CompileArgs& args_in) {
  CompileArgs args = args_in;
  // --precision int8: quantise first, then compile the QDQ model (its int8 ops are folded).
  std::string int8_dir;
  struct RemoveDir {
    std::string* dir;
    ~RemoveDir() {
      std::error_code ec;
      if (!dir->empty()) std::filesystem::remove_all(*dir, ec);
    }
  } cleanup{&int8_dir};
  if (args.precision == "int8" && !args.list_passes && !args.check && !args.model.empty()) {
    std::string qdq;
    if (int rc = quantize_for_compile(args, &qdq, &int8_dir); rc != 0) return rc;
    args.model = qdq;
    args.precision = "fp32";
    args.keep_dtype.clear();  // applied to the quantisation
  } else if (!args.calibration.empty()) {
    return usage_error("compile", "--calibration is for --precision int8");
  }
  compiler::CompileOptions options;
  options.prepack_weights = !args.no_prepack;
  options.passes.opt_level = args.opt_level;
  options.passes.disabled.insert(args.disabled_passes.begin(), args.disabled_passes.end());
  if (!args.fusion_switch_file.empty()) {
    auto off = compiler::parse_fusion_switch_file(args.fusion_switch_file);
    if (!off.ok()) return report_error("compile", off.status().to_string());
    options.passes.disabled.insert(off->begin(), off->end());
  }
  if (auto p = compiler::precision_from_name(args.precision)) {
    options.passes.precision = *p;
  } else {
    return usage_error("compile", "--precision " + args.precision + ": expected fp32, bf16, mixed or int8");
  }
  if (!args.keep_dtype.empty()) {
    auto keep = compiler::parse_keep_dtype(args.keep_dtype);
    if (!keep.ok()) return report_error("compile", keep.status().to_string());
    options.passes.keep_dtype = *keep;
  }
  Status valid = compiler::validate_pass_options(options.passes);
  if (!valid.ok()) return usage_error("compile", valid.to_string());
  if (args.list_passes) return list_passes(options.passes);
  if (args.model.empty()) return usage_error("compile", "no model given: kiln compile MODEL.onnx -o MODEL.kiln");
  Status shapes = parse_shape_and_bucket_options(args, options);
  if (!shapes.ok()) return usage_error("compile", shapes.to_string());
  if (!args.insert_op_conf.empty()) {
    auto aipp = preprocess::read_aipp_config(args.insert_op_conf);
    if (!aipp.ok()) return report_error("compile", aipp.status().to_string());
    options.aipp = std::move(*aipp);
  }
  // Custom-op plugins: native code, loaded before the model is read (their ops must be known).
  for (const std::string& plugin : args.custom_ops) {
    auto ops = load_custom_ops(plugin);
    if (!ops.ok()) return report_error("compile", ops.status().to_string());
    if (!args.quiet)
      for (const std::string& op : *ops) std::printf("custom op %s from %s\n", op.c_str(), plugin.c_str());
  }
  // The model must be a file (a directory is named as such, not "no such file").
  if (auto kind = sniff_model_kind(args.model); !kind.ok()) return report_error("compile", kind.status().to_string());
  if (args.check) return run_check(args, options);
  if (args.output.empty()) return usage_error("compile", "no output file: give -o MODEL.kiln (or --check)");
  for (const auto& [option, path] : {std::pair{"-o", &args.output}, std::pair{"--report", &args.report}})
    if (std::string bad = check_output_file(option, *path); !bad.empty()) return report_error("compile", bad);

  // KILN_PROFILE=DIR puts the compile and each pass on the profiler's timeline (written at exit).
  profiler::start_env_session();
  const int64_t profile_start = profiler::now_ns();
  auto start = std::chrono::steady_clock::now();
  auto compiled = compiler::compile_onnx_file(args.model, options);
  if (!compiled.ok()) return report_error("compile", compiled.status().to_string());
  if (profiler::enabled()) {
    std::vector<std::pair<std::string, double>> phases;
    for (const compiler::PassRecord& r : compiled->passes) phases.emplace_back(r.name, r.ms);
    profiler::record_compile_phases(phases, profile_start);
  }
  if (Status fits = check_memory(*compiled); !fits.ok()) return report_error("compile", fits.to_string());
  auto tuned = apply_tuning_db_option(args.tuning_db, *compiled);
  if (!tuned.ok()) return report_error("compile", tuned.status().to_string());
  Status s = compiler::write_compiled_model(*compiled, args.output);
  if (!s.ok()) return report_error("compile", s.to_string());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The report (tools/compile_report.h) plans the memory of the final graph and sums the
  // fusions; it is built once for the file and the printed summary.
  nlohmann::json report = make_compile_report(*compiled, ms);
  if (!args.tuning_db.empty()) {
    // Which DSL kernels got a tuned schedule (the others keep the default).
    nlohmann::json list = nlohmann::json::array();
    for (const TunedDslNode& t : *tuned)
      list.push_back({{"node", t.node}, {"signature", t.signature}, {"dsl_split", t.split}});
    report["tuned_dsl_kernels"] = list;
    if (!args.quiet) {
      std::printf("tuning database %s: %zu DSL kernel node(s) with a tuned schedule\n", args.tuning_db.c_str(),
                  tuned->size());
      for (const TunedDslNode& t : *tuned)
        std::printf("  tuned schedule: %s: dsl_split=%lld (%s)\n", t.node.c_str(), static_cast<long long>(t.split),
                    t.signature.c_str());
    }
  }
  if (!args.report.empty()) {
    Status r = write_compile_report(args.report, report);
    if (!r.ok()) return report_error("compile", r.to_string());
  }
  if (!args.quiet)
    print_compile_summary(stdout, *compiled, report, int8_dir.empty() ? args.model : args_in.model + " (int8)",
                          args.output, args.opt_level);
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  app.add_option("model", args->model, "ONNX model to compile");
  app.add_option("-o,--output", args->output, "Offline model to write (.kiln)");
  app.add_option("--input-shape", args->input_shape,
                 "Fix input shapes, as ATC's --input_shape: \"x:1,3,224,224;y:1,128\"; -1 leaves a dim open "
                 "(\"x:1,3,48,-1\")");
  app.add_option("--dynamic-batch-size", args->dynamic_batch,
                 "Shape buckets over the batch (axis 0 of inputs whose axis 0 is open, or -1 in --input-shape): "
                 "\"1,4,8\"");
  app.add_option("--dynamic-dims", args->dynamic_dims,
                 "Shape buckets, one input's full shape per item, the k-th bucket from the k-th item "
                 "of each input: \"x:1,3,48,320;x:1,3,48,640\"; or ATC's form, the values of the -1 dims "
                 "of --input-shape per gear: --input-shape x:1,3,48,-1 --dynamic-dims \"320;640\"");
  app.add_option("--pad-value", args->pad_value,
                 "Per bucketed input, the value padding fills at run time (default 0): \"x:0;mask:0\"");
  app.add_option("-O,--opt-level", args->opt_level, "Optimisation level 0..3 (default 3); -O0 runs only what "
                                                     "correctness needs")
      ->check(CLI::Range(0, 3));
  app.add_option("--disable-pass", args->disabled_passes, "Switch a pass off (repeatable; see --list-passes)");
  app.add_option("--fusion-switch-file", args->fusion_switch_file,
                 "ATC-style switch file: lines 'PassName:off', or JSON "
                 "{\"Switch\":{\"GraphFusion\":{\"NAME\":\"off\",\"ALL\":\"off\"}}}");
  app.add_option("--precision", args->precision,
                 "Compute precision of convolutions and matrix products, as ATC's --precision_mode: "
                 "fp32 (default), bf16 (all of them in bfloat16), mixed (bfloat16 but for the final "
                 "layer); other ops stay fp32 (docs/precision.md); int8 (with --calibration: kiln quantize, "
                 "then the QDQ model compiled onto int8 kernels; --keep-dtype names what stays float)");
  app.add_option("--calibration", args->calibration,
                 "With --precision int8: calibration data, as kiln quantize --calibration (docs/quantization.md)");
  app.add_option("--preprocess", args->preprocess,
                 "With --precision int8 and image calibration data: as kiln quantize --preprocess");
  app.add_option("--keep-dtype", args->keep_dtype,
                 "Nodes kept fp32 under bf16/mixed: names or op types, \"fc,Gemm\", or a file with one "
                 "per line (ATC's OpName:/OpType: lines too)");
  app.add_option("--insert-op-conf", args->insert_op_conf,
                 "AIPP configuration (ATC's aipp.cfg): the input becomes the raw image (NV12, RGB...) and "
                 "crop, colour conversion, resize and normalisation run inside the model (docs/aipp.md)");
  app.add_flag("--no-prepack", args->no_prepack,
               "Store weights as the ONNX model has them, not pre-packed for this CPU's kernels (the "
               "load then packs them; for a .kiln that runs on CPUs of another ISA, docs/model-format.md)");
  app.add_option("--custom-ops", args->custom_ops,
                 "Custom-op plugin (a shared library built against include/kiln/custom_op.h) or Python file "
                 "(FILE.py of kiln.dsl.custom_op definitions, run by the Python interpreter), repeatable: defines "
                 "ops Kiln lacks by DSL computes, compiled into the model (docs/dsl.md). Either is code run by this "
                 "command: load only files you trust");
  app.add_option("--tuning-db", args->tuning_db,
                 "Tuning database of kiln tune: DSL kernels (custom ops) whose signature it holds for this CPU "
                 "get the recorded schedule, the others the default; the report lists them (docs/dsl.md)");
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
