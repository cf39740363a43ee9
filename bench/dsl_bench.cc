// The DSL's LayerNorm, Softmax and GELU-bias-add (src/dsl/examples.cc), default schedule and
// hand schedule, against Kiln's hand-written SIMD kernels (src/kernels/cpu) and the reference
// kernels, at BERT-base shapes (issue 31). Rounds alternate between the contenders; each
// prints the median time of a call and its ratio to the hand-written kernel.
//
//   dsl_bench [--reps N] [--tuning-db DB.json]
//
// "dsl tuned" is the schedule kiln tune --op recorded in DB for the shape and this machine (see
// bench/dsl_tuned.sh, which tunes and then runs this); the DSL kernels are built at the static
// shapes kiln tune measured them at; the cache folder is
// KILN_DSL_CACHE_DIR (docs/dsl.md). Kiln's kernels run through ops::KernelContext, which
// allocates their output per call, as in a model run without a memory plan.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/examples.h"
#include "dsl/tuning.h"
#include "ir/graph.h"
#include "kernels/cpu/gelu.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;
using Dims = std::vector<int64_t>;

struct Contender {
  std::string name;
  std::function<void()> fn;
  std::vector<double> us;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Alternated rounds: each contender runs `inner` calls per round; the time of a call is the
// round's time / inner.
void race(const char* title, std::vector<Contender>& cs, int rounds, int inner) {
  for (auto& c : cs)
    for (int i = 0; i < 3; ++i) c.fn();  // warm up (first-touch, OpenMP pools)
  for (int r = 0; r < rounds; ++r)
    for (auto& c : cs) {
      // One untimed call first: the contender before (the reference kernel, which allocates and
      // writes a fresh output per call) leaves the caches cold, which made whichever ran after
      // it (the default schedule) read up to 1.2x slower than the same code elsewhere in the round.
      c.fn();
      auto t0 = Clock::now();
      for (int i = 0; i < inner; ++i) c.fn();
      c.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / inner);
    }
  double hand = 0;
  for (auto& c : cs)
    if (c.name == "kiln simd kernel") hand = median(c.us);
  std::printf("%s\n", title);
  for (auto& c : cs) {
    double m = median(c.us);
    std::printf("  %-24s %10.2f us   %6.2fx the hand-written kernel's time\n", c.name.c_str(), m,
                hand > 0 ? m / hand : 0.0);
  }
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  std::generate(v.begin(), v.end(), [&] { return d(rng); });
  return v;
}

Tensor as_tensor(const std::vector<float>& v, const Dims& dims) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

// One node of `op` over float inputs of `dims`, with its prepared SIMD kernel and reference.
struct OneNode {
  std::shared_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  std::unique_ptr<kernels::Kernel> kernel;
  std::vector<RuntimeValue> values;
  std::vector<const RuntimeValue*> ptrs;
  ops::KernelFn reference;

  OneNode(const std::string& op, const std::string& domain, int opset, const std::vector<Dims>& dims,
          const std::vector<std::vector<float>>& data,
          const std::function<void(ir::Node&)>& attrs) {
    graph = std::make_shared<ir::Graph>("g");
    graph->opset_imports()[""] = 17;
    graph->opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
    std::vector<ir::Value*> ins;
    for (size_t i = 0; i < dims.size(); ++i) {
      ir::Value* v = graph->get_or_add_value("in" + std::to_string(i));
      v->type() = ir::TensorType{DataType::kFloat32, Shape::from_static(dims[i])};
      graph->inputs().push_back(v);
      ins.push_back(v);
      values.emplace_back(as_tensor(data[i], dims[i]));
    }
    ir::Value* y = graph->get_or_add_value("y");
    node = graph->add_node("n", op, domain, opset, ins, {y});
    attrs(*node);
    graph->outputs() = {y};
    if (Status st = ops::infer_node(*node); !st.ok()) fail(st);
    for (auto& v : values) ptrs.push_back(&v);
    for (const kernels::KernelFactory* f :
         kernels::KernelRegistry::instance().candidates(domain, op, kernels::DeviceKind::kCpu))
      if (f->name == "simd" && f->applicable(*node).ok()) {
        auto k = f->prepare(*node);
        if (!k.ok()) fail(k.status());
        kernel = std::move(*k);
      }
    if (!kernel) std::fprintf(stderr, "dsl_bench: no simd kernel for %s\n", op.c_str()), std::exit(1);
    auto schema = ops::schema_for(*node);
    if (!schema.ok()) fail(schema.status());
    reference = (*schema)->kernel_fn();
  }
  static void fail(const Status& st) {
    std::fprintf(stderr, "dsl_bench: %s\n", st.to_string().c_str());
    std::exit(1);
  }
  void run_kernel() {
    std::vector<RuntimeValue> out(1);
    ops::KernelContext ctx(*node, ptrs, &out);
    if (Status st = kernel->run(ctx); !st.ok()) fail(st);
  }
  void run_reference() {
    std::vector<RuntimeValue> out(1);
    ops::KernelContext ctx(*node, ptrs, &out);
    if (Status st = reference(ctx); !st.ok()) fail(st);
  }
};

// The example at a static shape (as kiln tune measures it) with the default schedule, or with the
// knobs the tuning database holds for (op, shape, this machine's target).
std::shared_ptr<dsl::Kernel> build(const std::string& op, int64_t rows, int64_t cols,
                                   const dsl::ScheduleKnobs* knobs) {
  auto e = dsl::make_example(op, dsl::Expr(rows), dsl::Expr(cols));
  if (!e.ok()) OneNode::fail(e.status());
  dsl::Schedule s({e->output});
  if (knobs) dsl::apply_knobs(s, *e, *knobs);
  dsl::auto_schedule(s);
  auto f = dsl::lower(s, e->args, e->name);
  if (!f.ok()) OneNode::fail(f.status());
  auto k = dsl::build(*f);
  if (!k.ok()) OneNode::fail(k.status());
  return *k;
}

struct Row {
  std::string op, shape;
  double hand = 0, ref = 0, dflt = 0, tuned = 0;
  std::string knobs = {};  // an initializer, so rows made of op and shape alone do not warn
};

// Adds the default and the tuned DSL kernels of `op` to the race (the tuned one only when the
// database has an entry for the shape).
void add_dsl(std::vector<Contender>& cs, const std::string& op, std::vector<float*> bufs, int64_t rows,
             int64_t cols, const std::vector<dsl::TuningEntry>& db, Row& row) {
  const dsl::TuningEntry* t = dsl::find_tuning_entry(db, op, rows, cols, dsl::tuning_target());
  row.knobs = t ? dsl::knobs_text(t->knobs) : "(no entry: run kiln tune --op " + op + ")";
  for (const dsl::ScheduleKnobs* k : {static_cast<const dsl::ScheduleKnobs*>(nullptr), t ? &t->knobs : nullptr}) {
    if (!k && !cs.empty() && cs.back().name == "dsl default") break;  // no entry: default only
    auto kernel = build(op, rows, cols, k);
    cs.push_back({k ? "dsl tuned" : "dsl default", [kernel, bufs] { kernel->entry()(bufs.data(), nullptr); }, {}});
  }
}

double median_of(const std::vector<Contender>& cs, const char* name) {
  for (const auto& c : cs)
    if (c.name == name) return median(c.us);
  return 0;
}

void fill(Row& row, const std::vector<Contender>& cs) {
  row.hand = median_of(cs, "kiln simd kernel");
  row.ref = median_of(cs, "kiln reference kernel");
  row.dflt = median_of(cs, "dsl default");
  row.tuned = median_of(cs, "dsl tuned");
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 31;
  std::string db_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reps") rounds = std::max(3, std::atoi(argv[++i]));
    else if (std::string(argv[i]) == "--tuning-db") db_path = argv[++i];
  }
  std::vector<dsl::TuningEntry> db;
  if (!db_path.empty()) {
    auto read = dsl::read_tuning_db(db_path);
    if (!read.ok()) OneNode::fail(read.status());
    db = std::move(*read);
  }
  std::vector<Row> rows;

  // LayerNorm over the last axis, BERT-base: one sequence of 128 tokens [128, 768] (X and Y fit
  // the core's 1 MB L2), and a batch of 8 [1024, 768] (they do not: each pass over X goes to L3).
  for (auto [r, c] : {std::pair<int64_t, int64_t>{128, 768}, {1024, 768}}) {
    auto x = random_floats(r * c, 1), g = random_floats(c, 2), b = random_floats(c, 3);
    std::vector<float> y(r * c);
    OneNode n("LayerNorm", ops::kKilnDomain, ops::kKilnOpset, {{r, c}, {c}, {c}}, {x, g, b}, [](ir::Node& nd) {
      nd.attrs()["axis"] = ir::Attribute::from_int(-1);
      nd.attrs()["epsilon"] = ir::Attribute::from_float(1e-5f);
    });
    std::vector<Contender> cs = {{"kiln simd kernel", [&] { n.run_kernel(); }, {}},
                                 {"kiln reference kernel", [&] { n.run_reference(); }, {}}};
    rows.push_back({"LayerNorm", std::to_string(r) + "x" + std::to_string(c)});
    add_dsl(cs, "layernorm", {x.data(), g.data(), b.data(), y.data()}, r, c, db, rows.back());
    race(("LayerNorm [" + rows.back().shape + "]").c_str(), cs, rounds, r > 128 ? 3 : 20);
    fill(rows.back(), cs);
  }
  // Softmax over the last axis: BERT-base attention scores [12, 128, 128] as 1536 rows, and
  // ResNet-50's classifier output [1, 1000].
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1536, 128}, {1, 1000}}) {
    auto x = random_floats(r * c, 4);
    std::vector<float> y(r * c);
    OneNode n("Softmax", ops::kOnnxDomain, 13, {{r, c}}, {x},
              [](ir::Node& nd) { nd.attrs()["axis"] = ir::Attribute::from_int(-1); });
    std::vector<Contender> cs = {{"kiln simd kernel", [&] { n.run_kernel(); }, {}},
                                 {"kiln reference kernel", [&] { n.run_reference(); }, {}}};
    rows.push_back({"Softmax", std::to_string(r) + "x" + std::to_string(c)});
    add_dsl(cs, "softmax", {x.data(), y.data()}, r, c, db, rows.back());
    race(("Softmax [" + rows.back().shape + "]").c_str(), cs, rounds, r > 1 ? 10 : 200);
    fill(rows.back(), cs);
  }
  // GELU(x + bias), an element-wise chain: BERT-base's feed-forward [128, 3072], and a ResNet-50
  // activation of stage 2 in channels-last order [56 * 56, 256] with a bias per channel. Kiln's
  // hand-written version is a bias loop + its SIMD Gelu; the reference a bias loop + the
  // reference Gelu kernel.
  for (auto [r, c] : {std::pair<int64_t, int64_t>{128, 3072}, {3136, 256}}) {
    auto x = random_floats(r * c, 5), b = random_floats(c, 6);
    std::vector<float> y(r * c), xb(r * c);
    OneNode gelu("Gelu", ops::kKilnDomain, ops::kKilnOpset, {{r, c}}, {x}, [](ir::Node&) {});
    auto bias = [&](float* dst) {
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) dst[i * c + j] = x[i * c + j] + b[j];
    };
    std::vector<Contender> cs = {{"kiln simd kernel", [&] {
                                    bias(y.data());
                                    kernels::gelu_in_place(y.data(), r * c, false);
                                  }, {}},
                                 {"kiln reference kernel", [&] {
                                    bias(static_cast<float*>(gelu.values[0].tensor().raw_data()));
                                    gelu.run_reference();
                                  }, {}}};
    rows.push_back({"GELU(x+b)", std::to_string(r) + "x" + std::to_string(c)});
    add_dsl(cs, "gelu_bias_add", {x.data(), b.data(), y.data()}, r, c, db, rows.back());
    race(("GELU(x + bias) [" + rows.back().shape + "]").c_str(), cs, rounds, 5);
    fill(rows.back(), cs);
  }

  // The acceptance table (issue 31): tuned within 1.2x of the hand-written kernel, >= 5x faster
  // than the reference, default within 2x, tuning >= 1.3x over the default on two operators.
  std::printf("\n%-10s %-9s %10s %10s %10s %10s %8s %8s %8s %8s\n", "op", "shape", "hand us", "ref us",
              "default us", "tuned us", "tun/hand", "ref/tun", "def/hand", "def/tun");
  for (const Row& w : rows) {
    std::printf("%-10s %-9s %10.2f %10.2f %10.2f %10.2f %8.2f %8.2f %8.2f %8.2f\n", w.op.c_str(), w.shape.c_str(),
                w.hand, w.ref, w.dflt, w.tuned, w.tuned / w.hand, w.ref / w.tuned, w.dflt / w.hand, w.dflt / w.tuned);
  }
  for (const Row& w : rows) std::printf("tuned %s [%s]: %s\n", w.op.c_str(), w.shape.c_str(), w.knobs.c_str());
  return 0;
}
