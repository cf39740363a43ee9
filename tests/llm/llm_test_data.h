// Where the LLM tests find the data tests/llm/make_test_data.py writes (the CTest fixture
// sets KILN_LLM_TEST_DATA), and reading its .npy files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/npy.h"

namespace kiln::llm::test {

inline std::string data_dir() {
  const char* dir = std::getenv("KILN_LLM_TEST_DATA");
  return dir ? dir : "";
}

inline Tensor npy(const std::string& path) {
  auto t = read_npy(data_dir() + "/" + path);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Tensor();
}

}  // namespace kiln::llm::test
