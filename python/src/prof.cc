// kiln.prof: pyACL's acl.prof over include/kiln/kiln.h's kilnprof* functions.
#include <string>

#include "python/src/binders.h"
#include "python/src/lowlevel.h"

namespace kiln::python {

void bind_prof(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "prof",
      "Profiling (pyACL's acl.prof): init(dir), start(), stop(), finalize() writes\n"
      "timeline.json, op_summary.csv, op_statistic.csv and api_statistic.csv into dir.\n"
      "Unlike aclprof there is no config object: everything is recorded. These calls do not\n"
      "need kiln.init(); while KILN_PROFILE is set, init() returns 100002.");
  m.def("init", [](const std::string& path) { return kilnprofInit(path.c_str(), path.size()); },
        py::arg("profiler_result_path"),
        "init(profiler_result_path) -> ret: the output directory (created if missing).");
  // pyACL's start/stop take an aclprofConfig; Kiln has none, so the argument is accepted
  // and ignored, which keeps ported code unchanged.
  m.def("start", [](py::object) { return kilnprofStart(); }, py::arg("config") = py::none(),
        "start(config=None) -> ret: turns recording on (config is accepted for pyACL code and ignored).");
  m.def("stop", [](py::object) { return kilnprofStop(); }, py::arg("config") = py::none(),
        "stop(config=None) -> ret: turns recording off.");
  m.def("finalize", [] {
    py::gil_scoped_release release;
    return kilnprofFinalize();
  }, "finalize() -> ret: stops and writes the profile files into the directory of init().");
}

}  // namespace kiln::python
