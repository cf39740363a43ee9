// Intra-op parallelism: one parallel_for on OpenMP, the runtime oneDNN uses, so that
// Kiln kernels and oneDNN primitives share one pool and never oversubscribe.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// Threads used by parallel_for. Defaults to KILN_NUM_THREADS, else the core count.
int num_threads();
void set_num_threads(int n);

// A per-thread override of num_threads() (the runtime's ComputeScope gives a device's
// tasks that device's core count). It also sets this thread's OpenMP thread count, so
// oneDNN primitives follow it. n > 0 sets it, 0 clears it; returns the previous override
// (0 when there was none) so scopes can restore it.
int set_thread_num_threads_override(int n);

// Pins the OpenMP team the calling thread leads, n threads, one per core: team thread t
// (t >= 1) on cores[t % count]; the caller pins itself (the runtime's ComputeScope puts it on
// cores[0]). Two threads free to float trade places on one core while the other idles: a
// thread woken at a barrier is queued beside its waker, and threads that sleep in turn never
// look imbalanced to the scheduler (ResNet-50 at batch 1 ran at one-thread speed, 40 ms instead
// of 23, whenever the cores had idled 100 ms before the run). Done once per leading thread and
// core list (a thread-local remembers it); does nothing for n < 2, inside a parallel region,
// or unless KILN_PIN_THREADS=1 (pin_threads(); off by default, see docs/runtime-api.md).
bool pin_threads();
void pin_team_one_per_core(const int* cores, int count, int n);

// OpenMP keeps each leading thread's team alive between regions, and its spin-waits are cut
// from about a millisecond to a few hundred cycles for good once the process's teams hold
// more threads than it has cores: a second leader's idle team (a model loaded or run
// synchronously on the caller's thread, beside a stream's thread running the rest) made every
// barrier a sleep and a wake-up, ~140 a run of ResNet-50 (23 -> 27 ms at 2 threads).
// release_thread_team() ends the calling thread's team (OpenMP starts a new one on its next
// region); team_leaders() counts the threads whose teams pin_team_one_per_core pinned and no
// release ended.
void release_thread_team();
int team_leaders();

// A callable taken by reference for the duration of a call: what parallel_for takes instead of
// std::function, which allocates for a lambda capturing more than two pointers (kernels'
// usually do), once per call on the hot path.
class RangeFn {
 public:
  template <typename F>
  RangeFn(const F& f)  // NOLINT: implicit, as std::function's
      : object_(&f), call_([](const void* o, int64_t b, int64_t e) { (*static_cast<const F*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(object_, b, e); }

 private:
  const void* object_;
  void (*call_)(const void*, int64_t, int64_t);
};

// Calls fn(begin_i, end_i) on disjoint chunks covering [begin, end). Chunks hold at
// least `grain` iterations; small ranges run inline on the calling thread.
void parallel_for(int64_t begin, int64_t end, int64_t grain, RangeFn fn);

}  // namespace kiln
