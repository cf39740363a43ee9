// .kiln round trip: every attribute kind, every dtype, symbolic dims, subgraphs with
// outer-scope values, metadata; zero-copy initializers that view the file mapping.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "model/kiln_model.h"
#include "model/model_format.h"
#include "model_test_util.h"

namespace kiln::model {
namespace {

using test_util::read_bytes;
using test_util::temp_dir;

// A tensor of `dtype` filled with deterministic values valid for the type.
Tensor filled(DataType dtype, std::vector<int64_t> dims, uint32_t seed) {
  Tensor t = Tensor::make(dtype, dims);
  std::mt19937 rng(seed);
  if (dtype == DataType::kString) {
    const char* words[] = {"", "kiln", "wörld", "a string too long for the SSO buffer"};
    for (int64_t i = 0; i < t.num_elements(); ++i)
      t.data<std::string>()[i] = std::string(words[(i + seed) % 4]) + std::string("\0x", 2);
  } else if (dtype == DataType::kBool) {
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<bool>()[i] = (rng() & 1) != 0;
  } else if (dtype == DataType::kFloat16) {
    for (int64_t i = 0; i < t.num_elements(); ++i)
      t.data<uint16_t>()[i] = float_to_fp16(static_cast<float>(rng() % 1000) / 7.0f - 50.0f);
  } else if (dtype == DataType::kBFloat16) {
    for (int64_t i = 0; i < t.num_elements(); ++i)
      t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(rng() % 1000) / 7.0f - 50.0f);
  } else {
    auto* p = static_cast<uint8_t*>(t.raw_data());
    for (size_t i = 0; i < t.size_bytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  }
  return t;
}

ir::Value* add_value(ir::Graph& g, const std::string& name, DataType dtype, Shape shape) {
  ir::Value* v = *g.add_value(name);
  v->type().dtype = dtype;
  v->type().shape = std::move(shape);
  return v;
}

// A branch body that reads `outer` from the enclosing graph.
std::shared_ptr<ir::Graph> branch(const std::string& name, const std::string& outer, int nest) {
  auto g = std::make_shared<ir::Graph>(name);
  ir::Value* y = add_value(*g, outer, DataType::kFloat32, Shape{Dim::symbolic("batch"), 3});
  y->set_outer_scope(true);
  ir::Value* k = add_value(*g, name + "_k", DataType::kFloat32, Shape{1});
  k->set_initializer(filled(DataType::kFloat32, {1}, 99));
  ir::Value* o = add_value(*g, name + "_out", DataType::kFloat32, Shape{Dim::symbolic("batch"), 3});
  g->add_node(name + "_mul", "Mul", "", 17, {y, k}, {o});
  if (nest > 0) {
    // Reads `outer` two levels up: the nested body names it as outer-scope too.
    ir::Value* n = add_value(*g, name + "_nested", DataType::kFloat32, Shape());
    ir::Node* node = g->add_node(name + "_if", "If", "", 17, {k}, {n});
    node->attrs()["then_branch"] =
        ir::Attribute::from_graph(branch(name + "_then", outer, nest - 1));
    node->attrs()["else_branch"] =
        ir::Attribute::from_graph(branch(name + "_else", outer, nest - 1));
  }
  g->outputs() = {o};
  g->opset_imports()[""] = 17;
  return g;
}

// The graph every round-trip test writes: one of everything the format stores.
std::unique_ptr<ir::Graph> make_full_graph() {
  auto g = std::make_unique<ir::Graph>("main");
  ir::Value* x = add_value(*g, "x", DataType::kFloat32, Shape{Dim::symbolic("batch"), 3});
  ir::Value* cond = add_value(*g, "cond", DataType::kBool, Shape{});
  ir::Value* bias = add_value(*g, "bias", DataType::kFloat32, Shape{3});
  bias->set_initializer(filled(DataType::kFloat32, {3}, 1));  // an overridable input
  add_value(*g, "unknown_dim", DataType::kInt64, Shape{Dim(), 7});
  add_value(*g, "untyped", DataType::kUndefined, Shape());
  g->inputs() = {x, cond, bias};
  // One initializer per dtype; odd element counts exercise the packed 4-bit types.
  for (int32_t d = 1; d <= kMaxDataTypeValue; ++d) {
    auto dt = static_cast<DataType>(d);
    ir::Value* w = add_value(*g, std::string("w_") + dtype_name(dt), dt, Shape{3, 5});
    w->set_initializer(filled(dt, {3, 5}, static_cast<uint32_t>(d)));
  }
  add_value(*g, "empty", DataType::kFloat32, Shape{0, 5})
      ->set_initializer(Tensor::make(DataType::kFloat32, {0, 5}));
  add_value(*g, "scalar", DataType::kInt64, Shape{})->set_initializer(Tensor::scalar<int64_t>(-42));

  ir::Value* y = add_value(*g, "y", DataType::kFloat32, Shape{Dim::symbolic("batch"), 3});
  g->add_node("add", "Add", "", 17, {x, bias}, {y});

  ir::Value* c = add_value(*g, "c", DataType::kFloat32, Shape{Dim::symbolic("batch"), 3});
  ir::Node* custom = g->add_node("custom", "Everything", "com.kiln.test", 3,
                                 {y, nullptr, g->find_value("w_float32")}, {c, nullptr});
  auto& a = custom->attrs();
  a["f"] = ir::Attribute::from_float(-0.3125f);
  a["i"] = ir::Attribute::from_int(std::numeric_limits<int64_t>::min());
  a["s"] = ir::Attribute::from_string(std::string("bytes\0with nul", 14));
  a["ints"] = ir::Attribute::from_ints({1, -2, std::numeric_limits<int64_t>::max()});
  a["floats"] = ir::Attribute::from_floats({1.5f, -0.0f, std::numeric_limits<float>::infinity()});
  a["empty_ints"] = ir::Attribute::from_ints({});
  ir::Attribute strings;
  strings.kind = ir::AttrKind::kStrings;
  strings.strings = {"a", "", "ü"};
  a["strings"] = strings;
  a["t"] = ir::Attribute::from_tensor(filled(DataType::kFloat16, {2, 2}, 7));
  ir::Attribute tensors;
  tensors.kind = ir::AttrKind::kTensors;
  tensors.tensors = {filled(DataType::kInt8, {4}, 8), filled(DataType::kString, {2}, 9),
                     filled(DataType::kBFloat16, {1, 3}, 10)};
  a["tensors"] = tensors;
  a["g"] = ir::Attribute::from_graph(branch("gattr", "y", 0));
  ir::Attribute graphs;
  graphs.kind = ir::AttrKind::kGraphs;
  graphs.graphs = {branch("g0", "y", 0), branch("g1", "y", 1)};
  a["graphs"] = graphs;

  ir::Value* z = add_value(*g, "z", DataType::kFloat32, Shape());
  ir::Node* node_if = g->add_node("if", "If", "", 17, {cond}, {z});
  node_if->attrs()["then_branch"] = ir::Attribute::from_graph(branch("then", "y", 2));
  node_if->attrs()["else_branch"] = ir::Attribute::from_graph(branch("else", "y", 0));

  g->outputs() = {c, z};
  g->opset_imports()[""] = 17;
  g->opset_imports()["com.kiln.test"] = 3;
  g->metadata()["producer_name"] = "kiln tests";
  g->metadata()["doc"] = "";
  return g;
}

ModelInfo make_info() {
  ModelInfo info;
  info.kiln_version = "0.1.0";
  info.source_hash = "0123456789abcdef";
  info.source_name = "full.onnx";
  info.producer = "pytorch 1.13";
  info.target_arch = "x86_64";
  info.target_features = {"avx2", "avx512f", "avx512_bf16"};
  return info;
}

void expect_tensor_eq(const Tensor& a, const Tensor& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.dims(), b.dims());
  if (a.dtype() == DataType::kString) {
    for (int64_t i = 0; i < a.num_elements(); ++i)
      EXPECT_EQ(a.data<std::string>()[i], b.data<std::string>()[i]) << "element " << i;
    return;
  }
  ASSERT_EQ(a.size_bytes(), b.size_bytes());
  if (a.size_bytes()) {
    EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.size_bytes()));
  }
}

void expect_graph_eq(const ir::Graph& a, const ir::Graph& b);

void expect_attr_eq(const ir::Attribute& a, const ir::Attribute& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.kind, b.kind);
  switch (a.kind) {
    case ir::AttrKind::kFloat:
      EXPECT_EQ(std::signbit(a.f), std::signbit(b.f));
      EXPECT_EQ(a.f, b.f);
      break;
    case ir::AttrKind::kInt:
      EXPECT_EQ(a.i, b.i);
      break;
    case ir::AttrKind::kString:
      EXPECT_EQ(a.s, b.s);
      break;
    case ir::AttrKind::kInts:
      EXPECT_EQ(a.ints, b.ints);
      break;
    case ir::AttrKind::kFloats:
      ASSERT_EQ(a.floats.size(), b.floats.size());
      for (size_t i = 0; i < a.floats.size(); ++i)
        EXPECT_EQ(0, std::memcmp(&a.floats[i], &b.floats[i], sizeof(float)));
      break;
    case ir::AttrKind::kStrings:
      EXPECT_EQ(a.strings, b.strings);
      break;
    case ir::AttrKind::kTensor:
      expect_tensor_eq(a.t, b.t, "t");
      break;
    case ir::AttrKind::kTensors:
      ASSERT_EQ(a.tensors.size(), b.tensors.size());
      for (size_t i = 0; i < a.tensors.size(); ++i)
        expect_tensor_eq(a.tensors[i], b.tensors[i], "tensors");
      break;
    case ir::AttrKind::kGraph:
      expect_graph_eq(*a.g, *b.g);
      break;
    case ir::AttrKind::kGraphs:
      ASSERT_EQ(a.graphs.size(), b.graphs.size());
      for (size_t i = 0; i < a.graphs.size(); ++i) expect_graph_eq(*a.graphs[i], *b.graphs[i]);
      break;
  }
}

std::vector<std::string> names(const std::vector<ir::Value*>& vs) {
  std::vector<std::string> out;
  for (const ir::Value* v : vs) out.push_back(v ? v->name() : "<omitted>");
  return out;
}

void expect_graph_eq(const ir::Graph& a, const ir::Graph& b) {
  SCOPED_TRACE("graph " + a.name());
  EXPECT_EQ(a.name(), b.name());
  ASSERT_EQ(a.values().size(), b.values().size());
  for (size_t i = 0; i < a.values().size(); ++i) {
    const ir::Value& va = *a.values()[i];
    const ir::Value& vb = *b.values()[i];
    SCOPED_TRACE("value " + va.name());
    EXPECT_EQ(va.name(), vb.name());
    EXPECT_EQ(va.dtype(), vb.dtype());
    EXPECT_EQ(va.type().kind, vb.type().kind) << va.type().to_string() << " vs " << vb.type().to_string();
    EXPECT_EQ(va.shape(), vb.shape()) << va.shape().to_string() << " vs " << vb.shape().to_string();
    EXPECT_EQ(va.is_outer_scope(), vb.is_outer_scope());
    ASSERT_EQ(va.has_initializer(), vb.has_initializer());
    if (va.has_initializer()) expect_tensor_eq(*va.initializer(), *vb.initializer(), "initializer");
    EXPECT_EQ(va.producer() != nullptr, vb.producer() != nullptr);
    if (va.producer() && vb.producer()) {
      EXPECT_EQ(va.producer()->name(), vb.producer()->name());
      EXPECT_EQ(va.producer_output(), vb.producer_output());
    }
  }
  EXPECT_EQ(names(a.inputs()), names(b.inputs()));
  EXPECT_EQ(names(a.outputs()), names(b.outputs()));
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const ir::Node& na = *a.nodes()[i];
    const ir::Node& nb = *b.nodes()[i];
    SCOPED_TRACE("node " + na.label());
    EXPECT_EQ(na.name(), nb.name());
    EXPECT_EQ(na.op_type(), nb.op_type());
    EXPECT_EQ(na.domain(), nb.domain());
    EXPECT_EQ(na.opset(), nb.opset());
    EXPECT_EQ(names(na.inputs()), names(nb.inputs()));
    EXPECT_EQ(names(na.outputs()), names(nb.outputs()));
    ASSERT_EQ(na.attrs().size(), nb.attrs().size());
    for (const auto& [name, attr] : na.attrs()) {
      const ir::Attribute* other = nb.attr(name);
      ASSERT_NE(other, nullptr) << name;
      expect_attr_eq(attr, *other, "attribute " + name);
    }
  }
  EXPECT_EQ(a.opset_imports(), b.opset_imports());
  EXPECT_EQ(a.metadata(), b.metadata());
}

// The mapping of /proc/self/maps that holds `p`, as its path ("" if none, "[anon]").
std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in >> std::ws, path);
    size_t dash = range.find('-');
    uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return path.empty() ? "[anon]" : path;
  }
  return "";
}

// Every initializer and attribute tensor of `g`, recursively.
void collect_tensors(const ir::Graph& g, std::vector<const Tensor*>& out) {
  for (const auto& v : g.values())
    if (v->has_initializer()) out.push_back(v->initializer());
  for (const auto& n : g.nodes()) {
    for (const auto& [name, a] : n->attrs()) {
      if (a.kind == ir::AttrKind::kTensor) out.push_back(&a.t);
      if (a.kind == ir::AttrKind::kTensors)
        for (const Tensor& t : a.tensors) out.push_back(&t);
    }
    for (const ir::Graph* sub : n->subgraphs()) collect_tensors(*sub, out);
  }
}

// Every tensor of `g` with bytes (at least 30 of the full graph's) is aligned and lies in the
// mapping of file `canonical` (`in_file`) or outside it.
void expect_tensors_aligned_in(const ir::Graph& g, const std::string& canonical, bool in_file) {
  std::vector<const Tensor*> tensors;
  collect_tensors(g, tensors);
  int viewed = 0;
  for (const Tensor* t : tensors) {
    if (t->dtype() == DataType::kString || t->size_bytes() == 0) continue;
    EXPECT_EQ(mapping_of(t->raw_data()) == canonical, in_file) << t->description();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % kTensorAlignment, 0u) << t->description();
    ++viewed;
  }
  EXPECT_GE(viewed, 30);
}

TEST(ModelRoundTripTest, FullGraphSurvivesWriteAndLoad) {
  auto g = make_full_graph();
  ASSERT_TRUE(ir::verify(*g).ok()) << ir::verify(*g).to_string();
  const std::string path = temp_dir() + "/full.kiln";
  Status s = write_model(*g, make_info(), path);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const ModelInfo& info = loaded->info;
  EXPECT_EQ(info.format_version, kFormatVersion);
  EXPECT_EQ(info.kiln_version, "0.1.0");
  EXPECT_EQ(info.source_hash, "0123456789abcdef");
  EXPECT_EQ(info.source_name, "full.onnx");
  EXPECT_EQ(info.producer, "pytorch 1.13");
  EXPECT_EQ(info.target_arch, "x86_64");
  EXPECT_EQ(info.target_features, make_info().target_features);
  EXPECT_EQ(loaded->file_size, std::filesystem::file_size(path));
  EXPECT_EQ(info.checksum, test_util::header_of(read_bytes(path)).checksum);
  EXPECT_GT(loaded->weight_bytes, g->initializer_bytes() / 2);
  expect_graph_eq(*g, *loaded->graph);
  EXPECT_TRUE(ir::verify(*loaded->graph).ok());
  // The printed form is the same too (a cross-check on everything the printer shows).
  EXPECT_EQ(ir::to_text(*g), ir::to_text(*loaded->graph));
}

// Sequence and optional values keep their kind (and their item dtype and shape).
TEST(ModelRoundTripTest, SequenceAndOptionalKindsSurvive) {
  ir::Graph g("kinds");
  auto typed = [&](const std::string& name, DataType dt, Shape shape, ir::TypeKind kind) {
    ir::Value* v = add_value(g, name, dt, std::move(shape));
    v->type().kind = kind;
    return v;
  };
  ir::Value* seq = typed("seq", DataType::kFloat32, Shape{2, Dim::symbolic("n")}, ir::TypeKind::kSequence);
  ir::Value* opt = typed("opt", DataType::kInt64, Shape{3}, ir::TypeKind::kOptionalTensor);
  ir::Value* opt_seq = typed("opt_seq", DataType::kBool, Shape(), ir::TypeKind::kOptionalSequence);
  ir::Value* item = typed("item", DataType::kInt64, Shape{3}, ir::TypeKind::kTensor);
  ir::Value* grown = typed("grown", DataType::kFloat32, Shape{2, Dim()}, ir::TypeKind::kSequence);
  ir::Value* has = typed("has", DataType::kBool, Shape{}, ir::TypeKind::kTensor);
  g.inputs() = {seq, opt, opt_seq};
  g.add_node("get", "OptionalGetElement", "", 18, {opt}, {item});
  g.add_node("insert", "SequenceInsert", "", 11, {seq, item}, {grown});
  g.add_node("has", "OptionalHasElement", "", 18, {opt_seq}, {has});
  g.outputs() = {grown, has};
  g.opset_imports()[""] = 18;
  const std::string path = temp_dir() + "/kinds.kiln";
  Status s = write_model(g, make_info(), path);
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_graph_eq(g, *loaded->graph);
  const ir::Graph& lg = *loaded->graph;
  EXPECT_EQ(lg.inputs()[0]->type().to_string(), "seq(float32[2,n])");
  EXPECT_EQ(lg.inputs()[1]->type().to_string(), "optional(int64[3])");
  EXPECT_EQ(lg.inputs()[2]->type().kind, ir::TypeKind::kOptionalSequence);
  EXPECT_EQ(lg.outputs()[1]->type().kind, ir::TypeKind::kTensor);
}

// LoadMode::kMap (KILN_MODEL_LOAD=map): the tensors view the file's mapping itself.
TEST(ModelRoundTripTest, InitializersViewTheMappingAlignedAndOutliveTheModel) {
  auto g = make_full_graph();
  const std::string path = temp_dir() + "/zero_copy.kiln";
  ASSERT_TRUE(write_model(*g, make_info(), path).ok());
  const std::string canonical = std::filesystem::canonical(path).string();

  Tensor kept;
  {
    auto loaded = load_model(path, LoadMode::kMap);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    expect_tensors_aligned_in(*loaded->graph, canonical, true);
    kept = *loaded->graph->find_value("w_float32")->initializer();
  }
  // The model is gone; the tensor still holds the mapping.
  EXPECT_EQ(mapping_of(kept.raw_data()), canonical);
  expect_tensor_eq(kept, filled(DataType::kFloat32, {3, 5}, 1), "kept");
  const void* p = kept.raw_data();
  kept = Tensor();
  EXPECT_NE(mapping_of(p), canonical) << "the mapping should be unmapped with its last tensor";
}

// LoadMode::kRead (the default): the tensors view one private buffer, aligned, not the file:
// overwriting and truncating the file after loading changes no weight, and the buffer lives
// as long as its last tensor.
TEST(ModelRoundTripTest, ReadModelOwnsItsBytesAndOutlivesTheFile) {
  auto g = make_full_graph();
  const std::string path = temp_dir() + "/read.kiln";
  ASSERT_TRUE(write_model(*g, make_info(), path).ok());
  const std::string canonical = std::filesystem::canonical(path).string();
  const size_t file_bytes = std::filesystem::file_size(path);
  auto loaded = load_model(path, LoadMode::kRead);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_tensors_aligned_in(*loaded->graph, canonical, false);
  {
    std::ofstream clobber(path, std::ios::binary | std::ios::trunc);
    clobber << std::string(file_bytes / 2, '\xff');
  }
  std::filesystem::resize_file(path, 100);
  Tensor kept = *loaded->graph->find_value("w_float32")->initializer();
  loaded = Expected<LoadedModel>(internal_error("dropped"));  // the model is gone
  expect_tensor_eq(kept, filled(DataType::kFloat32, {3, 5}, 1), "kept");
  // The clobbered file is refused with an error naming it, in either mode.
  for (LoadMode mode : {LoadMode::kRead, LoadMode::kMap}) {
    auto again = load_model(path, mode);
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().message().find("read.kiln: not a .kiln model"), std::string::npos)
        << again.status().to_string();
  }
}

// KILN_MODEL_LOAD picks the mode; an unknown value reads.
TEST(ModelRoundTripTest, LoadModeFromEnvironment) {
  const char* saved = std::getenv("KILN_MODEL_LOAD");
  const std::string saved_value = saved ? saved : "";
  ::unsetenv("KILN_MODEL_LOAD");
  EXPECT_EQ(load_mode_from_env(), LoadMode::kRead);
  ::setenv("KILN_MODEL_LOAD", "map", 1);
  EXPECT_EQ(load_mode_from_env(), LoadMode::kMap);
  ::setenv("KILN_MODEL_LOAD", "read", 1);
  EXPECT_EQ(load_mode_from_env(), LoadMode::kRead);
  ::setenv("KILN_MODEL_LOAD", "mmap-please", 1);
  EXPECT_EQ(load_mode_from_env(), LoadMode::kRead);
  if (saved) ::setenv("KILN_MODEL_LOAD", saved_value.c_str(), 1); else ::unsetenv("KILN_MODEL_LOAD");
}

TEST(ModelRoundTripTest, LoadFromMemoryMatchesLoadFromFile) {
  auto g = make_full_graph();
  const std::string path = temp_dir() + "/memory.kiln";
  ASSERT_TRUE(write_model(*g, make_info(), path).ok());
  std::vector<uint8_t> bytes = read_bytes(path);
  EXPECT_TRUE(looks_like_kiln(bytes.data(), bytes.size()));
  auto loaded = load_model_from_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_graph_eq(*g, *loaded->graph);
  std::vector<const Tensor*> tensors;
  collect_tensors(*loaded->graph, tensors);
  for (const Tensor* t : tensors) {
    if (t->dtype() != DataType::kString && t->size_bytes()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % kTensorAlignment, 0u);
    }
  }
}

TEST(ModelRoundTripTest, FileLayoutFollowsTheHeaderContract) {
  auto g = make_full_graph();
  const std::string path = temp_dir() + "/layout.kiln";
  ASSERT_TRUE(write_model(*g, make_info(), path).ok());
  std::vector<uint8_t> bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), kHeaderSize);
  FileHeader h = test_util::header_of(bytes);
  EXPECT_EQ(0, std::memcmp(bytes.data(), "KILNMODL", 8));
  EXPECT_EQ(h.format_version, 1u);
  EXPECT_EQ(h.flags, 0u);
  EXPECT_EQ(h.metadata_offset, kHeaderSize);
  EXPECT_EQ(h.weight_offset % 4096, 0u);
  EXPECT_GE(h.weight_offset, h.metadata_offset + h.metadata_size);
  EXPECT_EQ(h.file_size, bytes.size());
  EXPECT_EQ(h.weight_offset + h.weight_size, bytes.size());
  EXPECT_EQ(h.checksum, XXH3_64bits_withSeed(bytes.data(), 56, XXH3_64bits(bytes.data() + 64, bytes.size() - 64)));
  // The metadata is a FlatBuffer carrying the schema's file identifier at its offset 4.
  EXPECT_EQ(0, std::memcmp(bytes.data() + kHeaderSize + 4, "KLNM", 4));
}

TEST(ModelRoundTripTest, SixtyFourNestedSubgraphsLoadAndSixtyFiveDoNot) {
  for (int levels : {64, 65}) {
    auto g = std::make_unique<ir::Graph>("main");
    ir::Value* x = add_value(*g, "x", DataType::kFloat32, Shape{1});
    g->inputs() = {x};
    ir::Graph* cur = g.get();
    for (int d = 0; d < levels; ++d) {
      auto sub = std::make_shared<ir::Graph>("level" + std::to_string(d + 1));
      ir::Value* o = add_value(*cur, str_format("o%d", d), DataType::kFloat32, Shape());
      ir::Node* n = cur->add_node(str_format("loop%d", d), "Loop", "", 17, {}, {o});
      n->attrs()["body"] = ir::Attribute::from_graph(sub);
      cur = sub.get();
    }
    const std::string path = temp_dir() + "/nested.kiln";
    ASSERT_TRUE(write_model(*g, make_info(), path).ok());
    auto loaded = load_model(path);
    if (levels == 64) {
      EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    } else {
      ASSERT_FALSE(loaded.ok());
      EXPECT_NE(loaded.status().message().find("nest deeper than 64"), std::string::npos)
          << loaded.status().message();
    }
  }
}

TEST(ModelWriterTest, FailsNamingThePathAndErrno) {
  auto g = make_full_graph();
  const std::string path = temp_dir() + "/no/such/dir/model.kiln";
  Status s = write_model(*g, make_info(), path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find(path + ".tmp"), std::string::npos) << s.to_string();
  EXPECT_NE(s.to_string().find("No such file or directory"), std::string::npos) << s.to_string();
}

TEST(ModelWriterTest, RejectsANodeReadingAValueOfAnotherGraph) {
  ir::Graph other("other");
  ir::Value* foreign = *other.add_value("foreign");
  ir::Graph g("main");
  ir::Value* out = *g.add_value("out");
  g.add_node("n", "Relu", "", 17, {foreign}, {out});
  const std::string path = temp_dir() + "/foreign.kiln";
  Status s = write_model(g, make_info(), path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("'foreign' is not a value of this graph"), std::string::npos)
      << s.to_string();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(ModelLoaderTest, MissingFileIsNotFound) {
  auto loaded = load_model(temp_dir() + "/missing.kiln");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  EXPECT_NE(loaded.status().message().find("missing.kiln"), std::string::npos);
}

TEST(HostCpuFeaturesTest, AgreesWithTheCompilerBuiltins) {
  std::vector<std::string> f = host_cpu_features();
  auto has = [&](const char* name) { return std::find(f.begin(), f.end(), name) != f.end(); };
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(has("sse4.2"), __builtin_cpu_supports("sse4.2") != 0);
  EXPECT_EQ(has("avx"), __builtin_cpu_supports("avx") != 0);
  EXPECT_EQ(has("avx2"), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(has("fma"), __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(has("avx512f"), __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(has("avx512bw"), __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_EQ(has("avx512vl"), __builtin_cpu_supports("avx512vl") != 0);
  EXPECT_EQ(has("avx512_vnni"), __builtin_cpu_supports("avx512vnni") != 0);
  // /proc/cpuinfo is a second, independent source for the newer flags.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  if (!flags.empty()) {
    EXPECT_EQ(has("avx512_bf16"), flags.find(" avx512_bf16 ") != std::string::npos);
    EXPECT_EQ(has("amx_tile"), flags.find(" amx_tile ") != std::string::npos);
  }
#endif
}

// Loading cost is dominated by the checksum over the weights: a model the size of
// ResNet-50 (25.6 M fp32 parameters) must load in milliseconds. Timing is printed, not
// asserted (bench/ owns speed claims).
TEST(ModelLoaderTest, LoadsAResNet50SizedModel) {
  ir::Graph g("resnet50_sized");
  ir::Value* x = *g.add_value("x");
  g.inputs() = {x};
  ir::Value* prev = x;
  for (int i = 0; i < 100; ++i) {
    ir::Value* w = *g.add_value(str_format("w%d", i));
    w->set_initializer(filled(DataType::kFloat32, {256, 1000}, static_cast<uint32_t>(i)));
    ir::Value* y = *g.add_value(str_format("y%d", i));
    g.add_node(str_format("mm%d", i), "MatMulLike", "", 17, {prev, w}, {y});
    prev = y;
  }
  g.outputs() = {prev};
  const std::string path = temp_dir() + "/big.kiln";
  ASSERT_TRUE(write_model(g, make_info(), path).ok());
  double best_ms = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    auto loaded = load_model(path);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    EXPECT_EQ(loaded->weight_bytes, 100u * 256 * 1000 * 4);
  }
  std::printf("load + verify of a %.1f MB model: %.2f ms\n",
              static_cast<double>(std::filesystem::file_size(path)) / 1e6, best_ms);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kiln::model
