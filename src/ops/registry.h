// The op registry: per ONNX op (domain, name, opset range) its schema, its shape and
// type inference, and its reference kernel. One registration per op, next to its code
// in src/ops/<family>.cc; nothing central lists the ops.
//
//   KILN_REGISTER_OP(OpSchema("Relu").since(6).inputs(1, 1).outputs(1, 1)
//                        .infer(infer_same_as_input).kernel(relu_reference));
//
// Reference kernels are simple, portable and correct: they are the oracle every fast
// kernel is tested against. They read attributes from the node, allocate their outputs,
// and never trust their inputs (shapes, ranks, index values are checked and reported
// as a Status naming the node; never a crash).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace kiln::ops {

// The newest default-domain opset Kiln implements.
inline constexpr int64_t kMaxOpset = 27;
// "" (ai.onnx) and "ai.onnx.ml" are the domains Kiln knows; "com.microsoft" ops may be
// registered as well.
inline constexpr const char* kOnnxDomain = "";
// Kiln's own fused operators (docs/fused-ops.md), version 1. A graph holding one imports
// this domain: graph.opset_imports()[kKilnDomain] = kKilnOpset.
inline constexpr const char* kKilnDomain = "kiln";
inline constexpr int64_t kKilnOpset = 1;

// ---- Shape and type inference -------------------------------------------------------

class InferContext {
 public:
  InferContext(const ir::Node& node, std::vector<const ir::TensorType*> input_types,
               std::vector<const Tensor*> input_constants);

  const ir::Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  // False for an omitted optional input or an index past the end.
  bool has_input(int i) const;
  // Requires has_input(i).
  const ir::TensorType& input_type(int i) const;
  // The input's value when it is known at compile time (initializer or folded), else null.
  const Tensor* input_constant(int i) const;
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  ir::TensorType& output(int i) { return outputs_[static_cast<size_t>(i)]; }
  void set_output(int i, DataType dtype, Shape shape);
  const std::vector<ir::TensorType>& outputs() const { return outputs_; }

 private:
  const ir::Node& node_;
  std::vector<const ir::TensorType*> input_types_;
  std::vector<const Tensor*> input_constants_;
  std::vector<ir::TensorType> outputs_;
};

using InferFn = std::function<Status(InferContext&)>;

// ---- Reference kernels --------------------------------------------------------------

// Runs a subgraph (If branch, Loop/Scan body) with the given inputs; outer-scope values
// the body reads are resolved by the runtime. Implemented by the runtime.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  virtual Expected<std::vector<RuntimeValue>> run(const ir::Graph& body,
                                                  const std::vector<RuntimeValue>& inputs) = 0;
};

// Where KernelContext::allocate_output takes an output from before the heap or the arena:
// a tensor a finished value of the same execution left behind, whose block and dims vector
// are reused as they are (GraphExecutor's recycling, runtime/graph_executor.h), so the steady
// state of a model with fixed shapes allocates nothing per node.
class OutputRecycler {
 public:
  virtual ~OutputRecycler() = default;
  // Fills `out` with a tensor of `dtype` and `dims` in recycled storage and returns true, or
  // returns false (nothing of that size on hand) and leaves `out` alone.
  virtual bool reuse(DataType dtype, const std::vector<int64_t>& dims, TensorInit init, Tensor* out) = 0;
  // Fills `out` with `base` viewed as `dims` in a recycled tensor object (so that the dims
  // vector is not a new one) and returns true, or returns false and leaves `out` alone.
  virtual bool reuse_view(const Tensor& base, const std::vector<int64_t>& dims, Tensor* out) = 0;
};

class KernelContext {
 public:
  KernelContext(const ir::Node& node, std::vector<const RuntimeValue*> inputs,
                std::vector<RuntimeValue>* outputs, SubgraphRunner* subgraphs = nullptr);
  // The executor's form: `inputs` (num_inputs pointers, kept by the caller for the context's
  // lifetime) are not copied, and outputs come from `recycler` where it has storage.
  KernelContext(const ir::Node& node, const RuntimeValue* const* inputs, size_t num_inputs,
                std::vector<RuntimeValue>* outputs, SubgraphRunner* subgraphs, OutputRecycler* recycler);
  // The same inputs, outputs, subgraph runner and recycler as `base`, seen as the inputs of
  // `node` (a concrete twin of base's node: kernels/shape_specialized_kernel.h).
  KernelContext(const ir::Node& node, const KernelContext& base)
      : KernelContext(node, base.inputs_, base.num_inputs_, base.outputs_, base.subgraphs_, base.recycler_) {}
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return node_.opset(); }
  int num_inputs() const { return static_cast<int>(num_inputs_); }
  // Input i when it is a tensor; null for an omitted input, an empty optional or a sequence.
  const Tensor* input(int i) const;
  bool has_input(int i) const { return input(i) != nullptr; }
  // Input i of any kind (sequence, optional); null when omitted.
  const RuntimeValue* value(int i) const;
  int num_outputs() const { return static_cast<int>(outputs_->size()); }
  // Allocates output i as a tensor (zero-filled unless `init` says the kernel writes every
  // element). Fails on bad dims (negative, too large).
  Expected<Tensor*> allocate_output(int i, DataType dtype, const std::vector<int64_t>& dims,
                                    TensorInit init = TensorInit::kZero);
  // Sets output i to an existing tensor (e.g. a view sharing the input's storage).
  void set_output(int i, Tensor t);
  // Sets output i to `base` viewed with `dims` (same element count: checked by the caller),
  // as set_output(i, base.reshaped(dims)), in a recycled tensor object where there is one.
  void set_output_view(int i, const Tensor& base, const std::vector<int64_t>& dims);
  // Sets output i to a value of any kind (a sequence, an empty optional).
  void set_output_value(int i, RuntimeValue v);
  // Output i as a tensor (after allocate_output / set_output).
  Tensor& output(int i) { return (*outputs_)[static_cast<size_t>(i)].tensor(); }
  SubgraphRunner* subgraphs() const { return subgraphs_; }

 private:
  const ir::Node& node_;
  std::vector<const RuntimeValue*> owned_inputs_;  // the first constructor's copy
  const RuntimeValue* const* inputs_;
  size_t num_inputs_;
  std::vector<RuntimeValue>* outputs_;
  SubgraphRunner* subgraphs_;
  OutputRecycler* recycler_ = nullptr;
};

using KernelFn = std::function<Status(KernelContext&)>;

// ---- Schemas ------------------------------------------------------------------------

struct AttrSpec {
  std::string name;
  ir::AttrKind kind;
  bool required = false;
  std::optional<ir::Attribute> default_value;
};

class OpSchema {
 public:
  explicit OpSchema(std::string name, std::string domain = kOnnxDomain);

  // Opset versions of the op's domain this schema serves, inclusive.
  OpSchema& since(int64_t first, int64_t last = kMaxOpset);
  // Input and output counts; max -1 means variadic.
  OpSchema& inputs(int min, int max);
  OpSchema& outputs(int min, int max);
  OpSchema& attr(std::string name, ir::AttrKind kind);
  OpSchema& required_attr(std::string name, ir::AttrKind kind);
  OpSchema& infer(InferFn fn);
  OpSchema& kernel(KernelFn fn);
  OpSchema& doc(std::string text);

  const std::string& name() const { return name_; }
  const std::string& domain() const { return domain_; }
  int64_t first_opset() const { return first_; }
  int64_t last_opset() const { return last_; }
  int min_inputs() const { return min_inputs_; }
  int max_inputs() const { return max_inputs_; }
  int min_outputs() const { return min_outputs_; }
  int max_outputs() const { return max_outputs_; }
  const std::vector<AttrSpec>& attrs() const { return attrs_; }
  const InferFn& infer_fn() const { return infer_; }
  const KernelFn& kernel_fn() const { return kernel_; }
  const std::string& doc_text() const { return doc_; }

  // Checks a node against the schema: input/output counts, required attributes and
  // attribute kinds. The error names the node.
  Status validate(const ir::Node& node) const;

 private:
  std::string name_;
  std::string domain_;
  int64_t first_ = 1;
  int64_t last_ = kMaxOpset;
  int min_inputs_ = 0, max_inputs_ = -1, min_outputs_ = 1, max_outputs_ = -1;
  std::vector<AttrSpec> attrs_;
  InferFn infer_;
  KernelFn kernel_;
  std::string doc_;
};

class OpRegistry {
 public:
  static OpRegistry& instance();
  void add(OpSchema schema);
  // The schema serving `name` in `domain` at `opset`, or null.
  const OpSchema* find(const std::string& domain, const std::string& name, int64_t opset) const;
  // Any schema with this name and domain (to tell "unknown op" from "unsupported opset").
  bool knows(const std::string& domain, const std::string& name) const;
  std::vector<const OpSchema*> all() const;

 private:
  std::vector<std::unique_ptr<OpSchema>> schemas_;
};

struct OpRegistrar {
  explicit OpRegistrar(OpSchema schema) { OpRegistry::instance().add(std::move(schema)); }
};

// Finds the schema for a node or returns a clear error naming it.
Expected<const OpSchema*> schema_for(const ir::Node& node);

// Runs the node's inference with the given input types and constants, then writes the
// result into the node's output values (merging with what they already know).
Status infer_node(ir::Node& node);
// Inference for every node of a graph in order (subgraphs too). Inputs must be typed.
Status infer_graph(ir::Graph& graph);

}  // namespace kiln::ops

#define KILN_REGISTER_OP(schema) \
  static ::kiln::ops::OpRegistrar KILN_CONCAT(kiln_op_registrar_, __COUNTER__)(schema)
