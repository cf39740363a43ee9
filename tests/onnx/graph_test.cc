// Graph-level tests: small models in ONNX text syntax, imported and run with the
// reference executor, compared with outputs NumPy computed (tests/onnx/make_graph_cases.py
// writes graph_cases/<case>/{model.txt, in_<name>.npy, out_<name>.npy}).
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/npy.h"
#include "frontend/onnx/onnx_importer.h"
#include "runtime/graph_executor.h"

namespace kiln::frontend {
namespace {

namespace fs = std::filesystem;

// The cases make_graph_cases.py writes; a folder missing from this table fails
// TableCoversEveryCase.
const char* const kCases[] = {
    "conv_relu",      "matmul_add_softmax", "layernorm_decomposed", "gather_concat_reshape",
    "resize_nearest", "resize_linear",      "loop_accumulate",      "if_branches",
};

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

fs::path cases_dir() {
  if (const char* src = std::getenv("KILN_SOURCE_DIR"))
    return fs::path(src) / "tests" / "onnx" / "graph_cases";
  // Run by hand from somewhere inside the checkout: look upwards.
  for (fs::path p = fs::current_path(); !p.empty(); p = p.parent_path()) {
    if (fs::is_directory(p / "tests" / "onnx" / "graph_cases"))
      return p / "tests" / "onnx" / "graph_cases";
    if (p == p.parent_path()) break;
  }
  return "graph_cases";
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Compares element by element: float32 within rtol/atol, everything else exactly.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype())
      << what << ": got " << got.description() << ", want " << want.description();
  ASSERT_EQ(got.dims(), want.dims())
      << what << ": got " << got.description() << ", want " << want.description();
  int64_t bad = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (dtype_is_float(want.dtype())) {
      double g = got.element_as_double(i), w = want.element_as_double(i);
      if (!(std::fabs(g - w) <= kAtol + kRtol * std::fabs(w))) {
        if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w;
      }
    } else if (got.element_as_int64(i) != want.element_as_int64(i)) {
      if (bad++ < 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got.element_as_int64(i) << ", want "
                      << want.element_as_int64(i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.num_elements() << " elements differ";
}

class OnnxGraphCase : public testing::TestWithParam<std::string> {};

TEST_P(OnnxGraphCase, MatchesNumPy) {
  const fs::path dir = cases_dir() / GetParam();
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing; run tests/onnx/make_graph_cases.py";
  const std::string text = read_text(dir / "model.txt");
  onnx::ModelProto model;
  auto parsed = onnx::OnnxParser::Parse(model, text.c_str());
  ASSERT_TRUE(parsed.IsOK()) << parsed.ErrorMessage();
  const std::string bytes = model.SerializeAsString();

  auto imported = import_onnx_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  std::shared_ptr<const ir::Graph> graph = imported->graph;

  std::vector<rt::NamedValue> inputs;
  for (const ir::Value* v : graph->inputs()) {
    fs::path p = dir / ("in_" + v->name() + ".npy");
    if (!fs::exists(p)) {
      ASSERT_TRUE(v->has_initializer()) << "no " << p << " for input '" << v->name() << "'";
      continue;
    }
    auto t = read_npy(p.string());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    inputs.push_back({v->name(), std::move(*t)});
  }

  auto executor = rt::GraphExecutor::create(graph);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  std::vector<RuntimeValue> outputs;
  Status st = (*executor)->run(inputs, &outputs);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(outputs.size(), graph->outputs().size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = graph->outputs()[i]->name();
    auto want = read_npy((dir / ("out_" + name + ".npy")).string());
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_TRUE(outputs[i].is_tensor()) << name;
    expect_close(outputs[i].tensor(), *want, GetParam() + " output '" + name + "'");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OnnxGraphCase,
    testing::ValuesIn(std::vector<std::string>(std::begin(kCases), std::end(kCases))),
    [](const testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(OnnxGraphCases, TableCoversEveryCase) {
  const fs::path dir = cases_dir();
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::set<std::string> table(std::begin(kCases), std::end(kCases));
  std::set<std::string> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) found.insert(e.path().filename().string());
  EXPECT_EQ(found, table);
}

}  // namespace
}  // namespace kiln::frontend
