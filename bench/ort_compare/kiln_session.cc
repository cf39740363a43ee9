// Kiln side of bench/ort_compare.sh: the twin of run_ort.js. Keeps one model loaded on one
// stream (through the public C API, as `kiln run` does) and runs it on command, so that the
// driver alternates blocks of Kiln runs with blocks of ONNX Runtime runs, each engine warm in
// its own long-lived process. (Timing a fresh `kiln run` process per block measured Kiln's
// second execution after a load: ResNet-50 at 2 threads 32 ms there against 24 ms warm.)
//
// Usage: kiln_session MODEL.kiln THREADS NAME=INPUT.npy ...
//
// Prints {"ready": true, "load_ms": ...} when loaded, then one JSON line per command read
// from stdin:
//   time K W    W untimed runs, then K timed runs: {"times_ms": [...]} (kilnmdlExecuteAsync +
//               kilnrtSynchronizeStream, as `kiln run` times them)
//   quit        exits
// Errors are printed as {"error": "..."} and end the process with status 1.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/api_session.h"
#include "tools/model_source.h"

namespace kiln::tools {
namespace {

int fail(const std::string& msg) {
  std::printf("%s\n", nlohmann::json{{"error", msg}}.dump().c_str());
  std::fflush(stdout);
  return 1;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int serve(int argc, char** argv) {
  if (argc < 3) return fail("usage: kiln_session MODEL.kiln THREADS NAME=INPUT.npy ...");
  const std::string path = argv[1];
  const int threads = std::atoi(argv[2]);
  if (threads < 1) return fail(std::string("bad thread count '") + argv[2] + "'");
  std::vector<std::string> inputs(argv + 3, argv + argc);
  cap_threads(threads);
  auto start = std::chrono::steady_clock::now();
  auto source = read_model_source(path);
  if (!source.ok()) return fail(source.status().to_string());
  auto runtime = Runtime::init(RuntimeOptions{.devices = 0, .threads = threads});
  if (!runtime.ok()) return fail(runtime.status().to_string());
  auto device = DeviceGuard::set(0);
  if (!device.ok()) return fail(device.status().to_string());
  auto stream = StreamHandle::create();
  if (!stream.ok()) return fail(stream.status().to_string());
  auto model = load_model(*source);
  if (!model.ok()) return fail(model.status().to_string());
  std::vector<std::string> notes;
  auto host = make_host_inputs(**model, inputs, 0, &notes);
  if (!host.ok()) return fail(host.status().to_string());
  std::vector<size_t> output_bytes;
  auto io = IoBuffers::create_fitted(**model, *host, &output_bytes);
  if (!io.ok()) return fail(io.status().to_string());
  std::printf("%s\n", nlohmann::json{{"ready", true}, {"load_ms", ms_since(start)}}.dump().c_str());
  std::fflush(stdout);

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    if (command != "time") return fail("unknown command '" + command + "' (time K W, quit)");
    int timed = 0, warmup = 0;
    if (!(in >> timed >> warmup) || timed < 1 || warmup < 0) return fail("usage: time K W (K >= 1, W >= 0)");
    std::vector<double> times;
    for (int i = 0; i < warmup + timed; ++i) {
      auto t = std::chrono::steady_clock::now();
      if (kilnmdlExecuteAsync((*model)->id(), (*io)->inputs(), (*io)->outputs(), (*stream)->get()) != KILN_SUCCESS ||
          kilnrtSynchronizeStream((*stream)->get()) != KILN_SUCCESS)
        return fail(std::string("execution failed: ") + kilnGetRecentErrMsg());
      if (i >= warmup) times.push_back(ms_since(t));
    }
    std::printf("%s\n", nlohmann::json{{"times_ms", times}}.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kiln::tools

int main(int argc, char** argv) { return kiln::tools::serve(argc, argv); }
