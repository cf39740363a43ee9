// Shared by the DSL tests: a temporary kernel cache, and plain double-precision references.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dsl/tensor.h"

namespace kiln::dsl::testing {

// C[i, j] = sum_k A[i, k] * B[k, j] over n symbolic rows, 19 columns and 24 terms.
struct MatmulDef {
  Expr n = var("n");
  Tensor a = placeholder("A", {n, Expr(24)});
  Tensor b = placeholder("B", {Expr(24), Expr(19)});
  Axis k = reduce_axis(Expr(24), "k");
  Tensor c = compute("C", {n, Expr(19)}, [&](const std::vector<Expr>& i) {
    return sum(a(i[0], k->var) * b(k->var, i[1]), {k});
  });
};

// Points KILN_DSL_CACHE_DIR at a fresh folder once per process, so no test relies on a
// warm cache (or fills the user's); the folder is removed when the process exits.
inline void use_temp_cache() {
  static std::string dir;
  if (!dir.empty()) return;
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-dsl-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return;
  dir = tmpl;
  setenv("KILN_DSL_CACHE_DIR", dir.c_str(), 1);
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
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
