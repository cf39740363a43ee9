// Cost of profiling a model (ResNet-50 in bench/profiler_overhead.sh), through the public
// C API only: rounds alternate between profiling off and on (kilnprofStart/kilnprofStop
// around the round), each round `loops` executions on one stream, each waited for (as
// `kiln profile` runs them). Prints the median time per inference of each state and
// their ratio, then what a hook costs with profiling off (the one branch), timed over
// many calls of an API that does nothing else (kilnrtGetRunMode), and the cost of recording
// (one op record timed alone, times the records per inference), which machine noise does
// not blur.
//
// usage: profiler_overhead MODEL.kiln [ROUNDS] [LOOPS]    (defaults 10 and 5)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "profiler/profiler.h"
#include "profiler/records.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, kilnError e) {
  std::fprintf(stderr, "profiler_overhead: %s failed (%d): %s\n", what, e, kilnGetRecentErrMsg());
  std::exit(1);
}

#define CHECK(call)                         \
  do {                                      \
    kilnError e_ = (call);                  \
    if (e_ != KILN_SUCCESS) die(#call, e_); \
  } while (0)

kilnmdlDataset* make_dataset(const std::vector<size_t>& sizes) {
  kilnmdlDataset* d = kilnmdlCreateDataset();
  if (!d) die("kilnmdlCreateDataset", KILN_ERROR_BAD_ALLOC);
  for (size_t bytes : sizes) {
    void* p = nullptr;
    CHECK(kilnrtMalloc(&p, bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    CHECK(kilnrtMemset(p, bytes, 0, bytes));
    kilnDataBuffer* db = kilnCreateDataBuffer(p, bytes);
    if (!db) die("kilnCreateDataBuffer", KILN_ERROR_BAD_ALLOC);
    CHECK(kilnmdlAddDatasetBuffer(d, db));
  }
  return d;
}

// Nanoseconds one op record costs (a Conv of ResNet-50's second stage: 3 inputs, 1 output),
// timed in a session of its own whose records are then dropped. Machine noise swings whole
// inferences by more than the profiler costs; this cost times the records per inference
// gives the overhead without that noise.
double op_record_ns() {
  kiln::ir::Graph g("bench");
  std::vector<kiln::ir::Value*> ins = {g.get_or_add_value("x"), g.get_or_add_value("w"),
                                       g.get_or_add_value("b")};
  kiln::ir::Node* node = g.add_node("conv", "FusedConv", "kiln", 1, ins, {g.get_or_add_value("y")});
  kiln::RuntimeValue x = kiln::Tensor::make(kiln::DataType::kFloat32, {1, 64, 56, 56});
  kiln::RuntimeValue w = kiln::Tensor::make(kiln::DataType::kFloat32, {64, 64, 3, 3});
  kiln::RuntimeValue b = kiln::Tensor::make(kiln::DataType::kFloat32, {64});
  std::vector<const kiln::RuntimeValue*> inputs = {&x, &w, &b};
  std::vector<kiln::RuntimeValue> outputs = {kiln::Tensor::make(kiln::DataType::kFloat32, {1, 64, 56, 56})};
  std::string dir = (std::filesystem::temp_directory_path() / "kiln_profiler_overhead_records").string();
  if (!kiln::profiler::init_session(dir).ok() || !kiln::profiler::start_session().ok()) return -1;
  constexpr int kRecords = 20000;
  auto t0 = Clock::now();
  for (int i = 0; i < kRecords; ++i) kiln::profiler::record_op(*node, "bench", inputs, outputs, kiln::profiler::now_ns());
  double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kRecords;
  kiln::profiler::collect(/*consume=*/true);
  if (!kiln::profiler::finalize_session().ok()) return -1;
  return ns;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: profiler_overhead MODEL.kiln [ROUNDS] [LOOPS]\n");
    return 2;
  }
  const char* model_path = argv[1];
  int rounds = argc > 2 ? std::atoi(argv[2]) : 10;
  int loops = argc > 3 ? std::atoi(argv[3]) : 5;
  if (rounds < 1 || loops < 1) {
    std::fprintf(stderr, "profiler_overhead: ROUNDS and LOOPS must be at least 1\n");
    return 2;
  }
  std::string dir = (std::filesystem::temp_directory_path() / "kiln_profiler_overhead").string();
  CHECK(kilnprofInit(dir.c_str(), dir.size()));
  CHECK(kilnInit(nullptr));
  CHECK(kilnrtSetDevice(0));
  uint32_t id = 0;
  CHECK(kilnmdlLoadFromFile(model_path, &id));
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  CHECK(kilnmdlGetDesc(desc, id));
  std::vector<size_t> in_sizes, out_sizes;
  for (size_t i = 0; i < kilnmdlGetNumInputs(desc); ++i) in_sizes.push_back(kilnmdlGetInputSizeByIndex(desc, i));
  for (size_t i = 0; i < kilnmdlGetNumOutputs(desc); ++i) out_sizes.push_back(kilnmdlGetOutputSizeByIndex(desc, i));
  for (size_t s : in_sizes)
    if (s == 0) die("the model has an input whose size is not fixed (compile it with --input-shape)", 0);
  kilnmdlDataset* in = make_dataset(in_sizes);
  kilnmdlDataset* out = make_dataset(out_sizes);
  kilnrtStream stream = nullptr;
  CHECK(kilnrtCreateStream(&stream));

  auto round = [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < loops; ++i) {
      CHECK(kilnmdlExecuteAsync(id, in, out, stream));
      CHECK(kilnrtSynchronizeStream(stream));
    }
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / loops;
  };
  for (int i = 0; i < 2; ++i) round();  // warm-up: arenas, caches
  std::vector<double> off, on;
  for (int r = 0; r < rounds; ++r) {
    // Alternate which state goes first, so a drift of the machine hits both alike.
    for (int k = 0; k < 2; ++k) {
      bool profiled = (k == 0) == (r % 2 == 0);
      if (profiled) CHECK(kilnprofStart());
      double ms = round();
      if (profiled) CHECK(kilnprofStop());
      (profiled ? on : off).push_back(ms);
    }
  }
  size_t records = kiln::profiler::collect(/*consume=*/false).records.size();
  auto t0 = Clock::now();
  CHECK(kilnprofFinalize());
  double write_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  // A hook with profiling off: kilnrtGetRunMode does nothing but its checks and the hook.
  constexpr int kCalls = 2000000;
  kilnrtRunMode mode;
  auto c0 = Clock::now();
  for (int i = 0; i < kCalls; ++i) CHECK(kilnrtGetRunMode(&mode));
  double call_ns = std::chrono::duration<double, std::nano>(Clock::now() - c0).count() / kCalls;

  double m_off = median(off), m_on = median(on);
  std::printf("model %s: %d alternated rounds x %d executions per state\n", model_path, rounds, loops);
  std::printf("profiling off  median %9.3f ms per inference (min %.3f, max %.3f)\n", m_off,
              *std::min_element(off.begin(), off.end()), *std::max_element(off.begin(), off.end()));
  std::printf("profiling on   median %9.3f ms per inference (min %.3f, max %.3f)\n", m_on,
              *std::min_element(on.begin(), on.end()), *std::max_element(on.begin(), on.end()));
  std::printf("ratio on/off   %.4f  (%+.2f%%)\n", m_on / m_off, (m_on / m_off - 1) * 100);
  // Each round's two states ran back to back: their ratio cancels slow drifts of the machine.
  std::vector<double> paired;
  for (size_t i = 0; i < on.size(); ++i) paired.push_back(on[i] / off[i]);
  std::printf("median of the per-round ratios %.4f  (%+.2f%%), min of each state: %.4f\n", median(paired),
              (median(paired) - 1) * 100,
              *std::min_element(on.begin(), on.end()) / *std::min_element(off.begin(), off.end()));
  std::printf("writing the profile (%d profiled inferences) at kilnprofFinalize: %.1f ms\n", rounds * loops,
              write_ms);
  std::printf("an API call with its hook, profiling off: %.1f ns (kilnrtGetRunMode)\n", call_ns);
  double record_ns = op_record_ns();
  double per_inference = static_cast<double>(records) / (rounds * loops);
  std::printf("one op record %.0f ns; %.0f records per inference -> %.4f ms, %.4f%% of the median off\n",
              record_ns, per_inference, per_inference * record_ns / 1e6,
              per_inference * record_ns / 1e6 / m_off * 100);

  CHECK(kilnrtDestroyStream(stream));
  CHECK(kilnmdlUnload(id));
  CHECK(kilnrtResetDevice(0));
  CHECK(kilnFinalize());
  return 0;
}
