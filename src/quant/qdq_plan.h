// Which nodes of an ONNX model `kiln quantize` quantises, and where the QuantizeLinear /
// DequantizeLinear pairs go (docs/quantization.md "What is quantised"), decided on the
// ModelProto before any calibration so that only the tensors that need it are calibrated.
//
// As onnxruntime's QDQ quantiser (quantize_static, QuantFormat.QDQ):
//   - a quantised node gets a Q->DQ pair on each float activation input (graph inputs and
//     node outputs) and on its first output; every consumer of that tensor then reads the
//     DQ output;
//   - Conv weights (input 1), Gemm B and MatMul's constant B become int8 per-channel along
//     the output-channel axis (Conv: 0; Gemm: 0 if transB else 1; MatMul: the last axis),
//     stored quantised with a DequantizeLinear carrying `axis`;
//   - Conv and Gemm biases (a rank-1 initializer read by that node only; for Gemm only when
//     alpha = beta = 1) become int32 with scale x_scale * w_scale[c] and zero point 0;
//   - when the first output of a Conv, Gemm, MatMul or Add has a single consumer that is a
//     Relu (or a Clip with constant bounds) and is not a graph output, the output pair moves
//     behind the activation (DQ -> Conv -> Relu -> Q), the pattern int8 kernels fuse;
//   - constant operands of Add, Mul and Concat stay float.
// Ops: Conv, MatMul, Gemm, Add, Mul, MaxPool, AveragePool, GlobalAveragePool, Concat,
// Resize, Relu, Clip. Nodes in subgraphs are left alone.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::quant {

// Every op type --op-types accepts, and the default set.
const std::vector<std::string>& quantizable_op_types();
const std::vector<std::string>& default_op_types();

struct QdqPlanOptions {
  std::set<std::string> op_types;
  std::set<std::string> exclude;  // node names
};

struct WeightPlan {
  std::string tensor;  // the float initializer
  int axis = 0;
};

struct BiasPlan {
  std::string tensor;     // the float rank-1 initializer
  std::string input;      // the activation the node reads (its scale)
  std::string weight;     // the weight initializer (its per-channel scales)
  int weight_axis = 0;
};

struct QdqPlan {
  std::vector<std::string> activations;  // tensors to calibrate and wrap in Q->DQ, in graph order
  std::vector<WeightPlan> weights;
  std::vector<BiasPlan> biases;
  std::vector<std::string> nodes;               // quantised nodes (names as node_label)
  std::vector<int> node_indices;                // their indices in graph.node
  std::map<std::string, int> nodes_by_op;
  std::vector<std::string> skipped;             // "node 'x' (Conv): why", for the report
  std::vector<std::string> unknown_excludes;    // --exclude names no node has
  bool empty() const { return nodes.empty(); }
};

// `is_float32(name)` tells whether a tensor is float32 (from the imported graph's types).
Expected<QdqPlan> plan_qdq(const onnx::ModelProto& model, const QdqPlanOptions& options,
                           const std::function<bool(const std::string&)>& is_float32);

// A node's name, or "<op_type>#<index>" for an unnamed node (what --exclude matches too).
std::string node_label(const onnx::NodeProto& node, int index);

}  // namespace kiln::quant
