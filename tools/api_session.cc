// The C API session helpers of `kiln run` and `kiln bench`.
#include "tools/api_session.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/npy.h"
#include "ir/value_bytes.h"
#include "tools/model_source.h"

namespace kiln::tools {

Status api_error(kilnError code, const char* call) {
  const char* msg = kilnGetRecentErrMsg();
  if (msg && *msg) return Status(StatusCode::kInvalidArgument, msg);
  // Name the function, not the whole call expression.
  std::string name(call);
  name = name.substr(0, name.find('('));
  return Status(StatusCode::kInternal, str_format("%s failed with error %d", name.c_str(), code));
}

DataType from_api_dtype(kilnDataType t) {
  switch (t) {
    case KILN_FLOAT: return DataType::kFloat32;
    case KILN_FLOAT16: return DataType::kFloat16;
    case KILN_INT8: return DataType::kInt8;
    case KILN_INT32: return DataType::kInt32;
    case KILN_UINT8: return DataType::kUInt8;
    case KILN_INT16: return DataType::kInt16;
    case KILN_UINT16: return DataType::kUInt16;
    case KILN_UINT32: return DataType::kUInt32;
    case KILN_INT64: return DataType::kInt64;
    case KILN_UINT64: return DataType::kUInt64;
    case KILN_DOUBLE: return DataType::kFloat64;
    case KILN_BOOL: return DataType::kBool;
    case KILN_STRING: return DataType::kString;
    case KILN_COMPLEX64: return DataType::kComplex64;
    case KILN_COMPLEX128: return DataType::kComplex128;
    case KILN_BF16: return DataType::kBFloat16;
    default: return DataType::kUndefined;
  }
}

kilnDataType to_api_dtype(DataType t) {
  switch (t) {
    case DataType::kFloat32: return KILN_FLOAT;
    case DataType::kFloat16: return KILN_FLOAT16;
    case DataType::kInt8: return KILN_INT8;
    case DataType::kInt32: return KILN_INT32;
    case DataType::kUInt8: return KILN_UINT8;
    case DataType::kInt16: return KILN_INT16;
    case DataType::kUInt16: return KILN_UINT16;
    case DataType::kUInt32: return KILN_UINT32;
    case DataType::kInt64: return KILN_INT64;
    case DataType::kUInt64: return KILN_UINT64;
    case DataType::kFloat64: return KILN_DOUBLE;
    case DataType::kBool: return KILN_BOOL;
    case DataType::kString: return KILN_STRING;
    case DataType::kComplex64: return KILN_COMPLEX64;
    case DataType::kComplex128: return KILN_COMPLEX128;
    case DataType::kBFloat16: return KILN_BF16;
    default: return KILN_DT_UNDEFINED;
  }
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i] < 0 ? "?" : std::to_string(dims[i]);
  }
  return s + "]";
}

// ---- Runtime, devices, streams, events, memory -------------------------------------------

namespace {

// A kilnInit config naming the device count, in a private temporary file.
Expected<std::string> write_device_config(int devices) {
  std::string path = (std::filesystem::temp_directory_path() / "kiln-devices-XXXXXX.json").string();
  int fd = mkstemps(path.data(), 5);
  if (fd < 0) return unavailable("cannot create a temporary device config %s", path.c_str());
  std::string text = str_format("{\"devices\": \"cpu:%d\"}\n", devices);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) {
    std::remove(path.c_str());
    return unavailable("cannot write the temporary device config %s", path.c_str());
  }
  return path;
}

// The thread count of each device as the runtime sets it: the cores this process may
// use, split evenly over the devices, capped by KILN_NUM_THREADS.
int device_threads(int devices) {
  int per_device = cores_per_device(devices);
  if (const char* cap = std::getenv("KILN_NUM_THREADS"); cap && std::atoi(cap) > 0)
    per_device = std::min(per_device, std::atoi(cap));
  return per_device;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

int cores_per_device(int devices) { return std::max(1, available_cores() / std::max(1, devices)); }

void cap_threads(int threads) {
  // The runtime gives each device its cores' worth of threads, capped by KILN_NUM_THREADS.
  if (threads > 0) setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
}

Expected<std::unique_ptr<Runtime>> Runtime::init(const RuntimeOptions& options) {
  cap_threads(options.threads);
  kilnError e;
  if (options.devices > 0) {
    KILN_ASSIGN_OR_RETURN(std::string config, write_device_config(options.devices));
    e = kilnInit(config.c_str());
    std::remove(config.c_str());
  } else {
    e = kilnInit(nullptr);
  }
  if (e != KILN_SUCCESS) return api_error(e, "kilnInit");
  std::unique_ptr<Runtime> rt(new Runtime());
  uint32_t count = 0;
  KILN_API_RETURN_IF_ERROR(kilnrtGetDeviceCount(&count));
  rt->device_count_ = static_cast<int>(count);
  if (options.devices > 0 && rt->device_count_ != options.devices)
    return internal_error("asked the runtime for %d devices, it has %d", options.devices, rt->device_count_);
  rt->threads_per_device_ = device_threads(rt->device_count_);
  return rt;
}

Runtime::~Runtime() { kilnFinalize(); }

Expected<std::unique_ptr<DeviceGuard>> DeviceGuard::set(int device) {
  KILN_API_RETURN_IF_ERROR(kilnrtSetDevice(device));
  std::unique_ptr<DeviceGuard> g(new DeviceGuard());
  g->id_ = device;
  KILN_API_RETURN_IF_ERROR(kilnrtGetCurrentContext(&g->context_));
  return g;
}

DeviceGuard::~DeviceGuard() {
  if (id_ >= 0) kilnrtResetDevice(id_);
}

Expected<std::unique_ptr<StreamHandle>> StreamHandle::create() {
  std::unique_ptr<StreamHandle> s(new StreamHandle());
  KILN_API_RETURN_IF_ERROR(kilnrtCreateStream(&s->stream_));
  return s;
}

StreamHandle::~StreamHandle() {
  if (stream_) kilnrtDestroyStream(stream_);
}

Expected<std::unique_ptr<EventHandle>> EventHandle::create() {
  std::unique_ptr<EventHandle> e(new EventHandle());
  KILN_API_RETURN_IF_ERROR(kilnrtCreateEvent(&e->event_));
  return e;
}

EventHandle::~EventHandle() {
  if (event_) kilnrtDestroyEvent(event_);
}

Expected<std::unique_ptr<DeviceBuffer>> DeviceBuffer::allocate(size_t bytes) {
  std::unique_ptr<DeviceBuffer> b(new DeviceBuffer());
  // Normal pages: for a model's inputs and outputs (a few MB) and comm-bench's messages huge
  // pages gained nothing measurable (2-rank AllReduce at 2 and 16 MiB within noise either
  // way); and on a 2-core VM whose kernel samples page accesses (DAMON) a huge-page input
  // buffer made whole executions 2-3x slower at times (PP-OCRv4 det at one thread: 50 ms or
  // 100-190, against a steady 52-54 on normal pages).
  KILN_API_RETURN_IF_ERROR(kilnrtMalloc(&b->data_, std::max<size_t>(bytes, 1), KILN_MEM_MALLOC_NORMAL_ONLY));
  b->size_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) kilnrtFree(data_);
}

// ---- Models ---------------------------------------------------------------------------------

bool TensorSpec::bytes_known() const {
  return !unknown_rank && std::none_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; });
}

namespace {

Expected<TensorSpec> describe_tensor(kilnmdlDesc* desc, size_t index, bool input) {
  TensorSpec spec;
  const char* name = input ? kilnmdlGetInputNameByIndex(desc, index) : kilnmdlGetOutputNameByIndex(desc, index);
  if (!name) return api_error(KILN_ERROR_FAILURE, input ? "kilnmdlGetInputNameByIndex" : "kilnmdlGetOutputNameByIndex");
  spec.name = name;
  kilnmdlIODims dims{};
  if (input) {
    KILN_API_RETURN_IF_ERROR(kilnmdlGetInputDims(desc, index, &dims));
  } else {
    KILN_API_RETURN_IF_ERROR(kilnmdlGetOutputDims(desc, index, &dims));
  }
  size_t count = std::min<size_t>(dims.dimCount, KILN_MAX_DIM_CNT);
  for (size_t i = 0; i < count; ++i) {
    // AscendCL marks a tensor of unknown rank with the single dim -2.
    if (dims.dims[i] == -2) spec.unknown_rank = true;
    spec.dims.push_back(dims.dims[i] < 0 ? -1 : dims.dims[i]);
  }
  if (spec.unknown_rank) spec.dims.clear();
  spec.api_dtype = input ? kilnmdlGetInputDataType(desc, index) : kilnmdlGetOutputDataType(desc, index);
  spec.dtype = from_api_dtype(spec.api_dtype);
  spec.bytes = input ? kilnmdlGetInputSizeByIndex(desc, index) : kilnmdlGetOutputSizeByIndex(desc, index);
  return spec;
}

}  // namespace

Status LoadedApiModel::describe() {
  desc_ = kilnmdlCreateDesc();
  if (!desc_) return api_error(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDesc");
  KILN_API_RETURN_IF_ERROR(kilnmdlGetDesc(desc_, id_));
  size_t n_in = kilnmdlGetNumInputs(desc_), n_out = kilnmdlGetNumOutputs(desc_);
  for (size_t i = 0; i < n_in; ++i) {
    KILN_ASSIGN_OR_RETURN(TensorSpec s, describe_tensor(desc_, i, true));
    inputs_.push_back(std::move(s));
  }
  for (size_t i = 0; i < n_out; ++i) {
    KILN_ASSIGN_OR_RETURN(TensorSpec s, describe_tensor(desc_, i, false));
    outputs_.push_back(std::move(s));
  }
  return ok_status();
}

Expected<std::unique_ptr<LoadedApiModel>> LoadedApiModel::load_file(const std::string& path) {
  std::unique_ptr<LoadedApiModel> m(new LoadedApiModel());
  KILN_API_RETURN_IF_ERROR(kilnmdlLoadFromFile(path.c_str(), &m->id_));
  m->loaded_ = true;
  KILN_RETURN_IF_ERROR(m->describe());
  return m;
}

Expected<std::unique_ptr<LoadedApiModel>> LoadedApiModel::load_memory(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<LoadedApiModel> m(new LoadedApiModel());
  KILN_API_RETURN_IF_ERROR(kilnmdlLoadFromMem(bytes.data(), bytes.size(), &m->id_));
  m->loaded_ = true;
  KILN_RETURN_IF_ERROR(m->describe());
  return m;
}

LoadedApiModel::~LoadedApiModel() {
  if (desc_) kilnmdlDestroyDesc(desc_);
  if (loaded_) kilnmdlUnload(id_);
}

Status LoadedApiModel::unload() {
  if (!loaded_) return ok_status();
  loaded_ = false;
  KILN_API_RETURN_IF_ERROR(kilnmdlUnload(id_));
  return ok_status();
}

Expected<ModelSource> read_model_source(const std::string& path, const compiler::CompileOptions& options) {
  ModelSource source;
  source.path = path;
  KILN_ASSIGN_OR_RETURN(ModelKind kind, sniff_model_kind(path));
  if (kind == ModelKind::kKiln) return source;
  // An ONNX file: compile it as `kiln compile` would (with the shapes of --input-shape, if
  // any), write the .kiln bytes to a private temporary file (the writer works on files) and
  // read them back.
  auto start = std::chrono::steady_clock::now();
  source.from_onnx = true;
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(path, options));
  std::string tmp = (std::filesystem::temp_directory_path() / "kiln-run-XXXXXX.kiln").string();
  int fd = mkstemps(tmp.data(), 5);
  if (fd < 0) return unavailable("cannot create a temporary file for the compiled %s", path.c_str());
  close(fd);
  Status written = compiler::write_compiled_model(compiled, tmp);
  if (written.ok()) {
    std::ifstream in(tmp, std::ios::binary);
    source.kiln_bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) written = unavailable("cannot read back the compiled model %s", tmp.c_str());
  }
  std::remove(tmp.c_str());
  KILN_RETURN_IF_ERROR(written, "compiling %s in memory", path.c_str());
  source.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return source;
}

Expected<compiler::InputShapes> first_bucket_shapes(const ModelSource& source, const LoadedApiModel& model) {
  bool open = std::any_of(model.inputs().begin(), model.inputs().end(), [](const TensorSpec& s) { return !s.is_fixed(); });
  if (source.from_onnx || !open) return compiler::InputShapes{};
  KILN_ASSIGN_OR_RETURN(model::LoadedModel loaded, model::load_model(source.path));
  if (loaded.bucket_kind == model::BucketKind::kNone || loaded.variants.empty()) return compiler::InputShapes{};
  return compiler::InputShapes(loaded.variants[0].shapes.begin(), loaded.variants[0].shapes.end());
}

Expected<std::unique_ptr<LoadedApiModel>> load_model(const ModelSource& source) {
  if (source.from_onnx) return LoadedApiModel::load_memory(source.kiln_bytes);
  return LoadedApiModel::load_file(source.path);
}

// ---- Host inputs ----------------------------------------------------------------------------

Tensor random_tensor(DataType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t = Tensor::make(dtype, dims);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    switch (dtype) {
      case DataType::kFloat32: t.data<float>()[i] = real(rng); break;
      case DataType::kFloat64: t.data<double>()[i] = real(rng); break;
      case DataType::kFloat16: t.data<uint16_t>()[i] = float_to_fp16(real(rng)); break;
      case DataType::kBFloat16: t.data<uint16_t>()[i] = float_to_bf16(real(rng)); break;
      case DataType::kBool: t.data<bool>()[i] = small(rng) % 2; break;
      default:
        dispatch_numeric(dtype, [&]<typename T>() { t.data<T>()[i] = static_cast<T>(small(rng)); });
    }
  }
  return t;
}

namespace {

std::string input_names(const LoadedApiModel& model) {
  std::string names;
  for (const TensorSpec& s : model.inputs()) names += (names.empty() ? "" : ", ") + s.name;
  return names.empty() ? "none" : names;
}

std::string spec_type(const TensorSpec& s) {
  std::string type = s.dtype == DataType::kUndefined ? str_format("data type %d", static_cast<int>(s.api_dtype))
                                                     : dtype_name(s.dtype);
  return type + (s.unknown_rank ? "[unknown rank]" : dims_string(s.dims));
}

Status check_given_input(const TensorSpec& spec, const Tensor& t) {
  if (spec.dtype == DataType::kUndefined)
    return unsupported("input '%s' has a type (%s) the C API cannot carry", spec.name.c_str(),
                       spec_type(spec).c_str());
  if (t.dtype() != spec.dtype)
    return invalid_argument("input '%s' has dtype %s, the model expects %s", spec.name.c_str(),
                            dtype_name(t.dtype()), dtype_name(spec.dtype));
  if (spec.unknown_rank) return ok_status();
  bool match = t.rank() == static_cast<int>(spec.dims.size());
  for (size_t i = 0; match && i < spec.dims.size(); ++i)
    match = spec.dims[i] < 0 || spec.dims[i] == t.dims()[i];
  if (!match)
    return invalid_argument("input '%s' has shape %s, the model expects %s", spec.name.c_str(),
                            dims_string(t.dims()).c_str(), dims_string(spec.dims).c_str());
  return ok_status();
}

// The shape random data for `s` takes: --input-shape's (checked against the model), else the
// first shape bucket's (with a note), else the model's own when every dim is fixed. Open dims
// with neither are an error naming the input and the option: never a silent 1.
Expected<std::vector<int64_t>> random_input_shape(const TensorSpec& s, const HostInputOptions& options,
                                                  std::vector<std::string>* notes) {
  auto given = options.shapes.find(s.name);
  if (given != options.shapes.end()) return given->second;
  auto bucket = options.bucket_shapes.find(s.name);
  if (!s.is_fixed() && bucket != options.bucket_shapes.end()) {
    notes->push_back(str_format("input '%s' is random, of the first shape bucket's shape %s", s.name.c_str(),
                                dims_to_string(bucket->second).c_str()));
    return bucket->second;
  }
  if (s.unknown_rank)
    return invalid_argument("input '%s' has unknown rank: give its shape with --input-shape %s:D1,D2,... or its "
                            "data with --input %s=FILE.npy",
                            s.name.c_str(), s.name.c_str(), s.name.c_str());
  std::string example;
  bool open = false;
  for (size_t k = 0; k < s.dims.size(); ++k) {
    open = open || s.dims[k] < 0;
    if (k) example += ',';
    example += s.dims[k] < 0 ? std::string("?") : std::to_string(s.dims[k]);
  }
  if (open)
    return invalid_argument("input '%s' has open dims %s: random data needs every size; give them with "
                            "--input-shape %s:%s (each ? a size) or the data with --input %s=FILE.npy",
                            s.name.c_str(), dims_string(s.dims).c_str(), s.name.c_str(), example.c_str(),
                            s.name.c_str());
  return s.dims;
}

// A random input larger than the device's memory is refused before it is allocated (the
// host would run out of memory filling it, or the device when it is copied in).
Status check_input_fits(const TensorSpec& s, const std::vector<int64_t>& dims) {
  const size_t bytes = ir::dims_bytes(s.dtype, dims);
  size_t free_bytes = 0, total_bytes = 0;
  if (kilnrtGetMemInfo(KILN_DDR_MEM, &free_bytes, &total_bytes) != KILN_SUCCESS || bytes <= total_bytes)
    return ok_status();
  return resource_exhausted("input '%s' of shape %s needs %s, more than the device's memory (%s): give a "
                            "smaller --input-shape",
                            s.name.c_str(), dims_string(dims).c_str(), ir::bytes_text(bytes).c_str(),
                            ir::bytes_text(total_bytes).c_str());
}

}  // namespace

Status check_input_shapes(const LoadedApiModel& model, const compiler::InputShapes& shapes) {
  for (const auto& [name, dims] : shapes) {
    auto it = std::find_if(model.inputs().begin(), model.inputs().end(),
                           [&](const TensorSpec& s) { return s.name == name; });
    if (it == model.inputs().end())
      return invalid_argument("--input-shape names '%s', but the model has no such input (inputs: %s)", name.c_str(),
                              input_names(model).c_str());
    if (it->unknown_rank) continue;
    bool match = dims.size() == it->dims.size();
    for (size_t k = 0; match && k < dims.size(); ++k) match = it->dims[k] < 0 || it->dims[k] == dims[k];
    if (!match)
      return invalid_argument("--input-shape gives input '%s' shape %s, the model takes %s (? is open)",
                              name.c_str(), dims_string(dims).c_str(), dims_string(it->dims).c_str());
  }
  return ok_status();
}

Expected<std::vector<Tensor>> make_host_inputs(const LoadedApiModel& model,
                                               const std::vector<std::string>& specs, unsigned seed,
                                               std::vector<std::string>* notes, const HostInputOptions& options) {
  const std::vector<TensorSpec>& inputs = model.inputs();
  KILN_RETURN_IF_ERROR(check_input_shapes(model, options.shapes));
  std::vector<Tensor> tensors(inputs.size());
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument("--input '%s' is not NAME=FILE.npy", spec.c_str());
    std::string name = spec.substr(0, eq);
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const TensorSpec& s) { return s.name == name; });
    if (it == inputs.end())
      return invalid_argument("the model has no input named '%s' (inputs: %s)", name.c_str(),
                              input_names(model).c_str());
    size_t index = static_cast<size_t>(it - inputs.begin());
    if (tensors[index].defined()) return invalid_argument("--input %s is given twice", name.c_str());
    KILN_ASSIGN_OR_RETURN(Tensor t, read_npy(spec.substr(eq + 1)), "--input %s", name.c_str());
    KILN_RETURN_IF_ERROR(check_given_input(*it, t));
    auto shape = options.shapes.find(name);
    if (shape != options.shapes.end() && shape->second != t.dims())
      return invalid_argument("input '%s' has shape %s, --input-shape gives %s", name.c_str(),
                              dims_string(t.dims()).c_str(), dims_string(shape->second).c_str());
    tensors[index] = std::move(t);
  }
  std::mt19937 rng(seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& s = inputs[i];
    if (tensors[i].defined()) continue;
    if (s.dtype == DataType::kString || s.dtype == DataType::kUndefined)
      return invalid_argument("input '%s' (%s) cannot be generated: give it with --input", s.name.c_str(),
                              spec_type(s).c_str());
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, random_input_shape(s, options, notes));
    KILN_RETURN_IF_ERROR(check_input_fits(s, dims));
    tensors[i] = random_tensor(s.dtype, dims, rng);
  }
  return tensors;
}

// ---- Device buffers and datasets ------------------------------------------------------------

Expected<std::unique_ptr<IoBuffers>> IoBuffers::create(const LoadedApiModel& model,
                                                       const std::vector<Tensor>& inputs,
                                                       const std::vector<size_t>& output_bytes) {
  std::unique_ptr<IoBuffers> io(new IoBuffers());
  io->inputs_ = kilnmdlCreateDataset();
  io->outputs_ = kilnmdlCreateDataset();
  if (!io->inputs_ || !io->outputs_) return api_error(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDataset");
  // Adds a buffer of `bytes` bytes to `dataset`; returns its device address.
  auto add_buffer = [&](kilnmdlDataset* dataset, size_t bytes) -> Expected<void*> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> mem, DeviceBuffer::allocate(bytes));
    kilnDataBuffer* db = kilnCreateDataBuffer(mem->data(), bytes);
    if (!db) return api_error(KILN_ERROR_BAD_ALLOC, "kilnCreateDataBuffer");
    io->data_buffers_.push_back(db);
    void* addr = mem->data();
    io->memory_.push_back(std::move(mem));
    KILN_API_RETURN_IF_ERROR(kilnmdlAddDatasetBuffer(dataset, db));
    return addr;
  };
  const std::vector<TensorSpec>& specs = model.inputs();
  if (inputs.size() != specs.size())
    return internal_error("%zu input tensors for a model with %zu inputs", inputs.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.dtype() == DataType::kString)
      return unsupported("input '%s' is a string tensor: device buffers carry numeric data only",
                         specs[i].name.c_str());
    size_t bytes = t.size_bytes();
    KILN_ASSIGN_OR_RETURN(void* dst, add_buffer(io->inputs_, bytes));
    if (bytes > 0)
      KILN_API_RETURN_IF_ERROR(kilnrtMemcpy(dst, bytes, t.raw_data(), bytes, KILN_MEMCPY_HOST_TO_DEVICE));
    if (!specs[i].is_fixed()) {
      kilnTensorDesc* desc = kilnCreateTensorDesc(specs[i].api_dtype, t.rank(), t.dims().data(), KILN_FORMAT_ND);
      if (!desc) return api_error(KILN_ERROR_INVALID_PARAM, "kilnCreateTensorDesc");
      io->descs_.push_back(desc);
      KILN_API_RETURN_IF_ERROR(kilnmdlSetDatasetTensorDesc(io->inputs_, desc, i));
    }
  }
  for (size_t i = 0; i < model.outputs().size(); ++i) {
    const TensorSpec& s = model.outputs()[i];
    size_t bytes = s.bytes_known() || i >= output_bytes.size() ? s.bytes : output_bytes[i];
    KILN_ASSIGN_OR_RETURN(void* unused, add_buffer(io->outputs_, bytes));
    (void)unused;
  }
  return io;
}

Expected<std::unique_ptr<IoBuffers>> IoBuffers::create_fitted(const LoadedApiModel& model,
                                                              const std::vector<Tensor>& inputs,
                                                              std::vector<size_t>* output_bytes) {
  const std::vector<TensorSpec>& outs = model.outputs();
  output_bytes->clear();
  for (const TensorSpec& s : outs) output_bytes->push_back(s.bytes);
  size_t open = static_cast<size_t>(std::count_if(outs.begin(), outs.end(), [](const TensorSpec& s) {
    return !s.bytes_known();
  }));
  if (open == 0) return create(model, inputs);
  // First guess: outputs of dynamic models are mostly of the order of their inputs.
  size_t input_bytes = 0;
  for (const Tensor& t : inputs) input_bytes += t.size_bytes();
  size_t guess = std::max<size_t>(size_t{1} << 20, 4 * input_bytes);
  size_t free_bytes = 0, total_bytes = 0;
  KILN_API_RETURN_IF_ERROR(kilnrtGetMemInfo(KILN_DDR_MEM, &free_bytes, &total_bytes));
  size_t limit = std::max<size_t>(guess, free_bytes / 2 / open);
  for (;;) {
    for (size_t i = 0; i < outs.size(); ++i)
      if (!outs[i].bytes_known()) (*output_bytes)[i] = guess;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<IoBuffers> io, create(model, inputs, *output_bytes));
    kilnError e = kilnmdlExecute(model.id(), io->inputs(), io->outputs());
    if (e == KILN_SUCCESS) {
      // Keep the buffers (they fit); report the sizes the outputs really took.
      for (size_t i = 0; i < outs.size(); ++i) {
        if (outs[i].bytes_known()) continue;
        const kilnTensorDesc* desc = kilnmdlGetDatasetTensorDesc(io->outputs(), i);
        if (desc) (*output_bytes)[i] = std::max<size_t>(kilnGetTensorDescSize(desc), 1);
      }
      return io;
    }
    if (e != KILN_ERROR_MODEL_OUTPUT_NOT_MATCH || guess >= limit) return api_error(e, "kilnmdlExecute");
    guess = std::min(limit, guess * 16);
  }
}

IoBuffers::~IoBuffers() {
  if (inputs_) kilnmdlDestroyDataset(inputs_);
  if (outputs_) kilnmdlDestroyDataset(outputs_);
  for (kilnDataBuffer* db : data_buffers_) kilnDestroyDataBuffer(db);
  for (kilnTensorDesc* d : descs_) kilnDestroyTensorDesc(d);
  // memory_ frees the device buffers.
}

Expected<std::vector<Tensor>> IoBuffers::read_outputs(const LoadedApiModel& model) const {
  std::vector<Tensor> out;
  for (size_t i = 0; i < model.outputs().size(); ++i) {
    const TensorSpec& spec = model.outputs()[i];
    DataType dtype = spec.dtype;
    std::vector<int64_t> dims = spec.dims;
    // The execution's actual shape (it differs from the description when dims are not fixed).
    if (const kilnTensorDesc* desc = kilnmdlGetDatasetTensorDesc(outputs_, i)) {
      dims.assign(kilnGetTensorDescNumDims(desc), 0);
      for (size_t k = 0; k < dims.size(); ++k)
        KILN_API_RETURN_IF_ERROR(kilnGetTensorDescDimV2(desc, k, &dims[k]));
      DataType actual = from_api_dtype(kilnGetTensorDescType(desc));
      if (actual != DataType::kUndefined) dtype = actual;
    } else if (!spec.is_fixed()) {
      return api_error(KILN_ERROR_FAILURE, "kilnmdlGetDatasetTensorDesc");
    }
    if (dtype == DataType::kUndefined || dtype == DataType::kString)
      return unsupported("output '%s' is %s: kiln run reports numeric tensor outputs only", spec.name.c_str(),
                         spec_type(spec).c_str());
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(dtype, dims), "output '%s'", spec.name.c_str());
    kilnDataBuffer* db = kilnmdlGetDatasetBuffer(outputs_, i);
    if (!db) return api_error(KILN_ERROR_FAILURE, "kilnmdlGetDatasetBuffer");
    size_t bytes = t.size_bytes();
    if (bytes > kilnGetDataBufferSizeV2(db))
      return internal_error("output '%s' (%s) is larger than its buffer (%zu bytes)", spec.name.c_str(),
                            t.description().c_str(), kilnGetDataBufferSizeV2(db));
    if (bytes > 0)
      KILN_API_RETURN_IF_ERROR(
          kilnrtMemcpy(t.raw_data(), bytes, kilnGetDataBufferAddr(db), bytes, KILN_MEMCPY_DEVICE_TO_HOST));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kiln::tools
