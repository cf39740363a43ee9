// Helpers the fusion passes share: which values may be fused through, matching a trailing
// activation (docs/fused-ops.md), and building a kiln-domain node that replaces a chain.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/graph_rewrite.h"
#include "ir/graph.h"

namespace kiln::compiler::fusion {

// The float dtypes the fused operators take (not the float8 kinds).
bool fusable_dtype(DataType t);
// A tensor value with a fusable dtype and a shape of known rank whose every extent is
// known or named.
bool known_float_tensor(const ir::Value* v);
// A float32 tensor [N, C, H, W] whose channel count is known (N, H and W may be open: a
// model compiled with open dims still keeps its convolutions' activations blocked).
bool f32_4d_known_channels(const ir::Value* v);
// A constant the compiled model owns: an initializer the user cannot feed.
bool constant(const ir::Graph& g, const ir::Value* v);
// The value of a one-element float constant.
bool scalar_constant(const ir::Graph& g, const ir::Value* v, double* out);
// Whether the kiln-domain operator `op` is registered (its kernels and inference exist);
// fusions into an operator that is not are skipped.
bool kiln_op_available(const std::string& op);
// The bounds of a Clip whose bounds are constant (absent: -inf / +inf).
bool clip_bounds(const ir::Graph& g, const ir::Node& clip, float* lo, float* hi);

// `v` may disappear into a fused node: exactly one consumer, not pinned, and produced as
// the only output in use of its producer.
bool fusable_intermediate(const GraphUses& uses, const ir::Value* v);

// A node with one input slot 0 = x and one output, in the ONNX (or given) domain.
bool is_op(const ir::Node& n, const char* op_type, const char* domain = "");

// An activation reading `x`: the ops of docs/fused-ops.md's table.
struct Activation {
  std::string name;              // the `activation` attribute; also the pattern name part
  std::vector<float> params;     // `activation_params`
  std::vector<ir::Node*> nodes;  // the nodes it replaces (Silu: Sigmoid and Mul)
  ir::Value* output = nullptr;
};

// The activation applied to `x` when `x` may be fused through (see fusable_intermediate;
// for Silu, x feeds exactly the Sigmoid and the Mul). False when there is none.
bool match_activation(const ir::Graph& g, const GraphUses& uses, ir::Value* x, Activation* act);

// Sets `activation` / `activation_params` on a fused node.
void set_activation(ir::Node& n, const Activation& act);

// "conv1+add1+relu1": a name for the node replacing `nodes` (long chains are shortened).
std::string fused_name(const std::vector<ir::Node*>& nodes);

// Adds kiln-domain node `op` reading `inputs` and producing `output` (the last replaced
// node's output, so graph outputs keep their names), marks `replaced` for removal, keeps
// `uses` current and imports the kiln domain. The new node is appended: callers remove
// the replaced nodes and re-sort the graph (finish()).
ir::Node* add_fused_node(ir::Graph& g, GraphUses& uses, const std::string& op,
                         const std::vector<ir::Node*>& replaced, std::vector<ir::Value*> inputs,
                         ir::Value* output, std::unordered_set<const ir::Node*>& removed);

// The same for a node of any domain and opset (which the graph must import already).
ir::Node* add_replacing_node(ir::Graph& g, GraphUses& uses, const std::string& op, const std::string& domain,
                             int64_t opset, const std::vector<ir::Node*>& replaced, std::vector<ir::Value*> inputs,
                             ir::Value* output, std::unordered_set<const ir::Node*>& removed);

// Removes the replaced nodes and restores execution order.
Status finish(ir::Graph& g, const std::unordered_set<const ir::Node*>& removed);

}  // namespace kiln::compiler::fusion
