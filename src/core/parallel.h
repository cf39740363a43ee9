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
