// `kiln run`: execute a model on given or random inputs, print outputs and latency, and
// optionally save the outputs as .npy files (like msame / ais_bench).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/npy.h"
#include "core/parallel.h"
#include "runtime/graph_executor.h"
#include "tools/model_source.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string output_dir;
  int loops = 1;
  int warmup = 0;
  int threads = 0;
  unsigned seed = 0;
  bool json = false;
};

// Random data of the right type: uniform [-1, 1) for floats, small non-negative
// integers (valid as indices and token ids) for integers.
Tensor random_tensor(DataType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t = Tensor::make(dtype, dims);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    switch (dtype) {
      case DataType::kFloat32: t.data<float>()[i] = real(rng); break;
      case DataType::kFloat64: t.data<double>()[i] = real(rng); break;
      case DataType::kFloat16: t.data<uint16_t>()[i] = float_to_fp16(real(rng)); break;
      case DataType::kBFloat16: t.data<uint16_t>()[i] = float_to_bf16(real(rng)); break;
      case DataType::kBool: t.data<bool>()[i] = small(rng) % 2; break;
      default:
        dispatch_numeric(dtype, [&]<typename T>() { t.data<T>()[i] = static_cast<T>(small(rng)); });
    }
  }
  return t;
}

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

Expected<std::vector<rt::NamedValue>> make_inputs(const RunArgs& args, const ir::Graph& g,
                                                   std::vector<std::string>* notes) {
  std::vector<rt::NamedValue> feeds;
  for (const std::string& spec : args.inputs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument("--input '%s' is not NAME=FILE.npy", spec.c_str());
    KILN_ASSIGN_OR_RETURN(Tensor t, read_npy(spec.substr(eq + 1)), "--input %s", spec.substr(0, eq).c_str());
    feeds.push_back({spec.substr(0, eq), std::move(t)});
  }
  std::mt19937 rng(args.seed);
  for (const ir::Value* v : g.inputs()) {
    bool fed = std::any_of(feeds.begin(), feeds.end(), [&](const auto& f) { return f.name == v->name(); });
    if (fed || v->has_initializer()) continue;
    if (!v->shape().has_rank())
      return invalid_argument("input '%s' has unknown rank: give it with --input", v->name().c_str());
    std::vector<int64_t> dims;
    std::string open_dims;
    for (const Dim& d : v->shape().dims()) {
      if (!d.is_static()) open_dims += (open_dims.empty() ? "" : ", ") + d.to_string();
      dims.push_back(d.is_static() ? d.value : 1);
    }
    if (!open_dims.empty())
      notes->push_back(str_format("input '%s' has dims not fixed (%s); random input uses 1 for them "
                                  "(fix them with kiln compile --input-shape)",
                                  v->name().c_str(), open_dims.c_str()));
    if (v->dtype() == DataType::kString || v->dtype() == DataType::kUndefined)
      return invalid_argument("input '%s' (%s) cannot be generated: give it with --input", v->name().c_str(),
                              v->type().to_string().c_str());
    feeds.push_back({v->name(), random_tensor(v->dtype(), dims, rng)});
  }
  return feeds;
}

Status save_outputs(const std::string& dir, const ir::Graph& g, const std::vector<Tensor>& outputs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable("cannot create %s: %s", dir.c_str(), ec.message().c_str());
  nlohmann::json index = nlohmann::json::object();
  std::set<std::string> used;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = g.outputs()[i]->name();
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

int run_model(const RunArgs& args) {
  if (args.loops < 1) return report_error("run", "--loops must be at least 1");
  if (args.warmup < 0) return report_error("run", "--warmup must not be negative");
  if (args.threads > 0) set_num_threads(args.threads);
  auto opened = open_model(args.model);
  if (!opened.ok()) return report_error("run", opened.status().to_string());
  auto executor = rt::GraphExecutor::create(opened->graph);
  if (!executor.ok()) return report_error("run", executor.status().to_string());
  std::vector<std::string> notes;
  auto feeds = make_inputs(args, *opened->graph, &notes);
  if (!feeds.ok()) return report_error("run", feeds.status().to_string());

  std::vector<RuntimeValue> values;
  std::vector<double> times;
  for (int i = 0; i < args.warmup + args.loops; ++i) {
    auto start = std::chrono::steady_clock::now();
    Status s = (*executor)->run(*feeds, &values);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) {
      // The run may have failed because of a dim we had to guess: say so on the same line.
      std::string msg = s.to_string();
      for (const auto& n : notes) msg += " (note: " + n + ")";
      return report_error("run", msg);
    }
    if (i >= args.warmup) times.push_back(ms);
  }
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].is_tensor())
      return report_error("run", str_format("output '%s' is %s: kiln run reports tensor outputs only",
                                            opened->graph->outputs()[i]->name().c_str(),
                                            values[i].description().c_str()));
    outputs.push_back(values[i].tensor());
  }
  if (!args.output_dir.empty()) {
    Status s = save_outputs(args.output_dir, *opened->graph, outputs);
    if (!s.ok()) return report_error("run", s.to_string());
  }

  const ir::Graph& g = *opened->graph;
  double median = percentile(times, 0.5), p90 = percentile(times, 0.9);
  double tmin = *std::min_element(times.begin(), times.end()), tmax = *std::max_element(times.begin(), times.end());
  if (args.json) {
    nlohmann::json j;
    j["model"] = args.model;
    j["load_ms"] = opened->open_ms;
    j["outputs"] = nlohmann::json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      Summary s = summarize(outputs[i]);
      j["outputs"].push_back({{"name", g.outputs()[i]->name()},
                              {"dtype", dtype_name(outputs[i].dtype())},
                              {"shape", outputs[i].dims()},
                              {"min", s.min},
                              {"max", s.max},
                              {"mean", s.mean},
                              {"first", s.head}});
    }
    j["latency_ms"] = {{"median", median}, {"min", tmin}, {"max", tmax}, {"p90", p90}};
    j["loops"] = args.loops;
    j["warmup"] = args.warmup;
    j["threads"] = num_threads();
    j["notes"] = notes;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  std::printf("model %s (%s, opened in %.1f ms)\n", args.model.c_str(),
              opened->kind == ModelKind::kKiln ? "offline model" : "ONNX, compiled in memory", opened->open_ms);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Summary s = summarize(outputs[i]);
    std::printf("output %s: %s  min %.6g  max %.6g  mean %.6g  first [", g.outputs()[i]->name().c_str(),
                outputs[i].description().c_str(), s.min, s.max, s.mean);
    for (size_t k = 0; k < s.head.size(); ++k) std::printf("%s%.6g", k ? ", " : "", s.head[k]);
    std::printf("%s]\n", outputs[i].num_elements() > 5 ? ", ..." : "");
  }
  std::printf("latency over %d loop%s (%d thread%s): median %.3f ms, min %.3f ms, max %.3f ms\n", args.loops,
              args.loops == 1 ? "" : "s", num_threads(), num_threads() == 1 ? "" : "s", median, tmin, tmax);
  if (!args.output_dir.empty()) std::printf("outputs written to %s\n", args.output_dir.c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  app.add_option("model", args->model, "Model to run (.kiln; an .onnx file is compiled in memory)")->required();
  app.add_option("--input", args->inputs, "Input as NAME=FILE.npy (repeatable); missing inputs are random");
  app.add_option("--output-dir", args->output_dir, "Write each output as .npy plus outputs.json here");
  app.add_option("--loops", args->loops, "Timed runs (default 1)");
  app.add_option("--warmup", args->warmup, "Untimed runs before the timed ones (default 0)");
  app.add_option("--threads", args->threads, "Intra-op threads (default: KILN_NUM_THREADS or all cores)");
  app.add_option("--seed", args->seed, "Seed for random inputs (default 0)");
  app.add_flag("--json", args->json, "Print the result as one JSON object");
  return [args] { return run_model(*args); };
}

KILN_REGISTER_SUBCOMMAND("run", "Run a model and report outputs and latency", setup);

}  // namespace
}  // namespace kiln::tools
