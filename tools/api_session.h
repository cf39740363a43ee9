// Driving a model through the public C API (include/kiln/kiln.h) for `kiln run` and
// `kiln bench`: RAII owners of the runtime, streams, events, device buffers, loaded models
// and datasets, plus the host side (inputs from .npy files or random, outputs as Tensors).
// Nothing here reaches into the runtime's internals: the tools use the API as a user would.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "compiler/compiler.h"
#include "core/tensor.h"
#include "kiln/kiln.h"

namespace kiln::tools {

// A failed C API call as a Status: kilnGetRecentErrMsg(), or the call and code when the
// runtime left no message.
Status api_error(kilnError code, const char* call);

#define KILN_API_RETURN_IF_ERROR(call)                                       \
  do {                                                                       \
    kilnError kiln_api_code_ = (call);                                       \
    if (kiln_api_code_ != KILN_SUCCESS) return ::kiln::tools::api_error(kiln_api_code_, #call); \
  } while (0)

// kiln DataType <-> kilnDataType (kUndefined / KILN_DT_UNDEFINED when there is no twin).
DataType from_api_dtype(kilnDataType t);
kilnDataType to_api_dtype(DataType t);

// "[3,4]", with "?" for a dim not fixed at compile time (-1).
std::string dims_string(const std::vector<int64_t>& dims);

// Caps the intra-op threads of every device at `threads` (> 0) by setting KILN_NUM_THREADS,
// which the runtime honours. Call it first: the count is read once per process.
void cap_threads(int threads);

// The cores this process may run on (its affinity mask), and each of `devices` logical
// devices' share of them (at least 1): the most intra-op threads that do not oversubscribe.
int available_cores();
int cores_per_device(int devices);

struct RuntimeOptions {
  int devices = 0;  // logical CPU devices; 0: KILN_DEVICES or the runtime's default
  int threads = 0;  // threads per device; 0: the device's cores (KILN_NUM_THREADS caps them)
};

// kilnInit ... kilnFinalize. Declare it before every other owner here so that it goes last.
class Runtime {
 public:
  static Expected<std::unique_ptr<Runtime>> init(const RuntimeOptions& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  int device_count() const { return device_count_; }
  // Intra-op threads each device runs a model with.
  int threads_per_device() const { return threads_per_device_; }

 private:
  Runtime() = default;
  int device_count_ = 0;
  int threads_per_device_ = 0;
};

// kilnrtSetDevice on the calling thread, matched by kilnrtResetDevice. `context()` is the
// device's default context, which other threads make current with kilnrtSetCurrentContext.
class DeviceGuard {
 public:
  static Expected<std::unique_ptr<DeviceGuard>> set(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int id() const { return id_; }
  kilnrtContext context() const { return context_; }

 private:
  DeviceGuard() = default;
  int id_ = -1;
  kilnrtContext context_ = nullptr;
};

// A stream of the current context's device.
class StreamHandle {
 public:
  static Expected<std::unique_ptr<StreamHandle>> create();
  ~StreamHandle();
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  kilnrtStream get() const { return stream_; }

 private:
  StreamHandle() = default;
  kilnrtStream stream_ = nullptr;
};

class EventHandle {
 public:
  static Expected<std::unique_ptr<EventHandle>> create();
  ~EventHandle();
  EventHandle(const EventHandle&) = delete;
  EventHandle& operator=(const EventHandle&) = delete;
  kilnrtEvent get() const { return event_; }

 private:
  EventHandle() = default;
  kilnrtEvent event_ = nullptr;
};

// kilnrtMalloc'ed memory of the current device. Zero bytes still get a (1-byte) block so
// that every buffer has an address the runtime knows.
class DeviceBuffer {
 public:
  static Expected<std::unique_ptr<DeviceBuffer>> allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  DeviceBuffer() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// One input or output of a loaded model, from its kilnmdlDesc.
struct TensorSpec {
  std::string name;
  kilnDataType api_dtype = KILN_DT_UNDEFINED;
  DataType dtype = DataType::kUndefined;  // kUndefined: no Kiln twin of api_dtype
  std::vector<int64_t> dims;               // -1 for a dim not fixed at compile time
  bool unknown_rank = false;
  size_t bytes = 0;  // 0 when a dim is not fixed
  bool is_fixed() const { return !unknown_rank && bytes_known(); }
  bool bytes_known() const;
};

// A model loaded on the current context's device (kilnmdlLoadFromFile / FromMem) and its
// description; unloaded on destruction.
class LoadedApiModel {
 public:
  static Expected<std::unique_ptr<LoadedApiModel>> load_file(const std::string& path);
  static Expected<std::unique_ptr<LoadedApiModel>> load_memory(const std::vector<uint8_t>& bytes);
  ~LoadedApiModel();
  LoadedApiModel(const LoadedApiModel&) = delete;
  LoadedApiModel& operator=(const LoadedApiModel&) = delete;
  uint32_t id() const { return id_; }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // Unloads the model now (kilnmdlUnload), keeping its descriptions: outputs written to the
  // caller's buffers can then be read back after the model's arena and weights are returned.
  Status unload();

 private:
  LoadedApiModel() = default;
  Status describe();
  uint32_t id_ = 0;
  bool loaded_ = false;
  kilnmdlDesc* desc_ = nullptr;
  std::vector<TensorSpec> inputs_, outputs_;
};

// The model file named on the command line, ready for loading: a .kiln file by path, an
// .onnx file compiled in memory to .kiln bytes.
struct ModelSource {
  bool from_onnx = false;
  std::string path;
  std::vector<uint8_t> kiln_bytes;  // when from_onnx
  double compile_ms = 0;            // ONNX -> .kiln bytes
};
// An .onnx file is compiled with `options` (kiln run --input-shape fixes shapes this way).
Expected<ModelSource> read_model_source(const std::string& path, const compiler::CompileOptions& options = {});
Expected<std::unique_ptr<LoadedApiModel>> load_model(const ModelSource& source);

// Where the shapes of random inputs come from, besides the model's fixed dims.
struct HostInputOptions {
  compiler::InputShapes shapes;         // --input-shape: checked against the model's dims
  compiler::InputShapes bucket_shapes;  // a bucketed model's first bucket (first_bucket_shapes)
};

// Every name of `shapes` is an input of `model` and each shape fits its dims (same rank,
// equal where the model fixes a dim).
Status check_input_shapes(const LoadedApiModel& model, const compiler::InputShapes& shapes);

// Host input tensors, in the model's input order: those given as NAME=FILE.npy (checked
// against the description: known name, dtype, rank, fixed dims, and --input-shape's shape),
// the others random (uniform [-1, 1) for floats, small non-negative integers otherwise) of
// the shape options.shapes gives, else the first bucket's (with a note), else the model's.
// An input with open dims and none of these is an error naming the input and --input-shape:
// random data never guesses a size.
Expected<std::vector<Tensor>> make_host_inputs(const LoadedApiModel& model,
                                               const std::vector<std::string>& specs, unsigned seed,
                                               std::vector<std::string>* notes,
                                               const HostInputOptions& options = {});

// The first (smallest) shape bucket's input shapes of a .kiln compiled with
// --dynamic-batch-size / --dynamic-dims, for random inputs; empty for other models and when
// every input of `model` is fixed (the file is read again only when it may matter).
Expected<compiler::InputShapes> first_bucket_shapes(const ModelSource& source, const LoadedApiModel& model);

// Random data of the right type: uniform [-1, 1) for floats, small non-negative integers
// (valid as indices and token ids) for integers.
Tensor random_tensor(DataType dtype, const std::vector<int64_t>& dims, std::mt19937& rng);

// Device buffers and the two datasets naming them, for one execution at a time: the
// inputs copied in once, the outputs read back on demand.
class IoBuffers {
 public:
  // Allocates on the current device, copies `inputs` H2D (synchronously) and gives the
  // actual shape of each input whose dims are not fixed with kilnmdlSetDatasetTensorDesc.
  // Output buffers get the description's size, or for an output whose size is not fixed
  // output_bytes[i] (when given) or that of the last `fit_outputs`.
  static Expected<std::unique_ptr<IoBuffers>> create(const LoadedApiModel& model,
                                                     const std::vector<Tensor>& inputs,
                                                     const std::vector<size_t>& output_bytes = {});
  // Like create, and when some output size is not fixed by the description, finds sizes
  // that fit: the runtime refuses a too-small output buffer (KILN_ERROR_MODEL_OUTPUT_NOT_MATCH),
  // so this executes once synchronously (kilnmdlExecute) with growing buffers until they do.
  // `output_bytes` then gets the sizes the outputs took.
  static Expected<std::unique_ptr<IoBuffers>> create_fitted(const LoadedApiModel& model,
                                                            const std::vector<Tensor>& inputs,
                                                            std::vector<size_t>* output_bytes);
  ~IoBuffers();
  IoBuffers(const IoBuffers&) = delete;
  IoBuffers& operator=(const IoBuffers&) = delete;
  const kilnmdlDataset* inputs() const { return inputs_; }
  kilnmdlDataset* outputs() const { return outputs_; }
  // After an execution: every output copied D2H, with the dims the execution reported
  // (kilnmdlGetDatasetTensorDesc).
  Expected<std::vector<Tensor>> read_outputs(const LoadedApiModel& model) const;

 private:
  IoBuffers() = default;
  kilnmdlDataset* inputs_ = nullptr;
  kilnmdlDataset* outputs_ = nullptr;
  std::vector<kilnDataBuffer*> data_buffers_;
  std::vector<std::unique_ptr<DeviceBuffer>> memory_;
  std::vector<kilnTensorDesc*> descs_;
};

}  // namespace kiln::tools
