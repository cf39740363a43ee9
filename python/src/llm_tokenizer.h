// kiln.Tokenizer (llm_tokenizer.cc): a SentencePiece model over include/kiln/llm.h's tokenizer,
// declared here so that kiln.LlmEngine (llm.cc) can queue text requests through it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "kiln/llm.h"

namespace kiln::python {

namespace py = pybind11;

class LlmTokenizer {
 public:
  explicit LlmTokenizer(const std::string& model_path);
  ~LlmTokenizer() { close(); }
  LlmTokenizer(const LlmTokenizer&) = delete;
  LlmTokenizer& operator=(const LlmTokenizer&) = delete;

  // `text`: str (UTF-8; lone surrogates reach Kiln and are refused as not UTF-8) or bytes.
  std::vector<int64_t> encode(const py::object& text, bool add_bos) const;
  py::str decode(const std::vector<int64_t>& ids) const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t vocab_size() const;
  void close();
  // The live handle; kiln.Error once closed.
  const kilnllmTokenizer* handle() const;

  // The UTF-8 bytes of a str or bytes argument.
  static std::string utf8_of(const py::object& text);

 private:
  kilnllmTokenizer* tokenizer_ = nullptr;
};

}  // namespace kiln::python
