// .kiln files with shape buckets: variants round-trip with their shapes, pad values and
// dynamic graph; equal weights of separately compiled variants are stored once; a file
// without buckets loads as one variant; damaged variant tables are errors, never crashes.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "model/kiln_model.h"
#include "model/kiln_model_generated.h"
#include "model/model_format.h"
#include "model_test_util.h"

namespace kiln::model {
namespace {

using test_util::header_of;
using test_util::read_bytes;
using test_util::reseal;
using test_util::temp_dir;

constexpr int64_t kWeightElements = 4096;  // 16 KB of float32: visible in the section size

ir::Value* add_value(ir::Graph& g, const std::string& name, DataType dtype, Shape shape) {
  ir::Value* v = *g.add_value(name);
  v->type().dtype = dtype;
  v->type().shape = std::move(shape);
  return v;
}

// y = x + w with x of shape [batch, kWeightElements]; each call makes its own copy of the
// weight (as separate compiles of one model do), with `seed` choosing its values.
std::shared_ptr<ir::Graph> add_graph(Dim batch, int seed = 1) {
  auto g = std::make_shared<ir::Graph>("main");
  ir::Value* x = add_value(*g, "x", DataType::kFloat32, Shape{batch, kWeightElements});
  ir::Value* w = add_value(*g, "w", DataType::kFloat32, Shape{kWeightElements});
  std::vector<float> values(kWeightElements);
  for (int64_t i = 0; i < kWeightElements; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i * seed);
  w->set_initializer(Tensor::from_vector<float>(values));
  ir::Value* y = add_value(*g, "y", DataType::kFloat32, Shape{batch, kWeightElements});
  g->inputs() = {x};
  g->add_node("add", "Add", "", 17, {x, w}, {y});
  g->outputs() = {y};
  g->opset_imports()[""] = 17;
  return g;
}

ModelInfo info() {
  ModelInfo i;
  i.kiln_version = "0.1.0";
  i.target_arch = "x86_64";
  return i;
}

BucketedModel three_buckets() {
  BucketedModel m;
  m.kind = BucketKind::kBatch;
  for (int64_t b : {1, 4, 8}) m.variants.push_back({{{"x", {b, kWeightElements}}}, add_graph(Dim(b))});
  m.pad_values["x"] = -1.5;
  m.dynamic_graph = add_graph(Dim::symbolic("batch"));
  return m;
}

std::vector<uint8_t> bucketed_bytes() {
  const std::string path = temp_dir() + "/buckets.kiln";
  Status s = write_model(three_buckets(), info(), path);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return read_bytes(path);
}

TEST(ModelBuckets, VariantsRoundTripWithWeightsStoredOnce) {
  const std::string path = temp_dir() + "/roundtrip.kiln";
  ASSERT_TRUE(write_model(three_buckets(), info(), path).ok());
  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->bucket_kind, BucketKind::kBatch);
  ASSERT_EQ(loaded->variants.size(), 3u);
  const int64_t batches[] = {1, 4, 8};
  for (size_t k = 0; k < 3; ++k) {
    const LoadedVariant& v = loaded->variants[k];
    ASSERT_EQ(v.shapes.size(), 1u);
    EXPECT_EQ(v.shapes.at("x"), (std::vector<int64_t>{batches[k], kWeightElements}));
    EXPECT_EQ(v.graph->inputs()[0]->shape().to_string(), Shape({batches[k], kWeightElements}).to_string());
    const Tensor* w = v.graph->find_value("w")->initializer();
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->data<float>()[10], 10.0f);
  }
  EXPECT_EQ(loaded->variants[0].graph, loaded->graph);  // the first variant is the main graph
  EXPECT_EQ(loaded->pad_values.at("x"), -1.5);
  ASSERT_NE(loaded->dynamic_graph, nullptr);
  EXPECT_FALSE(loaded->dynamic_graph->inputs()[0]->shape().is_static());
  // Four graphs, one weight: the section holds it once, and every graph views those bytes.
  EXPECT_EQ(loaded->weight_bytes, static_cast<size_t>(kWeightElements * 4));
  EXPECT_EQ(loaded->variants[2].graph->find_value("w")->initializer()->raw_data(),
            loaded->graph->find_value("w")->initializer()->raw_data());
  EXPECT_EQ(loaded->dynamic_graph->find_value("w")->initializer()->raw_data(),
            loaded->graph->find_value("w")->initializer()->raw_data());
}

TEST(ModelBuckets, DifferentWeightsAreNotMerged) {
  BucketedModel m = three_buckets();
  m.variants[1].graph = add_graph(Dim(4), /*seed=*/3);  // same size, other values
  const std::string path = temp_dir() + "/different.kiln";
  ASSERT_TRUE(write_model(m, info(), path).ok());
  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->weight_bytes, static_cast<size_t>(2 * kWeightElements * 4));
  EXPECT_EQ(loaded->variants[1].graph->find_value("w")->initializer()->data<float>()[10], 30.0f);
  EXPECT_EQ(loaded->variants[2].graph->find_value("w")->initializer()->data<float>()[10], 10.0f);
}

TEST(ModelBuckets, AFileWithoutBucketsIsOneVariant) {
  const std::string path = temp_dir() + "/single.kiln";
  ASSERT_TRUE(write_model(*add_graph(Dim(2)), info(), path).ok());
  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->bucket_kind, BucketKind::kNone);
  ASSERT_EQ(loaded->variants.size(), 1u);
  EXPECT_EQ(loaded->variants[0].graph, loaded->graph);
  EXPECT_TRUE(loaded->variants[0].shapes.empty());
  EXPECT_EQ(loaded->dynamic_graph, nullptr);
}

TEST(ModelBuckets, WriterRejectsBadBucketSets) {
  BucketedModel none;
  EXPECT_FALSE(write_model(none, info(), temp_dir() + "/none.kiln").ok());
  BucketedModel null_graph = three_buckets();
  null_graph.variants[1].graph = nullptr;
  Status s = write_model(null_graph, info(), temp_dir() + "/null.kiln");
  EXPECT_NE(s.message().find("variant 1 has no graph"), std::string::npos) << s.to_string();
}

TEST(ModelBuckets, EveryTruncationIsAnError) {
  const std::vector<uint8_t> good = bucketed_bytes();
  ASSERT_TRUE(load_model_from_memory(good.data(), good.size()).ok());
  for (size_t n = 0; n < good.size(); n += 97) {
    auto loaded = load_model_from_memory(good.data(), n);
    EXPECT_FALSE(loaded.ok()) << "truncated to " << n;
  }
}

TEST(ModelBuckets, ResealedMetadataDamageNeverCrashes) {
  const std::vector<uint8_t> good = bucketed_bytes();
  const FileHeader h = header_of(good);
  std::mt19937_64 rng(11);
  int errors = 0;
  const int total = 400;
  for (int i = 0; i < total; ++i) {
    std::vector<uint8_t> b = good;
    size_t pos = h.metadata_offset + rng() % h.metadata_size;
    b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
    reseal(b);
    auto loaded = load_model_from_memory(b.data(), b.size());
    if (!loaded.ok()) {
      ++errors;
      EXPECT_EQ(loaded.status().message().find('\n'), std::string::npos);
    } else {
      for (const LoadedVariant& v : loaded->variants) EXPECT_TRUE(ir::verify(*v.graph).ok());
    }
  }
  EXPECT_GT(errors, 0);
}

// Patches one field of the stored metadata behind a valid checksum and expects an error
// naming the fault.
struct Case {
  const char* name;
  std::function<bool(fb::Model*)> corrupt;
  const char* expected;
};

fb::Variant* variant(fb::Model* m, uint32_t k) { return m->mutable_variants()->GetMutableObject(k); }

TEST(ModelBuckets, DamagedVariantTablesAreErrors) {
  const std::vector<Case> cases = {
      {"bucket kind out of range", [](fb::Model* m) { return m->mutate_bucket_kind(9); },
       "shape buckets: bucket kind 9 is not valid"},
      {"variants without a bucket kind", [](fb::Model* m) { return m->mutate_bucket_kind(0); },
       "has no bucket kind but holds variants"},
      {"negative bucket dim",
       [](fb::Model* m) { return variant(m, 1)->mutable_shapes()->GetMutableObject(0)->mutable_dims()->Mutate(0, -3), true; },
       "variant 1 gives input 'x' shape [-3,4096], its graph declares [4,4096]"},
      {"bucket dim disagreeing with the graph",
       [](fb::Model* m) { return variant(m, 2)->mutable_shapes()->GetMutableObject(0)->mutable_dims()->Mutate(0, 5), true; },
       "variant 2 gives input 'x' shape [5,4096]"},
      {"variant node input out of range",
       [](fb::Model* m) {
         return variant(m, 1)->mutable_graph()->mutable_nodes()->GetMutableObject(0)->mutable_inputs()->Mutate(1, 9999),
                true;
       },
       "variant 1: graph 'main' node 0 ('add') input 1 refers to value 9999 of 3"},
      {"variant weight outside the weight section",
       [](fb::Model* m) {
         return variant(m, 2)->mutable_graph()->mutable_values()->GetMutableObject(1)->mutable_initializer()->mutate_offset(
             1 << 20);
       },
       "lies outside the weight section"},
      {"variant output that is another value",
       [](fb::Model* m) { return variant(m, 1)->mutable_graph()->mutable_outputs()->Mutate(0, 1), true; },
       "variant 1 output 0 is 'w'"},
      {"variant input dtype differing from the main graph",
       [](fb::Model* m) {
         return variant(m, 2)->mutable_graph()->mutable_values()->GetMutableObject(0)->mutate_dtype(
             static_cast<int32_t>(DataType::kInt32));
       },
       "variant 2 input 0 is 'x' int32"},
      {"dynamic graph node output on an input",
       [](fb::Model* m) {
         return m->mutable_dynamic_graph()->mutable_nodes()->GetMutableObject(0)->mutable_outputs()->Mutate(0, 0), true;
       },
       "dynamic graph: graph 'main' node 0 ('add') output 0"},
  };
  const std::vector<uint8_t> good = bucketed_bytes();
  const FileHeader h = header_of(good);
  for (const Case& c : cases) {
    std::vector<uint8_t> b = good;
    fb::Model* m = fb::GetMutableModel(b.data() + h.metadata_offset);
    ASSERT_TRUE(c.corrupt(m)) << c.name;
    reseal(b);
    auto loaded = load_model_from_memory(b.data(), b.size());
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_NE(loaded.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << loaded.status().message();
    EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss) << c.name;
  }
}

}  // namespace
}  // namespace kiln::model
