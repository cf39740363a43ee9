// Sequence and optional ops: kernels and inference, with sequences and empty optionals as
// inputs. Expected values come from NumPy (np.split, np.concatenate, np.stack) and from
// the ONNX operator definitions (positions, defaults, keepdims).
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

using ir::TypeKind;

// One input of a node under test: a value of any kind, or omitted.
struct In {
  RuntimeValue value;
  bool omitted = false;
  std::optional<ir::TensorType> type;  // overrides the type derived from the value
};
In omitted() { return In{RuntimeValue(), true, std::nullopt}; }
In tensor_in(Tensor t) { return In{RuntimeValue(std::move(t)), false, std::nullopt}; }
In seq_in(DataType dt, std::vector<Tensor> items) { return In{RuntimeValue::sequence(dt, std::move(items)), false, std::nullopt}; }

// The declared type of a value, as a model would write it.
ir::TensorType type_of(const In& in) {
  if (in.type) return *in.type;
  ir::TensorType t;
  const RuntimeValue& v = in.value;
  if (v.is_tensor()) {
    t.dtype = v.tensor().dtype();
    t.shape = v.tensor().shape();
  } else if (v.is_sequence()) {
    t.kind = TypeKind::kSequence;
    t.dtype = v.sequence_dtype();
  } else {
    t.kind = TypeKind::kOptionalTensor;
  }
  return t;
}

// Runs a body graph node by node with the registry's kernels: enough for SequenceMap
// bodies (the runtime's executor is tested elsewhere).
class MiniRunner : public SubgraphRunner {
 public:
  Expected<std::vector<RuntimeValue>> run(const ir::Graph& body, const std::vector<RuntimeValue>& inputs) override {
    ++calls;
    std::map<const ir::Value*, RuntimeValue> env;
    for (size_t i = 0; i < inputs.size() && i < body.inputs().size(); ++i) env[body.inputs()[i]] = inputs[i];
    for (const auto& n : body.nodes()) {
      KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(*n));
      std::vector<const RuntimeValue*> ins;
      for (const ir::Value* v : n->inputs()) ins.push_back(v ? &env.at(v) : nullptr);
      std::vector<RuntimeValue> outs(static_cast<size_t>(n->num_outputs()));
      KernelContext ctx(*n, ins, &outs, this);
      KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
      for (int k = 0; k < n->num_outputs(); ++k) env[n->output(static_cast<size_t>(k))] = outs[static_cast<size_t>(k)];
    }
    std::vector<RuntimeValue> out;
    for (const ir::Value* v : body.outputs()) out.push_back(env.at(v));
    return out;
  }
  int calls = 0;
};

struct Result {
  std::vector<RuntimeValue> values;
  std::vector<ir::TensorType> types;  // inferred
};

// Inference on the declared input types, then the kernel. Fails if a kernel output's
// kind or dtype disagrees with inference.
Expected<Result> run_values(const std::string& op, int64_t opset, const std::vector<In>& inputs,
                            ir::AttributeMap attrs = {}, int num_outputs = 1, SubgraphRunner* runner = nullptr,
                            std::vector<int> constant_inputs = {}) {
  OneNode n;
  std::vector<ir::Value*> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].omitted) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = n.graph->get_or_add_value("in" + std::to_string(i));
    v->type() = type_of(inputs[i]);
    for (int c : constant_inputs)
      if (static_cast<size_t>(c) == i) v->set_initializer(inputs[i].value.tensor());
    ins.push_back(v);
  }
  for (int i = 0; i < num_outputs; ++i) outs.push_back(n.graph->get_or_add_value("out" + std::to_string(i)));
  n.node = n.graph->add_node("n", op, "", opset, ins, outs);
  n.node->attrs() = std::move(attrs);
  KILN_RETURN_IF_ERROR(infer_node(*n.node));
  KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(*n.node));
  std::vector<const RuntimeValue*> in_ptrs;
  for (const In& in : inputs) in_ptrs.push_back(in.omitted ? nullptr : &in.value);
  Result r;
  r.values.resize(static_cast<size_t>(num_outputs));
  KernelContext ctx(*n.node, in_ptrs, &r.values, runner);
  KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
  for (int i = 0; i < num_outputs; ++i) {
    const ir::TensorType& t = n.node->outputs()[static_cast<size_t>(i)]->type();
    const RuntimeValue& v = r.values[static_cast<size_t>(i)];
    r.types.push_back(t);
    const bool seq_kind = t.kind == TypeKind::kSequence || t.kind == TypeKind::kOptionalSequence;
    const bool optional_kind = t.kind == TypeKind::kOptionalTensor || t.kind == TypeKind::kOptionalSequence;
    if (v.is_none() ? !optional_kind : v.is_sequence() != seq_kind)
      return internal_error("output %d: inferred %s, kernel gave %s", i, t.to_string().c_str(),
                            v.description().c_str());
    const DataType got = v.is_tensor() ? v.tensor().dtype() : v.sequence_dtype();
    if (!v.is_none() && t.dtype != DataType::kUndefined && got != t.dtype)
      return internal_error("output %d: inferred %s, kernel gave %s", i, t.to_string().c_str(),
                            v.description().c_str());
  }
  return r;
}

RuntimeValue run_ok(const std::string& op, int64_t opset, const std::vector<In>& inputs, ir::AttributeMap attrs = {}) {
  auto r = run_values(op, opset, inputs, std::move(attrs));
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().to_string();
  return r.ok() ? r->values[0] : RuntimeValue();
}

std::string run_error(const std::string& op, int64_t opset, const std::vector<In>& inputs,
                      ir::AttributeMap attrs = {}) {
  auto r = run_values(op, opset, inputs, std::move(attrs));
  EXPECT_FALSE(r.ok()) << op << " should have failed";
  return r.ok() ? "" : r.status().to_string();
}

Tensor i64s(std::vector<int64_t> v, std::vector<int64_t> dims) { return Tensor::from_vector<int64_t>(v, dims); }

std::vector<int64_t> first_values(const RuntimeValue& seq) {
  std::vector<int64_t> out;
  for (const Tensor& t : seq.items()) out.push_back(t.element_as_int64(0));
  return out;
}

// Three int64 scalars-as-[1] tensors 10, 20, 30.
std::vector<Tensor> three() { return {i64s({10}, {1}), i64s({20}, {1}), i64s({30}, {1})}; }

TEST(SequenceOps, EmptyConstructLength) {
  RuntimeValue e = run_ok("SequenceEmpty", 11, {}, {{"dtype", attr_i(static_cast<int64_t>(DataType::kInt32))}});
  ASSERT_TRUE(e.is_sequence());
  EXPECT_EQ(e.items().size(), 0u);
  EXPECT_EQ(e.sequence_dtype(), DataType::kInt32);
  RuntimeValue def = run_ok("SequenceEmpty", 11, {});
  EXPECT_EQ(def.sequence_dtype(), DataType::kFloat32);  // the default dtype is float
  EXPECT_NE(run_error("SequenceEmpty", 11, {}, {{"dtype", attr_i(999)}}).find("dtype 999"), std::string::npos);

  auto c = run_values("SequenceConstruct", 11, {tensor_in(iota_f({2, 3})), tensor_in(iota_f({2, 3}))});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->types[0].to_string(), "seq(float32[2,3])");
  EXPECT_EQ(c->values[0].items().size(), 2u);
  auto mixed = run_values("SequenceConstruct", 11, {tensor_in(iota_f({2, 3})), tensor_in(iota_f({4}))});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->types[0].to_string(), "seq(float32[*])");  // item shapes differ: unknown rank
  EXPECT_NE(run_error("SequenceConstruct", 11, {tensor_in(iota_f({1})), tensor_in(i64s({1}, {1}))}).find("dtype"),
            std::string::npos);

  RuntimeValue len = run_ok("SequenceLength", 11, {seq_in(DataType::kInt64, three())});
  expect_tensor(len.tensor(), {}, {3});
  EXPECT_EQ(len.tensor().dtype(), DataType::kInt64);
  RuntimeValue len0 = run_ok("SequenceLength", 11, {seq_in(DataType::kFloat32, {})});
  expect_tensor(len0.tensor(), {}, {0});
  EXPECT_NE(run_error("SequenceLength", 11, {tensor_in(iota_f({3}))}).find("must be a sequence"), std::string::npos);
}

TEST(SequenceOps, InsertAtPositions) {
  const In seq = seq_in(DataType::kInt64, three());
  const In item = tensor_in(i64s({99}, {1}));
  // Default: at the end.
  EXPECT_EQ(first_values(run_ok("SequenceInsert", 11, {seq, item})), (std::vector<int64_t>{10, 20, 30, 99}));
  EXPECT_EQ(first_values(run_ok("SequenceInsert", 11, {seq, item, tensor_in(scalar<int64_t>(0))})),
            (std::vector<int64_t>{99, 10, 20, 30}));
  EXPECT_EQ(first_values(run_ok("SequenceInsert", 11, {seq, item, tensor_in(scalar<int32_t>(-1))})),
            (std::vector<int64_t>{10, 20, 99, 30}));
  EXPECT_EQ(first_values(run_ok("SequenceInsert", 11, {seq, item, tensor_in(scalar<int64_t>(3))})),
            (std::vector<int64_t>{10, 20, 30, 99}));  // position n appends
  EXPECT_EQ(first_values(run_ok("SequenceInsert", 11, {seq, item, tensor_in(scalar<int64_t>(-3))})),
            (std::vector<int64_t>{99, 10, 20, 30}));
  // The input sequence is not changed (sequences are values).
  EXPECT_EQ(first_values(seq.value), (std::vector<int64_t>{10, 20, 30}));
  EXPECT_NE(run_error("SequenceInsert", 11, {seq, item, tensor_in(scalar<int64_t>(4))}).find("out of range [-3, 3]"),
            std::string::npos);
  EXPECT_NE(run_error("SequenceInsert", 11, {seq, item, tensor_in(scalar<int64_t>(-4))}).find("out of range"),
            std::string::npos);
  EXPECT_NE(run_error("SequenceInsert", 11, {seq, tensor_in(iota_f({1}))}).find("int64"), std::string::npos);
  EXPECT_NE(run_error("SequenceInsert", 11, {seq, item, tensor_in(i64s({0, 1}, {2}))}).find("scalar"),
            std::string::npos);
  // Into an empty sequence.
  RuntimeValue one = run_ok("SequenceInsert", 11, {seq_in(DataType::kInt64, {}), item});
  EXPECT_EQ(first_values(one), (std::vector<int64_t>{99}));
}

TEST(SequenceOps, AtAndErase) {
  const In seq = seq_in(DataType::kInt64, three());
  expect_tensor(run_ok("SequenceAt", 11, {seq, tensor_in(scalar<int64_t>(1))}).tensor(), {1}, {20});
  expect_tensor(run_ok("SequenceAt", 11, {seq, tensor_in(scalar<int32_t>(-1))}).tensor(), {1}, {30});
  expect_tensor(run_ok("SequenceAt", 11, {seq, tensor_in(scalar<int64_t>(-3))}).tensor(), {1}, {10});
  EXPECT_NE(run_error("SequenceAt", 11, {seq, tensor_in(scalar<int64_t>(3))}).find("out of range [-3, 2]"),
            std::string::npos);
  EXPECT_NE(run_error("SequenceAt", 11, {seq_in(DataType::kInt64, {}), tensor_in(scalar<int64_t>(0))})
                .find("out of range"),
            std::string::npos);
  auto at = run_values("SequenceAt", 11,
                       {In{RuntimeValue::sequence(DataType::kInt64, three()), false,
                           ir::TensorType{DataType::kInt64, Shape{1}, TypeKind::kSequence}},
                        tensor_in(scalar<int64_t>(0))});
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->types[0].to_string(), "int64[1]");

  // Erase: the last item by default.
  EXPECT_EQ(first_values(run_ok("SequenceErase", 11, {seq})), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(first_values(run_ok("SequenceErase", 11, {seq, tensor_in(scalar<int64_t>(0))})),
            (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(first_values(run_ok("SequenceErase", 11, {seq, tensor_in(scalar<int64_t>(-2))})),
            (std::vector<int64_t>{10, 30}));
  EXPECT_NE(run_error("SequenceErase", 11, {seq, tensor_in(scalar<int64_t>(3))}).find("out of range"),
            std::string::npos);
  EXPECT_NE(run_error("SequenceErase", 11, {seq_in(DataType::kInt64, {})}).find("empty sequence"),
            std::string::npos);
}

TEST(SequenceOps, SplitToSequence) {
  const Tensor x = iota_f({2, 3, 4});
  // np.split(x, [3], axis=2): a scalar split of 3 leaves a shorter last chunk.
  RuntimeValue s = run_ok("SplitToSequence", 11, {tensor_in(x), tensor_in(scalar<int64_t>(3))}, {{"axis", attr_i(2)}});
  ASSERT_EQ(s.items().size(), 2u);
  expect_tensor(s.items()[0], {2, 3, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22});
  expect_tensor(s.items()[1], {2, 3, 1}, {3, 7, 11, 15, 19, 23});
  // No split, keepdims=0: x[:, i, :] for each i.
  auto r = run_values("SplitToSequence", 11, {tensor_in(x)}, {{"axis", attr_i(1)}, {"keepdims", attr_i(0)}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->types[0].to_string(), "seq(float32[2,4])");
  ASSERT_EQ(r->values[0].items().size(), 3u);
  expect_tensor(r->values[0].items()[0], {2, 4}, {0, 1, 2, 3, 12, 13, 14, 15});
  expect_tensor(r->values[0].items()[1], {2, 4}, {4, 5, 6, 7, 16, 17, 18, 19});
  expect_tensor(r->values[0].items()[2], {2, 4}, {8, 9, 10, 11, 20, 21, 22, 23});
  // No split, keepdims default 1: extent-1 chunks.
  auto kept = run_values("SplitToSequence", 11, {tensor_in(x)}, {{"axis", attr_i(-1)}});
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->types[0].to_string(), "seq(float32[2,3,1])");
  EXPECT_EQ(kept->values[0].items().size(), 4u);
  // np.split(x, [1], axis=1) from split lengths [1, 2]; keepdims is ignored with a split.
  RuntimeValue l = run_ok("SplitToSequence", 11, {tensor_in(x), tensor_in(i64s({1, 2}, {2}))},
                          {{"axis", attr_i(-2)}, {"keepdims", attr_i(0)}});
  ASSERT_EQ(l.items().size(), 2u);
  expect_tensor(l.items()[0], {2, 1, 4}, {0, 1, 2, 3, 12, 13, 14, 15});
  expect_tensor(l.items()[1], {2, 2, 4}, {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  // Constant equal lengths give a static item shape.
  auto eq = run_values("SplitToSequence", 11, {tensor_in(x), tensor_in(scalar<int64_t>(2))}, {{"axis", attr_i(2)}},
                       1, nullptr, {1});
  ASSERT_TRUE(eq.ok());
  EXPECT_EQ(eq->types[0].to_string(), "seq(float32[2,3,2])");

  EXPECT_NE(run_error("SplitToSequence", 11, {tensor_in(x), tensor_in(i64s({1, 1}, {2}))}, {{"axis", attr_i(1)}})
                .find("sums to 2, the axis extent is 3"),
            std::string::npos);
  EXPECT_NE(run_error("SplitToSequence", 11, {tensor_in(x), tensor_in(scalar<int64_t>(0))}).find("positive"),
            std::string::npos);
  EXPECT_NE(run_error("SplitToSequence", 11, {tensor_in(x), tensor_in(i64s({-1, 4}, {2}))}, {{"axis", attr_i(1)}})
                .find("negative"),
            std::string::npos);
  EXPECT_NE(run_error("SplitToSequence", 11, {tensor_in(x)}, {{"axis", attr_i(3)}}).find("axis"), std::string::npos);
  EXPECT_NE(run_error("SplitToSequence", 11, {tensor_in(scalar<float>(1))}).find("scalar"), std::string::npos);
}

TEST(SequenceOps, ConcatFromSequence) {
  const Tensor a = i64s({0, 1, 2, 3, 4, 5}, {2, 3});
  const Tensor b = i64s({6, 7, 8, 9}, {2, 2});
  const Tensor a10 = i64s({10, 11, 12, 13, 14, 15}, {2, 3});
  // np.concatenate([a, b], axis=1)
  auto c = run_values("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {a, b})}, {{"axis", attr_i(1)}});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_tensor(c->values[0].tensor(), {2, 5}, {0, 1, 2, 6, 7, 3, 4, 5, 8, 9});
  EXPECT_EQ(c->types[0].kind, TypeKind::kTensor);
  // np.stack([a, a + 10], axis=-1) and axis=0
  RuntimeValue s = run_ok("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {a, a10})},
                          {{"axis", attr_i(-1)}, {"new_axis", attr_i(1)}});
  expect_tensor(s.tensor(), {2, 3, 2}, {0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15});
  RuntimeValue s0 = run_ok("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {a, a10})},
                           {{"axis", attr_i(0)}, {"new_axis", attr_i(1)}});
  expect_tensor(s0.tensor(), {2, 2, 3}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  auto inferred = run_values("ConcatFromSequence", 11,
                             {In{RuntimeValue::sequence(DataType::kInt64, {a, a10}), false,
                                 ir::TensorType{DataType::kInt64, Shape{2, 3}, TypeKind::kSequence}}},
                             {{"axis", attr_i(2)}, {"new_axis", attr_i(1)}});
  ASSERT_TRUE(inferred.ok()) << inferred.status().to_string();
  EXPECT_EQ(inferred->types[0].to_string(), "int64[2,3,?]");

  EXPECT_NE(run_error("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {a, b})}, {{"axis", attr_i(0)}})
                .find("off the concatenation axis"),
            std::string::npos);
  EXPECT_NE(run_error("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {a, b})},
                      {{"axis", attr_i(0)}, {"new_axis", attr_i(1)}})
                .find("equal shapes"),
            std::string::npos);
  EXPECT_NE(run_error("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {})}, {{"axis", attr_i(0)}})
                .find("empty sequence"),
            std::string::npos);
  EXPECT_NE(run_error("ConcatFromSequence", 11, {seq_in(DataType::kInt64, {a})}, {{"axis", attr_i(2)}}).find("axis"),
            std::string::npos);
}

TEST(SequenceOps, OptionalOps) {
  // Optional of a tensor, and an empty optional typed by the node's output.
  auto full = run_values("Optional", 15, {tensor_in(iota_f({2}))});
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_EQ(full->types[0].to_string(), "optional(float32[2])");
  EXPECT_TRUE(full->values[0].is_tensor());
  auto of_seq = run_values("Optional", 15, {seq_in(DataType::kInt64, three())});
  ASSERT_TRUE(of_seq.ok());
  EXPECT_EQ(of_seq->types[0].kind, TypeKind::kOptionalSequence);
  EXPECT_TRUE(of_seq->values[0].is_sequence());
  // With no input and no type, inference cannot type the output.
  EXPECT_NE(run_error("Optional", 15, {}).find("no type"), std::string::npos);

  const In none{RuntimeValue(), false, ir::TensorType{DataType::kInt32, Shape{}, TypeKind::kOptionalTensor}};
  auto has = [&](int64_t opset, const std::vector<In>& ins) {
    RuntimeValue v = run_ok("OptionalHasElement", opset, ins);
    return v.is_tensor() && v.tensor().dtype() == DataType::kBool && v.tensor().rank() == 0 &&
           v.tensor().data<bool>()[0];
  };
  EXPECT_FALSE(has(15, {none}));
  EXPECT_TRUE(has(15, {tensor_in(iota_f({2}))}));
  EXPECT_TRUE(has(18, {seq_in(DataType::kInt64, {})}));  // an empty sequence is still an element
  EXPECT_FALSE(has(18, {omitted()}));
  EXPECT_FALSE(has(18, {}));
  EXPECT_NE(run_error("OptionalHasElement", 15, {}).find("inputs"), std::string::npos);  // required before 18

  auto get = run_values("OptionalGetElement", 18,
                        {In{RuntimeValue(iota_f({4})), false,
                            ir::TensorType{DataType::kFloat32, Shape{4}, TypeKind::kOptionalTensor}}});
  ASSERT_TRUE(get.ok()) << get.status().to_string();
  EXPECT_EQ(get->types[0].to_string(), "float32[4]");
  expect_tensor(get->values[0].tensor(), {4}, {0, 1, 2, 3});
  auto get_seq = run_values("OptionalGetElement", 15,
                            {In{RuntimeValue::sequence(DataType::kInt64, three()), false,
                                ir::TensorType{DataType::kInt64, Shape{1}, TypeKind::kOptionalSequence}}});
  ASSERT_TRUE(get_seq.ok());
  EXPECT_EQ(get_seq->types[0].to_string(), "seq(int64[1])");
  EXPECT_EQ(first_values(get_seq->values[0]), (std::vector<int64_t>{10, 20, 30}));
  // Opset 18 also takes a plain tensor or sequence.
  EXPECT_EQ(run_ok("OptionalGetElement", 18, {tensor_in(iota_f({3}))}).tensor().num_elements(), 3);
  EXPECT_NE(run_error("OptionalGetElement", 18, {none}).find("empty"), std::string::npos);
}

TEST(SequenceOps, IdentityPassesAnyValue) {
  RuntimeValue s = run_ok("Identity", 16, {seq_in(DataType::kInt64, three())});
  EXPECT_EQ(first_values(s), (std::vector<int64_t>{10, 20, 30}));
  const In none{RuntimeValue(), false, ir::TensorType{DataType::kFloat32, Shape(), TypeKind::kOptionalSequence}};
  auto r = run_values("Identity", 16, {none});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->values[0].is_none());
  EXPECT_EQ(r->types[0].kind, TypeKind::kOptionalSequence);
  expect_tensor(run_ok("Identity", 16, {tensor_in(iota_f({2}))}).tensor(), {2}, {0, 1});
}

// A SequenceMap body: (item, extra) -> (Add(item, extra), Shape(item)).
std::shared_ptr<ir::Graph> map_body() {
  auto b = std::make_shared<ir::Graph>("body");
  ir::Value* item = b->get_or_add_value("item");
  item->type() = ir::TensorType{DataType::kFloat32, Shape{Dim()}};
  ir::Value* extra = b->get_or_add_value("extra");
  extra->type() = ir::TensorType{DataType::kFloat32, Shape{Dim()}};
  ir::Value* sum = b->get_or_add_value("sum");
  sum->type() = ir::TensorType{DataType::kFloat32, Shape{Dim()}};
  ir::Value* shape = b->get_or_add_value("shape");
  shape->type() = ir::TensorType{DataType::kInt64, Shape{1}};
  b->inputs() = {item, extra};
  b->add_node("add", "Add", "", 17, {item, extra}, {sum});
  b->add_node("shape", "Shape", "", 17, {item}, {shape});
  b->outputs() = {sum, shape};
  return b;
}

TEST(SequenceOps, SequenceMapWithSequenceAndTensorInputs) {
  const Tensor x0 = Tensor::from_vector<float>({1, 2, 3}, {3});
  const Tensor x1 = Tensor::from_vector<float>({4, 5}, {2});
  ir::AttributeMap attrs{{"body", ir::Attribute::from_graph(map_body())}};
  MiniRunner runner;
  // A second sequence is mapped item by item.
  auto r = run_values("SequenceMap", 17,
                      {seq_in(DataType::kFloat32, {x0, x1}),
                       seq_in(DataType::kFloat32, {Tensor::from_vector<float>({10, 20, 30}, {3}),
                                                   Tensor::from_vector<float>({1, 1}, {2})})},
                      attrs, 2, &runner);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(runner.calls, 2);
  EXPECT_EQ(r->types[0].to_string(), "seq(float32[?])");
  EXPECT_EQ(r->types[1].to_string(), "seq(int64[1])");
  ASSERT_EQ(r->values[0].items().size(), 2u);
  expect_tensor(r->values[0].items()[0], {3}, {11, 22, 33});
  expect_tensor(r->values[0].items()[1], {2}, {5, 6});
  expect_tensor(r->values[1].items()[0], {1}, {3});
  expect_tensor(r->values[1].items()[1], {1}, {2});
  // A tensor is passed whole to every iteration (broadcast by the body's Add).
  auto t = run_values("SequenceMap", 17,
                      {seq_in(DataType::kFloat32, {x0, x1}), tensor_in(Tensor::from_vector<float>({100}, {1}))},
                      attrs, 2, &runner);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  expect_tensor(t->values[0].items()[0], {3}, {101, 102, 103});
  expect_tensor(t->values[0].items()[1], {2}, {104, 105});
  // An empty input sequence gives empty sequences of the body's output dtypes.
  auto e = run_values("SequenceMap", 17, {seq_in(DataType::kFloat32, {}), tensor_in(x0)}, attrs, 2, &runner);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->values[0].items().size(), 0u);
  EXPECT_EQ(e->values[1].sequence_dtype(), DataType::kInt64);
  // Sequences of different lengths, and no subgraph runner, are errors.
  auto bad = run_values("SequenceMap", 17, {seq_in(DataType::kFloat32, {x0, x1}), seq_in(DataType::kFloat32, {x0})},
                        attrs, 2, &runner);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("sequence of 1 items, input 0 has 2"), std::string::npos);
  auto no_runner = run_values("SequenceMap", 17, {seq_in(DataType::kFloat32, {x0}), tensor_in(x0)}, attrs, 2);
  ASSERT_FALSE(no_runner.ok());
  EXPECT_NE(no_runner.status().to_string().find("executes subgraphs"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ops::testing
