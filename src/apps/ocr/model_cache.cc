#include "apps/ocr/model_cache.h"

#include <xxhash.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/version.h"
#include "model/kiln_model.h"

namespace kiln::ocr {

std::string cache_directory(const std::string& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/kiln";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/kiln";
  return (std::filesystem::temp_directory_path() / "kiln").string();
}

Expected<CachedModel> compile_cached(const std::string& onnx_path, const compiler::CompileOptions& options,
                                     const std::string& options_key, const std::string& cache_dir,
                                     const std::function<void(const std::string&)>& progress) {
  std::ifstream in(onnx_path, std::ios::binary);
  if (!in) return not_found("%s: no such model file", onnx_path.c_str());
  // Hashed in chunks through one buffer: every start hashes the models, and reading a whole
  // model into fresh memory would cost a page fault per 4 KiB.
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> chunk(size_t{1} << 20);
  size_t total = 0;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    size_t got = static_cast<size_t>(in.gcount());
    XXH64_update(state, chunk.data(), got);
    total += got;
  }
  if (total == 0) {
    XXH64_freeState(state);
    return invalid_argument("%s: empty model file", onnx_path.c_str());
  }
  std::string identity = options_key + "|kiln " KILN_VERSION_STRING "|format " + std::to_string(model::kFormatVersion);
  XXH64_update(state, identity.data(), identity.size());
  uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);

  std::string stem = std::filesystem::path(onnx_path).stem().string();
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) return failed_precondition("cannot create the model cache folder %s: %s", cache_dir.c_str(), ec.message().c_str());
  CachedModel result;
  result.path = str_format("%s/%s-%016llx.kiln", cache_dir.c_str(), stem.c_str(), static_cast<unsigned long long>(hash));
  if (std::filesystem::is_regular_file(result.path, ec) && std::filesystem::file_size(result.path, ec) > 0) return result;

  if (progress)
    progress(str_format("compiling %s into %s (once; later runs reuse it)", onnx_path.c_str(), result.path.c_str()));
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(onnx_path, options));
  std::string temporary = str_format("%s.tmp%d", result.path.c_str(), static_cast<int>(getpid()));
  Status written = compiler::write_compiled_model(compiled, temporary);
  if (!written.ok()) {
    std::remove(temporary.c_str());
    return written.add_context("while caching the compiled %s", onnx_path.c_str());
  }
  std::filesystem::rename(temporary, result.path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    return failed_precondition("cannot store %s: %s", result.path.c_str(), ec.message().c_str());
  }
  result.compiled_now = true;
  result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

void evict_cached(const std::string& kiln_path) { std::remove(kiln_path.c_str()); }

}  // namespace kiln::ocr
