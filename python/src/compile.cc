// kiln.compile and kiln.inspect: `kiln compile` and `kiln inspect --json` as functions
// returning their reports as dicts (tools/compile_report.h, tools/inspect_report.h).
#include <chrono>
#include <optional>
#include <string>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "compiler/compiler.h"
#include "compiler/pass_manager.h"
#include "preprocess/aipp_config.h"
#include "python/src/binders.h"
#include "python/src/errors.h"
#include "tools/compile_report.h"
#include "tools/inspect_report.h"
#include "tools/shape_options.h"

namespace kiln::python {
namespace {

py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// "x:1,3,224,224;y:1,128" as given, or {"x": [1, 3, 224, 224]} (None or -1 leaves a dim open).
std::string shape_text(const py::object& value) {
  if (value.is_none()) return "";
  if (py::isinstance<py::str>(value)) return py::cast<std::string>(value);
  std::string out;
  for (auto item : py::cast<py::dict>(value)) {
    if (!out.empty()) out += ';';
    out += py::cast<std::string>(item.first);
    char separator = ':';
    for (py::handle d : item.second) {
      out += separator;
      out += d.is_none() ? std::string("-1") : std::to_string(py::cast<int64_t>(d));
      separator = ',';
    }
  }
  return out;
}

// Text as given; a list as its items' texts joined by `separator`.
template <typename ItemText>
std::string list_text(const py::object& value, char separator, ItemText item_text) {
  if (value.is_none()) return "";
  if (py::isinstance<py::str>(value)) return py::cast<std::string>(value);
  std::string out;
  for (py::handle item : value) {
    if (!out.empty()) out += separator;
    out += item_text(py::reinterpret_borrow<py::object>(item));
  }
  return out;
}

// Buckets [{"x": [1, 3, 48, 320]}, {"x": [1, 3, 48, 640]}] in Kiln's --dynamic-dims form.
std::string dynamic_dims_text(const py::object& value) { return list_text(value, ';', shape_text); }

std::string batch_text(const py::object& value) {
  return list_text(value, ',', [](const py::object& b) { return std::to_string(py::cast<int64_t>(b)); });
}

py::object compile(const std::filesystem::path& src_path, const std::filesystem::path& dst_path, py::object input_shape,
                   py::object dynamic_dims, py::object dynamic_batch_size, std::optional<std::string> precision,
                   std::optional<std::filesystem::path> insert_op_conf, bool report) {
  const std::string src = src_path.string(), dst = dst_path.string();
  compiler::CompileOptions options;
  if (precision) {
    auto p = compiler::precision_from_name(*precision);
    if (!p) throw_error(KILN_ERROR_INVALID_PARAM, "precision='" + *precision + "': expected 'fp32', 'bf16' or 'mixed'");
    options.passes.precision = *p;
  }
  if (Status s = tools::apply_shape_options(shape_text(input_shape), dynamic_dims_text(dynamic_dims),
                                            batch_text(dynamic_batch_size), options);
      !s.ok())
    throw_status(s);
  nlohmann::json j;
  Status failed;
  {
    py::gil_scoped_release unlocked;
    [&] {
      if (insert_op_conf) {
        auto aipp = preprocess::read_aipp_config(insert_op_conf->string());
        if (!aipp.ok()) return void(failed = aipp.status());
        options.aipp = std::move(*aipp);
      }
      auto start = std::chrono::steady_clock::now();
      auto compiled = compiler::compile_onnx_file(src, options);
      if (!compiled.ok()) return void(failed = compiled.status());
      if (Status s = compiler::write_compiled_model(*compiled, dst); !s.ok()) return void(failed = s);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (report) j = tools::make_compile_report(*compiled, ms);
    }();
  }
  if (!failed.ok()) throw_status(failed);
  return report ? to_python(j) : py::object(py::none());
}

py::object inspect(const std::filesystem::path& file, bool nodes) {
  const std::string path = file.string();
  nlohmann::json j;
  Status failed;
  {
    py::gil_scoped_release unlocked;
    auto m = tools::inspect_model(path);
    if (m.ok())
      j = tools::inspect_json(path, *m, nodes);
    else
      failed = m.status();
  }
  if (!failed.ok()) throw_status(failed);
  return to_python(j);
}

}  // namespace

void bind_compile(py::module_& m) {
  m.def("compile", &compile, py::arg("src"), py::arg("dst"), py::arg("input_shape") = py::none(),
        py::arg("dynamic_dims") = py::none(), py::arg("dynamic_batch_size") = py::none(),
        py::arg("precision") = py::none(), py::arg("insert_op_conf") = py::none(), py::arg("report") = true,
        R"doc(
Compiles an .onnx model into a .kiln offline model, as `kiln compile SRC -o DST`.

input_shape: "x:1,3,224,224;y:1,128" or {"x": [1, 3, 224, 224]} (-1 or None leaves a dim
open). dynamic_dims: shape buckets, "x:1,3,48,320;x:1,3,48,640", ATC's "320;640" with -1
dims in input_shape, or [{"x": [...]}, {"x": [...]}]. dynamic_batch_size: [1, 4, 8] or
"1,4,8". precision: "fp32", "bf16" or "mixed". insert_op_conf: an AIPP config file
(docs/aipp.md). Returns the compile report as a dict (`kiln compile --report`'s JSON), or
None with report=False. Raises kiln.Error.
)doc");
  m.def("inspect", &inspect, py::arg("path"), py::arg("nodes") = false, R"doc(
What a model file (.onnx or .kiln) holds, as the dict `kiln inspect --json` prints: inputs,
outputs, op_histogram, opsets, weight_bytes, producer, target, buckets, ...; nodes=True
adds node_table. Raises kiln.Error.
)doc");
}

}  // namespace kiln::python
