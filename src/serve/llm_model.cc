// The LLM engine behind POST /v1/completions: one driver thread per decoder model (llm_model.h).
#include "serve/llm_model.h"

#include <algorithm>
#include <filesystem>

namespace kiln::serve {

Completion::Completion(CompletionParams params) : params_(std::move(params)) {
  choices_.resize(params_.prompts.size());
}

Status Completion::wait_admitted() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return admitted_ || !error_.ok(); });
  return error_;
}

Status Completion::wait_for_update(const std::vector<size_t>& sent, const std::vector<bool>& finished,
                                   std::vector<Choice>* choices, bool* all_done) {
  std::unique_lock lock(mutex_);
  auto changed = [&] {
    if (!error_.ok()) return true;
    for (size_t i = 0; i < choices_.size(); ++i)
      if (choices_[i].tokens.size() > sent[i] || (!choices_[i].finish_reason.empty() && !finished[i])) return true;
    return false;
  };
  cv_.wait(lock, changed);
  *choices = choices_;
  *all_done = !error_.ok() || done_ == static_cast<int64_t>(choices_.size());
  return error_;
}

Expected<std::shared_ptr<LlmModel>> LlmModel::load(const ModelFiles& files, Metrics& metrics) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<llm::DecoderModel> decoder, llm::DecoderModel::load(files.model_path),
                        "model '%s'", files.name.c_str());
  llm::EngineOptions options;
  options.max_batch = files.config.llm.max_batch;
  options.kv_cache_mib = files.config.llm.kv_cache_mib;
  options.block_size = files.config.llm.block_size;
  options.max_step_tokens = files.config.llm.max_step_tokens;
  options.kv_dtype = *llm::kv_dtype_from_name(files.config.llm.kv_dtype);  // config.json checked the name
  std::unique_ptr<llm::Tokenizer> tokenizer;
  if (!files.config.llm.tokenizer.empty()) {
    // Relative to the version directory, where the decoder's own files are.
    const std::filesystem::path path = std::filesystem::path(files.model_path) / files.config.llm.tokenizer;
    KILN_ASSIGN_OR_RETURN(tokenizer, llm::Tokenizer::load(path.string()), "model '%s': config.json llm.tokenizer",
                          files.name.c_str());
    KILN_RETURN_IF_ERROR(llm::check_tokenizer_fits(*tokenizer, decoder->config().vocab), "model '%s'",
                         files.name.c_str());
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(std::move(decoder), options),
                        "model '%s'", files.name.c_str());
  return std::shared_ptr<LlmModel>(new LlmModel(files, std::move(engine), std::move(tokenizer), metrics));
}

LlmModel::LlmModel(ModelFiles files, std::unique_ptr<llm::Engine> engine, std::unique_ptr<llm::Tokenizer> tokenizer,
                   Metrics& metrics)
    : files_(std::move(files)),
      engine_(std::move(engine)),
      tokenizer_(std::move(tokenizer)),
      metrics_(metrics.model(files_.name)) {
  decoder_ = engine_->config();
  metrics_.llm = true;
  const llm::DecoderConfig& c = decoder_;
  metrics_.kv_block_bytes = llm::KvCache::block_bytes(c.layers, c.kv_heads, c.head_dim, engine_->options().block_size,
                                                      engine_->options().kv_dtype);
  metrics_.max_step_tokens = engine_->options().max_step_tokens;
  publish_stats();
  engine_->on_token = [this](int64_t request, int64_t token) { on_token(request, token); };
  driver_ = std::thread([this] { drive(); });
}

LlmModel::~LlmModel() { shutdown(); }

Status LlmModel::prepare(CompletionParams* p) const {
  if ((!p->texts.empty() || !p->stop_strings.empty()) && tokenizer_ == nullptr)
    return invalid_argument("'%s' is text, but model '%s' has no tokenizer: name a SentencePiece model in its "
                            "config.json (\"llm\": {\"tokenizer\": \"tokenizer.model\"}), or give token ids",
                            p->texts.empty() ? "stop" : "prompt", files_.name.c_str());
  for (size_t i = 0; i < p->texts.size(); ++i) {
    Expected<std::vector<int64_t>> ids = tokenizer_->encode(p->texts[i]);
    if (!ids.ok())
      return invalid_argument("'prompt'%s: %s", p->texts.size() > 1 ? str_format("[%zu]", i).c_str() : "",
                              ids.status().message().c_str());
    if (tokenizer_->bos_id() >= 0) ids->insert(ids->begin(), tokenizer_->bos_id());
    p->prompts.push_back(std::move(*ids));
  }
  if (tokenizer_ != nullptr && tokenizer_->eos_id() >= 0 && !p->ignore_eos &&
      std::find(p->stop.begin(), p->stop.end(), tokenizer_->eos_id()) == p->stop.end())
    p->stop.push_back(tokenizer_->eos_id());
  return ok_status();
}

Status LlmModel::submit(std::shared_ptr<Completion> completion) {
  std::lock_guard lock(mutex_);
  if (stopping_) return unavailable("model '%s' is being unloaded", files_.name.c_str());
  if (in_progress_ >= static_cast<size_t>(files_.config.max_queue_size)) {
    ++metrics_.rejected;
    return resource_exhausted("model '%s' has %zu completions in progress (max_queue_size)", files_.name.c_str(),
                              in_progress_);
  }
  ++in_progress_;
  inbox_.push_back(std::move(completion));
  cv_.notify_all();
  return ok_status();
}

void LlmModel::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (driver_.joinable()) driver_.join();
}

void LlmModel::admit(const std::shared_ptr<Completion>& c) {
  const CompletionParams& p = c->params();
  std::vector<int64_t> ids;
  Status refused;
  for (size_t i = 0; i < p.prompts.size() && refused.ok(); ++i) {
    llm::SamplingOptions sampling = p.sampling;
    sampling.seed += i;  // the choices of one completion differ when sampled
    Expected<int64_t> id = engine_->add_request({p.prompts[i], p.max_tokens, sampling, p.stop});
    if (id.ok()) {
      ids.push_back(*id);
      metrics_.prompt_tokens += static_cast<int64_t>(p.prompts[i].size());
    } else {
      refused = p.prompts.size() > 1 ? Status(id.status().code(), str_format("prompt %zu: %s", i,
                                                                               id.status().message().c_str()))
                                     : id.status();
    }
  }
  if (!refused.ok()) {
    for (int64_t id : ids) {
      (void)engine_->cancel(id);
      (void)engine_->forget(id);
    }
    std::lock_guard lock(c->mutex_);
    c->error_ = refused;
    c->cv_.notify_all();
    std::lock_guard model_lock(mutex_);
    --in_progress_;
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) requests_[ids[i]] = {c, i};
  if (tokenizer_ != nullptr) {
    for (size_t i = 0; i < ids.size(); ++i) {
      // The stop strings were checked by the codec (none empty), so this cannot fail.
      Expected<llm::TextStream> stream = llm::TextStream::create(*tokenizer_, p.stop_strings);
      KILN_CHECK(stream.ok());
      c->streams_.push_back(std::move(*stream));
    }
  }
  std::lock_guard lock(c->mutex_);
  c->admitted_ = true;
  c->cv_.notify_all();
}

void LlmModel::on_token(int64_t request, int64_t token) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  auto& [c, index] = it->second;
  const CompletionParams& p = c->params();
  ++metrics_.generated_tokens;
  std::lock_guard lock(c->mutex_);
  Completion::Choice& choice = c->choices_[index];
  // Ended by a stop string earlier in this step: the engine is told after it (drive()).
  if (!choice.finish_reason.empty() || !c->error_.ok()) return;
  // The engine retires a request after its stop token or its last token (engine.h accept()).
  if (std::find(p.stop.begin(), p.stop.end(), token) != p.stop.end()) {
    choice.finish_reason = "stop";
  } else {
    choice.tokens.push_back(token);
    add_text(*c, index, &token);
    if (!choice.finish_reason.empty()) text_stopped_.push_back(request);
    if (choice.finish_reason.empty() && static_cast<int64_t>(choice.tokens.size()) >= p.max_tokens)
      choice.finish_reason = "length";
  }
  if (!choice.finish_reason.empty()) {
    add_text(*c, index, nullptr);
    ++c->done_;
  }
  c->cv_.notify_all();
}

void LlmModel::add_text(Completion& c, size_t index, const int64_t* token) {
  Completion::Choice& choice = c.choices_[index];
  if (c.streams_.empty() || !c.error_.ok()) {
    if (token != nullptr) choice.text_end.push_back(choice.text.size());
    return;
  }
  llm::TextStream& stream = c.streams_[index];
  Status failed;
  if (token != nullptr) {
    Expected<llm::TextStream::Step> step = stream.push(*token);
    if (step.ok()) {
      choice.text += step->text;
      if (step->stopped) choice.finish_reason = "stop";
    } else {
      failed = step.status();
    }
    choice.text_end.push_back(choice.text.size());
  } else {
    Expected<std::string> rest = stream.finish();
    if (rest.ok()) {
      choice.text += *rest;
      if (stream.stopped()) choice.finish_reason = "stop";
    } else {
      failed = rest.status();
    }
  }
  if (!failed.ok()) {
    // A token the tokenizer does not have (a model's vocabulary larger than its tokenizer's):
    // the completion fails naming it, and its requests stop.
    c.error_ = internal_error("choice %zu's text: %s", index, failed.message().c_str());
    c.cancelled_ = true;
  }
}

void LlmModel::fail_all(const Status& error) {
  std::vector<std::shared_ptr<Completion>> failed;
  for (auto& [id, entry] : requests_) {
    (void)engine_->cancel(id);
    (void)engine_->forget(id);
    if (failed.empty() || failed.back() != entry.first) failed.push_back(entry.first);
  }
  requests_.clear();
  std::sort(failed.begin(), failed.end());
  failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
  for (auto& c : failed) {
    std::lock_guard lock(c->mutex_);
    c->error_ = error;
    c->cv_.notify_all();
  }
  std::lock_guard lock(mutex_);
  in_progress_ -= failed.size();
}

void LlmModel::publish_stats() {
  const llm::EngineStats st = engine_->stats();
  metrics_.kv_blocks_used = st.kv.blocks_used;
  metrics_.kv_blocks_total = st.kv.blocks_total;
  metrics_.sequences_running = st.running;
  metrics_.sequences_waiting = st.waiting;
  metrics_.peak_step_tokens = st.peak_step_tokens;
  metrics_.mixed_steps = st.mixed_steps;
}

void LlmModel::drive() {
  for (;;) {
    std::deque<std::shared_ptr<Completion>> arrived;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return !inbox_.empty() || !requests_.empty() || stopping_; });
      // Stopping: the completions already submitted still run to their end.
      if (stopping_ && inbox_.empty() && requests_.empty()) return;
      arrived.swap(inbox_);
    }
    for (const auto& c : arrived) admit(c);
    // Completions whose client went away stop now; finished ones leave the engine.
    std::vector<std::shared_ptr<Completion>> ended;
    for (auto it = requests_.begin(); it != requests_.end();) {
      const auto& [c, index] = it->second;
      const auto phase = engine_->request(it->first).phase;
      const bool over = phase == llm::RequestState::Phase::kFinished || phase == llm::RequestState::Phase::kCancelled;
      if (!over && !c->cancelled()) {
        ++it;
        continue;
      }
      if (!over) (void)engine_->cancel(it->first);
      (void)engine_->forget(it->first);
      ended.push_back(c);
      it = requests_.erase(it);
    }
    // A completion is over when none of its requests is left.
    std::sort(ended.begin(), ended.end());
    ended.erase(std::unique(ended.begin(), ended.end()), ended.end());
    size_t over = 0;
    for (const auto& c : ended) {
      bool left = false;
      for (const auto& [id, entry] : requests_) left = left || entry.first == c;
      if (left) continue;
      ++over;
      std::lock_guard lock(c->mutex_);
      if (c->cancelled() && c->error_.ok() && c->done_ < static_cast<int64_t>(c->choices_.size()))
        c->error_ = unavailable("completion cancelled: the client went away");
      c->cv_.notify_all();
    }
    if (over) {
      std::lock_guard lock(mutex_);
      in_progress_ -= over;
    }
    if (!engine_->idle()) {
      Status s = engine_->step();
      if (!s.ok()) fail_all(s);
    }
    // Choices whose text reached a stop string end now (their completion sees them finished
    // already); the loop above forgets them next.
    for (int64_t id : text_stopped_)
      if (requests_.count(id)) (void)engine_->cancel(id);  // a no-op for one that finished
    text_stopped_.clear();
    publish_stats();
  }
}

}  // namespace kiln::serve
