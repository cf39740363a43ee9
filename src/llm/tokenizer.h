// Text to token ids and back for the LLM engine, with a SentencePiece model (the `.model`
// file spm_train writes, as Llama's and T5's tokenizers are). SentencePiece itself lives in
// libkiln_sentencepiece.so, loaded on first use (src/plugins/sentencepiece/CMakeLists.txt
// says why), so a program that never tokenizes never loads it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::llm {

class Tokenizer {
 public:
  // Errors: Kiln built without SentencePiece, the shim library not found, a file that is not
  // a SentencePiece model (each naming the path).
  static Expected<std::unique_ptr<Tokenizer>> load(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text that is not valid UTF-8 is an error naming the first bad byte's offset (SentencePiece
  // itself would silently encode such bytes as unknown pieces).
  Expected<std::vector<int64_t>> encode(const std::string& text) const;
  // Ids outside the vocabulary are an error.
  Expected<std::string> decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const { return vocab_size_; }
  // -1 when the model has none.
  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }

  struct Api;  // the shim's functions, found once per process (tokenizer.cc)

 private:
  Tokenizer(const Api* api, void* model);
  const Api* api_;
  void* model_;
  int64_t vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
};

// The check every path that pairs a tokenizer with a decoder makes when it loads them (kiln
// serve, kiln generate, the C API's kilnllmAddTextRequest): a tokenizer with more pieces than
// the model's vocabulary is not this model's (its ids past the vocabulary could not be fed to
// the model), invalid_argument naming both sizes. A smaller one is fine (ids past it are an
// error only if the model generates them).
Status check_tokenizer_fits(const Tokenizer& tokenizer, int64_t model_vocab);

}  // namespace kiln::llm
