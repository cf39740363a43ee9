// Helpers of the 8-bit quantisation kernel tests (quantize_linear, qlinear_add): one-node
// graphs whose first inputs are graph inputs and the rest initializers, scalar tensors,
// seeded 8-bit tensors, the "simd" factory of an op, and a one-thread timing loop.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "simd_test_util.h"

namespace kiln::kernels::testing {

// A one-node graph: the inputs listed in `graph_inputs` are typed graph inputs, the others
// initializers (an undefined tensor is an omitted input). Inference runs and must succeed.
inline Built make_quant_graph(const std::string& op, const std::string& domain, int64_t opset,
                              const std::vector<Tensor>& inputs, const std::vector<size_t>& graph_inputs,
                              ir::AttributeMap attrs = {}) {
  Built b;
  b.graph = std::make_shared<ir::Graph>();
  b.inputs = inputs;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = b.graph->get_or_add_value("in" + std::to_string(i));
    v->type() = ir::TensorType{inputs[i].dtype(), inputs[i].shape()};
    if (std::find(graph_inputs.begin(), graph_inputs.end(), i) != graph_inputs.end())
      b.graph->inputs().push_back(v);
    else
      v->set_initializer(inputs[i]);
    ins.push_back(v);
  }
  ir::Value* y = b.graph->get_or_add_value("y");
  b.graph->outputs().push_back(y);
  b.node = b.graph->add_node("n", op, domain, opset, ins, {y});
  b.node->attrs() = std::move(attrs);
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

inline Tensor scalar_f32(float v) { return Tensor::scalar<float>(v); }

// One value of an 8-bit dtype (uint8 or int8).
inline Tensor scalar_x8(DataType t, int v) {
  Tensor out = Tensor::make(t, {});
  if (t == DataType::kUInt8)
    out.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else
    out.data<int8_t>()[0] = static_cast<int8_t>(v);
  return out;
}

inline const KernelFactory* simd_factory(const ir::Node& node) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), DeviceKind::kCpu))
    if (f->name == "simd") return f;
  return nullptr;
}

// Nanoseconds per element of fn() on `threads` threads: the best of `reps` runs.
template <typename Fn>
double ns_per_element(int64_t elements, int threads, int reps, Fn&& fn) {
  const int saved = set_thread_num_threads_override(threads);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  set_thread_num_threads_override(saved);
  return best / static_cast<double>(elements);
}

// Prints the time per output element of b's node on kernel k at 1 and 2 threads and on the
// reference kernel at 1 (for the disabled timing tests, run by hand: kernels_test
// --gtest_also_run_disabled_tests --gtest_filter='*Timing*'). Timing is never asserted.
inline void print_timing(const std::string& label, const Kernel& k, const Built& b) {
  auto y = run_kernel(k, *b.node, b.inputs);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  const int64_t n = y->num_elements();
  auto fast = [&] { EXPECT_TRUE(run_kernel(k, *b.node, b.inputs).ok()); };
  const double t1 = ns_per_element(n, 1, 50, fast), t2 = ns_per_element(n, 2, 50, fast);
  const double ref = ns_per_element(n, 1, 3, [&] { EXPECT_TRUE(run_reference(*b.node, b.inputs).ok()); });
  std::printf("%s: %s %.3f ns/element at 1 thread (%.3f at 2), reference %.2f at 1 thread (%.0fx)\n", label.c_str(),
              k.implementation().c_str(), t1, t2, ref, ref / t1);
}

}  // namespace kiln::kernels::testing
