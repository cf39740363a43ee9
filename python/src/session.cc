// kiln.InferenceSession: ONNX Runtime's InferenceSession over the public C API
// (include/kiln/kiln.h), as a user program drives it: one context per session, the model
// loaded from a .kiln file or from an .onnx compiled in memory (tools/api_session.h).
//
// Memory: the runtime takes device memory only (DESIGN.md: device and host memory are
// distinct domains). An input array of 16 KiB or more that is C-contiguous and of the
// model's dtype is mapped into the device's address space for the run (kilnrtHostRegister,
// as AscendCL's aclrtHostRegister): the model reads it where NumPy keeps it, no copy. A
// smaller one costs one kilnrtMemcpy host -> device, cheaper than the mapping.
// Outputs are written by the model into kilnrtMalloc'ed buffers that the returned arrays
// own (freed with kilnrtFree when the array dies): no copy, since the CPU device's memory
// is addressable by the host.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "compiler/pass_manager.h"
#include "python/src/binders.h"
#include "python/src/errors.h"
#include "python/src/node_arg.h"
#include "python/src/value_session.h"
#include "model/kiln_model.h"
#include "python/src/runtime_init.h"
#include "tools/api_session.h"
#include "tools/inspect_report.h"
#include "tools/shape_options.h"

namespace kiln::python {

// ONNX Runtime's type string of a model input/output ("tensor(float)").
std::string ort_type(kilnDataType t) {
  switch (t) {
    case KILN_FLOAT: return "tensor(float)";
    case KILN_FLOAT16: return "tensor(float16)";
    case KILN_BF16: return "tensor(bfloat16)";
    case KILN_DOUBLE: return "tensor(double)";
    case KILN_INT8: return "tensor(int8)";
    case KILN_INT16: return "tensor(int16)";
    case KILN_INT32: return "tensor(int32)";
    case KILN_INT64: return "tensor(int64)";
    case KILN_UINT8: return "tensor(uint8)";
    case KILN_UINT16: return "tensor(uint16)";
    case KILN_UINT32: return "tensor(uint32)";
    case KILN_UINT64: return "tensor(uint64)";
    case KILN_BOOL: return "tensor(bool)";
    case KILN_STRING: return "tensor(string)";
    case KILN_COMPLEX64: return "tensor(complex64)";
    case KILN_COMPLEX128: return "tensor(complex128)";
    default: return "tensor(undefined)";
  }
}

// The NumPy dtype carrying a Kiln type; bfloat16 travels as its raw bits in uint16 (NumPy
// has no bfloat16). None for strings and undefined types.
py::object numpy_dtype(kilnDataType t) {
  const char* name = nullptr;
  switch (t) {
    case KILN_FLOAT: name = "float32"; break;
    case KILN_FLOAT16: name = "float16"; break;
    case KILN_BF16: name = "uint16"; break;
    case KILN_DOUBLE: name = "float64"; break;
    case KILN_INT8: name = "int8"; break;
    case KILN_INT16: name = "int16"; break;
    case KILN_INT32: name = "int32"; break;
    case KILN_INT64: name = "int64"; break;
    case KILN_UINT8: name = "uint8"; break;
    case KILN_UINT16: name = "uint16"; break;
    case KILN_UINT32: name = "uint32"; break;
    case KILN_UINT64: name = "uint64"; break;
    case KILN_BOOL: name = "bool"; break;
    case KILN_COMPLEX64: name = "complex64"; break;
    case KILN_COMPLEX128: name = "complex128"; break;
    default: return py::none();
  }
  return py::dtype(name);
}

namespace {

using tools::TensorSpec;

// One model input/output with what a run needs to check and size it.
struct Io {
  TensorSpec spec;
  py::str key;  // spec.name, for feed lookups
  py::dtype dtype{"float32"};
  bool numeric = true;
  size_t item_bytes = 0;
};

// Releases the C API objects of one run.
struct RunResources {
  kilnmdlDataset* inputs = nullptr;
  kilnmdlDataset* outputs = nullptr;
  std::vector<kilnDataBuffer*> buffers;
  std::vector<kilnTensorDesc*> descs;
  std::vector<void*> memory;  // device buffers not (yet) owned by an output array
  ~RunResources() {
    if (inputs) kilnmdlDestroyDataset(inputs);
    if (outputs) kilnmdlDestroyDataset(outputs);
    for (kilnDataBuffer* b : buffers) kilnDestroyDataBuffer(b);
    for (kilnTensorDesc* d : descs) kilnDestroyTensorDesc(d);
    for (void* p : memory)
      if (p) kilnrtFree(p);
  }
};

// Input arrays mapped into the device's address space for one run (kilnrtHostRegister), so
// that the model reads them where NumPy keeps them; unregistered when the run ends.
class InputMappings {
 public:
  InputMappings() = default;
  InputMappings(const InputMappings&) = delete;
  InputMappings& operator=(const InputMappings&) = delete;
  ~InputMappings() {
    for (void* p : mapped_) kilnrtHostUnregister(p);
  }
  // The device address of `a`'s elements, or null when it is not mapped: small (a copy of
  // under kMinBytes costs less than the registration's two registry updates), or its memory
  // is the runtime's already (an output array of an earlier run) or mapped by another run in
  // progress (the same array fed from two threads). The caller then copies.
  static constexpr py::ssize_t kMinBytes = 16 << 10;
  void* map(const py::array& a) {
    if (a.nbytes() < kMinBytes) return nullptr;
    void* host = const_cast<void*>(a.data());  // the model only reads its inputs
    void* device = nullptr;
    if (kilnrtHostRegister(host, static_cast<uint64_t>(a.nbytes()), KILN_HOST_REGISTER_MAPPED, &device) != KILN_SUCCESS)
      return nullptr;
    mapped_.push_back(host);
    return device;
  }

 private:
  std::vector<void*> mapped_;
};

// The datasets of one run of a model whose inputs and outputs all have fixed sizes, kept
// for the next run: input device buffers the inputs are copied into, and output data
// buffers pointed (kilnUpdateDataBuffer) at each run's fresh output memory.
struct Slot {
  RunResources r;
  std::vector<kilnDataBuffer*> output_buffers;
};

// Makes `context` current on the calling thread for a scope, restoring the previous one.
class ContextScope {
 public:
  explicit ContextScope(kilnrtContext context) {
    if (kilnrtGetCurrentContext(&previous_) != KILN_SUCCESS) previous_ = nullptr;
    if (previous_ != context) kilnrtSetCurrentContext(context);
    set_ = previous_ != context;
  }
  ~ContextScope() {
    if (set_ && previous_) kilnrtSetCurrentContext(previous_);
  }

 private:
  kilnrtContext previous_ = nullptr;
  bool set_ = false;
};

std::string text(py::handle h) { return py::str(h).cast<std::string>(); }

std::string dims_text(const std::vector<int64_t>& dims) { return tools::dims_string(dims); }

std::string shape_text(const py::array& a) {
  std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
  return tools::dims_string(dims);
}

class Session {
 public:
  Session(const std::string& path, std::optional<int> threads, int device, py::object input_shapes,
          std::optional<std::string> precision)
      : path_(path) {
    compiler::CompileOptions options;
    if (!input_shapes.is_none()) options.input_shapes = to_shapes(input_shapes, "input_shapes");
    if (precision) {
      auto p = compiler::precision_from_name(*precision);
      if (!p) throw_error(KILN_ERROR_INVALID_PARAM, "precision='" + *precision + "': expected 'fp32', 'bf16' or 'mixed'");
      options.passes.precision = *p;
    }
    ensure_runtime(threads.value_or(0));
    {
      py::gil_scoped_release unlocked;
      auto source = tools::read_model_source(path, options);
      if (!source.ok()) {
        py::gil_scoped_acquire locked;
        throw_status(source.status());
      }
      if (!source->from_onnx && (!options.input_shapes.empty() || precision)) {
        py::gil_scoped_acquire locked;
        throw_error(KILN_ERROR_INVALID_PARAM, path + " is a .kiln model, compiled with its shapes and precision: "
                                                     "input_shapes and precision apply to an .onnx model");
      }
      kilnrtContext previous = nullptr;
      if (kilnrtGetCurrentContext(&previous) != KILN_SUCCESS) previous = nullptr;
      kilnError e = kilnrtCreateContext(&context_, device);
      if (e != KILN_SUCCESS) {
        py::gil_scoped_acquire locked;
        throw_api_error(e, "kilnrtCreateContext");
      }
      auto model = tools::load_model(*source);
      if (previous) kilnrtSetCurrentContext(previous);
      if (!model.ok()) {
        kilnrtDestroyContext(context_);
        context_ = nullptr;
        // Strings, sequences or optionals, which the C API does not carry: the graph
        // executor runs the model (value_session.h).
        std::shared_ptr<ir::Graph> graph = value_graph(*source);
        py::gil_scoped_acquire locked;
        if (!graph) throw_status(model.status());
        values_ = std::make_unique<ValueSession>(std::move(graph), path);
        return;
      }
      model_ = std::move(model).value();
    }
    device_ = device;
    for (const TensorSpec& s : model_->inputs()) inputs_.push_back(make_io(s));
    for (const TensorSpec& s : model_->outputs()) outputs_.push_back(make_io(s));
    all_fixed_ = std::all_of(inputs_.begin(), inputs_.end(), [](const Io& io) { return io.spec.is_fixed(); }) &&
                 std::all_of(outputs_.begin(), outputs_.end(), [](const Io& io) { return io.spec.is_fixed(); });
    output_guess_ = std::make_unique<std::atomic<size_t>[]>(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) output_guess_[i] = 0;
  }

  ~Session() {
    py::gil_scoped_release unlocked;
    release();
  }

  std::vector<NodeArg> get_inputs() { return values_ ? values_->inputs() : node_args(inputs_, true); }
  std::vector<NodeArg> get_outputs() { return values_ ? values_->outputs() : node_args(outputs_, false); }

  py::list run(py::object output_names, py::dict feed) {
    if (values_) return values_->run(std::move(output_names), std::move(feed));
    // Which outputs to return, as indices.
    std::vector<size_t> wanted;
    if (output_names.is_none()) {
      for (size_t i = 0; i < outputs_.size(); ++i) wanted.push_back(i);
    } else {
      for (py::handle h : output_names) {
        std::string name = py::cast<std::string>(h);
        size_t i = find(outputs_, name);
        if (i == outputs_.size())
          throw_error(KILN_ERROR_INVALID_PARAM, "'" + name + "' is not an output of " + path_ + "; its outputs: " +
                                                    names(outputs_));
        wanted.push_back(i);
      }
    }
    // The input arrays, checked and kept alive for the run.
    std::vector<py::array> arrays;
    arrays.reserve(inputs_.size());
    for (const Io& io : inputs_) {
      PyObject* value = PyDict_GetItemWithError(feed.ptr(), io.key.ptr());
      if (!value && PyErr_Occurred()) throw py::error_already_set();
      if (!value)
        throw_error(KILN_ERROR_INVALID_PARAM, "input '" + io.spec.name + "' (" + ort_type(io.spec.api_dtype) +
                                                  dims_text(io.spec.dims) + ") is missing from the feed");
      arrays.push_back(check_input(io, py::reinterpret_borrow<py::object>(value)));
    }
    if (static_cast<size_t>(PyDict_Size(feed.ptr())) != inputs_.size()) {
      for (auto item : feed) {
        std::string name = py::cast<std::string>(item.first);
        if (find(inputs_, name) == inputs_.size())
          throw_error(KILN_ERROR_INVALID_PARAM,
                      "'" + name + "' is not an input of " + path_ + "; its inputs: " + names(inputs_));
      }
    }

    std::vector<std::vector<int64_t>> out_dims(outputs_.size());
    std::vector<void*> out_memory(outputs_.size(), nullptr);
    std::string error;
    kilnError code = KILN_SUCCESS;
    {
      py::gil_scoped_release unlocked;
      std::shared_lock lock(mutex_);
      if (closed_) {
        code = KILN_ERROR_INVALID_RESOURCE_HANDLE;
        error = "the session of " + path_ + " is closed";
      } else {
        code = execute(arrays, out_dims, out_memory, &error);
      }
    }
    if (code != KILN_SUCCESS) {
      for (void* p : out_memory)
        if (p) kilnrtFree(p);
      throw_error(code, error);
    }
    // Each array owns its device buffer; the buffers of outputs not asked for are freed
    // with their capsules at the end of this scope.
    std::vector<py::capsule> owners;
    for (void* p : out_memory) owners.emplace_back(p, [](void* q) { kilnrtFree(q); });
    py::list result;
    for (size_t i : wanted) {
      if (!outputs_[i].numeric)
        throw_error(KILN_ERROR_FEATURE_UNSUPPORTED, "output '" + outputs_[i].spec.name + "' is " +
                                                        ort_type(outputs_[i].spec.api_dtype) +
                                                        ": only numeric tensors are supported");
      result.append(py::array(outputs_[i].dtype, out_dims[i], out_memory[i], owners[i]));
    }
    return result;
  }

  void close() {
    if (values_) return values_->close();
    py::gil_scoped_release unlocked;
    release();
  }

  bool closed() {
    if (values_) return values_->closed();
    std::shared_lock lock(mutex_);
    return closed_;
  }

  const std::string& path() const { return path_; }

 private:
  // The graph of `source` when its inputs or outputs need the value path, else null.
  static std::shared_ptr<ir::Graph> value_graph(const tools::ModelSource& source) {
    auto loaded = source.from_onnx ? model::load_model_from_memory(source.kiln_bytes.data(), source.kiln_bytes.size())
                                   : model::load_model(source.path);
    if (!loaded.ok() || !ValueSession::needed(*loaded->graph)) return nullptr;
    return loaded->graph;
  }

  static size_t find(const std::vector<Io>& ios, const std::string& name) {
    for (size_t i = 0; i < ios.size(); ++i)
      if (ios[i].spec.name == name) return i;
    return ios.size();
  }

  static std::string names(const std::vector<Io>& ios) {
    std::string s;
    for (const Io& io : ios) s += (s.empty() ? "'" : ", '") + io.spec.name + "'";
    return s;
  }

  static Io make_io(const TensorSpec& s) {
    Io io;
    io.spec = s;
    io.key = py::str(s.name);
    py::object dt = numpy_dtype(s.api_dtype);
    io.numeric = !dt.is_none();
    if (io.numeric) io.dtype = py::reinterpret_borrow<py::dtype>(dt);
    io.item_bytes = kilnDataTypeSize(s.api_dtype);
    return io;
  }

  static compiler::InputShapes to_shapes(py::object value, const char* what) {
    if (py::isinstance<py::str>(value)) {
      auto parsed = tools::parse_shape_list(py::cast<std::string>(value), what);
      if (!parsed.ok()) throw_status(parsed.status());
      return tools::to_input_shapes(*parsed);
    }
    compiler::InputShapes shapes;
    for (auto item : py::cast<py::dict>(value)) {
      std::vector<int64_t> dims;
      for (py::handle d : item.second) dims.push_back(d.is_none() ? -1 : py::cast<int64_t>(d));
      shapes[py::cast<std::string>(item.first)] = dims;
    }
    return shapes;
  }

  std::vector<NodeArg> node_args(const std::vector<Io>& ios, bool inputs) {
    // Open dims by their symbolic names when the model file has them.
    const nlohmann::json* described = nullptr;
    bool open = std::any_of(ios.begin(), ios.end(), [](const Io& io) { return !io.spec.is_fixed(); });
    if (open && !symbolic_loaded_) {
      symbolic_loaded_ = true;  // once; a concurrent caller meanwhile shows None for open dims
      nlohmann::json described_file;
      {
        py::gil_scoped_release unlocked;
        if (auto m = tools::inspect_model(path_); m.ok()) described_file = tools::inspect_json(path_, *m, false);
      }
      symbolic_ = std::move(described_file);
    }
    if (symbolic_.is_object()) described = &symbolic_[inputs ? "inputs" : "outputs"];
    std::vector<NodeArg> out;
    for (const Io& io : ios) {
      NodeArg a;
      a.name = io.spec.name;
      a.type = ort_type(io.spec.api_dtype);
      a.dtype = numpy_dtype(io.spec.api_dtype);
      a.unknown_rank = io.spec.unknown_rank;
      const nlohmann::json* file_dims = nullptr;
      if (described)
        for (const auto& v : *described)
          if (v.value("name", "") == io.spec.name && v["shape"].is_array() && v["shape"].size() == io.spec.dims.size())
            file_dims = &v["shape"];
      for (size_t k = 0; k < io.spec.dims.size(); ++k) {
        int64_t d = io.spec.dims[k];
        if (d >= 0)
          a.shape.append(d);
        else if (file_dims && (*file_dims)[k].is_string() && !(*file_dims)[k].get<std::string>().empty() &&
                 (*file_dims)[k].get<std::string>() != "?")
          a.shape.append((*file_dims)[k].get<std::string>());
        else
          a.shape.append(py::none());
      }
      out.push_back(std::move(a));
    }
    return out;
  }

  // The array a run reads for input `io`: `value` itself when it is a C-contiguous array of
  // the model's dtype, else a C-contiguous copy; errors name the input and what differs.
  py::array check_input(const Io& io, py::object value) {
    const std::string& name = io.spec.name;
    if (!io.numeric)
      throw_error(KILN_ERROR_FEATURE_UNSUPPORTED,
                  "input '" + name + "' is " + ort_type(io.spec.api_dtype) + ": only numeric tensors are supported");
    if (!py::isinstance<py::array>(value))
      throw_error(KILN_ERROR_INVALID_PARAM, "input '" + name + "': expected a numpy.ndarray of " +
                                                text(io.dtype) + ", got " +
                                                text(py::type::of(value)));
    py::array a = py::reinterpret_borrow<py::array>(value);
    if (!a.dtype().is(io.dtype) && !a.dtype().equal(io.dtype))
      throw_error(KILN_ERROR_MODEL_INPUT_NOT_MATCH, "input '" + name + "': expected dtype " +
                                                        text(io.dtype) + " (" +
                                                        ort_type(io.spec.api_dtype) + "), got " +
                                                        text(a.dtype()));
    if (!io.spec.unknown_rank) {
      bool fits = static_cast<size_t>(a.ndim()) == io.spec.dims.size();
      for (size_t k = 0; fits && k < io.spec.dims.size(); ++k)
        fits = io.spec.dims[k] < 0 || io.spec.dims[k] == a.shape(k);
      if (!fits)
        throw_error(KILN_ERROR_MODEL_INPUT_NOT_MATCH, "input '" + name + "': expected shape " +
                                                          dims_text(io.spec.dims) + ", got " + shape_text(a));
    }
    if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style);
    return a;
  }

  // Executes with the GIL released and the session's lock shared. On success out_memory
  // holds each output's device buffer (the caller owns them) and out_dims its shape.
  kilnError execute(const std::vector<py::array>& arrays, std::vector<std::vector<int64_t>>& out_dims,
                    std::vector<void*>& out_memory, std::string* error) {
    ContextScope scope(context_);
    if (all_fixed_) return execute_fixed(arrays, out_dims, out_memory, error);
    RunResources r;
    r.inputs = kilnmdlCreateDataset();
    r.outputs = kilnmdlCreateDataset();
    auto fail = [&](kilnError code, const char* call) {
      const char* msg = kilnGetRecentErrMsg();
      *error = msg && *msg ? msg : std::string(call) + " failed with error " + std::to_string(code);
      return code;
    };
    if (!r.inputs || !r.outputs) return fail(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDataset");
    auto add = [&](kilnmdlDataset* set, void* p, size_t bytes) -> kilnError {
      kilnDataBuffer* b = kilnCreateDataBuffer(p, bytes);
      if (!b) return KILN_ERROR_BAD_ALLOC;
      r.buffers.push_back(b);
      return kilnmdlAddDatasetBuffer(set, b);
    };
    size_t input_bytes = 0;
    InputMappings mapped;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const py::array& a = arrays[i];
      size_t bytes = static_cast<size_t>(a.nbytes());
      input_bytes += bytes;
      void* p = mapped.map(a);
      if (!p) {
        // KILN_MEMCPY_DEFAULT: the array may be device memory at this moment (mapped by
        // another thread's run, or an output array of an earlier run).
        if (kilnError e = kilnrtMalloc(&p, std::max<size_t>(bytes, 1), KILN_MEM_MALLOC_NORMAL_ONLY)) return fail(e, "kilnrtMalloc");
        r.memory.push_back(p);
        if (bytes > 0)
          if (kilnError e = kilnrtMemcpy(p, bytes, a.data(), bytes, KILN_MEMCPY_DEFAULT)) return fail(e, "kilnrtMemcpy");
      }
      if (kilnError e = add(r.inputs, p, bytes)) return fail(e, "kilnmdlAddDatasetBuffer");
      if (!inputs_[i].spec.is_fixed()) {
        std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
        kilnTensorDesc* d = kilnCreateTensorDesc(inputs_[i].spec.api_dtype, static_cast<int>(dims.size()), dims.data(),
                                                 KILN_FORMAT_ND);
        if (!d) return fail(KILN_ERROR_INVALID_PARAM, "kilnCreateTensorDesc");
        r.descs.push_back(d);
        if (kilnError e = kilnmdlSetDatasetTensorDesc(r.inputs, d, i)) return fail(e, "kilnmdlSetDatasetTensorDesc");
      }
    }
    // Output buffers: the description's size, or for open dims the size that fitted last
    // (first guess 4x the inputs, at least 64 KiB), grown 16x while the runtime refuses it.
    std::vector<size_t> sizes(outputs_.size());
    bool open = false;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const TensorSpec& s = outputs_[i].spec;
      if (s.bytes_known()) {
        sizes[i] = s.bytes;
      } else {
        open = true;
        size_t last = output_guess_[i].load(std::memory_order_relaxed);
        sizes[i] = last ? last : std::max<size_t>(size_t{64} << 10, 4 * input_bytes);
      }
    }
    for (int attempt = 0;; ++attempt) {
      kilnmdlDataset* outs = kilnmdlCreateDataset();
      if (!outs) return fail(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDataset");
      if (r.outputs) kilnmdlDestroyDataset(r.outputs);
      r.outputs = outs;
      for (size_t i = 0; i < outputs_.size(); ++i) {
        if (out_memory[i]) kilnrtFree(out_memory[i]);
        out_memory[i] = nullptr;
        if (kilnError e = kilnrtMalloc(&out_memory[i], std::max<size_t>(sizes[i], 1), KILN_MEM_MALLOC_NORMAL_ONLY))
          return fail(e, "kilnrtMalloc");
        if (kilnError e = add(r.outputs, out_memory[i], sizes[i])) return fail(e, "kilnmdlAddDatasetBuffer");
      }
      kilnError e = kilnmdlExecute(model_->id(), r.inputs, r.outputs);
      if (e == KILN_SUCCESS) break;
      if (e != KILN_ERROR_MODEL_OUTPUT_NOT_MATCH || !open || attempt >= 4) return fail(e, "kilnmdlExecute");
      for (size_t i = 0; i < outputs_.size(); ++i)
        if (!outputs_[i].spec.bytes_known()) sizes[i] *= 16;
    }
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const TensorSpec& s = outputs_[i].spec;
      out_dims[i] = s.dims;
      if (const kilnTensorDesc* d = kilnmdlGetDatasetTensorDesc(r.outputs, i)) {
        out_dims[i].assign(kilnGetTensorDescNumDims(d), 0);
        for (size_t k = 0; k < out_dims[i].size(); ++k) kilnGetTensorDescDimV2(d, k, &out_dims[i][k]);
        if (!s.bytes_known()) output_guess_[i].store(std::max<size_t>(kilnGetTensorDescSize(d), 1), std::memory_order_relaxed);
      }
    }
    return KILN_SUCCESS;
  }

  // execute() for a model whose inputs and outputs all have fixed sizes: the datasets and
  // input buffers come from the session's pool, so a run allocates only its outputs.
  kilnError execute_fixed(const std::vector<py::array>& arrays, std::vector<std::vector<int64_t>>& out_dims,
                          std::vector<void*>& out_memory, std::string* error) {
    auto fail = [&](kilnError code, const char* call) {
      const char* msg = kilnGetRecentErrMsg();
      *error = msg && *msg ? msg : std::string(call) + " failed with error " + std::to_string(code);
      return code;
    };
    std::unique_ptr<Slot> slot;
    {
      std::lock_guard lock(pool_mutex_);
      if (!pool_.empty()) {
        slot = std::move(pool_.back());
        pool_.pop_back();
      }
    }
    if (!slot) {
      slot = std::make_unique<Slot>();
      RunResources& r = slot->r;
      r.inputs = kilnmdlCreateDataset();
      r.outputs = kilnmdlCreateDataset();
      if (!r.inputs || !r.outputs) return fail(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDataset");
      for (const Io& io : inputs_) {
        void* p = nullptr;
        if (kilnError e = kilnrtMalloc(&p, std::max<size_t>(io.spec.bytes, 1), KILN_MEM_MALLOC_NORMAL_ONLY))
          return fail(e, "kilnrtMalloc");
        r.memory.push_back(p);
        kilnDataBuffer* b = kilnCreateDataBuffer(p, io.spec.bytes);
        if (!b) return fail(KILN_ERROR_BAD_ALLOC, "kilnCreateDataBuffer");
        r.buffers.push_back(b);
        if (kilnError e = kilnmdlAddDatasetBuffer(r.inputs, b)) return fail(e, "kilnmdlAddDatasetBuffer");
      }
      for (size_t i = 0; i < outputs_.size(); ++i) {
        kilnDataBuffer* b = kilnCreateDataBuffer(nullptr, 0);
        if (!b) return fail(KILN_ERROR_BAD_ALLOC, "kilnCreateDataBuffer");
        r.buffers.push_back(b);
        slot->output_buffers.push_back(b);
        if (kilnError e = kilnmdlAddDatasetBuffer(r.outputs, b)) return fail(e, "kilnmdlAddDatasetBuffer");
      }
    }
    // Each input buffer points at the array itself, mapped, or at the slot's device copy.
    InputMappings mapped;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      size_t bytes = inputs_[i].spec.bytes;
      void* p = mapped.map(arrays[i]);
      if (!p) {
        p = slot->r.memory[i];
        if (bytes > 0)
          if (kilnError e = kilnrtMemcpy(p, bytes, arrays[i].data(), bytes, KILN_MEMCPY_DEFAULT))
            return fail(e, "kilnrtMemcpy");
      }
      if (kilnError e = kilnUpdateDataBuffer(slot->r.buffers[i], p, bytes)) return fail(e, "kilnUpdateDataBuffer");
    }
    for (size_t i = 0; i < outputs_.size(); ++i) {
      size_t bytes = outputs_[i].spec.bytes;
      if (kilnError e = kilnrtMalloc(&out_memory[i], std::max<size_t>(bytes, 1), KILN_MEM_MALLOC_NORMAL_ONLY))
        return fail(e, "kilnrtMalloc");
      if (kilnError e = kilnUpdateDataBuffer(slot->output_buffers[i], out_memory[i], bytes))
        return fail(e, "kilnUpdateDataBuffer");
      out_dims[i] = outputs_[i].spec.dims;
    }
    if (kilnError e = kilnmdlExecute(model_->id(), slot->r.inputs, slot->r.outputs)) return fail(e, "kilnmdlExecute");
    std::lock_guard lock(pool_mutex_);
    pool_.push_back(std::move(slot));
    return KILN_SUCCESS;
  }

  void release() {
    std::unique_lock lock(mutex_);  // waits for runs in progress
    if (closed_) return;
    closed_ = true;
    pool_.clear();
    if (context_) {
      ContextScope scope(context_);
      model_.reset();
    }
    if (context_) kilnrtDestroyContext(context_);
    context_ = nullptr;
  }

  std::string path_;
  int device_ = 0;
  kilnrtContext context_ = nullptr;
  std::unique_ptr<tools::LoadedApiModel> model_;
  std::vector<Io> inputs_, outputs_;
  std::unique_ptr<std::atomic<size_t>[]> output_guess_;
  std::unique_ptr<ValueSession> values_;  // set for models of strings, sequences, optionals
  bool all_fixed_ = false;  // every input and output has a fixed size: execute_fixed
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<Slot>> pool_;  // datasets of finished runs (execute_fixed)
  std::shared_mutex mutex_;
  bool closed_ = false;
  bool symbolic_loaded_ = false;
  nlohmann::json symbolic_;
};

}  // namespace

void bind_session(py::module_& m) {
  py::class_<NodeArg>(m, "NodeArg", "An input or output of a model, as ONNX Runtime's NodeArg.")
      .def_readonly("name", &NodeArg::name, "The tensor's name in the model.")
      .def_property_readonly(
          "shape", [](const NodeArg& a) -> py::object { return a.unknown_rank ? py::object(py::none()) : py::object(a.shape); },
          "Dims as a list: ints, and for a dim not fixed its symbolic name (a str) or None; None when the rank is unknown.")
      .def_readonly("type", &NodeArg::type, "ONNX Runtime's type string, e.g. 'tensor(float)'.")
      .def_readonly("dtype", &NodeArg::dtype, "The numpy dtype of the tensor (uint16 for bfloat16 bits; None for strings).")
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name='" + a.name + "', type='" + a.type + "', shape=" +
               py::repr(a.unknown_rank ? py::object(py::none()) : py::object(a.shape)).cast<std::string>() + ")";
      });

  py::class_<Session>(m, "InferenceSession", R"doc(
A model loaded for inference, as onnxruntime.InferenceSession.

InferenceSession(path, threads=None, device=0, input_shapes=None, precision=None)

path: an .onnx model (compiled in memory with input_shapes and precision) or a .kiln
offline model (kiln compile). threads: intra-op threads per device (process-wide: the
first session or kiln.rt initialisation decides). device: the logical device (KILN_DEVICES=cpu:N
splits the cores into N). input_shapes: {"x": [1, 3, 224, 224]} or "x:1,3,224,224" fixes
open dims of an .onnx. precision: "fp32", "bf16" or "mixed".
)doc")
      .def(py::init<const std::string&, std::optional<int>, int, py::object, std::optional<std::string>>(),
           py::arg("path"), py::arg("threads") = py::none(), py::arg("device") = 0, py::arg("input_shapes") = py::none(),
           py::arg("precision") = py::none())
      .def("get_inputs", &Session::get_inputs, "The model's inputs (NodeArg), in order.")
      .def("get_outputs", &Session::get_outputs, "The model's outputs (NodeArg), in order.")
      .def("run", &Session::run, py::arg("output_names"), py::arg("input_feed"), R"doc(
Runs the model: run(output_names or None, {input name: numpy.ndarray}) -> [numpy.ndarray].

Each input must have the model's dtype and a shape fitting its dims; a C-contiguous array
is copied once into device memory (no other copy). Outputs are returned in the order of
output_names (all, in the model's order, for None) as arrays owning Kiln's buffers. The
GIL is released while the model runs: threads run concurrently on one session. Raises
kiln.Error naming the input, output or state at fault.

Strings, sequences and optionals as ONNX Runtime's Python API takes and gives them: a
tensor(string) is an array of str (dtype object), a sequence a list of arrays, an empty
optional None (or left out of the feed).
)doc")
      .def("close", &Session::close,
           "Unloads the model, after runs in progress finish; later calls raise kiln.Error. Idempotent.")
      .def_property_readonly("closed", &Session::closed, "Whether close() has been called.")
      .def_property_readonly("path", &Session::path, "The model file the session was created from.");
}

}  // namespace kiln::python
