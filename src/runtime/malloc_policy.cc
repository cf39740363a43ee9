// glibc's mmap threshold, fixed once at runtime initialisation when asked (see malloc_policy.h).
#include "runtime/malloc_policy.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kiln::rt {
namespace {

std::atomic<size_t> g_applied{0};

// glibc's largest threshold on 64-bit hosts (HEAP_MAX_SIZE / 2): mallopt refuses more.
constexpr long long kMaxThresholdBytes = 32LL * 1024 * 1024;

// KILN_MALLOC_MMAP_THRESHOLD: bytes in 0..32 MiB; unset or anything else: the default (a bad
// value is named by kilnInit's check of the environment, core/env_knobs.cc).
size_t threshold_from_env() {
  const char* v = std::getenv("KILN_MALLOC_MMAP_THRESHOLD");
  if (!v || !*v) return kDefaultMmapThresholdBytes;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n < 0 || n > kMaxThresholdBytes) return kDefaultMmapThresholdBytes;
  return static_cast<size_t>(n);
}

// The user set glibc's own knobs: theirs wins.
bool glibc_tuned_by_user() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_")) return true;
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t && std::strstr(t, "glibc.malloc.") != nullptr;
}

}  // namespace

void apply_malloc_policy() {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__GLIBC__)
    size_t bytes = threshold_from_env();
    if (bytes == 0 || glibc_tuned_by_user()) return;
    // Setting M_MMAP_THRESHOLD also turns glibc's dynamic raising of it (and of the trim
    // threshold) off; the trim threshold follows at glibc's own ratio.
    if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) != 1) return;
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * bytes));
    g_applied.store(bytes);
#endif
  });
}

size_t applied_mmap_threshold() { return g_applied.load(); }

}  // namespace kiln::rt
