// A decoder model of the repository (config.json "backend": "llm") served by the LLM engine
// (src/llm): one engine per model, driven by one thread that admits the completions the HTTP
// threads submit between engine steps, so concurrent requests are batched continuously (they
// join and leave the decode batch at every step), and hands each generated token to the
// completion it belongs to as it comes.
//
// A completion (one HTTP request) carries one or more prompts, each its own engine request
// (OpenAI's "choices"). Its submitter waits for admission (a prompt the engine refuses fails
// the whole completion before any token is sent), then reads tokens as they arrive with
// wait_for_tokens(). Cancelling (a client gone) stops its engine requests at the next step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "llm/engine.h"
#include "llm/text_stream.h"
#include "llm/tokenizer.h"
#include "serve/metrics.h"
#include "serve/model_config.h"

namespace kiln::serve {

// What a completion asks for (OpenAI's /v1/completions fields the engine understands).
struct CompletionParams {
  std::vector<std::vector<int64_t>> prompts;  // token ids, one prompt per choice
  // Text prompts as given (one per choice), encoded into `prompts` by LlmModel::prepare.
  std::vector<std::string> texts;
  int64_t max_tokens = 16;
  llm::SamplingOptions sampling;  // OpenAI's default temperature is 1
  std::vector<int64_t> stop;      // token ids that end a choice (not returned)
  // Text stop sequences (OpenAI's "stop": "text"): a choice ends once its text holds one; its
  // text stops before it (llm::TextStream). Needs the model's tokenizer.
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;        // vLLM's: do not stop at the tokenizer's </s>
  bool stream = false;
};

// One submitted completion, shared by the HTTP thread and the engine's driver thread. Every
// field below the mutex is guarded by it.
class Completion {
 public:
  explicit Completion(CompletionParams params);
  const CompletionParams& params() const { return params_; }

  struct Choice {
    std::vector<int64_t> tokens;  // generated, stop tokens excluded
    std::string finish_reason;    // empty while generating; "length" or "stop"
    // With a tokenizer: the text so far (final: whole characters, never a part of a stop
    // string), and its length after each token of `tokens` (a token may complete no text); the
    // text past text_end.back() came with the choice's end. Empty without a tokenizer.
    std::string text;
    std::vector<size_t> text_end;
  };
  // Blocks until the driver admitted or refused the completion: the refusal (the engine's
  // reason, for the prompt it names) or OK.
  Status wait_admitted();
  // Blocks until a choice has tokens past `sent[i]` or finished beyond what `finished[i]`
  // says, or the completion failed; returns a copy of the choices and the error (OK while
  // none). `all_done` is set when every choice finished or it failed.
  Status wait_for_update(const std::vector<size_t>& sent, const std::vector<bool>& finished,
                         std::vector<Choice>* choices, bool* all_done);
  // Asks the driver to stop this completion's engine requests (the client went away).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class LlmModel;
  CompletionParams params_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool admitted_ = false;
  Status error_;  // admission refused, or the engine failed
  std::vector<Choice> choices_;
  int64_t done_ = 0;  // choices finished
  // Driver thread only: each choice's text as its tokens come (with a tokenizer).
  std::vector<llm::TextStream> streams_;
};

class LlmModel {
 public:
  // Loads the decoder directory of `files` (compiling its segments), creates the engine with
  // the config's llm options and starts the driver thread.
  static Expected<std::shared_ptr<LlmModel>> load(const ModelFiles& files, Metrics& metrics);
  ~LlmModel();  // shutdown()
  LlmModel(const LlmModel&) = delete;
  LlmModel& operator=(const LlmModel&) = delete;

  const std::string& name() const { return files_.name; }
  const std::string& version() const { return files_.version; }
  const llm::DecoderConfig& decoder() const { return decoder_; }
  // The model's tokenizer (config.json llm.tokenizer), null without one. Immutable: any thread.
  const llm::Tokenizer* tokenizer() const { return tokenizer_.get(); }

  // Before submit, on the HTTP thread: encodes text prompts (<s> in front) into token ids,
  // and with a tokenizer adds its </s> to the stop tokens unless ignore_eos. invalid_argument
  // for a text prompt or text stop sequences when the model has no tokenizer (naming the config
  // field), or for text the tokenizer refuses.
  Status prepare(CompletionParams* params) const;

  // Queues a completion for the driver: resource_exhausted when max_queue_size completions
  // are in progress already, unavailable once shutdown() began.
  Status submit(std::shared_ptr<Completion> completion);
  // Stops accepting completions, finishes the ones in progress, joins the driver. Idempotent.
  void shutdown();

 private:
  LlmModel(ModelFiles files, std::unique_ptr<llm::Engine> engine, std::unique_ptr<llm::Tokenizer> tokenizer,
           Metrics& metrics);
  void drive();
  // Driver thread only: admits one completion's prompts into the engine (all or none).
  void admit(const std::shared_ptr<Completion>& c);
  void on_token(int64_t request, int64_t token);
  // Driver thread only, under the completion's lock: a choice's text with its new token (or its
  // end: token null). A stop string ends the choice; a token the tokenizer lacks fails the
  // completion.
  void add_text(Completion& c, size_t index, const int64_t* token);
  // Driver thread only: fails every completion in progress with `error` and stops its requests.
  void fail_all(const Status& error);
  // Driver thread only (or before it starts): the engine's KV and sequence counts to the metrics.
  void publish_stats();

  ModelFiles files_;
  llm::DecoderConfig decoder_;
  std::unique_ptr<llm::Engine> engine_;  // driver thread only
  std::unique_ptr<llm::Tokenizer> tokenizer_;
  ModelMetrics& metrics_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Completion>> inbox_;
  size_t in_progress_ = 0;  // submitted, not yet finished
  bool stopping_ = false;
  // Driver thread only: requests whose text reached a stop string, cancelled after the step.
  std::vector<int64_t> text_stopped_;
  // Driver thread only: engine request id -> (completion, choice index).
  std::map<int64_t, std::pair<std::shared_ptr<Completion>, size_t>> requests_;
  std::thread driver_;
};

}  // namespace kiln::serve
