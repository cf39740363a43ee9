// What the recorder keeps and the writers read: tracks and records, and a snapshot of
// the records of a session (collect()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::profiler {

enum class RecordKind : uint8_t { kApi, kTask, kOp, kCopy, kCompile, kFlowStart, kFlowEnd };

// One Chrome-trace thread: a host thread (pid 0, "host") or an engine of a device stream
// (pid 1 + device id).
struct Track {
  int pid = 0;
  int tid = 0;
  std::string process_name;  // "host", "cpu:0"
  std::string thread_name;   // "host thread 1", "stream 1 compute"
  int cores = 0;             // cores the device computes with (0: unknown)
};

// What an op record adds (shapes etc. joined with ';', one entry per input or output).
struct OpDetail {
  std::string model;
  std::string op_type;
  std::string implementation;
  std::string input_shapes, input_dtypes, input_formats;
  std::string output_shapes, output_dtypes, output_formats;
  double flops = -1;  // -1: unknown
  double bytes = -1;
};

struct Record {
  RecordKind kind = RecordKind::kApi;
  int track = 0;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  std::string name;  // API name, task label, node name, copy direction, pass name
  uint64_t bytes = 0;        // copies
  uint64_t flow = 0;         // flow start/end
  std::shared_ptr<const OpDetail> op;  // ops
};

// A snapshot of a session: every track known, the records (in no particular order), the
// session's time origin, and the peak GFLOP/s of one core (for "% of peak").
struct Profile {
  std::vector<Track> tracks;
  std::vector<Record> records;
  int64_t origin_ns = 0;
  double peak_gflops_per_core = 0;
};

// The records published since the session began (since the last consume=true collect).
Profile collect(bool consume);

// Appends an op record (record_op builds the detail) on the calling thread.
void record_op_detail(std::string node_name, std::shared_ptr<const OpDetail> detail,
                      int64_t start_ns);

// Peak fp32 GFLOP/s of one core: KILN_PEAK_GFLOPS_PER_CORE, or FLOP/cycle of the widest
// vector unit (FMA) times the maximum clock.
double peak_gflops_per_core();

}  // namespace kiln::profiler
