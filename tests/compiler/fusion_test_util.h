// Helpers for the fusion pass tests: ONNX text models with deterministic initializers,
// the fusion counts a compile recorded, and the comparison of a fused compile (-O2/-O3)
// with the unfused -O1 compile, whose ONNX reference kernels are the independent oracle.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "pass_test_util.h"

namespace kiln::compiler::testing {

// `n` deterministic pseudo-random values in [lo, hi), as an ONNX text initializer body.
inline std::string fusion_values(int n, int seed, double lo, double hi) {
  std::string s = "{";
  uint32_t state = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    double u = static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.6g", i ? ", " : "", lo + (hi - lo) * u);
    s += buf;
  }
  return s + "}";
}

// "float[d0,d1] name = {...}, " (or another element type) with values from fusion_values.
inline std::string finit(const std::string& name, std::vector<int> dims, int seed, double lo = -0.5,
                         double hi = 0.5, const std::string& type = "float") {
  std::string d;
  int n = 1;
  for (int x : dims) {
    if (!d.empty()) d += ',';
    d += std::to_string(x);
    n *= x;
  }
  return type + "[" + d + "] " + name + " = " + fusion_values(n, seed, lo, hi) + ", ";
}

// A model at ai.onnx opset `opset` (and kiln 1): signature, initializers (each ending in
// ", ", may be empty), node list.
inline std::string fmodel(const std::string& signature, std::string inits, const std::string& body,
                          int opset = 17) {
  std::string header =
      "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + ", \"kiln\" : 1]>\n";
  std::string init_part;
  if (!inits.empty()) {
    inits.resize(inits.size() - 2);
    init_part = "<" + inits + ">\n";
  }
  return header + signature + "\n" + init_part + "{\n" + body + "\n}";
}

// Pattern -> count recorded by `pass` (empty when it fused nothing or did not run).
inline std::map<std::string, int> fusions(const CompiledModel& c, const std::string& pass) {
  for (const PassRecord& r : c.passes)
    if (r.name == pass) return r.fusions;
  return {};
}

// Nodes with op `op` in domain kiln.
inline int count_kiln_op(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op && node->domain() == "kiln";
  return n;
}

// The node producing graph output `i`.
inline const ir::Node* output_producer(const CompiledModel& c, size_t i = 0) {
  return c.graph && i < c.graph->outputs().size() ? c.graph->outputs()[i]->producer() : nullptr;
}

// |a - b| <= 1e-5 max(|a|, |b|) + 1e-7: relative 1e-5, with a floor for values near zero
// where the fused kernels' different summation order leaves only absolute rounding noise.
inline void expect_close_rel(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.dims(), b.dims()) << what;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.element_as_double(i), y = b.element_as_double(i);
    ASSERT_LE(std::fabs(x - y), 1e-5 * std::max(std::fabs(x), std::fabs(y)) + 1e-7)
        << what << " element " << i << ": " << x << " vs " << y;
  }
}

// Compiles at -O1 (no fusion: the reference) and at `level`, checks the graph outputs keep
// their names, runs both on the same inputs and compares. Returns the fused model.
inline CompiledModel expect_fused_matches_O1(const std::string& text, int level) {
  auto ref = compile_text(text, 1);
  auto opt = compile_text(text, level);
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  EXPECT_TRUE(opt.ok()) << opt.status().to_string();
  if (!ref.ok() || !opt.ok()) return {};
  EXPECT_EQ(ref->graph->outputs().size(), opt->graph->outputs().size());
  for (size_t i = 0; i < ref->graph->outputs().size() && i < opt->graph->outputs().size(); ++i)
    EXPECT_EQ(ref->graph->outputs()[i]->name(), opt->graph->outputs()[i]->name());
  auto inputs = make_inputs(*ref->graph);
  auto a = run_graph(ref->graph, inputs);
  auto b = run_graph(opt->graph, inputs);
  EXPECT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size() && k < b.size(); ++k)
    expect_close_rel(b[k].tensor(), a[k].tensor(), "output " + std::to_string(k));
  return std::move(*opt);
}

// Compiles `text` at -O3 without running it (graphs whose inputs are not fully shaped).
inline CompiledModel compile_O3(const std::string& text) {
  auto c = compile_text(text, 3);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return {};
  return std::move(*c);
}

}  // namespace kiln::compiler::testing
