// kiln.Tokenizer: text to token ids and back with a SentencePiece model (docs/llm.md), over the
// C library's kilnllmTokenize / kilnllmDetokenize, each called with a buffer large enough for
// almost any text and again at the size it reports when not.
#include "python/src/llm_tokenizer.h"

#include <pybind11/stl.h>

#include "python/src/binders.h"
#include "python/src/errors.h"

namespace kiln::python {
namespace {

void check(kilnError e, const char* call) {
  if (e != KILN_SUCCESS) throw_api_error(e, call);
}

}  // namespace

LlmTokenizer::LlmTokenizer(const std::string& model_path) {
  check(kilnllmCreateTokenizer(model_path.c_str(), &tokenizer_), "kilnllmCreateTokenizer");
}

void LlmTokenizer::close() {
  if (tokenizer_) kilnllmDestroyTokenizer(tokenizer_);
  tokenizer_ = nullptr;
}

const kilnllmTokenizer* LlmTokenizer::handle() const {
  if (!tokenizer_) throw_error(KILN_ERROR_INVALID_RESOURCE_HANDLE, "the tokenizer is closed");
  return tokenizer_;
}

std::string LlmTokenizer::utf8_of(const py::object& text) {
  if (py::isinstance<py::bytes>(text)) return text.cast<std::string>();
  if (!py::isinstance<py::str>(text)) throw py::type_error("text must be str or bytes");
  // surrogatepass: a lone surrogate becomes its (invalid) bytes, which Kiln refuses naming them,
  // rather than a UnicodeEncodeError from here.
  return text.attr("encode")("utf-8", "surrogatepass").cast<std::string>();
}

std::vector<int64_t> LlmTokenizer::encode(const py::object& text, bool add_bos) const {
  const std::string utf8 = utf8_of(text);
  if (utf8.find('\0') != std::string::npos)
    throw_error(KILN_ERROR_INVALID_PARAM, "Tokenizer.encode: the text holds a NUL character");
  // One call in the usual case: a piece is at least a byte, plus <s> and the dummy-prefix
  // space; NFKC normalisation may lengthen a text, then the call says how many and is repeated.
  std::vector<int64_t> ids(utf8.size() + 2);
  size_t n = 0;
  kilnError e = kilnllmTokenize(handle(), utf8.c_str(), add_bos ? 1 : 0, ids.data(), ids.size(), &n);
  if (e == KILN_ERROR_STORAGE_OVER_LIMIT) {
    ids.resize(n);
    e = kilnllmTokenize(handle(), utf8.c_str(), add_bos ? 1 : 0, ids.data(), ids.size(), &n);
  }
  check(e, "kilnllmTokenize");
  ids.resize(n);
  return ids;
}

py::str LlmTokenizer::decode(const std::vector<int64_t>& ids) const {
  // One decode in the usual case (16 bytes a piece); a longer text is decoded again at its size.
  std::string text(16 * ids.size() + 16, '\0');
  size_t n = 0;
  kilnError e = kilnllmDetokenize(handle(), ids.data(), ids.size(), text.data(), text.size(), &n);
  if (e == KILN_ERROR_STORAGE_OVER_LIMIT) {
    text.resize(n + 1);
    e = kilnllmDetokenize(handle(), ids.data(), ids.size(), text.data(), text.size(), &n);
  }
  check(e, "kilnllmDetokenize");
  return py::str(text.data(), n);
}

int64_t LlmTokenizer::bos_id() const {
  int64_t v = -1;
  check(kilnllmTokenizerBosId(handle(), &v), "kilnllmTokenizerBosId");
  return v;
}

int64_t LlmTokenizer::eos_id() const {
  int64_t v = -1;
  check(kilnllmTokenizerEosId(handle(), &v), "kilnllmTokenizerEosId");
  return v;
}

int64_t LlmTokenizer::vocab_size() const {
  int64_t v = 0;
  check(kilnllmTokenizerVocabSize(handle(), &v), "kilnllmTokenizerVocabSize");
  return v;
}

void bind_llm_tokenizer(py::module_& m) {
  py::class_<LlmTokenizer>(m, "Tokenizer",
                           "A SentencePiece model (the .model file spm_train writes): text to token ids and back, "
                           "as `kiln generate --tokenizer` uses it (docs/llm.md).")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("encode", &LlmTokenizer::encode, py::arg("text"), py::arg("add_bos") = true,
           "The token ids of `text` (str, or UTF-8 bytes), with <s> in front when add_bos and the model has one. "
           "kiln.Error for text that is not UTF-8.")
      .def("decode", &LlmTokenizer::decode, py::arg("ids"),
           "The text of token ids (<s> and </s> decode to nothing). kiln.Error for an id outside the vocabulary.")
      .def_property_readonly("bos_id", &LlmTokenizer::bos_id, "The id of <s>, -1 when the model has none.")
      .def_property_readonly("eos_id", &LlmTokenizer::eos_id, "The id of </s>, -1 when the model has none.")
      .def_property_readonly("vocab_size", &LlmTokenizer::vocab_size, "Token ids are 0..vocab_size-1.")
      .def("close", &LlmTokenizer::close, "Frees the model (also when the object is collected).")
      .def("__enter__", [](LlmTokenizer& t) -> LlmTokenizer& { return t; }, py::return_value_policy::reference)
      .def("__exit__", [](LlmTokenizer& t, const py::args&) {
        t.close();
        return false;
      });
}

}  // namespace kiln::python
