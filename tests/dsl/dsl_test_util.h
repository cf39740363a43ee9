// Shared by the DSL tests: a temporary kernel cache, and plain double-precision references.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::dsl::testing {

// Points KILN_DSL_CACHE_DIR at a fresh folder once per process, so no test relies on a
// warm cache (or fills the user's).
inline void use_temp_cache() {
  static const bool done = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-dsl-test-XXXXXX").string();
    char* dir = mkdtemp(tmpl.data());
    if (dir) setenv("KILN_DSL_CACHE_DIR", dir, 1);
    return true;
  }();
  (void)done;
}

inline std::vector<float> pattern(size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>((s >> 8) % 20001) / 10000.0f - 1.0f;  // [-1, 1]
  }
  return v;
}

}  // namespace kiln::dsl::testing
