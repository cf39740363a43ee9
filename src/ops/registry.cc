// The op registry and the inference driver.
#include "ops/registry.h"

#include <algorithm>

namespace kiln::ops {

InferContext::InferContext(const ir::Node& node, std::vector<const ir::TensorType*> input_types,
                           std::vector<const Tensor*> input_constants)
    : node_(node),
      input_types_(std::move(input_types)),
      input_constants_(std::move(input_constants)),
      outputs_(static_cast<size_t>(node.num_outputs())) {
  input_constants_.resize(input_types_.size(), nullptr);
}

bool InferContext::has_input(int i) const {
  return i >= 0 && i < num_inputs() && input_types_[static_cast<size_t>(i)] != nullptr;
}

const ir::TensorType& InferContext::input_type(int i) const {
  KILN_CHECK(has_input(i), "input %d of %s is absent", i, node_.label().c_str());
  return *input_types_[static_cast<size_t>(i)];
}

const Tensor* InferContext::input_constant(int i) const {
  return has_input(i) ? input_constants_[static_cast<size_t>(i)] : nullptr;
}

void InferContext::set_output(int i, DataType dtype, Shape shape) {
  if (i < 0 || i >= num_outputs()) return;
  outputs_[static_cast<size_t>(i)] = ir::TensorType{dtype, std::move(shape)};
}

KernelContext::KernelContext(const ir::Node& node, std::vector<const RuntimeValue*> inputs,
                             std::vector<RuntimeValue>* outputs, SubgraphRunner* subgraphs)
    : node_(node),
      owned_inputs_(std::move(inputs)),
      inputs_(owned_inputs_.data()),
      num_inputs_(owned_inputs_.size()),
      outputs_(outputs),
      subgraphs_(subgraphs) {}

KernelContext::KernelContext(const ir::Node& node, const RuntimeValue* const* inputs, size_t num_inputs,
                             std::vector<RuntimeValue>* outputs, SubgraphRunner* subgraphs,
                             OutputRecycler* recycler)
    : node_(node),
      inputs_(inputs),
      num_inputs_(num_inputs),
      outputs_(outputs),
      subgraphs_(subgraphs),
      recycler_(recycler) {}

const RuntimeValue* KernelContext::value(int i) const {
  if (i < 0 || i >= num_inputs()) return nullptr;
  return inputs_[static_cast<size_t>(i)];
}

const Tensor* KernelContext::input(int i) const {
  const RuntimeValue* v = value(i);
  return v && v->is_tensor() && v->tensor().defined() ? &v->tensor() : nullptr;
}

Expected<Tensor*> KernelContext::allocate_output(int i, DataType dtype, const std::vector<int64_t>& dims,
                                                 TensorInit init) {
  if (i < 0 || i >= num_outputs())
    return internal_error("node %s has no output %d", node_.label().c_str(), i);
  RuntimeValue& slot = (*outputs_)[static_cast<size_t>(i)];
  Tensor recycled;
  if (recycler_ && recycler_->reuse(dtype, dims, init, &recycled)) {
    slot = RuntimeValue(std::move(recycled));
    return &slot.tensor();
  }
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(dtype, dims, init), "node %s output %d",
                        node_.label().c_str(), i);
  slot = RuntimeValue(std::move(t));
  return &slot.tensor();
}

void KernelContext::set_output(int i, Tensor t) {
  if (i >= 0 && i < num_outputs()) (*outputs_)[static_cast<size_t>(i)] = RuntimeValue(std::move(t));
}

void KernelContext::set_output_view(int i, const Tensor& base, const std::vector<int64_t>& dims) {
  if (i < 0 || i >= num_outputs()) return;
  RuntimeValue& slot = (*outputs_)[static_cast<size_t>(i)];
  Tensor shell;
  if (recycler_ && recycler_->reuse_view(base, dims, &shell)) {
    slot = RuntimeValue(std::move(shell));
    return;
  }
  slot = RuntimeValue(base.reshaped(dims));
}

void KernelContext::set_output_value(int i, RuntimeValue v) {
  if (i >= 0 && i < num_outputs()) (*outputs_)[static_cast<size_t>(i)] = std::move(v);
}

OpSchema::OpSchema(std::string name, std::string domain) : name_(std::move(name)), domain_(std::move(domain)) {}

OpSchema& OpSchema::since(int64_t first, int64_t last) {
  first_ = first;
  last_ = last;
  return *this;
}
OpSchema& OpSchema::inputs(int min, int max) {
  min_inputs_ = min;
  max_inputs_ = max;
  return *this;
}
OpSchema& OpSchema::outputs(int min, int max) {
  min_outputs_ = min;
  max_outputs_ = max;
  return *this;
}
OpSchema& OpSchema::attr(std::string name, ir::AttrKind kind) {
  attrs_.push_back(AttrSpec{std::move(name), kind, false, std::nullopt});
  return *this;
}
OpSchema& OpSchema::required_attr(std::string name, ir::AttrKind kind) {
  attrs_.push_back(AttrSpec{std::move(name), kind, true, std::nullopt});
  return *this;
}
OpSchema& OpSchema::infer(InferFn fn) {
  infer_ = std::move(fn);
  return *this;
}
OpSchema& OpSchema::kernel(KernelFn fn) {
  kernel_ = std::move(fn);
  return *this;
}
OpSchema& OpSchema::doc(std::string text) {
  doc_ = std::move(text);
  return *this;
}

Status OpSchema::validate(const ir::Node& node) const {
  // Trailing omitted optional inputs do not count.
  int n_in = node.num_inputs();
  while (n_in > 0 && node.inputs()[static_cast<size_t>(n_in - 1)] == nullptr) --n_in;
  if (n_in < min_inputs_ || (max_inputs_ >= 0 && n_in > max_inputs_))
    return invalid_argument("node %s has %d inputs; opset %lld takes %d to %s", node.label().c_str(), n_in,
                            (long long)node.opset(), min_inputs_,
                            max_inputs_ < 0 ? "any" : std::to_string(max_inputs_).c_str());
  for (int i = 0; i < std::min(n_in, min_inputs_); ++i)
    if (!node.inputs()[static_cast<size_t>(i)])
      return invalid_argument("node %s: required input %d is missing", node.label().c_str(), i);
  int n_out = node.num_outputs();
  if (n_out < min_outputs_ || (max_outputs_ >= 0 && n_out > max_outputs_))
    return invalid_argument("node %s has %d outputs; it produces %d to %s", node.label().c_str(), n_out,
                            min_outputs_, max_outputs_ < 0 ? "any" : std::to_string(max_outputs_).c_str());
  for (const AttrSpec& spec : attrs_) {
    const ir::Attribute* a = node.attr(spec.name);
    if (!a) {
      if (spec.required)
        return invalid_argument("node %s is missing required attribute '%s'", node.label().c_str(),
                                spec.name.c_str());
      continue;
    }
    // ONNX writers sometimes store an int where a float is declared; accept that one widening.
    bool widening = spec.kind == ir::AttrKind::kFloat && a->kind == ir::AttrKind::kInt;
    if (a->kind != spec.kind && !widening)
      return invalid_argument("node %s attribute '%s' is %s, expected %s", node.label().c_str(),
                              spec.name.c_str(), ir::attr_kind_name(a->kind), ir::attr_kind_name(spec.kind));
  }
  return ok_status();
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry* registry = new OpRegistry();  // never destroyed: static registrars outlive order
  return *registry;
}

void OpRegistry::add(OpSchema schema) { schemas_.push_back(std::make_unique<OpSchema>(std::move(schema))); }

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& name, int64_t opset) const {
  const std::string& d = domain == "ai.onnx" ? std::string() : domain;
  for (const auto& s : schemas_)
    if (s->name() == name && s->domain() == d && opset >= s->first_opset() && opset <= s->last_opset())
      return s.get();
  return nullptr;
}

bool OpRegistry::knows(const std::string& domain, const std::string& name) const {
  const std::string& d = domain == "ai.onnx" ? std::string() : domain;
  for (const auto& s : schemas_)
    if (s->name() == name && s->domain() == d) return true;
  return false;
}

std::vector<const OpSchema*> OpRegistry::all() const {
  std::vector<const OpSchema*> out;
  for (const auto& s : schemas_) out.push_back(s.get());
  return out;
}

Expected<const OpSchema*> schema_for(const ir::Node& node) {
  const OpRegistry& reg = OpRegistry::instance();
  if (const OpSchema* s = reg.find(node.domain(), node.op_type(), node.opset())) return s;
  if (reg.knows(node.domain(), node.op_type()))
    return unsupported("node %s: opset %lld of this op is not supported", node.label().c_str(),
                       (long long)node.opset());
  return unsupported("node %s: op type is not supported", node.label().c_str());
}

namespace {

// Keeps what was known before where inference learned less (e.g. a declared output
// shape from the model's value_info when inference could only find the rank).
ir::TensorType merge_types(const ir::TensorType& known, const ir::TensorType& inferred) {
  // Inference that learned nothing (no kind, dtype or rank) keeps a declared sequence or
  // optional kind.
  if (inferred.is_tensor() && inferred.dtype == DataType::kUndefined && !inferred.shape.has_rank()) return known;
  ir::TensorType out = inferred;
  if (out.dtype == DataType::kUndefined) out.dtype = known.dtype;
  if (!out.shape.has_rank()) {
    out.shape = known.shape;
  } else if (known.shape.has_rank() && known.shape.rank() == out.shape.rank()) {
    for (int i = 0; i < out.shape.rank(); ++i)
      if (!out.shape[i].is_static() && (known.shape[i].is_static() || out.shape[i].symbol.empty()))
        out.shape[i] = known.shape[i];
  }
  return out;
}

}  // namespace

Status infer_node(ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(node));
  KILN_RETURN_IF_ERROR(schema->validate(node));
  std::vector<const ir::TensorType*> types;
  std::vector<const Tensor*> constants;
  for (ir::Value* v : node.inputs()) {
    types.push_back(v ? &v->type() : nullptr);
    constants.push_back(v && v->has_initializer() ? v->initializer() : nullptr);
  }
  InferContext ctx(node, std::move(types), std::move(constants));
  if (schema->infer_fn()) KILN_RETURN_IF_ERROR(schema->infer_fn()(ctx), "inferring node %s", node.label().c_str());
  for (int i = 0; i < node.num_outputs(); ++i) {
    ir::Value* v = node.outputs()[static_cast<size_t>(i)];
    if (v) v->type() = merge_types(v->type(), ctx.outputs()[static_cast<size_t>(i)]);
  }
  return ok_status();
}

namespace {

// An open dim inference could not express (a Resize by scales, a Concat of differently named
// dims, a data-dependent extent) gets a name of its own: "dim(VALUE,AXIS)". A name says only
// "equal wherever this name appears", and every op's inference moves a dim to its outputs only
// where the extents are equal (a Relu, a stride-1 same-padded Conv, a broadcast against 1), so
// the passes that need equal shapes (conv and element-wise fusion, layout choice) can prove them
// on the values downstream as they do with the model's own dim names, instead of giving up on
// every "?". Only the main graph: a loop body's values may change extent between iterations.
void name_open_dims(ir::Node& node) {
  for (ir::Value* v : node.outputs()) {
    if (!v || !v->type().is_tensor() || !v->shape().has_rank()) continue;
    std::vector<Dim>& dims = v->type().shape.dims();
    for (size_t axis = 0; axis < dims.size(); ++axis)
      if (!dims[axis].is_static() && dims[axis].symbol.empty())
        dims[axis] = Dim::symbolic(str_format("dim(%s,%zu)", v->name().c_str(), axis));
  }
}

Status infer_graph_nodes(ir::Graph& graph, bool main_graph) {
  for (const auto& n : graph.nodes()) {
    // Subgraphs first: If, Loop and SequenceMap type their outputs from their bodies'.
    for (ir::Graph* g : n->subgraphs()) {
      // Outer-scope values were typed when the body was imported, possibly before their
      // producer was inferred: refresh them from this graph.
      for (const auto& sv : g->values()) {
        if (!sv->is_outer_scope()) continue;
        const ir::Value* outer = graph.find_value(sv->name());
        if (outer && outer->dtype() != DataType::kUndefined) sv->type() = outer->type();
      }
      // Subgraph inputs are typed by the frontend from the body's declaration; if the
      // body cannot be fully inferred, execution still works with dynamic shapes.
      Status s = infer_graph_nodes(*g, false);
      if (!s.ok()) return s.add_context("in a subgraph of node %s", n->label().c_str());
    }
    KILN_RETURN_IF_ERROR(infer_node(*n));
    if (main_graph && n->subgraphs().empty()) name_open_dims(*n);
  }
  return ok_status();
}

}  // namespace

Status infer_graph(ir::Graph& graph) { return infer_graph_nodes(graph, true); }

}  // namespace kiln::ops
