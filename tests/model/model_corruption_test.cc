// Hostile .kiln files: truncations, bit flips, random bytes, huge header fields, and
// metadata that is corrupted behind a valid checksum. Each must give an error, never a
// crash (run under ASan/UBSan in the sanitizer build).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
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
using test_util::set_header;
using test_util::temp_dir;

ir::Value* add_value(ir::Graph& g, const std::string& name, DataType dtype, Shape shape) {
  ir::Value* v = *g.add_value(name);
  v->type().dtype = dtype;
  v->type().shape = std::move(shape);
  return v;
}

// A small model (a few KB) with initializers, a string tensor, attributes and an If
// whose branches read an outer-scope value.
//   values: 0 x, 1 w, 2 names, 3 cond, 4 y, 5 z, 6 u
//   nodes:  0 add(x, w) -> y;  1 if(cond) -> z;  2 lookup(y, <omitted>) -> u
std::vector<uint8_t> small_model_bytes() {
  ir::Graph g("main");
  ir::Value* x = add_value(g, "x", DataType::kFloat32, Shape{Dim::symbolic("n"), 4});
  ir::Value* w = add_value(g, "w", DataType::kFloat32, Shape{4});
  w->set_initializer(Tensor::from_vector<float>({1, 2, 3, 4}));
  ir::Value* names = add_value(g, "names", DataType::kString, Shape{2});
  names->set_initializer(Tensor::from_vector<std::string>({"cat", "dog"}));
  ir::Value* cond = add_value(g, "cond", DataType::kBool, Shape{});
  ir::Value* y = add_value(g, "y", DataType::kFloat32, Shape{Dim::symbolic("n"), 4});
  ir::Value* z = add_value(g, "z", DataType::kFloat32, Shape());
  ir::Value* u = add_value(g, "u", DataType::kString, Shape{Dim::symbolic("n")});
  g.inputs() = {x, cond};
  ir::Node* add = g.add_node("add", "Add", "", 17, {x, w}, {y});
  add->attrs()["axis"] = ir::Attribute::from_int(1);
  auto branch = [&](const std::string& name) {
    auto b = std::make_shared<ir::Graph>(name);
    ir::Value* by = add_value(*b, "y", DataType::kFloat32, Shape{Dim::symbolic("n"), 4});
    by->set_outer_scope(true);
    ir::Value* k = add_value(*b, name + "_k", DataType::kFloat32, Shape{1});
    k->set_initializer(Tensor::from_vector<float>({0.5f}));
    ir::Value* o = add_value(*b, name + "_o", DataType::kFloat32, Shape{Dim::symbolic("n"), 4});
    b->add_node(name + "_mul", "Mul", "", 17, {by, k}, {o});
    b->outputs() = {o};
    return b;
  };
  ir::Node* node_if = g.add_node("if", "If", "", 17, {cond}, {z});
  node_if->attrs()["then_branch"] = ir::Attribute::from_graph(branch("then"));
  node_if->attrs()["else_branch"] = ir::Attribute::from_graph(branch("else"));
  ir::Node* lookup = g.add_node("lookup", "Lookup", "com.kiln.test", 1, {y, nullptr}, {u});
  lookup->attrs()["labels"] = ir::Attribute::from_ints({3, 1, 4});
  lookup->attrs()["table"] = ir::Attribute::from_tensor(Tensor::from_vector<int32_t>({7, 8}));
  g.outputs() = {z, u};
  g.opset_imports()[""] = 17;
  g.metadata()["k"] = "v";
  ModelInfo info;
  info.kiln_version = "0.1.0";
  info.target_arch = "x86_64";
  const std::string path = temp_dir() + "/small.kiln";
  Status s = write_model(g, info, path);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return read_bytes(path);
}

class CorruptionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { bytes_ = new std::vector<uint8_t>(small_model_bytes()); }
  static void TearDownTestSuite() { delete bytes_; }

  // Loads `b` from memory; returns the error (OK if it loaded).
  static Status load(const std::vector<uint8_t>& b) {
    return load_model_from_memory(b.data(), b.size()).status();
  }
  static std::vector<uint8_t> good() { return *bytes_; }

  static std::vector<uint8_t>* bytes_;
};
std::vector<uint8_t>* CorruptionTest::bytes_ = nullptr;

TEST_F(CorruptionTest, TheUncorruptedModelLoads) {
  Status s = load(good());
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_GT(good().size(), 4096u);
}

TEST_F(CorruptionTest, EveryTruncationIsAnError) {
  const std::vector<uint8_t> b = good();
  int failed = 0;
  for (size_t len = 0; len < b.size(); ++len) {
    std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    Status s = load(t);
    EXPECT_FALSE(s.ok()) << "truncated to " << len;
    failed += !s.ok();
  }
  EXPECT_EQ(failed, static_cast<int>(b.size()));
  std::vector<uint8_t> t(b.begin(), b.begin() + 1000);
  Status s = load(t);
  EXPECT_EQ(s.message(),
            "<memory>: truncated: file is 1000 bytes, header says " + std::to_string(b.size()));
}

TEST_F(CorruptionTest, TruncatedFilesOnDiskAreErrorsNamingTheFile) {
  const std::vector<uint8_t> b = good();
  const std::string path = temp_dir() + "/truncated.kiln";
  for (size_t len : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{200},
                     size_t{4095}, size_t{4096}, b.size() - 1}) {
    test_util::write_bytes(
        path, std::vector<uint8_t>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len)));
    auto loaded = load_model(path);
    ASSERT_FALSE(loaded.ok()) << len;
    EXPECT_EQ(
        loaded.status().message().rfind(path + ": truncated: file is " + std::to_string(len), 0),
        0u)
        << loaded.status().message();
  }
}

TEST_F(CorruptionTest, BitFlipsAfterTheHeaderFailTheChecksum) {
  const std::vector<uint8_t> good_bytes = good();
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> b = good_bytes;
    size_t pos = kHeaderSize + rng() % (b.size() - kHeaderSize);
    b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
    Status s = load(b);
    ASSERT_FALSE(s.ok()) << "bit flip at " << pos;
    EXPECT_EQ(s.message(), "<memory>: checksum mismatch (file is corrupted)");
  }
}

TEST_F(CorruptionTest, BitFlipsInTheHeaderAreErrors) {
  // The checksum covers the header fields too, so every header bit is load-bearing.
  const std::vector<uint8_t> good_bytes = good();
  for (size_t byte = 0; byte < kHeaderSize; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> b = good_bytes;
      b[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(load(b).ok()) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST_F(CorruptionTest, HugeHeaderFieldsAreErrors) {
  const std::vector<uint64_t> huge = {std::numeric_limits<uint64_t>::max(),
                                      std::numeric_limits<uint64_t>::max() - 63,
                                      uint64_t{1} << 63,
                                      uint64_t{1} << 32,
                                      0xffffffffu,
                                      good().size() + 1,
                                      good().size() * 2,
                                      0};
  int cases = 0;
  for (uint64_t FileHeader::*field :
       {&FileHeader::metadata_offset, &FileHeader::metadata_size, &FileHeader::weight_offset,
        &FileHeader::weight_size, &FileHeader::file_size}) {
    for (uint64_t v : huge) {
      for (bool resealed : {false, true}) {
        std::vector<uint8_t> b = good();
        FileHeader h = header_of(b);
        if (h.*field == v) continue;
        h.*field = v;
        set_header(b, h);
        if (resealed) reseal(b);
        EXPECT_FALSE(load(b).ok()) << "field value " << v;
        ++cases;
      }
    }
  }
  for (uint32_t version : {0u, 2u, 0xffffffffu}) {
    std::vector<uint8_t> b = good();
    FileHeader h = header_of(b);
    h.format_version = version;
    set_header(b, h);
    Status s = load(b);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_NE(s.message().find("format version " + std::to_string(version) + " is not supported"),
              std::string::npos)
        << s.message();
    ++cases;
  }
  {
    std::vector<uint8_t> b = good();
    FileHeader h = header_of(b);
    h.flags = 0x80000000u;
    set_header(b, h);
    EXPECT_EQ(load(b).code(), StatusCode::kUnsupported);
    ++cases;
  }
  {
    std::vector<uint8_t> b = good();
    b[0] = 'X';
    Status s = load(b);
    EXPECT_EQ(s.message(), "<memory>: not a .kiln model (bad magic at offset 0)");
    ++cases;
  }
  EXPECT_GE(cases, 80);
}

TEST_F(CorruptionTest, RandomBytesAreErrors) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 60; ++i) {
    size_t size = rng() % 9000;
    std::vector<uint8_t> b(size);
    for (auto& c : b) c = static_cast<uint8_t>(rng());
    EXPECT_FALSE(load(b).ok()) << "random file " << i;
  }
  // Random metadata behind a well-formed, sealed header: only the FlatBuffers verifier
  // stands between these bytes and the parser.
  for (int i = 0; i < 60; ++i) {
    size_t meta = 8 + (rng() % 4000) / 8 * 8;
    std::vector<uint8_t> m(meta);
    for (auto& c : m) c = static_cast<uint8_t>(rng());
    if (i % 2) std::memcpy(m.data() + 4, "KLNM", 4);  // get past the identifier check too
    std::vector<uint8_t> b = test_util::assemble(m.data(), m.size(), 64 * (rng() % 4));
    EXPECT_FALSE(load(b).ok()) << "random metadata " << i;
  }
}

// Random damage to the metadata with the checksum recomputed: the verifier and the
// semantic checks must catch what matters. Some edits are harmless (a byte of a name), so
// an OK load is allowed here, but then the graph must still verify.
TEST_F(CorruptionTest, ResealedMetadataDamageNeverCrashes) {
  const std::vector<uint8_t> good_bytes = good();
  const FileHeader h = header_of(good_bytes);
  std::mt19937_64 rng(7);
  int errors = 0;
  const int total = 600;
  for (int i = 0; i < total; ++i) {
    std::vector<uint8_t> b = good_bytes;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t pos = h.metadata_offset + rng() % h.metadata_size;
      switch (rng() % 3) {
        case 0:
          b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          b[pos] = static_cast<uint8_t>(rng());
          break;
        default:
          b[pos] = (rng() % 2) ? 0xff : 0x00;
          break;
      }
    }
    reseal(b);
    auto loaded = load_model_from_memory(b.data(), b.size());
    if (!loaded.ok()) {
      ++errors;
      EXPECT_EQ(loaded.status().message().rfind("<memory>: ", 0), 0u) << loaded.status().message();
      EXPECT_EQ(loaded.status().message().find('\n'), std::string::npos);
    } else {
      EXPECT_TRUE(ir::verify(*loaded->graph).ok());
    }
  }
  std::printf("resealed metadata damage: %d of %d rejected\n", errors, total);
  EXPECT_GT(errors, total / 3);
}

// Targeted corruptions behind a valid checksum, each aimed at one semantic check. The
// writer stores every scalar (ForceDefaults), so each field can be patched in place.
struct SemanticCase {
  const char* name;
  std::function<bool(fb::Model*)> corrupt;  // false if the patch could not be applied
  const char* expected;                     // substring of the error message
};

fb::Graph* main_graph(fb::Model* m) { return m->mutable_graph(); }
fb::Node* node(fb::Model* m, uint32_t i) {
  return main_graph(m)->mutable_nodes()->GetMutableObject(i);
}
fb::ValueDef* value(fb::Model* m, uint32_t i) {
  return main_graph(m)->mutable_values()->GetMutableObject(i);
}
fb::Attr* attr(fb::Model* m, uint32_t node_index, const char* name) {
  auto* attrs = node(m, node_index)->mutable_attrs();
  for (uint32_t i = 0; i < attrs->size(); ++i)
    if (attrs->Get(i)->name()->str() == name) return attrs->GetMutableObject(i);
  return nullptr;
}
fb::Graph* then_branch(fb::Model* m) { return attr(m, 1, "then_branch")->mutable_g(); }

TEST_F(CorruptionTest, SemanticCorruptionsBehindAValidChecksumAreErrors) {
  const std::vector<SemanticCase> cases = {
      {"node input out of range",
       [](fb::Model* m) { return node(m, 0)->mutable_inputs()->Mutate(1, 9999), true; },
       "graph 'main' node 0 ('add') input 1 refers to value 9999 of 7"},
      {"node input below -1",
       [](fb::Model* m) { return node(m, 0)->mutable_inputs()->Mutate(0, -2), true; },
       "input 0 refers to value -2 of 7"},
      {"node output out of range",
       [](fb::Model* m) { return node(m, 0)->mutable_outputs()->Mutate(0, 7), true; },
       "output 0 refers to value 7 of 7"},
      {"graph input out of range",
       [](fb::Model* m) { return main_graph(m)->mutable_inputs()->Mutate(0, 1 << 30), true; },
       "graph 'main' input 0 refers to value 1073741824 of 7"},
      {"graph output out of range",
       [](fb::Model* m) { return main_graph(m)->mutable_outputs()->Mutate(1, -1), true; },
       "graph 'main' output 1 refers to value -1 of 7"},
      {"value produced twice",
       [](fb::Model* m) { return node(m, 2)->mutable_outputs()->Mutate(0, 4), true; },
       "value 4 ('y') is already produced by node 0"},
      {"node writes a graph input",
       [](fb::Model* m) { return node(m, 0)->mutable_outputs()->Mutate(0, 0), true; },
       "is a graph input, initializer or outer-scope value"},
      {"node writes an initializer",
       [](fb::Model* m) { return node(m, 0)->mutable_outputs()->Mutate(0, 1), true; },
       "is a graph input, initializer or outer-scope value"},
      {"value dtype too large", [](fb::Model* m) { return value(m, 0)->mutate_dtype(kMaxDataTypeValue + 1); },
       "value 0 ('x'): dtype 27 is not a valid data type"},
      {"value kind too large", [](fb::Model* m) { return value(m, 0)->mutate_kind(ir::kMaxTypeKind + 1); },
       "value 0 ('x'): type kind 4 is not valid"},
      {"value kind negative", [](fb::Model* m) { return value(m, 5)->mutate_kind(-1); },
       "value 5 ('z'): type kind -1 is not valid"},
      {"value dtype negative", [](fb::Model* m) { return value(m, 4)->mutate_dtype(-1); },
       "dtype -1 is not a valid data type"},
      {"initializer dtype undefined",
       [](fb::Model* m) { return value(m, 1)->mutable_initializer()->mutate_dtype(0); },
       "tensor dtype 0 is not a valid data type"},
      {"initializer dtype invalid",
       [](fb::Model* m) { return value(m, 1)->mutable_initializer()->mutate_dtype(1000); },
       "tensor dtype 1000 is not a valid data type"},
      {"initializer dtype changes its size",
       [](fb::Model* m) { return value(m, 1)->mutable_initializer()->mutate_dtype(11); },
       "tensor float64[4] is 16 bytes in the file, expected 32"},
      {"initializer size mismatch",
       [](fb::Model* m) { return value(m, 1)->mutable_initializer()->mutate_size(17); },
       "tensor float32[4] is 17 bytes in the file, expected 16"},
      {"initializer offset outside the weights",
       [](fb::Model* m) { return value(m, 1)->mutable_initializer()->mutate_offset(1 << 20); },
       "lies outside the weight section"},
      {"initializer offset overflows",
       [](fb::Model* m) {
         return value(m, 1)->mutable_initializer()->mutate_offset(
             std::numeric_limits<uint64_t>::max() - 8);
       },
       "lies outside the weight section"},
      {"initializer offset unaligned",
       [](fb::Model* m) { return value(m, 1)->mutable_initializer()->mutate_offset(8); },
       "is not 64-byte aligned"},
      {"initializer dim negative",
       [](fb::Model* m) {
         return value(m, 1)->mutable_initializer()->mutable_dims()->Mutate(0, -4), true;
       },
       "tensor dim 0 is negative (-4)"},
      {"initializer dim huge",
       [](fb::Model* m) {
         return value(m, 1)->mutable_initializer()->mutable_dims()->Mutate(
                    0, std::numeric_limits<int64_t>::max()),
                true;
       },
       "has too many elements"},
      {"string initializer count mismatch",
       [](fb::Model* m) {
         return value(m, 2)->mutable_initializer()->mutable_dims()->Mutate(0, 3), true;
       },
       "string tensor [3] holds 2 strings, expected 3"},
      {"string initializer huge count",
       [](fb::Model* m) {
         return value(m, 2)->mutable_initializer()->mutable_dims()->Mutate(0, int64_t{1} << 40),
                true;
       },
       "holds 2 strings, expected 1099511627776"},
      {"attribute kind zero", [](fb::Model* m) { return attr(m, 0, "axis")->mutate_kind(0); },
       "attribute 0 ('axis'): attribute kind 0 is not valid"},
      {"attribute kind too large", [](fb::Model* m) { return attr(m, 0, "axis")->mutate_kind(11); },
       "attribute kind 11 is not valid"},
      {"graph attribute without a graph",
       [](fb::Model* m) { return attr(m, 2, "labels")->mutate_kind(5); },
       "graph attribute has no graph"},
      {"tensor attribute without a tensor",
       [](fb::Model* m) { return attr(m, 0, "axis")->mutate_kind(4); },
       "tensor attribute has no tensor"},
      {"tensor attribute out of range",
       [](fb::Model* m) { return attr(m, 2, "table")->mutable_t()->mutate_offset(1 << 16); },
       "lies outside the weight section"},
      {"dim below -1",
       [](fb::Model* m) {
         return value(m, 0)->mutable_dims()->GetMutableObject(1)->mutate_value(-7);
       },
       "value 0 ('x') dim 1 is invalid (value -7"},
      {"static dim with a symbol",
       [](fb::Model* m) {
         return value(m, 0)->mutable_dims()->GetMutableObject(0)->mutate_value(3);
       },
       "dim 0 is invalid (value 3, symbol 'n')"},
      {"unknown rank with dims", [](fb::Model* m) { return value(m, 0)->mutate_has_rank(false); },
       "has unknown rank but 2 dims"},
      {"outer-scope value in the main graph",
       [](fb::Model* m) { return value(m, 4)->mutate_outer_scope(true); },
       "is marked outer-scope but no enclosing graph defines it"},
      {"negative opset", [](fb::Model* m) { return node(m, 1)->mutate_opset(-1); }, "has opset -1"},
      {"negative opset import",
       [](fb::Model* m) {
         return main_graph(m)->mutable_opset_imports()->GetMutableObject(0)->mutate_version(-5);
       },
       "opset import 0 ('') has version -5"},
      {"subgraph node input out of range",
       [](fb::Model* m) {
         return then_branch(m)->mutable_nodes()->GetMutableObject(0)->mutable_inputs()->Mutate(1,
                                                                                               50),
                true;
       },
       "graph 'then' node 0 ('then_mul') input 1 refers to value 50 of 3"},
      {"subgraph initializer out of range",
       [](fb::Model* m) {
         return then_branch(m)
             ->mutable_values()
             ->GetMutableObject(1)
             ->mutable_initializer()
             ->mutate_offset(4096);
       },
       "lies outside the weight section"},
      {"subgraph outer-scope flag dropped",
       [](fb::Model* m) {
         return then_branch(m)->mutable_values()->GetMutableObject(0)->mutate_outer_scope(false);
       },
       "input 0 'y' is used before it is defined"},
      {"use before definition",
       [](fb::Model* m) { return node(m, 0)->mutable_inputs()->Mutate(0, 4), true; },
       "is used before it is defined"},
  };
  for (const SemanticCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> b = good();
    fb::Model* m = fb::GetMutableModel(b.data() + kHeaderSize);
    ASSERT_TRUE(c.corrupt(m)) << "patch did not apply";
    reseal(b);
    Status s = load(b);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << s.message();
    EXPECT_EQ(s.message().rfind("<memory>: metadata", 0), 0u) << s.message();
  }
}

// Metadata that passes the FlatBuffers verifier yet points many tables at one large
// vector: the loader must refuse instead of copying it thousands of times.
TEST(HostileMetadataTest, SharedVectorAmplificationIsAnError) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<int64_t> big(20000, 7);
  auto ints = fbb.CreateVector(big);
  std::vector<flatbuffers::Offset<fb::Attr>> attrs;
  for (int i = 0; i < 3000; ++i)
    attrs.push_back(fb::CreateAttr(fbb, fbb.CreateString(str_format("a%d", i)),
                                   static_cast<int32_t>(ir::AttrKind::kInts), 0, 0, 0, ints));
  auto n = fb::CreateNode(fbb, fbb.CreateString("n"), fbb.CreateString("Op"), 0, 1, 0, 0,
                          fbb.CreateVector(attrs));
  std::vector<flatbuffers::Offset<fb::Node>> nodes = {n};
  auto g = fb::CreateGraph(fbb, fbb.CreateString("main"), 0, 0, 0, fbb.CreateVector(nodes));
  fb::FinishModelBuffer(fbb, fb::CreateModel(fbb, 0, 0, 0, 0, 0, 0, g));
  std::vector<uint8_t> b = test_util::assemble(fbb.GetBufferPointer(), fbb.GetSize(), 0);
  auto loaded = load_model_from_memory(b.data(), b.size());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("add up to more than the metadata section holds"),
            std::string::npos)
      << loaded.status().message();
}

// Each level's node lists the previous level's graph twice: 2^40 paths through 40 tables.
TEST(HostileMetadataTest, DagOfSharedSubgraphsFailsFast) {
  flatbuffers::FlatBufferBuilder fbb;
  auto prev = fb::CreateGraph(fbb, fbb.CreateString("leaf"));
  for (int level = 0; level < 40; ++level) {
    std::vector<flatbuffers::Offset<fb::Graph>> twice = {prev, prev};
    auto a =
        fb::CreateAttr(fbb, fbb.CreateString("graphs"), static_cast<int32_t>(ir::AttrKind::kGraphs),
                       0, 0, 0, 0, 0, 0, 0, 0, 0, fbb.CreateVector(twice));
    std::vector<flatbuffers::Offset<fb::Attr>> attrs = {a};
    auto n = fb::CreateNode(fbb, fbb.CreateString("n"), fbb.CreateString("Loop"), 0, 1, 0, 0,
                            fbb.CreateVector(attrs));
    std::vector<flatbuffers::Offset<fb::Node>> nodes = {n};
    prev = fb::CreateGraph(fbb, fbb.CreateString("g"), 0, 0, 0, fbb.CreateVector(nodes));
  }
  fb::FinishModelBuffer(fbb, fb::CreateModel(fbb, 0, 0, 0, 0, 0, 0, prev));
  std::vector<uint8_t> b = test_util::assemble(fbb.GetBufferPointer(), fbb.GetSize(), 0);
  auto loaded = load_model_from_memory(b.data(), b.size());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("FlatBuffers verification failed"), std::string::npos)
      << loaded.status().message();
}

// FlatBuffers 2.0.8 verifies only 4-byte alignment of a vector; an int64 vector placed
// at 4 mod 8 must be refused before its elements are read (UBSan would flag the load).
TEST(HostileMetadataTest, MisalignedInt64VectorIsAnError) {
  int misaligned = 0;
  for (int pad = 0; pad < 2; ++pad) {
    flatbuffers::FlatBufferBuilder fbb;
    if (pad) fbb.PushElement<int32_t>(0);
    const uint32_t n = 3;
    fbb.StartVector(2 * n, sizeof(int32_t));
    for (uint32_t k = 0; k < 2 * n; ++k) fbb.PushElement<int32_t>(1);
    flatbuffers::Offset<flatbuffers::Vector<int64_t>> ints(fbb.EndVector(n));
    std::vector<flatbuffers::Offset<fb::Attr>> attrs = {fb::CreateAttr(
        fbb, fbb.CreateString("ints"), static_cast<int32_t>(ir::AttrKind::kInts), 0, 0, 0, ints)};
    auto node = fb::CreateNode(fbb, fbb.CreateString("n"), fbb.CreateString("Op"), 0, 1, 0, 0,
                               fbb.CreateVector(attrs));
    std::vector<flatbuffers::Offset<fb::Node>> nodes = {node};
    auto g = fb::CreateGraph(fbb, fbb.CreateString("main"), 0, 0, 0, fbb.CreateVector(nodes));
    fb::FinishModelBuffer(fbb, fb::CreateModel(fbb, 0, 0, 0, 0, 0, 0, g));
    std::vector<uint8_t> b = test_util::assemble(fbb.GetBufferPointer(), fbb.GetSize(), 0);
    auto loaded = load_model_from_memory(b.data(), b.size());
    if (!loaded.ok() && loaded.status().message().find("misaligned") != std::string::npos)
      ++misaligned;
  }
  EXPECT_EQ(misaligned, 1);
}

TEST(HostileMetadataTest, MetadataWithoutAGraphIsAnError) {
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishModelBuffer(fbb, fb::CreateModel(fbb, fbb.CreateString("0.1.0")));
  std::vector<uint8_t> b = test_util::assemble(fbb.GetBufferPointer(), fbb.GetSize(), 0);
  auto loaded = load_model_from_memory(b.data(), b.size());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(), "<memory>: metadata: the model has no graph");
}

}  // namespace
}  // namespace kiln::model
