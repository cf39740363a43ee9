// `kiln run`: execute a model on given or random inputs, print outputs and latency, and
// optionally save the outputs as .npy files (like msame / ais_bench). It drives the model
// only through the public C API (kilnInit, kilnrtSetDevice, a stream, kilnmdlLoad*,
// device buffers and datasets, kilnmdlExecuteAsync), as a user program would.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/npy.h"
#include "kernels/kernel_registry.h"
#include "runtime/model_runtime.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/shape_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string output_dir;
  std::string input_shape;
  int loops = 1;
  int warmup = 1;
  int threads = 0;
  const CLI::Option* threads_opt = nullptr;
  unsigned seed = 0;
  bool json = false;
  bool reference_kernels = false;
};

std::string sanitize(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return out.empty() ? "output" : out;
}

struct Summary {
  double min = 0, max = 0, mean = 0;
  std::vector<double> head;
};

Summary summarize(const Tensor& t) {
  Summary s;
  if (t.dtype() == DataType::kString || t.num_elements() == 0) return s;
  s.min = INFINITY;
  s.max = -INFINITY;
  double sum = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = t.element_as_double(i);
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    sum += v;
    if (i < 5) s.head.push_back(v);
  }
  s.mean = sum / static_cast<double>(t.num_elements());
  return s;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  double idx = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(idx));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

Status save_outputs(const std::string& dir, const std::vector<std::string>& names,
                    const std::vector<Tensor>& outputs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable("cannot create %s: %s", dir.c_str(), ec.message().c_str());
  nlohmann::json index = nlohmann::json::object();
  std::set<std::string> used;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = names[i];
    std::string file = sanitize(name);
    for (int k = 1; used.count(file); ++k) file = sanitize(name) + "_" + std::to_string(k);
    used.insert(file);
    file += ".npy";
    KILN_RETURN_IF_ERROR(write_npy((std::filesystem::path(dir) / file).string(), outputs[i]));
    index[name] = {{"file", file}, {"dtype", dtype_name(outputs[i].dtype())}, {"shape", outputs[i].dims()}};
  }
  std::ofstream out(std::filesystem::path(dir) / "outputs.json");
  out << index.dump(2) << "\n";
  if (!out) return unavailable("cannot write %s/outputs.json", dir.c_str());
  return ok_status();
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct RunResult {
  double load_ms = 0;
  bool from_onnx = false;
  std::vector<std::string> output_names;
  std::vector<Tensor> outputs;
  std::vector<double> times;  // the timed runs (after --warmup)
  double cold_ms = 0;         // the first execution of all, warm-up or not: buffers, caches, first-shape plans
  std::vector<std::string> notes;
  int threads = 0;
  // Activation blocks the execution arena took from the heap (ExecutionArena::Stats), in the
  // first execution, in all later ones, and after the second. A static model's .kiln carries
  // its memory plan, used from the first execution on (none taken); without one, the first
  // execution records the sizes the plan is made of and gives its blocks back to the system
  // when it ends, so the second may take a few for kernels' own allocations.
  uint64_t fresh_blocks_first = 0, fresh_blocks_later = 0, fresh_blocks_after_second = 0;
  uint64_t reused_blocks = 0, recycled_outputs = 0;
  size_t arena_peak_bytes = 0;
  // The execution state's memory plan (the .kiln's, or made from the first execution): its
  // block's bytes and the outputs placed in it.
  size_t planned_bytes = 0;
  uint64_t planned_outputs = 0;
};

// Everything between kilnInit and kilnFinalize. The owners are declared in acquisition
// order so that they are released in reverse (buffers, model, stream, device, runtime).
Status execute(const RunArgs& args, const compiler::InputShapes& shapes, RunResult* result) {
  cap_threads(args.threads);  // before anything runs kernels (compiling ONNX folds constants)
  compiler::CompileOptions compile_options;
  compile_options.input_shapes = shapes;
  KILN_ASSIGN_OR_RETURN(ModelSource source, read_model_source(args.model, compile_options));
  RuntimeOptions options{.devices = 0, .threads = args.threads};
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::init(options));
  result->threads = runtime->threads_per_device();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGuard> device, DeviceGuard::set(0));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<StreamHandle> stream, StreamHandle::create());
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<LoadedApiModel> model, load_model(source));
  // As before the C API: the time to compile (for ONNX) and load the model.
  result->load_ms = source.compile_ms + ms_since(start);
  result->from_onnx = source.from_onnx;
  for (const TensorSpec& s : model->outputs()) result->output_names.push_back(s.name);

  HostInputOptions input_options;
  input_options.shapes = shapes;
  KILN_ASSIGN_OR_RETURN(input_options.bucket_shapes, first_bucket_shapes(source, *model));
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> inputs,
                        make_host_inputs(*model, args.inputs, args.seed, &result->notes, input_options));
  std::vector<size_t> output_bytes;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<IoBuffers> io, IoBuffers::create_fitted(*model, inputs, &output_bytes));
  // The device buffers hold the inputs now: the host copies (PP-OCRv4 det's 4.9 MB at 640) would
  // stay resident through every execution for nothing (issue 33's peak RSS).
  inputs = {};
  // The arena counters are read from the runtime's model table (diagnostics the C API does
  // not offer); the executions themselves go through the C API.
  std::shared_ptr<rt::Model> runtime_model = rt::ModelTable::get().find(model->id());
  auto fresh_blocks = [&] { return runtime_model ? runtime_model->stats().arenas.fresh_blocks : 0; };
  const uint64_t fresh_at_load = fresh_blocks();
  uint64_t fresh_after_first = fresh_at_load, fresh_after_second = fresh_at_load;
  for (int i = 0; i < args.warmup + args.loops; ++i) {
    auto t = std::chrono::steady_clock::now();
    KILN_API_RETURN_IF_ERROR(kilnmdlExecuteAsync(model->id(), io->inputs(), io->outputs(), stream->get()));
    KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(stream->get()));
    double ms = ms_since(t);
    if (i >= args.warmup) result->times.push_back(ms);
    if (i == 0) {
      result->cold_ms = ms;
      fresh_after_first = fresh_blocks();
    }
    if (i <= 1) fresh_after_second = fresh_blocks();
  }
  if (runtime_model) {
    rt::Model::Stats stats = runtime_model->stats();
    result->fresh_blocks_first = fresh_after_first - fresh_at_load;
    result->fresh_blocks_later = stats.arenas.fresh_blocks - fresh_after_first;
    result->fresh_blocks_after_second = stats.arenas.fresh_blocks - fresh_after_second;
    result->reused_blocks = stats.arenas.reused_blocks;
    result->recycled_outputs = stats.recycled_outputs;
    result->arena_peak_bytes = stats.arenas.peak_in_use;
    result->planned_bytes = stats.planned_bytes;
    result->planned_outputs = stats.planned_outputs;
  }
  // The outputs are in our buffers: the model's arena and weights are returned before they
  // are copied back, so that the host copies do not add to the run's peak RSS (PP-OCRv4
  // det's 1.6 MB output did, issue 33).
  runtime_model.reset();
  KILN_RETURN_IF_ERROR(model->unload());
  KILN_ASSIGN_OR_RETURN(result->outputs, io->read_outputs(*model));
  return ok_status();
}

int run_model(RunArgs args) {
  if (args.loops < 1) return usage_error("run", str_format("--loops must be at least 1 (got %d)", args.loops));
  if (args.warmup < 0) return usage_error("run", str_format("--warmup must not be negative (got %d)", args.warmup));
  std::string error;
  args.threads = checked_threads("run", args.threads_opt, args.threads, 0, &error);
  if (!error.empty()) return usage_error("run", error);
  auto shapes = parse_run_shapes(args.input_shape);
  if (!shapes.ok()) return usage_error("run", shapes.status().to_string());
  if (std::string bad = check_input_specs(args.inputs); !bad.empty()) return usage_error("run", bad);
  if (std::string bad = check_output_dir("--output-dir", args.output_dir); !bad.empty())
    return report_error("run", bad);
  // Kernels are selected when the model is prepared (at load), after this.
  if (args.reference_kernels) kernels::set_fast_kernels_enabled(false);
  RunResult r;
  Status status = execute(args, *shapes, &r);
  if (!status.ok()) {
    // The run may have failed because of a dim we had to guess: say so on the same line.
    std::string msg = status.to_string();
    for (const auto& n : r.notes) msg += " (note: " + n + ")";
    return report_error("run", msg);
  }
  if (!args.output_dir.empty()) {
    Status saved = save_outputs(args.output_dir, r.output_names, r.outputs);
    if (!saved.ok()) return report_error("run", saved.to_string());
  }

  const std::vector<double>& times = r.times;
  double median = percentile(times, 0.5), p90 = percentile(times, 0.9);
  double tmin = *std::min_element(times.begin(), times.end()), tmax = *std::max_element(times.begin(), times.end());
  if (args.json) {
    nlohmann::json j;
    j["model"] = args.model;
    j["load_ms"] = r.load_ms;
    j["outputs"] = nlohmann::json::array();
    for (size_t i = 0; i < r.outputs.size(); ++i) {
      Summary s = summarize(r.outputs[i]);
      j["outputs"].push_back({{"name", r.output_names[i]},
                              {"dtype", dtype_name(r.outputs[i].dtype())},
                              {"shape", r.outputs[i].dims()},
                              {"min", s.min},
                              {"max", s.max},
                              {"mean", s.mean},
                              {"first", s.head}});
    }
    j["latency_ms"] = {{"median", median}, {"min", tmin}, {"max", tmax}, {"p90", p90}};
    j["first_run_ms"] = r.cold_ms;
    j["loops"] = args.loops;
    j["warmup"] = args.warmup;
    j["threads"] = r.threads;
    j["kernels"] = kernels::fast_kernels_enabled() ? "fast" : "reference";
    j["arena"] = {{"fresh_blocks_first_run", r.fresh_blocks_first},
                  {"fresh_blocks_later_runs", r.fresh_blocks_later},
                  {"fresh_blocks_after_second_run", r.fresh_blocks_after_second},
                  {"reused_blocks", r.reused_blocks},
                  {"recycled_outputs", r.recycled_outputs},
                  {"peak_bytes", r.arena_peak_bytes},
                  {"planned_bytes", r.planned_bytes},
                  {"planned_outputs", r.planned_outputs}};
    j["notes"] = r.notes;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::printf("model %s (%s, opened in %.1f ms)\n", args.model.c_str(),
              r.from_onnx ? "ONNX, compiled in memory" : "offline model", r.load_ms);
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    Summary s = summarize(r.outputs[i]);
    std::printf("output %s: %s  min %.6g  max %.6g  mean %.6g  first [", r.output_names[i].c_str(),
                r.outputs[i].description().c_str(), s.min, s.max, s.mean);
    for (size_t k = 0; k < s.head.size(); ++k) std::printf("%s%.6g", k ? ", " : "", s.head[k]);
    std::printf("%s]\n", r.outputs[i].num_elements() > 5 ? ", ..." : "");
  }
  // The first execution pays for first-touch memory, caches and per-shape plans: it is shown
  // apart so that the timed figure is the steady state (after --warmup runs).
  std::printf("first run (cold): %.3f ms\n", r.cold_ms);
  std::printf("latency over %d loop%s after %d warm-up (%d thread%s): median %.3f ms, min %.3f ms, max %.3f ms\n",
              args.loops, args.loops == 1 ? "" : "s", args.warmup, r.threads, r.threads == 1 ? "" : "s", median, tmin,
              tmax);
  if (!args.output_dir.empty()) std::printf("outputs written to %s\n", args.output_dir.c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  app.add_option("model", args->model, "Model to run (.kiln; an .onnx file is compiled in memory)")->required();
  app.add_option("--input", args->inputs, "Input as NAME=FILE.npy (repeatable); missing inputs are random");
  add_input_shape_option(app, &args->input_shape);
  app.add_option("--output-dir", args->output_dir, "Write each output as .npy plus outputs.json here");
  app.add_option("--loops", args->loops, "Timed runs (default 1)");
  app.add_option("--warmup", args->warmup,
                 "Untimed runs before the timed ones (default 1); the first run of all is reported apart as cold");
  args->threads_opt = app.add_option("--threads", args->threads,
                                     "Intra-op threads, at most the cores (default: KILN_NUM_THREADS or all cores)");
  app.add_option("--seed", args->seed, "Seed for random inputs (default 0)");
  app.add_flag("--json", args->json,
               "Print the result as one JSON object (with arena {fresh_blocks_first_run, fresh_blocks_later_runs, fresh_blocks_after_second_run, "
               "reused_blocks, recycled_outputs, peak_bytes, planned_bytes, planned_outputs}: activation blocks taken from the heap, reused from the arena, or reused with their tensors from the execution state, and the memory plan: the .kiln's arena plan, or one made from the first execution)");
  app.add_flag("--reference-kernels", args->reference_kernels,
               "Run every node on its reference kernel, no fast kernels (as KILN_KERNELS=reference)");
  return [args] { return run_model(*args); };
}

KILN_REGISTER_SUBCOMMAND("run", "Run a model and report outputs and latency", setup);

}  // namespace
}  // namespace kiln::tools
