// Kiln LLM C++ API: a thin, header-only, move-only RAII wrapper (C++17) over include/kiln/llm.h,
// in the manner of kiln.hpp over kiln.h: a failing call throws kiln::Error with the code and
// Kiln's message; the destructor never throws.
//
//   kiln::Runtime runtime;
//   kiln::llm::Engine engine("gpt2-10m");
//   kiln::llm::RequestParams params;             // greedy, 16 new tokens
//   params.maxNewTokens = 32;
//   int64_t id = engine.add_request({464, 2068, 7586}, params);
//   engine.on_token([](int64_t request, int64_t token, bool last) { ...; return true; });
//   engine.run();                                // or: while (!engine.step()) {}
//   std::vector<int64_t> tokens = engine.tokens(id);
//
// The token callback may throw: the exception cancels that request and is rethrown from step() /
// run() when the step ends (it never crosses the C boundary); for the rest of that step the
// callback is not called (the other requests' tokens are still kept: tokens(), poll()). Inside the callback only
// cancel(), poll(), status(), tokens(), stats() and info() may be called on the engine.
//
// Text: kiln::llm::Tokenizer tok("tokenizer.model"); tok.encode("And God said") (with <s>),
// tok.decode(ids), and engine.add_text_request("And God said", tok, params) (ends at </s>).
#ifndef KILN_LLM_HPP_
#define KILN_LLM_HPP_

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln.hpp"
#include "llm.h"

namespace kiln {
namespace llm {

// The C structs with their defaults filled in (size fields set).
struct EngineOptions : kilnllmEngineOptions {
  EngineOptions() { check(kilnllmEngineOptionsInit(this), "kilnllmEngineOptionsInit"); }
};
struct RequestParams : kilnllmRequestParams {
  RequestParams() { check(kilnllmRequestParamsInit(this), "kilnllmRequestParamsInit"); }
};

using Status = kilnllmRequestStatus;

// A SentencePiece model (llm.h's tokenizer): move-only, immutable, usable from many threads.
class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path) {
    check(kilnllmCreateTokenizer(model_path.c_str(), &tokenizer_), "kilnllmCreateTokenizer");
  }
  ~Tokenizer() {
    if (tokenizer_) kilnllmDestroyTokenizer(tokenizer_);
  }
  Tokenizer(Tokenizer&& other) noexcept : tokenizer_(std::exchange(other.tokenizer_, nullptr)) {}
  Tokenizer& operator=(Tokenizer&& other) noexcept {
    if (this != &other) {
      if (tokenizer_) kilnllmDestroyTokenizer(tokenizer_);
      tokenizer_ = std::exchange(other.tokenizer_, nullptr);
    }
    return *this;
  }
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const kilnllmTokenizer* get() const noexcept { return tokenizer_; }

  // The ids of UTF-8 `text` (no NUL inside), <s> in front when add_bos and the model has one.
  std::vector<int64_t> encode(const std::string& text, bool add_bos = true) const {
    // One call in the usual case (a piece is at least a byte, plus <s> and the dummy-prefix
    // space); again at the reported size when normalisation lengthened the text.
    std::vector<int64_t> ids(text.size() + 2);
    size_t n = 0;
    kilnError code = kilnllmTokenize(tokenizer_, text.c_str(), add_bos ? 1 : 0, ids.data(), ids.size(), &n);
    if (code == KILN_ERROR_STORAGE_OVER_LIMIT) {
      ids.resize(n);
      code = kilnllmTokenize(tokenizer_, text.c_str(), add_bos ? 1 : 0, ids.data(), ids.size(), &n);
    }
    check(code, "kilnllmTokenize");
    ids.resize(n);
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const {
    // One decode in the usual case (16 bytes a piece); again at the reported size otherwise.
    std::string text(16 * ids.size() + 16, '\0');
    size_t n = 0;
    kilnError code = kilnllmDetokenize(tokenizer_, ids.data(), ids.size(), &text[0], text.size(), &n);
    if (code == KILN_ERROR_STORAGE_OVER_LIMIT) {
      text.resize(n + 1);
      code = kilnllmDetokenize(tokenizer_, ids.data(), ids.size(), &text[0], text.size(), &n);
    }
    check(code, "kilnllmDetokenize");
    text.resize(n);
    return text;
  }
  int64_t bos_id() const { return get_id(&kilnllmTokenizerBosId, "kilnllmTokenizerBosId"); }
  int64_t eos_id() const { return get_id(&kilnllmTokenizerEosId, "kilnllmTokenizerEosId"); }
  int64_t vocab_size() const { return get_id(&kilnllmTokenizerVocabSize, "kilnllmTokenizerVocabSize"); }

 private:
  int64_t get_id(kilnError (*fn)(const kilnllmTokenizer*, int64_t*), const char* call) const {
    int64_t v = -1;
    check(fn(tokenizer_, &v), call);
    return v;
  }
  kilnllmTokenizer* tokenizer_ = nullptr;
};

class Engine {
 public:
  // Called with each token as it is sampled; return false to cancel that request.
  using TokenCallback = std::function<bool(int64_t request, int64_t token, bool last)>;

  explicit Engine(const std::string& model_dir, const EngineOptions& options = EngineOptions())
      : callback_(std::make_unique<CallbackState>()) {
    check(kilnllmCreateEngine(model_dir.c_str(), &options, &engine_), "kilnllmCreateEngine");
  }
  ~Engine() {
    if (engine_) kilnllmDestroyEngine(engine_);
  }
  Engine(Engine&& other) noexcept
      : engine_(std::exchange(other.engine_, nullptr)), callback_(std::move(other.callback_)) {}
  Engine& operator=(Engine&& other) noexcept {
    if (this != &other) {
      if (engine_) kilnllmDestroyEngine(engine_);
      engine_ = std::exchange(other.engine_, nullptr);
      callback_ = std::move(other.callback_);
    }
    return *this;
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  kilnllmEngine* get() const noexcept { return engine_; }

  kilnllmModelInfo info() const {
    kilnllmModelInfo i{};
    i.size = sizeof(i);
    check(kilnllmGetModelInfo(engine_, &i), "kilnllmGetModelInfo");
    return i;
  }

  int64_t add_request(const std::vector<int64_t>& prompt, const RequestParams& params = RequestParams()) {
    int64_t id = -1;
    check(kilnllmAddRequest(engine_, prompt.data(), prompt.size(), &params, &id), "kilnllmAddRequest");
    return id;
  }
  // A text prompt: <s> + its ids, ending at the tokenizer's </s> besides params' stop tokens.
  int64_t add_text_request(const std::string& text, const Tokenizer& tokenizer,
                           const RequestParams& params = RequestParams()) {
    int64_t id = -1;
    check(kilnllmAddTextRequest(engine_, tokenizer.get(), text.c_str(), &params, &id), "kilnllmAddTextRequest");
    return id;
  }
  void cancel(int64_t id) { check(kilnllmCancelRequest(engine_, id), "kilnllmCancelRequest"); }
  void release(int64_t id) { check(kilnllmReleaseRequest(engine_, id), "kilnllmReleaseRequest"); }

  // Sets the callback (an empty one clears it). The engine keeps it; it lives as long as the
  // engine (the state it points to moves with the engine).
  void on_token(TokenCallback callback) {
    callback_->fn = std::move(callback);
    check(kilnllmSetTokenCallback(engine_, callback_->fn ? &trampoline : nullptr, callback_.get()),
          "kilnllmSetTokenCallback");
  }

  // One iteration; true when afterwards no request waits or runs.
  bool step() {
    int32_t idle = 0;
    const kilnError code = kilnllmStep(engine_, &idle);
    rethrow_callback_exception();
    check(code, "kilnllmStep");
    return idle != 0;
  }
  // Steps until no request waits or runs.
  void run() {
    while (!step()) {
    }
  }

  Status status(int64_t id) const {
    Status s = KILN_LLM_REQUEST_WAITING;
    check(kilnllmGetRequestStatus(engine_, id, &s, nullptr), "kilnllmGetRequestStatus");
    return s;
  }
  // Every token the request has generated so far.
  std::vector<int64_t> tokens(int64_t id) const {
    size_t n = 0;
    check(kilnllmGetRequestTokens(engine_, id, nullptr, 0, &n), "kilnllmGetRequestTokens");
    std::vector<int64_t> t(n);
    check(kilnllmGetRequestTokens(engine_, id, t.data(), t.size(), &n), "kilnllmGetRequestTokens");
    t.resize(n < t.size() ? n : t.size());
    return t;
  }
  // The tokens not returned by an earlier poll.
  std::vector<int64_t> poll(int64_t id) {
    std::vector<int64_t> t;
    int64_t buffer[64];
    size_t n = 0;
    do {
      check(kilnllmPollTokens(engine_, id, buffer, 64, &n, nullptr), "kilnllmPollTokens");
      t.insert(t.end(), buffer, buffer + n);
    } while (n == 64);
    return t;
  }
  // With EngineOptions::recordLogits: the logits token `index` was sampled from.
  std::vector<float> logits(int64_t id, size_t index) const {
    std::vector<float> row(static_cast<size_t>(info().vocab));
    check(kilnllmGetRequestLogits(engine_, id, index, row.data(), row.size()), "kilnllmGetRequestLogits");
    return row;
  }
  kilnllmStats stats() const {
    kilnllmStats s{};
    s.size = sizeof(s);
    check(kilnllmGetStats(engine_, &s), "kilnllmGetStats");
    return s;
  }

 private:
  struct CallbackState {
    TokenCallback fn;
    std::exception_ptr error;  // the first exception a callback threw during a step
  };

  static int32_t trampoline(int64_t request, int64_t token, int32_t last, void* user) noexcept {
    auto* state = static_cast<CallbackState*>(user);
    if (state->error) return 0;  // a callback threw earlier in this step: not called again
    try {
      return state->fn(request, token, last != 0) ? 0 : 1;
    } catch (...) {
      state->error = std::current_exception();
      return 1;
    }
  }

  void rethrow_callback_exception() {
    if (callback_ && callback_->error) std::rethrow_exception(std::exchange(callback_->error, nullptr));
  }

  kilnllmEngine* engine_ = nullptr;
  std::unique_ptr<CallbackState> callback_;
};

}  // namespace llm
}  // namespace kiln

#endif  // KILN_LLM_HPP_
