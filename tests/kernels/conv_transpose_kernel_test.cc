// The ConvTranspose kernels (src/kernels/cpu/conv_transpose.cc: oneDNN's, a direct one for windows
// that do not overlap) against the reference
// ConvTranspose kernel (src/ops/conv.cc, validated on the ONNX conformance data): strides,
// pads, output_padding, dilations, groups, odd channel counts, with and without bias; and
// what it leaves to the reference.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

using ir::Attribute;

Tensor rnd(const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  uint32_t s = seed * 2654435761u + 4242u;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(static_cast<double>(s >> 8) / (1u << 24) * 2.0 - 1.0);
  }
  return t;
}

struct Case {
  std::string name;
  std::vector<int64_t> x, w;
  bool bias;
  ir::AttributeMap attrs;
};

struct Graph {
  ir::Graph graph;
  ir::Node* node = nullptr;
  Tensor x, w, b;
};

std::unique_ptr<Graph> make(const Case& c) {
  auto g = std::make_unique<Graph>();
  g->x = rnd(c.x, 1);
  g->w = rnd(c.w, 2);
  ir::Value* x = g->graph.get_or_add_value("X");
  x->type() = ir::TensorType{DataType::kFloat32, g->x.shape()};
  ir::Value* w = g->graph.get_or_add_value("W");
  w->type() = ir::TensorType{DataType::kFloat32, g->w.shape()};
  w->set_initializer(g->w);
  std::vector<ir::Value*> ins{x, w};
  if (c.bias) {
    const int64_t group = c.attrs.count("group") ? c.attrs.at("group").i : 1;
    g->b = rnd({c.w[1] * group}, 3);
    ir::Value* b = g->graph.get_or_add_value("B");
    b->type() = ir::TensorType{DataType::kFloat32, g->b.shape()};
    b->set_initializer(g->b);
    ins.push_back(b);
  }
  g->node = g->graph.add_node(c.name, "ConvTranspose", "", 11, ins, {g->graph.get_or_add_value("Y")});
  g->node->attrs() = c.attrs;
  EXPECT_TRUE(ops::infer_node(*g->node).ok());
  return g;
}

Expected<Tensor> run(const Graph& g, const Kernel* k) {
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(*g.node));
  std::vector<RuntimeValue> in{RuntimeValue(g.x), RuntimeValue(g.w)};
  if (g.b.defined()) in.push_back(RuntimeValue(g.b));
  std::vector<const RuntimeValue*> ptrs;
  for (const RuntimeValue& v : in) ptrs.push_back(&v);
  std::vector<RuntimeValue> out(1);
  ops::KernelContext ctx(*g.node, ptrs, &out);
  KILN_RETURN_IF_ERROR(k ? k->run(ctx) : schema->kernel_fn()(ctx));
  return out[0].tensor();
}

ir::AttributeMap attrs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> ints) {
  ir::AttributeMap m;
  for (const auto& [name, v] : ints)
    m[name] = std::string(name) == "group" ? Attribute::from_int(v[0]) : Attribute::from_ints(v);
  return m;
}

TEST(OnednnConvTransposeTest, MatchesReference) {
  const std::vector<Case> cases{
      {"ocr_upsample", {1, 24, 40, 40}, {24, 24, 2, 2}, false, attrs({{"strides", {2, 2}}})},
      {"bias_pads", {1, 5, 7, 6}, {5, 3, 3, 3}, true, attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}})},
      {"output_padding", {2, 4, 5, 5}, {4, 6, 3, 3}, true,
       attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}, {"output_padding", {1, 1}}})},
      {"dilated", {1, 3, 6, 6}, {3, 2, 3, 3}, false, attrs({{"dilations", {2, 2}}})},
      {"grouped", {1, 8, 5, 5}, {8, 3, 3, 3}, true, attrs({{"group", {2}}, {"strides", {1, 2}}})},
      {"asym", {1, 7, 9, 4}, {7, 9, 4, 2}, true, attrs({{"strides", {3, 1}}, {"pads", {0, 1, 2, 0}}})},
      // Windows that do not overlap run on the direct kernel (below): odd sizes, a bias, two images.
      {"nonoverlapping", {2, 5, 7, 6}, {5, 3, 2, 3}, true, attrs({{"strides", {2, 3}}})},
      {"ocr_head", {1, 24, 9, 10}, {24, 1, 2, 2}, true, attrs({{"strides", {2, 2}}})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = make(c);
    auto k = select_kernel(*g->node);
    ASSERT_TRUE(k);
    auto want = run(*g, nullptr);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    auto got = run(*g, k.get());
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->dims(), want->dims());
    // Inputs and weights in [-1, 1): each output sums at most C/g * kH * kW products plus the
    // bias, in different orders on the two sides.
    const double terms = static_cast<double>(c.w[0] / (c.attrs.count("group") ? c.attrs.at("group").i : 1) * c.w[2] * c.w[3] + 1);
    for (int64_t i = 0; i < want->num_elements(); ++i)
      ASSERT_NEAR(got->data<float>()[i], want->data<float>()[i], terms * FLT_EPSILON * 2) << "element " << i;
  }
}

// Non-overlapping windows (strides equal to the kernel, no pads) take the direct kernel, others
// oneDNN's.
TEST(OnednnConvTransposeTest, NonOverlappingWindowsRunOnTheDirectKernel) {
  auto upsample = make({"up", {1, 24, 40, 40}, {24, 24, 2, 2}, false, attrs({{"strides", {2, 2}}})});
  auto k = select_kernel(*upsample->node);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->implementation().rfind("kiln:direct", 0), 0u) << k->implementation();
  auto padded = make({"padded", {1, 5, 7, 6}, {5, 3, 3, 3}, true, attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}})});
  k = select_kernel(*padded->node);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->implementation().rfind("onednn:", 0), 0u) << k->implementation();
}

TEST(OnednnConvTransposeTest, LeavesOtherFormsToTheReference) {
  const std::vector<Case> cases{
      {"auto_pad", {1, 4, 5, 5}, {4, 4, 3, 3}, false, {{"auto_pad", Attribute::from_string("SAME_UPPER")}}},
      {"output_shape", {1, 4, 5, 5}, {4, 4, 3, 3}, false, attrs({{"output_shape", {1, 4, 10, 10}}, {"strides", {2, 2}}})},
      {"output_padding_past_pad", {1, 4, 5, 5}, {4, 4, 3, 3}, false, attrs({{"strides", {2, 2}}, {"output_padding", {1, 1}}})},
      {"one_d", {1, 4, 9}, {4, 4, 3}, false, {}},
  };
  for (const Case& c : cases) {
    auto g = make(c);
    EXPECT_EQ(select_kernel(*g->node), nullptr) << c.name;
    auto want = run(*g, nullptr);
    EXPECT_TRUE(want.ok()) << c.name << ": " << want.status().to_string();
  }
}

}  // namespace
}  // namespace kiln::kernels
