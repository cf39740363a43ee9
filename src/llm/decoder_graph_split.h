// Recognising attention-with-past in a plain past-KV decoder graph (decoder.onnx: inputs
// input_ids, attention_mask, position_ids, past_key_values.N.key/value; outputs logits,
// present.N.key/value) and cutting the graph at each layer's attention core, so that the
// engine runs the cores as paged attention over its KV cache and Kiln's compiler runs the
// rest as a chain of position-wise segments over a flat batch of T tokens.
//
// The core of layer N, as the exporters write it (PyTorch's, HF's):
//   present.N.key = Concat(past_key_values.N.key, k_new, axis=2)   [B, Hkv, P+T, D]
//   -> repeat of the KV heads for GQA (Unsqueeze/Expand/Reshape, Tile) -> Transpose(last two)
//   -> MatMul(q, .) with constant scales on q, on k or on the scores (Mul/Div)
//   -> Add of a mask and/or Where, the mask derived only from attention_mask, position_ids
//      and shapes -> Softmax(last axis)
//   -> MatMul(., repeat(present.N.value = Concat(past value, v_new, axis=2)))  = A_N [B, H, T, D].
// The matcher follows that chain node by node and refuses anything else with an error naming
// the node; then it runs each core on a probe (past and new tokens, random q/k/v) against
// causal attention with the scale 1/sqrt(D) and query head h reading KV head h / (H / Hkv)
// (what paged_attention computes), so a mask that is not causal or a repeat that maps heads
// otherwise is refused, never silently run.
//
// Stages: stage s (0 <= s < layers) computes q.s, k.s, v.s token-major ([1, T, heads, D]) from
// input_ids, position_ids, attn.(s-1) ([1, T, H, D], A_(s-1) transposed) and values earlier
// stages computed (the residual stream: "carried" values, stored under their own names);
// stage `layers` computes logits. Nodes that depend on nothing but constants, input_ids,
// position_ids and shapes are recomputed by every stage that needs them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::llm {

// One input or output of a segment graph, bound to an entry of the step's value store.
struct SegmentPort {
  std::string name;  // the segment graph's input or output value
  std::string key;   // the store's entry ("input_ids", "q.3", "attn.2", a carried value's name)
  // Inputs the engine feeds (ids, positions, attention outputs): the dims to bind, -1 for T.
  // Empty: the stored tensor's own dims (values an earlier segment computed).
  std::vector<int64_t> dims;
  int token_axis = 0;  // outputs: the axis of the tokens; -1: not known yet (found on a probe)
};

struct SegmentGraph {
  std::string label;  // "decoder.onnx stage 2", for messages
  std::shared_ptr<ir::Graph> graph;
  std::vector<SegmentPort> inputs, outputs;
};

struct RecognisedDecoder {
  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  double scale = 0;  // the attention scale found (checked to be 1/sqrt(head_dim))
  std::vector<SegmentGraph> stages;  // layers + 1
};

// Recognises the cores of `graph` (an imported decoder, not compiled; it is annotated with
// inferred types in place) and builds the stages. Errors name the file, the layer, the node
// and what did not match.
Expected<RecognisedDecoder> recognise_decoder(ir::Graph& graph, const std::string& file);

// Compiles a graph built in memory (a stage, a probe) with the compiler's pass pipeline and
// pre-packed weights, as compile_onnx_file does for a file, and prepares its executor.
Expected<std::unique_ptr<rt::GraphExecutor>> prepare_graph(const std::shared_ptr<ir::Graph>& graph,
                                                           const std::string& label);

}  // namespace kiln::llm
