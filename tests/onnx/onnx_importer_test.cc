// Unit tests of the ONNX importer: models written in the ONNX text syntax (parsed by
// libonnx), initializers of every storage kind, external data, symbolic dims,
// overridable constants, subgraphs, and the errors bad models must produce.
#include "frontend/onnx/onnx_importer.h"

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::frontend {
namespace {

namespace fs = std::filesystem;

onnx::ModelProto parse_text(const char* text) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  return m;
}

ImportOptions no_op_check() {
  ImportOptions o;
  o.require_supported_ops = false;
  return o;
}

Expected<ImportResult> import_proto(const onnx::ModelProto& m,
                                    const ImportOptions& options = no_op_check()) {
  std::string bytes = m.SerializeAsString();
  return import_onnx_bytes(bytes.data(), bytes.size(), options);
}

// A temporary folder removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kiln_onnx_test_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

constexpr const char* kIdentityModel = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  Y = Identity(X)
}
)";

// Adds an initializer with the given dtype and dims to the model's graph.
onnx::TensorProto* add_init(onnx::ModelProto& m, const std::string& name, int dtype,
                            std::vector<int64_t> dims) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(dtype);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

const Tensor* init_of(const ImportResult& r, const std::string& name) {
  const ir::Value* v = r.graph->find_value(name);
  return v && v->has_initializer() ? v->initializer() : nullptr;
}

TEST(OnnxImporter, TypedInitializers) {
  onnx::ModelProto m = parse_text(kIdentityModel);
  using TP = onnx::TensorProto;
  auto* f32 = add_init(m, "f32", TP::FLOAT, {2, 2});
  for (float v : {1.5f, -2.0f, 3.25f, 0.0f}) f32->add_float_data(v);
  auto* i8 = add_init(m, "i8", TP::INT8, {3});
  for (int v : {-128, 5, 127}) i8->add_int32_data(v);
  auto* u8 = add_init(m, "u8", TP::UINT8, {2});
  for (int v : {0, 255}) u8->add_int32_data(v);
  auto* i16 = add_init(m, "i16", TP::INT16, {2});
  for (int v : {-32768, 1234}) i16->add_int32_data(v);
  auto* u16 = add_init(m, "u16", TP::UINT16, {1});
  u16->add_int32_data(65535);
  auto* i32 = add_init(m, "i32", TP::INT32, {2});
  for (int v : {INT_MIN, 7}) i32->add_int32_data(v);
  auto* b = add_init(m, "b", TP::BOOL, {3});
  for (int v : {1, 0, 1}) b->add_int32_data(v);
  auto* f16 = add_init(m, "f16", TP::FLOAT16, {2});
  f16->add_int32_data(0x3C00);  // 1.0
  f16->add_int32_data(0xC000);  // -2.0
  auto* bf16 = add_init(m, "bf16", TP::BFLOAT16, {1});
  bf16->add_int32_data(0x3F80);  // 1.0
  auto* i64 = add_init(m, "i64", TP::INT64, {2});
  i64->add_int64_data(-(int64_t{1} << 40));
  i64->add_int64_data(3);
  auto* u32 = add_init(m, "u32", TP::UINT32, {1});
  u32->add_uint64_data(4000000000u);
  auto* u64 = add_init(m, "u64", TP::UINT64, {1});
  u64->add_uint64_data(UINT64_MAX);
  auto* f64 = add_init(m, "f64", TP::DOUBLE, {2});
  f64->add_double_data(0.1);
  f64->add_double_data(-1e300);
  auto* c64 = add_init(m, "c64", TP::COMPLEX64, {1});
  c64->add_float_data(1.0f);
  c64->add_float_data(-1.0f);
  auto* s = add_init(m, "s", TP::STRING, {2});
  s->add_string_data("hello");
  s->add_string_data("");
  auto* u4 = add_init(m, "u4", 21, {3});  // UINT4: two values per int32_data entry
  u4->add_int32_data(0x21);
  u4->add_int32_data(0x03);
  add_init(m, "empty", TP::FLOAT, {0, 4});
  auto* scalar = add_init(m, "scalar", TP::INT64, {});
  scalar->add_int64_data(42);

  auto r = import_proto(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Tensor* t = init_of(*r, "f32");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->dtype(), DataType::kFloat32);
  EXPECT_EQ(t->dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t->data<float>()[2], 3.25f);
  EXPECT_EQ(init_of(*r, "i8")->data<int8_t>()[0], -128);
  EXPECT_EQ(init_of(*r, "i8")->data<int8_t>()[2], 127);
  EXPECT_EQ(init_of(*r, "u8")->data<uint8_t>()[1], 255);
  EXPECT_EQ(init_of(*r, "i16")->data<int16_t>()[0], -32768);
  EXPECT_EQ(init_of(*r, "u16")->data<uint16_t>()[0], 65535);
  EXPECT_EQ(init_of(*r, "i32")->data<int32_t>()[0], INT_MIN);
  EXPECT_EQ(init_of(*r, "b")->dtype(), DataType::kBool);
  EXPECT_EQ(init_of(*r, "b")->data<bool>()[1], false);
  EXPECT_EQ(init_of(*r, "b")->data<bool>()[2], true);
  EXPECT_EQ(init_of(*r, "f16")->element_as_double(0), 1.0);
  EXPECT_EQ(init_of(*r, "f16")->element_as_double(1), -2.0);
  EXPECT_EQ(init_of(*r, "bf16")->element_as_double(0), 1.0);
  EXPECT_EQ(init_of(*r, "i64")->data<int64_t>()[0], -(int64_t{1} << 40));
  EXPECT_EQ(init_of(*r, "u32")->data<uint32_t>()[0], 4000000000u);
  EXPECT_EQ(init_of(*r, "u64")->data<uint64_t>()[0], UINT64_MAX);
  EXPECT_EQ(init_of(*r, "f64")->data<double>()[1], -1e300);
  EXPECT_EQ(init_of(*r, "c64")->dtype(), DataType::kComplex64);
  EXPECT_EQ(init_of(*r, "c64")->data<float>()[1], -1.0f);
  EXPECT_EQ(init_of(*r, "s")->data<std::string>()[0], "hello");
  EXPECT_EQ(init_of(*r, "u4")->data<uint8_t>()[0], 0x21);
  EXPECT_EQ(init_of(*r, "u4")->data<uint8_t>()[1], 0x03);
  EXPECT_EQ(init_of(*r, "empty")->num_elements(), 0);
  EXPECT_EQ(init_of(*r, "scalar")->rank(), 0);
  EXPECT_EQ(init_of(*r, "scalar")->data<int64_t>()[0], 42);
  // The initializer's value carries its type.
  EXPECT_EQ(r->graph->find_value("f32")->type().to_string(), "float32[2,2]");
}

TEST(OnnxImporter, TextSyntaxInitializers) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) <float[2] W = {3.0, 4.0}, int64[3] S = {1, -2, 3}> {
  Y = Add(X, W)
}
)"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(init_of(*r, "W")->data<float>()[1], 4.0f);
  EXPECT_EQ(init_of(*r, "S")->data<int64_t>()[1], -2);
  // W is a plain initializer, not a graph input.
  ASSERT_EQ(r->graph->inputs().size(), 1u);
  EXPECT_EQ(r->graph->inputs()[0]->name(), "X");
}

TEST(OnnxImporter, RawInitializers) {
  onnx::ModelProto m = parse_text(kIdentityModel);
  using TP = onnx::TensorProto;
  float f[3] = {1.0f, -0.5f, 1e-3f};
  add_init(m, "f", TP::FLOAT, {3})
      ->set_raw_data(std::string(reinterpret_cast<char*>(f), sizeof(f)));
  int64_t i[2] = {INT64_MIN, 9};
  add_init(m, "i", TP::INT64, {2})
      ->set_raw_data(std::string(reinterpret_cast<char*>(i), sizeof(i)));
  add_init(m, "b", TP::BOOL, {3})->set_raw_data(std::string("\x00\x02\x01", 3));
  uint16_t h[1] = {0x3800};  // 0.5
  add_init(m, "h", TP::FLOAT16, {1})
      ->set_raw_data(std::string(reinterpret_cast<char*>(h), sizeof(h)));
  auto r = import_proto(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(init_of(*r, "f")->data<float>()[2], 1e-3f);
  EXPECT_EQ(init_of(*r, "i")->data<int64_t>()[0], INT64_MIN);
  const uint8_t* bytes = static_cast<const uint8_t*>(init_of(*r, "b")->raw_data());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[1], 1);  // any non-zero byte is true, stored as 1
  EXPECT_EQ(init_of(*r, "h")->element_as_double(0), 0.5);
}

TEST(OnnxImporter, InitializerSizeMismatchNamesTensor) {
  using TP = onnx::TensorProto;
  {
    onnx::ModelProto m = parse_text(kIdentityModel);
    add_init(m, "short_raw", TP::FLOAT, {4})->set_raw_data(std::string(12, '\0'));
    auto r = import_proto(m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().to_string().find("short_raw"), std::string::npos)
        << r.status().to_string();
    EXPECT_NE(r.status().to_string().find("raw_data has 12 bytes"), std::string::npos);
  }
  {
    onnx::ModelProto m = parse_text(kIdentityModel);
    auto* t = add_init(m, "short_typed", TP::INT64, {3});
    t->add_int64_data(1);
    auto r = import_proto(m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().to_string().find("short_typed"), std::string::npos)
        << r.status().to_string();
  }
  {
    // A huge shape with no data must fail before anything is allocated.
    onnx::ModelProto m = parse_text(kIdentityModel);
    add_init(m, "huge", TP::FLOAT, {int64_t{1} << 40, 1 << 20});
    auto r = import_proto(m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().to_string().find("huge"), std::string::npos) << r.status().to_string();
  }
  {
    onnx::ModelProto m = parse_text(kIdentityModel);
    add_init(m, "neg", TP::FLOAT, {-1});
    auto r = import_proto(m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().to_string().find("neg"), std::string::npos);
  }
  {
    onnx::ModelProto m = parse_text(kIdentityModel);
    add_init(m, "baddtype", 99, {1})->add_int32_data(0);
    auto r = import_proto(m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().to_string().find("baddtype"), std::string::npos);
  }
}

void set_external(onnx::TensorProto* t, const std::string& location, const std::string& offset,
                  const std::string& length) {
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    if (v.empty()) return;
    auto* kv = t->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  };
  add("location", location);
  add("offset", offset);
  add("length", length);
}

TEST(OnnxImporter, ExternalData) {
  TempDir dir;
  float w[4] = {1.0f, 2.0f, -3.0f, 4.5f};
  std::string blob(8, 'x');  // 8 bytes of padding before the tensor
  blob.append(reinterpret_cast<char*>(w), sizeof(w));
  fs::create_directories(dir.path() / "weights");
  write_file(dir.path() / "weights" / "w.bin", blob);

  onnx::ModelProto m = parse_text(kIdentityModel);
  set_external(add_init(m, "w", onnx::TensorProto::FLOAT, {2, 2}), "weights/w.bin", "8", "16");
  set_external(add_init(m, "w_nolen", onnx::TensorProto::FLOAT, {4}), "weights/w.bin", "8", "");
  write_file(dir.path() / "model.onnx", m.SerializeAsString());

  // Relative to the model's folder.
  auto r = import_onnx_file((dir.path() / "model.onnx").string(), no_op_check());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Tensor* t = init_of(*r, "w");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->data<float>()[2], -3.0f);
  EXPECT_EQ(init_of(*r, "w_nolen")->data<float>()[3], 4.5f);

  // From bytes, with the folder given.
  ImportOptions o = no_op_check();
  o.external_data_dir = dir.path().string();
  auto r2 = import_proto(m, o);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(init_of(*r2, "w")->data<float>()[3], 4.5f);

  // From bytes without a folder: a clear error naming the tensor.
  auto r3 = import_proto(m);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().to_string().find("'w'"), std::string::npos) << r3.status().to_string();
}

TEST(OnnxImporter, ExternalDataErrors) {
  TempDir dir;
  write_file(dir.path() / "w.bin", std::string(16, '\0'));
  write_file(dir.path().parent_path() / (dir.path().filename().string() + "_outside.bin"),
             std::string(16, '\0'));
  ImportOptions o = no_op_check();
  o.external_data_dir = dir.path().string();
  struct Case {
    const char* location;
    const char* offset;
    const char* length;
    const char* expect;
  };
  std::string outside = "../" + dir.path().filename().string() + "_outside.bin";
  std::string absolute = (dir.path() / "w.bin").string();
  const Case cases[] = {
      {outside.c_str(), "", "", "leaves the model's folder"},
      {absolute.c_str(), "", "", "is absolute"},
      {"missing.bin", "", "", "missing.bin"},
      {"w.bin", "8", "16", "too short"},
      {"w.bin", "", "8", "length is 8 bytes"},
      {"w.bin", "-4", "", "offset '-4'"},
      {"w.bin", "abc", "", "offset 'abc'"},
      {"", "", "", "no 'location'"},
  };
  for (const Case& c : cases) {
    onnx::ModelProto m = parse_text(kIdentityModel);
    set_external(add_init(m, "ext", onnx::TensorProto::FLOAT, {4}), c.location, c.offset, c.length);
    auto r = import_proto(m, o);
    ASSERT_FALSE(r.ok()) << c.location;
    std::string msg = r.status().to_string();
    EXPECT_NE(msg.find("'ext'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
  // A symlink inside the folder that leads out of it is refused too.
  fs::create_symlink(dir.path().parent_path() / (dir.path().filename().string() + "_outside.bin"),
                     dir.path() / "link.bin");
  onnx::ModelProto m = parse_text(kIdentityModel);
  set_external(add_init(m, "ext", onnx::TensorProto::FLOAT, {4}), "link.bin", "", "");
  auto r = import_proto(m, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("outside the model's folder"), std::string::npos)
      << r.status().to_string();
  fs::remove(dir.path().parent_path() / (dir.path().filename().string() + "_outside.bin"));
}

TEST(OnnxImporter, SymbolicAndUnknownDims) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch, 3, ?] X, int64 K) => (float[batch, 3, ?] Y) {
  Y = Identity(X)
}
)"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Value* x = r->graph->inputs()[0];
  ASSERT_EQ(x->shape().rank(), 3);
  EXPECT_EQ(x->dtype(), DataType::kFloat32);
  EXPECT_EQ(x->shape()[0].symbol, "batch");
  EXPECT_FALSE(x->shape()[0].is_static());
  EXPECT_EQ(x->shape()[1].value, 3);
  EXPECT_FALSE(x->shape()[2].is_static());
  EXPECT_TRUE(x->shape()[2].symbol.empty());
  // "int64 K" has no shape: unknown rank. (The text parser writes no shape for it.)
  const ir::Value* k = r->graph->inputs()[1];
  EXPECT_EQ(k->dtype(), DataType::kInt64);
  const ir::Value* y = r->graph->outputs()[0];
  EXPECT_EQ(y->shape()[0].symbol, "batch");
}

TEST(OnnxImporter, InputsWithInitializersAreOverridableFromIr4) {
  const char* text = R"(
<ir_version: %d, opset_import: ["" : 11]>
g (float[2] X, float[2] B = {1.0, 2.0}) => (float[2] Y) {
  Y = Add(X, B)
}
)";
  char buf[512];
  std::snprintf(buf, sizeof(buf), text, 8);
  auto r = import_proto(parse_text(buf));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->graph->inputs().size(), 2u);
  const ir::Value* b = r->graph->inputs()[1];
  EXPECT_EQ(b->name(), "B");
  ASSERT_TRUE(b->has_initializer());
  EXPECT_EQ(b->initializer()->data<float>()[1], 2.0f);

  // Before IR 4 every initializer was listed as an input: those are plain constants.
  std::snprintf(buf, sizeof(buf), text, 3);
  auto r3 = import_proto(parse_text(buf));
  ASSERT_TRUE(r3.ok()) << r3.status().to_string();
  ASSERT_EQ(r3->graph->inputs().size(), 1u);
  EXPECT_EQ(r3->graph->inputs()[0]->name(), "X");
  EXPECT_TRUE(r3->graph->find_value("B")->has_initializer());
}

TEST(OnnxImporter, InputInitializerShapeMismatchIsAnError) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X, float[2] B = {1.0, 2.0}) => (float[2] Y) {
  Y = Add(X, B)
}
)");
  // The input says [3]; its initializer holds 2 values.
  m.mutable_graph()
      ->mutable_input(1)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(3);
  auto r = import_proto(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.status().to_string().find("graph input 'B' is declared float32[3] but its initializer is "
                                  "float32[2]"),
      std::string::npos)
      << r.status().to_string();
}

TEST(OnnxImporter, SubgraphOuterScopeReads) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X, bool c) => (float[2] Z) {
  T = Relu(X)
  Z = If(c) <
    then_branch = g1 () => (float[2] z1) {
      z1 = If(c) <
        then_branch = g11 () => (float[2] a) { a = Add(T, X) },
        else_branch = g12 () => (float[2] b) { b = Identity(T) }
      >
    },
    else_branch = g2 () => (float[2] z2) { z2 = Neg(T) }
  >
}
)"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Graph& g = *r->graph;
  ASSERT_EQ(g.nodes().size(), 2u);
  const ir::Node& if_node = *g.nodes()[1];
  EXPECT_EQ(if_node.op_type(), "If");
  std::vector<ir::Graph*> subs = if_node.subgraphs();
  ASSERT_EQ(subs.size(), 2u);
  const ir::Graph* else_g = if_node.attr("else_branch")->g.get();
  const ir::Graph* then_g = if_node.attr("then_branch")->g.get();
  ASSERT_TRUE(else_g->find_value("T"));
  EXPECT_TRUE(else_g->find_value("T")->is_outer_scope());
  EXPECT_EQ(else_g->find_value("T")->type().dtype, DataType::kUndefined);  // T has no value_info
  // The nested If reads T and X two levels up: the middle graph gets outer-scope values
  // for them as well, and c (read by the middle If itself) is outer-scope there too.
  for (const char* name : {"T", "X", "c"}) {
    ASSERT_TRUE(then_g->find_value(name)) << name;
    EXPECT_TRUE(then_g->find_value(name)->is_outer_scope()) << name;
  }
  EXPECT_EQ(then_g->find_value("X")->type().to_string(), "float32[2]");
  const ir::Graph* inner = then_g->nodes()[0]->attr("then_branch")->g.get();
  EXPECT_TRUE(inner->find_value("X")->is_outer_scope());
  EXPECT_FALSE(inner->find_value("a")->is_outer_scope());
}

TEST(OnnxImporter, SubgraphDanglingInput) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X, bool c) => (float[2] Z) {
  Z = If(c) <
    then_branch = g1 () => (float[2] z1) { z1 = Neg(nowhere) },
    else_branch = g2 () => (float[2] z2) { z2 = Neg(X) }
  >
}
)"));
  ASSERT_FALSE(r.ok());
  std::string msg = r.status().to_string();
  EXPECT_NE(msg.find("'nowhere'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Neg"), std::string::npos) << msg;
}

TEST(OnnxImporter, MalformedBytes) {
  const char junk[] = "\xff\xff\xff\xff this is not a protobuf \x0a\xff";
  auto r = import_onnx_bytes(junk, sizeof(junk));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("not a valid ONNX model (protobuf parse failed)"),
            std::string::npos)
      << r.status().to_string();

  TempDir dir;
  fs::path p = dir.path() / "model.onnx";
  write_file(p, std::string(junk, sizeof(junk)));
  auto rf = import_onnx_file(p.string());
  ASSERT_FALSE(rf.ok());
  EXPECT_NE(
      rf.status().to_string().find("model.onnx: not a valid ONNX model (protobuf parse failed)"),
      std::string::npos)
      << rf.status().to_string();

  // A valid but empty protobuf has no graph.
  auto re = import_onnx_bytes("", 0);
  ASSERT_FALSE(re.ok());
  EXPECT_NE(re.status().to_string().find("no graph"), std::string::npos);

  // Over 2 GB is refused before protobuf sees it (the bytes are never read).
  auto big = import_onnx_bytes(junk, static_cast<size_t>(INT_MAX) + 1);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().to_string().find("2 GB"), std::string::npos);

  auto missing = import_onnx_file((dir.path() / "nope.onnx").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().to_string().find("nope.onnx"), std::string::npos);
}

TEST(OnnxImporter, TruncatedModelIsAnError) {
  onnx::ModelProto m = parse_text(kIdentityModel);
  auto* t = add_init(m, "w", onnx::TensorProto::FLOAT, {64});
  for (int i = 0; i < 64; ++i) t->add_float_data(static_cast<float>(i));
  std::string bytes = m.SerializeAsString();
  // Every prefix either parses into a model that imports or fails cleanly.
  for (size_t n = 0; n < bytes.size(); n += 7) {
    auto r = import_onnx_bytes(bytes.data(), n, no_op_check());
    (void)r;
  }
  SUCCEED();
}

TEST(OnnxImporter, CorruptedBytesNeverCrash) {
  // Flips bytes of a model with initializers, attributes and a subgraph; every variant
  // must import or fail with a Status (run under the sanitizer build to catch UB).
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 2] X, bool c) => (float[N, 2] Z) <float[2] W = {1.0, 2.0}, int64[2] S = {-1, 2}> {
  T = Add(X, W)
  R = Reshape(T, S)
  Z = If(c) <
    then_branch = g1 () => (float[N, 2] a) { a = Mul(R, W) },
    else_branch = g2 () => (float[N, 2] b) { b = Identity(T) }
  >
}
)");
  auto* raw = add_init(m, "raw", onnx::TensorProto::FLOAT16, {4});
  raw->set_raw_data(std::string(8, '\x3c'));
  const std::string good = m.SerializeAsString();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int imported = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = good;
    int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) bytes[next() % bytes.size()] = static_cast<char>(next() & 0xff);
    auto r = import_onnx_bytes(bytes.data(), bytes.size(), no_op_check());
    if (r.ok()) {
      ++imported;
      EXPECT_TRUE(ir::verify(*r->graph).ok());
    } else {
      EXPECT_FALSE(r.status().to_string().empty());
    }
  }
  EXPECT_GT(imported, 0);  // some flips land in harmless places (names, values)
}

TEST(OnnxImporter, UnknownFieldsFromNewerOnnxAreIgnored) {
  std::string bytes = parse_text(kIdentityModel).SerializeAsString();
  // Field 99 (varint 1) and field 100 (a length-delimited "abc"): unknown to ONNX 1.12.
  bytes += std::string("\x98\x06\x01", 3);
  bytes += std::string("\xa2\x06\x03" "abc", 6);
  auto r = import_onnx_bytes(bytes.data(), bytes.size(), no_op_check());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->graph->nodes().size(), 1u);
}

TEST(OnnxImporter, DanglingInputNamesNodeAndInput) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  T = Relu(X)
  Y = Add(T, ghost)
}
)");
  m.mutable_graph()->mutable_node(1)->set_name("add1");
  auto r = import_proto(m);
  ASSERT_FALSE(r.ok());
  std::string msg = r.status().to_string();
  EXPECT_NE(msg.find("'add1' (Add)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ghost'"), std::string::npos) << msg;
}

TEST(OnnxImporter, CycleIsAnError) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  A = Add(X, B)
  B = Relu(A)
  Y = Identity(B)
}
)");
  m.mutable_graph()->mutable_node(0)->set_name("add_a");
  m.mutable_graph()->mutable_node(1)->set_name("relu_b");
  auto r = import_proto(m);
  ASSERT_FALSE(r.ok());
  std::string msg = r.status().to_string();
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("add_a") != std::string::npos || msg.find("relu_b") != std::string::npos)
      << msg;
}

TEST(OnnxImporter, NodesOutOfOrderAreSorted) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  Y = Neg(T)
  T = Relu(X)
}
)"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->graph->nodes()[0]->op_type(), "Relu");
  EXPECT_EQ(r->graph->nodes()[1]->op_type(), "Neg");
}

TEST(OnnxImporter, UnsupportedOpsAreListedTogether) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17, "com.example" : 2]>
g (float[2] X) => (float[2] Y) {
  A = KilnNoSuchOpA(X)
  B = com.example.Frobnicate(A)
  Y = KilnNoSuchOpB(B) <body = sub () => (float[2] s) { s = KilnNoSuchOpC(A) }>
}
)");
  m.mutable_graph()->mutable_node(0)->set_name("first");
  m.mutable_graph()->mutable_node(2)->set_name("third");
  auto r = import_proto(m, ImportOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  const std::string msg = r.status().message();
  EXPECT_EQ(msg,
            "unsupported operators (4 nodes): "
            "node 'first' op KilnNoSuchOpA (domain ai.onnx, opset 17); "
            "node 'Frobnicate_0' op Frobnicate (domain com.example, opset 2); "
            "node 'third' op KilnNoSuchOpB (domain ai.onnx, opset 17); "
            "node 'KilnNoSuchOpC_0' op KilnNoSuchOpC (domain ai.onnx, opset 17)");

  auto lenient = import_proto(m);
  ASSERT_TRUE(lenient.ok()) << lenient.status().to_string();
  std::vector<std::string> lines = list_unsupported_nodes(*lenient->graph);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1], "node 'Frobnicate_0' op Frobnicate (domain com.example, opset 2)");
}

TEST(OnnxImporter, OpsetChecks) {
  // Old opsets import (ops register their legacy versions); opset 0 does not exist.
  auto r1 = import_proto(parse_text(R"(
<ir_version: 3, opset_import: ["" : 1]>
g (float[2] X) => (float[2] Y) { Y = Relu(X) }
)"));
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  EXPECT_EQ(r1->graph->nodes()[0]->opset(), 1);
  auto r0 = import_proto(parse_text(R"(
<ir_version: 3, opset_import: ["" : 0]>
g (float[2] X) => (float[2] Y) { Y = Relu(X) }
)"));
  ASSERT_FALSE(r0.ok());
  EXPECT_NE(r0.status().to_string().find("opset 0"), std::string::npos) << r0.status().to_string();

  auto r99 = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 99]>
g (float[2] X) => (float[2] Y) { Y = Relu(X) }
)"));
  ASSERT_FALSE(r99.ok());
  EXPECT_NE(r99.status().to_string().find("opset 99"), std::string::npos);

  // "ai.onnx" is the default domain too.
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["ai.onnx" : 13]>
g (float[2] X) => (float[2] Y) { Y = Relu(X) }
)");
  m.mutable_graph()->mutable_node(0)->set_domain("ai.onnx");
  auto r13 = import_proto(m);
  ASSERT_TRUE(r13.ok()) << r13.status().to_string();
  EXPECT_EQ(r13->graph->nodes()[0]->opset(), 13);
  EXPECT_EQ(r13->graph->nodes()[0]->domain(), "");

  // A node whose domain the model does not import.
  auto rd = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (float[2] X) => (float[2] Y) { Y = com.unknown.Thing(X) }
)"));
  ASSERT_FALSE(rd.ok());
  EXPECT_NE(rd.status().to_string().find("com.unknown"), std::string::npos)
      << rd.status().to_string();
}

TEST(OnnxImporter, NodeNamesAreGeneratedAndUnique) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  A = Relu(X)
  B = Relu(A)
  C = Neg(B)
  D = Neg(C)
  Y = Neg(D)
}
)");
  m.mutable_graph()->mutable_node(1)->set_name("Relu_0");  // taken: generated names skip it
  m.mutable_graph()->mutable_node(3)->set_name("n");
  m.mutable_graph()->mutable_node(4)->set_name("n");  // duplicate given name
  auto r = import_proto(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<std::string> names;
  for (const auto& n : r->graph->nodes()) names.push_back(n->name());
  EXPECT_EQ(names, (std::vector<std::string>{"Relu_1", "Relu_0", "Neg_0", "n", "n_0"}));
}

TEST(OnnxImporter, AttributesOfEveryKind) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  Y = Custom(X) <f = 0.5, i = -3, s = "same", fs = [1.0, 2.5], is = [1, 2, 3], ss = ["a", "b"],
                 t = float[2] {7.0, 8.0}>
}
)");
  auto* n = m.mutable_graph()->mutable_node(0);
  auto* ts = n->add_attribute();
  ts->set_name("ts");
  ts->set_type(onnx::AttributeProto::TENSORS);
  auto* t0 = ts->add_tensors();
  t0->set_data_type(onnx::TensorProto::INT64);
  t0->add_int64_data(5);
  auto r = import_proto(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Node& node = *r->graph->nodes()[0];
  EXPECT_EQ(node.attr_float("f", 0), 0.5f);
  EXPECT_EQ(node.attr_int("i", 0), -3);
  EXPECT_EQ(node.attr_string("s", ""), "same");
  EXPECT_EQ(node.attr_floats("fs"), (std::vector<float>{1.0f, 2.5f}));
  EXPECT_EQ(node.attr_ints("is"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(node.attr("ss")->strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(node.attr("t")->kind, ir::AttrKind::kTensor);
  EXPECT_EQ(node.attr("t")->t.data<float>()[1], 8.0f);
  ASSERT_EQ(node.attr("ts")->tensors.size(), 1u);
  EXPECT_EQ(node.attr("ts")->tensors[0].rank(), 0);
  EXPECT_EQ(node.attr("ts")->tensors[0].data<int64_t>()[0], 5);
}

TEST(OnnxImporter, ConstantNodesStayNodes) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  C = Constant() <value = float[2] {1.0, 2.0}>
  Y = Add(X, C)
}
)"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->graph->nodes().size(), 2u);
  const ir::Node& c = *r->graph->nodes()[0];
  EXPECT_EQ(c.op_type(), "Constant");
  EXPECT_EQ(c.attr("value")->t.data<float>()[1], 2.0f);

  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  C = Constant() <value = float[2] {1.0, 2.0}>
  Y = Add(X, C)
}
)");
  auto* attr = m.mutable_graph()->mutable_node(0)->mutable_attribute(0);
  attr->set_name("sparse_value");
  attr->set_type(onnx::AttributeProto::SPARSE_TENSOR);
  attr->mutable_sparse_tensor()->add_dims(2);
  auto rs = import_proto(m);
  ASSERT_FALSE(rs.ok());
  EXPECT_NE(rs.status().to_string().find("sparse_value"), std::string::npos)
      << rs.status().to_string();
}

TEST(OnnxImporter, FunctionAttributeReferenceIsAnError) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) { Y = LeakyRelu(X) <alpha = 0.1> }
)");
  m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->set_ref_attr_name("outer_alpha");
  auto r = import_proto(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("outer_alpha"), std::string::npos)
      << r.status().to_string();
}

TEST(OnnxImporter, DuplicateDefinitionIsAnError) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) {
  Y = Relu(X)
  Y = Neg(X)
}
)"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("'Y'"), std::string::npos) << r.status().to_string();
}

TEST(OnnxImporter, OmittedOptionalInputIsNull) {
  auto r = import_proto(parse_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X, float[1] M) => (float[2] Y) {
  Y = Clip(X, , M)
}
)"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Node& n = *r->graph->nodes()[0];
  ASSERT_EQ(n.num_inputs(), 3);
  EXPECT_EQ(n.input(1), nullptr);
  EXPECT_EQ(n.input(2)->name(), "M");
}

TEST(OnnxImporter, ResultCarriesProducerAndHash) {
  onnx::ModelProto m = parse_text(kIdentityModel);
  m.set_producer_name("pytorch");
  m.set_producer_version("1.13.1");
  m.set_doc_string("a test model");
  m.set_ir_version(7);
  std::string bytes = m.SerializeAsString();
  auto r = import_onnx_bytes(bytes.data(), bytes.size(), no_op_check());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->producer, "pytorch 1.13.1");
  EXPECT_EQ(r->ir_version, 7);
  char expect[17];
  std::snprintf(expect, sizeof(expect), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
  EXPECT_EQ(r->source_hash, expect);
  EXPECT_EQ(r->graph->metadata().at("producer"), "pytorch 1.13.1");
  EXPECT_EQ(r->graph->metadata().at("source_hash"), expect);
  EXPECT_EQ(r->graph->metadata().at("doc_string"), "a test model");
  EXPECT_EQ(r->graph->name(), "g");
}

}  // namespace
}  // namespace kiln::frontend
