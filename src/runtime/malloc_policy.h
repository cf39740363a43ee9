// The C library allocator's policy the runtime sets once, when the devices are created
// (kilnInit): glibc's mmap threshold fixed, so that large blocks freed go back to the system.
#pragma once

#include <cstddef>

namespace kiln::rt {

// The threshold applied when KILN_MALLOC_MMAP_THRESHOLD is unset: glibc's own starting value.
constexpr size_t kDefaultMmapThresholdBytes = 128 * 1024;

// Fixes glibc's mmap threshold at KILN_MALLOC_MMAP_THRESHOLD bytes (default
// kDefaultMmapThresholdBytes; 0 leaves glibc's policy alone), once per process; later calls do
// nothing. Also nothing when the process set glibc's own MALLOC_MMAP_THRESHOLD_ or
// GLIBC_TUNABLES (the user's choice wins), or on another C library.
//
// Why: glibc starts with a 128 KiB threshold and raises it (up to 32 MiB) each time a block it
// had mmap'ed is freed, so after a model's load has freed its large temporaries (packing,
// parsing), the large blocks of later phases come from the heap and stay there when freed:
// peak RSS of PP-OCRv4 det at 640 (`kiln run --loops 20`) 131.6 MiB with glibc's dynamic
// threshold against 117.4 MiB with the threshold fixed (docs/design.md, issue 33).
// Thread-safety: call from any thread; the first call applies it.
void apply_malloc_policy();

// The threshold apply_malloc_policy() set in bytes, 0 if it left glibc's policy alone (or
// was not called yet).
size_t applied_mmap_threshold();

}  // namespace kiln::rt
