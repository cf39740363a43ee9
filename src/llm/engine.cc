// Continuous batching over the paged KV cache (engine.h).
#include "llm/engine.h"

#include <algorithm>
#include <chrono>

namespace kiln::llm {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

Expected<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<DecoderModel> model, const EngineOptions& options) {
  const DecoderConfig& c = model->config();
  if (options.block_size <= 0 || options.block_size > 4096)
    return invalid_argument("KV block size %lld: must be in 1..4096 tokens", (long long)options.block_size);
  if (options.max_batch <= 0) return invalid_argument("max batch %lld: must be positive", (long long)options.max_batch);
  if (options.prefill_buckets.empty() || !std::is_sorted(options.prefill_buckets.begin(), options.prefill_buckets.end()) ||
      options.prefill_buckets.front() <= 0)
    return invalid_argument("prefill buckets must be positive and ascending");
  if (options.max_step_tokens != 0 && options.max_step_tokens < options.max_batch)
    return invalid_argument("max step tokens %lld: must be 0 (no budget) or at least the max batch %lld, so that "
                            "every decoding sequence's row fits a step",
                            (long long)options.max_step_tokens, (long long)options.max_batch);
  if (!options.attention_buckets.empty() &&
      (!std::is_sorted(options.attention_buckets.begin(), options.attention_buckets.end()) ||
       options.attention_buckets.front() <= 0 || options.attention_buckets.back() > options.block_size))
    return invalid_argument("attention buckets must be positive, ascending and at most the KV block size %lld (one "
                            "block holds a sequence's padded keys)", (long long)options.block_size);
  if (!kv_dtype_supported(options.kv_dtype))
    return invalid_argument("KV cache element type %s: must be fp32 or bf16", dtype_name(options.kv_dtype));
  int64_t blocks = options.kv_blocks;
  if (blocks <= 0) {
    const int64_t block_bytes =
        KvCache::block_bytes(c.layers, c.kv_heads, c.head_dim, options.block_size, options.kv_dtype);
    blocks = (options.kv_cache_mib << 20) / block_bytes;
    if (blocks <= 0)
      return invalid_argument("a KV cache of %lld MiB holds no block of %lld bytes", (long long)options.kv_cache_mib,
                              (long long)block_bytes);
  }
  KILN_ASSIGN_OR_RETURN(auto cache, KvCache::create(c.layers, c.kv_heads, c.head_dim, blocks, options.block_size,
                                                        options.kv_dtype, !options.attention_buckets.empty()));
  return std::unique_ptr<Engine>(new Engine(std::move(model), std::move(cache), options));
}

Engine::Engine(std::unique_ptr<DecoderModel> model, std::unique_ptr<KvCache> cache, const EngineOptions& options)
    : model_(std::move(model)), cache_(std::move(cache)), options_(options) {}

Expected<int64_t> Engine::add_request(Request request) {
  const DecoderConfig& c = config();
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) return invalid_argument("empty prompt");
  for (int64_t i = 0; i < n; ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= c.vocab)
      return out_of_range("prompt token %lld at position %lld is outside the vocabulary of %s (0..%lld)",
                          (long long)request.prompt[i], (long long)i, c.name.c_str(), (long long)c.vocab - 1);
  if (request.max_new_tokens <= 0)
    return invalid_argument("max new tokens %lld: must be positive", (long long)request.max_new_tokens);
  // The last generated token is never fed back, so the context holds n + max_new - 1 tokens.
  const int64_t context = n + request.max_new_tokens - 1;
  if (context > c.context)
    return out_of_range("prompt of %lld tokens plus %lld new tokens needs a context of %lld, beyond %s's %lld",
                        (long long)n, (long long)request.max_new_tokens, (long long)context, c.name.c_str(),
                        (long long)c.context);
  const BlockManager& bm = cache_->blocks();
  if (bm.blocks_for(context) > bm.num_blocks())
    return resource_exhausted("a context of %lld tokens needs %lld KV blocks; the pool has %lld", (long long)context,
                              (long long)bm.blocks_for(context), (long long)bm.num_blocks());
  KILN_RETURN_IF_ERROR(validate_sampling(request.sampling));
  const int64_t id = next_id_++;
  Sequence& seq = sequences_[id];
  seq.sampler = std::make_unique<Sampler>(request.sampling);
  seq.request = std::move(request);
  waiting_.push_back(id);
  return id;
}

Status Engine::cancel(int64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return not_found("no request %lld", (long long)id);
  const auto phase = it->second.state.phase;
  if (phase == RequestState::Phase::kWaiting || phase == RequestState::Phase::kRunning)
    retire(id, RequestState::Phase::kCancelled);
  return ok_status();
}

Status Engine::forget(int64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return not_found("no request %lld", (long long)id);
  const auto phase = it->second.state.phase;
  if (phase == RequestState::Phase::kWaiting || phase == RequestState::Phase::kRunning)
    return failed_precondition("request %lld is still %s", (long long)id,
                               phase == RequestState::Phase::kWaiting ? "waiting" : "running");
  sequences_.erase(it);
  return ok_status();
}

void Engine::retire(int64_t id, RequestState::Phase phase) {
  cache_->blocks().free_sequence(id);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  sequences_.at(id).state.phase = phase;
  if (phase == RequestState::Phase::kFinished) ++counters_.finished;
}

void Engine::preempt(int64_t id) {
  cache_->blocks().free_sequence(id);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.push_front(id);
  Sequence& seq = sequences_.at(id);
  seq.state.phase = RequestState::Phase::kWaiting;
  ++seq.state.preemptions;
  ++counters_.preemptions;
}

int64_t Engine::prefill_bucket(int64_t n) const {
  for (int64_t b : options_.prefill_buckets)
    if (b >= n) return b;
  return options_.prefill_buckets.back();
}

Expected<bool> Engine::admit_front(bool register_now) {
  BlockManager& bm = cache_->blocks();
  const int64_t id = waiting_.front();
  const std::vector<int64_t> context = context_of(id);
  const int64_t n = static_cast<int64_t>(context.size());
  // Map the cached whole blocks of the context but its last token (whose logits are needed).
  KILN_RETURN_IF_ERROR(bm.add_sequence(id));
  const int64_t hit = bm.match_prefix(id, context, n - 1);
  // Room for the context and a block more to decode into (capped at the request's whole
  // context, which add_request checked against the pool): admitting with no room to grow
  // would preempt at once and thrash.
  Sequence& seq = sequences_.at(id);
  const int64_t most = static_cast<int64_t>(seq.request.prompt.size()) + seq.request.max_new_tokens - 1;
  if (!bm.can_reserve(id, std::min(n + options_.block_size, most))) {
    bm.free_sequence(id);  // the mapped blocks go back (to the cache) until there is room
    return false;
  }
  waiting_.pop_front();
  KILN_RETURN_IF_ERROR(bm.reserve(id, n));
  // Registered now, before the prefill computes them: a later request of this same group
  // maps them, and its prefill pass comes after (or is) the one that writes them, and every
  // pass writes all its K/V rows of a layer before attention reads any.
  if (register_now) bm.register_blocks(id, context.data(), n);
  seq.prefill_from = hit;
  seq.context_len = n;
  counters_.prefix_hit_tokens += hit;
  return true;
}

Status Engine::step() {
  if (options_.max_step_tokens > 0) return step_budgeted();
  ++counters_.steps;
  // 1. Admission: FCFS while the batch and the pool have room for the context (blocks are
  //    reserved here, so each check sees the ones before it). Prompts are packed side by side
  //    into one prefill pass while they fit the largest bucket together.
  const int64_t chunk = options_.prefill_buckets.back();
  std::vector<int64_t> group;
  int64_t group_tokens = 0;
  BlockManager& bm = cache_->blocks();
  while (!waiting_.empty() && static_cast<int64_t>(running_.size() + group.size()) < options_.max_batch) {
    const int64_t id = waiting_.front();
    KILN_ASSIGN_OR_RETURN(const bool admitted, admit_front(/*register_now=*/true));
    if (!admitted) break;
    const Sequence& seq = sequences_.at(id);
    const int64_t tokens = seq.context_len - seq.prefill_from;
    if (!group.empty() && group_tokens + tokens > chunk) {
      KILN_RETURN_IF_ERROR(prefill(group));
      group.clear();
      group_tokens = 0;
    }
    group.push_back(id);
    group_tokens += tokens;
  }
  if (!group.empty()) KILN_RETURN_IF_ERROR(prefill(group));
  // 2. + 3. One decode step for every running sequence.
  if (!running_.empty()) KILN_RETURN_IF_ERROR(decode());
  // Cannot happen (add_request checks every context against the whole pool), but a step that
  // could never make progress must not become a hang.
  if (running_.empty() && !waiting_.empty() && !bm.can_reserve(waiting_.front(), 1))
    return internal_error("KV pool has no block for request %lld with nothing running", (long long)waiting_.front());
  return ok_status();
}

Status Engine::step_budgeted() {
  ++counters_.steps;
  const auto start_time = std::chrono::steady_clock::now();
  BlockManager& bm = cache_->blocks();
  const DecoderConfig& c = config();
  // 1. A slot for every decoding sequence's next token (preempting the latest admitted, which
  //    may be one still prefilling); their rows come first in the pass.
  KILN_RETURN_IF_ERROR(reserve_decode_slots());
  std::vector<int64_t> decoding;
  std::vector<Piece> pieces;
  int64_t budget = options_.max_step_tokens;
  for (int64_t id : running_)
    if (bm.length(id) >= sequences_.at(id).context_len) decoding.push_back(id);
  budget -= static_cast<int64_t>(decoding.size());
  // 2. Prefill chunks in the budget left: running sequences' unfinished prefills in admission
  //    order, then new requests, first come first served, while the batch and pool have room.
  for (int64_t id : running_) {
    const int64_t done = bm.length(id), todo = sequences_.at(id).context_len - done;
    if (todo > 0 && budget > 0) {
      pieces.push_back({id, done, std::min(budget, todo)});
      budget -= pieces.back().count;
    }
  }
  while (budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_batch) {
    const int64_t id = waiting_.front();
    // Registered only once written (below): a chunk a later step computes must not be mapped.
    KILN_ASSIGN_OR_RETURN(const bool admitted, admit_front(/*register_now=*/false));
    if (!admitted) break;
    Sequence& seq = sequences_.at(id);
    seq.state.phase = RequestState::Phase::kRunning;
    running_.push_back(id);
    pieces.push_back({id, seq.prefill_from, std::min(budget, seq.context_len - seq.prefill_from)});
    budget -= pieces.back().count;
  }
  const int64_t d = static_cast<int64_t>(decoding.size());
  if (d == 0 && pieces.empty()) {
    // As in step(): a step that could never make progress must not become a hang.
    if (!waiting_.empty() && !bm.can_reserve(waiting_.front(), 1))
      return internal_error("KV pool has no block for request %lld with nothing running", (long long)waiting_.front());
    return ok_status();
  }
  // 3. One pass: decode rows, then the chunks, padded to a power of two.
  std::vector<AttentionSequence> seqs;
  std::vector<std::vector<int64_t>> contexts;
  int64_t rows = d;
  for (const Piece& p : pieces) rows += p.count;
  const int64_t t = next_power_of_two(rows);
  ids_.assign(t, 0);
  positions_.assign(t, 0);
  for (int64_t i = 0; i < d; ++i) {
    ids_[i] = sequences_.at(decoding[i]).pending;
    positions_[i] = bm.length(decoding[i]);
    seqs.push_back({bm.block_table(decoding[i]).data(), positions_[i], 1, i});
  }
  int64_t row = d;
  for (const Piece& p : pieces) {
    contexts.push_back(context_of(p.id));
    for (int64_t i = 0; i < p.count; ++i) {
      ids_[row + i] = contexts.back()[p.begin + i];
      positions_[row + i] = p.begin + i;
    }
    seqs.push_back({bm.block_table(p.id).data(), p.begin, p.count, row});
    row += p.count;
  }
  KILN_RETURN_IF_ERROR(forward(t, seqs), "while running a step of %lld decode and %lld prefill rows", (long long)d,
                       (long long)(rows - d));
  // 4. The head on the rows that sample: every decode row, and the last row of a prefill that
  //    completed (unless resuming after preemption: its next token is already chosen).
  std::vector<int64_t> sampling = decoding;
  std::vector<int64_t> sampling_rows;
  for (int64_t i = 0; i < d; ++i) sampling_rows.push_back(i);
  for (int64_t i = 0; i < d; ++i) {
    const int64_t id = decoding[i];
    bm.set_length(id, positions_[i] + 1);
    if ((positions_[i] + 1) % options_.block_size == 0) {  // a block just filled: share it
      std::vector<int64_t> context = context_of(id);
      context.push_back(sequences_.at(id).pending);
      bm.register_blocks(id, context.data(), positions_[i] + 1);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const int64_t end = p.begin + p.count;
    bm.set_length(p.id, end);
    bm.register_blocks(p.id, contexts[i].data(), end);
    Sequence& seq = sequences_.at(p.id);
    if (end < seq.context_len || !seq.state.tokens.empty()) continue;
    sampling_rows.push_back(seqs[d + i].row + p.count - 1);
    sampling.push_back(p.id);
  }
  const int64_t heads = next_power_of_two(static_cast<int64_t>(sampling.size()));
  logits_.resize(heads * c.vocab);
  KILN_RETURN_IF_ERROR(model_->keep_rows(sampling_rows));
  KILN_RETURN_IF_ERROR(model_->head(heads, logits_.data()));
  // Statistics before accept() retires anything.
  const BlockStats kv = bm.stats();
  counters_.peak_blocks_used = std::max(counters_.peak_blocks_used, kv.blocks_used);
  counters_.peak_step_tokens = std::max(counters_.peak_step_tokens, rows);
  counters_.prefill_tokens += rows - d;
  counters_.decode_tokens += d;
  if (d > 0) {
    ++counters_.decode_steps;
    counters_.fragmentation_sum += kv.fragmentation();
    if (rows > d) ++counters_.mixed_steps;
  }
  // The padding goes with the prefill rows when there are any (the pass was sized by them).
  counters_.decode_padded_tokens += rows > d ? d : t;
  if (rows > d) counters_.prefill_padded_tokens += t - d;
  for (size_t i = 0; i < sampling.size(); ++i) accept(sampling[i], logits_.data() + i * c.vocab);
  const double ms = ms_since(start_time);
  counters_.decode_ms += ms * static_cast<double>(d) / static_cast<double>(rows);
  counters_.prefill_ms += ms * static_cast<double>(rows - d) / static_cast<double>(rows);
  return ok_status();
}

Status Engine::run_to_completion() {
  while (!idle()) KILN_RETURN_IF_ERROR(step());
  return ok_status();
}

std::vector<AttentionSequence> Engine::static_shape_sequences(int64_t t, std::vector<AttentionSequence> seqs) const {
  const std::vector<int64_t>& buckets = options_.attention_buckets;
  if (buckets.empty()) return seqs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    AttentionSequence& s = seqs[i];
    const int64_t context = s.start + s.count;
    const auto fits = std::lower_bound(buckets.begin(), buckets.end(), context);
    s.padded_keys = fits == buckets.end() ? buckets.back() : *fits;
    // The pass's padding rows follow its last sequence: attended too, within its padded keys.
    if (i + 1 == seqs.size()) s.count = std::max(s.count, std::min(t - s.row, s.padded_keys - s.start));
  }
  return seqs;
}

Status Engine::forward(int64_t t, const std::vector<AttentionSequence>& seqs) {
  const DecoderConfig& c = config();
  const int64_t q_row = c.heads * c.head_dim, kv_row = c.kv_heads * c.head_dim;
  q_.resize(t * q_row);
  k_.resize(t * kv_row);
  v_.resize(t * kv_row);
  // Zeroed each pass: attention never writes the rows of padding, so the projections after
  // it must see defined values there.
  attn_.assign(t * q_row, 0.0f);
  KILN_RETURN_IF_ERROR(model_->begin(t, ids_.data(), positions_.data()));
  const AttentionShape shape{c.heads, c.kv_heads, c.head_dim, options_.block_size};
  const std::vector<AttentionSequence> attended = static_shape_sequences(t, seqs);
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    KILN_RETURN_IF_ERROR(model_->attention_inputs(layer, q_.data(), k_.data(), v_.data()));
    for (const AttentionSequence& s : seqs)
      for (int64_t r = 0; r < s.count; ++r)
        cache_->write(layer, s.block_table, s.start + r, k_.data() + (s.row + r) * kv_row, v_.data() + (s.row + r) * kv_row);
    paged_attention(shape, q_.data(), cache_->pools(layer), attended, attn_.data());
    KILN_RETURN_IF_ERROR(model_->attention_output(layer, attn_.data()));
  }
  return ok_status();
}

std::vector<int64_t> Engine::context_of(int64_t id) const {
  // The prompt, and after a preemption the tokens generated before it but the pending last.
  const Sequence& seq = sequences_.at(id);
  std::vector<int64_t> context = seq.request.prompt;
  if (!seq.state.tokens.empty()) context.insert(context.end(), seq.state.tokens.begin(), seq.state.tokens.end() - 1);
  return context;
}

Status Engine::prefill(const std::vector<int64_t>& group) {
  const auto start_time = std::chrono::steady_clock::now();
  const DecoderConfig& c = config();
  BlockManager& bm = cache_->blocks();
  // Pieces (sequence, first position, count) in passes of at most the largest bucket's rows:
  // several whole prompts side by side, or one long prompt in chunks (chunked prefill).
  std::vector<std::vector<int64_t>> contexts;
  std::vector<std::vector<Piece>> passes(1);
  const int64_t chunk = options_.prefill_buckets.back();
  int64_t rows = 0;
  for (int64_t id : group) {
    contexts.push_back(context_of(id));
    const int64_t n = static_cast<int64_t>(contexts.back().size());
    for (int64_t begin = sequences_.at(id).prefill_from; begin < n; begin += chunk) {
      const int64_t count = std::min(chunk, n - begin);
      if (rows + count > chunk) {
        passes.emplace_back();
        rows = 0;
      }
      passes.back().push_back({id, begin, count});
      rows += count;
    }
    sequences_.at(id).state.phase = RequestState::Phase::kRunning;
    running_.push_back(id);
  }
  // The last hidden row of each sequence that samples now (not one resuming after preemption,
  // whose pending token is already chosen).
  std::vector<int64_t> sampling;
  for (const auto& pass : passes) {
    int64_t count = 0;
    for (const Piece& p : pass) count += p.count;
    const int64_t t = prefill_bucket(count);
    ids_.assign(t, 0);
    positions_.assign(t, 0);
    std::vector<AttentionSequence> seqs;
    int64_t row = 0;
    for (const Piece& p : pass) {
      const auto& context = contexts[std::find(group.begin(), group.end(), p.id) - group.begin()];
      for (int64_t i = 0; i < p.count; ++i) {
        ids_[row + i] = context[p.begin + i];
        positions_[row + i] = p.begin + i;
      }
      seqs.push_back({bm.block_table(p.id).data(), p.begin, p.count, row});
      row += p.count;
    }
    KILN_RETURN_IF_ERROR(forward(t, seqs), "while prefilling %zu request(s)", pass.size());
    counters_.prefill_tokens += count;
    counters_.peak_step_tokens = std::max(counters_.peak_step_tokens, count);
    counters_.prefill_padded_tokens += t;
    std::vector<int64_t> pass_rows;
    for (size_t i = 0; i < pass.size(); ++i) {
      const Piece& p = pass[i];
      bm.set_length(p.id, p.begin + p.count);
      const bool last = p.begin + p.count == static_cast<int64_t>(context_of(p.id).size());
      if (!last || !sequences_.at(p.id).state.tokens.empty()) continue;
      pass_rows.push_back(seqs[i].row + p.count - 1);
      sampling.push_back(p.id);
    }
    KILN_RETURN_IF_ERROR(model_->keep_rows(pass_rows));
  }
  // Only those rows' logits matter: the head runs on them alone, padded to a decode bucket.
  if (!sampling.empty()) {
    const int64_t t = next_power_of_two(static_cast<int64_t>(sampling.size()));
    logits_.resize(t * c.vocab);
    KILN_RETURN_IF_ERROR(model_->head(t, logits_.data()));
    for (size_t i = 0; i < sampling.size(); ++i) accept(sampling[i], logits_.data() + i * c.vocab);
  }
  counters_.prefill_ms += ms_since(start_time);
  return ok_status();
}

Status Engine::reserve_decode_slots() {
  BlockManager& bm = cache_->blocks();
  // Room for one more token per sequence; preempt the latest admitted while there is none. A
  // sequence still prefilling holds its whole context already (reserved at admission).
  for (size_t i = 0; i < running_.size(); ++i) {
    const int64_t id = running_[i];
    while (!bm.can_reserve(id, bm.length(id) + 1) && running_.size() > i + 1) preempt(running_.back());
    if (!bm.can_reserve(id, bm.length(id) + 1)) {
      preempt(id);  // the latest admitted itself; it is last, so the walk ends
      break;
    }
    KILN_RETURN_IF_ERROR(bm.reserve(id, bm.length(id) + 1));
  }
  return ok_status();
}

Status Engine::decode() {
  const auto start_time = std::chrono::steady_clock::now();
  BlockManager& bm = cache_->blocks();
  KILN_RETURN_IF_ERROR(reserve_decode_slots());
  if (running_.empty()) return ok_status();
  const int64_t b = static_cast<int64_t>(running_.size());
  const int64_t t = next_power_of_two(b);
  ids_.assign(t, 0);
  positions_.assign(t, 0);
  std::vector<AttentionSequence> seqs;
  seqs.reserve(b);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t id = running_[i];
    ids_[i] = sequences_.at(id).pending;
    positions_[i] = bm.length(id);
    seqs.push_back({bm.block_table(id).data(), positions_[i], 1, i});
  }
  KILN_RETURN_IF_ERROR(forward(t, seqs), "while decoding a batch of %lld", (long long)b);
  const DecoderConfig& c = config();
  logits_.resize(t * c.vocab);
  std::vector<int64_t> rows(t);
  for (int64_t i = 0; i < t; ++i) rows[i] = i;
  KILN_RETURN_IF_ERROR(model_->keep_rows(rows));
  KILN_RETURN_IF_ERROR(model_->head(t, logits_.data()));
  counters_.decode_tokens += b;
  counters_.peak_step_tokens = std::max(counters_.peak_step_tokens, b);
  ++counters_.decode_steps;
  counters_.decode_padded_tokens += t;
  // accept() may retire sequences, which edits running_: walk a copy.
  const std::vector<int64_t> batch = running_;
  for (int64_t i = 0; i < b; ++i) {
    bm.set_length(batch[i], positions_[i] + 1);
    // A block just filled: register it so later requests with this context can map it.
    if ((positions_[i] + 1) % options_.block_size == 0) {
      std::vector<int64_t> context = context_of(batch[i]);
      context.push_back(sequences_.at(batch[i]).pending);
      bm.register_blocks(batch[i], context.data(), positions_[i] + 1);
    }
  }
  const BlockStats kv = bm.stats();
  counters_.peak_blocks_used = std::max(counters_.peak_blocks_used, kv.blocks_used);
  counters_.fragmentation_sum += kv.fragmentation();
  for (int64_t i = 0; i < b; ++i) accept(batch[i], logits_.data() + i * c.vocab);
  counters_.decode_ms += ms_since(start_time);
  return ok_status();
}

void Engine::accept(int64_t id, const float* logits) {
  Sequence& seq = sequences_.at(id);
  const int64_t vocab = config().vocab;
  const int64_t token = seq.sampler->sample(logits, vocab);
  seq.state.tokens.push_back(token);
  if (options_.record_logits) seq.state.logits.emplace_back(logits, logits + vocab);
  if (on_token) on_token(id, token);
  const auto& stops = seq.request.stop_tokens;
  if (static_cast<int64_t>(seq.state.tokens.size()) >= seq.request.max_new_tokens ||
      std::find(stops.begin(), stops.end(), token) != stops.end())
    retire(id, RequestState::Phase::kFinished);
  else
    seq.pending = token;
}

EngineStats Engine::stats() const {
  EngineStats s = counters_;
  s.mean_fragmentation = s.decode_steps ? s.fragmentation_sum / s.decode_steps : 0.0;
  s.kv = cache_->blocks().stats();
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.running = static_cast<int64_t>(running_.size());
  return s;
}

}  // namespace kiln::llm
