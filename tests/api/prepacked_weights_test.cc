// Weights pre-packed at compile time (kernels/prepacked_weights.h, compiler/weight_prepacking.cc)
// and the .kiln's cold tail (model_writer.cc, model_reader.cc): a model of two convolutions is
// compiled and written, then loaded and run through the C API. Outputs are checked against a
// direct convolution computed here in double precision; the checks say where the weights came
// from (the stored packing, a packing done at load, the originals in the mapped cold tail).
// The same model's kernel workspaces, planned into the arena at compile time (model/arena_plan.h):
// counted in kilnmdlQuerySize's work size and used by the run instead of per-thread blocks.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kernels/cpu/lent_workspace.h"
#include "kernels/kernel_registry.h"
#include "kernels/prepacked_weights.h"
#include "kiln/kiln.hpp"
#include "model/kiln_model.h"
#include "../process_temp_dir.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kCin = 16, kMid = 32, kCout = 24, kH = 10, kW = 10;

struct Weights {
  std::vector<float> w1, b1, w2;  // W1 [kMid, kCin, 3, 3], B1 [kMid], W2 [kCout, kMid, 1, 1]
};

Weights random_weights() {
  std::mt19937 rng(33);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  Weights w;
  w.w1.resize(kMid * kCin * 9);
  w.b1.resize(kMid);
  w.w2.resize(kCout * kMid);
  for (auto* v : {&w.w1, &w.b1, &w.w2})
    for (float& x : *v) x = u(rng);
  return w;
}

void add_initializer(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims,
                     const std::vector<float>& values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
}

void set_type(onnx::ValueInfoProto* v, const std::vector<int64_t>& dims) {
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// y = Conv(Relu(Conv(x, W1, B1, pads 1)), W2)
std::string model_bytes(const Weights& w) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("two_convs");
  set_type(g->add_input(), {1, kCin, kH, kW});
  g->mutable_input(0)->set_name("x");
  set_type(g->add_output(), {1, kCout, kH, kW});
  g->mutable_output(0)->set_name("y");
  add_initializer(g, "w1", {kMid, kCin, 3, 3}, w.w1);
  add_initializer(g, "b1", {kMid}, w.b1);
  add_initializer(g, "w2", {kCout, kMid, 1, 1}, w.w2);
  auto* c1 = g->add_node();
  c1->set_op_type("Conv");
  c1->add_input("x");
  c1->add_input("w1");
  c1->add_input("b1");
  c1->add_output("h");
  auto* pads = c1->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int k = 0; k < 4; ++k) pads->add_ints(1);
  auto* r = g->add_node();
  r->set_op_type("Relu");
  r->add_input("h");
  r->add_output("hr");
  auto* c2 = g->add_node();
  c2->set_op_type("Conv");
  c2->add_input("hr");
  c2->add_input("w2");
  c2->add_output("y");
  return m.SerializeAsString();
}

// The same computation, directly, in double precision.
std::vector<float> reference(const Weights& w, const std::vector<float>& x) {
  std::vector<double> h(kMid * kH * kW);
  for (int64_t m = 0; m < kMid; ++m)
    for (int64_t i = 0; i < kH; ++i)
      for (int64_t j = 0; j < kW; ++j) {
        double s = w.b1[m];
        for (int64_t c = 0; c < kCin; ++c)
          for (int64_t di = 0; di < 3; ++di)
            for (int64_t dj = 0; dj < 3; ++dj) {
              const int64_t ii = i + di - 1, jj = j + dj - 1;
              if (ii < 0 || ii >= kH || jj < 0 || jj >= kW) continue;
              s += double(w.w1[((m * kCin + c) * 3 + di) * 3 + dj]) * x[(c * kH + ii) * kW + jj];
            }
        h[(m * kH + i) * kW + j] = std::max(s, 0.0);
      }
  std::vector<float> y(kCout * kH * kW);
  for (int64_t o = 0; o < kCout; ++o)
    for (int64_t p = 0; p < kH * kW; ++p) {
      double s = 0;
      for (int64_t m = 0; m < kMid; ++m) s += double(w.w2[o * kMid + m]) * h[m * kH * kW + p];
      y[o * kH * kW + p] = static_cast<float>(s);
    }
  return y;
}

std::string temp_path(const std::string& name) {
  static const kiln::test_support::ProcessTempDir dir("kiln_prepacked_test");
  return dir.path() + "/" + name;
}

// Compiles the model; `edit` may change the compiled graph before it is written.
std::string compile(const Weights& w, const std::string& name, void (*edit)(kiln::ir::Graph&) = nullptr) {
  const std::string bytes = model_bytes(w);
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), name, {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  if (edit) edit(*compiled->graph);
  const std::string path = temp_path(name + ".kiln");
  kiln::Status s = kiln::compiler::write_compiled_model(*compiled, path);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return path;
}

size_t stored_packings(const kiln::ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes())
    if (const kiln::ir::Attribute* a = node->attr(kiln::ir::kPrepackedAttr)) n += a->tensors.size();
  return n;
}

// Runs the .kiln at `path` through the C API and checks y against the direct computation.
void run_and_check(const std::string& path, const Weights& w) {
  std::vector<float> x(kCin * kH * kW);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  kiln::Runtime runtime;
  kiln::Device device(0);
  kiln::Model model = kiln::Model::load(path);
  kiln::DeviceBuffer in(model.input_size(0)), out(model.output_size(0));
  in.copy_from_host(x);
  kiln::Dataset ins, outs;
  ins.add(in);
  outs.add(out);
  model.execute(ins, outs);
  const std::vector<float> got = out.to_host<float>();
  const std::vector<float> want = reference(w, x);
  ASSERT_EQ(got.size(), want.size());
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
    max_diff = std::max(max_diff, std::fabs(double(got[i]) - want[i]));
  }
  EXPECT_LE(max_diff, 1e-5 * max_ref) << "max |kiln - reference| " << max_diff << " of max " << max_ref;
}

TEST(PrepackedWeights, ALoadUsesThePackingsStoredAtCompileTimeAndMapsTheOriginals) {
  const Weights w = random_weights();
  const std::string path = compile(w, "two_convs");
  ASSERT_FALSE(path.empty());
  auto loaded = kiln::model::load_model(path, kiln::model::LoadMode::kRead);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const size_t stored = stored_packings(*loaded->graph);
  ASSERT_GE(stored, 2u) << "both convolutions' weights are packed by oneDNN";
  // Both weights are only read packed: their originals (and nothing else) form the cold tail.
  EXPECT_TRUE(loaded->cold_tail_mapped);
  EXPECT_GE(loaded->cold_weight_bytes, (w.w1.size() + w.w2.size()) * sizeof(float));
  EXPECT_LT(loaded->cold_weight_bytes, loaded->weight_bytes);

  const kiln::kernels::PrepackStats before = kiln::kernels::prepack_stats();
  run_and_check(path, w);
  const kiln::kernels::PrepackStats after = kiln::kernels::prepack_stats();
  EXPECT_EQ(after.hits - before.hits, stored);
  EXPECT_EQ(after.misses, before.misses);
}

// A packing for another CPU (here: a key no kernel of this one asks for) is not used: the
// kernel packs the original weight, read from the mapped cold tail.
TEST(PrepackedWeights, APackingForAnotherCpuIsPackedAgainFromTheOriginal) {
  const Weights w = random_weights();
  const std::string path = compile(w, "two_convs_other_cpu", [](kiln::ir::Graph& g) {
    for (const auto& node : g.nodes())
      if (auto it = node->attrs().find(kiln::ir::kPrepackedKeyAttr); it != node->attrs().end())
        for (kiln::Tensor& key : it->second.tensors) key.data<uint8_t>()[key.num_elements() - 1] ^= 0x5a;
  });
  ASSERT_FALSE(path.empty());
  const kiln::kernels::PrepackStats before = kiln::kernels::prepack_stats();
  run_and_check(path, w);
  const kiln::kernels::PrepackStats after = kiln::kernels::prepack_stats();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_GE(after.misses - before.misses, 2u);
}

// Reference kernels read every weight as stored in ONNX order, from the cold tail.
TEST(PrepackedWeights, ReferenceKernelsReadTheOriginalsFromTheColdTail) {
  const Weights w = random_weights();
  const std::string path = compile(w, "two_convs_reference");
  ASSERT_FALSE(path.empty());
  kiln::kernels::set_fast_kernels_enabled(false);
  run_and_check(path, w);
  kiln::kernels::reset_fast_kernels_enabled();
}

// The checksum covers the cold tail, which the load reads only to check it.
TEST(PrepackedWeights, ADamagedColdTailFailsTheChecksum) {
  const Weights w = random_weights();
  const std::string path = compile(w, "two_convs_damaged");
  ASSERT_FALSE(path.empty());
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    char c = 0x33;
    f.write(&c, 1);
  }
  for (auto mode : {kiln::model::LoadMode::kRead, kiln::model::LoadMode::kReadAll}) {
    auto loaded = kiln::model::load_model(path, mode);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("checksum mismatch"), std::string::npos) << loaded.status().to_string();
  }
}

// Each convolution's workspace (its scratchpad and layout buffers) is planned into the arena: the
// work size is the arena with it, and the run takes every workspace from its planned range, none
// from a thread's own block, with outputs equal to the direct computation.
TEST(PlannedWorkspaces, AreCountedInTheWorkSizeAndServeTheRun) {
  const Weights w = random_weights();
  const std::string path = compile(w, "two_convs_workspaces");
  ASSERT_FALSE(path.empty());
  auto loaded = kiln::model::load_model(path, kiln::model::LoadMode::kRead);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_TRUE(loaded->arena_plan.has_value());
  const kiln::model::ArenaPlan& plan = *loaded->arena_plan;
  ASSERT_GE(plan.workspaces.size(), 1u) << "the convolutions ask for a workspace on plain tensors";
  size_t values_end = 0;
  for (const kiln::model::PlannedValue& pv : plan.values) values_end = std::max(values_end, pv.offset + pv.size);
  for (const kiln::model::PlannedWorkspace& ws : plan.workspaces) {
    const kiln::ir::Attribute* need = ws.node->attr(kiln::model::kWorkspaceBytesAttr);
    ASSERT_NE(need, nullptr) << ws.node->label();
    EXPECT_GE(ws.size, static_cast<size_t>(need->i)) << ws.node->label();
    EXPECT_LE(ws.offset + ws.size, plan.arena_bytes);
  }
  {
    kiln::Runtime runtime;
    size_t work = 0, weight = 0;
    ASSERT_EQ(kilnmdlQuerySize(path.c_str(), &work, &weight), 0) << kilnGetRecentErrMsg();
    EXPECT_EQ(work, plan.arena_bytes);
  }

  kiln::kernels::WorkspaceCounts& counts = kiln::kernels::workspace_counts();
  const uint64_t planned = counts.planned, own = counts.own_block;
  run_and_check(path, w);
  EXPECT_EQ(counts.planned - planned, plan.workspaces.size());
  EXPECT_EQ(counts.own_block - own, 0u);
}

// A model compiled without pre-packing has no cold tail and packs at load, as before.
TEST(PrepackedWeights, CompilingWithoutPrepackingKeepsTheWeightsAsTheyCame) {
  const Weights w = random_weights();
  const std::string bytes = model_bytes(w);
  kiln::compiler::CompileOptions options;
  options.prepack_weights = false;
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), "plain", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  EXPECT_EQ(stored_packings(*compiled->graph), 0u);
  const std::string path = temp_path("plain.kiln");
  ASSERT_TRUE(kiln::compiler::write_compiled_model(*compiled, path).ok());
  auto loaded = kiln::model::load_model(path, kiln::model::LoadMode::kRead);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->cold_weight_bytes, 0u);
  EXPECT_FALSE(loaded->cold_tail_mapped);
  run_and_check(path, w);
}

}  // namespace
