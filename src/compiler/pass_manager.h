// The pass manager: named graph passes, each with a minimum -O level, run in a fixed
// pipeline order with per-pass records (what changed, how long) for the compile report.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::compiler {

// What one pass did in one compile.
struct PassRecord {
  std::string name;
  int changed = 0;  // rewrites, removed nodes, folded constants: the pass's own unit
  double ms = 0;
  std::vector<std::string> notes;
  // Fusion pattern name -> how many times this pass applied it (the report's "fusions").
  std::map<std::string, int> fusions;
};

// The compute precision of convolutions and matrix products (kiln compile --precision;
// precision_assignment.cc has the rules).
enum class Precision { kFp32, kBf16, kMixed };
const char* precision_name(Precision p);  // "fp32", "bf16", "mixed"
std::optional<Precision> precision_from_name(const std::string& name);

struct PassOptions {
  int opt_level = 3;                 // 0..3, as -O0..-O3
  std::set<std::string> disabled;    // pass names; required passes cannot be disabled
  // Channels per block of the NC1HWC0 layout layout_assignment uses: 0 picks the compiling
  // CPU's (16 with AVX-512, else 8).
  int channel_block = 0;
  Precision precision = Precision::kFp32;
  // Node names, output names or op types whose convolutions / products stay float32.
  std::vector<std::string> keep_dtype;
  // mixed: keep convolutions fp32 where the CPU's bf16 route is estimated slower
  // (precision_assignment.cc, bf16_pays). Off in tests that check the rules alone.
  bool precision_cost_model = true;
  // Run ir::verify after every pass. On in debug builds and with KILN_VERIFY_PASSES=1.
  bool verify_each_pass = default_verify_each_pass();
  static bool default_verify_each_pass();
};

// Handed to every pass: the options, and the record of the pass being run.
class PassContext {
 public:
  explicit PassContext(PassOptions options = {}) : options_(std::move(options)) {}
  const PassOptions& options() const { return options_; }
  int opt_level() const { return options_.opt_level; }

  // Counts rewrites of the running pass.
  void add_changed(int n) { current().changed += n; }
  void note(std::string text) { current().notes.push_back(std::move(text)); }
  // Records one application of a fusion pattern (e.g. "Conv+Add+Relu") and counts it as a
  // change of the running pass.
  void count_fusion(const std::string& pattern, int n = 1) {
    current().fusions[pattern] += n;
    current().changed += n;
  }
  const std::vector<PassRecord>& records() const { return records_; }

  // Used by the pass manager.
  void begin_pass(const std::string& name);
  PassRecord& current();

 private:
  PassOptions options_;
  std::vector<PassRecord> records_;
  PassRecord scratch_;  // target of add_changed/note outside a managed pass (passes run directly)
};

using PassFn = std::function<Status(ir::Graph&, PassContext&)>;

struct PassInfo {
  std::string name;
  int min_level = 1;      // runs when opt_level >= min_level
  bool required = false;  // correctness needs it: runs at every level and cannot be switched off
  std::string description;
  PassFn run;
};

// The passes in pipeline order. The built-in passes are registered on first use.
class PassRegistry {
 public:
  static PassRegistry& instance();
  // Appends a pass to the pipeline; names must be unique.
  Status add(PassInfo info);
  const PassInfo* find(const std::string& name) const;
  const std::vector<PassInfo>& passes() const { return passes_; }
  // "a, b, c": for error messages.
  std::string names() const;

 private:
  std::vector<PassInfo> passes_;
};

// Whether `info` runs under `options` (level, disabled set, required flag).
bool pass_enabled(const PassInfo& info, const PassOptions& options);

// Checks that every name in options.disabled is a registered pass and not required.
Status validate_pass_options(const PassOptions& options);

// Runs the enabled passes in order, recording each one in ctx. With verify_each_pass,
// a graph the IR verifier rejects names the pass that broke it.
Status run_passes(ir::Graph& graph, PassContext& ctx);
// Same with a pipeline of one's own (tests, tools building custom pipelines).
Status run_passes(ir::Graph& graph, PassContext& ctx, const PassRegistry& registry);

// Parses an ATC-style fusion switch file into pass names to disable. Two forms:
//   text: one `PassName:off` (or `:on`) per line, '#' starts a comment;
//   JSON: {"Switch":{"GraphFusion":{"NAME":"off","ALL":"off"},"UBFusion":{...}}}.
// "ALL":"off" switches off every pass that is not required (required passes keep running);
// a named "on" after it switches that pass back on. Unknown pass names are errors.
Expected<std::set<std::string>> parse_fusion_switch_file(const std::string& path);
Expected<std::set<std::string>> parse_fusion_switch_text(const std::string& text,
                                                         const std::string& source_name);

// `kiln compile --keep-dtype SPEC`: the nodes / op types that stay float32 (PassOptions::
// keep_dtype). SPEC is a comma-separated list ("fc,Gemm"), or the path of a file with one
// entry per line ('#' starts a comment), each optionally written as ATC's keep_dtype file
// writes it: "OpName:name" or "OpType:type". Empty entries are errors.
Expected<std::vector<std::string>> parse_keep_dtype(const std::string& spec);

}  // namespace kiln::compiler
