// What shape handling costs a model compiled with open dims (issue 24): a chain of N small
// elementwise nodes (so the kernels' own work is a few nanoseconds and the per-node cost of
// finding the prepared kernel for the run's shape is what differs) run in a mixed-shape loop
// (widths in a seeded random order, as OCR text lines come), once as one graph with an open
// width (per-shape kernels: kernels/shape_specialized_kernel.h) and once as one static graph per
// width (the fixed-shape baseline, fast kernels prepared at load), alternated in blocks so
// both see the same machine. Prints the per-run and per-node difference.
//
//   shape_handling_bench [--nodes 100] [--runs 2000] [--rounds 7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "runtime/graph_executor.h"

namespace {

using kiln::DataType;
using kiln::Dim;
using kiln::Shape;
using kiln::Tensor;

// x [1, width] -> Relu -> Neg -> Relu -> ... (n nodes) -> y. `width` < 0: open.
std::shared_ptr<kiln::ir::Graph> chain(int nodes, int64_t width) {
  auto g = std::make_shared<kiln::ir::Graph>("chain");
  g->opset_imports()[""] = 17;
  const Shape shape = width < 0 ? Shape({Dim(1), Dim::symbolic("width")}) : Shape({Dim(1), Dim(width)});
  kiln::ir::Value* prev = g->get_or_add_value("x");
  prev->type().dtype = DataType::kFloat32;
  prev->type().shape = shape;
  g->inputs().push_back(prev);
  for (int i = 0; i < nodes; ++i) {
    kiln::ir::Value* y = g->get_or_add_value("v" + std::to_string(i));
    y->type().dtype = DataType::kFloat32;
    y->type().shape = shape;
    g->add_node("n" + std::to_string(i), i % 2 ? "Neg" : "Relu", "", 17, {prev}, {y});
    prev = y;
  }
  g->outputs().push_back(prev);
  return g;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `order` (indices into widths) on executor(width) with one execution state per executor,
// and returns the wall time in microseconds.
template <typename ExecutorOf, typename StateOf>
double run_loop(const std::vector<int64_t>& widths, const std::vector<size_t>& order, std::vector<Tensor>& inputs,
                const ExecutorOf& executor_of, const StateOf& state_of) {
  const double t0 = now_us();
  for (size_t k : order) {
    const kiln::rt::GraphExecutor& ex = executor_of(k);
    kiln::rt::ExecutionState& st = state_of(k);
    if (!ex.bind_input(st, 0, DataType::kFloat32, inputs[k].dims(), inputs[k].raw_data()).ok() ||
        !ex.run_bound(st).ok()) {
      std::fprintf(stderr, "shape_handling_bench: a run failed at width %lld\n", (long long)widths[k]);
      std::exit(1);
    }
    ex.end_run(st);
  }
  return now_us() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 100, runs = 2000, rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nodes")) nodes = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: shape_handling_bench [--nodes N] [--runs R] [--rounds K]\n");
      return 2;
    }
  }
  if (nodes < 1 || runs < 1 || rounds < 1) {
    std::fprintf(stderr, "shape_handling_bench: --nodes, --runs and --rounds must be positive\n");
    return 2;
  }
  kiln::set_num_threads(1);
  // The OCR recognition widths, scaled down to a few floats per node.
  const std::vector<int64_t> widths{16, 32, 64, 128};
  std::vector<Tensor> inputs;
  for (int64_t w : widths) {
    Tensor t = Tensor::make(DataType::kFloat32, {1, w});
    for (int64_t i = 0; i < w; ++i) t.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
    inputs.push_back(std::move(t));
  }
  std::mt19937 rng(24);
  std::vector<size_t> order(static_cast<size_t>(runs));
  for (size_t& k : order) k = rng() % widths.size();

  auto open = kiln::rt::GraphExecutor::create(chain(nodes, -1));
  if (!open.ok()) {
    std::fprintf(stderr, "shape_handling_bench: %s\n", open.status().to_string().c_str());
    return 1;
  }
  const std::string impl = (*open)->implementation(0);
  std::vector<std::unique_ptr<kiln::rt::GraphExecutor>> fixed;
  for (int64_t w : widths) {
    auto ex = kiln::rt::GraphExecutor::create(chain(nodes, w));
    if (!ex.ok()) {
      std::fprintf(stderr, "shape_handling_bench: %s\n", ex.status().to_string().c_str());
      return 1;
    }
    fixed.push_back(std::move(*ex));
  }
  kiln::rt::ExecutionState open_state;
  std::vector<kiln::rt::ExecutionState> fixed_states(widths.size());
  auto dynamic_loop = [&] {
    return run_loop(widths, order, inputs, [&](size_t) -> const kiln::rt::GraphExecutor& { return **open; },
                    [&](size_t) -> kiln::rt::ExecutionState& { return open_state; });
  };
  auto static_loop = [&] {
    return run_loop(widths, order, inputs, [&](size_t k) -> const kiln::rt::GraphExecutor& { return *fixed[k]; },
                    [&](size_t k) -> kiln::rt::ExecutionState& { return fixed_states[k]; });
  };
  dynamic_loop();  // first sight of every width: the per-shape kernels are prepared here
  static_loop();
  std::vector<double> d, s;
  for (int r = 0; r < rounds; ++r) {
    if (r % 2) {
      s.push_back(static_loop());
      d.push_back(dynamic_loop());
    } else {
      d.push_back(dynamic_loop());
      s.push_back(static_loop());
    }
  }
  std::sort(d.begin(), d.end());
  std::sort(s.begin(), s.end());
  const double dm = d[d.size() / 2] / runs, sm = s[s.size() / 2] / runs;
  std::printf("shape handling: %d-node chain, widths 16/32/64/128 in a random order, %d runs x %d rounds, 1 thread\n",
              nodes, runs, rounds);
  std::printf("  open width (per-shape kernels, %s): %.2f us per run (median of rounds)\n", impl.c_str(), dm);
  std::printf("  static graph per width (kernels prepared at load): %.2f us per run\n", sm);
  std::printf("  shape handling: %+.2f us per run, %+.1f ns per node\n", dm - sm, (dm - sm) * 1000.0 / nodes);
  return 0;
}
