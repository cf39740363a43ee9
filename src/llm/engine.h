// The decode engine: requests in, tokens out, with continuous (iteration-level) batching over
// a paged KV cache.
//
// Each step():
//   1. admits waiting requests, first come first served, while the batch has room and the
//      KV pool has the blocks for the request's context: each is prefilled (its prompt run
//      through the model, several short prompts packed side by side in one pass, a long one
//      in chunks, each pass padded to the prefill buckets 128/512/1024/2048; K/V written to
//      the cache) and its first token sampled;
//   2. runs one decode step for every running sequence together: their last tokens form one
//      batch of T rows (padded to a power of two, the decode buckets), every projection and
//      MLP is one matrix product over the batch, attention reads each sequence's own blocks;
//   3. retires sequences that reached their token budget or a stop token: their blocks go
//      back to the free list at once, and the next step admits new requests into the room.
// A request whose context starts with whole blocks some live or cached sequence holds maps
// those blocks (prefix sharing, block_manager.h) and its prefill starts after them. At least
// the context's last token is always computed (its logits give the first token), and only
// whole blocks before it are mapped, so a sequence only ever writes the blocks it computes
// itself: a block another request maps before its owner's prefill pass has run is written by
// that pass first (same pass: every pass writes a layer's K/V rows before attention reads
// any). The engine thus never needs the block manager's copy-on-write (make_writable), which
// is there for writers into a block others have already filled (forked sequences).
// With a per-step token budget (EngineOptions::max_step_tokens, vLLM's chunked prefill
// scheduling) a step is instead one pass of at most that many rows: every decoding sequence's
// next token first, then prefill chunks in the budget left (the unfinished prefills of running
// sequences in admission order, then newly admitted requests), side by side. A long prompt is
// prefilled over several steps while the others keep decoding, so an arriving prompt delays the
// running sequences by at most a budget's worth of rows per output token. In this mode a
// sequence's blocks are registered for sharing only once a pass has written them (a chunk
// computed in a later step must not be mapped before).
// When a running sequence needs a block and none is free, the sequence admitted last is
// preempted by recomputation (its blocks freed, it re-queues at the front and is prefilled
// again from its prompt and the tokens it had generated), as vLLM's default.
//
// Not thread-safe: one thread drives an engine.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "llm/decoder_model.h"
#include "llm/kv_cache.h"
#include "llm/paged_attention.h"
#include "llm/sampler.h"

namespace kiln::llm {

struct EngineOptions {
  int64_t block_size = 16;    // token slots per KV block
  int64_t kv_blocks = 0;      // blocks in the pool; 0: as many as kv_cache_mib holds
  int64_t kv_cache_mib = 256;
  int64_t max_batch = 16;     // sequences decoding together
  std::vector<int64_t> prefill_buckets = {128, 512, 1024, 2048};
  bool record_logits = false;  // keep every step's logits per request (tests)
  // Rows per step (decode rows + prefill chunk rows), 0 or at least max_batch (every decoding
  // sequence's row must fit); 0: each admitted prompt is prefilled whole before the decode step.
  int64_t max_step_tokens = 0;
  // Element type of the KV pool: kFloat32, or kBFloat16 (half the bytes per block, so twice the
  // blocks in kv_cache_mib; K/V rounded to nearest even as stored, attention math in fp32).
  DataType kv_dtype = DataType::kFloat32;
  // Static-shape emulation, for kiln llm-bench's fixed-length baselines (a graph compiled per
  // sequence length, as issue 29's baseline and the articles' buckets are). Empty (the
  // default): attention reads each token's causal keys only. Else each sequence's attention
  // scores keys up to the smallest of these lengths that holds its context (at weight 0 past
  // the causal ones), and a prefill pass's padding rows are attended too, as the compiled
  // graph of that length computes them; the pool is zero-filled, and its blocks must hold the
  // largest length (one block per sequence). Results are the same; only the cost differs.
  std::vector<int64_t> attention_buckets;
};

struct Request {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingOptions sampling;
  std::vector<int64_t> stop_tokens;
};

struct RequestState {
  enum class Phase { kWaiting, kRunning, kFinished, kCancelled };
  Phase phase = Phase::kWaiting;
  std::vector<int64_t> tokens;             // generated so far
  std::vector<std::vector<float>> logits;  // per generated token, with record_logits
  int64_t preemptions = 0;
};

struct EngineStats {
  BlockStats kv;
  int64_t waiting = 0, running = 0, finished = 0;
  int64_t preemptions = 0, steps = 0, decode_steps = 0;
  int64_t prefill_tokens = 0, prefill_padded_tokens = 0;  // real and bucket-padded rows
  int64_t prefix_hit_tokens = 0;  // context tokens mapped from shared blocks, not prefilled
  int64_t decode_tokens = 0, decode_padded_tokens = 0;
  double prefill_ms = 0, decode_ms = 0;
  int64_t peak_blocks_used = 0;
  // Internal fragmentation (BlockStats::fragmentation) averaged over the decode steps, taken
  // as each step's batch is in the cache.
  double mean_fragmentation = 0;
  double fragmentation_sum = 0;  // of the decode steps' fragmentation, for the mean
  // Most real rows one pass ran, and (with max_step_tokens) the passes that ran prefill chunk
  // rows beside decode rows; a mixed pass's time is split between prefill_ms and decode_ms in
  // proportion to their rows.
  int64_t peak_step_tokens = 0, mixed_steps = 0;
};

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> create(std::unique_ptr<DecoderModel> model, const EngineOptions& options);
  const DecoderConfig& config() const { return model_->config(); }
  const EngineOptions& options() const { return options_; }

  // Queues a request; its id, or an error for this request alone: an empty prompt, a token
  // id outside the vocabulary, prompt plus new tokens beyond the model's context or the whole
  // KV pool, bad sampling options.
  Expected<int64_t> add_request(Request request);
  // Stops a waiting or running request (its blocks are freed); not found for an unknown id.
  Status cancel(int64_t id);
  // One iteration (see the top of this file). An error here is an engine failure (a segment
  // that failed to run), not a request's.
  Status step();
  // Steps until no request waits or runs.
  Status run_to_completion();
  bool idle() const { return waiting_.empty() && running_.empty(); }
  // Requires an id add_request returned (and not forgotten).
  const RequestState& request(int64_t id) const { return sequences_.at(id).state; }
  // Drops a finished or cancelled request's state (prompt, tokens), so that a long-running
  // caller (kiln serve) does not keep every request it ever ran: not found for an unknown id,
  // failed precondition for one still waiting or running.
  Status forget(int64_t id);
  EngineStats stats() const;
  // Called with (request id, token) for every token as it is generated.
  std::function<void(int64_t, int64_t)> on_token;

 private:
  struct Sequence {
    Request request;
    RequestState state;
    std::unique_ptr<Sampler> sampler;
    int64_t pending = -1;  // last sampled token, not yet in the cache
    int64_t prefill_from = 0;  // first context position the prefill computes (after a shared prefix)
    int64_t context_len = 0;   // context tokens at admission: prefilled once the cache holds them
  };
  // A prefill piece: context positions [begin, begin + count) of sequence `id`.
  struct Piece {
    int64_t id, begin, count;
  };
  Engine(std::unique_ptr<DecoderModel> model, std::unique_ptr<KvCache> cache, const EngineOptions& options);
  // Prefills sequences whose blocks admission reserved, and samples their first tokens.
  Status prefill(const std::vector<int64_t>& group);
  // Admits waiting_.front() if the batch and the pool have room: maps its cached prefix,
  // reserves blocks for its context (registering them at once when `register_now`), moves it
  // from waiting_ (not yet into running_). Returns whether it was admitted.
  Expected<bool> admit_front(bool register_now);
  // The step under max_step_tokens (see the top of this file).
  Status step_budgeted();
  // Reserves a slot for the next token of every running sequence, preempting the latest
  // admitted while there is none.
  Status reserve_decode_slots();
  std::vector<int64_t> context_of(int64_t id) const;
  Status decode();
  // Runs the layers over `t` rows of ids_/positions_ with attention over `seqs`; the caller
  // keeps the rows that sample (DecoderModel::keep_rows) for the head.
  Status forward(int64_t t, const std::vector<AttentionSequence>& seqs);
  // With attention_buckets, `seqs` as a static graph of the bucket's length attends them (each
  // sequence's padded keys, the pass's padding rows); without, `seqs` itself.
  std::vector<AttentionSequence> static_shape_sequences(int64_t t, std::vector<AttentionSequence> seqs) const;
  void accept(int64_t id, const float* logits);
  void retire(int64_t id, RequestState::Phase phase);
  void preempt(int64_t id);
  int64_t prefill_bucket(int64_t n) const;

  std::unique_ptr<DecoderModel> model_;
  std::unique_ptr<KvCache> cache_;
  EngineOptions options_;
  std::unordered_map<int64_t, Sequence> sequences_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> running_;  // admission order
  int64_t next_id_ = 0;
  EngineStats counters_;
  // Step buffers, grown as needed and reused.
  std::vector<int64_t> ids_, positions_;
  std::vector<float> q_, k_, v_, attn_, logits_;
};

}  // namespace kiln::llm
