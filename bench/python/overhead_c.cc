// The C API side of bench/python/overhead.py: one model loaded as kiln.InferenceSession
// loads it, run with synchronous kilnmdlExecute on the calling thread (as sess.run does;
// kilnmdlExecuteAsync + synchronize adds a hand-off to the stream's thread, which on a
// loaded machine waits for a scheduler tick now and then).
//
// Usage: python_overhead_c MODEL.kiln THREADS RUNS REPEATS
// Prints {"staged_us": ..., "per_call_us": ...}: the median over REPEATS blocks of the mean
// time per run of RUNS runs, for
//   staged    inputs copied to device buffers and datasets built once, then kilnmdlExecute;
//   per_call  what sess.run does per call in C: device buffers allocated, inputs copied
//             host -> device, datasets built, kilnmdlExecute, output buffers freed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/api_session.h"

namespace kiln::tools {
namespace {

int fail(const std::string& msg) {
  std::printf("%s\n", nlohmann::json{{"error", msg}}.dump().c_str());
  return 1;
}

double median_block_us(int runs, int repeats, const std::function<bool()>& run) {
  std::vector<double> means;
  for (int r = 0; r < repeats; ++r) {
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i)
      if (!run()) return -1;
    means.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / runs);
  }
  std::sort(means.begin(), means.end());
  return means[means.size() / 2];
}

int bench(int argc, char** argv) {
  if (argc != 5) return fail("usage: python_overhead_c MODEL.kiln THREADS RUNS REPEATS");
  const int threads = std::atoi(argv[2]), runs = std::atoi(argv[3]), repeats = std::atoi(argv[4]);
  auto source = read_model_source(argv[1]);
  if (!source.ok()) return fail(source.status().to_string());
  auto runtime = Runtime::init(RuntimeOptions{.devices = 0, .threads = threads});
  if (!runtime.ok()) return fail(runtime.status().to_string());
  auto device = DeviceGuard::set(0);
  if (!device.ok()) return fail(device.status().to_string());
  auto model = load_model(*source);
  if (!model.ok()) return fail(model.status().to_string());
  std::vector<std::string> notes;
  auto host = make_host_inputs(**model, {}, 0, &notes);
  if (!host.ok()) return fail(host.status().to_string());
  const uint32_t id = (*model)->id();

  auto io = IoBuffers::create(**model, *host);
  if (!io.ok()) return fail(io.status().to_string());
  for (int i = 0; i < runs / 10; ++i) kilnmdlExecute(id, (*io)->inputs(), (*io)->outputs());
  double staged = median_block_us(runs, repeats, [&] {
    return kilnmdlExecute(id, (*io)->inputs(), (*io)->outputs()) == KILN_SUCCESS;
  });
  double per_call = median_block_us(runs, repeats, [&] {
    auto fresh = IoBuffers::create(**model, *host);
    return fresh.ok() && kilnmdlExecute(id, (*fresh)->inputs(), (*fresh)->outputs()) == KILN_SUCCESS;
  });
  if (staged < 0 || per_call < 0) return fail(std::string("execution failed: ") + kilnGetRecentErrMsg());
  std::printf("%s\n", nlohmann::json{{"staged_us", staged}, {"per_call_us", per_call}}.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace kiln::tools

int main(int argc, char** argv) { return kiln::tools::bench(argc, argv); }
