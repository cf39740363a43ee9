// Opening a model given on the command line: a .kiln file is loaded (mmap, validated);
// an .onnx file is compiled in memory first. The kind is told by content, not by name.
#pragma once

#include <memory>
#include <string>

#include "compiler/compiler.h"
#include "model/kiln_model.h"

namespace kiln::tools {

enum class ModelKind { kKiln, kOnnx };

struct OpenedModel {
  ModelKind kind = ModelKind::kKiln;
  std::shared_ptr<ir::Graph> graph;
  model::ModelInfo info;
  size_t file_size = 0;
  double open_ms = 0;  // wall time to load (or compile) the model
};

Expected<ModelKind> sniff_model_kind(const std::string& path);
Expected<OpenedModel> open_model(const std::string& path, const compiler::CompileOptions& options = {});

}  // namespace kiln::tools
