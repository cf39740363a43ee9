#include "python/src/value_session.h"

#include <cstring>
#include <mutex>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "python/src/errors.h"
#include "tools/api_session.h"

namespace kiln::python {
namespace {

bool needs_values(const ir::Value& v) { return !v.type().is_tensor() || v.type().dtype == DataType::kString; }

// "tensor(float)", or the dtype's own name for the types the C API has no number for.
std::string tensor_type(DataType t) {
  kilnDataType api = tools::to_api_dtype(t);
  return api == KILN_DT_UNDEFINED && t != DataType::kString ? "tensor(" + std::string(dtype_name(t)) + ")"
                                                             : ort_type(t == DataType::kString ? KILN_STRING : api);
}

// ONNX Runtime's type string: "tensor(float)", "seq(tensor(float))", "optional(...)".
std::string value_type(const ir::TensorType& type) {
  std::string tensor = tensor_type(type.dtype);
  switch (type.kind) {
    case ir::TypeKind::kTensor: return tensor;
    case ir::TypeKind::kSequence: return "seq(" + tensor + ")";
    case ir::TypeKind::kOptionalTensor: return "optional(" + tensor + ")";
    case ir::TypeKind::kOptionalSequence: return "optional(seq(" + tensor + "))";
  }
  return tensor;
}

bool is_optional(const ir::TensorType& type) {
  return type.kind == ir::TypeKind::kOptionalTensor || type.kind == ir::TypeKind::kOptionalSequence;
}
bool is_sequence(const ir::TensorType& type) {
  return type.kind == ir::TypeKind::kSequence || type.kind == ir::TypeKind::kOptionalSequence;
}

NodeArg node_arg(const ir::Value& v) {
  NodeArg a;
  a.name = v.name();
  a.type = value_type(v.type());
  a.dtype = numpy_dtype(tools::to_api_dtype(v.type().dtype));
  const Shape& shape = v.type().shape;  // of the tensor, or of each item of a sequence
  a.unknown_rank = !shape.has_rank();
  for (const Dim& d : shape.dims()) {
    if (d.is_static())
      a.shape.append(d.value);
    else if (!d.symbol.empty())
      a.shape.append(d.symbol);
    else
      a.shape.append(py::none());
  }
  return a;
}

std::string text(py::handle h) { return py::str(h).cast<std::string>(); }

// One numpy array (or str/bytes array) as a tensor of `dtype`; `what` names it in errors.
Tensor to_tensor(py::handle obj, DataType dtype, const Shape& shape, const std::string& what) {
  if (!py::isinstance<py::array>(obj))
    throw_error(KILN_ERROR_INVALID_PARAM, what + ": expected a numpy.ndarray, got " + text(py::type::of(obj)));
  py::array a = py::reinterpret_borrow<py::array>(obj);
  std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
  if (shape.has_rank()) {
    bool fits = shape.rank() == a.ndim();
    for (int k = 0; fits && k < shape.rank(); ++k) fits = !shape[k].is_static() || shape[k].value == dims[k];
    if (!fits)
      throw_error(KILN_ERROR_MODEL_INPUT_NOT_MATCH, what + ": expected shape " + shape.to_string() + ", got " +
                                                        dims_to_string(dims));
  }
  if (dtype == DataType::kString) {
    char kind = a.dtype().kind();
    if (kind != 'U' && kind != 'S' && kind != 'O')
      throw_error(KILN_ERROR_MODEL_INPUT_NOT_MATCH, what + ": expected an array of str (tensor(string)), got dtype " +
                                                        text(a.dtype()));
    auto t = Tensor::allocate(DataType::kString, dims);
    if (!t.ok()) throw_status(t.status());
    py::list items = a.attr("reshape")(-1).attr("tolist")();
    std::string* out = t->data<std::string>();
    for (size_t i = 0; i < items.size(); ++i) {
      py::handle item = items[i];
      if (py::isinstance<py::bytes>(item))
        out[i] = item.cast<std::string>();
      else if (py::isinstance<py::str>(item))
        out[i] = item.cast<std::string>();  // UTF-8
      else
        throw_error(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                    what + ": element " + std::to_string(i) + " is " + text(py::type::of(item)) + ", not str or bytes");
    }
    return std::move(t).value();
  }
  py::object want = numpy_dtype(tools::to_api_dtype(dtype));
  if (want.is_none())
    throw_error(KILN_ERROR_FEATURE_UNSUPPORTED,
                what + " is " + std::string(dtype_name(dtype)) + ", which has no NumPy dtype to carry it");
  if (!a.dtype().equal(py::reinterpret_borrow<py::dtype>(want)))
    throw_error(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                what + ": expected dtype " + text(want) + " (" + tensor_type(dtype) + "), got " + text(a.dtype()));
  a = py::array::ensure(a, py::array::c_style);
  auto t = Tensor::allocate(dtype, dims, TensorInit::kUninitialized);
  if (!t.ok()) throw_status(t.status());
  if (t->size_bytes() > 0) std::memcpy(t->raw_data(), a.data(), t->size_bytes());
  return std::move(t).value();
}

// The feed's value for graph input `v`.
RuntimeValue to_value(py::handle obj, const ir::Value& v) {
  const ir::TensorType& type = v.type();
  std::string what = "input '" + v.name() + "' (" + value_type(type) + ")";
  if (obj.is_none()) {
    if (is_optional(type)) return RuntimeValue();
    throw_error(KILN_ERROR_INVALID_PARAM, what + " is None; only optional inputs may be");
  }
  if (!is_sequence(type)) return to_tensor(obj, type.dtype, type.shape, what);
  if (!py::isinstance<py::list>(obj) && !py::isinstance<py::tuple>(obj))
    throw_error(KILN_ERROR_INVALID_PARAM, what + ": expected a list of numpy arrays, got " + text(py::type::of(obj)));
  std::vector<Tensor> items;
  size_t k = 0;
  for (py::handle item : obj)
    items.push_back(to_tensor(item, type.dtype, type.shape, what + " item " + std::to_string(k++)));
  return RuntimeValue::sequence(type.dtype, std::move(items));
}

py::object to_python(const Tensor& t, const std::string& what) {
  if (t.dtype() == DataType::kString) {
    py::list items;
    const std::string* s = t.data<std::string>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      PyObject* u = PyUnicode_DecodeUTF8(s[i].data(), static_cast<Py_ssize_t>(s[i].size()), "strict");
      if (!u) {  // not UTF-8: the bytes as they are
        PyErr_Clear();
        items.append(py::bytes(s[i]));
      } else {
        items.append(py::reinterpret_steal<py::object>(u));
      }
    }
    py::object out = py::module_::import("numpy").attr("array")(items, py::dtype("O"));
    return out.attr("reshape")(t.dims());
  }
  py::object dt = numpy_dtype(tools::to_api_dtype(t.dtype()));
  if (dt.is_none())
    throw_error(KILN_ERROR_FEATURE_UNSUPPORTED,
                what + " is " + std::string(dtype_name(t.dtype())) + ", which has no NumPy dtype to carry it");
  py::array out(py::reinterpret_borrow<py::dtype>(dt), t.dims());
  if (t.size_bytes() > 0) std::memcpy(out.mutable_data(), t.raw_data(), t.size_bytes());
  return out;
}

py::object to_python(const RuntimeValue& v, const std::string& what) {
  if (v.is_none()) return py::none();
  if (v.is_tensor()) return to_python(v.tensor(), what);
  py::list items;
  size_t k = 0;
  for (const Tensor& t : v.items()) items.append(to_python(t, what + " item " + std::to_string(k++)));
  return items;
}

std::string names(const std::vector<const ir::Value*>& values) {
  std::string s;
  for (const ir::Value* v : values) s += (s.empty() ? "'" : ", '") + v->name() + "'";
  return s;
}

}  // namespace

bool ValueSession::needed(const ir::Graph& graph) {
  for (const ir::Value* v : graph.inputs())
    if (!v->has_initializer() && needs_values(*v)) return true;
  for (const ir::Value* v : graph.outputs())
    if (needs_values(*v)) return true;
  return false;
}

ValueSession::ValueSession(std::shared_ptr<const ir::Graph> graph, std::string path)
    : path_(std::move(path)), graph_(std::move(graph)) {
  for (const ir::Value* v : graph_->inputs())
    if (!v->has_initializer()) inputs_.push_back(v);
  Expected<std::unique_ptr<rt::GraphExecutor>> executor = [&] {
    py::gil_scoped_release unlocked;
    return rt::GraphExecutor::create(graph_);
  }();
  if (!executor.ok()) throw_status(executor.status());
  executor_ = std::move(executor).value();
}

std::vector<NodeArg> ValueSession::inputs() const {
  std::vector<NodeArg> out;
  for (const ir::Value* v : inputs_) out.push_back(node_arg(*v));
  return out;
}

std::vector<NodeArg> ValueSession::outputs() const {
  std::vector<NodeArg> out;
  for (const ir::Value* v : graph_->outputs()) out.push_back(node_arg(*v));
  return out;
}

py::list ValueSession::run(py::object output_names, py::dict feed) {
  const std::vector<ir::Value*>& graph_outputs = graph_->outputs();
  std::vector<size_t> wanted;
  if (output_names.is_none()) {
    for (size_t i = 0; i < graph_outputs.size(); ++i) wanted.push_back(i);
  } else {
    for (py::handle h : output_names) {
      std::string name = py::cast<std::string>(h);
      size_t i = 0;
      while (i < graph_outputs.size() && graph_outputs[i]->name() != name) ++i;
      if (i == graph_outputs.size()) {
        std::vector<const ir::Value*> all(graph_outputs.begin(), graph_outputs.end());
        throw_error(KILN_ERROR_INVALID_PARAM, "'" + name + "' is not an output of " + path_ + "; its outputs: " + names(all));
      }
      wanted.push_back(i);
    }
  }
  for (auto item : feed) {
    std::string name = py::cast<std::string>(item.first);
    if (std::none_of(inputs_.begin(), inputs_.end(), [&](const ir::Value* v) { return v->name() == name; }))
      throw_error(KILN_ERROR_INVALID_PARAM, "'" + name + "' is not an input of " + path_ + "; its inputs: " + names(inputs_));
  }
  std::vector<rt::NamedValue> feeds;
  for (const ir::Value* v : inputs_) {
    py::str key(v->name());
    if (!feed.contains(key)) {
      if (is_optional(v->type())) {  // left out: an empty optional
        feeds.push_back({v->name(), RuntimeValue()});
        continue;
      }
      throw_error(KILN_ERROR_INVALID_PARAM,
                  "input '" + v->name() + "' (" + value_type(v->type()) + ") is missing from the feed");
    }
    feeds.push_back({v->name(), to_value(feed[key], *v)});
  }
  std::vector<RuntimeValue> results;
  Status status;
  bool was_closed = false;
  {
    py::gil_scoped_release unlocked;
    std::shared_lock lock(mutex_);
    was_closed = closed_;
    if (!was_closed) status = executor_->run(feeds, &results);
    feeds.clear();  // the tensors go without the GIL: no Python object is involved
  }
  if (was_closed) throw_error(KILN_ERROR_INVALID_RESOURCE_HANDLE, "the session of " + path_ + " is closed");
  if (!status.ok()) throw_status(status);
  py::list out;
  for (size_t i : wanted) out.append(to_python(results[i], "output '" + graph_outputs[i]->name() + "'"));
  return out;
}

void ValueSession::close() {
  py::gil_scoped_release unlocked;
  std::unique_lock lock(mutex_);  // waits for runs in progress
  closed_ = true;
  executor_.reset();
}

bool ValueSession::closed() {
  std::shared_lock lock(mutex_);
  return closed_;
}

}  // namespace kiln::python
