// Helpers the kernel tests share (attention, norm, softmax, transpose, concat): a one-node
// graph with its input tensors, seeded inputs, and running a node on its reference kernel or
// on a prepared fast kernel.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
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

// A tensor of `dims` with random bytes (0 / 1 for bool): for kernels that only move elements.
inline Tensor random_bytes(DataType dtype, const Dims& dims, std::mt19937& rng) {
  Tensor t = Tensor::make(dtype, dims);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (size_t k = 0; k < t.size_bytes(); ++k) {
    bytes[k] = static_cast<unsigned char>(rng());
    if (dtype == DataType::kBool) bytes[k] &= 1;
  }
  return t;
}

// Prepares b's node on `factory` (which must take it) and checks that its output has the
// reference kernel's dims and bytes.
inline void expect_bytes_match_reference(const KernelFactory* factory, const Built& b,
                                         const std::string& what) {
  ASSERT_NE(factory, nullptr);
  ASSERT_TRUE(factory->applicable(*b.node).ok()) << what;
  auto k = factory->prepare(*b.node);
  ASSERT_TRUE(k.ok()) << what << ": " << k.status().to_string();
  auto want = run_reference(*b.node, b.inputs);
  auto got = run_kernel(**k, *b.node, b.inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << what;
  ASSERT_EQ(got->dims(), want->dims()) << what;
  ASSERT_EQ(got->dtype(), want->dtype()) << what;
  EXPECT_EQ(std::memcmp(got->raw_data(), want->raw_data(), want->size_bytes()), 0) << what;
}

}  // namespace kiln::kernels::testing
