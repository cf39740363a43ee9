// Single-operator mode (kiln_op.h, issue 31): host time of a cached kilnopExecute on a tiny op
// (Add of 16 floats), against the issue's goal of <= 3 us per cached call. Prints, as medians
// over rounds:
//   miss          the first call (compiles the one-node graph)
//   lookup        a cached kilnopCompile: entry guard + key + cache lookup, no run
//   issue         kilnopExecute returning (async: key, lookup, bind, queue), synchronized
//                 every 64 calls so the queue stays short
//   pipelined     wall time of that loop per call: issue plus the stream running the ops
//                 (it overlaps the issuing on the other core), waited for every 64 calls
//   issue+sync    kilnopExecute followed by kilnrtSynchronizeStream (round trip incl. the run)
//   kernel        16 float adds in a plain loop, the work itself, for scale
// Usage: op_bench [calls_per_round=20000] [rounds=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/kiln_op.h"

namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#define CHECK(call)                                                           \
  do {                                                                        \
    if ((call) != KILN_SUCCESS) {                                             \
      std::fprintf(stderr, "%s failed: %s\n", #call, kilnGetRecentErrMsg()); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  constexpr int64_t kN = 16;
  CHECK(kilnInit(nullptr));
  CHECK(kilnrtSetDevice(0));
  kilnrtStream stream = nullptr;
  CHECK(kilnrtCreateStream(&stream));
  int64_t dims[] = {kN};
  kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 1, dims, KILN_FORMAT_ND);
  const kilnTensorDesc* in_desc[] = {d, d};
  const kilnTensorDesc* out_desc[] = {d};
  void *a, *b, *y;
  CHECK(kilnrtMalloc(&a, kN * 4, KILN_MEM_MALLOC_HUGE_FIRST));
  CHECK(kilnrtMalloc(&b, kN * 4, KILN_MEM_MALLOC_HUGE_FIRST));
  CHECK(kilnrtMalloc(&y, kN * 4, KILN_MEM_MALLOC_HUGE_FIRST));
  std::vector<float> host(kN, 1.5f);
  CHECK(kilnrtMemcpy(a, kN * 4, host.data(), kN * 4, KILN_MEMCPY_HOST_TO_DEVICE));
  CHECK(kilnrtMemcpy(b, kN * 4, host.data(), kN * 4, KILN_MEMCPY_HOST_TO_DEVICE));
  kilnDataBuffer* ba = kilnCreateDataBuffer(a, kN * 4);
  kilnDataBuffer* bb = kilnCreateDataBuffer(b, kN * 4);
  kilnDataBuffer* by = kilnCreateDataBuffer(y, kN * 4);
  const kilnDataBuffer* ins[] = {ba, bb};
  kilnDataBuffer* outs[] = {by};
  auto execute = [&] { return kilnopExecute("Add", "", 17, 2, in_desc, ins, 1, out_desc, outs, nullptr, stream); };

  auto t0 = Clock::now();
  CHECK(execute());
  CHECK(kilnrtSynchronizeStream(stream));
  double miss_ns = ns_since(t0);
  CHECK(kilnrtMemcpy(host.data(), kN * 4, y, kN * 4, KILN_MEMCPY_DEVICE_TO_HOST));
  if (host[kN - 1] != 3.0f) {
    std::fprintf(stderr, "wrong result %g (want 3)\n", host[kN - 1]);
    return 1;
  }

  std::vector<double> lookup, issue, pipelined, roundtrip, kernel;
  for (int r = 0; r < rounds; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) CHECK(kilnopCompile("Add", "", 17, 2, in_desc, nullptr));
    lookup.push_back(ns_since(t0) / calls);

    double issue_ns = 0;
    auto loop0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      auto t = Clock::now();
      CHECK(execute());
      issue_ns += ns_since(t);
      if (i % 64 == 63) CHECK(kilnrtSynchronizeStream(stream));
    }
    CHECK(kilnrtSynchronizeStream(stream));
    pipelined.push_back(ns_since(loop0) / calls);
    issue.push_back(issue_ns / calls);

    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      CHECK(execute());
      CHECK(kilnrtSynchronizeStream(stream));
    }
    roundtrip.push_back(ns_since(t0) / calls);

    std::vector<float> xa(kN, 1.0f), xb(kN, 2.0f), xy(kN);
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      for (int k = 0; k < kN; ++k) xy[k] = xa[k] + xb[k];
      asm volatile("" : : "r"(xy.data()) : "memory");  // keep the loop
    }
    kernel.push_back(ns_since(t0) / calls);
  }
  uint64_t hits = 0, misses = 0;
  size_t entries = 0;
  CHECK(kilnopGetCacheStats(&hits, &misses, &entries));
  std::printf("kilnopExecute Add of %lld floats, %d calls x %d rounds (medians, host time per call)\n",
              static_cast<long long>(kN), calls, rounds);
  std::printf("  miss (first call, compiles)  %10.1f us\n", miss_ns / 1000);
  std::printf("  lookup (cached kilnopCompile) %9.3f us\n", median(lookup) / 1000);
  std::printf("  issue (cached kilnopExecute)  %9.3f us   goal <= 3 us: %s\n", median(issue) / 1000,
              median(issue) <= 3000 ? "met" : "NOT met");
 std::printf("  pipelined (issue + run, /call) %8.3f us\n", median(pipelined) / 1000);
  std::printf("  issue + synchronize           %9.3f us\n", median(roundtrip) / 1000);
  std::printf("  kernel alone (plain loop)     %9.3f us\n", median(kernel) / 1000);
  std::printf("  cache: %llu hits, %llu misses, %zu entries\n", static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(misses), entries);
  kilnDestroyDataBuffer(ba);
  kilnDestroyDataBuffer(bb);
  kilnDestroyDataBuffer(by);
  kilnDestroyTensorDesc(d);
  kilnrtFree(a);
  kilnrtFree(b);
  kilnrtFree(y);
  kilnrtDestroyStream(stream);
  kilnFinalize();
  return 0;
}
