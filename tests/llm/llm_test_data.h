// Where the LLM tests find the data tests/llm/make_test_data.py writes (the CTest fixture's
// folder, compiled in as KILN_LLM_TEST_DATA_DIR, unless KILN_LLM_TEST_DATA names another), and
// reading its .npy files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/npy.h"

namespace kiln::llm::test {

// KILN_LLM_TEST_DATA names another folder make_test_data.py wrote (bench/llm/exactness_full_scale.sh:
// the same tests at the acceptance's 256 tokens per prompt).
inline std::string data_dir() {
  const char* other = std::getenv("KILN_LLM_TEST_DATA");
  return other != nullptr && *other != '\0' ? other : KILN_LLM_TEST_DATA_DIR;
}

inline Tensor npy(const std::string& path) {
  auto t = read_npy(data_dir() + "/" + path);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Tensor();
}

}  // namespace kiln::llm::test
