// The C library allocator's settings of the kiln serve process, over the runtime's
// (runtime/malloc_policy.h): a server allocates and frees request-sized blocks (bodies,
// tensors, responses of hundreds of KB) on every request, from many threads.
#pragma once

#include <string>

namespace kiln::serve {

// Raises glibc's mmap threshold to 32 MiB and its trim threshold to 128 MiB, once the runtime
// has started (call after kilnInit, which fixes the threshold when KILN_MALLOC_MMAP_THRESHOLD is set).
// Why: with the runtime's 128 KiB threshold every body and tensor of a request (600 KB for a
// MobileNetV2 input) was mmap'ed, page-faulted in 4 KiB at a time and unmapped again when the
// request ended (each unmap a TLB shootdown on the other cores), and blocks freed at the top of
// a heap were given back and faulted in again by the next request: 9.6 CPU ms per request in
// the HTTP threads against 1.7 ms with both thresholds raised (docs/serve.md, "Where the CPU
// time goes"). Freed blocks now stay in the process for the next request: RSS follows the
// peak of requests in flight, bounded by the queues, instead of returning to the system.
//
// Left alone when the user chose: KILN_MALLOC_MMAP_THRESHOLD set, or glibc's own
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or glibc.malloc tunables; or another C
// library. Returns what was done, for the startup line ("" when nothing).
std::string apply_server_malloc_policy();

}  // namespace kiln::serve
