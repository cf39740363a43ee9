// Compiled models kept on disk, so that an application compiles an ONNX model once, not at
// every start: the .kiln file is named by a hash of the ONNX bytes, the compile options and
// Kiln's version and .kiln format version, written atomically (temporary file + rename, so
// concurrent processes never see half a file) and recompiled when it does not load.
#pragma once

#include <functional>
#include <string>

#include "compiler/compiler.h"
#include "core/status.h"

namespace kiln::ocr {

// The cache folder: `explicit_dir` if not empty, else KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln, else the system's temporary folder + "/kiln".
std::string cache_directory(const std::string& explicit_dir);

struct CachedModel {
  std::string path;          // the .kiln file
  bool compiled_now = false; // false: found in the cache
  double compile_ms = 0;
};

// The .kiln file for `onnx_path` compiled with `options`, described by `options_key` (a
// text naming every option that changes the result: shapes, buckets, precision). Compiles
// and stores it when the cache does not hold it; `progress` gets one line per compile.
Expected<CachedModel> compile_cached(const std::string& onnx_path, const compiler::CompileOptions& options,
                                     const std::string& options_key, const std::string& cache_dir,
                                     const std::function<void(const std::string&)>& progress);

// Forgets a cached file that turned out unusable (fails to load), so the next call compiles.
void evict_cached(const std::string& kiln_path);

}  // namespace kiln::ocr
