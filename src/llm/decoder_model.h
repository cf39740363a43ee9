// A decoder-only transformer as the engine runs it: the model directory bench/llm/
// export_decoder.py writes (config.json plus the decoder split at the attention boundary:
// embed, per layer pre = norm + Q/K/V projections (+ RoPE) and post = output projection +
// residual + norm + MLP, and head = final norm + LM head), each segment compiled by Kiln's
// compiler and run on its kernels over a flat batch of T tokens from any number of sequences.
// Attention between pre and post is the engine's (paged_attention.h), reading the paged KV
// cache: that is where the sequences differ, everything else is one batched matrix product.
//
// Each segment is compiled once with T open; the executor prepares its fast kernels per
// concrete T on first sight and keeps them (kernels/shape_specialized_kernel.h), so the
// engine's bucketed T values (engine.h) each get their own prepared kernels while the weights
// are held (and packed) once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::llm {

struct DecoderConfig {
  std::string name;
  std::string style;  // "gpt2" or "llama"
  int64_t vocab = 0, d_model = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, context = 0;
};

// One input of a segment run: [T] int64 ids or positions, or [T, width] fp32.
struct SegmentFeed {
  const char* name;
  DataType dtype;
  std::vector<int64_t> dims;
  const void* data;
};

// One exported ONNX segment, compiled, with the one execution state the engine's single
// scheduler thread uses.
class Segment {
 public:
  static Expected<std::unique_ptr<Segment>> load(const std::string& path, const std::vector<std::string>& inputs);
  // Runs with the feeds the segment declares (others are skipped: the exporter drops unused
  // inputs) and copies output i, which must have dsts_elements[i] elements, to dsts[i].
  Status run(const std::vector<SegmentFeed>& feeds, const std::vector<float*>& dsts,
             const std::vector<int64_t>& dsts_elements);
  // "implementation xN" for each distinct kernel implementation the segment runs on.
  std::string implementations() const;

 private:
  std::string path_;
  std::shared_ptr<ir::Graph> graph_;
  std::unique_ptr<rt::GraphExecutor> executor_;
  std::unique_ptr<rt::ExecutionState> state_;
  std::vector<std::pair<std::string, size_t>> input_index_;  // declared name -> graph input index
};

class DecoderModel {
 public:
  // Reads DIR/config.json and compiles every segment. Errors name the file and what is wrong
  // (a missing file or field, an unknown style: "not a Kiln decoder directory").
  static Expected<std::unique_ptr<DecoderModel>> load(const std::string& dir);
  const DecoderConfig& config() const { return config_; }
  double compile_ms() const { return compile_ms_; }

  // T = ids.size() tokens. hidden: [T, d_model].
  Status embed(int64_t t, const int64_t* ids, const int64_t* positions, float* hidden);
  // q: [T, heads, head_dim]; k, v: [T, kv_heads, head_dim].
  Status attention_inputs(int64_t layer, int64_t t, const float* hidden, const int64_t* positions, float* q,
                          float* k, float* v);
  // hidden_out: [T, d_model] from the layer input and the attention output [T, heads * head_dim].
  Status attention_output(int64_t layer, int64_t t, const float* hidden, const float* attn, float* hidden_out);
  // logits: [T, vocab].
  Status head(int64_t t, const float* hidden, float* logits);
  const Segment& head_segment() const { return *head_; }

 private:
  DecoderConfig config_;
  double compile_ms_ = 0;
  std::unique_ptr<Segment> embed_, head_;
  std::vector<std::unique_ptr<Segment>> pre_, post_;
};

}  // namespace kiln::llm
