// The profiler's outputs: timeline.json (Chrome trace events), op_summary.csv,
// op_statistic.csv, api_statistic.csv and the printed top-10 table; reading a profile
// directory back and the diff of two profiles (`kiln profile diff`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "profiler/records.h"

namespace kiln::profiler {

inline constexpr char kTimelineFile[] = "timeline.json";
inline constexpr char kOpSummaryFile[] = "op_summary.csv";
inline constexpr char kOpStatisticFile[] = "op_statistic.csv";
inline constexpr char kApiStatisticFile[] = "api_statistic.csv";

// The op_summary.csv header, in the order.
extern const std::vector<std::string> kOpSummaryColumns;

// Calls and time of one op type or one API (nanoseconds, exact sums).
struct Statistic {
  std::string name;
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0;
  int64_t max_ns = 0;
};
// Per op type, most time first.
std::vector<Statistic> op_statistics(const Profile& profile);
// Per host API, most time first.
std::vector<Statistic> api_statistics(const Profile& profile);

// Writes the four files into `dir` (which must exist).
Status write_profile(const Profile& profile, const std::string& dir);
// The `n` op types with the most device time, as a text table.
std::string top_op_types_table(const Profile& profile, size_t n);

// ---- Reading back and diffing ------------------------------------------------------------

// One node of a profile read back from op_summary.csv.
struct NodeTime {
  std::string op_type;
  int64_t calls = 0;
  double total_us = 0;
  double avg_us() const { return calls ? total_us / static_cast<double>(calls) : 0; }
};

struct ProfileData {
  std::string dir;
  std::map<std::string, NodeTime> nodes;  // key: "model/op name"
};
// Reads DIR/op_summary.csv (checking the header and every row) and checks that
// DIR/timeline.json exists. Errors name the file and line.
Expected<ProfileData> read_profile_dir(const std::string& dir);

struct DiffRow {
  std::string name;     // op type, or "model/op name"
  std::string op_type;  // for nodes
  double before_us = 0;  // per inference (a node's average per call; an op type: its nodes' sum)
  double after_us = 0;
  bool in_before = true;
  bool in_after = true;
  double delta_us() const { return after_us - before_us; }
};
struct ProfileDiff {
  std::vector<DiffRow> op_types;  // largest regression first, largest gain last
  std::vector<DiffRow> nodes;
  double before_us = 0;  // one inference: the sum over nodes of their average
  double after_us = 0;
  // True when no op type, no node and the end-to-end time changed.
  bool unchanged() const;
};
ProfileDiff diff_profiles(const ProfileData& before, const ProfileData& after);
// Text report: end-to-end change, per op type, then the `top` largest node changes each way.
std::string format_diff(const ProfileDiff& diff, const std::string& before_dir,
                        const std::string& after_dir, size_t top);

}  // namespace kiln::profiler
