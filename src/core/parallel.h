// Intra-op parallelism: one parallel_for on OpenMP, the runtime oneDNN uses, so that
// Kiln kernels and oneDNN primitives share one pool and never oversubscribe.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// Threads used by parallel_for. Defaults to KILN_NUM_THREADS, else the core count.
int num_threads();
void set_num_threads(int n);

// Calls fn(begin_i, end_i) on disjoint chunks covering [begin, end). Chunks hold at
// least `grain` iterations; small ranges run inline on the calling thread.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace kiln
