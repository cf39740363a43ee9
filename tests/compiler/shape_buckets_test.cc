// Shape buckets in the compile driver (--dynamic-batch-size / --dynamic-dims / --pad-value
// parsing, one compiled variant per bucket plus the dynamic one) and the run-time helpers
// that infer true output shapes and pad and slice tensors.
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include "compiler/compiler.h"
#include "runtime/shape_buckets.h"

namespace kiln::compiler {
namespace {

// y = Reshape(Relu(x), [N, -1]) with N read by Shape -> Slice -> Concat: the chain the
// compiler folds in a bucket and that the dynamic variant keeps.
constexpr const char* kFlatten = R"(
<ir_version: 8, opset_import: ["" : 13]>
flatten (float[N, 4, W] x) => (float[N, K] y)
<int64[1] st = {0}, int64[1] en = {1}, int64[1] m1 = {-1}> {
  r = Relu(x)
  sh = Shape(r)
  n = Slice(sh, st, en)
  target = Concat<axis = 0>(n, m1)
  y = Reshape(r, target)
}
)";

Expected<CompiledModel> compile(const char* text, const CompileOptions& options) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  if (!st.IsOK()) return invalid_argument("ONNX text does not parse: %s", st.ErrorMessage().c_str());
  std::string bytes = m.SerializeAsString();
  return compile_onnx_bytes(bytes.data(), bytes.size(), "test.onnx", options);
}

std::vector<int64_t> dims_of(const ir::Value* v) {
  std::vector<int64_t> d;
  for (const Dim& x : v->shape().dims()) d.push_back(x.is_static() ? x.value : -1);
  return d;
}

TEST(ShapeBuckets, ParsesTheOptions) {
  auto batch = parse_dynamic_batch("8,1,4");
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  EXPECT_EQ(*batch, (std::vector<int64_t>{1, 4, 8}));
  for (const char* bad : {"", "0", "1,a", "2,2", "1,,4", "-1"})
    EXPECT_FALSE(parse_dynamic_batch(bad).ok()) << bad;

  auto dims = parse_dynamic_dims("x:1,2;y:3;x:4,5;y:6");
  ASSERT_TRUE(dims.ok()) << dims.status().to_string();
  ASSERT_EQ(dims->size(), 2u);
  EXPECT_EQ((*dims)[0], (InputShapes{{"x", {1, 2}}, {"y", {3}}}));
  EXPECT_EQ((*dims)[1], (InputShapes{{"x", {4, 5}}, {"y", {6}}}));
  auto unequal = parse_dynamic_dims("x:1,2;y:3;x:4,5");
  ASSERT_FALSE(unequal.ok());
  EXPECT_NE(unequal.status().message().find("once per bucket"), std::string::npos);
  EXPECT_FALSE(parse_dynamic_dims("x:1,2;x:1,2").ok());  // the same bucket twice
  EXPECT_FALSE(parse_dynamic_dims("").ok());
  EXPECT_FALSE(parse_dynamic_dims("x:1,-2").ok());

  auto pads = parse_pad_values("x:0;mask:-1.5");
  ASSERT_TRUE(pads.ok()) << pads.status().to_string();
  EXPECT_EQ(*pads, (std::map<std::string, double>{{"x", 0.0}, {"mask", -1.5}}));
  for (const char* bad : {"x", "x:", "x:abc", "x:1;x:2", ":3", "x:nan"})
    EXPECT_FALSE(parse_pad_values(bad).ok()) << bad;
}

TEST(ShapeBuckets, CompilesOneVariantPerBatchBucketAndTheDynamicOne) {
  CompileOptions options;
  options.dynamic_batch = {1, 4};
  options.input_shapes["x"] = {99, 4, 6};  // axis 0 is replaced by each batch size
  options.pad_values["x"] = 2.0;
  std::vector<std::string> progress;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  auto c = compile(kFlatten, options);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->bucket_kind, model::BucketKind::kBatch);
  ASSERT_EQ(c->variants.size(), 2u);
  EXPECT_EQ(c->graph, c->variants[0].graph);
  for (size_t k = 0; k < 2; ++k) {
    const int64_t n = k == 0 ? 1 : 4;
    EXPECT_EQ(c->variants[k].shapes.at("x"), (std::vector<int64_t>{n, 4, 6}));
    const ir::Graph& g = *c->variants[k].graph;
    EXPECT_EQ(dims_of(g.inputs()[0]), (std::vector<int64_t>{n, 4, 6}));
    EXPECT_EQ(dims_of(g.outputs()[0]), (std::vector<int64_t>{n, 24}));
    for (const auto& node : g.nodes()) EXPECT_NE(node->op_type(), "Shape");  // folded in a bucket
  }
  ASSERT_NE(c->dynamic_graph, nullptr);
  EXPECT_EQ(dims_of(c->dynamic_graph->inputs()[0]), (std::vector<int64_t>{-1, 4, 6}));
  EXPECT_EQ(c->pad_values.at("x"), 2.0);
  ASSERT_EQ(progress.size(), 3u);  // two buckets and the dynamic variant
  EXPECT_NE(progress[1].find("bucket 2/2 (x:4,4,6)"), std::string::npos) << progress[1];

  // The true output shape of an in-between batch, from the dynamic graph.
  auto out = rt::infer_output_dims(*c->dynamic_graph, {{0, {3, 4, 6}}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, (std::vector<std::vector<int64_t>>{{3, 24}}));
}

TEST(ShapeBuckets, DimsBucketsAreSortedAndTheDynamicGraphInfersEveryWidth) {
  CompileOptions options;
  options.dynamic_dims = {{{"x", {2, 4, 16}}}, {{"x", {2, 4, 8}}}};
  options.input_shapes.clear();
  auto c = compile(kFlatten, options);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->bucket_kind, model::BucketKind::kDims);
  ASSERT_EQ(c->variants.size(), 2u);
  EXPECT_EQ(c->variants[0].shapes.at("x"), (std::vector<int64_t>{2, 4, 8}));  // smallest first
  EXPECT_EQ(c->variants[1].shapes.at("x"), (std::vector<int64_t>{2, 4, 16}));
  EXPECT_EQ(dims_of(c->dynamic_graph->inputs()[0]), (std::vector<int64_t>{-1, 4, -1}));
  for (int64_t w : {1, 5, 8, 13, 40}) {
    auto out = rt::infer_output_dims(*c->dynamic_graph, {{0, {2, 4, w}}});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, (std::vector<std::vector<int64_t>>{{2, 4 * w}})) << w;
  }
}

TEST(ShapeBuckets, BucketErrorsNameTheFault) {
  struct Case {
    std::function<void(CompileOptions&)> set;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {[](CompileOptions& o) { o.dynamic_batch = {1, 2}; }, "only axis 0 may stay open"},
      {[](CompileOptions& o) { o.dynamic_dims = {{{"z", {2, 4, 8}}}}; }, "--dynamic-dims names 'z'"},
      {[](CompileOptions& o) { o.dynamic_dims = {{{"x", {2, 5, 8}}}}; }, "bucket 1 (x:2,5,8)"},
      {[](CompileOptions& o) {
         o.dynamic_dims = {{{"x", {2, 4, 8}}}};
         o.pad_values["y"] = 1;
       },
       "--pad-value names 'y', which is not a bucketed input"},
      {[](CompileOptions& o) { o.pad_values["x"] = 1; }, "--pad-value needs"},
      {[](CompileOptions& o) {
         o.dynamic_dims = {{{"x", {2, 4, 8}}}};
         o.dynamic_batch = {1};
       },
       "not both"},
  };
  for (const Case& c : cases) {
    CompileOptions options;
    c.set(options);
    auto compiled = compile(kFlatten, options);
    ASSERT_FALSE(compiled.ok()) << c.expected;
    EXPECT_NE(compiled.status().to_string().find(c.expected), std::string::npos) << compiled.status().to_string();
  }
}

TEST(ShapeBuckets, PadsAfterTheDataAndSlicesTheLeadingBlock) {
  Tensor src = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto padded = rt::pad_tensor(src, {3, 5}, 9.0);
  ASSERT_TRUE(padded.ok()) << padded.status().to_string();
  const std::vector<float> expected = {1, 2, 3, 9, 9, 4, 5, 6, 9, 9, 9, 9, 9, 9, 9};
  ASSERT_EQ(padded->dims(), (std::vector<int64_t>{3, 5}));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(padded->data<float>()[i], expected[i]) << i;
  std::vector<float> block(4);
  rt::copy_leading_block(*padded, {2, 2}, block.data());
  EXPECT_EQ(block, (std::vector<float>{1, 2, 4, 5}));
  EXPECT_FALSE(rt::pad_tensor(src, {1, 5}, 0).ok());  // smaller than the data
  EXPECT_FALSE(rt::pad_tensor(src, {2, 3, 1}, 0).ok());  // another rank
  Tensor ids = Tensor::from_vector<int64_t>({7, 8}, {1, 2});
  auto padded_ids = rt::pad_tensor(ids, {1, 4}, 0);
  ASSERT_TRUE(padded_ids.ok());
  EXPECT_EQ(padded_ids->to_int64_vector(), (std::vector<int64_t>{7, 8, 0, 0}));
}

}  // namespace
}  // namespace kiln::compiler
