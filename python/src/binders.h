// The parts of the extension module kiln._kiln: one binder per API, each in its own file,
// called in this order by module.cc. Adding an API is one file plus one line here and one
// in module.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

namespace py = pybind11;

void bind_errors(py::module_& m);   // kiln.Error (errors.cc); first: the others raise it
void bind_session(py::module_& m);  // kiln.InferenceSession, NodeArg (session.cc)
void bind_compile(py::module_& m);  // kiln.compile, kiln.inspect (compile.cc)
void bind_util(py::module_& m);     // kiln.init, kiln.create_data_buffer, ..., kiln.util (util.cc)
void bind_rt(py::module_& m);       // kiln.rt (rt.cc)
void bind_mdl(py::module_& m);      // kiln.mdl (mdl.cc)
void bind_prof(py::module_& m);     // kiln.prof (prof.cc)
void bind_comm(py::module_& m);     // kiln.comm (comm.cc)
void bind_ocr(py::module_& m);      // kiln.OcrPipeline (ocr.cc)
void bind_llm_tokenizer(py::module_& m);  // kiln.Tokenizer (llm_tokenizer.cc); before LlmEngine, which takes one
void bind_llm(py::module_& m);      // kiln.LlmEngine (llm.cc)
void bind_dsl(py::module_& m);      // kiln._dsl, the native half of kiln.dsl (dsl.cc)

}  // namespace kiln::python
