// A decoder-only transformer as the engine runs it: a chain of stages, each compiled by Kiln's
// compiler and run on its kernels over a flat batch of T tokens from any number of sequences,
// with the engine's paged attention (paged_attention.h) between them: stage l computes layer
// l's q, k, v (from the ids, positions, layer l-1's attention output and values earlier stages
// computed, such as the residual stream), the last stage the logits. Attention is where the
// sequences differ; everything else is one batched matrix product.
//
// Two sources of stages:
//  - the directory bench/llm/export_decoder.py writes (config.json plus the decoder split at
//    the attention boundary: embed, per layer pre = norm + Q/K/V projections (+ RoPE) and
//    post = output projection + residual + norm + MLP, head = final norm + LM head): stage 0
//    is embed + pre0, stage l is post(l-1) + pre(l), the last post(L-1) + head;
//  - a plain past-KV decoder.onnx, whose attention cores decoder_graph_split.h recognises and
//    cuts out.
//
// Each segment is compiled once with T open; the executor prepares its fast kernels per
// concrete T on first sight and keeps them (kernels/shape_specialized_kernel.h), so the
// engine's bucketed T values (engine.h) each get their own prepared kernels while the weights
// are held (and packed) once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "llm/decoder_graph_split.h"
#include "runtime/graph_executor.h"

namespace kiln::llm {

struct DecoderConfig {
  std::string name;
  std::string style;  // "gpt2" or "llama" (the exporter's split), "onnx" (a recognised decoder.onnx)
  int64_t vocab = 0, d_model = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, context = 0;
};

// One entry of a step's value store: a tensor whose rows are the step's tokens (along
// token_axis), read and written by name by the segments of a stage.
struct StepValue {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> dims;
  int token_axis = 0;
  std::vector<unsigned char> bytes;
  int64_t tokens() const { return token_axis < 0 || dims.empty() ? 0 : dims[token_axis]; }
};
using StepStore = std::unordered_map<std::string, StepValue>;

// One compiled graph of a stage, with the one execution state the engine's single
// scheduler thread uses, and its inputs and outputs bound to store entries.
class Segment {
 public:
  // An exported ONNX segment (the exporter's split); ports naming inputs the file lacks are
  // dropped (the exporter drops unused inputs).
  static Expected<std::unique_ptr<Segment>> load(const std::string& path, std::vector<SegmentPort> inputs,
                                                 std::vector<SegmentPort> outputs);
  // A graph built in memory (decoder_graph_split.h), compiled here.
  static Expected<std::unique_ptr<Segment>> create(SegmentGraph segment);
  // Binds the inputs from `store`, runs, and writes the outputs into `store`.
  Status run(StepStore& store);
  const std::vector<SegmentPort>& inputs() const { return inputs_; }
  const std::vector<SegmentPort>& outputs() const { return outputs_; }
  void set_token_axis(size_t output, int axis) { outputs_[output].token_axis = axis; }
  // "implementation xN" for each distinct kernel implementation the segment runs on.
  std::string implementations() const;

 private:
  Status bind(std::vector<SegmentPort> inputs);
  std::string path_;
  std::shared_ptr<ir::Graph> graph_;
  std::unique_ptr<rt::GraphExecutor> executor_;
  std::unique_ptr<rt::ExecutionState> state_;
  std::vector<SegmentPort> inputs_, outputs_;
  std::vector<size_t> input_index_, output_index_;  // graph input / output index per port
};

class DecoderModel {
 public:
  // Loads either
  //  - a Kiln decoder directory (config.json with the exporter's split files), or
  //  - a plain past-KV decoder: a decoder.onnx file, or a directory holding decoder.onnx
  //    (and config.json / a tokenizer, not the split): its attention is recognised and the
  //    graph cut into stages (decoder_graph_split.h).
  // Errors name the file and what is wrong ("not a Kiln decoder directory", the node the
  // attention matcher refused).
  static Expected<std::unique_ptr<DecoderModel>> load(const std::string& path);
  const DecoderConfig& config() const { return config_; }
  double compile_ms() const { return compile_ms_; }
  // For a recognised decoder.onnx: what was recognised (layers, heads, KV heads, head_dim,
  // scale, stages); empty for the exporter's split.
  const std::string& recognition_note() const { return note_; }

  // The step's forward, stage by stage. begin() stores T = t tokens' ids and positions;
  // attention_inputs(l) runs stage l and gives q [T, heads, head_dim], k, v [T, kv_heads,
  // head_dim]; attention_output(l) stores layer l's attention output [T, heads * head_dim].
  Status begin(int64_t t, const int64_t* ids, const int64_t* positions);
  Status attention_inputs(int64_t layer, float* q, float* k, float* v);
  Status attention_output(int64_t layer, const float* attn);
  // After the last attention_output: keeps rows `rows` of what the last stage reads (the head
  // needs only the rows that sample), appended to the rows kept before (several prefill
  // passes may sample). head() runs the last stage over the kept rows padded with zero rows to
  // t (>= the rows kept) and forgets them. logits: [t, vocab].
  Status keep_rows(const std::vector<int64_t>& rows);
  Status head(int64_t t, float* logits);
  const Segment& head_segment() const { return *stages_.back().back(); }

 private:
  static Expected<std::unique_ptr<DecoderModel>> load_split(const std::string& dir);
  static Expected<std::unique_ptr<DecoderModel>> load_recognised(const std::string& file);
  Status take(const std::string& key, float* dst, int64_t elements) const;
  Status find_token_axes();
  Status check_token_independence();

  DecoderConfig config_;
  double compile_ms_ = 0;
  std::string note_;
  // stages_[l] runs up to layer l's q/k/v; stages_[layers] from the last attention to logits.
  std::vector<std::vector<std::unique_ptr<Segment>>> stages_;
  std::vector<std::string> head_inputs_;  // store keys the last stage reads from earlier ones
  StepStore store_, kept_;
};

}  // namespace kiln::llm
