// A temporary directory for one test process, removed with everything in it when the process
// exits. ctest runs every test case as a process of its own, so a directory each case leaves
// behind piles up by the thousand in the machine's temporary folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace kiln::test_support {

class ProcessTempDir {
 public:
  // <gtest's temporary folder>/<prefix>_<pid>, made now.
  explicit ProcessTempDir(const std::string& prefix)
      : path_(::testing::TempDir() + prefix + "_" + std::to_string(::getpid())) {
    std::filesystem::create_directories(path_);
  }
  ~ProcessTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ProcessTempDir(const ProcessTempDir&) = delete;
  ProcessTempDir& operator=(const ProcessTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kiln::test_support
