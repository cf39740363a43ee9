// Opening a .kiln or .onnx model named on the command line.
#include "tools/model_source.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/logging.h"

namespace kiln::tools {

Expected<ModelKind> sniff_model_kind(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument("%s is a directory, not a model file (.onnx or .kiln)", path.c_str());
  if (!std::filesystem::exists(path, ec)) return not_found("%s: no such file", path.c_str());
  if (!std::filesystem::is_regular_file(path, ec))
    return invalid_argument("%s is not a regular file (a model is an .onnx or .kiln file)", path.c_str());
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  char head[16] = {};
  in.read(head, sizeof(head));
  return model::looks_like_kiln(head, static_cast<size_t>(in.gcount())) ? ModelKind::kKiln : ModelKind::kOnnx;
}

Expected<OpenedModel> open_model(const std::string& path, const compiler::CompileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(ModelKind kind, sniff_model_kind(path));
  OpenedModel out;
  out.kind = kind;
  std::error_code ec;
  out.file_size = static_cast<size_t>(std::filesystem::file_size(path, ec));
  if (kind == ModelKind::kKiln) {
    KILN_ASSIGN_OR_RETURN(model::LoadedModel loaded, model::load_model(path));
    out.graph = std::move(loaded.graph);
    out.info = std::move(loaded.info);
  } else {
    KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(path, options));
    out.graph = std::move(compiled.graph);
    out.info = std::move(compiled.info);
  }
  out.open_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  KILN_LOG(kInfo, "opened %s in %.1f ms", path.c_str(), out.open_ms);
  return out;
}

}  // namespace kiln::tools
