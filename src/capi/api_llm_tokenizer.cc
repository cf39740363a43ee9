// include/kiln/llm.h's tokenizer over llm::Tokenizer: handles, buffers the caller sizes (a short
// one reports the size it needs and is left untouched), and the text request, which encodes and
// then queues through kilnllmAddRequest with </s> among the stop tokens.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/api_llm_tokenizer.h"

#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "kiln/llm.h"
#include "llm/tokenizer.h"

namespace {

// Live tokenizers: a destroyed or foreign handle is an error code, not a wild dereference.
kiln::rt::HandleSet<kilnllmTokenizer>& live_tokenizers() {
  static auto* set = new kiln::rt::HandleSet<kilnllmTokenizer>();  // outlives every tokenizer
  return *set;
}

using kiln::rt::api_entry;
using kiln::rt::ApiNeeds;
using kiln::rt::fail;
using kiln::llm::Tokenizer;

// The entry of every call on a tokenizer: the guard, and the handle is live; `body` gets it.
// No lock: a tokenizer is immutable, and destroying one in use is the caller's error (llm.h).
template <typename Body>
kilnError with_tokenizer(const char* api, const kilnllmTokenizer* handle, Body body) {
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (handle == nullptr) return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: tokenizer is NULL", api);
    if (!live_tokenizers().contains(handle))
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a live tokenizer", api,
                  static_cast<const void*>(handle));
    return body(*handle->tokenizer);
  });
}

kilnError success() {
  kiln::rt::clear_error();
  return KILN_SUCCESS;
}

// The prompt of a text: <s> (when asked for and the model has one), then the text's ids.
kiln::Expected<std::vector<int64_t>> encode_prompt(const Tokenizer& tok, const char* text, bool add_bos) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tok.encode(text));
  if (add_bos && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

kilnError fail_with(const char* api, const kiln::Status& status) {
  kiln::Status s = status;
  s.add_context("%s", api);
  return fail(s, KILN_ERROR_INVALID_PARAM);
}

kilnError getter(const char* api, const kilnllmTokenizer* handle, int64_t* out, const char* name,
                 int64_t (Tokenizer::*get)() const) {
  return with_tokenizer(api, handle, [&](const Tokenizer& tok) -> kilnError {
    if (out == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, name);
    *out = (tok.*get)();
    return success();
  });
}

}  // namespace

extern "C" {

kilnError kilnllmCreateTokenizer(const char* modelPath, kilnllmTokenizer** tokenizer) {
  const char* api = "kilnllmCreateTokenizer";
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (modelPath == nullptr || tokenizer == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, modelPath == nullptr ? "modelPath" : "tokenizer");
    auto loaded = Tokenizer::load(modelPath);
    if (!loaded.ok()) {
      // No shim (or a foreign one) is a missing feature; anything about the file is a bad file.
      const kiln::StatusCode code = loaded.status().code();
      const bool feature = code == kiln::StatusCode::kUnsupported || code == kiln::StatusCode::kFailedPrecondition;
      return fail(feature ? KILN_ERROR_FEATURE_UNSUPPORTED : KILN_ERROR_INVALID_FILE, "%s: %s", api,
                  loaded.status().to_string().c_str());
    }
    auto t = std::make_unique<kilnllmTokenizer>();
    t->tokenizer = std::move(*loaded);
    live_tokenizers().add(t.get());
    *tokenizer = t.release();
    return success();
  });
}

kilnError kilnllmDestroyTokenizer(kilnllmTokenizer* tokenizer) {
  const char* api = "kilnllmDestroyTokenizer";
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (tokenizer == nullptr) return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: tokenizer is NULL", api);
    if (!live_tokenizers().remove(tokenizer))
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a live tokenizer", api,
                  static_cast<const void*>(tokenizer));
    delete tokenizer;
    return success();
  });
}

kilnError kilnllmTokenize(const kilnllmTokenizer* tokenizer, const char* text, int32_t addBos, int64_t* ids,
                          size_t capacity, size_t* count) {
  const char* api = "kilnllmTokenize";
  return with_tokenizer(api, tokenizer, [&](const Tokenizer& tok) -> kilnError {
    if (text == nullptr || count == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, text == nullptr ? "text" : "count");
    if (ids == nullptr && capacity > 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: ids is NULL", api);
    auto encoded = encode_prompt(tok, text, addBos != 0);
    if (!encoded.ok()) return fail_with(api, encoded.status());
    *count = encoded->size();
    if (capacity < encoded->size())
      return fail(KILN_ERROR_STORAGE_OVER_LIMIT, "%s: the text is %zu tokens, ids holds %zu", api, encoded->size(),
                  capacity);
    std::copy(encoded->begin(), encoded->end(), ids);
    return success();
  });
}

kilnError kilnllmDetokenize(const kilnllmTokenizer* tokenizer, const int64_t* ids, size_t numIds, char* text,
                            size_t capacity, size_t* length) {
  const char* api = "kilnllmDetokenize";
  return with_tokenizer(api, tokenizer, [&](const Tokenizer& tok) -> kilnError {
    if (length == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: length is NULL", api);
    if (ids == nullptr && numIds > 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: ids is NULL", api);
    if (text == nullptr && capacity > 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: text is NULL", api);
    // Beyond any vocabulary's worth of pieces: refused before the copy, so a garbage count is
    // not an allocation of that size.
    if (numIds > (size_t{1} << 28)) return fail(KILN_ERROR_INVALID_PARAM, "%s: %zu ids is out of range", api, numIds);
    auto decoded = tok.decode(std::vector<int64_t>(ids, ids + numIds));
    if (!decoded.ok()) return fail_with(api, decoded.status());
    *length = decoded->size();
    if (capacity <= decoded->size())
      return fail(KILN_ERROR_STORAGE_OVER_LIMIT, "%s: the text is %zu bytes and its NUL, text holds %zu", api,
                  decoded->size(), capacity);
    std::memcpy(text, decoded->c_str(), decoded->size() + 1);
    return success();
  });
}

kilnError kilnllmTokenizerBosId(const kilnllmTokenizer* tokenizer, int64_t* id) {
  return getter("kilnllmTokenizerBosId", tokenizer, id, "id", &Tokenizer::bos_id);
}

kilnError kilnllmTokenizerEosId(const kilnllmTokenizer* tokenizer, int64_t* id) {
  return getter("kilnllmTokenizerEosId", tokenizer, id, "id", &Tokenizer::eos_id);
}

kilnError kilnllmTokenizerVocabSize(const kilnllmTokenizer* tokenizer, int64_t* vocabSize) {
  return getter("kilnllmTokenizerVocabSize", tokenizer, vocabSize, "vocabSize", &Tokenizer::vocab_size);
}

kilnError kilnllmAddTextRequest(kilnllmEngine* engine, const kilnllmTokenizer* tokenizer, const char* text,
                                const kilnllmRequestParams* params, int64_t* requestId) {
  const char* api = "kilnllmAddTextRequest";
  // Encoded under this call's guard; queued by kilnllmAddRequest after it (the guard is not
  // re-entered: the runtime lock it takes must not be taken twice by one thread).
  std::vector<int64_t> prompt, stops;
  kilnllmRequestParams p;
  // The engine's vocabulary, for the check every tokenizer-and-model pairing makes
  // (llm::check_tokenizer_fits); its errors (a NULL or dead engine) are this call's.
  kilnllmModelInfo info;
  info.size = sizeof(info);
  if (kilnError e = kilnllmGetModelInfo(engine, &info); e != KILN_SUCCESS) {
    const std::string why = kilnGetRecentErrMsg();  // copied: fail() rewrites the buffer
    return fail(e, "%s: %s", api, why.c_str());
  }
  kilnError err = with_tokenizer(api, tokenizer, [&](const Tokenizer& tok) -> kilnError {
    if (kiln::Status fits = kiln::llm::check_tokenizer_fits(tok, info.vocab); !fits.ok()) return fail_with(api, fits);
    if (text == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: text is NULL", api);
    if (params != nullptr && params->size != sizeof(kilnllmRequestParams))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: params->size is %zu, not sizeof(kilnllmRequestParams) = %zu (set it, "
                  "or call the struct's Init)", api, params->size, sizeof(kilnllmRequestParams));
    if (params != nullptr && params->stopTokens == nullptr && params->numStopTokens > 0)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: stopTokens is NULL with numStopTokens %zu", api,
                  params->numStopTokens);
    if (params != nullptr && params->numStopTokens > (size_t{1} << 20))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %zu stop tokens is out of range", api, params->numStopTokens);
    auto encoded = encode_prompt(tok, text, /*add_bos=*/true);
    if (!encoded.ok()) return fail_with(api, encoded.status());
    prompt = std::move(*encoded);
    if (params != nullptr) {
      p = *params;
      stops.assign(p.stopTokens, p.stopTokens + p.numStopTokens);
    } else {
      kilnllmRequestParamsInit(&p);
    }
    if (tok.eos_id() >= 0) stops.push_back(tok.eos_id());
    p.stopTokens = stops.empty() ? nullptr : stops.data();
    p.numStopTokens = stops.size();
    return success();
  });
  if (err != KILN_SUCCESS) return err;
  err = kilnllmAddRequest(engine, prompt.data(), prompt.size(), &p, requestId);
  if (err != KILN_SUCCESS) {
    const std::string why = kilnGetRecentErrMsg();  // copied: fail() rewrites the buffer
    return fail(err, "%s: %s", api, why.c_str());
  }
  return KILN_SUCCESS;
}

}  // extern "C"
