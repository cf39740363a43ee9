// `kiln dsl`: an example operator of the DSL (docs/dsl.md) lowered and printed as loop IR or
// as the C++ it compiles to, and optionally built and timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/examples.h"
#include "dsl/tuning.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct DslArgs {
  std::string example = "layernorm";
  std::string shape = "8,768";
  std::string schedule = "default";
  std::string emit = "ir";
  std::string tuning_db;  // --schedule tuned
  bool symbolic = false;
  int time = 0;
};

int run_dsl(const DslArgs& args) {
  int64_t rows = 0, cols = 0;
  char comma = 0;
  std::istringstream in(args.shape);
  if (!(in >> rows >> comma >> cols) || comma != ',' || rows < 1 || cols < 1 || in.peek() != EOF)
    return usage_error("dsl", "--shape takes ROWS,COLS (two integers >= 1), not '" + args.shape + "'");
  dsl::Expr r = args.symbolic ? dsl::var("rows") : dsl::Expr(rows);
  dsl::Expr c = args.symbolic ? dsl::var("cols") : dsl::Expr(cols);
  auto ex = dsl::make_example(args.example, r, c);
  if (!ex.ok()) return usage_error("dsl", ex.status().message());
  dsl::Schedule s({ex->output});
  if (args.schedule == "hand") ex->tuned_schedule(s, *ex);
  if (args.schedule == "tuned") {
    // The knobs `kiln tune` recorded for this op, shape and CPU.
    if (args.tuning_db.empty()) return usage_error("dsl", "--schedule tuned needs --tuning-db FILE");
    if (args.symbolic) return usage_error("dsl", "--schedule tuned is per shape: not with --symbolic");
    auto db = dsl::read_tuning_db(args.tuning_db);
    if (!db.ok()) return report_error("dsl", db.status().to_string());
    const dsl::TuningEntry* e = dsl::find_tuning_entry(*db, ex->name, rows, cols, dsl::tuning_target());
    if (!e)
      return report_error("dsl", "tuning database " + args.tuning_db + " has no entry for " + ex->name + " [" +
                                     std::to_string(rows) + ", " + std::to_string(cols) + "] on " +
                                     dsl::tuning_target() + ": run kiln tune --op " + ex->name + " first");
    dsl::apply_knobs(s, *ex, e->knobs);
  }
  dsl::auto_schedule(s);
  auto f = dsl::lower(s, ex->args, ex->name);
  if (!f.ok()) return report_error("dsl", f.status().to_string());
  if (args.emit == "ir") std::printf("%s", dsl::to_string(*f).c_str());
  if (args.emit == "c") std::printf("%s", dsl::codegen_c(*f).code.c_str());
  if (args.time <= 0) return 0;

  auto k = dsl::build(*f);
  if (!k.ok()) return report_error("dsl", k.status().to_string());
  std::vector<std::vector<float>> data;
  std::vector<float*> bufs;
  for (const dsl::Tensor& t : ex->args) {
    size_t n = t->shape.size() == 2 ? rows * cols : cols;
    data.emplace_back(n, 0.5f);
    bufs.push_back(data.back().data());
  }
  std::vector<int64_t> dims;
  if (args.symbolic) dims = {rows, cols};
  std::vector<double> us;
  for (int i = 0; i < args.time + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Status st = (*k)->run(bufs, dims);
    if (!st.ok()) return report_error("dsl", st.to_string());
    if (i >= 3) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%s [%lld, %lld], %s schedule: %.2f us per call (median of %d), %s %s\n", ex->name.c_str(),
              static_cast<long long>(rows), static_cast<long long>(cols), args.schedule.c_str(), us[us.size() / 2],
              args.time, (*k)->from_cache() ? "cached" : "compiled to", (*k)->library_path().c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<DslArgs>();
  app.add_option("--example", args->example, "The operator: layernorm, softmax, gelu_bias_add")
      ->check(CLI::IsMember({"layernorm", "softmax", "gelu_bias_add"}));
  app.add_option("--shape", args->shape, "ROWS,COLS of its input (default 8,768)");
  app.add_option("--schedule", args->schedule,
                 "default (automatic), hand, or tuned (the knobs kiln tune recorded in --tuning-db)")
      ->check(CLI::IsMember({"default", "hand", "tuned"}));
  app.add_option("--tuning-db", args->tuning_db, "Tuning database of kiln tune, for --schedule tuned");
  app.add_option("--emit", args->emit, "What to print: ir (lowered loops), c (generated C++), none")
      ->check(CLI::IsMember({"ir", "c", "none"}));
  app.add_flag("--symbolic", args->symbolic, "Keep rows and cols symbolic (bound when the kernel runs)");
  app.add_option("--time", args->time, "Build the kernel and time N calls (median)")->check(CLI::NonNegativeNumber);
  return [args] { return run_dsl(*args); };
}

KILN_REGISTER_SUBCOMMAND("dsl", "Lower, print, build and time an example operator of the DSL", setup);

}  // namespace
}  // namespace kiln::tools
