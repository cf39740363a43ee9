// The C library allocator's policy the runtime sets once, when the devices are created
// (kilnInit): glibc's own by default; KILN_MALLOC_MMAP_THRESHOLD fixes its mmap threshold, so
// that large blocks freed go back to the system.
#pragma once

#include <cstddef>

namespace kiln::rt {

// The threshold applied when KILN_MALLOC_MMAP_THRESHOLD is unset: none, glibc's dynamic policy.
constexpr size_t kDefaultMmapThresholdBytes = 0;

// Fixes glibc's mmap threshold at KILN_MALLOC_MMAP_THRESHOLD bytes and its trim threshold at
// twice that (0, the default, leaves glibc's policy alone), once per process; later calls do
// nothing. Also nothing when the process set glibc's own MALLOC_MMAP_THRESHOLD_ or
// GLIBC_TUNABLES (the user's choice wins), or on another C library.
//
// Why not fixed by default: glibc starts with a 128 KiB threshold and raises it (up to 32 MiB)
// each time a block it had mmap'ed is freed, and its trim threshold to twice that. Fixed at
// 128 KiB (the default from 2c02397 to 2026-12-07), every large block of every execution was
// an mmap, page faults and a munmap: oneDNN's int8 gemm allocates its packing buffers (0.35 and
// 1.3 MB) on each call, and BERT-base s128 quantised dynamically ran in 67 ms instead of 43 at
// one thread, 52 instead of 25.5 at two. The fixed threshold had lowered PP-OCRv4 det's peak RSS
// (131.6 -> 117.4 MiB) when its deconvolutions ran on oneDNN's gemm (2 x 5 MB malloc'ed per
// run); with Kiln's own deconvolution kernel glibc's policy costs at most 1.1 MiB of peak RSS on
// ResNet-50, MobileNetV2, BERT-base and det (docs/design.md, issue 33). Fixing the mmap
// threshold also turns glibc's raising of the trim threshold off, which then stays at 128 KiB
// and gives the top of the heap back after each large free: hence trim = 2 x threshold.
// Thread-safety: call from any thread; the first call applies it.
void apply_malloc_policy();

// The threshold apply_malloc_policy() set in bytes, 0 if it left glibc's policy alone (or
// was not called yet).
size_t applied_mmap_threshold();

}  // namespace kiln::rt
