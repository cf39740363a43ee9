// Writers of a profile directory, its reader, and the diff of two profiles.
#include "profiler/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace kiln::profiler {

const std::vector<std::string> kOpSummaryColumns = {
    "model",         "op name",       "op type",        "implementation", "stream",
    "start us",      "duration us",   "input shapes",   "input dtypes",   "input formats",
    "output shapes", "output dtypes", "output formats", "GFLOP/s",        "GB/s",
    "% of peak"};

namespace {

// Nanoseconds as microseconds with three decimals: exact, so sums of the printed values
// equal the printed sums.
std::string us_text(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  uint64_t a = ns < 0 ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  return str_format("%s%llu.%03llu", sign, static_cast<unsigned long long>(a / 1000),
                    static_cast<unsigned long long>(a % 1000));
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void csv_row(std::ostream& out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << csv_field(fields[i]);
  out << '\n';
}

// Splits one CSV line (quotes as csv_field writes them); false if a quote is unbalanced.
bool parse_csv_line(const std::string& line, std::vector<std::string>* fields) {
  fields->clear();
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields->push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (quoted) return false;
  fields->push_back(std::move(cur));
  return true;
}

std::string track_label(const Profile& p, int track) {
  if (track < 0 || static_cast<size_t>(track) >= p.tracks.size()) return "?";
  const Track& t = p.tracks[static_cast<size_t>(track)];
  return t.pid == 0 ? t.thread_name : t.process_name + "/" + t.thread_name;
}

std::string rate_text(double amount, int64_t ns) {
  if (amount < 0 || ns <= 0) return "";
  return str_format("%.3f", amount / static_cast<double>(ns));  // per ns = G per s
}

std::vector<Statistic> statistics(const Profile& p, RecordKind kind, bool by_op_type) {
  std::map<std::string, Statistic> by;
  for (const Record& r : p.records) {
    if (r.kind != kind) continue;
    const std::string& key = by_op_type && r.op ? r.op->op_type : r.name;
    Statistic& s = by[key];
    if (s.calls == 0) {
      s.name = key;
      s.min_ns = s.max_ns = r.dur_ns;
    }
    ++s.calls;
    s.total_ns += r.dur_ns;
    s.min_ns = std::min(s.min_ns, r.dur_ns);
    s.max_ns = std::max(s.max_ns, r.dur_ns);
  }
  std::vector<Statistic> out;
  for (auto& [k, s] : by) out.push_back(s);
  std::stable_sort(out.begin(), out.end(),
                   [](const Statistic& a, const Statistic& b) { return a.total_ns > b.total_ns; });
  return out;
}

// Records in a stable order: by track, then start, the enclosing (longer) one first.
std::vector<const Record*> sorted_records(const Profile& p) {
  std::vector<const Record*> v;
  v.reserve(p.records.size());
  for (const Record& r : p.records) v.push_back(&r);
  std::stable_sort(v.begin(), v.end(), [](const Record* a, const Record* b) {
    if (a->track != b->track) return a->track < b->track;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
    return a->dur_ns > b->dur_ns;
  });
  return v;
}

const char* category(RecordKind k) {
  switch (k) {
    case RecordKind::kApi: return "api";
    case RecordKind::kTask: return "task";
    case RecordKind::kOp: return "op";
    case RecordKind::kCopy: return "copy";
    case RecordKind::kCompile: return "compile";
    case RecordKind::kFlowStart:
    case RecordKind::kFlowEnd: return "flow";
  }
  return "?";
}

double ts_us(const Profile& p, int64_t ns) { return static_cast<double>(ns - p.origin_ns) / 1000.0; }

nlohmann::json timeline_json(const Profile& p) {
  using nlohmann::json;
  json events = json::array();
  std::set<int> used;
  for (const Record& r : p.records) used.insert(r.track);
  std::set<int> pids;
  for (int t : used) {
    if (t < 0 || static_cast<size_t>(t) >= p.tracks.size()) continue;
    const Track& tr = p.tracks[static_cast<size_t>(t)];
    if (pids.insert(tr.pid).second) {
      events.push_back({{"name", "process_name"}, {"ph", "M"}, {"ts", 0}, {"pid", tr.pid}, {"tid", 0},
                        {"args", {{"name", tr.process_name}}}});
      events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"ts", 0}, {"pid", tr.pid},
                        {"tid", 0}, {"args", {{"sort_index", tr.pid}}}});
    }
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"ts", 0}, {"pid", tr.pid}, {"tid", tr.tid},
                      {"args", {{"name", tr.thread_name}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"ts", 0}, {"pid", tr.pid},
                      {"tid", tr.tid}, {"args", {{"sort_index", tr.tid}}}});
  }
  // Flow arrows only where both ends were recorded.
  std::set<uint64_t> starts, ends;
  for (const Record& r : p.records) {
    if (r.kind == RecordKind::kFlowStart) starts.insert(r.flow);
    if (r.kind == RecordKind::kFlowEnd) ends.insert(r.flow);
  }
  for (const Record* rp : sorted_records(p)) {
    const Record& r = *rp;
    if (r.track < 0 || static_cast<size_t>(r.track) >= p.tracks.size()) continue;
    const Track& tr = p.tracks[static_cast<size_t>(r.track)];
    if (r.kind == RecordKind::kFlowStart || r.kind == RecordKind::kFlowEnd) {
      if (!starts.count(r.flow) || !ends.count(r.flow)) continue;
      json e = {{"name", "event"}, {"cat", "flow"}, {"ph", r.kind == RecordKind::kFlowStart ? "s" : "f"},
                {"id", r.flow}, {"ts", ts_us(p, r.start_ns)}, {"pid", tr.pid}, {"tid", tr.tid}};
      if (r.kind == RecordKind::kFlowEnd) e["bp"] = "e";
      events.push_back(std::move(e));
      continue;
    }
    json e = {{"name", r.name}, {"cat", category(r.kind)}, {"ph", "X"}, {"ts", ts_us(p, r.start_ns)},
              {"dur", static_cast<double>(r.dur_ns) / 1000.0}, {"pid", tr.pid}, {"tid", tr.tid}};
    json args = json::object();
    if (r.kind == RecordKind::kOp && r.op) {
      const OpDetail& d = *r.op;
      args["model"] = d.model;
      args["op type"] = d.op_type;
      args["implementation"] = d.implementation;
      args["input shapes"] = d.input_shapes;
      args["input dtypes"] = d.input_dtypes;
      args["input formats"] = d.input_formats;
      args["output shapes"] = d.output_shapes;
      args["output dtypes"] = d.output_dtypes;
      args["output formats"] = d.output_formats;
      if (d.flops >= 0) {
        args["flops"] = d.flops;
        if (r.dur_ns > 0) args["GFLOP/s"] = d.flops / static_cast<double>(r.dur_ns);
      }
      if (d.bytes >= 0) args["bytes"] = d.bytes;
    } else if (r.kind == RecordKind::kCopy) {
      args["direction"] = r.name;
      args["bytes"] = r.bytes;
      if (r.dur_ns > 0) args["GB/s"] = static_cast<double>(r.bytes) / static_cast<double>(r.dur_ns);
    }
    if (!args.empty()) e["args"] = std::move(args);
    events.push_back(std::move(e));
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

// Writes `text` to `path` through `path.tmp`, flushed to the disk and renamed: a full disk
// or a crash leaves the old file or the whole new one, never half of it.
Status write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return unavailable("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
  Status status;
  for (size_t off = 0; status.ok() && off < text.size();) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status = unavailable("cannot write %s at offset %zu: %s", tmp.c_str(), off,
                           n < 0 ? std::strerror(errno) : "no progress");
    } else {
      off += static_cast<size_t>(n);
    }
  }
  if (status.ok() && ::fsync(fd) != 0)
    status = unavailable("cannot flush %s to disk: %s", tmp.c_str(), std::strerror(errno));
  if (::close(fd) != 0 && status.ok())
    status = unavailable("cannot close %s: %s", tmp.c_str(), std::strerror(errno));
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    status = unavailable("cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), std::strerror(errno));
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace

std::vector<Statistic> op_statistics(const Profile& profile) {
  return statistics(profile, RecordKind::kOp, /*by_op_type=*/true);
}

std::vector<Statistic> api_statistics(const Profile& profile) {
  return statistics(profile, RecordKind::kApi, /*by_op_type=*/false);
}

Status write_profile(const Profile& p, const std::string& dir) {
  namespace fs = std::filesystem;
  KILN_RETURN_IF_ERROR(write_text((fs::path(dir) / kTimelineFile).string(), timeline_json(p).dump()));

  std::ostringstream summary;
  csv_row(summary, kOpSummaryColumns);
  std::vector<const Record*> ops;
  for (const Record& r : p.records)
    if (r.kind == RecordKind::kOp && r.op) ops.push_back(&r);
  std::stable_sort(ops.begin(), ops.end(), [](const Record* a, const Record* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->track < b->track;
  });
  for (const Record* r : ops) {
    const OpDetail& d = *r->op;
    int cores = r->track >= 0 && static_cast<size_t>(r->track) < p.tracks.size()
                    ? p.tracks[static_cast<size_t>(r->track)].cores
                    : 0;
    std::string peak;
    double peak_gflops = p.peak_gflops_per_core * std::max(cores, 1);
    if (d.flops >= 0 && r->dur_ns > 0 && peak_gflops > 0)
      peak = str_format("%.2f", d.flops / static_cast<double>(r->dur_ns) / peak_gflops * 100);
    csv_row(summary, {d.model, r->name, d.op_type, d.implementation, track_label(p, r->track),
                      us_text(r->start_ns - p.origin_ns), us_text(r->dur_ns), d.input_shapes,
                      d.input_dtypes, d.input_formats, d.output_shapes, d.output_dtypes,
                      d.output_formats, rate_text(d.flops, r->dur_ns), rate_text(d.bytes, r->dur_ns),
                      peak});
  }
  KILN_RETURN_IF_ERROR(write_text((fs::path(dir) / kOpSummaryFile).string(), summary.str()));

  auto stats_csv = [](const std::vector<Statistic>& stats, const std::string& first, bool share) {
    std::ostringstream out;
    std::vector<std::string> header = {first, "calls", "total us", "avg us", "min us", "max us"};
    if (share) header.push_back("share %");
    csv_row(out, header);
    int64_t all = 0;
    for (const Statistic& s : stats) all += s.total_ns;
    for (const Statistic& s : stats) {
      std::vector<std::string> row = {s.name, std::to_string(s.calls), us_text(s.total_ns),
                                      us_text(s.total_ns / std::max<int64_t>(s.calls, 1)),
                                      us_text(s.min_ns), us_text(s.max_ns)};
      if (share)
        row.push_back(str_format("%.2f", all > 0 ? 100.0 * static_cast<double>(s.total_ns) /
                                                       static_cast<double>(all)
                                                 : 0.0));
      csv_row(out, row);
    }
    return out.str();
  };
  KILN_RETURN_IF_ERROR(write_text((fs::path(dir) / kOpStatisticFile).string(),
                                  stats_csv(op_statistics(p), "op type", true)));
  KILN_RETURN_IF_ERROR(write_text((fs::path(dir) / kApiStatisticFile).string(),
                                  stats_csv(api_statistics(p), "api", false)));
  return ok_status();
}

std::string top_op_types_table(const Profile& profile, size_t n) {
  std::vector<Statistic> stats = op_statistics(profile);
  int64_t all = 0;
  for (const Statistic& s : stats) all += s.total_ns;
  std::string out = str_format("%-4s %-24s %8s %12s %12s %8s\n", "#", "op type", "calls", "total ms",
                               "avg us", "share");
  for (size_t i = 0; i < stats.size() && i < n; ++i) {
    const Statistic& s = stats[i];
    out += str_format("%-4zu %-24s %8lld %12.3f %12.3f %7.2f%%\n", i + 1, s.name.c_str(),
                      static_cast<long long>(s.calls), static_cast<double>(s.total_ns) / 1e6,
                      static_cast<double>(s.total_ns) / 1e3 / static_cast<double>(s.calls),
                      all > 0 ? 100.0 * static_cast<double>(s.total_ns) / static_cast<double>(all) : 0.0);
  }
  out += str_format("%-4s %-24s %8s %12.3f\n", "", "all ops", "", static_cast<double>(all) / 1e6);
  return out;
}

// ---- Reading back and diffing ------------------------------------------------------------

Expected<ProfileData> read_profile_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("profile directory '%s' does not exist", dir.c_str());
  std::string timeline = (fs::path(dir) / kTimelineFile).string();
  if (!fs::is_regular_file(timeline, ec))
    return not_found("'%s' is not a profile directory: it has no %s", dir.c_str(), kTimelineFile);
  std::string path = (fs::path(dir) / kOpSummaryFile).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("'%s' is not a profile directory: cannot read %s", dir.c_str(), kOpSummaryFile);
  std::string line;
  std::vector<std::string> fields;
  if (!std::getline(in, line) || !parse_csv_line(line, &fields) || fields != kOpSummaryColumns)
    return data_loss("%s: line 1 is not the op_summary header", path.c_str());
  ProfileData data;
  data.dir = dir;
  size_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    if (!parse_csv_line(line, &fields) || fields.size() != kOpSummaryColumns.size())
      return data_loss("%s: line %zu has %zu fields, expected %zu", path.c_str(), line_no,
                       fields.size(), kOpSummaryColumns.size());
    const std::string& dur = fields[6];
    char* end = nullptr;
    errno = 0;
    double us = std::strtod(dur.c_str(), &end);
    if (dur.empty() || end != dur.c_str() + dur.size() || errno != 0 || !std::isfinite(us) || us < 0)
      return data_loss("%s: line %zu: duration '%s' is not a number of microseconds", path.c_str(),
                       line_no, dur.c_str());
    NodeTime& n = data.nodes[fields[0] + "/" + fields[1]];
    n.op_type = fields[2];
    ++n.calls;
    n.total_us += us;
  }
  return data;
}

bool ProfileDiff::unchanged() const {
  for (const auto* rows : {&op_types, &nodes})
    for (const DiffRow& r : *rows)
      if (r.delta_us() != 0 || r.in_before != r.in_after) return false;
  return before_us == after_us;
}

ProfileDiff diff_profiles(const ProfileData& before, const ProfileData& after) {
  ProfileDiff d;
  std::map<std::string, DiffRow> types;
  std::set<std::string> keys;
  for (const auto& [k, v] : before.nodes) keys.insert(k);
  for (const auto& [k, v] : after.nodes) keys.insert(k);
  for (const std::string& k : keys) {
    DiffRow row;
    row.name = k;
    auto b = before.nodes.find(k);
    auto a = after.nodes.find(k);
    row.in_before = b != before.nodes.end();
    row.in_after = a != after.nodes.end();
    if (row.in_before) row.before_us = b->second.avg_us();
    if (row.in_after) row.after_us = a->second.avg_us();
    row.op_type = row.in_after ? a->second.op_type : b->second.op_type;
    d.before_us += row.before_us;
    d.after_us += row.after_us;
    DiffRow& t = types[row.op_type];
    t.name = row.op_type;
    t.before_us += row.before_us;
    t.after_us += row.after_us;
    d.nodes.push_back(std::move(row));
  }
  for (auto& [k, t] : types) d.op_types.push_back(t);
  auto by_delta = [](const DiffRow& a, const DiffRow& b) { return a.delta_us() > b.delta_us(); };
  std::stable_sort(d.op_types.begin(), d.op_types.end(), by_delta);
  std::stable_sort(d.nodes.begin(), d.nodes.end(), by_delta);
  return d;
}

namespace {

std::string change_text(double before, double after) {
  double delta = after - before;
  if (before > 0) return str_format("%+.3f us (%+.1f%%)", delta, 100.0 * delta / before);
  return str_format("%+.3f us", delta);
}

}  // namespace

std::string format_diff(const ProfileDiff& d, const std::string& before_dir,
                        const std::string& after_dir, size_t top) {
  std::string out;
  out += str_format("base: %s\nnew:  %s\n", before_dir.c_str(), after_dir.c_str());
  out += str_format("end to end (op time per inference): %.3f us -> %.3f us, %s\n", d.before_us,
                    d.after_us, change_text(d.before_us, d.after_us).c_str());
  if (d.unchanged()) {
    out += "no change\n";
    return out;
  }
  out += "\nper op type (largest regression first):\n";
  out += str_format("  %-24s %14s %14s  %s\n", "op type", "base us", "new us", "change");
  for (const DiffRow& r : d.op_types)
    out += str_format("  %-24s %14.3f %14.3f  %s\n", r.name.c_str(), r.before_us, r.after_us,
                      change_text(r.before_us, r.after_us).c_str());
  auto node_line = [](const DiffRow& r) {
    std::string where = !r.in_before ? " (new node)" : !r.in_after ? " (gone)" : "";
    return str_format("  %-40s %-16s %12.3f %12.3f  %s%s\n", r.name.c_str(), r.op_type.c_str(),
                      r.before_us, r.after_us, change_text(r.before_us, r.after_us).c_str(),
                      where.c_str());
  };
  std::string header = str_format("  %-40s %-16s %12s %12s  %s\n", "node", "op type", "base us",
                                  "new us", "change");
  out += "\nlargest node regressions:\n" + header;
  size_t shown = 0;
  for (const DiffRow& r : d.nodes) {
    if (shown == top || r.delta_us() <= 0) break;
    out += node_line(r);
    ++shown;
  }
  if (shown == 0) out += "  (none)\n";
  out += "\nlargest node gains:\n" + header;
  shown = 0;
  for (auto it = d.nodes.rbegin(); it != d.nodes.rend(); ++it) {
    if (shown == top || it->delta_us() >= 0) break;
    out += node_line(*it);
    ++shown;
  }
  if (shown == 0) out += "  (none)\n";
  return out;
}

}  // namespace kiln::profiler
