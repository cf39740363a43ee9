// Helpers the SIMD kernel tests share (attention, norm, softmax): a one-node graph with its
// input tensors, seeded uniform inputs, and running a node on its reference kernel or on a
// prepared fast kernel.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels::testing {

using Dims = std::vector<int64_t>;

struct Built {
  std::shared_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  std::vector<Tensor> inputs;
};

inline Tensor random_tensor(const Dims& dims, std::mt19937& rng, float lo, float hi) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

inline float max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) m = std::max(m, std::fabs(t.data<float>()[i]));
  return m;
}

inline Expected<Tensor> run_with(const ir::Node& node, const std::vector<Tensor>& inputs,
                                 const std::function<Status(ops::KernelContext&)>& fn) {
  std::vector<RuntimeValue> values(inputs.size());
  std::vector<const RuntimeValue*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    values[i] = inputs[i];
    ptrs.push_back(&values[i]);
  }
  std::vector<RuntimeValue> outputs(1);
  ops::KernelContext ctx(node, ptrs, &outputs);
  KILN_RETURN_IF_ERROR(fn(ctx));
  return outputs[0].tensor();
}

inline Expected<Tensor> run_reference(const ir::Node& node, const std::vector<Tensor>& inputs) {
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  return run_with(node, inputs, schema->kernel_fn());
}

inline Expected<Tensor> run_kernel(const Kernel& k, const ir::Node& node, const std::vector<Tensor>& inputs) {
  return run_with(node, inputs, [&](ops::KernelContext& ctx) { return k.run(ctx); });
}

}  // namespace kiln::kernels::testing
