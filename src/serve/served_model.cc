// A repository model loaded on every device and its batched execution (served_model.h).
#include "serve/served_model.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "compiler/compiler.h"
#include "runtime/execution_cancel.h"
#include "runtime/model_runtime.h"

namespace kiln::serve {
namespace {

Status api_status(kilnError code, const char* call) {
  const char* msg = kilnGetRecentErrMsg();
  return Status(StatusCode::kInternal, str_format("%s failed (error %d)%s%s", call, static_cast<int>(code),
                                                  msg && *msg ? ": " : "", msg ? msg : ""));
}

#define KILN_SERVE_API(call)                                              \
  do {                                                                    \
    if (kilnError serve_code_ = (call); serve_code_ != KILN_SUCCESS)      \
      return api_status(serve_code_, #call);                              \
  } while (0)

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i] < 0 ? -1 : dims[i]);
  }
  return s + "]";
}

Expected<TensorInfo> describe(kilnmdlDesc* desc, size_t index, bool input) {
  TensorInfo t;
  const char* name = input ? kilnmdlGetInputNameByIndex(desc, index) : kilnmdlGetOutputNameByIndex(desc, index);
  if (!name) return internal_error("the model description has no name for %s %zu", input ? "input" : "output", index);
  t.name = name;
  kilnmdlIODims dims{};
  KILN_SERVE_API(input ? kilnmdlGetInputDims(desc, index, &dims) : kilnmdlGetOutputDims(desc, index, &dims));
  for (size_t i = 0; i < std::min<size_t>(dims.dimCount, KILN_MAX_DIM_CNT); ++i) {
    if (dims.dims[i] == -2) return unsupported("%s '%s' has unknown rank, which the server cannot describe",
                                               input ? "input" : "output", t.name.c_str());
    t.dims.push_back(dims.dims[i] < 0 ? -1 : dims.dims[i]);
  }
  t.api_dtype = input ? kilnmdlGetInputDataType(desc, index) : kilnmdlGetOutputDataType(desc, index);
  auto dtype = rt::from_c_dtype(t.api_dtype);
  if (!dtype || kserve_datatype(*dtype) == std::string("BYTES"))
    return unsupported("%s '%s' has a data type the protocol does not carry", input ? "input" : "output", t.name.c_str());
  t.dtype = *dtype;
  return t;
}

// The .kiln file to load: model.kiln itself, or model.onnx compiled into a private
// temporary file (removed by the caller once every device has loaded it).
Expected<std::string> compile_if_onnx(const ModelFiles& files) {
  if (!files.onnx) return files.model_path;
  compiler::CompileOptions options;
  options.passes.precision = *compiler::precision_from_name(files.config.precision);  // checked by the config
  options.dynamic_batch = files.config.batch_buckets;
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(files.model_path, options));
  std::string tmp = (std::filesystem::temp_directory_path() / "kiln-serve-XXXXXX.kiln").string();
  int fd = mkstemps(tmp.data(), 5);
  if (fd < 0) return unavailable("cannot create a temporary file for the compiled %s", files.model_path.c_str());
  close(fd);
  Status written = compiler::write_compiled_model(compiled, tmp);
  if (!written.ok()) std::remove(tmp.c_str());
  KILN_RETURN_IF_ERROR(written, "compiling %s", files.model_path.c_str());
  return tmp;
}

size_t product(const std::vector<int64_t>& dims) {
  size_t n = 1;
  for (int64_t d : dims) n *= d < 0 ? 1 : static_cast<size_t>(d);  // an open dim guessed as 1
  return n;
}

}  // namespace

DeviceBuffers::~DeviceBuffers() {
  for (auto* blocks : {&in_, &out_})
    for (Block& b : *blocks)
      if (b.data) kilnrtFree(b.data);
}

Expected<void*> DeviceBuffers::grow(std::vector<Block>* blocks, size_t index, size_t bytes) {
  if (blocks->size() <= index) blocks->resize(index + 1);
  Block& b = (*blocks)[index];
  if (b.bytes >= bytes && b.data) return b.data;
  if (b.data) kilnrtFree(b.data);
  b = {};
  // Some headroom so that a slowly growing batch does not reallocate every time.
  size_t want = std::max<size_t>(bytes + bytes / 4, 256);
  KILN_SERVE_API(kilnrtMalloc(&b.data, want, KILN_MEM_MALLOC_NORMAL_ONLY));
  b.bytes = want;
  return b.data;
}

Expected<std::shared_ptr<ServedModel>> ServedModel::load(const ModelFiles& files, const std::vector<kilnrtContext>& devices) {
  std::shared_ptr<ServedModel> m(new ServedModel());
  m->files_ = files;
  KILN_ASSIGN_OR_RETURN(std::string path, compile_if_onnx(files), "model '%s'", files.name.c_str());
  Status loaded;
  for (kilnrtContext ctx : devices) {
    uint32_t id = 0;
    kilnError e = kilnrtSetCurrentContext(ctx);
    if (e == KILN_SUCCESS) e = kilnmdlLoadFromFile(path.c_str(), &id);
    if (e != KILN_SUCCESS) {
      loaded = api_status(e, "kilnmdlLoadFromFile");
      break;
    }
    m->contexts_.push_back(ctx);
    m->ids_.push_back(id);
  }
  if (files.onnx) std::remove(path.c_str());
  KILN_RETURN_IF_ERROR(loaded, "model '%s'", files.name.c_str());
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  if (!desc) return resource_exhausted("kilnmdlCreateDesc");
  Status described = [&]() -> Status {
    KILN_SERVE_API(kilnmdlGetDesc(desc, m->ids_[0]));
    for (size_t i = 0; i < kilnmdlGetNumInputs(desc); ++i) {
      KILN_ASSIGN_OR_RETURN(TensorInfo t, describe(desc, i, true));
      m->inputs_.push_back(std::move(t));
    }
    for (size_t i = 0; i < kilnmdlGetNumOutputs(desc); ++i) {
      KILN_ASSIGN_OR_RETURN(TensorInfo t, describe(desc, i, false));
      m->outputs_.push_back(std::move(t));
    }
    return ok_status();
  }();
  kilnmdlDestroyDesc(desc);
  KILN_RETURN_IF_ERROR(described, "model '%s'", files.name.c_str());
  // A batched model must leave dim 0 of every input open (or 1 with max_batch_size 1):
  // requests of any batch up to max_batch_size are concatenated there.
  if (m->batched()) {
    for (const TensorInfo& t : m->inputs_) {
      bool ok = !t.dims.empty() && (t.dims[0] < 0 || (t.dims[0] == 1 && files.config.max_batch_size == 1));
      if (!ok)
        return invalid_argument("model '%s': max_batch_size is %d, but input '%s' has shape %s, whose dim 0 is not "
                                "an open batch dim",
                                files.name.c_str(), files.config.max_batch_size, t.name.c_str(), shape_text(t.dims).c_str());
    }
  }
  return m;
}

ServedModel::~ServedModel() {
  for (size_t d = 0; d < ids_.size(); ++d) {
    kilnrtSetCurrentContext(contexts_[d]);
    kilnmdlUnload(ids_[d]);
  }
}

Status ServedModel::check_request(InferRequest* request) const {
  std::vector<TensorData> ordered(inputs_.size());
  std::vector<bool> given(inputs_.size(), false);
  int64_t batch = -1;
  for (TensorData& t : request->inputs) {
    auto it = std::find_if(inputs_.begin(), inputs_.end(), [&](const TensorInfo& i) { return i.name == t.name; });
    if (it == inputs_.end()) {
      std::string names;
      for (const TensorInfo& i : inputs_) names += (names.empty() ? "" : ", ") + i.name;
      return invalid_argument("model '%s' has no input '%s' (inputs: %s)", name().c_str(), t.name.c_str(), names.c_str());
    }
    if (t.dtype != it->dtype)
      return invalid_argument("input '%s' has datatype %s, model '%s' expects %s", t.name.c_str(), kserve_datatype(t.dtype),
                              name().c_str(), kserve_datatype(it->dtype));
    bool match = t.shape.size() == it->dims.size();
    for (size_t k = 0; match && k < t.shape.size(); ++k) match = it->dims[k] < 0 || it->dims[k] == t.shape[k];
    if (!match)
      return invalid_argument("input '%s' has shape %s, model '%s' expects %s (-1: any size)", t.name.c_str(),
                              shape_text(t.shape).c_str(), name().c_str(), shape_text(it->dims).c_str());
    if (batched()) {
      if (t.shape[0] < 1 || t.shape[0] > config().max_batch_size)
        return invalid_argument("input '%s' has batch %lld, model '%s' takes 1..%d (max_batch_size)", t.name.c_str(),
                                static_cast<long long>(t.shape[0]), name().c_str(), config().max_batch_size);
      if (batch >= 0 && t.shape[0] != batch)
        return invalid_argument("input '%s' has batch %lld, another input has %lld", t.name.c_str(),
                                static_cast<long long>(t.shape[0]), static_cast<long long>(batch));
      batch = t.shape[0];
    }
    size_t index = static_cast<size_t>(it - inputs_.begin());
    given[index] = true;
    ordered[index] = std::move(t);
  }
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (!given[i]) return invalid_argument("the request lacks input '%s' of model '%s'", inputs_[i].name.c_str(), name().c_str());
  for (const RequestedOutput& o : request->outputs)
    if (std::none_of(outputs_.begin(), outputs_.end(), [&](const TensorInfo& t) { return t.name == o.name; }))
      return invalid_argument("model '%s' has no output '%s'", name().c_str(), o.name.c_str());
  request->inputs = std::move(ordered);
  return ok_status();
}

bool same_row_shapes(const InferRequest& a, const InferRequest& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const auto& x = a.inputs[i].shape;
    const auto& y = b.inputs[i].shape;
    if (x.size() != y.size() || x.empty() || !std::equal(x.begin() + 1, x.end(), y.begin() + 1)) return false;
  }
  return true;
}

ModelMemoryStats ServedModel::memory_stats() const {
  ModelMemoryStats m;
  for (uint32_t id : ids_) {
    // Diagnostics the C API does not offer, read from the runtime's model table as kiln run does.
    std::shared_ptr<rt::Model> model = rt::ModelTable::get().find(id);
    if (!model) continue;
    const rt::Model::Stats s = model->stats();
    m.arena_in_use_bytes += s.arenas.in_use;
    m.arena_peak_bytes += s.arenas.peak_in_use;
    m.arena_held_bytes += s.arenas.held;
    m.planned_bytes += s.planned_bytes;
  }
  return m;
}

StagedBatch::~StagedBatch() { reset(); }

void StagedBatch::reset() {
  if (in_) kilnmdlDestroyDataset(in_);
  if (out_) kilnmdlDestroyDataset(out_);
  for (kilnDataBuffer* b : data_buffers_) kilnDestroyDataBuffer(b);
  for (kilnTensorDesc* d : descs_) kilnDestroyTensorDesc(d);
  in_ = out_ = nullptr;
  data_buffers_.clear();
  descs_.clear();
}

namespace {

Status add_buffer(std::vector<kilnDataBuffer*>& buffers, kilnmdlDataset* set, void* data, size_t bytes) {
  kilnDataBuffer* b = kilnCreateDataBuffer(data, bytes);
  if (!b) return resource_exhausted("kilnCreateDataBuffer");
  buffers.push_back(b);
  KILN_SERVE_API(kilnmdlAddDatasetBuffer(set, b));
  return ok_status();
}

}  // namespace

Status ServedModel::stage(DeviceBuffers& buffers, const std::vector<const InferRequest*>& requests,
                          StagedBatch* batch) const {
  StagedBatch& b = *batch;
  b.reset();
  b.requests_ = requests;
  b.buffers_ = &buffers;
  b.rows_.clear();
  b.total_ = 0;
  b.launched_ = ok_status();
  b.cancel_ = nullptr;
  for (const InferRequest* r : requests) {
    b.rows_.push_back(batched() ? r->inputs[0].shape[0] : 1);
    b.total_ += b.rows_.back();
  }
  b.in_ = kilnmdlCreateDataset();
  b.out_ = kilnmdlCreateDataset();
  if (!b.in_ || !b.out_) return resource_exhausted("kilnmdlCreateDataset");
  // Inputs: each request's rows copied in after the previous request's.
  for (size_t i = 0; i < inputs_.size(); ++i) {
    size_t bytes = 0;
    for (const InferRequest* r : requests) bytes += r->inputs[i].bytes.size();
    KILN_ASSIGN_OR_RETURN(void* dst, buffers.input(i, bytes));
    size_t offset = 0;
    for (const InferRequest* r : requests) {
      const std::vector<uint8_t>& src = r->inputs[i].bytes;
      if (!src.empty())
        KILN_SERVE_API(kilnrtMemcpy(static_cast<uint8_t*>(dst) + offset, bytes - offset, src.data(), src.size(),
                                    KILN_MEMCPY_HOST_TO_DEVICE));
      offset += src.size();
    }
    KILN_RETURN_IF_ERROR(add_buffer(b.data_buffers_, b.in_, dst, bytes));
    // The actual shape, for inputs with open dims only: a fixed input keeps the static path.
    if (std::none_of(inputs_[i].dims.begin(), inputs_[i].dims.end(), [](int64_t d) { return d < 0; })) continue;
    std::vector<int64_t> dims = requests[0]->inputs[i].shape;
    if (batched()) dims[0] = b.total_;
    kilnTensorDesc* desc = kilnCreateTensorDesc(inputs_[i].api_dtype, static_cast<int>(dims.size()), dims.data(), KILN_FORMAT_ND);
    if (!desc) return resource_exhausted("kilnCreateTensorDesc");
    b.descs_.push_back(desc);
    KILN_SERVE_API(kilnmdlSetDatasetTensorDesc(b.in_, desc, i));
  }
  // Outputs: open dims guessed as the batch (dim 0) or 1, grown by execute_staged if the
  // model reports a larger output (KILN_ERROR_MODEL_OUTPUT_NOT_MATCH).
  b.out_bytes_.clear();
  for (const TensorInfo& t : outputs_) {
    std::vector<int64_t> dims = t.dims;
    if (!dims.empty() && dims[0] < 0) dims[0] = b.total_;
    b.out_bytes_.push_back(dtype_bytes(t.dtype, static_cast<int64_t>(product(dims))));
  }
  return add_outputs(b);
}

Status ServedModel::add_outputs(StagedBatch& b) const {
  for (size_t j = 0; j < outputs_.size(); ++j) {
    KILN_ASSIGN_OR_RETURN(void* dst, b.buffers_->output(j, b.out_bytes_[j]));
    KILN_RETURN_IF_ERROR(add_buffer(b.data_buffers_, b.out_, dst, b.out_bytes_[j]));
  }
  return ok_status();
}

Status ServedModel::execute_staged(int device, StagedBatch& b) const {
  const uint32_t id = ids_[static_cast<size_t>(device)];
  for (int attempt = 0;; ++attempt) {
    kilnError e = kilnmdlExecute(id, b.in_, b.out_);
    if (e == KILN_SUCCESS) return ok_status();
    if (e != KILN_ERROR_MODEL_OUTPUT_NOT_MATCH || attempt >= 4) return api_status(e, "kilnmdlExecute");
    // Rebuild the output dataset with buffers 16x larger (the old data buffers are freed
    // with the batch).
    kilnmdlDestroyDataset(b.out_);
    b.out_ = kilnmdlCreateDataset();
    if (!b.out_) return resource_exhausted("kilnmdlCreateDataset");
    for (size_t& bytes : b.out_bytes_) bytes *= 16;
    KILN_RETURN_IF_ERROR(add_outputs(b));
  }
}

void ServedModel::launch(int device, StagedBatch& b, kilnrtStream stream, const std::atomic<bool>* cancel) const {
  b.cancel_ = cancel;
  rt::ExecutionCancelScope scope(cancel);  // the execution watches the flag (read at submission)
  kilnError e = kilnmdlExecuteAsync(ids_[static_cast<size_t>(device)], b.in_, b.out_, stream);
  b.launched_ = e == KILN_SUCCESS ? ok_status() : api_status(e, "kilnmdlExecuteAsync");
}

Status ServedModel::finish(int device, StagedBatch& b, kilnrtStream stream,
                           std::vector<std::vector<TensorData>>* outputs) const {
  kilnError synced = b.launched_.ok() ? kilnrtSynchronizeStream(stream) : KILN_SUCCESS;
  bool ran = b.launched_.ok() && synced == KILN_SUCCESS;
  // Stopped by its flag (or failed after it was set): nobody waits for the outputs, and
  // running it again would keep the device from the next batch.
  if (!ran && b.launched_.ok() && b.cancel_ && b.cancel_->load(std::memory_order_relaxed))
    return deadline_exceeded("model '%s': the execution was interrupted, every request of its batch having passed its "
                             "timeout (%s)", name().c_str(), api_status(synced, "kilnrtSynchronizeStream").to_string().c_str());
  // The stream's error does not keep the runtime's code (an output larger than planned is
  // KILN_ERROR_MODEL_OUTPUT_NOT_MATCH only from kilnmdlExecute): run it again here, which
  // grows the outputs or reports the failure as execute() does.
  if (!ran) KILN_RETURN_IF_ERROR(execute_staged(device, b));
  return split_outputs(b, outputs);
}

Status ServedModel::execute(int device, DeviceBuffers& buffers, const std::vector<const InferRequest*>& requests,
                            std::vector<std::vector<TensorData>>* outputs) const {
  StagedBatch b;
  KILN_RETURN_IF_ERROR(stage(buffers, requests, &b));
  KILN_RETURN_IF_ERROR(execute_staged(device, b));
  return split_outputs(b, outputs);
}

// Each request's rows of every output.
Status ServedModel::split_outputs(StagedBatch& b, std::vector<std::vector<TensorData>>* outputs) const {
  const int64_t total = b.total_;
  outputs->assign(b.requests_.size(), {});
  for (size_t j = 0; j < outputs_.size(); ++j) {
    std::vector<int64_t> dims = outputs_[j].dims;
    if (const kilnTensorDesc* desc = kilnmdlGetDatasetTensorDesc(b.out_, j)) {
      dims.assign(kilnGetTensorDescNumDims(desc), 0);
      for (size_t k = 0; k < dims.size(); ++k) KILN_SERVE_API(kilnGetTensorDescDimV2(desc, k, &dims[k]));
    }
    if (batched() && (dims.empty() || dims[0] != total))
      return internal_error("output '%s' has shape %s after a batch of %lld: dim 0 is not the batch",
                            outputs_[j].name.c_str(), shape_text(dims).c_str(), static_cast<long long>(total));
    const size_t row_bytes = dtype_bytes(outputs_[j].dtype, static_cast<int64_t>(product(dims))) / static_cast<size_t>(total);
    kilnDataBuffer* db = kilnmdlGetDatasetBuffer(b.out_, j);
    const uint8_t* src = static_cast<const uint8_t*>(kilnGetDataBufferAddr(db));
    size_t offset = 0;
    for (size_t r = 0; r < b.requests_.size(); ++r) {
      TensorData t{outputs_[j].name, outputs_[j].dtype, dims, {}};
      if (batched()) t.shape[0] = b.rows_[r];
      t.bytes.resize(row_bytes * static_cast<size_t>(b.rows_[r]));
      if (!t.bytes.empty())
        KILN_SERVE_API(kilnrtMemcpy(t.bytes.data(), t.bytes.size(), src + offset, t.bytes.size(), KILN_MEMCPY_DEVICE_TO_HOST));
      offset += t.bytes.size();
      (*outputs)[r].push_back(std::move(t));
    }
  }
  return ok_status();
}

}  // namespace kiln::serve
