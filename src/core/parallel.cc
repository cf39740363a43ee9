// parallel_for on OpenMP.
#include "core/parallel.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

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

std::atomic<int> live_team_leaders{0};

// The team this thread last pinned as its leader (pin_team_one_per_core): its size and cores;
// a leader counts in live_team_leaders until it releases its team or exits.
struct PinnedTeam {
  int size = 0;
  std::vector<int> cores;
  ~PinnedTeam() {
    if (size > 0) live_team_leaders.fetch_sub(1, std::memory_order_relaxed);
  }
};
thread_local PinnedTeam pinned_team;

void pin_self_to_core(int core) {
  if (core < 0 || core >= CPU_SETSIZE) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // refused: the thread floats
}

}  // namespace

bool pin_threads() {
  // Read once; a malformed value is reported by env_knobs.h and leaves the default.
  static const bool pin = [] {
    const char* v = std::getenv("KILN_PIN_THREADS");
    return v && v[0] == '1' && v[1] == 0;
  }();
  return pin;
}

void pin_team_one_per_core(const int* cores, int count, int n) {
  if (n < 2 || count < 2 || omp_in_parallel() || !pin_threads()) return;
  if (pinned_team.size == n && pinned_team.cores.size() == static_cast<size_t>(count) &&
      std::equal(cores, cores + count, pinned_team.cores.begin()))
    return;
  // OpenMP keeps a leader's team threads and hands them the same team numbers in every
  // region of the same size or smaller, so pinning them once holds for the leader's later
  // regions, oneDNN's included.
#pragma omp parallel num_threads(n)
  {
    int t = omp_get_thread_num();
    if (t > 0) pin_self_to_core(cores[t % count]);
  }
  if (pinned_team.size == 0) live_team_leaders.fetch_add(1, std::memory_order_relaxed);
  pinned_team.size = n;
  pinned_team.cores.assign(cores, cores + count);
}

void release_thread_team() {
  if (omp_in_parallel()) return;
  // OpenMP 5's pause ends the calling thread's own team (libgomp frees its thread pool).
  omp_pause_resource(omp_pause_soft, omp_get_initial_device());
  if (pinned_team.size > 0) live_team_leaders.fetch_sub(1, std::memory_order_relaxed);
  pinned_team.size = 0;
  pinned_team.cores.clear();
}

int team_leaders() { return live_team_leaders.load(std::memory_order_relaxed); }

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
