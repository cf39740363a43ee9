// The SentencePiece shim (CMakeLists.txt beside this file says why it is a library of its
// own): a model handle, encode to ids, decode from ids. Every function catches everything:
// no C++ exception crosses the C boundary.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "llm/sentencepiece_abi.h"

namespace {

// Copies `s` into a malloc'ed C string the caller frees with kiln_spm_free (null on failure).
char* c_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.data(), s.size() + 1);
  return out;
}

void set_error(char** error, const std::string& message) {
  if (error != nullptr) *error = c_string(message);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) uint32_t kiln_spm_abi_version(void) {
  return KILN_SPM_ABI_VERSION;
}

__attribute__((visibility("default"))) void* kiln_spm_load(const char* path, char** error) {
  try {
    auto p = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = p->Load(path);
    if (!status.ok()) {
      set_error(error, status.ToString());
      return nullptr;
    }
    return p.release();
  } catch (const std::exception& e) {
    set_error(error, e.what());
  } catch (...) {
    set_error(error, "unknown error");
  }
  return nullptr;
}

__attribute__((visibility("default"))) int32_t kiln_spm_vocab_size(void* model) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(model)->GetPieceSize();
}

__attribute__((visibility("default"))) int32_t kiln_spm_special_id(void* model, int32_t which) {
  auto* p = static_cast<sentencepiece::SentencePieceProcessor*>(model);
  switch (which) {
    case KILN_SPM_BOS: return p->bos_id();
    case KILN_SPM_EOS: return p->eos_id();
    case KILN_SPM_UNK: return p->unk_id();
    case KILN_SPM_PAD: return p->pad_id();
    default: return -1;
  }
}

__attribute__((visibility("default"))) int32_t kiln_spm_encode(void* model, const char* text,
                                                               size_t len, int32_t** ids,
                                                               size_t* count, char** error) {
  try {
    std::vector<int> out;
    const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(model)->Encode(
        std::string_view(text, len), &out);
    if (!status.ok()) {
      set_error(error, status.ToString());
      return -1;
    }
    *ids = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (out.empty() ? 1 : out.size())));
    if (*ids == nullptr) {
      set_error(error, "out of memory");
      return -1;
    }
    for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = out[i];
    *count = out.size();
    return 0;
  } catch (const std::exception& e) {
    set_error(error, e.what());
  } catch (...) {
    set_error(error, "unknown error");
  }
  return -1;
}

__attribute__((visibility("default"))) char* kiln_spm_decode(void* model, const int32_t* ids,
                                                             size_t count, size_t* length,
                                                             char** error) {
  try {
    std::vector<int> in(ids, ids + count);
    std::string text;
    const auto status =
        static_cast<sentencepiece::SentencePieceProcessor*>(model)->Decode(in, &text);
    if (!status.ok()) {
      set_error(error, status.ToString());
      return nullptr;
    }
    char* out = c_string(text);
    if (out == nullptr) set_error(error, "out of memory");
    else *length = text.size();
    return out;
  } catch (const std::exception& e) {
    set_error(error, e.what());
  } catch (...) {
    set_error(error, "unknown error");
  }
  return nullptr;
}

__attribute__((visibility("default"))) void kiln_spm_free(void* p) { std::free(p); }

__attribute__((visibility("default"))) void kiln_spm_unload(void* model) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(model);
}

}  // extern "C"
