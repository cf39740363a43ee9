// kiln serve's glibc allocator thresholds (malloc_tuning.h).
#include "serve/malloc_tuning.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kiln::serve {
namespace {

constexpr int kServerMmapThresholdBytes = 32 << 20;   // glibc's largest (HEAP_MAX_SIZE / 2)
constexpr int kServerTrimThresholdBytes = 128 << 20;

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

}  // namespace

std::string apply_server_malloc_policy() {
#if defined(__GLIBC__)
  if (set("KILN_MALLOC_MMAP_THRESHOLD") || set("MALLOC_MMAP_THRESHOLD_") || set("MALLOC_TRIM_THRESHOLD_")) return "";
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc.")) return "";
  if (mallopt(M_MMAP_THRESHOLD, kServerMmapThresholdBytes) != 1) return "";
  if (mallopt(M_TRIM_THRESHOLD, kServerTrimThresholdBytes) != 1) return "";
  return "malloc: mmap threshold 32 MiB, trim threshold 128 MiB";
#else
  return "";
#endif
}

}  // namespace kiln::serve
