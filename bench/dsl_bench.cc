// The DSL's LayerNorm, Softmax and GELU-bias-add (src/dsl/examples.cc), default schedule and
// hand schedule, against Kiln's hand-written SIMD kernels (src/kernels/cpu) and the reference
// kernels, at BERT-base shapes (issue 31). Rounds alternate between the contenders; each
// prints the median time of a call and its ratio to the hand-written kernel.
//
//   dsl_bench [--reps N]
//
// The DSL kernels are built with symbolic rows/cols (bound per call); the cache folder is
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

std::shared_ptr<dsl::Kernel> build(const dsl::Example& e, bool tuned) {
  dsl::Schedule s({e.output});
  if (tuned) e.tuned_schedule(s, e);
  dsl::auto_schedule(s);
  auto f = dsl::lower(s, e.args, e.name);
  if (!f.ok()) OneNode::fail(f.status());
  auto k = dsl::build(*f);
  if (!k.ok()) OneNode::fail(k.status());
  return *k;
}

void add_dsl(std::vector<Contender>& cs, const std::string& op, std::vector<float*> bufs, int64_t rows,
             int64_t cols) {
  auto e = dsl::make_example(op, dsl::var("rows"), dsl::var("cols"));
  if (!e.ok()) OneNode::fail(e.status());
  for (bool tuned : {false, true}) {
    auto k = build(*e, tuned);
    cs.push_back({tuned ? "dsl hand schedule" : "dsl default schedule", [k, bufs, rows, cols] {
                    const int64_t dims[2] = {rows, cols};
                    k->entry()(bufs.data(), dims);
                  }, {}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 31;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--reps") rounds = std::max(3, std::atoi(argv[++i]));

  {  // LayerNorm over the last axis of [128, 768] (BERT-base, sequence 128).
    const int64_t r = 128, c = 768;
    auto x = random_floats(r * c, 1), g = random_floats(c, 2), b = random_floats(c, 3);
    std::vector<float> y(r * c);
    OneNode n("LayerNorm", ops::kKilnDomain, ops::kKilnOpset, {{r, c}, {c}, {c}}, {x, g, b}, [](ir::Node& nd) {
      nd.attrs()["axis"] = ir::Attribute::from_int(-1);
      nd.attrs()["epsilon"] = ir::Attribute::from_float(1e-5f);
    });
    std::vector<Contender> cs = {{"kiln simd kernel", [&] { n.run_kernel(); }, {}},
                                 {"kiln reference kernel", [&] { n.run_reference(); }, {}}};
    add_dsl(cs, "layernorm", {x.data(), g.data(), b.data(), y.data()}, r, c);
    race("LayerNorm [128, 768], last axis", cs, rounds, 20);
  }
  {  // Softmax over the last axis of [12, 128, 128] (BERT-base attention scores).
    const int64_t r = 12 * 128, c = 128;
    auto x = random_floats(r * c, 4);
    std::vector<float> y(r * c);
    OneNode n("Softmax", ops::kOnnxDomain, 13, {{12, 128, 128}}, {x},
              [](ir::Node& nd) { nd.attrs()["axis"] = ir::Attribute::from_int(-1); });
    std::vector<Contender> cs = {{"kiln simd kernel", [&] { n.run_kernel(); }, {}},
                                 {"kiln reference kernel", [&] { n.run_reference(); }, {}}};
    add_dsl(cs, "softmax", {x.data(), y.data()}, r, c);
    race("Softmax [12, 128, 128], last axis", cs, rounds, 10);
  }
  {  // GELU(x + bias) on [128, 3072] (BERT-base feed-forward): Kiln's SIMD Gelu after a bias loop.
    const int64_t r = 128, c = 3072;
    auto x = random_floats(r * c, 5), b = random_floats(c, 6);
    std::vector<float> y(r * c);
    std::vector<Contender> cs = {{"kiln simd kernel", [&] {
                                    for (int64_t i = 0; i < r; ++i)
                                      for (int64_t j = 0; j < c; ++j) y[i * c + j] = x[i * c + j] + b[j];
                                    kernels::gelu_in_place(y.data(), r * c, false);
                                  }, {}}};
    add_dsl(cs, "gelu_bias_add", {x.data(), b.data(), y.data()}, r, c);
    race("GELU(x + bias) [128, 3072] (hand: a bias loop + kernels::gelu_in_place)", cs, rounds, 10);
  }
  return 0;
}
