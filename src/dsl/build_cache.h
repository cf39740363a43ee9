// Building a lowered kernel with the system C++ compiler, cached on disk, loaded with dlopen.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/codegen_c.h"
#include "dsl/lower.h"

namespace kiln::dsl {

// A compiled kernel. Thread-safe to run concurrently on distinct output buffers.
class Kernel {
 public:
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // buffers: one per LoweredFunc::args, each holding the product of its shape floats;
  // dims: one per LoweredFunc::dims (each >= 1). Errors: a wrong count (invalid argument),
  // a failed run-time bounds check (out of range, naming the read).
  Status run(const std::vector<float*>& buffers, const std::vector<int64_t>& dims) const;

  EntryFn entry() const { return entry_; }                 // the raw call, no checks
  const std::string& source() const { return source_.code; }
  const std::string& library_path() const { return path_; }
  bool from_cache() const { return from_cache_; }        // true: no compiler ran
  const std::vector<std::string>& dim_names() const { return dim_names_; }

 private:
  friend Expected<std::shared_ptr<Kernel>> build(const LoweredFunc& f);
  Kernel() = default;
  void* handle_ = nullptr;
  EntryFn entry_ = nullptr;
  CSource source_;
  std::string path_;
  bool from_cache_ = false;
  size_t num_buffers_ = 0;
  std::vector<std::string> dim_names_;
};

// The cache folder: KILN_DSL_CACHE_DIR, else $XDG_CACHE_HOME/kiln/dsl, else ~/.cache/kiln/dsl.
std::string dsl_cache_dir();

// The compiler command line (without input and output files).
std::string dsl_compile_flags();

// Emits `f`, compiles it unless <cache>/<key>.so exists (key: a hash of the source, which
// holds the compute and the schedule, the compiler's version, the flags, the CPU's ISA
// features and Kiln's version), loads it. Errors: the compiler failed (its output in the
// message), the library did not load.
Expected<std::shared_ptr<Kernel>> build(const LoweredFunc& f);

}  // namespace kiln::dsl
