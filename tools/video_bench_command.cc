// `kiln video-bench`: N real-time H.264 streams decoded with FFmpeg and analysed by a model
// on Kiln streams (src/apps/video/video_pipeline.h, docs/video.md): per stream the achieved
// fps, latency, dropped frames; the process CPU time by stage; and with --find-max-streams
// the headline number, the most streams sustained at the frame rate with no frame dropped.
#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "apps/video/video_pipeline.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct VideoBenchArgs {
  std::string model;
  std::vector<std::string> videos;
  int streams = 1;
  int devices = 0;
  int threads = 0;
  double fps = 25;
  double duration = 0;
  int queue = 2;
  bool json = false;
  std::vector<float> mean = {123.675f, 116.28f, 103.53f};
  std::vector<float> std = {58.395f, 57.12f, 57.375f};
  bool bgr = false;
  bool no_profile = false;
  bool find_max = false;
  int max_streams = 64;
  int opencv_threads = 1;
  const CLI::Option* threads_opt = nullptr;
  const CLI::Option* devices_opt = nullptr;
  const CLI::Option* streams_opt = nullptr;
};

double round_to(double v, int digits) {
  double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

nlohmann::json report_json(const video::VideoPipelineReport& r) {
  nlohmann::json streams = nlohmann::json::array();
  for (const video::StreamReport& s : r.streams) {
    nlohmann::json j = {{"stream", s.index},
                        {"device", s.device},
                        {"video", s.video},
                        {"width", s.width},
                        {"height", s.height},
                        {"frames_decoded", s.frames_decoded},
                        {"frames_inferred", s.frames_inferred},
                        {"frames_dropped", s.frames_dropped},
                        {"fps", round_to(s.fps, 2)},
                        {"latency_p50_ms", round_to(s.latency_p50_ms, 2)},
                        {"latency_p99_ms", round_to(s.latency_p99_ms, 2)},
                        {"decode_cpu_s", round_to(s.decode_cpu_s, 3)}};
    if (!s.error.empty()) j["error"] = s.error;
    streams.push_back(j);
  }
  double cpu = r.cpu_process_s;
  return {{"streams", streams},
          {"stream_count", r.streams.size()},
          {"preprocessing", r.aipp ? "aipp" : "opencv"},
          {"input", r.input_description},
          {"devices", r.devices},
          {"fps_target", r.fps_target},
          {"wall_s", round_to(r.wall_s, 3)},
          {"sustained", r.sustained},
          {"cpu_s",
           {{"process", round_to(cpu, 3)},
            {"decode", round_to(r.cpu_decode_s, 3)},
            {"preprocessing", round_to(r.cpu_preprocess_s, 3)},
            {"inference", round_to(r.cpu_inference_s, 3)}}},
          {"cpu_share",
           {{"decode", round_to(percent(r.cpu_decode_s, cpu) / 100, 4)},
            {"preprocessing", round_to(percent(r.cpu_preprocess_s, cpu) / 100, 4)},
            {"inference", round_to(percent(r.cpu_inference_s, cpu) / 100, 4)}}},
          {"cores_busy", r.wall_s > 0 ? round_to(cpu / r.wall_s, 2) : 0},
          {"aipp_op_share", round_to(r.aipp_op_share, 4)}};
}

void print_table(const video::VideoPipelineReport& r) {
  std::printf("model input: %s; %d device%s\n", r.input_description.c_str(), r.devices, r.devices == 1 ? "" : "s");
  std::printf("%-6s %-6s %-22s %-10s %8s %8s %8s %7s %8s %8s\n", "stream", "device", "video", "size", "decoded",
              "inferred", "dropped", "fps", "p50 ms", "p99 ms");
  int64_t decoded = 0, inferred = 0, dropped = 0;
  double fps = 0;
  for (const video::StreamReport& s : r.streams) {
    std::string size = s.width ? str_format("%dx%d", s.width, s.height) : "-";
    std::printf("%-6d %-6d %-22s %-10s %8lld %8lld %8lld %7.2f %8.1f %8.1f%s\n", s.index, s.device,
                file_name(s.video).substr(0, 22).c_str(), size.c_str(), static_cast<long long>(s.frames_decoded),
                static_cast<long long>(s.frames_inferred), static_cast<long long>(s.frames_dropped), s.fps,
                s.latency_p50_ms, s.latency_p99_ms, s.error.empty() ? "" : "  FAILED");
    decoded += s.frames_decoded;
    inferred += s.frames_inferred;
    dropped += s.frames_dropped;
    fps += s.fps;
  }
  std::printf("%-6s %-6s %-22s %-10s %8lld %8lld %8lld %7.2f\n", "total", "", "", "", static_cast<long long>(decoded),
              static_cast<long long>(inferred), static_cast<long long>(dropped), fps);
  double cpu = r.cpu_process_s;
  std::printf("%zu stream%s at %.0f fps for %.2f s: %s\n", r.streams.size(), r.streams.size() == 1 ? "" : "s",
              r.fps_target, r.wall_s, r.sustained ? "sustained (0 dropped)" : "NOT sustained");
  std::printf("process CPU %.2f s (%.2f cores busy): decode %.2f s (%.1f%%), preprocessing %.2f s (%.1f%%, %s), "
              "inference %.2f s (%.1f%%)\n",
              cpu, r.wall_s > 0 ? cpu / r.wall_s : 0, r.cpu_decode_s, percent(r.cpu_decode_s, cpu),
              r.cpu_preprocess_s, percent(r.cpu_preprocess_s, cpu),
              r.aipp ? (r.preprocess_from_profiler
                            ? str_format("AIPP in the model: Aipp %.1f%% of op time", 100 * r.aipp_op_share).c_str()
                            : "AIPP in the model, profiler off")
                     : "OpenCV on the host",
              r.cpu_inference_s, percent(r.cpu_inference_s, cpu));
}

int run_video_bench(VideoBenchArgs& args) {
  const std::string cmd = "video-bench";
  if (args.videos.empty()) return usage_error(cmd, "no video given (--video FILE)");
  if (args.streams < 1 || args.streams > 256) return usage_error(cmd, "--streams takes 1 to 256");
  if (args.devices_opt->count() && args.devices < 1) return usage_error(cmd, "--devices must be at least 1");
  if (!(args.fps > 0) || args.fps > 1000) return usage_error(cmd, "--fps takes a rate above 0 and at most 1000");
  if (!(args.duration >= 0)) return usage_error(cmd, "--duration must be >= 0 (0: each video once)");
  if (args.queue < 1 || args.queue > 1000) return usage_error(cmd, "--queue takes 1 to 1000 frames");
  if (args.max_streams < 1 || args.max_streams > 256) return usage_error(cmd, "--max-streams takes 1 to 256");
  if (args.opencv_threads < 0) return usage_error(cmd, "--opencv-threads must be >= 0");
  if (args.mean.size() != 3) return usage_error(cmd, "--mean takes 3 values (R,G,B order of the model's channels)");
  if (args.std.size() != 3) return usage_error(cmd, "--std takes 3 values");
  for (float s : args.std)
    if (!(s > 0)) return usage_error(cmd, "--std values must be positive");
  std::string error;
  int threads = checked_threads(cmd, args.threads_opt, args.threads, args.devices, &error);
  if (!error.empty()) return usage_error(cmd, error);
  std::error_code ec;
  if (std::filesystem::is_directory(args.model, ec))
    return report_error(cmd, args.model + ": is a directory, not a .kiln model");
  if (!std::filesystem::exists(args.model, ec)) return report_error(cmd, args.model + ": no such file");

  // Throughput layout when neither the devices nor the threads are given: one logical device
  // of one thread per core (as `kiln ocr` for several images). The decoders share the cores:
  // an operator's threads waiting at a barrier for one whose core a decoder took cost more
  // than they gain.
  int devices = args.devices;
  if (!args.devices_opt->count() && !args.threads_opt->count() && !std::getenv("KILN_DEVICES")) {
    devices = std::max(1, std::min(available_cores(), args.find_max ? args.max_streams : args.streams));
    if (devices > 1) threads = 1;
  }
  // The baseline's OpenCV runs on the worker thread, so that its CPU clock is its cost.
  cv::setNumThreads(args.opencv_threads == 0 ? -1 : args.opencv_threads);
  Expected<std::unique_ptr<Runtime>> runtime = Runtime::init({.devices = devices, .threads = threads});
  if (!runtime.ok()) return report_error(cmd, runtime.status().to_string());

  video::VideoPipelineOptions options;
  options.model_path = args.model;
  options.videos = args.videos;
  options.fps = args.fps;
  options.duration_s = args.duration;
  options.queue_frames = args.queue;
  options.normalization.bgr = args.bgr;
  for (int c = 0; c < 3; ++c) {
    options.normalization.mean[c] = args.mean[c];
    options.normalization.std[c] = args.std[c];
  }
  options.profile_ops = !args.no_profile;

  if (args.find_max) {
    // Raise the stream count until a stream drops a frame or falls under the rate.
    int best = 0;
    nlohmann::json runs = nlohmann::json::array();
    std::optional<video::VideoPipelineReport> best_report;
    int start = args.streams_opt->count() ? args.streams : 1;
    for (int n = start; n <= args.max_streams; ++n) {
      options.streams = n;
      Expected<video::VideoPipelineReport> r = video::run_video_pipeline(options);
      if (!r.ok()) return report_error(cmd, r.status().to_string());
      for (const video::StreamReport& s : r->streams)
        if (!s.error.empty()) return report_error(cmd, str_format("stream %d: %s", s.index, s.error.c_str()));
      int64_t dropped = 0;
      double min_fps = 1e9;
      for (const video::StreamReport& s : r->streams) {
        dropped += s.frames_dropped;
        min_fps = std::min(min_fps, s.fps);
      }
      std::fprintf(stderr, "kiln video-bench: %d stream%s: %s (slowest %.2f fps, %lld dropped, CPU %.0f%% decode, "
                   "%.0f%% preprocessing, %.0f%% inference)\n",
                   n, n == 1 ? "" : "s", r->sustained ? "sustained" : "not sustained", min_fps,
                   static_cast<long long>(dropped), percent(r->cpu_decode_s, r->cpu_process_s),
                   percent(r->cpu_preprocess_s, r->cpu_process_s), percent(r->cpu_inference_s, r->cpu_process_s));
      runs.push_back({{"streams", n}, {"sustained", r->sustained}, {"min_fps", round_to(min_fps, 2)},
                      {"dropped", dropped}});
      if (!r->sustained) {
        if (n == start && start > 1) {
          // Started too high: come down until one holds.
          for (int m = start - 1; m >= 1 && best == 0; --m) {
            options.streams = m;
            Expected<video::VideoPipelineReport> down = video::run_video_pipeline(options);
            if (!down.ok()) return report_error(cmd, down.status().to_string());
            std::fprintf(stderr, "kiln video-bench: %d stream%s: %s\n", m, m == 1 ? "" : "s",
                         down->sustained ? "sustained" : "not sustained");
            runs.push_back({{"streams", m}, {"sustained", down->sustained}});
            if (down->sustained) {
              best = m;
              best_report = *down;
            }
          }
        }
        break;
      }
      best = n;
      best_report = *r;
    }
    if (args.json) {
      nlohmann::json out = {{"max_streams", best}, {"fps", args.fps}, {"runs", runs}};
      if (best_report) out["best"] = report_json(*best_report);
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      if (best_report) print_table(*best_report);
      std::printf("most streams sustained at %.0f fps with 0 dropped frames: %d\n", args.fps, best);
    }
    return 0;
  }

  options.streams = args.streams;
  Expected<video::VideoPipelineReport> report = video::run_video_pipeline(options);
  if (!report.ok()) return report_error(cmd, report.status().to_string());
  int failed = 0;
  for (const video::StreamReport& s : report->streams)
    if (!s.error.empty()) {
      ++failed;
      report_error(cmd, str_format("stream %d: %s", s.index, s.error.c_str()));
    }
  if (args.json)
    std::printf("%s\n", report_json(*report).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else
    print_table(*report);
  return failed ? kExitError : 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<VideoBenchArgs>();
  app.add_option("model", args->model,
                 "A .kiln model: compiled with --insert-op-conf (an AIPP config taking NV12, YUV420SP_U8) or "
                 "taking float32 [1,3,H,W] (then OpenCV preprocesses each frame on the host)")
      ->required();
  app.add_option("--video", args->videos,
                 "An H.264 (or any FFmpeg-decodable) video file; repeat it to give streams different files "
                 "(stream i plays the (i mod count)-th)")
      ->required();
  args->streams_opt = app.add_option("--streams", args->streams, "Streams, each decoding its own copy (default 1)");
  args->devices_opt = app.add_option("--devices", args->devices,
                                     "Logical CPU devices splitting the cores; stream i runs on device i mod D "
                                     "(default: KILN_DEVICES, else one device of one thread per core, at most one "
                                     "per stream)");
  args->threads_opt =
      app.add_option("--threads", args->threads, "Threads per device, at most its cores (default: the device's cores)");
  app.add_option("--fps", args->fps, "Rate each stream delivers frames at, a real-time source (default 25)");
  app.add_option("--duration", args->duration,
                 "Seconds to run, replaying the video when shorter (default 0: each video once)");
  app.add_option("--queue", args->queue,
                 "Frames a stream may hold waiting for inference; a frame finding it full is dropped (default 2)");
  app.add_flag("--json", args->json, "Print one JSON object (per-stream figures, CPU split) instead of the table");
  app.add_option("--mean", args->mean, "Baseline: per-channel mean, 0..255 scale (default 123.675,116.28,103.53)")
      ->delimiter(',')
      ->expected(3);
  app.add_option("--std", args->std, "Baseline: per-channel std, 0..255 scale (default 58.395,57.12,57.375)")
      ->delimiter(',')
      ->expected(3);
  app.add_flag("--bgr", args->bgr, "Baseline: the model takes BGR (default RGB)");
  app.add_flag("--no-profile", args->no_profile,
               "Leave Kiln's profiler off (the AIPP share of the CPU time is then not measured)");
  app.add_flag("--find-max-streams", args->find_max,
               "Raise the stream count from --streams (default 1) until a stream drops a frame or falls under "
               "the rate; report the most streams sustained");
  app.add_option("--max-streams", args->max_streams, "Upper bound of --find-max-streams (default 64)");
  app.add_option("--opencv-threads", args->opencv_threads,
                 "Baseline: OpenCV's threads (default 1: the preprocessing runs on the inference worker, whose CPU "
                 "clock measures it; 0: OpenCV's default)");
  return [args] { return run_video_bench(*args); };
}

KILN_REGISTER_SUBCOMMAND("video-bench",
                         "Multi-stream video analytics benchmark: H.264 decode, preprocessing (AIPP or OpenCV), "
                         "inference; fps, latency, drops, CPU by stage",
                         setup);

}  // namespace
}  // namespace kiln::tools
