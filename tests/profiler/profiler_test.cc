// Tests of the profiler: a small model run through the C API under kilnprofInit/Start/
// Stop/Finalize, then the files it wrote checked against each other and against the model
// (timeline.json fields and nesting, op statistics vs op summary vs timeline, per-stream
// op order vs the model's execution order, FLOPs computed by hand, flow arrows, copies);
// the recorder under concurrent writers; the diff; bad profile directories; C API errors.
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "profiler/profiler.h"
#include "profiler/records.h"
#include "profiler/report.h"
#include "../process_temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string temp_dir() {
  static const kiln::test_support::ProcessTempDir dir("kiln_profiler_test");
  return dir.path();
}

// Conv -> Relu -> Flatten -> MatMul -> Softmax; the weights are model inputs so the test
// knows every shape: X [1,2,8,8], W [4,2,3,3] -> [1,4,6,6] -> [1,144], B [144,10] -> [1,10].
const char* kSmallModel = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  small (float[1,2,8,8] x, float[4,2,3,3] w, float[144,10] b) => (float[1,10] y) {
    c = Conv <kernel_shape = [3, 3]> (x, w)
    r = Relu (c)
    f = Flatten (r)
    m = MatMul (f, b)
    y = Softmax (m)
  }
)";
// FLOPs by hand: Conv 2 * |Y| (144) * C_in*kh*kw (18); MatMul 2 * M*N (10) * K (144).
constexpr double kConvFlops = 2.0 * 144 * 18;
constexpr double kMatMulFlops = 2.0 * 10 * 144;

std::string compile_small_model() {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, kSmallModel);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  std::string bytes = m.SerializeAsString();
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), "small", {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  std::string out = temp_dir() + "/small.kiln";
  kiln::Status w = kiln::compiler::write_compiled_model(*compiled, out);
  EXPECT_TRUE(w.ok()) << w.to_string();
  return out;
}

// The profiler names an op record by its node's name (label when unnamed).
std::vector<std::string> execution_order(const std::string& kiln_path) {
  auto loaded = kiln::model::load_model(kiln_path);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  std::vector<std::string> names;
  if (!loaded.ok()) return names;
  for (const auto& n : loaded->graph->nodes()) names.push_back(n->name().empty() ? n->label() : n->name());
  return names;
}

#define ASSERT_KILN(call) ASSERT_EQ((call), KILN_SUCCESS) << #call << ": " << kilnGetRecentErrMsg()

// Runs `kiln_path` `loops` times on stream A under a profiling session writing to `dir`;
// after the last execution A records an event that stream B waits for before a D2H copy
// (a flow arrow), and the inputs go H2D synchronously (copies).
void profile_model(const std::string& kiln_path, const std::string& dir, int loops) {
  ASSERT_KILN(kilnprofInit(dir.c_str(), dir.size()));
  ASSERT_KILN(kilnprofStart());
  ASSERT_KILN(kilnInit(nullptr));
  ASSERT_KILN(kilnrtSetDevice(0));
  uint32_t id = 0;
  ASSERT_KILN(kilnmdlLoadFromFile(kiln_path.c_str(), &id));
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  ASSERT_KILN(kilnmdlGetDesc(desc, id));
  kilnmdlDataset* in = kilnmdlCreateDataset();
  kilnmdlDataset* out = kilnmdlCreateDataset();
  std::vector<void*> buffers;
  std::vector<kilnDataBuffer*> data_buffers;
  for (size_t i = 0; i < kilnmdlGetNumInputs(desc); ++i) {
    size_t bytes = kilnmdlGetInputSizeByIndex(desc, i);
    void* dev = nullptr;
    ASSERT_KILN(kilnrtMalloc(&dev, bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    std::vector<float> host(bytes / sizeof(float));
    for (size_t k = 0; k < host.size(); ++k) host[k] = static_cast<float>((k % 7) - 3) * 0.25f;
    ASSERT_KILN(kilnrtMemcpy(dev, bytes, host.data(), bytes, KILN_MEMCPY_HOST_TO_DEVICE));
    buffers.push_back(dev);
    data_buffers.push_back(kilnCreateDataBuffer(dev, bytes));
    ASSERT_KILN(kilnmdlAddDatasetBuffer(in, data_buffers.back()));
  }
  size_t out_bytes = kilnmdlGetOutputSizeByIndex(desc, 0);
  void* dev_out = nullptr;
  ASSERT_KILN(kilnrtMalloc(&dev_out, out_bytes, KILN_MEM_MALLOC_HUGE_FIRST));
  data_buffers.push_back(kilnCreateDataBuffer(dev_out, out_bytes));
  ASSERT_KILN(kilnmdlAddDatasetBuffer(out, data_buffers.back()));
  void* host_out = nullptr;
  ASSERT_KILN(kilnrtMallocHost(&host_out, out_bytes));

  kilnrtStream a = nullptr, b = nullptr;
  ASSERT_KILN(kilnrtCreateStream(&a));
  ASSERT_KILN(kilnrtCreateStream(&b));
  kilnrtEvent done = nullptr;
  ASSERT_KILN(kilnrtCreateEvent(&done));
  for (int i = 0; i < loops; ++i) ASSERT_KILN(kilnmdlExecuteAsync(id, in, out, a));
  ASSERT_KILN(kilnrtRecordEvent(done, a));
  ASSERT_KILN(kilnrtStreamWaitEvent(b, done));
  ASSERT_KILN(kilnrtMemcpyAsync(host_out, out_bytes, dev_out, out_bytes, KILN_MEMCPY_DEVICE_TO_HOST, b));
  ASSERT_KILN(kilnrtSynchronizeStream(b));
  ASSERT_KILN(kilnrtSynchronizeStream(a));
  ASSERT_KILN(kilnprofStop());

  ASSERT_KILN(kilnrtDestroyEvent(done));
  ASSERT_KILN(kilnrtDestroyStream(a));
  ASSERT_KILN(kilnrtDestroyStream(b));
  for (kilnDataBuffer* d : data_buffers) kilnDestroyDataBuffer(d);
  kilnmdlDestroyDataset(in);
  kilnmdlDestroyDataset(out);
  kilnmdlDestroyDesc(desc);
  for (void* p : buffers) kilnrtFree(p);
  kilnrtFree(dev_out);
  kilnrtFreeHost(host_out);
  ASSERT_KILN(kilnmdlUnload(id));
  ASSERT_KILN(kilnrtResetDevice(0));
  ASSERT_KILN(kilnFinalize());
  ASSERT_KILN(kilnprofFinalize());
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// Rows of a CSV file as column -> value maps.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  std::vector<std::map<std::string, std::string>> rows;
  if (!std::getline(in, line)) return rows;
  std::vector<std::string> header = split_csv(line);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f = split_csv(line);
    EXPECT_EQ(f.size(), header.size()) << line;
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    rows.push_back(row);
  }
  return rows;
}

// Microseconds (as written: three decimals) to whole nanoseconds.
int64_t to_ns(double us) { return std::llround(us * 1000.0); }
int64_t to_ns(const std::string& us) { return to_ns(std::stod(us)); }

struct Span {
  int64_t start, end;
  std::string name;
};

// Per (pid, tid): X events sorted by start, the enclosing (longer) one first.
std::map<std::pair<int, int>, std::vector<Span>> tracks_of(const json& trace) {
  std::map<std::pair<int, int>, std::vector<Span>> tracks;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    int64_t s = to_ns(e["ts"].get<double>());
    tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
        {s, s + to_ns(e["dur"].get<double>()), e["name"].get<std::string>()});
  }
  for (auto& [k, v] : tracks)
    std::stable_sort(v.begin(), v.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
  return tracks;
}

class ProfiledRun : public ::testing::Test {
 protected:
  static constexpr int kLoops = 3;
  static void SetUpTestSuite() {
    kiln_path_ = new std::string(compile_small_model());
    dir_ = new std::string(temp_dir() + "/small_profile");
    profile_model(*kiln_path_, *dir_, kLoops);
  }
  static void TearDownTestSuite() {
    delete kiln_path_;
    delete dir_;
  }
  static std::string file(const char* name) { return *dir_ + "/" + name; }
  static std::string* kiln_path_;
  static std::string* dir_;
};
std::string* ProfiledRun::kiln_path_ = nullptr;
std::string* ProfiledRun::dir_ = nullptr;

TEST_F(ProfiledRun, TimelineIsValidJsonWithRequiredFields) {
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  ASSERT_FALSE(trace.is_discarded()) << "timeline.json is not JSON";
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  std::set<std::pair<int, int>> named, used;
  std::map<std::string, int> by_cat;
  for (const json& e : trace["traceEvents"]) {
    for (const char* key : {"name", "ph", "ts", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
    std::string ph = e["ph"];
    ASSERT_TRUE(ph == "X" || ph == "M" || ph == "s" || ph == "f") << e.dump();
    std::pair<int, int> track{e["pid"].get<int>(), e["tid"].get<int>()};
    if (ph == "M" && e["name"] == "thread_name") named.insert(track);
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0);
      used.insert(track);
      ++by_cat[e.value("cat", "")];
    }
  }
  for (const auto& t : used) EXPECT_TRUE(named.count(t)) << "track " << t.first << "/" << t.second << " has no name";
  // 5 nodes (or fewer once fused) per execution, the tasks, the API calls, the copies.
  EXPECT_GE(by_cat["op"], kLoops);
  EXPECT_GE(by_cat["task"], kLoops + 2);  // executions, record, wait, copy
  EXPECT_GT(by_cat["api"], 0);
  EXPECT_GE(by_cat["copy"], 4);  // 3 inputs H2D, 1 output D2H
}

TEST_F(ProfiledRun, EventsOnOneTrackNestOrDoNotOverlap) {
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  ASSERT_FALSE(trace.is_discarded());
  for (const auto& [track, spans] : tracks_of(trace)) {
    std::vector<Span> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back().end <= s.start) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.end, open.back().end) << "'" << s.name << "' overlaps '" << open.back().name << "' on track "
                                          << track.first << "/" << track.second << " without nesting";
      }
      open.push_back(s);
    }
  }
}

TEST_F(ProfiledRun, OpStatisticsEqualSummaryAndTimelineSums) {
  std::map<std::string, int64_t> summary_ns, timeline_ns;
  std::map<std::string, int64_t> summary_calls;
  auto rows = read_csv(file(kiln::profiler::kOpSummaryFile));
  ASSERT_FALSE(rows.empty());
  for (auto& r : rows) {
    summary_ns[r["op type"]] += to_ns(r["duration us"]);
    ++summary_calls[r["op type"]];
  }
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  ASSERT_FALSE(trace.is_discarded());
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e.value("cat", "") == "op")
      timeline_ns[e["args"]["op type"].get<std::string>()] += to_ns(e["dur"].get<double>());
  auto stats = read_csv(file(kiln::profiler::kOpStatisticFile));
  ASSERT_EQ(stats.size(), summary_ns.size());
  double share = 0;
  for (auto& s : stats) {
    const std::string& type = s["op type"];
    EXPECT_EQ(to_ns(s["total us"]), summary_ns[type]) << type;
    EXPECT_EQ(to_ns(s["total us"]), timeline_ns[type]) << type;
    EXPECT_EQ(std::stoll(s["calls"]), summary_calls[type]) << type;
    EXPECT_LE(to_ns(s["min us"]), to_ns(s["max us"])) << type;
    share += std::stod(s["share %"]);
  }
  EXPECT_NEAR(share, 100.0, 0.01 * static_cast<double>(stats.size()));  // each rounded to 0.01
}

TEST_F(ProfiledRun, OpSummaryHasTheIssuesColumnsAndShapes) {
  std::ifstream in(file(kiln::profiler::kOpSummaryFile));
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header,
            "model,op name,op type,implementation,stream,start us,duration us,input shapes,input dtypes,"
            "input formats,output shapes,output dtypes,output formats,GFLOP/s,GB/s,% of peak");
  bool saw_conv = false, saw_matmul = false;
  std::map<std::string, std::string> implementation_of;  // node -> the kernel that ran it
  for (auto& r : read_csv(file(kiln::profiler::kOpSummaryFile))) {
    // "reference" or a fast kernel's name (e.g. "onednn:jit:avx512_core"); the executor
    // picks one per node at load, so every call of a node names the same.
    EXPECT_FALSE(r["implementation"].empty());
    auto [it, first] = implementation_of.emplace(r["op name"], r["implementation"]);
    EXPECT_EQ(it->second, r["implementation"]) << r["op name"];
    EXPECT_NE(r["stream"].find("stream"), std::string::npos) << r["stream"];
    if (r["op type"] == "Conv" || r["op type"] == "FusedConv") {
      saw_conv = true;
      EXPECT_EQ(r["input shapes"].substr(0, 16), "1x2x8x8;4x2x3x3");
      EXPECT_EQ(r["output shapes"], "1x4x6x6");
      EXPECT_EQ(r["output formats"], "NCHW");
      EXPECT_EQ(r["output dtypes"], "float32");
      EXPECT_FALSE(r["GFLOP/s"].empty());
      EXPECT_FALSE(r["% of peak"].empty());
    }
    if (r["op type"] == "MatMul" || r["op type"] == "FusedMatMul") {
      saw_matmul = true;
      EXPECT_EQ(r["input shapes"], "1x144;144x10");
      EXPECT_EQ(r["output formats"], "ND");
    }
  }
  EXPECT_TRUE(saw_conv);
  EXPECT_TRUE(saw_matmul);
}

TEST_F(ProfiledRun, FlopsAndBytesComputedByHand) {
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  ASSERT_FALSE(trace.is_discarded());
  int convs = 0, matmuls = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e.value("cat", "") != "op") continue;
    std::string type = e["args"]["op type"];
    if (type == "Conv" || type == "FusedConv") {
      EXPECT_EQ(e["args"]["flops"].get<double>(), kConvFlops);
      // Inputs x, w (+ bias when fused) and the output, float32.
      EXPECT_GE(e["args"]["bytes"].get<double>(), 4.0 * (128 + 72 + 144));
      ++convs;
    }
    if (type == "MatMul" || type == "FusedMatMul") {
      EXPECT_EQ(e["args"]["flops"].get<double>(), kMatMulFlops);
      EXPECT_EQ(e["args"]["bytes"].get<double>(), 4.0 * (144 + 1440 + 10));
      ++matmuls;
    }
    if (type == "Relu" || type == "Softmax") {
      EXPECT_FALSE(e["args"].contains("flops"));
    }
  }
  EXPECT_EQ(convs, kLoops);
  EXPECT_EQ(matmuls, kLoops);
}

TEST_F(ProfiledRun, PerStreamOpOrderIsTheExecutionOrder) {
  std::vector<std::string> order = execution_order(*kiln_path_);
  ASSERT_FALSE(order.empty());
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  ASSERT_FALSE(trace.is_discarded());
  std::map<std::pair<int, int>, std::vector<std::pair<double, std::string>>> ops;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e.value("cat", "") == "op")
      ops[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(e["ts"].get<double>(), e["name"]);
  ASSERT_EQ(ops.size(), 1u) << "every execution ran on stream A's compute track";
  auto& seq = ops.begin()->second;
  std::stable_sort(seq.begin(), seq.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<std::string> expected;
  for (int i = 0; i < kLoops; ++i) expected.insert(expected.end(), order.begin(), order.end());
  std::vector<std::string> got;
  for (auto& [ts, name] : seq) got.push_back(name);
  EXPECT_EQ(got, expected);
}

TEST_F(ProfiledRun, FlowArrowGoesFromRecordToWait) {
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  ASSERT_FALSE(trace.is_discarded());
  std::map<uint64_t, const json*> starts, ends;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "s") starts[e["id"].get<uint64_t>()] = &e;
    if (e["ph"] == "f") ends[e["id"].get<uint64_t>()] = &e;
  }
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(ends.size(), 1u);
  const json& s = *starts.begin()->second;
  const json& f = *ends.begin()->second;
  EXPECT_EQ(starts.begin()->first, ends.begin()->first);
  EXPECT_LE(s["ts"].get<double>(), f["ts"].get<double>());
  EXPECT_NE(s["tid"], f["tid"]) << "record on stream A, wait on stream B";
  EXPECT_EQ(f["bp"], "e");
}

TEST_F(ProfiledRun, CopiesAndApiStatistics) {
  json trace = read_json(file(kiln::profiler::kTimelineFile));
  std::map<std::string, int> directions;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e.value("cat", "") == "copy") ++directions[e["args"]["direction"].get<std::string>()];
  EXPECT_EQ(directions["H2D"], 3);
  EXPECT_EQ(directions["D2H"], 1);
  std::map<std::string, int64_t> calls;
  for (auto& r : read_csv(file(kiln::profiler::kApiStatisticFile))) calls[r["api"]] = std::stoll(r["calls"]);
  EXPECT_EQ(calls["kilnmdlExecuteAsync"], kLoops);
  EXPECT_EQ(calls["kilnrtMemcpy"], 3);
  EXPECT_EQ(calls["kilnrtSynchronizeStream"], 2);
  EXPECT_EQ(calls["kilnrtRecordEvent"], 1);
}

TEST_F(ProfiledRun, DiffWithItselfReportsNoChange) {
  auto a = kiln::profiler::read_profile_dir(*dir_);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  kiln::profiler::ProfileDiff d = kiln::profiler::diff_profiles(*a, *a);
  EXPECT_TRUE(d.unchanged());
  EXPECT_GT(d.before_us, 0);
  EXPECT_NE(kiln::profiler::format_diff(d, *dir_, *dir_, 10).find("no change"), std::string::npos);
}

TEST_F(ProfiledRun, DiffPutsTheLargestRegressionFirst) {
  // A copy of the profile where one node's every call takes 1 ms longer.
  std::string slow = temp_dir() + "/slow_profile";
  fs::create_directories(slow);
  fs::copy_file(file(kiln::profiler::kTimelineFile), slow + "/timeline.json", fs::copy_options::overwrite_existing);
  auto rows = read_csv(file(kiln::profiler::kOpSummaryFile));
  ASSERT_FALSE(rows.empty());
  std::string victim = rows[0]["op name"];
  std::ofstream out(slow + "/op_summary.csv");
  for (size_t i = 0; i < kiln::profiler::kOpSummaryColumns.size(); ++i)
    out << (i ? "," : "") << kiln::profiler::kOpSummaryColumns[i];
  out << "\n";
  for (auto& r : rows) {
    double us = std::stod(r["duration us"]) + (r["op name"] == victim ? 1000.0 : 0.0);
    for (size_t i = 0; i < kiln::profiler::kOpSummaryColumns.size(); ++i) {
      const std::string& col = kiln::profiler::kOpSummaryColumns[i];
      std::string v = col == "duration us" ? std::to_string(us) : r[col];
      if (v.find_first_of(",\"") != std::string::npos) v = "\"" + v + "\"";  // no quotes in these names
      out << (i ? "," : "") << v;
    }
    out << "\n";
  }
  out.close();
  auto base = kiln::profiler::read_profile_dir(*dir_);
  auto next = kiln::profiler::read_profile_dir(slow);
  ASSERT_TRUE(base.ok() && next.ok()) << base.status().to_string() << next.status().to_string();
  kiln::profiler::ProfileDiff d = kiln::profiler::diff_profiles(*base, *next);
  EXPECT_FALSE(d.unchanged());
  ASSERT_FALSE(d.nodes.empty());
  EXPECT_EQ(d.nodes.front().name, rows[0]["model"] + "/" + victim);
  EXPECT_NEAR(d.nodes.front().delta_us(), 1000.0, 1e-3);
  EXPECT_EQ(d.op_types.front().name, rows[0]["op type"]);
  EXPECT_NEAR(d.after_us - d.before_us, 1000.0, 1e-3);
  for (size_t i = 1; i < d.nodes.size(); ++i) EXPECT_NEAR(d.nodes[i].delta_us(), 0.0, 1e-3);
}

TEST(ProfileDir, MissingOrGarbledDirectoryIsAnError) {
  auto missing = kiln::profiler::read_profile_dir(temp_dir() + "/no_such_profile");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().to_string().find("no_such_profile"), std::string::npos);

  std::string garbled = temp_dir() + "/garbled_profile";
  fs::create_directories(garbled);
  std::ofstream(garbled + "/timeline.json") << "{";
  std::ofstream(garbled + "/op_summary.csv") << "\x01\x02 not a csv\n";
  auto g = kiln::profiler::read_profile_dir(garbled);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().to_string().find("op_summary.csv"), std::string::npos) << g.status().to_string();

  // A right header and a row with a duration that is not a number.
  std::ofstream bad(garbled + "/op_summary.csv");
  for (size_t i = 0; i < kiln::profiler::kOpSummaryColumns.size(); ++i)
    bad << (i ? "," : "") << kiln::profiler::kOpSummaryColumns[i];
  bad << "\nm,n,Relu,reference,s,1.0,abc,,,,,,,,,\n";
  bad.close();
  auto n = kiln::profiler::read_profile_dir(garbled);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().to_string().find("line 2"), std::string::npos) << n.status().to_string();
}

TEST(Recorder, ConcurrentWritersLoseNothing) {
  std::string dir = temp_dir() + "/threads_profile";
  ASSERT_TRUE(kiln::profiler::init_session(dir).ok());
  ASSERT_TRUE(kiln::profiler::start_session().ok());
  constexpr int kThreads = 4, kPerThread = 1000;  // several chunks per thread
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i) kiln::profiler::record_api("test_call", kiln::profiler::now_ns());
    });
  go = true;
  // Reading while they write sees a prefix of each thread's records, never a torn one.
  for (int i = 0; i < 20; ++i) {
    kiln::profiler::Profile p = kiln::profiler::collect(false);
    for (const auto& r : p.records) ASSERT_EQ(r.name, "test_call");
  }
  for (auto& t : threads) t.join();
  kiln::profiler::Profile p = kiln::profiler::collect(false);
  size_t n = 0;
  std::set<int> tracks;
  for (const auto& r : p.records)
    if (r.name == "test_call") {
      ++n;
      tracks.insert(r.track);
    }
  EXPECT_EQ(n, static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(tracks.size(), static_cast<size_t>(kThreads)) << "one host track per thread";
  ASSERT_TRUE(kiln::profiler::finalize_session().ok());
  auto stats = read_csv(dir + "/api_statistic.csv");
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(std::stoll(stats[0]["calls"]), kThreads * kPerThread);
  // Finalize dropped the records: a new session starts empty.
  ASSERT_TRUE(kiln::profiler::init_session(dir).ok());
  EXPECT_TRUE(kiln::profiler::collect(false).records.empty());
  ASSERT_TRUE(kiln::profiler::finalize_session().ok());
}

TEST(Recorder, OffRecordsNothing) {
  EXPECT_FALSE(kiln::profiler::enabled());
  std::string dir = temp_dir() + "/off_profile";
  ASSERT_TRUE(kiln::profiler::init_session(dir).ok());
  { KILN_PROFILE_API("not_started"); }
  ASSERT_TRUE(kiln::profiler::start_session().ok());
  { KILN_PROFILE_API("started"); }
  ASSERT_TRUE(kiln::profiler::stop_session().ok());
  { KILN_PROFILE_API("stopped"); }
  kiln::profiler::Profile p = kiln::profiler::collect(false);
  ASSERT_EQ(p.records.size(), 1u);
  EXPECT_EQ(p.records[0].name, "started");
  ASSERT_TRUE(kiln::profiler::finalize_session().ok());
}

TEST(ProfilerApi, ErrorsKeepAscendClCodes) {
  EXPECT_EQ(kilnprofStart(), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnprofStop(), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnprofFinalize(), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnprofInit(nullptr, 3), KILN_ERROR_INVALID_PARAM);
  std::string dir = temp_dir() + "/api_profile";
  EXPECT_EQ(kilnprofInit(dir.c_str(), dir.size() + 5), KILN_ERROR_INVALID_PARAM);
  // A directory below a regular file cannot be made.
  std::string file = temp_dir() + "/plain_file";
  std::ofstream(file) << "x";
  std::string under = file + "/sub";
  EXPECT_EQ(kilnprofInit(under.c_str(), under.size()), KILN_ERROR_INVALID_PARAM);
  EXPECT_NE(std::string(kilnGetRecentErrMsg()).find("plain_file"), std::string::npos) << kilnGetRecentErrMsg();
  ASSERT_EQ(kilnprofInit(dir.c_str(), dir.size()), KILN_SUCCESS);
  EXPECT_EQ(kilnprofInit(dir.c_str(), dir.size()), KILN_ERROR_REPEAT_INITIALIZE);
  ASSERT_EQ(kilnprofStart(), KILN_SUCCESS);
  ASSERT_EQ(kilnprofFinalize(), KILN_SUCCESS);
  for (const char* f : {"timeline.json", "op_summary.csv", "op_statistic.csv", "api_statistic.csv"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
}

// ResNet-50 as the e2e tests build it (build/release/e2e/models), when present: the
// per-stream op order of one profiled execution is the compiled model's order.
TEST(ProfiledResNet50, OpOrderIsTheExecutionOrder) {
  fs::path exe = fs::read_symlink("/proc/self/exe");
  fs::path onnx_path = exe.parent_path().parent_path().parent_path() / "e2e/models/resnet50/model.onnx";
  if (!fs::exists(onnx_path)) GTEST_SKIP() << onnx_path << " not built";
  kiln::compiler::CompileOptions options;
  options.input_shapes["input"] = {1, 3, 224, 224};  // the batch dim is symbolic in the file
  auto compiled = kiln::compiler::compile_onnx_file(onnx_path.string(), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  std::string kiln_path = temp_dir() + "/resnet50.kiln";
  ASSERT_TRUE(kiln::compiler::write_compiled_model(*compiled, kiln_path).ok());
  std::string dir = temp_dir() + "/resnet50_profile";
  profile_model(kiln_path, dir, 1);
  std::vector<std::string> order = execution_order(kiln_path);
  json trace = read_json(dir + "/timeline.json");
  ASSERT_FALSE(trace.is_discarded());
  std::vector<std::pair<double, std::string>> ops;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e.value("cat", "") == "op") ops.emplace_back(e["ts"].get<double>(), e["name"]);
  std::stable_sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<std::string> got;
  for (auto& [ts, name] : ops) got.push_back(name);
  EXPECT_EQ(got, order);
  EXPECT_GT(order.size(), 50u);
}

}  // namespace
