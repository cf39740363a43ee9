// The oneDNN pooling kernels (src/kernels/cpu/pool.cc) and Kiln's GlobalAveragePool
// (src/kernels/cpu/global_average_pool.cc) against the reference kernels of
// MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool (src/ops/pool.cc, validated on the
// ONNX conformance data), in the plain and the blocked (kiln Pooling) layouts, on shapes that hit their edge cases: odd sizes, channel counts not
// divisible by 8 or 16, strides, asymmetric and auto pads, ceil_mode, dilations, 1-D and 3-D,
// count_include_pad; and what the kernel leaves to the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "layout_test_util.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

using testing::block_by_definition;

using ir::Attribute;

Tensor rnd(const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  uint32_t s = seed * 2654435761u + 777u;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(static_cast<double>(s >> 8) / (1u << 24) * 2.0 - 1.0);
  }
  return t;
}

struct PoolCase {
  std::string op;
  std::vector<int64_t> x;
  ir::AttributeMap attrs;
  int outputs = 1;
};

ir::AttributeMap attrs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> ints,
                       const char* auto_pad = nullptr) {
  ir::AttributeMap m;
  for (const auto& [name, v] : ints) {
    const std::string n = name;
    if (n == "ceil_mode" || n == "count_include_pad" || n == "storage_order")
      m[n] = Attribute::from_int(v[0]);
    else
      m[n] = Attribute::from_ints(v);
  }
  if (auto_pad) m["auto_pad"] = Attribute::from_string(auto_pad);
  return m;
}

struct PoolGraph {
  ir::Graph graph;
  ir::Node* node = nullptr;
  Tensor x;
};

// An ONNX pool node on X, or (c0 > 0) the kiln Pooling twin on X blocked by c0.
std::unique_ptr<PoolGraph> make_graph(const PoolCase& c, uint32_t seed, int64_t c0 = 0) {
  auto g = std::make_unique<PoolGraph>();
  g->x = rnd(c.x, seed);
  if (c0 > 0) g->x = block_by_definition(g->x, c0);
  ir::Value* x = g->graph.get_or_add_value("X");
  x->type() = ir::TensorType{DataType::kFloat32, g->x.shape()};
  std::vector<ir::Value*> outs{g->graph.get_or_add_value("Y")};
  if (c.outputs > 1) outs.push_back(g->graph.get_or_add_value("I"));
  if (c0 > 0) {
    g->node = g->graph.add_node("pool", "Pooling", ops::kKilnDomain, ops::kKilnOpset, {x}, outs);
    g->node->attrs() = c.attrs;
    g->node->attrs()["mode"] = Attribute::from_string(c.op);
    g->node->attrs()["format"] = Attribute::from_string(ops::kFormatBlocked);
    g->node->attrs()["c0"] = Attribute::from_int(c0);
  } else {
    g->node = g->graph.add_node("pool", c.op, ops::kOnnxDomain, 19, {x}, outs);
    g->node->attrs() = c.attrs;
  }
  Status s = ops::infer_node(*g->node);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return g;
}

Expected<Tensor> run_with(const Kernel* kernel, const PoolGraph& g) {
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(*g.node));
  std::vector<RuntimeValue> in{RuntimeValue(g.x)};
  std::vector<RuntimeValue> out(static_cast<size_t>(g.node->num_outputs()));
  ops::KernelContext ctx(*g.node, {&in[0]}, &out);
  KILN_RETURN_IF_ERROR(kernel ? kernel->run(ctx) : schema->kernel_fn()(ctx));
  return out[0].tensor();
}

void expect_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dims(), want.dims());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.data<float>()[i], v = got.data<float>()[i];
    // Max picks an input exactly; the average sums at most a window of values in [-1, 1) in
    // float32 (the reference in double): a few ulp of the window's magnitude.
    ASSERT_LE(std::fabs(v - w), 4e-7 * (1 + std::fabs(w))) << "element " << i << ": got " << v << " want " << w;
  }
}

// The plain ONNX op's reference result is the oracle. Plain layout: global pools run on
// oneDNN, windowed ones only where oneDNN has a jit kernel for NCHW (AVX-512 CPUs; its
// simple_nchw loops elsewhere are no faster than the reference kernel).
// Blocked layouts (kiln Pooling, 2-D, channels a multiple of c0): the oneDNN kernel and
// the kiln reference kernel both give the oracle, blocked by definition.
void check(const PoolCase& c, const std::string& name) {
  SCOPED_TRACE(name);
  auto plain = make_graph(c, 3);
  auto want = run_with(nullptr, *plain);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  const bool global = c.op.rfind("Global", 0) == 0;
  auto k = select_kernel(*plain->node);
  if (global) {
    EXPECT_TRUE(k);
  }
  if (k) {
    if (!global) {
      EXPECT_EQ(k->implementation().find("simple"), std::string::npos) << k->implementation();
    }
    auto got = run_with(k.get(), *plain);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_close(*got, *want);
  }
  for (int64_t c0 : {8, 16}) {
    if (c.x.size() != 4 || c.x[1] % c0 != 0) continue;
    SCOPED_TRACE("c0 " + std::to_string(c0));
    auto blocked = make_graph(c, 3, c0);
    const Tensor want_blocked = block_by_definition(*want, c0);
    auto ref = run_with(nullptr, *blocked);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    expect_close(*ref, want_blocked);
    // oneDNN has jit pooling for the host's block (8 on AVX2, 16 on AVX-512) and only its
    // reference loops for the other, which the kernel declines.
    auto bk = select_kernel(*blocked->node);
    const int64_t host_c0 = __builtin_cpu_supports("avx512f") ? 16 : 8;
    if (c0 != host_c0 && !bk) continue;
    ASSERT_TRUE(bk);
    EXPECT_EQ(bk->implementation().find("simple"), std::string::npos) << bk->implementation();
    auto got = run_with(bk.get(), *blocked);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_close(*got, want_blocked);
  }
}

TEST(OnednnPoolTest, MatchesReference) {
  const std::vector<std::pair<std::string, PoolCase>> cases{
      {"resnet_maxpool", {"MaxPool", {1, 64, 112, 112}, attrs({{"kernel_shape", {3, 3}}, {"pads", {1, 1, 1, 1}},
                                                                 {"strides", {2, 2}}})}},
      {"odd_channels", {"MaxPool", {2, 13, 9, 7}, attrs({{"kernel_shape", {2, 3}}, {"strides", {2, 1}}})}},
      {"asym_pads", {"MaxPool", {1, 16, 8, 8}, attrs({{"kernel_shape", {3, 3}}, {"pads", {0, 1, 2, 1}}})}},
      {"ceil_mode", {"MaxPool", {1, 8, 7, 7}, attrs({{"kernel_shape", {2, 2}}, {"strides", {2, 2}}, {"ceil_mode", {1}}})}},
      {"same_upper", {"MaxPool", {1, 24, 9, 9}, attrs({{"kernel_shape", {3, 3}}, {"strides", {2, 2}}}, "SAME_UPPER")}},
      {"max_1d", {"MaxPool", {2, 7, 15}, attrs({{"kernel_shape", {4}}, {"strides", {3}}})}},
      {"max_3d", {"MaxPool", {1, 3, 5, 6, 7}, attrs({{"kernel_shape", {2, 2, 3}}, {"pads", {1, 0, 1, 1, 1, 1}}})}},
      {"avg_exclude", {"AveragePool", {1, 32, 11, 11}, attrs({{"kernel_shape", {3, 3}}, {"pads", {1, 1, 1, 1}}})}},
      {"avg_include", {"AveragePool", {1, 8, 11, 11},
                       attrs({{"kernel_shape", {3, 3}}, {"pads", {1, 1, 1, 1}}, {"count_include_pad", {1}}})}},
      {"avg_ceil_exclude", {"AveragePool", {1, 16, 7, 7},
                            attrs({{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"ceil_mode", {1}}})}},
      {"global_avg", {"GlobalAveragePool", {2, 2048, 7, 7}, {}}},
      {"global_avg_odd", {"GlobalAveragePool", {1, 17, 5, 3}, {}}},
      {"global_max", {"GlobalMaxPool", {1, 19, 6, 5}, {}}},
      {"global_max_blocked", {"GlobalMaxPool", {2, 16, 6, 5}, {}}},
      {"global_avg_1d", {"GlobalAveragePool", {3, 5, 9}, {}}},
  };
  for (const auto& [name, c] : cases) check(c, name);
}

// uint8 / int8 max pooling (what a QDQ model's pools become): the maximum is one of the inputs,
// so the kernel equals the reference exactly, including the padding, which never wins.
TEST(OnednnPoolTest, Int8MaxPoolMatchesReferenceExactly) {
  const std::vector<std::pair<std::string, PoolCase>> cases{
      {"resnet_maxpool", {"MaxPool", {1, 64, 112, 112}, attrs({{"kernel_shape", {3, 3}}, {"pads", {1, 1, 1, 1}},
                                                                 {"strides", {2, 2}}})}},
      {"odd_channels_ceil", {"MaxPool", {2, 13, 9, 7}, attrs({{"kernel_shape", {2, 3}}, {"ceil_mode", {1}}})}},
      {"max_1d", {"MaxPool", {2, 7, 15}, attrs({{"kernel_shape", {4}}, {"strides", {3}}})}},
  };
  for (DataType dt : {DataType::kUInt8, DataType::kInt8}) {
    for (const auto& [name, c] : cases) {
      SCOPED_TRACE(name + (dt == DataType::kUInt8 ? " uint8" : " int8"));
      auto g = make_graph(c, 5);
      Tensor x = Tensor::make(dt, c.x);
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        const int v = static_cast<int>(std::lround(g->x.data<float>()[i] * 127.5 - 0.5));  // -128..127
        if (dt == DataType::kUInt8)
          x.data<uint8_t>()[i] = static_cast<uint8_t>(v + 128);
        else
          x.data<int8_t>()[i] = static_cast<int8_t>(v);
      }
      g->x = x;
      g->node->input(0)->type() = ir::TensorType{dt, x.shape()};
      ASSERT_TRUE(ops::infer_node(*g->node).ok());
      auto k = select_kernel(*g->node);
      ASSERT_TRUE(k);
      EXPECT_EQ(k->implementation().find("simple"), std::string::npos) << k->implementation();
      auto want = run_with(nullptr, *g);
      auto got = run_with(k.get(), *g);
      ASSERT_TRUE(want.ok() && got.ok());
      ASSERT_EQ(got->dtype(), dt);
      ASSERT_EQ(got->dims(), want->dims());
      EXPECT_EQ(std::memcmp(got->raw_data(), want->raw_data(), want->size_bytes()), 0);
    }
  }
}

// The kernel leaves these to the reference kernel.
TEST(OnednnPoolTest, NotApplicable) {
  const std::vector<std::pair<std::string, PoolCase>> cases{
      {"indices", {"MaxPool", {1, 3, 6, 6}, attrs({{"kernel_shape", {2, 2}}}), 2}},
      {"storage_order", {"MaxPool", {1, 3, 6, 6}, attrs({{"kernel_shape", {2, 2}}, {"storage_order", {1}}})}},
      {"pad_as_large_as_window", {"MaxPool", {1, 3, 6, 6}, attrs({{"kernel_shape", {2, 2}}, {"pads", {2, 2, 2, 2}}})}},
      {"include_pad_ceil_overhang", {"AveragePool", {1, 4, 8, 8},
                                     attrs({{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"ceil_mode", {1}},
                                            {"count_include_pad", {1}}, {"pads", {1, 1, 1, 1}}})}},
  };
  for (const auto& [name, c] : cases) {
    auto g = make_graph(c, 1);
    for (const KernelFactory* f : KernelRegistry::instance().candidates("", c.op, DeviceKind::kCpu))
      EXPECT_FALSE(f->applicable(*g->node).ok()) << name;
  }
}

// oneDNN 2.6 has only its reference implementation for dilated pooling: no fast kernel is
// selected, so the node runs on Kiln's reference kernel (prepare declines oneDNN's "ref").
TEST(OnednnPoolTest, DilatedRunsTheReference) {
  PoolCase c{"MaxPool", {1, 4, 10, 10}, attrs({{"kernel_shape", {3, 3}}, {"dilations", {2, 2}}})};
  auto g = make_graph(c, 5);
  EXPECT_EQ(select_kernel(*g->node), nullptr);
}

// GlobalAveragePool over long windows (PP-OCRv4 rec's squeeze-excite at width 1280: 24x640)
// of values far from zero, where a float32 running sum, as oneDNN's pooling keeps, drifts by
// hundreds of ulp: the kernel's mean stays within an ulp or two of the exact mean, computed
// here in double, in the plain layout and both blocked ones.
TEST(GlobalAveragePoolTest, LongWindowsAreAccurate) {
  const std::vector<int64_t> dims{2, 16, 24, 640};
  Tensor x = rnd(dims, 9);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = 3.0f + 0.25f * x.data<float>()[i];
  const int64_t positions = dims[2] * dims[3];
  std::vector<double> exact(static_cast<size_t>(dims[0] * dims[1]));
  for (size_t r = 0; r < exact.size(); ++r) {
    double sum = 0;
    for (int64_t p = 0; p < positions; ++p) sum += x.data<float>()[static_cast<int64_t>(r) * positions + p];
    exact[r] = sum / static_cast<double>(positions);
  }
  for (int64_t c0 : {0, 8, 16}) {
    SCOPED_TRACE("c0 " + std::to_string(c0));
    auto g = make_graph({"GlobalAveragePool", dims, {}}, 9, c0);
    g->x = c0 ? block_by_definition(x, c0) : x;
    auto k = select_kernel(*g->node);
    ASSERT_TRUE(k);
    EXPECT_EQ(k->implementation(), "kiln:accurate-sum");
    auto got = run_with(k.get(), *g);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    // [N, C/c0, 1, 1, c0] holds channel n * C + c at (n * C/c0 + c / c0) * c0 + c % c0: the
    // plain order, since C is a multiple of c0.
    const Tensor& y = *got;
    ASSERT_EQ(y.num_elements(), static_cast<int64_t>(exact.size()));
    for (size_t r = 0; r < exact.size(); ++r)
      EXPECT_LE(std::fabs(y.data<float>()[r] - exact[r]), 2.5e-7 * exact[r]) << "channel " << r;
  }
}

// Another input shape than prepared for runs the reference kernel.
TEST(OnednnPoolTest, UnpreparedShapeRunsTheReference) {
  PoolCase c{"GlobalAveragePool", {1, 8, 6, 6}, {}};
  auto g = make_graph(c, 2);
  auto k = select_kernel(*g->node);
  ASSERT_TRUE(k);
  g->x = rnd({1, 8, 10, 10}, 4);
  auto got = run_with(k.get(), *g);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->dims(), (std::vector<int64_t>{1, 8, 1, 1}));
}

}  // namespace
}  // namespace kiln::kernels
