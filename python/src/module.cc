// kiln._kiln: the extension module behind the kiln package (python/kiln/__init__.py).
#include "python/src/binders.h"

#include "kiln/kiln.h"

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln's native module; import kiln instead.";
  m.attr("__version__") = std::to_string(KILN_VERSION_MAJOR) + "." + std::to_string(KILN_VERSION_MINOR) + "." +
                          std::to_string(KILN_VERSION_PATCH);
  kiln::python::bind_errors(m);
  kiln::python::bind_session(m);
  kiln::python::bind_compile(m);
  kiln::python::bind_util(m);
  kiln::python::bind_rt(m);
  kiln::python::bind_mdl(m);
  kiln::python::bind_prof(m);
  kiln::python::bind_comm(m);
  kiln::python::bind_ocr(m);
  kiln::python::bind_llm_tokenizer(m);
  kiln::python::bind_llm(m);
  kiln::python::bind_dsl(m);
}
