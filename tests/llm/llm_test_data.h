// Where the LLM tests find the data tests/llm/make_test_data.py writes (the CTest fixture's
// folder, compiled in as KILN_LLM_TEST_DATA_DIR), and reading its .npy files.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/npy.h"

namespace kiln::llm::test {

inline std::string data_dir() { return KILN_LLM_TEST_DATA_DIR; }

inline Tensor npy(const std::string& path) {
  auto t = read_npy(data_dir() + "/" + path);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Tensor();
}

}  // namespace kiln::llm::test
