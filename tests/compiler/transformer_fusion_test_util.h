// Helpers for the transformer fusion pass tests (LayerNorm, Gelu, Attention): compile an
// ONNX text graph at -O1 (no fusion: the reference, run by the ONNX ops' reference kernels)
// and at -O2 / -O3, compare the outputs, and count fusions and ops.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "compiler/pass_manager.h"
#include "pass_test_util.h"

// A namespace of their own: other pass tests define helpers of the same names in
// kiln::compiler::testing, and inline functions must not collide across the test binary.
namespace kiln::compiler::testing::transformer {

// How often `pattern` was fused in the compile, over all passes.
inline int fusion_count(const CompiledModel& c, const std::string& pattern) {
  int n = 0;
  for (const PassRecord& r : c.passes) {
    auto it = r.fusions.find(pattern);
    if (it != r.fusions.end()) n += it->second;
  }
  return n;
}

// Nodes of `op` in domain `domain`.
inline int count_op_in(const ir::Graph& g, const std::string& op, const std::string& domain) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op && node->domain() == domain;
  return n;
}

// The first node of kiln op `op`, or null.
inline const ir::Node* find_kiln_op(const ir::Graph& g, const std::string& op) {
  for (const auto& node : g.nodes())
    if (node->op_type() == op && node->domain() == "kiln") return node.get();
  return nullptr;
}

// |a - b| <= 1e-5 * max(|b|, 1) element by element: 1e-5 relative, measured against 1 for
// values below 1 in magnitude (a fused kernel computes in another order or precision).
inline void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.dims(), b.dims()) << what;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.element_as_double(i), y = b.element_as_double(i);
    ASSERT_TRUE(std::isfinite(x) && std::isfinite(y)) << what << " element " << i;
    ASSERT_LE(std::fabs(x - y), 1e-5 * std::max(std::fabs(y), 1.0))
        << what << " element " << i << ": " << x << " vs " << y;
  }
}

// Compiles `text` at -O1 and at `level`, checks the outputs keep their names, runs both
// on the same inputs and compares within expect_close's tolerance. Returns the model
// compiled at `level`.
inline CompiledModel expect_close_to_O1(const std::string& text, int level) {
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
    expect_close(b[k].tensor(), a[k].tensor(),
                 "output " + std::to_string(k) + " at -O" + std::to_string(level));
  return std::move(*opt);
}

}  // namespace kiln::compiler::testing::transformer
