// `kiln tune --op NAME --shape ROWS,COLS`: searches the schedule knobs of a DSL example operator
// (dsl/tuning.h) by measurement, at random with a seed, bounded by --trials and --time, and
// records the best in a JSON tuning database (docs/dsl.md, "Tuning"). `kiln tune MODEL --db DB`
// does the same for each distinct DSL kernel of a model (its custom ops), for kiln compile
// --tuning-db.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/examples.h"
#include "compiler/custom_op_plugin.h"
#include "dsl/tuning.h"
#include "kernels/cpu/dsl_elementwise.h"
#include "tools/dsl_tuning.h"
#include "tools/model_source.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct TuneArgs {
  std::string model;
  std::vector<std::string> custom_ops;
  std::string op;
  std::string shape = "128,768";
  int trials = 16;
  double time_s = 0;  // 0: no limit
  uint64_t seed = 0;
  int reps = 21;
  std::string db;
};

// The fastest of `reps` calls of the schedule built by `schedule` (the minimum: the call least
// disturbed by other work on the machine), or an error (illegal schedule, build failure).
Expected<double> measure(const std::string& op, int64_t rows, int64_t cols,
                         const std::function<void(dsl::Schedule&, const dsl::Example&)>& schedule, int reps) {
  KILN_ASSIGN_OR_RETURN(dsl::Example ex, dsl::make_example(op, dsl::Expr(rows), dsl::Expr(cols)));
  dsl::Schedule s({ex.output});
  schedule(s, ex);
  dsl::auto_schedule(s);
  KILN_ASSIGN_OR_RETURN(dsl::LoweredFunc f, dsl::lower(s, ex.args, ex.name));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<dsl::Kernel> k, dsl::build(f));
  std::vector<std::vector<float>> data;
  std::vector<float*> bufs;
  for (const dsl::Tensor& t : ex.args) {
    const size_t n = t->shape.size() == 2 ? static_cast<size_t>(rows * cols) : static_cast<size_t>(cols);
    data.emplace_back(n);
    for (size_t i = 0; i < n; ++i) data.back()[i] = static_cast<float>((i * 7919) % 997) / 997.0f - 0.5f;
    bufs.push_back(data.back().data());
  }
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(k->run(bufs, {}));
    if (i >= 3) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(us.begin(), us.end());
}

// The time of one run of a DSL-kernel node's kernel scheduled with `split`: its kernel called
// once per tile of kDslTileElements over the node's elements, as FusedElementwise runs it (on
// one thread), the fastest of `reps` runs.
Expected<double> measure_tile_kernel(const DslKernelNode& d, int64_t split, int reps) {
  KILN_ASSIGN_OR_RETURN(kernels::DslTileKernel k, kernels::dsl_tile_kernel(d.expr, d.num_inputs, split));
  const int64_t tile = kernels::kDslTileElements;
  const int64_t tiles = std::max<int64_t>(1, (d.elements + tile - 1) / tile);
  std::vector<std::vector<float>> data(static_cast<size_t>(d.num_inputs) + 1, std::vector<float>(tile));
  std::vector<float*> bufs;
  for (auto& v : data) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919 + bufs.size()) % 997) / 250.0f - 2.0f;
    bufs.push_back(v.data());
  }
  std::vector<double> us;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < tiles; ++t) k.fn(bufs.data(), &tile);
    if (r > 0) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(us.begin(), us.end());
}

// kiln tune MODEL: each distinct DSL kernel (signature) of the model once, at the size of its
// first node, over the split factors of its vectorised loop in a seeded random order (the
// default, unsplit, first), bounded by --trials per kernel and --time overall.
int run_tune_model(const TuneArgs& args, std::vector<dsl::TuningEntry>& db) {
  for (const std::string& plugin : args.custom_ops) {
    auto ops = compiler::load_custom_op_plugin(plugin);
    if (!ops.ok()) return report_error("tune", ops.status().to_string());
  }
  auto opened = open_model(args.model);
  if (!opened.ok()) return report_error("tune", opened.status().to_string());
  auto nodes = find_dsl_kernel_nodes(*opened->graph);
  if (!nodes.ok()) return report_error("tune", nodes.status().to_string());
  std::vector<const DslKernelNode*> distinct;
  std::map<std::string, int> uses;
  for (const DslKernelNode& d : *nodes)
    if (uses[d.signature]++ == 0) distinct.push_back(&d);
  std::printf("%s: %zu DSL kernel node(s), %zu distinct kernel(s) on %s\n", args.model.c_str(), nodes->size(),
              distinct.size(), dsl::tuning_target().c_str());
  if (distinct.empty()) {
    std::printf("nothing to tune (no custom op runs as a DSL kernel: see docs/dsl.md)\n");
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::mt19937_64 rng(args.seed);
  for (size_t i = 0; i < distinct.size(); ++i) {
    const DslKernelNode& d = *distinct[i];
    std::vector<int64_t> splits = {16, 32, 64, 128, 256, 512};
    std::shuffle(splits.begin(), splits.end(), rng);
    splits.insert(splits.begin(), 0);
    const size_t trials = std::min(splits.size(), static_cast<size_t>(args.trials));
    std::printf("[%zu/%zu] %s (%d node(s), e.g. %s, %lld elements)\n", i + 1, distinct.size(), d.signature.c_str(),
                uses[d.signature], d.label.c_str(), static_cast<long long>(d.elements));
    double best = 0, def = 0;
    int64_t best_split = 0;
    int measured = 0;
    for (size_t t = 0; t < trials; ++t) {
      if (args.time_s > 0 && elapsed_s() > args.time_s) {
        std::printf("  time limit reached\n");
        break;
      }
      auto us = measure_tile_kernel(d, splits[t], args.reps);
      if (!us.ok()) return report_error("tune", us.status().to_string());
      std::printf("  trial %zu: dsl_split=%lld: %.2f us\n", t + 1, static_cast<long long>(splits[t]), *us);
      if (t == 0) def = *us;
      if (measured++ == 0 || *us < best) {
        best = *us;
        best_split = splits[t];
      }
    }
    if (measured == 0) break;
    std::printf("  best: dsl_split=%lld: %.2f us, %.2fx the default schedule's time\n",
                static_cast<long long>(best_split), best, best / def);
    dsl::TuningEntry e;
    e.op = d.signature;
    e.rows = 1;
    e.cols = kernels::kDslTileElements;
    e.target = dsl::tuning_target();
    e.knobs.col_split = best_split;
    e.us = best;
    e.default_us = def;
    e.trials = measured;
    e.seed = args.seed;
    auto it = std::find_if(db.begin(), db.end(), [&](const dsl::TuningEntry& x) {
      return x.op == e.op && x.rows == e.rows && x.cols == e.cols && x.target == e.target;
    });
    if (it == db.end()) db.push_back(e); else *it = e;
  }
  Status w = dsl::write_tuning_db(args.db, db);
  if (!w.ok()) return report_error("tune", w.to_string());
  std::printf("recorded in %s (kiln compile --tuning-db %s applies it)\n", args.db.c_str(), args.db.c_str());
  return 0;
}

int run_tune(const TuneArgs& args) {
  if (!args.model.empty() && !args.op.empty()) return usage_error("tune", "give a MODEL or --op NAME, not both");
  if (!args.model.empty() && args.db.empty()) return usage_error("tune", "tuning a MODEL needs --db FILE to record in");
  if (args.model.empty() && args.op.empty())
    return usage_error("tune", "give a MODEL (.onnx or .kiln) or --op NAME (layernorm, softmax, gelu_bias_add)");
  int64_t rows = 0, cols = 0;
  char comma = 0;
  std::istringstream in(args.shape);
  if (!(in >> rows >> comma >> cols) || comma != ',' || rows < 1 || cols < 1 || in.peek() != EOF)
    return usage_error("tune", "--shape takes ROWS,COLS (two integers >= 1), not '" + args.shape + "'");
  std::vector<dsl::TuningEntry> db;
  if (!args.db.empty()) {
    auto read = dsl::read_tuning_db(args.db);
    if (!read.ok()) return report_error("tune", read.status().to_string());
    db = std::move(*read);
  }
  if (!args.model.empty()) return run_tune_model(args, db);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  // 1. The baselines: the default schedule and the hand schedule of the example.
  auto def = measure(args.op, rows, cols, [](dsl::Schedule&, const dsl::Example&) {}, args.reps);
  if (!def.ok()) return report_error("tune", def.status().to_string());
  auto hand = measure(
      args.op, rows, cols, [](dsl::Schedule& s, const dsl::Example& e) { e.tuned_schedule(s, e); }, args.reps);
  char hand_text[64];
  if (hand.ok()) std::snprintf(hand_text, sizeof hand_text, "%.2f us", *hand);
  std::printf("%s [%lld, %lld] on %s: default schedule %.2f us, hand schedule %s\n", args.op.c_str(),
              static_cast<long long>(rows), static_cast<long long>(cols), dsl::tuning_target().c_str(), *def,
              hand.ok() ? hand_text : hand.status().to_string().c_str());

  // 2. Random search without repetition over the knob space, in an order fixed by the seed,
  //    starting from the hand schedule's knobs.
  std::vector<dsl::ScheduleKnobs> space = dsl::knob_space();
  std::mt19937_64 rng(args.seed);
  std::shuffle(space.begin(), space.end(), rng);
  const dsl::ScheduleKnobs hand_point = dsl::hand_knobs(args.op);
  space.erase(std::remove(space.begin(), space.end(), hand_point), space.end());
  space.insert(space.begin(), hand_point);
  const size_t trials = std::min(space.size(), static_cast<size_t>(args.trials));
  dsl::ScheduleKnobs best_knobs;
  double best = 0;
  int measured = 0;
  for (size_t t = 0; t < trials; ++t) {
    if (args.time_s > 0 && elapsed_s() > args.time_s) {
      std::printf("time limit reached after %zu trials\n", t);
      break;
    }
    const dsl::ScheduleKnobs& k = space[t];
    auto us = measure(
        args.op, rows, cols, [&](dsl::Schedule& s, const dsl::Example& e) { dsl::apply_knobs(s, e, k); }, args.reps);
    if (!us.ok()) {
      std::printf("trial %zu: %s: refused: %s\n", t + 1, dsl::knobs_text(k).c_str(), us.status().message().c_str());
      continue;
    }
    ++measured;
    std::printf("trial %zu: %s: %.2f us\n", t + 1, dsl::knobs_text(k).c_str(), *us);
    if (measured == 1 || *us < best) {
      best = *us;
      best_knobs = k;
    }
  }
  if (measured == 0) return report_error("tune", "no trial could be measured");
  std::printf("best: %s: %.2f us, %.2fx the default schedule's time (%d trials, seed %llu)\n",
              dsl::knobs_text(best_knobs).c_str(), best, best / *def, measured,
              static_cast<unsigned long long>(args.seed));

  // 3. The database keeps one entry per (op, shape, target): the faster of the old and the new.
  if (args.db.empty()) return 0;
  dsl::TuningEntry e{args.op, rows, cols, dsl::tuning_target(), best_knobs, best, *def, measured, args.seed};
  auto it = std::find_if(db.begin(), db.end(), [&](const dsl::TuningEntry& x) {
    return x.op == e.op && x.rows == e.rows && x.cols == e.cols && x.target == e.target;
  });
  if (it == db.end()) {
    db.push_back(e);
  } else {
    *it = e;
  }
  Status w = dsl::write_tuning_db(args.db, db);
  if (!w.ok()) return report_error("tune", w.to_string());
  std::printf("recorded in %s\n", args.db.c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  app.add_option("model", args->model, "A model (.onnx or .kiln) whose DSL kernels (custom ops) to tune into --db");
  app.add_option("--custom-ops", args->custom_ops, "Custom-op plugin an .onnx MODEL needs (as kiln compile's)");
  app.add_option("--op", args->op, "The DSL operator to tune: layernorm, softmax, gelu_bias_add")
      ->check(CLI::IsMember({"layernorm", "softmax", "gelu_bias_add"}));
  app.add_option("--shape", args->shape, "ROWS,COLS of its input (default 128,768)");
  app.add_option("--trials", args->trials, "Schedules to measure at most (default 16; the space has 150)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--time", args->time_s, "Stop starting trials after this many seconds (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", args->seed, "Seed of the random order of the trials (default 0)");
  app.add_option("--reps", args->reps, "Timed calls per schedule, the fastest taken (default 21)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--db", args->db, "Tuning database (JSON) to record the best schedule in (created if missing)");
  return [args] { return run_tune(*args); };
}

KILN_REGISTER_SUBCOMMAND("tune", "Tune the schedule of a DSL operator by measurement into a tuning database", setup);

}  // namespace
}  // namespace kiln::tools
