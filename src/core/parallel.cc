// parallel_for on OpenMP.
#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace kiln {
namespace {

int threads_from_env() {
  // More threads than cores only contend (issue 24: 1000 threads ran 135x slower), so the
  // count is capped at the cores; a malformed value is reported by env_knobs.h.
  const int cores = omp_get_num_procs();
  const char* v = std::getenv("KILN_NUM_THREADS");
  if (v && *v) {
    int n = std::atoi(v);
    if (n > 0) return std::min(n, cores);
  }
  return cores;
}

std::atomic<int>& thread_count() {
  static std::atomic<int> n{threads_from_env()};
  return n;
}

// 0: no override on this thread.
thread_local int thread_override = 0;
// The thread's OpenMP thread count before its first override, restored when cleared.
thread_local int omp_threads_before_override = 0;

}  // namespace

int num_threads() {
  if (thread_override > 0) return thread_override;
  return thread_count().load(std::memory_order_relaxed);
}
void set_num_threads(int n) { thread_count().store(std::max(1, n)); }

int set_thread_num_threads_override(int n) {
  int previous = thread_override;
  n = std::max(0, n);
  if (n == previous) return previous;
  if (n > 0) {
    if (previous == 0) omp_threads_before_override = omp_get_max_threads();
    omp_set_num_threads(n);
  } else {
    omp_set_num_threads(omp_threads_before_override);
  }
  thread_override = n;
  return previous;
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, RangeFn fn) {
  if (end <= begin) return;
  int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = begin + n * c / chunks;
    int64_t e = begin + n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  }
}

}  // namespace kiln
