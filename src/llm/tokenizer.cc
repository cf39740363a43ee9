// Tokenizer over libkiln_sentencepiece.so (sentencepiece_abi.h).
#include "llm/tokenizer.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "llm/sentencepiece_abi.h"

namespace kiln::llm {

struct Tokenizer::Api {
  kiln_spm_load_fn load = nullptr;
  kiln_spm_vocab_size_fn vocab_size = nullptr;
  kiln_spm_special_id_fn special_id = nullptr;
  kiln_spm_encode_fn encode = nullptr;
  kiln_spm_decode_fn decode = nullptr;
  kiln_spm_free_fn free = nullptr;
  kiln_spm_unload_fn unload = nullptr;
};

namespace {

constexpr char kShim[] = "libkiln_sentencepiece.so";

// Where the shim is looked for: beside the binary that holds this code (libkiln.so's folder,
// or the kiln command's), its ../lib (the build tree and an install's bin/), then the
// loader's own search (rpath, LD_LIBRARY_PATH, the system's folders).
std::vector<std::string> shim_candidates() {
  std::vector<std::string> out;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&shim_candidates), &info) != 0 && info.dli_fname != nullptr) {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) {
      out.push_back((self.parent_path() / kShim).string());
      out.push_back((self.parent_path().parent_path() / "lib" / kShim).string());
    }
  }
  out.push_back(kShim);
  return out;
}

// Loads the shim once per process. RTLD_DEEPBIND: SentencePiece's copy of protobuf-lite binds
// to itself, not to the libprotobuf the process already has (and RTLD_LOCAL keeps its copy
// from the process's other lookups).
Expected<const Tokenizer::Api*> shim_api() {
  static std::once_flag once;
  static Tokenizer::Api api;
  static Status failure = ok_status();
  std::call_once(once, [] {
    std::string tried, why;
    void* h = nullptr;
    for (const std::string& path : shim_candidates()) {
      if (path.find('/') != std::string::npos && !std::filesystem::exists(path)) continue;
      h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (h != nullptr) break;
      const char* e = dlerror();
      why = e != nullptr ? e : "dlopen failed";
    }
    if (h == nullptr) {
      failure = unsupported("no SentencePiece tokenizer: %s was not found beside Kiln or in "
                            "the library path (%s); Kiln builds it when libsentencepiece-dev "
                            "is installed", kShim, why.empty() ? "no candidate" : why.c_str());
      return;
    }
    auto version = reinterpret_cast<kiln_spm_abi_version_fn>(dlsym(h, "kiln_spm_abi_version"));
    api.load = reinterpret_cast<kiln_spm_load_fn>(dlsym(h, "kiln_spm_load"));
    api.vocab_size = reinterpret_cast<kiln_spm_vocab_size_fn>(dlsym(h, "kiln_spm_vocab_size"));
    api.special_id = reinterpret_cast<kiln_spm_special_id_fn>(dlsym(h, "kiln_spm_special_id"));
    api.encode = reinterpret_cast<kiln_spm_encode_fn>(dlsym(h, "kiln_spm_encode"));
    api.decode = reinterpret_cast<kiln_spm_decode_fn>(dlsym(h, "kiln_spm_decode"));
    api.free = reinterpret_cast<kiln_spm_free_fn>(dlsym(h, "kiln_spm_free"));
    api.unload = reinterpret_cast<kiln_spm_unload_fn>(dlsym(h, "kiln_spm_unload"));
    if (version == nullptr || version() != KILN_SPM_ABI_VERSION || api.load == nullptr ||
        api.vocab_size == nullptr || api.special_id == nullptr || api.encode == nullptr ||
        api.decode == nullptr || api.free == nullptr || api.unload == nullptr) {
      failure = failed_precondition("%s is not this Kiln's SentencePiece shim (ABI %u expected)",
                                    kShim, KILN_SPM_ABI_VERSION);
    }
  });
  if (!failure.ok()) return failure;
  return &api;
}

// The offset of the first byte of `s` that does not belong to a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), or npos.
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string::npos;
}

// Takes a shim-allocated error string: its text, freed.
std::string take_error(const Tokenizer::Api* api, char* error) {
  std::string s = error != nullptr ? error : "unknown error";
  api->free(error);
  return s;
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_path) {
  KILN_ASSIGN_OR_RETURN(const Api* api, shim_api());
  if (!std::filesystem::is_regular_file(model_path)) {
    return not_found("tokenizer model %s: no such file", model_path.c_str());
  }
  char* error = nullptr;
  void* model = api->load(model_path.c_str(), &error);
  if (model == nullptr) {
    return invalid_argument("tokenizer model %s is not a SentencePiece model: %s",
                            model_path.c_str(), take_error(api, error).c_str());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(api, model));
}

Tokenizer::Tokenizer(const Api* api, void* model) : api_(api), model_(model) {
  vocab_size_ = api_->vocab_size(model_);
  bos_id_ = api_->special_id(model_, KILN_SPM_BOS);
  eos_id_ = api_->special_id(model_, KILN_SPM_EOS);
}

Tokenizer::~Tokenizer() { api_->unload(model_); }

Expected<std::vector<int64_t>> Tokenizer::encode(const std::string& text) const {
  if (const size_t bad = invalid_utf8_at(text); bad != std::string::npos) {
    return invalid_argument("the text is not valid UTF-8: byte 0x%02x at offset %zu",
                            static_cast<unsigned>(static_cast<unsigned char>(text[bad])), bad);
  }
  int32_t* ids = nullptr;
  size_t count = 0;
  char* error = nullptr;
  if (api_->encode(model_, text.data(), text.size(), &ids, &count, &error) != 0) {
    return invalid_argument("cannot tokenize the text: %s", take_error(api_, error).c_str());
  }
  std::vector<int64_t> out(ids, ids + count);
  api_->free(ids);
  return out;
}

Expected<std::string> Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int32_t> in;
  in.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return invalid_argument("token id %lld is outside the tokenizer's vocabulary of %lld",
                              static_cast<long long>(id), static_cast<long long>(vocab_size_));
    }
    in.push_back(static_cast<int32_t>(id));
  }
  char* error = nullptr;
  size_t length = 0;
  char* text = api_->decode(model_, in.data(), in.size(), &length, &error);
  if (text == nullptr) {
    return invalid_argument("cannot detokenize: %s", take_error(api_, error).c_str());
  }
  std::string out(text, length);  // by its length: a <0x00> piece puts a NUL inside the text
  api_->free(text);
  return out;
}

Status check_tokenizer_fits(const Tokenizer& tokenizer, int64_t model_vocab) {
  if (tokenizer.vocab_size() <= model_vocab) return ok_status();
  return invalid_argument("the tokenizer's vocabulary (%lld) is larger than the model's (%lld): not this model's "
                          "tokenizer", static_cast<long long>(tokenizer.vocab_size()),
                          static_cast<long long>(model_vocab));
}

}  // namespace kiln::llm
