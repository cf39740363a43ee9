// Helpers for the pass tests: compile a graph written in ONNX text syntax at a given -O
// level, count ops, and run graphs with GraphExecutor on deterministic inputs.
#pragma once

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <set>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kernels/kernel_registry.h"
#include "runtime/graph_executor.h"

namespace kiln::compiler::testing {

// Compiles a model in ONNX text syntax with `options` (the IR verified after every pass).
inline Expected<CompiledModel> compile_text_with(const std::string& text, CompileOptions options) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text.c_str());
  if (!st.IsOK()) return invalid_argument("ONNX text does not parse: %s", st.ErrorMessage().c_str());
  std::string bytes = m.SerializeAsString();
  options.passes.verify_each_pass = true;
  return compile_onnx_bytes(bytes.data(), bytes.size(), "test.onnx", options);
}

inline Expected<CompiledModel> compile_text(const std::string& text, int level,
                                            std::set<std::string> disabled = {}) {
  CompileOptions options;
  options.passes.opt_level = level;
  options.passes.disabled = std::move(disabled);
  return compile_text_with(text, std::move(options));
}

inline int count_op(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op;
  return n;
}

inline int changed(const CompiledModel& c, const std::string& pass) {
  for (const PassRecord& r : c.passes)
    if (r.name == pass) return r.changed;
  return -1;  // the pass did not run
}

// Deterministic inputs for every graph input without an initializer: small values of
// both signs, different per input.
inline std::vector<rt::NamedValue> make_inputs(const ir::Graph& g) {
  std::vector<rt::NamedValue> inputs;
  int salt = 0;
  for (const ir::Value* v : g.inputs()) {
    if (v->has_initializer()) continue;
    ++salt;
    std::vector<int64_t> dims = v->shape().static_dims();
    Tensor t = Tensor::make(v->dtype(), dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      double x = static_cast<double>((i * 7 + salt * 3) % 11) - 5.0;
      switch (v->dtype()) {
        case DataType::kFloat32: t.data<float>()[i] = static_cast<float>(x * 0.37 + 0.013 * salt); break;
        case DataType::kFloat64: t.data<double>()[i] = x * 0.37 + 0.013 * salt; break;
        case DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(x); break;
        case DataType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(x); break;
        case DataType::kBool: t.data<bool>()[i] = (i + salt) % 2 == 1; break;
        default: ADD_FAILURE() << "make_inputs: unsupported dtype for input " << v->name();
      }
    }
    inputs.push_back({v->name(), RuntimeValue(std::move(t))});
  }
  return inputs;
}

// Runs on the reference kernels: the pass tests check what a rewrite computes, so both sides
// of a comparison run the same validated arithmetic; the fast kernels are tested against the
// reference kernels in tests/kernels.
inline std::vector<RuntimeValue> run_graph(const std::shared_ptr<ir::Graph>& g,
                                           const std::vector<rt::NamedValue>& inputs) {
  std::vector<RuntimeValue> out;
  kernels::set_fast_kernels_enabled(false);
  auto exec = rt::GraphExecutor::create(g);
  kernels::reset_fast_kernels_enabled();
  EXPECT_TRUE(exec.ok()) << exec.status().to_string();
  if (!exec.ok()) return out;
  Status s = (*exec)->run(inputs, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

inline void expect_equal_outputs(const std::vector<RuntimeValue>& a, const std::vector<RuntimeValue>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    const Tensor& x = a[k].tensor();
    const Tensor& y = b[k].tensor();
    ASSERT_EQ(x.dtype(), y.dtype()) << "output " << k;
    ASSERT_EQ(x.dims(), y.dims()) << "output " << k;
    for (int64_t i = 0; i < x.num_elements(); ++i)
      ASSERT_EQ(x.element_as_double(i), y.element_as_double(i)) << "output " << k << " element " << i;
  }
}

// Compiles at -O0 (the reference: only what correctness needs) and at `level` (default -O1:
// the simplifying passes, without the fusions of -O2, whose tests compare with a tolerance),
// checks the graph outputs keep their names, runs both on the same inputs and compares
// exactly (the rewrites tested here remove work, they do not reorder arithmetic). Returns
// the optimised model.
inline CompiledModel expect_same_as_O0(const std::string& text, int level = 1) {
  auto ref = compile_text(text, 0);
  auto opt = compile_text(text, level);
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  EXPECT_TRUE(opt.ok()) << opt.status().to_string();
  if (!ref.ok() || !opt.ok()) return {};
  EXPECT_EQ(ref->graph->outputs().size(), opt->graph->outputs().size());
  for (size_t i = 0; i < ref->graph->outputs().size() && i < opt->graph->outputs().size(); ++i)
    EXPECT_EQ(ref->graph->outputs()[i]->name(), opt->graph->outputs()[i]->name());
  auto inputs = make_inputs(*ref->graph);
  expect_equal_outputs(run_graph(ref->graph, inputs), run_graph(opt->graph, inputs));
  return std::move(*opt);
}

}  // namespace kiln::compiler::testing
