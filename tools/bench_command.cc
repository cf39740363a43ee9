// `kiln bench`: throughput and latency of a model under load, through the public C API
// (like ais_bench). D logical devices each get S streams; each stream has its own device
// buffers and a host thread that keeps it `--depth` executions deep with
// kilnmdlExecuteAsync. Events recorded around each execution give its latency (from the
// moment the stream starts it to its completion, so with several streams per device it
// includes waiting for the device's compute engine); the host time of each
// kilnmdlExecuteAsync call is the submission cost.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "kernels/kernel_registry.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/shape_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string input_shape;
  compiler::InputShapes shapes;     // parsed --input-shape
  int streams = 1;
  int devices = 0;  // 0: KILN_DEVICES or the runtime's default
  int threads = 0;  // 0: the device's cores
  double duration = 3;
  int loops = 0;  // when given, replaces --duration
  int warmup = 2;
  int depth = 2;
  unsigned seed = 0;
  bool json = false;
  bool reference_kernels = false;
  // Which options the user gave (to reject e.g. --devices 0 but not its absence).
  const CLI::Option* devices_opt = nullptr;
  const CLI::Option* threads_opt = nullptr;
  const CLI::Option* loops_opt = nullptr;
};

constexpr int kMaxLanes = 256;  // streams x devices: one host thread each

// A stream with its own buffers and, per execution slot, a pair of events around it.
struct Lane {
  kilnrtContext context = nullptr;
  uint32_t model_id = 0;
  std::unique_ptr<StreamHandle> stream;
  std::unique_ptr<IoBuffers> io;
  std::vector<std::unique_ptr<EventHandle>> starts, ends;
  // Filled by the lane's thread.
  std::vector<double> latency_ms;
  std::vector<double> host_us;
};

// One device: its default context, the model loaded on it and its lanes.
struct Rig {
  std::unique_ptr<DeviceGuard> device;
  std::unique_ptr<LoadedApiModel> model;
  std::vector<std::unique_ptr<Lane>> lanes;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double idx = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(idx));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Shared by the lane threads: the stop rule and the first error.
class Control {
 public:
  Control(const BenchArgs& args) : loops_left_(args.loops), by_loops_(args.loops > 0), duration_(args.duration) {}
  void start() { deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(duration_); }
  // True if one more timed execution may be submitted.
  bool claim() {
    if (failed_.load(std::memory_order_relaxed)) return false;
    if (by_loops_) return loops_left_.fetch_sub(1, std::memory_order_relaxed) > 0;
    return Clock::now() < deadline_;
  }
  void fail(Status s) {
    std::lock_guard lock(mutex_);
    if (error_.ok()) error_ = std::move(s);
    failed_.store(true);
  }
  bool failed() const { return failed_.load(); }
  Status error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  std::atomic<int64_t> loops_left_;
  bool by_loops_;
  std::chrono::duration<double> duration_;
  Clock::time_point deadline_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  Status error_;
};

Status warm_up(Lane& lane, int warmup) {
  for (int i = 0; i < warmup; ++i)
    KILN_API_RETURN_IF_ERROR(kilnmdlExecuteAsync(lane.model_id, lane.io->inputs(), lane.io->outputs(),
                                                 lane.stream->get()));
  KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(lane.stream->get()));
  return ok_status();
}

// The timed part of one lane: keeps the stream `depth` executions deep until the control
// says stop, then drains it.
Status drive(Lane& lane, Control& control) {
  kilnrtStream stream = lane.stream->get();
  size_t depth = lane.starts.size();
  std::vector<bool> pending(depth, false);
  auto collect = [&](size_t k) -> Status {
    KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeEvent(lane.ends[k]->get()));
    float ms = 0;
    KILN_API_RETURN_IF_ERROR(kilnrtEventElapsedTime(&ms, lane.starts[k]->get(), lane.ends[k]->get()));
    lane.latency_ms.push_back(ms);
    pending[k] = false;
    return ok_status();
  };
  for (size_t k = 0;; k = (k + 1) % depth) {
    if (pending[k]) KILN_RETURN_IF_ERROR(collect(k));
    if (!control.claim()) break;
    KILN_API_RETURN_IF_ERROR(kilnrtRecordEvent(lane.starts[k]->get(), stream));
    auto t0 = Clock::now();
    kilnError e = kilnmdlExecuteAsync(lane.model_id, lane.io->inputs(), lane.io->outputs(), stream);
    auto t1 = Clock::now();
    if (e != KILN_SUCCESS) return api_error(e, "kilnmdlExecuteAsync");
    lane.host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    KILN_API_RETURN_IF_ERROR(kilnrtRecordEvent(lane.ends[k]->get(), stream));
    pending[k] = true;
  }
  for (size_t k = 0; k < depth; ++k)
    if (pending[k]) KILN_RETURN_IF_ERROR(collect(k));
  // A failed execution still completes its events; the stream reports the failure here.
  KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(stream));
  return ok_status();
}

struct BenchResult {
  int devices = 0;
  int threads_per_device = 0;
  int64_t inferences = 0;
  double seconds = 0;
  std::vector<double> latency_ms, host_us;
  std::vector<std::string> notes;
};

// Releases lanes and models with their device's context current (streams and memory
// belong to a device), then the devices.
void tear_down(std::vector<Rig>& rigs) {
  for (Rig& rig : rigs) {
    if (rig.device) kilnrtSetCurrentContext(rig.device->context());
    rig.lanes.clear();
    rig.model.reset();
  }
  rigs.clear();
}

Status run_bench(const BenchArgs& args, BenchResult* result) {
  cap_threads(args.threads);  // before anything runs kernels (compiling ONNX folds constants)
  compiler::CompileOptions compile_options;
  compile_options.input_shapes = args.shapes;
  KILN_ASSIGN_OR_RETURN(ModelSource source, read_model_source(args.model, compile_options));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime,
                        Runtime::init({.devices = args.devices, .threads = args.threads}));
  result->devices = runtime->device_count();
  result->threads_per_device = runtime->threads_per_device();
  if (result->devices * args.streams > kMaxLanes)
    return invalid_argument("%d devices with %d stream%s each make %d streams, more than the %d allowed",
                            result->devices, args.streams, args.streams == 1 ? "" : "s",
                            result->devices * args.streams, kMaxLanes);
  std::vector<Rig> rigs(static_cast<size_t>(result->devices));
  struct Cleanup {
    std::vector<Rig>& rigs;
    ~Cleanup() { tear_down(rigs); }
  } cleanup{rigs};

  std::vector<Tensor> inputs;
  std::vector<size_t> output_bytes;  // sizes of outputs whose dims are not fixed, found on device 0
  for (int d = 0; d < result->devices; ++d) {
    Rig& rig = rigs[static_cast<size_t>(d)];
    KILN_ASSIGN_OR_RETURN(rig.device, DeviceGuard::set(d), "device %d", d);
    KILN_ASSIGN_OR_RETURN(rig.model, load_model(source), "device %d", d);
    // One set of host inputs for every stream: what differs between lanes is the buffers.
    if (d == 0) {
      HostInputOptions input_options;
      input_options.shapes = args.shapes;
      KILN_ASSIGN_OR_RETURN(input_options.bucket_shapes, first_bucket_shapes(source, *rig.model));
      KILN_ASSIGN_OR_RETURN(inputs,
                            make_host_inputs(*rig.model, args.inputs, args.seed, &result->notes, input_options));
    }
    for (int s = 0; s < args.streams; ++s) {
      auto lane = std::make_unique<Lane>();
      lane->context = rig.device->context();
      lane->model_id = rig.model->id();
      KILN_ASSIGN_OR_RETURN(lane->stream, StreamHandle::create());
      if (d == 0 && s == 0) {
        KILN_ASSIGN_OR_RETURN(lane->io, IoBuffers::create_fitted(*rig.model, inputs, &output_bytes));
      } else {
        KILN_ASSIGN_OR_RETURN(lane->io, IoBuffers::create(*rig.model, inputs, output_bytes));
      }
      for (int k = 0; k < args.depth; ++k) {
        KILN_ASSIGN_OR_RETURN(auto start, EventHandle::create());
        KILN_ASSIGN_OR_RETURN(auto end, EventHandle::create());
        lane->starts.push_back(std::move(start));
        lane->ends.push_back(std::move(end));
      }
      rig.lanes.push_back(std::move(lane));
    }
  }

  std::vector<Lane*> lanes;
  for (Rig& rig : rigs)
    for (auto& lane : rig.lanes) lanes.push_back(lane.get());
  Control control(args);
  // Every lane warms up, then all start the timed part together with the clock (started
  // by the barrier's completion, before any lane is released).
  Clock::time_point start;
  auto start_clock = [&]() noexcept {
    control.start();
    start = Clock::now();
  };
  std::barrier sync(static_cast<std::ptrdiff_t>(lanes.size() + 1), start_clock);
  std::vector<std::thread> threads;
  for (Lane* lane : lanes) {
    threads.emplace_back([lane, &args, &control, &sync] {
      Status s;
      if (kilnError e = kilnrtSetCurrentContext(lane->context); e != KILN_SUCCESS)
        s = api_error(e, "kilnrtSetCurrentContext");
      if (s.ok()) s = warm_up(*lane, args.warmup);
      if (!s.ok()) control.fail(std::move(s));
      sync.arrive_and_wait();
      if (control.failed()) return;
      s = drive(*lane, control);
      if (!s.ok()) control.fail(std::move(s));
    });
  }
  sync.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  result->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  KILN_RETURN_IF_ERROR(control.error());
  for (Lane* lane : lanes) {
    result->inferences += static_cast<int64_t>(lane->latency_ms.size());
    result->latency_ms.insert(result->latency_ms.end(), lane->latency_ms.begin(), lane->latency_ms.end());
    result->host_us.insert(result->host_us.end(), lane->host_us.begin(), lane->host_us.end());
  }
  return ok_status();
}

int bench_model(BenchArgs args) {
  if (args.streams < 1) return usage_error("bench", str_format("--streams must be at least 1 (got %d)", args.streams));
  if (args.devices_opt->count() && args.devices < 1)
    return usage_error("bench", str_format("--devices must be at least 1 (got %d)", args.devices));
  if (args.streams > kMaxLanes || (args.devices_opt->count() && int64_t{args.devices} * args.streams > kMaxLanes))
    return usage_error("bench", str_format("--devices x --streams must be at most %d (one host thread per stream)",
                                  kMaxLanes));
  if (args.loops_opt->count() && args.loops < 1)
    return usage_error("bench", str_format("--loops must be at least 1 (got %d)", args.loops));
  if (!(args.duration > 0) || !std::isfinite(args.duration))
    return usage_error("bench", str_format("--duration must be a positive number of seconds (got %g)", args.duration));
  if (args.warmup < 0) return usage_error("bench", str_format("--warmup must not be negative (got %d)", args.warmup));
  if (args.depth < 1) return usage_error("bench", str_format("--depth must be at least 1 (got %d)", args.depth));
  std::string error;
  args.threads = checked_threads("bench", args.threads_opt, args.threads, args.devices, &error);
  if (!error.empty()) return usage_error("bench", error);
  auto shapes = parse_run_shapes(args.input_shape);
  if (!shapes.ok()) return usage_error("bench", shapes.status().to_string());
  if (std::string bad = check_input_specs(args.inputs); !bad.empty()) return usage_error("bench", bad);
  args.shapes = std::move(*shapes);
  // Kernels are selected when the model is prepared (at load), after this.
  if (args.reference_kernels) kernels::set_fast_kernels_enabled(false);

  BenchResult r;
  Status status = run_bench(args, &r);
  if (!status.ok()) {
    std::string msg = status.to_string();
    for (const auto& n : r.notes) msg += " (note: " + n + ")";
    return report_error("bench", msg);
  }
  double throughput = r.seconds > 0 ? static_cast<double>(r.inferences) / r.seconds : 0;
  double p50 = percentile(r.latency_ms, 0.5), p90 = percentile(r.latency_ms, 0.9),
         p99 = percentile(r.latency_ms, 0.99);
  double lmin = r.latency_ms.empty() ? 0 : *std::min_element(r.latency_ms.begin(), r.latency_ms.end());
  double lmax = r.latency_ms.empty() ? 0 : *std::max_element(r.latency_ms.begin(), r.latency_ms.end());
  if (args.json) {
    nlohmann::json j;
    j["model"] = args.model;
    j["devices"] = r.devices;
    j["streams_per_device"] = args.streams;
    j["depth"] = args.depth;
    j["threads_per_device"] = r.threads_per_device;
    j["kernels"] = kernels::fast_kernels_enabled() ? "fast" : "reference";
    j["warmup_per_stream"] = args.warmup;
    j["inferences"] = r.inferences;
    j["seconds"] = r.seconds;
    j["throughput_per_s"] = throughput;
    j["latency_ms"] = {{"p50", p50}, {"p90", p90}, {"p99", p99},
                       {"min", lmin}, {"max", lmax}, {"mean", mean(r.latency_ms)}};
    j["host_us_per_call"] = {{"mean", mean(r.host_us)},
                             {"p50", percentile(r.host_us, 0.5)},
                             {"p99", percentile(r.host_us, 0.99)}};
    j["notes"] = r.notes;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::printf("model %s: %d device%s x %d stream%s, %d execution%s in flight per stream, %d thread%s per device%s\n",
              args.model.c_str(), r.devices, r.devices == 1 ? "" : "s", args.streams, args.streams == 1 ? "" : "s",
              args.depth, args.depth == 1 ? "" : "s", r.threads_per_device, r.threads_per_device == 1 ? "" : "s",
              kernels::fast_kernels_enabled() ? "" : ", reference kernels");
  std::printf("inferences    %lld in %.4f s (after %d warmup per stream)\n", static_cast<long long>(r.inferences),
              r.seconds, args.warmup);
  std::printf("throughput    %.2f inferences/s\n", throughput);
  std::printf("latency       p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (min %.3f, max %.3f, mean %.3f)\n", p50, p90, p99,
              lmin, lmax, mean(r.latency_ms));
  std::printf("host per call %.1f us per kilnmdlExecuteAsync (p50 %.1f us, p99 %.1f us)\n", mean(r.host_us),
              percentile(r.host_us, 0.5), percentile(r.host_us, 0.99));
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  app.add_option("model", args->model, "Model to benchmark (.kiln; an .onnx file is compiled in memory)")
      ->required();
  app.add_option("--input", args->inputs, "Input as NAME=FILE.npy (repeatable); missing inputs are random");
  add_input_shape_option(app, &args->input_shape);
  app.add_option("--streams", args->streams, "Streams per device, each with its own buffers (default 1)");
  args->devices_opt = app.add_option("--devices", args->devices,
                                     "Logical CPU devices splitting the cores (default: KILN_DEVICES or 1)");
  args->threads_opt =
      app.add_option("--threads", args->threads, "Threads per device, at most its cores (default: the device's cores)");
  auto* duration = app.add_option("--duration", args->duration, "Seconds of timed submissions (default 3)");
  CLI::Option* loops = app.add_option("--loops", args->loops, "Timed executions in all, instead of --duration");
  loops->excludes(duration);
  args->loops_opt = loops;
  app.add_option("--warmup", args->warmup, "Untimed executions per stream first (default 2)");
  app.add_option("--depth", args->depth, "Executions kept in flight per stream (default 2)");
  app.add_option("--seed", args->seed, "Seed for random inputs (default 0)");
  app.add_flag("--reference-kernels", args->reference_kernels,
               "Run every node on its reference kernel, no fast kernels (as KILN_KERNELS=reference)");
  app.add_flag("--json", args->json,
               "Print one JSON object (throughput_per_s, latency_ms {p50, p90, p99, ...}, host_us_per_call, ...)");
  return [args] { return bench_model(*args); };
}

KILN_REGISTER_SUBCOMMAND("bench", "Measure a model's throughput and latency over streams and devices", setup);

}  // namespace
}  // namespace kiln::tools
