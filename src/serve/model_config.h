// The model repository (Triton's layout) and each model's config.json:
//
//   REPO/<model>/config.json            optional, fields below
//   REPO/<model>/<version>/model.kiln   or model.onnx (compiled at load)
//   REPO/<model>/<version>/config.json  backend "llm": a decoder directory
//
// The highest numbered version directory holding a model file is served (Triton's default
// version policy, "latest 1").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::serve {

// backend "llm": the LLM engine's options (llm/engine.h EngineOptions).
struct LlmConfig {
  int64_t max_batch = 16;      // sequences decoding together
  int64_t kv_cache_mib = 256;  // KV cache pool
  int64_t block_size = 16;     // token slots per KV block
  int64_t max_step_tokens = 0; // rows per engine step (chunked prefill), 0 or >= max_batch; 0: whole prefills
  std::string kv_dtype = "fp32";  // KV pool element type: "fp32" or "bf16"
  // A SentencePiece model for text prompts and text answers, relative to the version
  // directory (or absolute); empty: token ids only.
  std::string tokenizer;
};

struct ModelConfig {
  // "kiln": model.kiln or model.onnx, run through the runtime and served by the KServe v2
  // endpoints. "llm": a decoder directory (bench/llm/export_decoder.py's layout) as the
  // version directory, run by the LLM engine and served at POST /v1/completions.
  std::string backend = "kiln";
  LlmConfig llm;
  // > 0: dim 0 of every input and output is the batch dim, requests may carry up to this
  // many rows and the scheduler concatenates requests up to it. 0: no batching, each request
  // runs alone with exactly the model's shapes (Triton's max_batch_size).
  int max_batch_size = 0;
  // How long the oldest queued request may wait for others to fill a batch.
  int64_t max_queue_delay_us = 0;
  // Workers per device for this model (Triton's instance_group count).
  int instance_count = 1;
  // Requests a model's queues hold at most (backend llm: completions in progress); beyond it
  // a request gets 503 with Retry-After.
  int max_queue_size = 1024;
  // ONNX models only: compute precision (fp32, bf16, mixed, as kiln compile --precision) and
  // batch shape buckets (as kiln compile --dynamic-batch-size).
  std::string precision = "fp32";
  std::vector<int64_t> batch_buckets;
};

// Parses a config.json text; unknown fields and out-of-range values are errors naming them
// (a misspelt field silently ignored would serve a model differently than meant).
Expected<ModelConfig> parse_model_config(const std::string& json_text);

struct ModelFiles {
  std::string name;
  std::string version;     // the version directory's name
  std::string model_path;  // .../<version>/model.kiln or model.onnx; backend llm: .../<version>
  bool onnx = false;
  ModelConfig config;
};

// A model name as a path component: letters, digits, '_', '-', '.', not "." or "..".
bool valid_model_name(const std::string& name);

// The models of the repository (subdirectories with a valid name), sorted.
Expected<std::vector<std::string>> list_repository(const std::string& repository);

// The served version's files and config of `name`: not_found when the repository has no such
// model directory, invalid_argument when it has one without a usable version or config.
Expected<ModelFiles> find_model(const std::string& repository, const std::string& name);

}  // namespace kiln::serve
