// The Kiln IR: a graph of nodes and values. Nodes are kept in execution order
// (topologically sorted); values are named edges with a type (dtype + shape, possibly
// symbolic). Initializers are values carrying a constant tensor. Subgraphs (If/Loop/Scan
// bodies) are Graphs held by attributes; they may read values of enclosing graphs by
// name (outer-scope values).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/attribute.h"

namespace kiln::ir {

class Node;

// What a value holds: a tensor, a sequence of tensors, or an optional of either.
enum class TypeKind : int32_t { kTensor = 0, kSequence = 1, kOptionalTensor = 2, kOptionalSequence = 3 };
inline constexpr int32_t kMaxTypeKind = 3;

struct TensorType {
  DataType dtype = DataType::kUndefined;  // the element type (of the tensor, or of each item)
  Shape shape;  // of the tensor (or of each item when known); unknown rank by default
  TypeKind kind = TypeKind::kTensor;
  bool is_tensor() const { return kind == TypeKind::kTensor; }
  std::string to_string() const;  // "float32[1,3,224,224]", "seq(float32[?])", "optional(float32[2])"
};

class Value {
 public:
  explicit Value(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  TensorType& type() { return type_; }
  const TensorType& type() const { return type_; }
  DataType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }

  // The node that produces this value (null for graph inputs, initializers, outer-scope values).
  Node* producer() const { return producer_; }
  int producer_output() const { return producer_output_; }
  void set_producer(Node* n, int output_index) { producer_ = n; producer_output_ = output_index; }

  // Initializer: a constant the graph carries. A graph input may also have one (an
  // overridable constant: the default when the user does not feed it).
  bool has_initializer() const { return initializer_ != nullptr; }
  const Tensor* initializer() const { return initializer_.get(); }
  void set_initializer(Tensor t) { initializer_ = std::make_shared<Tensor>(std::move(t)); }
  void clear_initializer() { initializer_.reset(); }
  // Makes this value's initializer the very tensor `other` holds (no copy): for the one-node
  // twins the kernel layer builds at concrete shapes (kernels/shape_specialized_kernel.h).
  void share_initializer(const Value& other) { initializer_ = other.initializer_; }

  // A value defined in an enclosing graph, read by a subgraph.
  bool is_outer_scope() const { return outer_scope_; }
  void set_outer_scope(bool v) { outer_scope_ = v; }

 private:
  std::string name_;
  TensorType type_;
  Node* producer_ = nullptr;
  int producer_output_ = -1;
  std::shared_ptr<Tensor> initializer_;
  bool outer_scope_ = false;
};

class Node {
 public:
  Node(std::string name, std::string op_type, std::string domain, int64_t opset)
      : name_(std::move(name)), op_type_(std::move(op_type)), domain_(std::move(domain)), opset_(opset) {}

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  const std::string& op_type() const { return op_type_; }
  // "" is the default ONNX domain ("ai.onnx"), as ONNX writes it.
  const std::string& domain() const { return domain_; }
  // The opset version of this node's domain in force for this node.
  int64_t opset() const { return opset_; }
  void set_opset(int64_t v) { opset_ = v; }

  // Inputs may be null: an omitted optional input (ONNX's empty name).
  std::vector<Value*>& inputs() { return inputs_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  std::vector<Value*>& outputs() { return outputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }

  AttributeMap& attrs() { return attrs_; }
  const AttributeMap& attrs() const { return attrs_; }
  const Attribute* attr(const std::string& name) const;
  bool has_attr(const std::string& name) const { return attr(name) != nullptr; }
  // Typed accessors returning `fallback` when the attribute is absent.
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& name, std::vector<float> fallback = {}) const;
  // Subgraphs held by this node's attributes (If branches, Loop/Scan bodies).
  std::vector<Graph*> subgraphs() const;

  // "'conv1' (Conv)": how error messages name a node.
  std::string label() const;

 private:
  std::string name_;
  std::string op_type_;
  std::string domain_;
  int64_t opset_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  AttributeMap attrs_;
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // Creates a value; its name must be unique in this graph.
  Expected<Value*> add_value(const std::string& name);
  Value* find_value(const std::string& name) const;
  // Renames a value of this graph; the new name must be free.
  Status rename_value(Value* value, const std::string& name);
  // Returns the value named `name`, creating it if needed.
  Value* get_or_add_value(const std::string& name);
  // Adds a node at the end of the execution order; sets producers of `outputs`.
  Node* add_node(std::string name, std::string op_type, std::string domain, int64_t opset,
                 std::vector<Value*> inputs, std::vector<Value*> outputs);
  // Removes nodes for which `pred` is true (values are kept).
  template <typename Pred>
  void remove_nodes_if(Pred pred) {
    std::vector<std::unique_ptr<Node>> kept;
    for (auto& n : nodes_)
      if (!pred(*n)) kept.push_back(std::move(n));
    nodes_ = std::move(kept);
  }

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  std::vector<Value*>& inputs() { return inputs_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  std::vector<Value*>& outputs() { return outputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }

  // Opset imports: domain ("" for ai.onnx) -> version.
  std::map<std::string, int64_t>& opset_imports() { return opsets_; }
  const std::map<std::string, int64_t>& opset_imports() const { return opsets_; }

  // Free-form model metadata (producer name, source hash, doc string).
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Orders nodes so every producer precedes its users. Fails naming a node on a cycle.
  Status topological_sort();
  // Puts the nodes in the given order (a permutation of nodes(); e.g. from a scheduler).
  // Fails, changing nothing, if it is not one or a node would run before a producer of a
  // value it reads.
  Status reorder_nodes(const std::vector<const Node*>& order);
  // Every value `node` reads: its inputs and the values of this graph its subgraphs read
  // from the enclosing scope.
  std::vector<const Value*> node_reads(const Node& node) const;
  // Total bytes of initializer data (this graph and subgraphs).
  size_t initializer_bytes() const;
  // Initializers plus tensors held in node attributes (e.g. Constant nodes): all the
  // constant data the model carries, in the layouts it came in (the pre-packed copies are
  // prepacked_bytes()).
  size_t weight_bytes() const;
  // Of those, the initializers a prepared model does not read (prepacked_only_initializers),
  // counted once per distinct tensor storage.
  size_t cold_weight_bytes() const;
  // The packed copies of weights `kiln compile` stores on nodes (kPrepackedAttr), which
  // weight_bytes() leaves out: weight_bytes() - cold_weight_bytes() + prepacked_bytes() is
  // what a prepared model reads.
  size_t prepacked_bytes() const;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, int64_t> opsets_;
  std::map<std::string, std::string> metadata_;
};

// Structural checks: every node input is produced earlier, is a graph input, an
// initializer or an outer-scope value; each value has at most one producer; graph
// outputs are defined; subgraphs verify recursively. Errors name the node at fault.
Status verify(const Graph& graph);

// Readable text dump, one node per line:
//   %y: float32[1,64,112,112] = Conv(%x, %w) {strides=[2,2], pads=[3,3,3,3]}  # conv1
std::string to_text(const Graph& graph);

// The initializers of `g` whose every use is an input some node stores pre-packed
// (kPrepackedInputAttr, kernels/prepacked_weights.h), none of them a graph input or output
// or read by a subgraph: a prepared model reads only their packed copies.
std::vector<const Value*> prepacked_only_initializers(const Graph& g);

}  // namespace kiln::ir
