// `kiln loadgen URL --model M`: a load generator for KServe v2 servers (kiln serve, Triton),
// in the manner of Triton's perf_analyzer: C client threads, each with one keep-alive
// connection, send binary-tensor requests (the inputs given as .npy files, the others random
// data shaped from the model's metadata, open dims as 1) for a duration; closed loop (each
// sends its next request when the last is answered) or, with --rate, open loop (request k of
// the whole run is due at start + k/rate, latency counted from when it was due, so a slow
// server cannot hide its queueing).
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/dtype.h"
#include "core/npy.h"
#include "serve/infer_codec.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct LoadgenArgs {
  std::string url;
  std::string model;
  int concurrency = 1;
  double duration = 10;
  double rate = 0;  // requests per second over all clients; 0: closed loop
  bool json_output = false;
  std::vector<std::string> inputs;  // NAME=FILE.npy
};

// The request body (binary tensors) for the model's metadata: the inputs of `given` with
// their data, dtype and shape, the others random. An error names an input the model lacks or
// a .npy of another dtype than the model's.
Expected<std::pair<std::string, size_t>> make_body(const json& meta, const std::map<std::string, Tensor>& given) {
  json header{{"inputs", json::array()}, {"parameters", {{"binary_data_output", true}}}};
  std::string data;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::string names;
  for (const json& in : meta.at("inputs")) names += (names.empty() ? "" : ", ") + in.at("name").get<std::string>();
  for (const auto& [name, tensor] : given) {
    auto known = std::find_if(meta.at("inputs").begin(), meta.at("inputs").end(),
                              [&](const json& in) { return in.at("name") == name; });
    if (known == meta.at("inputs").end())
      return invalid_argument("--input %s: the model has no input '%s' (inputs: %s)", name.c_str(), name.c_str(),
                              names.c_str());
    if (known->at("datatype") != serve::kserve_datatype(tensor.dtype()))
      return invalid_argument("--input %s: the file holds %s, the model's input is %s", name.c_str(),
                              serve::kserve_datatype(tensor.dtype()),
                              known->at("datatype").get<std::string>().c_str());
  }
  for (const json& in : meta.at("inputs")) {
    if (auto it = given.find(in.at("name").get<std::string>()); it != given.end()) {
      const Tensor& t = it->second;
      header["inputs"].push_back({{"name", in.at("name")}, {"datatype", in.at("datatype")}, {"shape", t.dims()},
                                  {"parameters", {{"binary_data_size", t.size_bytes()}}}});
      data.append(static_cast<const char*>(t.raw_data()), t.size_bytes());
      continue;
    }
    auto dtype = serve::dtype_from_kserve(in.at("datatype").get<std::string>());
    if (!dtype) return invalid_argument("input '%s' has datatype %s, which loadgen cannot generate",
                                        in.at("name").get<std::string>().c_str(), in.at("datatype").dump().c_str());
    std::vector<int64_t> shape;
    int64_t count = 1;
    for (const json& d : in.at("shape")) {
      shape.push_back(std::max<int64_t>(d.get<int64_t>(), 1));  // an open dim (-1) as 1
      count *= shape.back();
    }
    std::string bytes(dtype_bytes(*dtype, count), '\0');
    if (*dtype == DataType::kFloat32)
      for (int64_t i = 0; i < count; ++i) {
        float v = uniform(rng);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
    header["inputs"].push_back({{"name", in.at("name")}, {"datatype", in.at("datatype")}, {"shape", shape},
                                {"parameters", {{"binary_data_size", bytes.size()}}}});
    data += bytes;
  }
  std::string text = header.dump();
  return std::make_pair(text + data, text.size());
}

double percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5))];
}

int loadgen(const LoadgenArgs& args) {
  if (args.concurrency < 1 || args.concurrency > 1024)
    return usage_error("loadgen", str_format("--concurrency must be 1..1024 (got %d)", args.concurrency));
  if (!(args.duration > 0) || !std::isfinite(args.duration))
    return usage_error("loadgen", str_format("--duration must be a positive number of seconds (got %g)", args.duration));
  if (args.rate < 0 || !std::isfinite(args.rate))
    return usage_error("loadgen", str_format("--rate must not be negative (got %g)", args.rate));
  if (std::string bad = check_input_specs(args.inputs); !bad.empty()) return usage_error("loadgen", bad);
  std::map<std::string, Tensor> given;
  for (const std::string& spec : args.inputs) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    if (given.count(name)) return usage_error("loadgen", "--input " + name + " is given twice");
    Expected<Tensor> t = read_npy(spec.substr(eq + 1));
    if (!t.ok()) return report_error("loadgen", "--input " + name + ": " + t.status().to_string());
    given.emplace(name, std::move(*t));
  }
  httplib::Client probe(args.url);
  if (!probe.is_valid()) return usage_error("loadgen", "'" + args.url + "' is not an http://HOST:PORT URL");
  const std::string path = "/v2/models/" + args.model;
  auto meta_res = probe.Get(path);
  if (!meta_res) return report_error("loadgen", "cannot reach " + args.url + ": " + httplib::to_string(meta_res.error()));
  if (meta_res->status != 200)
    return report_error("loadgen", str_format("GET %s: HTTP %d %s", path.c_str(), meta_res->status, meta_res->body.c_str()));
  json meta = json::parse(meta_res->body, nullptr, false);
  if (meta.is_discarded() || !meta.contains("inputs")) return report_error("loadgen", "GET " + path + ": not model metadata");
  Expected<std::pair<std::string, size_t>> body = make_body(meta, given);
  if (!body.ok()) return report_error("loadgen", body.status().to_string());
  const httplib::Headers headers{{"Inference-Header-Content-Length", std::to_string(body->second)}};

  std::mutex mutex;
  std::vector<double> latencies_ms;
  std::map<std::string, int64_t> failures;  // "HTTP 503", "connection: ..."
  const auto start = Clock::now() + std::chrono::milliseconds(100);  // every client connected by then
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.duration));
  auto client = [&](int index) {
    httplib::Client cli(args.url);
    cli.set_keep_alive(true);
    // httplib writes headers and body apart: with Nagle's algorithm the body would wait for
    // the server's delayed ACK of the headers (40 ms a request).
    cli.set_tcp_nodelay(true);
    cli.set_read_timeout(120, 0);
    std::vector<double> mine;
    std::map<std::string, int64_t> failed;
    std::this_thread::sleep_until(start);
    for (int64_t k = 0;; ++k) {
      Clock::time_point due = Clock::now();
      if (args.rate > 0) {  // this client sends requests index, index + C, index + 2C, ... of the run
        due = start + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(static_cast<double>(k * args.concurrency + index) / args.rate));
        std::this_thread::sleep_until(due);
      }
      if (due >= end) break;
      // Sent from the one body through a content provider: the std::string overloads copy the
      // body into each request (600 KB a request for MobileNetV2, on the cores the server uses).
      auto res = cli.Post(
          path + "/infer", headers, body->first.size(),
          [&](size_t offset, size_t length, httplib::DataSink& sink) {
            return sink.write(body->first.data() + offset, length);
          },
          "application/octet-stream");
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - due).count();
      if (!res)
        ++failed["connection: " + httplib::to_string(res.error())];
      else if (res->status != 200)
        ++failed[str_format("HTTP %d", res->status)];
      else
        mine.push_back(ms);
    }
    std::lock_guard lock(mutex);
    latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    for (auto& [what, n] : failed) failures[what] += n;
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < args.concurrency; ++i) threads.emplace_back(client, i);
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::max(Clock::now(), end) - start).count();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  double sum = 0;
  for (double v : latencies_ms) sum += v;
  int64_t failed = 0;
  for (auto& [what, n] : failures) failed += n;
  const double throughput = static_cast<double>(latencies_ms.size()) / seconds;
  const double p50 = percentile(latencies_ms, 0.5), p90 = percentile(latencies_ms, 0.9),
               p95 = percentile(latencies_ms, 0.95), p99 = percentile(latencies_ms, 0.99);
  const double avg = latencies_ms.empty() ? 0 : sum / static_cast<double>(latencies_ms.size());
  if (args.json_output) {
    json j{{"model", args.model}, {"concurrency", args.concurrency}, {"rate", args.rate}, {"seconds", seconds},
           {"ok", latencies_ms.size()}, {"failed", failures}, {"throughput_per_s", throughput},
           {"latency_ms", {{"p50", p50}, {"p90", p90}, {"p95", p95}, {"p99", p99}, {"avg", avg}}}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model %s at %s: %d client%s, %s, %.1f s\n", args.model.c_str(), args.url.c_str(), args.concurrency,
                args.concurrency == 1 ? "" : "s",
                args.rate > 0 ? str_format("open loop at %g requests/s", args.rate).c_str() : "closed loop", seconds);
    std::printf("requests      %zu ok, %lld failed\n", latencies_ms.size(), static_cast<long long>(failed));
    for (auto& [what, n] : failures) std::printf("  %-40s %lld\n", what.c_str(), static_cast<long long>(n));
    std::printf("throughput    %.1f infer/s\n", throughput);
    std::printf("latency       p50 %.2f ms  p90 %.2f ms  p95 %.2f ms  p99 %.2f ms  (avg %.2f)\n", p50, p90, p95, p99, avg);
  }
  if (latencies_ms.empty()) return report_error("loadgen", "no request succeeded");
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<LoadgenArgs>();
  app.add_option("url", args->url, "Server, as http://HOST:PORT")->required();
  app.add_option("--model", args->model, "Model to send requests to")->required();
  app.add_option("--concurrency", args->concurrency, "Client threads, one connection each (default 1)");
  app.add_option("--duration", args->duration, "Seconds of load (default 10)");
  app.add_option("--rate", args->rate,
                 "Requests per second over all clients, open loop (default: closed loop, each client sends when "
                 "answered)");
  app.add_option("--input", args->inputs,
                 "NAME=FILE.npy: send this input's data, dtype and shape (repeatable; other inputs are random)");
  app.add_flag("--json", args->json_output, "Print one JSON object (throughput_per_s, latency_ms {p50, ...}, ...)");
  return [args] { return loadgen(*args); };
}

KILN_REGISTER_SUBCOMMAND("loadgen", "Send inference requests to a KServe v2 server and report throughput and latency",
                         setup);

}  // namespace
}  // namespace kiln::tools
