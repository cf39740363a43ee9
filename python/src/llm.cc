// kiln.LlmEngine: the LLM engine (docs/llm.md) from Python, over the C library of
// include/kiln/llm.h: an engine made from a decoder directory, requests added and cancelled,
// steps run with the GIL released, tokens streamed to a Python callback or polled (kiln's
// __init__.py builds the stream() iterator on poll), statistics as a dict.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "kiln/llm.h"
#include "python/src/binders.h"
#include "python/src/errors.h"
#include "python/src/llm_tokenizer.h"
#include "python/src/runtime_init.h"

namespace kiln::python {
namespace {

const char* status_name(kilnllmRequestStatus s) {
  switch (s) {
    case KILN_LLM_REQUEST_WAITING: return "waiting";
    case KILN_LLM_REQUEST_RUNNING: return "running";
    case KILN_LLM_REQUEST_FINISHED: return "finished";
    case KILN_LLM_REQUEST_CANCELLED: return "cancelled";
  }
  return "unknown";
}

void check(kilnError e, const char* call) {
  if (e != KILN_SUCCESS) throw_api_error(e, call);
}

class LlmEngine {
 public:
  LlmEngine(const std::string& model_dir, int64_t block_size, int64_t kv_cache_mib, int64_t kv_blocks,
            int64_t max_batch, int64_t step_tokens, const std::optional<std::vector<int64_t>>& prefill_buckets,
            int threads, bool record_logits, const std::string& kv_dtype) {
    // The KV pool's element type, spelt as kiln compile --precision and kiln generate --kv-dtype.
    if (kv_dtype != "fp32" && kv_dtype != "bf16")
      throw_error(KILN_ERROR_INVALID_PARAM, "LlmEngine: kv_dtype '" + kv_dtype + "': expected 'fp32' or 'bf16'");
    ensure_runtime(0);
    kilnllmEngineOptions o;
    kilnllmEngineOptionsInit(&o);
    o.blockSize = block_size;
    o.kvCacheMiB = kv_cache_mib;
    o.kvBlocks = kv_blocks;
    o.maxBatch = max_batch;
    o.maxStepTokens = step_tokens;
    if (prefill_buckets) {
      o.prefillBuckets = prefill_buckets->data();
      o.numPrefillBuckets = prefill_buckets->size();
    }
    o.numThreads = threads;
    o.recordLogits = record_logits ? 1 : 0;
    o.kvDataType = kv_dtype == "bf16" ? KILN_BF16 : KILN_FLOAT;
    kilnError e;
    {
      py::gil_scoped_release unlocked;  // compiles the decoder's segments (a second or more)
      e = kilnllmCreateEngine(model_dir.c_str(), &o, &engine_);
    }
    check(e, "kilnllmCreateEngine");
  }
  ~LlmEngine() { close(); }

  void close() {
    if (engine_) kilnllmDestroyEngine(engine_);
    engine_ = nullptr;
  }

  py::dict model_info() {
    const kilnllmModelInfo info = info_of();
    py::dict d;
    d["name"] = info.name;
    d["style"] = info.style;
    d["vocab"] = info.vocab;
    d["context"] = info.context;
    d["layers"] = info.layers;
    d["d_model"] = info.dModel;
    d["heads"] = info.heads;
    d["kv_heads"] = info.kvHeads;
    d["head_dim"] = info.headDim;
    return d;
  }

  int64_t add_request(const std::vector<int64_t>& prompt, int64_t max_new_tokens, float temperature, int64_t top_k,
                      float top_p, uint64_t seed, const std::vector<int64_t>& stop_tokens) {
    const kilnllmRequestParams p = params_of(max_new_tokens, temperature, top_k, top_p, seed, stop_tokens);
    int64_t id = -1;
    check(kilnllmAddRequest(live(), prompt.data(), prompt.size(), &p, &id), "kilnllmAddRequest");
    return id;
  }

  // A text prompt through the tokenizer: <s> in front, </s> among the stop tokens.
  int64_t add_text_request(const py::object& text, const LlmTokenizer& tokenizer, int64_t max_new_tokens,
                           float temperature, int64_t top_k, float top_p, uint64_t seed,
                           const std::vector<int64_t>& stop_tokens) {
    const std::string utf8 = LlmTokenizer::utf8_of(text);
    if (utf8.find('\0') != std::string::npos)
      throw_error(KILN_ERROR_INVALID_PARAM, "LlmEngine.add_text_request: the text holds a NUL character");
    const kilnllmRequestParams p = params_of(max_new_tokens, temperature, top_k, top_p, seed, stop_tokens);
    int64_t id = -1;
    check(kilnllmAddTextRequest(live(), tokenizer.handle(), utf8.c_str(), &p, &id), "kilnllmAddTextRequest");
    return id;
  }

  void cancel(int64_t id) { check(kilnllmCancelRequest(live(), id), "kilnllmCancelRequest"); }
  void release(int64_t id) { check(kilnllmReleaseRequest(live(), id), "kilnllmReleaseRequest"); }

  // The Python callable gets (request id, token, is_last); a true return cancels the request.
  // An exception it raises cancels its request and is raised again by step() / run().
  void set_callback(std::optional<py::function> fn) {
    callback_ = fn ? std::move(*fn) : py::function();
    check(kilnllmSetTokenCallback(live(), callback_ ? &LlmEngine::on_token : nullptr, this),
          "kilnllmSetTokenCallback");
  }

  bool step() {
    int32_t idle = 0;
    kilnllmEngine* engine = live();  // may raise: with the GIL held
    kilnError e;
    {
      py::gil_scoped_release unlocked;
      e = kilnllmStep(engine, &idle);
    }
    rethrow_callback_error();
    check(e, "kilnllmStep");
    return idle != 0;
  }

  void run() {
    while (!step()) {
    }
  }

  std::string status(int64_t id) {
    kilnllmRequestStatus s;
    check(kilnllmGetRequestStatus(live(), id, &s, nullptr), "kilnllmGetRequestStatus");
    return status_name(s);
  }

  std::vector<int64_t> tokens(int64_t id) {
    size_t n = 0;
    check(kilnllmGetRequestTokens(live(), id, nullptr, 0, &n), "kilnllmGetRequestTokens");
    std::vector<int64_t> out(n);
    check(kilnllmGetRequestTokens(live(), id, out.data(), out.size(), &n), "kilnllmGetRequestTokens");
    out.resize(n);
    return out;
  }

  // The tokens not polled yet, and the request's status.
  py::tuple poll(int64_t id) {
    size_t total = 0;
    check(kilnllmGetRequestTokens(live(), id, nullptr, 0, &total), "kilnllmGetRequestTokens");
    std::vector<int64_t> out(total);
    size_t n = 0;
    kilnllmRequestStatus s;
    check(kilnllmPollTokens(live(), id, out.data(), out.size(), &n, &s), "kilnllmPollTokens");
    out.resize(n);
    return py::make_tuple(py::cast(out), status_name(s));
  }

  py::array_t<float> logits(int64_t id, size_t index) {
    py::array_t<float> out(static_cast<py::ssize_t>(info_of().vocab));
    check(kilnllmGetRequestLogits(live(), id, index, out.mutable_data(), static_cast<size_t>(out.size())),
          "kilnllmGetRequestLogits");
    return out;
  }

  py::dict stats() {
    kilnllmStats s;
    s.size = sizeof(s);
    check(kilnllmGetStats(live(), &s), "kilnllmGetStats");
    py::dict d;
    d["block_size"] = s.blockSize;
    d["blocks_total"] = s.blocksTotal;
    d["blocks_used"] = s.blocksUsed;
    d["blocks_free"] = s.blocksFree;
    d["blocks_shared"] = s.blocksShared;
    d["blocks_cached"] = s.blocksCached;
    d["slots_allocated"] = s.slotsAllocated;
    d["slots_used"] = s.slotsUsed;
    d["fragmentation"] = s.fragmentation;
    d["peak_blocks_used"] = s.peakBlocksUsed;
    d["mean_fragmentation"] = s.meanFragmentation;
    d["copies_on_write"] = s.copiesOnWrite;
    d["waiting"] = s.waiting;
    d["running"] = s.running;
    d["finished"] = s.finished;
    d["preemptions"] = s.preemptions;
    d["steps"] = s.steps;
    d["decode_steps"] = s.decodeSteps;
    d["prefill_tokens"] = s.prefillTokens;
    d["prefill_padded_tokens"] = s.prefillPaddedTokens;
    d["prefix_hit_tokens"] = s.prefixHitTokens;
    d["decode_tokens"] = s.decodeTokens;
    d["decode_padded_tokens"] = s.decodePaddedTokens;
    d["prefill_ms"] = s.prefillMs;
    d["decode_ms"] = s.decodeMs;
    d["peak_step_tokens"] = s.peakStepTokens;
    d["mixed_steps"] = s.mixedSteps;
    return d;
  }

 private:
  kilnllmEngine* live() const {
    if (!engine_) throw_error(KILN_ERROR_INVALID_RESOURCE_HANDLE, "the LLM engine is closed");
    return engine_;
  }
  // `stop_tokens` must outlive the returned struct (it points into it).
  static kilnllmRequestParams params_of(int64_t max_new_tokens, float temperature, int64_t top_k, float top_p,
                                        uint64_t seed, const std::vector<int64_t>& stop_tokens) {
    kilnllmRequestParams p;
    kilnllmRequestParamsInit(&p);
    p.maxNewTokens = max_new_tokens;
    p.temperature = temperature;
    p.topK = top_k;
    p.topP = top_p;
    p.seed = seed;
    p.stopTokens = stop_tokens.empty() ? nullptr : stop_tokens.data();
    p.numStopTokens = stop_tokens.size();
    return p;
  }
  kilnllmModelInfo info_of() const {
    kilnllmModelInfo info;
    info.size = sizeof(info);
    check(kilnllmGetModelInfo(live(), &info), "kilnllmGetModelInfo");
    return info;
  }

  // Runs on the stepping thread, which released the GIL in step().
  static int32_t on_token(int64_t id, int64_t token, int32_t is_last, void* user) {
    auto* self = static_cast<LlmEngine*>(user);
    py::gil_scoped_acquire locked;
    try {
      return py::cast<bool>(py::bool_(self->callback_(id, token, is_last != 0))) ? 1 : 0;
    } catch (py::error_already_set& e) {
      if (!self->error_) self->error_ = std::move(e);  // the first is raised by step()
      return 1;  // cancels the request whose callback raised
    }
  }
  void rethrow_callback_error() {
    if (!error_) return;
    py::error_already_set e = std::move(*error_);
    error_.reset();
    throw e;
  }

  kilnllmEngine* engine_ = nullptr;
  py::function callback_;
  std::optional<py::error_already_set> error_;
};

}  // namespace

void bind_llm(py::module_& m) {
  py::class_<LlmEngine>(m, "LlmEngine",
                        "The LLM engine (docs/llm.md) on a decoder directory (bench/llm/export_decoder.py's): "
                        "paged KV cache, continuous batching, greedy or sampled decoding.")
      .def(py::init<const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t,
                    const std::optional<std::vector<int64_t>>&, int, bool, const std::string&>(),
           py::arg("model_dir"), py::kw_only(), py::arg("block_size") = 16, py::arg("kv_cache_mib") = 256,
           py::arg("kv_blocks") = 0, py::arg("max_batch") = 16, py::arg("step_tokens") = 0,
           py::arg("prefill_buckets") = py::none(), py::arg("threads") = 0, py::arg("record_logits") = false,
           py::arg("kv_dtype") = "fp32")
      .def_property_readonly("model_info", &LlmEngine::model_info,
                             "{'name', 'style', 'vocab', 'context', 'layers', 'd_model', 'heads', 'kv_heads', "
                             "'head_dim'}")
      .def("add_request", &LlmEngine::add_request, py::arg("prompt_ids"), py::kw_only(),
           py::arg("max_new_tokens") = 16, py::arg("temperature") = 0.0f, py::arg("top_k") = 0,
           py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("stop_tokens") = std::vector<int64_t>{},
           "Queues a prompt (token ids); returns the request id. kiln.Error for this request alone: an id "
           "outside the vocabulary, an empty prompt, a prompt plus max_new_tokens beyond the context, bad "
           "sampling.")
      .def("add_text_request", &LlmEngine::add_text_request, py::arg("text"), py::arg("tokenizer"), py::kw_only(),
           py::arg("max_new_tokens") = 16, py::arg("temperature") = 0.0f, py::arg("top_k") = 0,
           py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("stop_tokens") = std::vector<int64_t>{},
           "Queues a text prompt (str or UTF-8 bytes) encoded by `tokenizer` (a kiln.Tokenizer) with its <s> in "
           "front; the request also stops at the tokenizer's </s>. Returns the request id. kiln.Error as "
           "add_request, and for text that is not UTF-8.")
      .def("cancel", &LlmEngine::cancel, py::arg("request_id"), "Stops a waiting or running request.")
      .def("release", &LlmEngine::release, py::arg("request_id"), "Forgets a finished or cancelled request.")
      .def("on_token", &LlmEngine::set_callback, py::arg("callback"),
           "callback(request_id, token, is_last) for every token during step(); a true return cancels the "
           "request, an exception cancels it and is raised by step(). None clears it.")
      .def("step", &LlmEngine::step, "One iteration (admission, prefill, decode); returns True when idle.")
      .def("run", &LlmEngine::run, "Steps until no request waits or runs.")
      .def("status", &LlmEngine::status, py::arg("request_id"),
           "'waiting', 'running', 'finished' or 'cancelled'.")
      .def("tokens", &LlmEngine::tokens, py::arg("request_id"), "The request's tokens so far.")
      .def("poll", &LlmEngine::poll, py::arg("request_id"),
           "(tokens not polled yet, status): streaming by polling.")
      .def("logits", &LlmEngine::logits, py::arg("request_id"), py::arg("index"),
           "The logits token `index` was sampled from (an engine made with record_logits=True).")
      .def("stats", &LlmEngine::stats, "The KV cache's and the scheduler's statistics as a dict.")
      .def("close", &LlmEngine::close, "Frees the engine (also when the object is collected).")
      .def("__enter__", [](LlmEngine& e) -> LlmEngine& { return e; }, py::return_value_policy::reference)
      .def("__exit__", [](LlmEngine& e, const py::args&) {
        e.close();
        return false;
      });
}

}  // namespace kiln::python
