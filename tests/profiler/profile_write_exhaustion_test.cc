// A profile written to a full disk (RLIMIT_FSIZE standing in for it): an error naming the
// file, no file left half-written or as a temporary, and the next write succeeds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../file_size_limit.h"
#include "profiler/records.h"
#include "profiler/report.h"

namespace kiln::profiler {
namespace {

TEST(ProfileWriteExhaustionTest, FullDiskLeavesNoHalfWrittenFileAndTheWriterRecovers) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_profile_full_" + std::to_string(getpid()));
  fs::create_directories(dir);
  Profile p;
  Status s;
  {
    test::FileSizeLimit full_disk(8);  // no file gets past its first 8 bytes
    ASSERT_TRUE(full_disk.ok());
    s = write_profile(p, dir.string());
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("File too large"), std::string::npos) << s.to_string();
  EXPECT_TRUE(fs::is_empty(dir)) << "a file or a temporary was left behind";

  ASSERT_TRUE(write_profile(p, dir.string()).ok());
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
    ++files;
  }
  EXPECT_GT(files, 0u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::profiler
