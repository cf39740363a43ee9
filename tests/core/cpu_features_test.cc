// cpu_features() against the kernel's own detection: the flags line of /proc/cpuinfo (Linux
// clears a flag whose register state the OS does not save, as cpu_features() does with XCR0).
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace kiln {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeaturesTest, AgreesWithProcCpuinfo) {
  const std::set<std::string> flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  // Kiln's name (the .kiln target's spelling) -> Linux's.
  const std::pair<const char*, const char*> names[] = {
      {"sse4.2", "sse4_2"},           {"popcnt", "popcnt"},
      {"avx", "avx"},                 {"fma", "fma"},
      {"f16c", "f16c"},               {"avx2", "avx2"},
      {"bmi1", "bmi1"},               {"bmi2", "bmi2"},
      {"avx512f", "avx512f"},         {"avx512dq", "avx512dq"},
      {"avx512cd", "avx512cd"},       {"avx512bw", "avx512bw"},
      {"avx512vl", "avx512vl"},       {"avx512_ifma", "avx512ifma"},
      {"avx512_vbmi", "avx512vbmi"},  {"avx512_vbmi2", "avx512_vbmi2"},
      {"avx512_vnni", "avx512_vnni"}, {"avx512_bitalg", "avx512_bitalg"},
      {"avx512_vpopcntdq", "avx512_vpopcntdq"}, {"avx512_fp16", "avx512_fp16"},
      {"avx_vnni", "avx_vnni"},       {"avx512_bf16", "avx512_bf16"},
      {"amx_tile", "amx_tile"},       {"amx_bf16", "amx_bf16"},
      {"amx_int8", "amx_int8"},
  };
  const CpuFeatures& f = cpu_features();
  for (const auto& [kiln_name, linux_name] : names)
    EXPECT_EQ(f.has(kiln_name), flags.count(linux_name) > 0) << kiln_name << " (" << linux_name << ")";
  EXPECT_EQ(f.avx512f, flags.count("avx512f") > 0);
  EXPECT_EQ(f.avx2, flags.count("avx2") > 0);
  EXPECT_EQ(f.highway_avx3(), flags.count("avx512f") && flags.count("avx512vl") && flags.count("avx512dq") &&
                                  flags.count("avx512bw"));
}

TEST(CpuFeaturesTest, DetectedOnceAndStable) {
  const CpuFeatures& a = cpu_features();
  const CpuFeatures& b = cpu_features();
  EXPECT_EQ(&a, &b);
  for (const std::string& n : a.names) EXPECT_TRUE(a.has(n)) << n;
  EXPECT_FALSE(a.has("no_such_feature"));
}

}  // namespace
}  // namespace kiln
