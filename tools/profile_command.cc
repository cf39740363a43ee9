// `kiln profile`: runs a model through the public C API with profiling on (kilnprof*),
// writes the profile directory (timeline.json, op_summary.csv, op_statistic.csv,
// api_statistic.csv) and prints the top-10 op types; `kiln profile diff BASE NEW` compares
// two profile directories per op type and per node.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "compiler/compiler.h"
#include "profiler/profiler.h"
#include "profiler/records.h"
#include "profiler/report.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/model_source.h"
#include "tools/shape_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct ProfileArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string input_shape;
  compiler::InputShapes shapes;     // parsed --input-shape
  std::string output = "kiln-profile";
  int loops = 10;
  int warmup = 2;
  int top = 10;
  unsigned seed = 0;
  // diff
  std::string base_dir;
  std::string new_dir;
  CLI::App* diff = nullptr;
};

// Compiles an ONNX model in memory with the pass records on the timeline as compile
// phases (the profile session is recording), and gives the .kiln bytes.
Expected<ModelSource> compile_with_phases(const std::string& path, const compiler::CompileOptions& options) {
  ModelSource source;
  source.path = path;
  source.from_onnx = true;
  int64_t start = profiler::now_ns();
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(path, options));
  if (profiler::enabled()) {
    std::vector<std::pair<std::string, double>> phases;
    for (const compiler::PassRecord& r : compiled.passes) phases.emplace_back(r.name, r.ms);
    profiler::record_compile_phases(phases, start);
  }
  std::string tmp = (std::filesystem::temp_directory_path() / "kiln-profile-XXXXXX.kiln").string();
  int fd = mkstemps(tmp.data(), 5);
  if (fd < 0) return unavailable("cannot create a temporary file for the compiled %s", path.c_str());
  close(fd);
  Status written = compiler::write_compiled_model(compiled, tmp);
  if (written.ok()) {
    std::ifstream in(tmp, std::ios::binary);
    source.kiln_bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) written = unavailable("cannot read back the compiled model %s", tmp.c_str());
  }
  std::remove(tmp.c_str());
  KILN_RETURN_IF_ERROR(written, "compiling %s in memory", path.c_str());
  source.compile_ms = static_cast<double>(profiler::now_ns() - start) / 1e6;
  return source;
}

// Stops and finalizes the session however the run ends, so the next kilnprofInit works.
class SessionGuard {
 public:
  ~SessionGuard() {
    if (active) kilnprofFinalize();
  }
  bool active = false;
};

struct RunResult {
  std::vector<double> loop_ms;
  std::string table;
  std::vector<std::string> notes;
};

// Profiles into `dir` (a fresh directory next to --output, see profile_model).
Status run_profile(const ProfileArgs& args, const std::string& dir, RunResult* result) {
  SessionGuard session;
  KILN_API_RETURN_IF_ERROR(kilnprofInit(dir.c_str(), dir.size()));
  session.active = true;
  KILN_API_RETURN_IF_ERROR(kilnprofStart());

  // Compile (ONNX) and load are on the timeline; warm-up is not.
  KILN_ASSIGN_OR_RETURN(ModelKind kind, sniff_model_kind(args.model));
  ModelSource source;
  if (kind == ModelKind::kOnnx) {
    compiler::CompileOptions options;
    options.input_shapes = args.shapes;
    KILN_ASSIGN_OR_RETURN(source, compile_with_phases(args.model, options));
  } else {
    source.path = args.model;
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::init({}));
  {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGuard> device, DeviceGuard::set(0));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<LoadedApiModel> model, load_model(source));
    KILN_API_RETURN_IF_ERROR(kilnprofStop());
    HostInputOptions input_options;
    input_options.shapes = args.shapes;
    KILN_ASSIGN_OR_RETURN(input_options.bucket_shapes, first_bucket_shapes(source, *model));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> host_inputs,
                          make_host_inputs(*model, args.inputs, args.seed, &result->notes, input_options));
    std::vector<size_t> output_bytes;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<IoBuffers> io,
                          IoBuffers::create_fitted(*model, host_inputs, &output_bytes));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<StreamHandle> stream, StreamHandle::create());
    for (int i = 0; i < args.warmup; ++i)
      KILN_API_RETURN_IF_ERROR(kilnmdlExecuteAsync(model->id(), io->inputs(), io->outputs(), stream->get()));
    KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(stream->get()));

    // Each loop is one execution waited for, so the timeline shows one inference at a
    // time and the per-loop wall time is the latency.
    KILN_API_RETURN_IF_ERROR(kilnprofStart());
    for (int i = 0; i < args.loops; ++i) {
      auto t0 = Clock::now();
      KILN_API_RETURN_IF_ERROR(kilnmdlExecuteAsync(model->id(), io->inputs(), io->outputs(), stream->get()));
      KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(stream->get()));
      result->loop_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    KILN_API_RETURN_IF_ERROR(kilnprofStop());
  }
  result->table = profiler::top_op_types_table(profiler::collect(/*consume=*/false),
                                               static_cast<size_t>(args.top));
  session.active = false;
  KILN_API_RETURN_IF_ERROR(kilnprofFinalize());
  return ok_status();
}

// Moves the files of `from` into `to` (created if need be), replacing files of the same
// name, and removes `from`.
Status move_profile(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::create_directories(to, ec);
  if (ec) return unavailable("cannot create the profile directory %s: %s", to.c_str(), ec.message().c_str());
  for (const auto& entry : std::filesystem::directory_iterator(from, ec)) {
    std::filesystem::rename(entry.path(), to / entry.path().filename(), ec);
    if (ec) return unavailable("cannot move %s into %s: %s", entry.path().c_str(), to.c_str(), ec.message().c_str());
  }
  std::filesystem::remove_all(from, ec);
  return ok_status();
}

int profile_model(ProfileArgs args) {
  if (args.model.empty()) return usage_error("profile", "a model (or 'diff BASE_DIR NEW_DIR') is required");
  if (args.loops < 1) return usage_error("profile", str_format("--loops must be at least 1 (got %d)", args.loops));
  if (args.warmup < 0) return usage_error("profile", str_format("--warmup must not be negative (got %d)", args.warmup));
  if (args.top < 1) return usage_error("profile", str_format("--top must be at least 1 (got %d)", args.top));
  if (args.output.empty()) return usage_error("profile", "--output must not be empty");
  auto shapes = parse_run_shapes(args.input_shape);
  if (!shapes.ok()) return usage_error("profile", shapes.status().to_string());
  if (std::string bad = check_input_specs(args.inputs); !bad.empty()) return usage_error("profile", bad);
  args.shapes = std::move(*shapes);
  if (std::string bad = check_output_dir("--output", args.output); !bad.empty()) return report_error("profile", bad);
  std::error_code ec;
  // The profile is written into a fresh directory beside --output and moved there only when
  // the run succeeded: a failed run leaves no (empty, misleading) profile and keeps the one
  // --output may hold from before.
  std::filesystem::path out = std::filesystem::path(args.output).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  std::string partial = (out.parent_path() / (out.filename().string() + ".partial-XXXXXX")).string();
  if (!mkdtemp(partial.data()))
    return report_error("profile", "cannot create a directory beside " + args.output + ": " + std::strerror(errno));
  RunResult r;
  Status s = run_profile(args, partial, &r);
  if (s.ok()) s = move_profile(partial, out);
  std::filesystem::remove_all(partial, ec);
  if (!s.ok()) {
    std::string msg = s.to_string() + " (no profile written)";
    for (const auto& n : r.notes) msg += " (note: " + n + ")";
    return report_error("profile", msg);
  }
  for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::vector<double> sorted = r.loop_ms;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  std::printf("profiled %s: %d loop%s after %d warm-up, median %.3f ms per inference\n", args.model.c_str(),
              args.loops, args.loops == 1 ? "" : "s", args.warmup, median);
  std::printf("top %d op types by device time:\n%s", args.top, r.table.c_str());
  std::printf("wrote %s/{%s,%s,%s,%s}\n", args.output.c_str(), profiler::kTimelineFile, profiler::kOpSummaryFile,
              profiler::kOpStatisticFile, profiler::kApiStatisticFile);
  return 0;
}

// A profile with no op records (a run that failed before executing anything, by an older
// kiln that still wrote it) would make every op look removed: -100%.
Expected<profiler::ProfileData> read_nonempty_profile(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(profiler::ProfileData data, profiler::read_profile_dir(dir));
  if (data.nodes.empty())
    return failed_precondition("profile '%s' has no op records (%s is empty): its run failed or executed nothing; "
                               "profile the model again",
                               dir.c_str(), profiler::kOpSummaryFile);
  return data;
}

int profile_diff(const ProfileArgs& args) {
  auto before = read_nonempty_profile(args.base_dir);
  if (!before.ok()) return report_error("profile diff", before.status().to_string());
  auto after = read_nonempty_profile(args.new_dir);
  if (!after.ok()) return report_error("profile diff", after.status().to_string());
  profiler::ProfileDiff d = profiler::diff_profiles(*before, *after);
  std::printf("%s", profiler::format_diff(d, args.base_dir, args.new_dir, static_cast<size_t>(args.top)).c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  app.add_option("model", args->model, "Model to profile (.kiln; an .onnx file is compiled in memory, its passes timed)");
  app.add_option("--input", args->inputs, "Input as NAME=FILE.npy (repeatable); missing inputs are random");
  add_input_shape_option(app, &args->input_shape);
  app.add_option("--output", args->output,
                 "Profile directory to write (default kiln-profile); nothing is written when the run fails");
  app.add_option("--loops", args->loops, "Profiled executions, one at a time (default 10)");
  app.add_option("--warmup", args->warmup, "Executions before profiling starts (default 2)");
  app.add_option("--top", args->top, "Rows of the printed tables (default 10)");
  app.add_option("--seed", args->seed, "Seed for random inputs (default 0)");
  args->diff = app.add_subcommand("diff", "Compare two profile directories per op type and per node");
  args->diff->add_option("base", args->base_dir, "Baseline profile directory")->required();
  args->diff->add_option("new", args->new_dir, "New profile directory")->required();
  args->diff->add_option("--top", args->top, "Node changes shown each way (default 10)");
  return [args] {
    if (args->diff->parsed()) {
      if (args->top < 1) return usage_error("profile diff", str_format("--top must be at least 1 (got %d)", args->top));
      return profile_diff(*args);
    }
    return profile_model(*args);
  };
}

KILN_REGISTER_SUBCOMMAND("profile", "Profile a model (timeline, per-op summary) or diff two profiles", setup);

}  // namespace
}  // namespace kiln::tools
