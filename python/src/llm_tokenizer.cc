// kiln.Tokenizer: text to token ids and back with a SentencePiece model (docs/llm.md), over the
// C library's kilnllmTokenize / kilnllmDetokenize, each called with a buffer large enough for
// almost any text and again at the size it reports when not.
#include "python/src/llm_tokenizer.h"

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <utility>

#include "capi/api_llm_tokenizer.h"
#include "llm/text_stream.h"
#include "python/src/binders.h"
#include "python/src/errors.h"

namespace kiln::python {
namespace {

void check(kilnError e, const char* call) {
  if (e != KILN_SUCCESS) throw_api_error(e, call);
}

// kiln._kiln._TextStream: one generated sequence's text with stop strings, llm::TextStream (the
// implementation kiln serve and kiln generate use) over a kiln.Tokenizer, for LlmEngine.stream()
// and generate() (python/kiln/__init__.py). It keeps the tokenizer object alive, and checks it
// is still open before each call (a closed tokenizer's model is gone).
class LlmTextStream {
 public:
  LlmTextStream(py::object tokenizer, std::vector<std::string> stop_strings) : owner_(std::move(tokenizer)) {
    const kiln::llm::Tokenizer& tok = model();
    auto stream = kiln::llm::TextStream::create(tok, std::move(stop_strings));
    if (!stream.ok()) throw_error(KILN_ERROR_INVALID_PARAM, "stop: " + stream.status().message());
    stream_.emplace(std::move(*stream));
  }
  std::pair<py::str, bool> push(int64_t token) {
    model();
    auto step = stream_->push(token);
    if (!step.ok()) throw_status(step.status());
    return {py::str(step->text), step->stopped};
  }
  py::str finish() {
    model();
    auto rest = stream_->finish();
    if (!rest.ok()) throw_status(rest.status());
    return py::str(*rest);
  }
  bool stopped() const { return stream_->stopped(); }
  size_t tokens() const { return stream_->tokens(); }
  py::str text() const { return py::str(stream_->text()); }

 private:
  const kiln::llm::Tokenizer& model() const {
    return *owner_.cast<const LlmTokenizer&>().handle()->tokenizer;  // kiln.Error once closed
  }
  py::object owner_;
  std::optional<kiln::llm::TextStream> stream_;
};

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
  py::class_<LlmTextStream>(m, "_TextStream",
                            "A generated sequence's text piece by piece, ended by stop strings (llm::TextStream): "
                            "whole characters only, nothing that may still become part of a stop string.")
      .def(py::init<py::object, std::vector<std::string>>(), py::arg("tokenizer"), py::arg("stop") = std::vector<std::string>())
      .def("push", &LlmTextStream::push, py::arg("token"),
           "(text that became final with the token, whether a stop string completed)")
      .def("finish", &LlmTextStream::finish, "The text held back, at the end of the sequence.")
      .def_property_readonly("stopped", &LlmTextStream::stopped)
      .def_property_readonly("tokens", &LlmTextStream::tokens, "Tokens pushed up to the stop (all while none).")
      .def_property_readonly("text", &LlmTextStream::text, "The text let out so far.");
}

}  // namespace kiln::python
