// Sequences and optionals through the ONNX frontend: sequence_type and optional_type on
// graph inputs, outputs, value_info and subgraphs; Optional's 'type' attribute; the test-data
// reader (TensorProto, SequenceProto, OptionalProto); and whole models (Loop carrying a
// sequence, If returning optionals) run by the executor after inference.
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx-data_pb.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/value_proto.h"
#include "ops/registry.h"
#include "runtime/graph_executor.h"

namespace kiln::frontend {
namespace {

namespace fs = std::filesystem;
using ir::TypeKind;

onnx::ModelProto parse_text(const char* text) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  return m;
}

Expected<ImportResult> import_proto(const onnx::ModelProto& m) {
  std::string bytes = m.SerializeAsString();
  return import_onnx_bytes(bytes.data(), bytes.size());
}

// TypeProtos the ONNX text syntax of libonnx 1.12 cannot write.
onnx::TypeProto tensor_type(int elem, std::vector<int64_t> dims) {
  onnx::TypeProto t;
  auto* tt = t.mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0)
      shape->add_dim()->set_dim_param("N");
    else
      shape->add_dim()->set_dim_value(d);
  }
  return t;
}
onnx::TypeProto seq_of(const onnx::TypeProto& elem) {
  onnx::TypeProto t;
  *t.mutable_sequence_type()->mutable_elem_type() = elem;
  return t;
}
onnx::TypeProto optional_of(const onnx::TypeProto& elem) {
  onnx::TypeProto t;
  *t.mutable_optional_type()->mutable_elem_type() = elem;
  return t;
}
onnx::TypeProto map_type() {
  onnx::TypeProto t;
  t.mutable_map_type()->set_key_type(onnx::TensorProto::INT64);
  *t.mutable_map_type()->mutable_value_type() = tensor_type(onnx::TensorProto::FLOAT, {});
  return t;
}

void set_type(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* vis, const std::string& name,
              const onnx::TypeProto& t) {
  for (auto& vi : *vis)
    if (vi.name() == name) *vi.mutable_type() = t;
}

const ir::Value* value(const ImportResult& r, const std::string& name) { return r.graph->find_value(name); }

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt64 = onnx::TensorProto::INT64;

TEST(SequenceImport, GraphInputsOutputsAndValueInfoKeepTheirKinds) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 18]>
g (float[2] s, float[2] o, float[2] os) => (float[2] n, float[2] y, bool h) {
  n = SequenceLength(s)
  y = OptionalGetElement(o)
  h = OptionalHasElement(os)
  mid = SequenceErase(s)
}
)");
  auto* g = m.mutable_graph();
  set_type(g->mutable_input(), "s", seq_of(tensor_type(kFloat, {-1, 3})));
  set_type(g->mutable_input(), "o", optional_of(tensor_type(kInt64, {4})));
  set_type(g->mutable_input(), "os", optional_of(seq_of(tensor_type(kFloat, {}))));
  set_type(g->mutable_output(), "n", tensor_type(kInt64, {}));
  set_type(g->mutable_output(), "y", tensor_type(kInt64, {4}));
  auto* vi = g->add_value_info();
  vi->set_name("mid");
  *vi->mutable_type() = seq_of(tensor_type(kFloat, {-1, 3}));
  auto r = import_proto(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(value(*r, "s")->type().to_string(), "seq(float32[N,3])");
  EXPECT_EQ(value(*r, "o")->type().to_string(), "optional(int64[4])");
  EXPECT_EQ(value(*r, "os")->type().to_string(), "optional(seq(float32[]))");
  EXPECT_EQ(value(*r, "mid")->type().kind, TypeKind::kSequence);
  EXPECT_EQ(value(*r, "y")->type().to_string(), "int64[4]");
  // Inference agrees with the declarations.
  ASSERT_TRUE(ops::infer_graph(*r->graph).ok());
  EXPECT_EQ(value(*r, "mid")->type().to_string(), "seq(float32[N,3])");
  EXPECT_EQ(value(*r, "y")->type().to_string(), "int64[4]");
  EXPECT_EQ(value(*r, "h")->type().to_string(), "bool[]");
}

TEST(SequenceImport, UnsupportedTypesAreErrorsOnGraphInputsOnly) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 18]>
g (float[2] x) => (float[2] y) {
  y = Identity(x)
}
)");
  onnx::ModelProto map_in = m;
  set_type(map_in.mutable_graph()->mutable_input(), "x", map_type());
  auto r = import_proto(map_in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("graph input 'x' is a map"), std::string::npos) << r.status().to_string();

  onnx::ModelProto seq_seq = m;
  set_type(seq_seq.mutable_graph()->mutable_input(), "x", seq_of(seq_of(tensor_type(kFloat, {2}))));
  r = import_proto(seq_seq);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("is a sequence of a sequence"), std::string::npos) << r.status().to_string();

  onnx::ModelProto opt_map = m;
  set_type(opt_map.mutable_graph()->mutable_output(), "y", optional_of(map_type()));
  r = import_proto(opt_map);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("graph output 'y' is an optional of a map"), std::string::npos)
      << r.status().to_string();

  // In value_info such a type is only a hint: it is left to inference.
  onnx::ModelProto hint = m;
  auto* vi = hint.mutable_graph()->add_value_info();
  vi->set_name("y");
  *vi->mutable_type() = map_type();
  r = import_proto(hint);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(value(*r, "y")->type().kind, TypeKind::kTensor);
}

// then: an empty Optional typed by its 'type' attribute; else: Optional(SequenceConstruct(x, x)).
onnx::ModelProto if_optional_model() {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 16]>
g (bool pick, float[2] x) => (float[2] o) {
  o = If(pick) <then_branch = t () => (float[2] to) { to = Optional() },
                else_branch = e () => (float[2] eo) { es = SequenceConstruct(x, x)
                                                       eo = Optional(es) }>
}
)");
  auto* g = m.mutable_graph();
  const onnx::TypeProto opt_seq = optional_of(seq_of(tensor_type(kFloat, {2})));
  set_type(g->mutable_output(), "o", opt_seq);
  for (auto& attr : *g->mutable_node(0)->mutable_attribute()) {
    set_type(attr.mutable_g()->mutable_output(), "to", opt_seq);
    set_type(attr.mutable_g()->mutable_output(), "eo", opt_seq);
    if (attr.name() == "then_branch") {
      auto* type_attr = attr.mutable_g()->mutable_node(0)->add_attribute();
      type_attr->set_name("type");
      type_attr->set_type(onnx::AttributeProto::TYPE_PROTO);
      *type_attr->mutable_tp() = seq_of(tensor_type(kFloat, {2}));
    }
  }
  return m;
}

Expected<std::vector<RuntimeValue>> run(const ImportResult& r, std::vector<rt::NamedValue> feeds) {
  KILN_RETURN_IF_ERROR(ops::infer_graph(*r.graph));
  KILN_ASSIGN_OR_RETURN(auto ex, rt::GraphExecutor::create(r.graph));
  std::vector<RuntimeValue> outs;
  KILN_RETURN_IF_ERROR(ex->run(feeds, &outs));
  return outs;
}

TEST(SequenceImport, IfReturnsAnEmptyOrAFullOptional) {
  auto r = import_proto(if_optional_model());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Graph* then_g = r->graph->nodes()[0]->attr("then_branch")->g.get();
  // The 'type' attribute became the output's type.
  EXPECT_EQ(then_g->find_value("to")->type().to_string(), "optional(seq(float32[2]))");
  EXPECT_FALSE(then_g->nodes()[0]->has_attr("type"));

  const Tensor x = Tensor::from_vector<float>({1.5f, -2}, {2});
  auto empty = run(*r, {{"pick", Tensor::scalar<bool>(true)}, {"x", x}});
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_EQ(r->graph->outputs()[0]->type().to_string(), "optional(seq(float32[2]))");
  EXPECT_TRUE((*empty)[0].is_none());
  auto full = run(*r, {{"pick", Tensor::scalar<bool>(false)}, {"x", x}});
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_TRUE((*full)[0].is_sequence());
  ASSERT_EQ((*full)[0].items().size(), 2u);
  EXPECT_EQ((*full)[0].items()[1].data<float>()[1], -2.0f);
}

TEST(SequenceImport, OptionalTypeAttributeMustHoldATensorOrSequence) {
  onnx::ModelProto m = if_optional_model();
  for (auto& attr : *m.mutable_graph()->mutable_node(0)->mutable_attribute())
    if (attr.name() == "then_branch") *attr.mutable_g()->mutable_node(0)->mutable_attribute(0)->mutable_tp() = map_type();
  auto r = import_proto(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("attribute 'type' of node"), std::string::npos) << r.status().to_string();
}

// A Loop carrying a sequence: iteration i appends x + i (the carried value starts as s0).
TEST(SequenceImport, LoopCarriesASequence) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 13]>
g (int64 M, bool cond, float[2] s0, float[2] x) => (float[2] s) {
  s = Loop(M, cond, s0) <body = b (int64 i, bool c, float[2] sin) => (bool cout, float[2] sout) {
      cout = Identity(c)
      fi = Cast<to = 1>(i)
      xi = Add(x, fi)
      sout = SequenceInsert(sin, xi)
  }>
}
)");
  auto* g = m.mutable_graph();
  const onnx::TypeProto seq = seq_of(tensor_type(kFloat, {2}));
  set_type(g->mutable_input(), "s0", seq);
  set_type(g->mutable_output(), "s", seq);
  auto* body = g->mutable_node(0)->mutable_attribute(0)->mutable_g();
  set_type(body->mutable_input(), "sin", seq);
  set_type(body->mutable_output(), "sout", seq);
  auto r = import_proto(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Tensor x = Tensor::from_vector<float>({1, 10}, {2});
  auto outs = run(*r, {{"M", Tensor::scalar<int64_t>(3)},
                       {"cond", Tensor::scalar<bool>(true)},
                       {"s0", RuntimeValue::sequence(DataType::kFloat32, {Tensor::from_vector<float>({0, 0}, {2})})},
                       {"x", x}});
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  EXPECT_EQ(r->graph->outputs()[0]->type().kind, TypeKind::kSequence);
  const RuntimeValue& s = (*outs)[0];
  ASSERT_TRUE(s.is_sequence());
  ASSERT_EQ(s.items().size(), 4u);
  const float want[4][2] = {{0, 0}, {1, 10}, {2, 11}, {3, 12}};
  for (size_t k = 0; k < 4; ++k)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(s.items()[k].data<float>()[j], want[k][j]) << "item " << k;
}

// ---- read_value_proto -----------------------------------------------------------------------

class ValueProtoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kiln_value_proto_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) {
    std::string p = (dir_ / name).string();
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  fs::path dir_;
};

onnx::TensorProto float_tensor(std::vector<float> v, std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_data_type(kFloat);
  for (int64_t d : dims) t.add_dims(d);
  for (float f : v) t.add_float_data(f);
  return t;
}

ir::TensorType declared(TypeKind kind, DataType dt = DataType::kFloat32) {
  ir::TensorType t;
  t.dtype = dt;
  t.kind = kind;
  return t;
}

TEST_F(ValueProtoTest, ReadsTensorsSequencesAndOptionals) {
  std::string p = write("t.pb", float_tensor({1, 2, 3}, {3}).SerializeAsString());
  auto t = read_value_proto(p, declared(TypeKind::kTensor));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->is_tensor());
  EXPECT_EQ(t->tensor().dims(), (std::vector<int64_t>{3}));
  EXPECT_EQ(t->tensor().data<float>()[2], 3.0f);

  onnx::SequenceProto seq;
  seq.set_elem_type(onnx::SequenceProto::TENSOR);
  *seq.add_tensor_values() = float_tensor({1}, {});
  *seq.add_tensor_values() = float_tensor({2, 3}, {2});
  p = write("s.pb", seq.SerializeAsString());
  auto s = read_value_proto(p, declared(TypeKind::kSequence));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(s->is_sequence());
  ASSERT_EQ(s->items().size(), 2u);
  EXPECT_EQ(s->items()[0].rank(), 0);
  EXPECT_EQ(s->items()[1].data<float>()[1], 3.0f);
  // An empty sequence takes the declared dtype.
  onnx::SequenceProto empty_seq;
  p = write("e.pb", empty_seq.SerializeAsString());
  auto e = read_value_proto(p, declared(TypeKind::kSequence, DataType::kInt32));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->items().size(), 0u);
  EXPECT_EQ(e->sequence_dtype(), DataType::kInt32);

  onnx::OptionalProto opt;
  opt.set_elem_type(onnx::OptionalProto::TENSOR);
  *opt.mutable_tensor_value() = float_tensor({4}, {1});
  p = write("o.pb", opt.SerializeAsString());
  auto o = read_value_proto(p, declared(TypeKind::kOptionalTensor));
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_TRUE(o->is_tensor());
  EXPECT_EQ(o->tensor().data<float>()[0], 4.0f);

  onnx::OptionalProto opt_seq;
  opt_seq.set_elem_type(onnx::OptionalProto::SEQUENCE);
  *opt_seq.mutable_sequence_value() = seq;
  p = write("os.pb", opt_seq.SerializeAsString());
  auto os = read_value_proto(p, declared(TypeKind::kOptionalSequence));
  ASSERT_TRUE(os.ok()) << os.status().to_string();
  EXPECT_EQ(os->items().size(), 2u);

  onnx::OptionalProto none;
  p = write("n.pb", none.SerializeAsString());
  auto n = read_value_proto(p, declared(TypeKind::kOptionalSequence));
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_TRUE(n->is_none());
}

TEST_F(ValueProtoTest, BadFilesAreErrorsNamingTheFile) {
  auto expect_error = [&](const std::string& path, const ir::TensorType& type, const std::string& text) {
    auto r = read_value_proto(path, type);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_NE(r.status().to_string().find(text), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().to_string().find(fs::path(path).filename().string()), std::string::npos)
        << r.status().to_string();
  };
  expect_error((dir_ / "missing.pb").string(), declared(TypeKind::kTensor), "cannot open");
  expect_error(write("garbage.pb", std::string("\xff\xff\xff\xff\x0f garbage", 13)), declared(TypeKind::kSequence),
               "not a valid SequenceProto");
  std::string t = write("t.pb", float_tensor({1, 2}, {2}).SerializeAsString());
  expect_error(t, declared(TypeKind::kTensor, DataType::kInt64), "the model declares int64");
  // Dims that promise more data than the file holds.
  expect_error(write("short.pb", float_tensor({1, 2}, {3}).SerializeAsString()), declared(TypeKind::kTensor),
               "float_data has 2 values");

  onnx::SequenceProto mixed;
  mixed.set_elem_type(onnx::SequenceProto::TENSOR);
  *mixed.add_tensor_values() = float_tensor({1}, {1});
  onnx::TensorProto i64;
  i64.set_data_type(kInt64);
  i64.add_int64_data(7);
  *mixed.add_tensor_values() = i64;
  expect_error(write("mixed.pb", mixed.SerializeAsString()), declared(TypeKind::kSequence, DataType::kUndefined),
               "item 1");
  onnx::SequenceProto of_seqs;
  of_seqs.set_elem_type(onnx::SequenceProto::SEQUENCE);
  of_seqs.add_sequence_values();
  expect_error(write("nested.pb", of_seqs.SerializeAsString()), declared(TypeKind::kSequence), "elem_type 3");

  onnx::OptionalProto opt_tensor;
  opt_tensor.set_elem_type(onnx::OptionalProto::TENSOR);
  *opt_tensor.mutable_tensor_value() = float_tensor({1}, {1});
  expect_error(write("ot.pb", opt_tensor.SerializeAsString()), declared(TypeKind::kOptionalSequence),
               "holds a tensor");
  onnx::OptionalProto no_value;
  no_value.set_elem_type(onnx::OptionalProto::SEQUENCE);
  expect_error(write("nv.pb", no_value.SerializeAsString()), declared(TypeKind::kOptionalSequence),
               "no sequence_value");
  ir::TensorType bad_kind = declared(TypeKind::kTensor);
  bad_kind.kind = static_cast<TypeKind>(9);
  expect_error(t, bad_kind, "kind 9");
}

}  // namespace
}  // namespace kiln::frontend
