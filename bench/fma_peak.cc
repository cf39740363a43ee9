// This CPU's fp32 FMA peak, measured with a register-resident FMA loop (for the "% of peak"
// column of bench/ort_compare.sh): each thread runs independent chains of vector FMAs on
// registers only (no loads or stores), so the FMA ports are the only limit.
//
// usage: fma_peak [THREADS...]   (default: 1 2)
// Prints one JSON object: {"isa": "avx512"|"avx2", "vector_bits": N, "chains": C,
// "peak_gflops": {"1": G, "2": G}, "cpu_time_gflops": {"1": G, "2": G}}. peak_gflops is FLOPs over
// wall time, what the threads really got; cpu_time_gflops sums each thread's FLOPs over its own
// CPU time, the cores' peak even when other processes take turns on them (the two agree on an
// idle machine with one thread per core). Each figure is the best of five 0.2 s trials: a peak
// is a maximum, and other processes only ever lower it.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Independent accumulator chains per thread. An FMA has a latency of 4 cycles and Zen 5 (like
// most AVX-512 cores) issues 2 per cycle, so at least 8 chains are in flight; 12 leaves margin
// and still fits in the 16 (AVX2) or 32 (AVX-512) vector registers.
constexpr int kChains = 12;
constexpr long kItersPerBatch = 1 << 16;  // FMA rounds between clock checks

// Runs `batches` x kItersPerBatch rounds of kChains FMAs; returns a value derived from the
// accumulators so that the compiler cannot drop the loop.
__attribute__((target("avx512f"))) float fma_loop_avx512(long batches) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  // Multiplier just below 1 and a small addend: values stay finite and normal forever.
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-6f);
  for (long b = 0; b < batches; ++b) {
    for (long i = 0; i < kItersPerBatch; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
    }
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long batches) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-6f);
  for (long b = 0; b < batches; ++b) {
    for (long i = 0; i < kItersPerBatch; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
    }
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

struct Isa {
  const char* name;
  int lanes;  // fp32 lanes per vector
  float (*loop)(long);
};

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Rates {
  double wall = 0;  // all threads' FLOPs over the wall time of the trial
  double cpu = 0;   // sum over threads of each one's FLOPs over its own CPU time
};

// GFLOP/s of `threads` threads each running `batches` batches at once (2 FLOP per lane per FMA).
Rates trial(const Isa& isa, int threads, long batches) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<float> sinks(static_cast<size_t>(threads));
  std::vector<double> cpu_seconds(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      double c0 = thread_cpu_seconds();
      sinks[static_cast<size_t>(t)] = isa.loop(batches);
      cpu_seconds[static_cast<size_t>(t)] = thread_cpu_seconds() - c0;
    });
  }
  while (ready.load() < threads) {
  }
  auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  float sink = 0;
  for (float s : sinks) sink += s;
  if (sink == 12345.678f) std::fprintf(stderr, "\n");  // keeps the result alive
  double flops_per_thread = 2.0 * isa.lanes * kChains * static_cast<double>(kItersPerBatch) *
                            static_cast<double>(batches);
  Rates r;
  r.wall = flops_per_thread * threads / seconds / 1e9;
  for (double c : cpu_seconds) r.cpu += flops_per_thread / c / 1e9;
  return r;
}

Rates peak(const Isa& isa, int threads) {
  // Size the trials to about 0.2 s from a short calibration run.
  double g = trial(isa, 1, 4).cpu;
  double flops_per_batch = 2.0 * isa.lanes * kChains * static_cast<double>(kItersPerBatch);
  long batches = std::max(1L, static_cast<long>(0.2 * g * 1e9 / flops_per_batch));
  Rates best;
  for (int i = 0; i < 5; ++i) {
    Rates r = trial(isa, threads, batches);
    best.wall = std::max(best.wall, r.wall);
    best.cpu = std::max(best.cpu, r.cpu);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    long n = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || n < 1 || n > 1024) {
      std::fprintf(stderr, "fma_peak: bad thread count '%s'\nusage: fma_peak [THREADS...]\n",
                   argv[i]);
      return 2;
    }
    counts.push_back(static_cast<int>(n));
  }
  if (counts.empty()) counts = {1, 2};

  __builtin_cpu_init();
  Isa isa;
  if (__builtin_cpu_supports("avx512f")) {
    isa = {"avx512", 16, fma_loop_avx512};
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    isa = {"avx2", 8, fma_loop_avx2};
  } else {
    std::fprintf(stderr, "fma_peak: this CPU has neither AVX-512F nor AVX2+FMA\n");
    return 1;
  }
  std::vector<Rates> rates;
  for (int n : counts) rates.push_back(peak(isa, n));
  std::string out = std::string("{\"isa\": \"") + isa.name +
                    "\", \"vector_bits\": " + std::to_string(isa.lanes * 32) +
                    ", \"chains\": " + std::to_string(kChains);
  for (bool cpu : {false, true}) {
    out += cpu ? ", \"cpu_time_gflops\": {" : ", \"peak_gflops\": {";
    for (size_t i = 0; i < counts.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s\"%d\": %.1f", i ? ", " : "", counts[i],
                    cpu ? rates[i].cpu : rates[i].wall);
      out += buf;
    }
    out += "}";
  }
  out += "}";
  std::printf("%s\n", out.c_str());
  return 0;
}
