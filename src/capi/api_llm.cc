// include/kiln/llm.h over llm::Engine: engine handles, argument checks, the token callback and
// the poll position of each request, Status -> kilnError with the message left for
// kilnGetRecentErrMsg, no exception across the C boundary (the runtime's entry guard).
//
// The C++ engine is driven by one thread and must not be changed while a step runs, but a
// streaming caller wants to stop a request from its token callback. So each engine's calls are
// serialised by a recursive mutex (the callback runs on the stepping thread, which holds it),
// and a call that re-enters from the callback sees `in_step`: reads are served, a cancel is
// recorded and applied when the step ends (its further tokens are hidden: `visible`), and
// anything else that would change the engine is refused.
#include "kiln/llm.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/parallel.h"
#include "llm/engine.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"

struct kilnllmEngine {
  // What the C layer keeps per request beside the engine's state.
  struct Tracked {
    int64_t max_new_tokens = 0;
    std::vector<int64_t> stop_tokens;
    size_t polled = 0;                                    // tokens kilnllmPollTokens returned
    size_t visible = std::numeric_limits<size_t>::max();  // tokens delivered before a cancel
    bool cancelled = false;
  };

  std::recursive_mutex mutex;
  std::unique_ptr<kiln::llm::Engine> engine;
  int32_t num_threads = 0;
  kilnllmTokenCallback callback = nullptr;
  void* user_data = nullptr;
  bool in_step = false;
  std::unordered_map<int64_t, Tracked> requests;
  std::vector<int64_t> deferred_cancels;  // asked for from the callback, applied after the step
};

namespace {

using kiln::Status;
using kiln::StatusCode;
using kiln::rt::api_entry;
using kiln::rt::ApiNeeds;
using kiln::rt::fail;
using kiln::llm::RequestState;

// Live engines: a destroyed or foreign handle is an error code, not a wild dereference.
kiln::rt::HandleSet<kilnllmEngine>& live_engines() {
  static auto* set = new kiln::rt::HandleSet<kilnllmEngine>();  // outlives every engine
  return *set;
}

// Set while this thread runs a token callback. The calls that need the runtime are refused
// there before the guard takes the runtime lock, which this thread holds already (shared, for
// its kilnllmStep): taking a shared lock twice is undefined for std::shared_mutex.
thread_local bool t_in_callback = false;

kilnError refuse_in_step(const char* api) {
  return fail(KILN_ERROR_FAILURE, "%s: not allowed from inside the engine's token callback", api);
}

// The entry of every call on an engine: the handle is live, the engine locked; `body` gets it.
template <typename Body>
kilnError with_engine(const char* api, ApiNeeds needs, const kilnllmEngine* handle, Body body) {
  if (needs == ApiNeeds::kRuntime && t_in_callback) return refuse_in_step(api);
  return api_entry(api, needs, [&]() -> kilnError {
    if (handle == nullptr) return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: engine is NULL", api);
    if (!live_engines().contains(handle))
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a live LLM engine", api,
                  static_cast<const void*>(handle));
    auto* e = const_cast<kilnllmEngine*>(handle);
    std::lock_guard lock(e->mutex);
    return body(*e);
  });
}

// Request errors: bad input is KILN_ERROR_INVALID_PARAM, a context beyond the KV pool
// KILN_ERROR_BAD_ALLOC (rt::fail maps resource exhausted so).
kilnError fail_request(const char* api, const Status& status) {
  Status s = status;
  s.add_context("%s", api);
  return fail(s, KILN_ERROR_INVALID_PARAM);
}

// Runs `fn` with the engine's thread count (its kernels' parallel_for and oneDNN follow the
// calling thread's override), restoring the caller's afterwards.
template <typename Fn>
auto with_threads(int32_t n, Fn fn) {
  const int previous = n > 0 ? kiln::set_thread_num_threads_override(n) : -1;
  struct Restore {
    int previous;
    ~Restore() {
      if (previous >= 0) kiln::set_thread_num_threads_override(previous);
    }
  } restore{previous};
  return fn();
}

kilnllmEngine::Tracked* find_request(kilnllmEngine& e, int64_t id) {
  auto it = e.requests.find(id);
  return it == e.requests.end() ? nullptr : &it->second;
}

kilnError unknown_request(const char* api, int64_t id) {
  return fail(KILN_ERROR_INVALID_PARAM, "%s: no request %lld in this engine", api, (long long)id);
}

size_t visible_tokens(const kilnllmEngine& e, int64_t id, const kilnllmEngine::Tracked& t) {
  return std::min(e.engine->request(id).tokens.size(), t.visible);
}

kilnllmRequestStatus status_of(const kilnllmEngine& e, int64_t id, const kilnllmEngine::Tracked& t) {
  if (t.cancelled) return KILN_LLM_REQUEST_CANCELLED;
  switch (e.engine->request(id).phase) {
    case RequestState::Phase::kWaiting: return KILN_LLM_REQUEST_WAITING;
    case RequestState::Phase::kRunning: return KILN_LLM_REQUEST_RUNNING;
    case RequestState::Phase::kFinished: return KILN_LLM_REQUEST_FINISHED;
    case RequestState::Phase::kCancelled: return KILN_LLM_REQUEST_CANCELLED;
  }
  return KILN_LLM_REQUEST_CANCELLED;
}

bool request_done(const kilnllmEngine& e, int64_t id) {
  const auto phase = e.engine->request(id).phase;
  return phase == RequestState::Phase::kFinished || phase == RequestState::Phase::kCancelled;
}

// Marks a request cancelled from inside the callback: nothing after its `delivered` tokens is
// shown, and the engine drops it when the step ends.
void cancel_in_step(kilnllmEngine& e, int64_t id, kilnllmEngine::Tracked& t, size_t delivered) {
  if (t.cancelled || request_done(e, id)) return;
  t.cancelled = true;
  t.visible = delivered;
  e.deferred_cancels.push_back(id);
}

// The engine's on_token: works out whether the token is the request's last, and calls the
// user's callback unless the request was cancelled earlier in this step.
void deliver(kilnllmEngine& e, int64_t id, int64_t token) {
  kilnllmEngine::Tracked* t = find_request(e, id);
  if (t == nullptr || t->cancelled || e.callback == nullptr) return;
  const size_t count = e.engine->request(id).tokens.size();
  const bool last = static_cast<int64_t>(count) >= t->max_new_tokens ||
                    std::find(t->stop_tokens.begin(), t->stop_tokens.end(), token) != t->stop_tokens.end();
  struct InCallback {
    InCallback() { t_in_callback = true; }
    ~InCallback() { t_in_callback = false; }
  };
  int32_t stop = 0;
  {
    InCallback scope;
    stop = e.callback(id, token, last ? 1 : 0, e.user_data);
  }
  if (stop != 0 && !last) cancel_in_step(e, id, *t, count);
}

// One engine step with the callback armed; the cancels it asked for are applied after it.
Status step_once(kilnllmEngine& e) {
  struct InStep {
    bool& flag;
    explicit InStep(bool& f) : flag(f) { flag = true; }
    ~InStep() { flag = false; }
  };
  Status st;
  {
    InStep scope(e.in_step);
    st = with_threads(e.num_threads, [&] { return e.engine->step(); });
  }
  for (int64_t id : e.deferred_cancels) {
    Status c = e.engine->cancel(id);
    (void)c;  // the id is the engine's own: cannot be unknown
  }
  e.deferred_cancels.clear();
  return st;
}

// A struct passed with its `size` field: NULL or a size this library does not know is
// KILN_ERROR_INVALID_PARAM (the ABI may grow a struct; a caller built against another version
// of the header is told so rather than misread). `earlier`: the sizes the struct had in earlier
// releases (the offset of the first field each release appended), also accepted.
template <typename T>
kilnError check_sized(const char* api, const char* name, const T* s, const char* type,
                      std::initializer_list<size_t> earlier = {}) {
  if (s == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, name);
  if (s->size == sizeof(T) || std::find(earlier.begin(), earlier.end(), s->size) != earlier.end())
    return KILN_SUCCESS;
  return fail(KILN_ERROR_INVALID_PARAM, "%s: %s->size is %zu, not sizeof(%s) = %zu (set it, or call the struct's Init)",
              api, name, s->size, type, sizeof(T));
}

// kilnllmEngineOptions as released: first ending before maxStepTokens, then before kvDataType.
constexpr std::initializer_list<size_t> kEarlierEngineOptionsSizes = {offsetof(kilnllmEngineOptions, maxStepTokens),
                                                                      offsetof(kilnllmEngineOptions, kvDataType)};
// kilnllmStats as first released, ending before peakStepTokens.
constexpr std::initializer_list<size_t> kEarlierStatsSizes = {offsetof(kilnllmStats, peakStepTokens)};

// A kilnllmEngineOptions::kvDataType as the engine's KV element type.
std::optional<kiln::DataType> kv_dtype_of(kilnDataType t) {
  if (t == KILN_FLOAT) return kiln::DataType::kFloat32;
  if (t == KILN_BF16) return kiln::DataType::kBFloat16;
  return std::nullopt;
}

kilnError success() {
  kiln::rt::clear_error();
  return KILN_SUCCESS;
}

}  // namespace

extern "C" {

kilnError kilnllmEngineOptionsInit(kilnllmEngineOptions* options) {
  return api_entry("kilnllmEngineOptionsInit", ApiNeeds::kNothing, [&]() -> kilnError {
    if (options == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "kilnllmEngineOptionsInit: options is NULL");
    const kiln::llm::EngineOptions defaults;
    *options = kilnllmEngineOptions{};
    options->size = sizeof(kilnllmEngineOptions);
    options->blockSize = defaults.block_size;
    options->kvCacheMiB = defaults.kv_cache_mib;
    options->kvBlocks = defaults.kv_blocks;
    options->maxBatch = defaults.max_batch;
    options->prefillBuckets = nullptr;
    options->numPrefillBuckets = 0;
    options->numThreads = 0;
    options->recordLogits = 0;
    options->maxStepTokens = defaults.max_step_tokens;
    options->kvDataType = KILN_FLOAT;
    return success();
  });
}

kilnError kilnllmCreateEngine(const char* modelDir, const kilnllmEngineOptions* options, kilnllmEngine** engine) {
  const char* api = "kilnllmCreateEngine";
  if (t_in_callback) return refuse_in_step(api);
  return api_entry(api, ApiNeeds::kRuntime, [&]() -> kilnError {
    if (modelDir == nullptr || engine == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, modelDir == nullptr ? "modelDir" : "engine");
    kilnllmEngineOptions o;
    kilnllmEngineOptionsInit(&o);
    if (options != nullptr) {
      // A caller of an earlier release passes a shorter struct: the fields it has, the defaults
      // for the ones appended since.
      if (kilnError err = check_sized(api, "options", options, "kilnllmEngineOptions", kEarlierEngineOptionsSizes))
        return err;
      std::memcpy(static_cast<void*>(&o), options, options->size);
      o.size = sizeof(o);
    }
    kiln::llm::EngineOptions eo;
    eo.block_size = o.blockSize;
    eo.kv_cache_mib = o.kvCacheMiB;
    eo.kv_blocks = o.kvBlocks;
    eo.max_batch = o.maxBatch;
    eo.record_logits = o.recordLogits != 0;
    eo.max_step_tokens = o.maxStepTokens;
    const std::optional<kiln::DataType> kv_dtype = kv_dtype_of(o.kvDataType);
    if (!kv_dtype)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: kvDataType %d: the KV cache holds KILN_FLOAT (%d) or KILN_BF16 (%d)",
                  api, static_cast<int>(o.kvDataType), static_cast<int>(KILN_FLOAT), static_cast<int>(KILN_BF16));
    eo.kv_dtype = *kv_dtype;
    if (o.blockSize <= 0 || o.blockSize > 4096)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: blockSize %lld: must be in 1..4096 tokens", api, (long long)o.blockSize);
    if (o.kvBlocks < 0 || (o.kvBlocks == 0 && o.kvCacheMiB <= 0))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: kvBlocks %lld, kvCacheMiB %lld: the KV pool would be empty", api,
                  (long long)o.kvBlocks, (long long)o.kvCacheMiB);
    if (o.kvCacheMiB > (int64_t{1} << 30))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: kvCacheMiB %lld is out of range", api, (long long)o.kvCacheMiB);
    if (o.maxBatch <= 0)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: maxBatch %lld: must be positive", api, (long long)o.maxBatch);
    if (o.numThreads < 0)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: numThreads %d: must not be negative", api, o.numThreads);
    if (o.numPrefillBuckets > 0) {
      if (o.prefillBuckets == nullptr)
        return fail(KILN_ERROR_INVALID_PARAM, "%s: prefillBuckets is NULL with numPrefillBuckets %zu", api,
                    o.numPrefillBuckets);
      eo.prefill_buckets.assign(o.prefillBuckets, o.prefillBuckets + o.numPrefillBuckets);
      for (size_t i = 0; i < eo.prefill_buckets.size(); ++i)
        if (eo.prefill_buckets[i] <= 0 || eo.prefill_buckets[i] > (int64_t{1} << 20) ||
            (i > 0 && eo.prefill_buckets[i] <= eo.prefill_buckets[i - 1]))
          return fail(KILN_ERROR_INVALID_PARAM, "%s: prefill bucket %zu is %lld: buckets must be ascending, in 1..%lld",
                      api, i, (long long)eo.prefill_buckets[i], (long long)(int64_t{1} << 20));
    }
    auto model = with_threads(o.numThreads, [&] { return kiln::llm::DecoderModel::load(modelDir); });
    if (!model.ok()) {
      // Not through rt::fail's mapping of the code: a model that does not load is a bad file
      // whatever its Status code (invalid argument for "not a Kiln decoder directory").
      const Status& s = model.status();
      return fail(s.code() == StatusCode::kResourceExhausted ? KILN_ERROR_BAD_ALLOC : KILN_ERROR_INVALID_FILE,
                  "%s: %s", api, s.to_string().c_str());
    }
    auto created = kiln::llm::Engine::create(std::move(*model), eo);
    if (!created.ok()) return fail_request(api, created.status());
    auto e = std::make_unique<kilnllmEngine>();
    e->engine = std::move(*created);
    e->num_threads = o.numThreads;
    kilnllmEngine* raw = e.get();
    raw->engine->on_token = [raw](int64_t id, int64_t token) { deliver(*raw, id, token); };
    live_engines().add(raw);
    *engine = e.release();
    return success();
  });
}

kilnError kilnllmDestroyEngine(kilnllmEngine* engine) {
  const char* api = "kilnllmDestroyEngine";
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (engine == nullptr) return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: engine is NULL", api);
    {
      // Taken out of the live set under its lock, so no call holds it when it goes.
      if (!live_engines().contains(engine))
        return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a live LLM engine", api,
                    static_cast<const void*>(engine));
      std::lock_guard lock(engine->mutex);
      if (engine->in_step) return refuse_in_step(api);
      if (!live_engines().remove(engine))
        return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a live LLM engine", api,
                    static_cast<const void*>(engine));
    }
    delete engine;
    return success();
  });
}

kilnError kilnllmGetModelInfo(const kilnllmEngine* engine, kilnllmModelInfo* info) {
  const char* api = "kilnllmGetModelInfo";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    if (kilnError err = check_sized(api, "info", info, "kilnllmModelInfo")) return err;
    const kiln::llm::DecoderConfig& c = e.engine->config();
    *info = kilnllmModelInfo{};
    info->size = sizeof(kilnllmModelInfo);
    std::snprintf(info->name, sizeof(info->name), "%s", c.name.c_str());
    std::snprintf(info->style, sizeof(info->style), "%s", c.style.c_str());
    info->vocab = c.vocab;
    info->context = c.context;
    info->layers = c.layers;
    info->dModel = c.d_model;
    info->heads = c.heads;
    info->kvHeads = c.kv_heads;
    info->headDim = c.head_dim;
    return success();
  });
}

kilnError kilnllmRequestParamsInit(kilnllmRequestParams* params) {
  return api_entry("kilnllmRequestParamsInit", ApiNeeds::kNothing, [&]() -> kilnError {
    if (params == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "kilnllmRequestParamsInit: params is NULL");
    const kiln::llm::Request defaults;
    *params = kilnllmRequestParams{};
    params->size = sizeof(kilnllmRequestParams);
    params->maxNewTokens = defaults.max_new_tokens;
    params->temperature = defaults.sampling.temperature;
    params->topK = defaults.sampling.top_k;
    params->topP = defaults.sampling.top_p;
    params->seed = defaults.sampling.seed;
    return success();
  });
}

kilnError kilnllmAddRequest(kilnllmEngine* engine, const int64_t* promptIds, size_t promptLength,
                            const kilnllmRequestParams* params, int64_t* requestId) {
  const char* api = "kilnllmAddRequest";
  return with_engine(api, ApiNeeds::kRuntime, engine, [&](kilnllmEngine& e) -> kilnError {
    if (e.in_step) return refuse_in_step(api);
    if (requestId == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: requestId is NULL", api);
    if (promptIds == nullptr && promptLength > 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: promptIds is NULL", api);
    kilnllmRequestParams p;
    kilnllmRequestParamsInit(&p);
    if (params != nullptr) {
      if (kilnError err = check_sized(api, "params", params, "kilnllmRequestParams")) return err;
      p = *params;
    }
    if (p.stopTokens == nullptr && p.numStopTokens > 0)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: stopTokens is NULL with numStopTokens %zu", api, p.numStopTokens);
    // Beyond any model's context: refused before the copy, so a garbage length is not an
    // allocation of that size.
    const int64_t context = e.engine->config().context;
    if (promptLength > static_cast<size_t>(context))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: prompt of %zu tokens is longer than %s's context of %lld", api,
                  promptLength, e.engine->config().name.c_str(), (long long)context);
    if (p.numStopTokens > (size_t{1} << 20))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %zu stop tokens is out of range", api, p.numStopTokens);
    kiln::llm::Request r;
    if (promptLength > 0) r.prompt.assign(promptIds, promptIds + promptLength);
    r.max_new_tokens = p.maxNewTokens;
    r.sampling = {p.temperature, p.topK, p.topP, p.seed};
    if (p.numStopTokens > 0) r.stop_tokens.assign(p.stopTokens, p.stopTokens + p.numStopTokens);
    kilnllmEngine::Tracked t;
    t.max_new_tokens = r.max_new_tokens;
    t.stop_tokens = r.stop_tokens;
    auto id = e.engine->add_request(std::move(r));
    if (!id.ok()) return fail_request(api, id.status());
    e.requests.emplace(*id, std::move(t));
    *requestId = *id;
    return success();
  });
}

kilnError kilnllmCancelRequest(kilnllmEngine* engine, int64_t requestId) {
  const char* api = "kilnllmCancelRequest";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    kilnllmEngine::Tracked* t = find_request(e, requestId);
    if (t == nullptr) return unknown_request(api, requestId);
    if (e.in_step) {
      cancel_in_step(e, requestId, *t, e.engine->request(requestId).tokens.size());
    } else if (!request_done(e, requestId)) {
      Status st = e.engine->cancel(requestId);
      if (!st.ok()) return fail_request(api, st);
      t->cancelled = true;
    }
    return success();
  });
}

kilnError kilnllmReleaseRequest(kilnllmEngine* engine, int64_t requestId) {
  const char* api = "kilnllmReleaseRequest";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    if (e.in_step) return refuse_in_step(api);
    if (find_request(e, requestId) == nullptr) return unknown_request(api, requestId);
    Status st = e.engine->forget(requestId);
    if (!st.ok()) return fail_request(api, st);
    e.requests.erase(requestId);
    return success();
  });
}

kilnError kilnllmGetRequestStatus(const kilnllmEngine* engine, int64_t requestId, kilnllmRequestStatus* status,
                                  size_t* numTokens) {
  const char* api = "kilnllmGetRequestStatus";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    const kilnllmEngine::Tracked* t = find_request(e, requestId);
    if (t == nullptr) return unknown_request(api, requestId);
    if (status != nullptr) *status = status_of(e, requestId, *t);
    if (numTokens != nullptr) *numTokens = visible_tokens(e, requestId, *t);
    return success();
  });
}

kilnError kilnllmGetRequestTokens(const kilnllmEngine* engine, int64_t requestId, int64_t* tokens, size_t capacity,
                                  size_t* numTokens) {
  const char* api = "kilnllmGetRequestTokens";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    const kilnllmEngine::Tracked* t = find_request(e, requestId);
    if (t == nullptr) return unknown_request(api, requestId);
    if (numTokens == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: numTokens is NULL", api);
    if (tokens == nullptr && capacity > 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: tokens is NULL", api);
    const size_t n = visible_tokens(e, requestId, *t);
    const auto& all = e.engine->request(requestId).tokens;
    std::copy(all.begin(), all.begin() + std::min(n, capacity), tokens);
    *numTokens = n;
    return success();
  });
}

kilnError kilnllmPollTokens(kilnllmEngine* engine, int64_t requestId, int64_t* tokens, size_t capacity,
                            size_t* numTokens, kilnllmRequestStatus* status) {
  const char* api = "kilnllmPollTokens";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    kilnllmEngine::Tracked* t = find_request(e, requestId);
    if (t == nullptr) return unknown_request(api, requestId);
    if (numTokens == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: numTokens is NULL", api);
    if (tokens == nullptr && capacity > 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: tokens is NULL", api);
    const size_t n = visible_tokens(e, requestId, *t);
    const size_t count = std::min(n - std::min(t->polled, n), capacity);
    const auto& all = e.engine->request(requestId).tokens;
    std::copy(all.begin() + t->polled, all.begin() + t->polled + count, tokens);
    t->polled += count;
    *numTokens = count;
    if (status != nullptr) *status = status_of(e, requestId, *t);
    return success();
  });
}

kilnError kilnllmGetRequestLogits(const kilnllmEngine* engine, int64_t requestId, size_t index, float* logits,
                                  size_t capacity) {
  const char* api = "kilnllmGetRequestLogits";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    const kilnllmEngine::Tracked* t = find_request(e, requestId);
    if (t == nullptr) return unknown_request(api, requestId);
    if (!e.engine->options().record_logits)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: the engine was created without recordLogits", api);
    if (index >= visible_tokens(e, requestId, *t))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: request %lld has no token %zu (it has %zu)", api,
                  (long long)requestId, index, visible_tokens(e, requestId, *t));
    const std::vector<float>& row = e.engine->request(requestId).logits[index];
    if (logits == nullptr || capacity < row.size())
      return fail(KILN_ERROR_INVALID_PARAM, "%s: logits holds %zu floats, the vocabulary needs %zu", api,
                  logits == nullptr ? size_t{0} : capacity, row.size());
    std::copy(row.begin(), row.end(), logits);
    return success();
  });
}

kilnError kilnllmSetTokenCallback(kilnllmEngine* engine, kilnllmTokenCallback callback, void* userData) {
  const char* api = "kilnllmSetTokenCallback";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    if (e.in_step) return refuse_in_step(api);
    e.callback = callback;
    e.user_data = callback != nullptr ? userData : nullptr;
    return success();
  });
}

kilnError kilnllmStep(kilnllmEngine* engine, int32_t* idle) {
  const char* api = "kilnllmStep";
  return with_engine(api, ApiNeeds::kRuntime, engine, [&](kilnllmEngine& e) -> kilnError {
    if (e.in_step) return refuse_in_step(api);
    Status st = step_once(e);
    if (!st.ok()) return fail(KILN_ERROR_FAILURE, "%s: %s", api, st.to_string().c_str());
    if (idle != nullptr) *idle = e.engine->idle() ? 1 : 0;
    return success();
  });
}

kilnError kilnllmRunToCompletion(kilnllmEngine* engine) {
  const char* api = "kilnllmRunToCompletion";
  return with_engine(api, ApiNeeds::kRuntime, engine, [&](kilnllmEngine& e) -> kilnError {
    if (e.in_step) return refuse_in_step(api);
    while (!e.engine->idle()) {
      Status st = step_once(e);
      if (!st.ok()) return fail(KILN_ERROR_FAILURE, "%s: %s", api, st.to_string().c_str());
    }
    return success();
  });
}

kilnError kilnllmGetStats(const kilnllmEngine* engine, kilnllmStats* stats) {
  const char* api = "kilnllmGetStats";
  return with_engine(api, ApiNeeds::kNothing, engine, [&](kilnllmEngine& e) -> kilnError {
    if (kilnError err = check_sized(api, "stats", stats, "kilnllmStats", kEarlierStatsSizes)) return err;
    const kiln::llm::EngineStats s = e.engine->stats();
    kilnllmStats all{};
    all.size = stats->size;
    all.blockSize = e.engine->options().block_size;
    all.blocksTotal = s.kv.blocks_total;
    all.blocksUsed = s.kv.blocks_used;
    all.blocksFree = s.kv.blocks_free;
    all.blocksShared = s.kv.blocks_shared;
    all.blocksCached = s.kv.blocks_cached;
    all.slotsAllocated = s.kv.slots_allocated;
    all.slotsUsed = s.kv.slots_used;
    all.fragmentation = s.kv.fragmentation();
    all.peakBlocksUsed = s.peak_blocks_used;
    all.meanFragmentation = s.mean_fragmentation;
    all.copiesOnWrite = s.kv.copies_on_write;
    all.waiting = s.waiting;
    all.running = s.running;
    all.finished = s.finished;
    all.preemptions = s.preemptions;
    all.steps = s.steps;
    all.decodeSteps = s.decode_steps;
    all.prefillTokens = s.prefill_tokens;
    all.prefillPaddedTokens = s.prefill_padded_tokens;
    all.prefixHitTokens = s.prefix_hit_tokens;
    all.decodeTokens = s.decode_tokens;
    all.decodePaddedTokens = s.decode_padded_tokens;
    all.prefillMs = s.prefill_ms;
    all.decodeMs = s.decode_ms;
    all.peakStepTokens = s.peak_step_tokens;
    all.mixedSteps = s.mixed_steps;
    // Only as much as the caller's struct holds (an earlier release's is shorter).
    std::memcpy(static_cast<void*>(stats), &all, stats->size);
    return success();
  });
}

}  // extern "C"
