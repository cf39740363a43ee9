// A model written in the ONNX text syntax, compiled to a .kiln file in the test's temporary
// directory (the models of the reliability tests).
#pragma once

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <string>

#include "compiler/compiler.h"
#include "../process_temp_dir.h"

namespace kiln::test_util {

inline std::string compile_text_model(const char* text, const std::string& name, int opt_level = 3) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  std::string bytes = m.SerializeAsString();
  compiler::CompileOptions options;
  options.passes.opt_level = opt_level;
  auto compiled = compiler::compile_onnx_bytes(bytes.data(), bytes.size(), name, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  static const test_support::ProcessTempDir dir("kiln_reliability_test");
  std::string out = dir.path() + "/" + name + ".kiln";
  Status w = compiler::write_compiled_model(*compiled, out);
  EXPECT_TRUE(w.ok()) << w.to_string();
  return out;
}

}  // namespace kiln::test_util
