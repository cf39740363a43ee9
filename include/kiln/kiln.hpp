// Kiln runtime C++ API: thin, header-only, move-only RAII wrappers (C++17) over the C API
// of kiln.h. Each object owns one C handle and releases it in its destructor.
//
// Errors: the C ABI never throws; it returns a kilnError and leaves a message for the
// thread (kilnGetRecentErrMsg). This C++ layer turns every failing call into a
// kiln::Error exception carrying that code and message (see check()). Destructors never
// throw: a failure while releasing is ignored, as it can only come from misuse already
// reported elsewhere (e.g. releasing after kilnFinalize).
//
// Lifetimes follow the C API: a Runtime outlives everything else; a Device or Context is
// current on the thread that made it; buffers, streams and events belong to the device
// current when they were made; a Dataset only refers to memory, it does not own it.
#ifndef KILN_KILN_HPP_
#define KILN_KILN_HPP_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln.h"

namespace kiln {

// ---- Errors ------------------------------------------------------------------------------

// A failed C API call: the kilnError code and the message of kilnGetRecentErrMsg().
class Error : public std::runtime_error {
 public:
  Error(kilnError code, const std::string& message) : std::runtime_error(message), code_(code) {}
  kilnError code() const noexcept { return code_; }

 private:
  kilnError code_;
};

namespace detail {
inline std::string error_text(kilnError code, const char* call) {
  const char* message = kilnGetRecentErrMsg();
  std::string text = call ? call : "kiln";
  text += " failed (error " + std::to_string(code) + ")";
  if (message && *message) text += std::string(": ") + message;
  return text;
}
}  // namespace detail

// Throws kiln::Error unless `code` is KILN_SUCCESS; `call` names the C function.
inline void check(kilnError code, const char* call = nullptr) {
  if (code != KILN_SUCCESS) throw Error(code, detail::error_text(code, call));
}

// For the C functions that return a handle, NULL on failure (the code is not returned,
// so the exception carries KILN_ERROR_FAILURE; the message says what went wrong).
template <typename T>
T* check_handle(T* handle, const char* call) {
  if (handle == nullptr)
    throw Error(KILN_ERROR_FAILURE, detail::error_text(KILN_ERROR_FAILURE, call));
  return handle;
}

// ---- Runtime-wide queries ----------------------------------------------------------------

struct Version {
  int32_t major = 0;
  int32_t minor = 0;
  int32_t patch = 0;
};

inline Version version() {
  Version v;
  check(kilnrtGetVersion(&v.major, &v.minor, &v.patch), "kilnrtGetVersion");
  return v;
}

inline size_t data_type_size(kilnDataType type) { return kilnDataTypeSize(type); }

// Owns kilnInit ... kilnFinalize. Make exactly one, before every other object, and let it
// be destroyed last (kilnFinalize waits for all work and releases whatever is left).
class Runtime {
 public:
  // config_path: NULL or a JSON config (see kilnInit); without one KILN_DEVICES decides.
  explicit Runtime(const char* config_path = nullptr) {
    check(kilnInit(config_path), "kilnInit");
    active_ = true;
  }
  explicit Runtime(const std::string& config_path) : Runtime(config_path.c_str()) {}
  ~Runtime() {
    if (active_) kilnFinalize();
  }
  Runtime(Runtime&& other) noexcept : active_(std::exchange(other.active_, false)) {}
  Runtime& operator=(Runtime&& other) noexcept {
    if (this != &other) {
      if (active_) kilnFinalize();
      active_ = std::exchange(other.active_, false);
    }
    return *this;
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Finalizes now, reporting an error instead of ignoring it.
  void finalize() {
    if (!active_) return;
    active_ = false;
    check(kilnFinalize(), "kilnFinalize");
  }

 private:
  bool active_ = false;
};

// ---- Devices and contexts ------------------------------------------------------------------

// kilnrtSetDevice(id) on construction, kilnrtResetDevice(id) on destruction: the device
// becomes current on the constructing thread (with its default context).
class Device {
 public:
  explicit Device(int32_t id) {
    check(kilnrtSetDevice(id), "kilnrtSetDevice");
    id_ = id;
  }
  ~Device() {
    if (id_ >= 0) kilnrtResetDevice(id_);
  }
  Device(Device&& other) noexcept : id_(std::exchange(other.id_, -1)) {}
  Device& operator=(Device&& other) noexcept {
    if (this != &other) {
      if (id_ >= 0) kilnrtResetDevice(id_);
      id_ = std::exchange(other.id_, -1);
    }
    return *this;
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  static uint32_t count() {
    uint32_t n = 0;
    check(kilnrtGetDeviceCount(&n), "kilnrtGetDeviceCount");
    return n;
  }
  // The device current on the calling thread.
  static int32_t current() {
    int32_t id = -1;
    check(kilnrtGetDevice(&id), "kilnrtGetDevice");
    return id;
  }

  int32_t id() const noexcept { return id_; }
  // Waits until every stream of the device is idle (timeout_ms < 0: no limit). The
  // device must be current on the calling thread, as for kilnrtSynchronizeDevice.
  void synchronize(int32_t timeout_ms = -1) const {
    if (current() != id_) {
      throw Error(KILN_ERROR_INVALID_DEVICE,
                  "kiln::Device::synchronize: device " + std::to_string(id_) +
                      " is not current on this thread (current: " + std::to_string(current()) +
                      ")");
    }
    if (timeout_ms < 0) {
      check(kilnrtSynchronizeDevice(), "kilnrtSynchronizeDevice");
    } else {
      check(kilnrtSynchronizeDeviceWithTimeout(timeout_ms), "kilnrtSynchronizeDeviceWithTimeout");
    }
  }
  kilnrtMemStats memory_stats() const {
    kilnrtMemStats stats{};
    check(kilnrtGetMemStats(id_, &stats), "kilnrtGetMemStats");
    return stats;
  }
  void empty_cache() const { check(kilnrtEmptyCache(id_), "kilnrtEmptyCache"); }

 private:
  int32_t id_ = -1;
};

// Free and total bytes of the current device's memory domain.
struct MemInfo {
  size_t free = 0;
  size_t total = 0;
};
inline MemInfo memory_info(kilnrtMemAttr attr = KILN_DDR_MEM) {
  MemInfo info;
  check(kilnrtGetMemInfo(attr, &info.free, &info.total), "kilnrtGetMemInfo");
  return info;
}

// A context of its own on a device (kilnrtCreateContext, which makes it current).
class Context {
 public:
  explicit Context(int32_t device_id) {
    check(kilnrtCreateContext(&handle_, device_id), "kilnrtCreateContext");
  }
  ~Context() {
    if (handle_) kilnrtDestroyContext(handle_);
  }
  Context(Context&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Context& operator=(Context&& other) noexcept {
    if (this != &other) {
      if (handle_) kilnrtDestroyContext(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Makes the context current on the calling thread (contexts are thread-current).
  void make_current() const { check(kilnrtSetCurrentContext(handle_), "kilnrtSetCurrentContext"); }
  static kilnrtContext current() {
    kilnrtContext context = nullptr;
    check(kilnrtGetCurrentContext(&context), "kilnrtGetCurrentContext");
    return context;
  }
  kilnrtContext get() const noexcept { return handle_; }

 private:
  kilnrtContext handle_ = nullptr;
};

// ---- Streams and events -----------------------------------------------------------------------

class Event;

// An in-order asynchronous queue on the current context's device.
class Stream {
 public:
  // Creates a stream (kilnrtCreateStream) in the current context.
  Stream() {
    check(kilnrtCreateStream(&handle_), "kilnrtCreateStream");
    state_ = State::kOwned;
  }
  // The current context's default stream (the C API's NULL stream), not owned.
  static Stream default_stream() { return Stream(State::kDefault); }
  ~Stream() {
    if (state_ == State::kOwned) kilnrtDestroyStream(handle_);
  }
  Stream(Stream&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        state_(std::exchange(other.state_, State::kEmpty)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      if (state_ == State::kOwned) kilnrtDestroyStream(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
      state_ = std::exchange(other.state_, State::kEmpty);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Waits for the work submitted so far; throws the error of a failed task
  // (KILN_ERROR_RT_TASK_FAILED) or KILN_ERROR_RT_TIMEOUT (timeout_ms >= 0 only).
  void synchronize(int32_t timeout_ms = -1) const {
    if (timeout_ms < 0) {
      check(kilnrtSynchronizeStream(get()), "kilnrtSynchronizeStream");
    } else {
      check(kilnrtSynchronizeStreamWithTimeout(get(), timeout_ms),
            "kilnrtSynchronizeStreamWithTimeout");
    }
  }
  // True when every submitted task has finished.
  bool query() const {
    kilnrtStreamStatus status = KILN_STREAM_STATUS_NOT_READY;
    check(kilnrtStreamQuery(get(), &status), "kilnrtStreamQuery");
    return status == KILN_STREAM_STATUS_COMPLETE;
  }
  // Later work on this stream waits for the event's latest record.
  inline void wait(const Event& event) const;
  // Runs fn(user_data) on a host thread in stream order.
  void launch_callback(kilnrtCallback fn, void* user_data,
                       kilnrtCallbackBlockType block = KILN_CALLBACK_BLOCK) const {
    check(kilnrtLaunchCallback(fn, user_data, block, get()), "kilnrtLaunchCallback");
  }

  // The C handle (NULL for the default stream). Throws on a moved-from stream, whose NULL
  // handle would otherwise silently mean the default stream.
  kilnrtStream get() const {
    if (state_ == State::kEmpty) {
      throw Error(KILN_ERROR_INVALID_RESOURCE_HANDLE, "kiln::Stream: use of a moved-from stream");
    }
    return handle_;
  }

 private:
  enum class State { kEmpty, kOwned, kDefault };
  explicit Stream(State state) : state_(state) {}

  kilnrtStream handle_ = nullptr;
  State state_ = State::kEmpty;
};

class Event {
 public:
  Event() { check(kilnrtCreateEvent(&handle_), "kilnrtCreateEvent"); }
  explicit Event(uint32_t flag) {
    check(kilnrtCreateEventWithFlag(&handle_, flag), "kilnrtCreateEventWithFlag");
  }
  ~Event() {
    if (handle_) kilnrtDestroyEvent(handle_);
  }
  Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      if (handle_) kilnrtDestroyEvent(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Completes when the work submitted to `stream` before it has run.
  void record(const Stream& stream) const {
    check(kilnrtRecordEvent(handle_, stream.get()), "kilnrtRecordEvent");
  }
  void reset(const Stream& stream) const {
    check(kilnrtResetEvent(handle_, stream.get()), "kilnrtResetEvent");
  }
  // True when the latest record has completed (or the event was never recorded).
  bool query() const {
    kilnrtEventStatus status = KILN_EVENT_STATUS_NOT_READY;
    check(kilnrtQueryEvent(handle_, &status), "kilnrtQueryEvent");
    return status == KILN_EVENT_STATUS_COMPLETE;
  }
  void synchronize(int32_t timeout_ms = -1) const {
    if (timeout_ms < 0) {
      check(kilnrtSynchronizeEvent(handle_), "kilnrtSynchronizeEvent");
    } else {
      check(kilnrtSynchronizeEventWithTimeout(handle_, timeout_ms),
            "kilnrtSynchronizeEventWithTimeout");
    }
  }
  // Milliseconds from `start`'s completed record to `end`'s.
  static float elapsed_ms(const Event& start, const Event& end) {
    float ms = 0;
    check(kilnrtEventElapsedTime(&ms, start.handle_, end.handle_), "kilnrtEventElapsedTime");
    return ms;
  }
  kilnrtEvent get() const noexcept { return handle_; }

 private:
  kilnrtEvent handle_ = nullptr;
};

inline void Stream::wait(const Event& event) const {
  check(kilnrtStreamWaitEvent(get(), event.get()), "kilnrtStreamWaitEvent");
}

// ---- Memory -----------------------------------------------------------------------------------

// Device memory of the current device (kilnrtMalloc / kilnrtFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, kilnrtMemMallocPolicy policy = KILN_MEM_MALLOC_HUGE_FIRST) {
    check(kilnrtMalloc(&data_, bytes, policy), "kilnrtMalloc");
    size_ = bytes;
  }
  ~DeviceBuffer() {
    if (data_) kilnrtFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (data_) kilnrtFree(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // A device address: never dereference it on the host, pass it to the API.
  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return data_ == nullptr; }

  // Synchronous copies (kilnrtMemcpy). `bytes` may be less than size().
  void copy_from_host(const void* src, size_t bytes) {
    check(kilnrtMemcpy(data_, size_, src, bytes, KILN_MEMCPY_HOST_TO_DEVICE), "kilnrtMemcpy");
  }
  void copy_to_host(void* dst, size_t bytes) const {
    check(kilnrtMemcpy(dst, bytes, data_, bytes, KILN_MEMCPY_DEVICE_TO_HOST), "kilnrtMemcpy");
  }
  void copy_from_device(const DeviceBuffer& src, size_t bytes) {
    check(kilnrtMemcpy(data_, size_, src.data_, bytes, KILN_MEMCPY_DEVICE_TO_DEVICE),
          "kilnrtMemcpy");
  }
  template <typename T>
  void copy_from_host(const std::vector<T>& src) {
    copy_from_host(src.data(), src.size() * sizeof(T));
  }
  // Copies size() / sizeof(T) elements out.
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> out(size_ / sizeof(T));
    copy_to_host(out.data(), out.size() * sizeof(T));
    return out;
  }

  // Asynchronous copies (kilnrtMemcpyAsync) on `stream`'s copy engine: the host memory
  // must stay valid (and unchanged, for copy_from_host_async) until the stream has run it.
  void copy_from_host_async(const void* src, size_t bytes, const Stream& stream) {
    check(kilnrtMemcpyAsync(data_, size_, src, bytes, KILN_MEMCPY_HOST_TO_DEVICE, stream.get()),
          "kilnrtMemcpyAsync");
  }
  void copy_to_host_async(void* dst, size_t bytes, const Stream& stream) const {
    check(kilnrtMemcpyAsync(dst, bytes, data_, bytes, KILN_MEMCPY_DEVICE_TO_HOST, stream.get()),
          "kilnrtMemcpyAsync");
  }
  void copy_from_device_async(const DeviceBuffer& src, size_t bytes, const Stream& stream) {
    check(kilnrtMemcpyAsync(data_, size_, src.data_, bytes, KILN_MEMCPY_DEVICE_TO_DEVICE,
                            stream.get()),
          "kilnrtMemcpyAsync");
  }

  // Sets every byte to (unsigned char)value (kilnrtMemset / kilnrtMemsetAsync).
  void fill(int32_t value) { check(kilnrtMemset(data_, size_, value, size_), "kilnrtMemset"); }
  void fill_async(int32_t value, const Stream& stream) {
    check(kilnrtMemsetAsync(data_, size_, value, size_, stream.get()), "kilnrtMemsetAsync");
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory (kilnrtMallocHost / kilnrtFreeHost): staging for async copies.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes) {
    check(kilnrtMallocHost(&data_, bytes), "kilnrtMallocHost");
    size_ = bytes;
  }
  ~HostBuffer() {
    if (data_) kilnrtFreeHost(data_);
  }
  HostBuffer(HostBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  HostBuffer& operator=(HostBuffer&& other) noexcept {
    if (this != &other) {
      if (data_) kilnrtFreeHost(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// ---- Datasets ---------------------------------------------------------------------------------

// A kilnmdlDataset and the kilnDataBuffers it holds (which it creates and destroys). The
// memory the buffers point at is not owned: keep it alive while the dataset is in use.
class Dataset {
 public:
  Dataset() : handle_(check_handle(kilnmdlCreateDataset(), "kilnmdlCreateDataset")) {}
  ~Dataset() { release(); }
  Dataset(Dataset&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), buffers_(std::move(other.buffers_)) {
    other.buffers_.clear();
  }
  Dataset& operator=(Dataset&& other) noexcept {
    if (this != &other) {
      release();
      handle_ = std::exchange(other.handle_, nullptr);
      buffers_ = std::move(other.buffers_);
      other.buffers_.clear();
    }
    return *this;
  }
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // Appends a buffer of `size` bytes at `data` (device memory for model inputs/outputs).
  Dataset& add(void* data, size_t size) {
    kilnDataBuffer* buffer = check_handle(kilnCreateDataBuffer(data, size), "kilnCreateDataBuffer");
    kilnError code = kilnmdlAddDatasetBuffer(handle_, buffer);
    if (code != KILN_SUCCESS) {
      Error error(code, detail::error_text(code, "kilnmdlAddDatasetBuffer"));
      kilnDestroyDataBuffer(buffer);
      throw error;
    }
    buffers_.push_back(buffer);
    return *this;
  }
  Dataset& add(const DeviceBuffer& buffer) { return add(buffer.data(), buffer.size()); }

  size_t size() const { return kilnmdlGetDatasetNumBuffers(handle_); }
  void* buffer_data(size_t index) const { return kilnGetDataBufferAddr(buffer(index)); }
  size_t buffer_size(size_t index) const { return kilnGetDataBufferSizeV2(buffer(index)); }
  // Points buffer `index` at other memory (kilnUpdateDataBuffer).
  void update(size_t index, void* data, size_t size) {
    check(kilnUpdateDataBuffer(buffer(index), data, size), "kilnUpdateDataBuffer");
  }

  // The actual shape of input `index` for a model whose input dims are not all fixed.
  void set_input_shape(size_t index, kilnDataType type, const std::vector<int64_t>& dims,
                       kilnFormat format = KILN_FORMAT_ND) {
    kilnTensorDesc* desc =
        check_handle(kilnCreateTensorDesc(type, static_cast<int>(dims.size()), dims.data(), format),
                     "kilnCreateTensorDesc");
    kilnError code = kilnmdlSetDatasetTensorDesc(handle_, desc, index);
    std::string text =
        code == KILN_SUCCESS ? "" : detail::error_text(code, "kilnmdlSetDatasetTensorDesc");
    kilnDestroyTensorDesc(desc);  // the dataset keeps a copy
    if (code != KILN_SUCCESS) throw Error(code, text);
  }
  // After an execution: the actual shape of output `index`.
  std::vector<int64_t> output_shape(size_t index) const {
    const kilnTensorDesc* desc =
        check_handle(kilnmdlGetDatasetTensorDesc(handle_, index), "kilnmdlGetDatasetTensorDesc");
    std::vector<int64_t> dims(kilnGetTensorDescNumDims(desc));
    for (size_t i = 0; i < dims.size(); ++i) {
      check(kilnGetTensorDescDimV2(desc, i, &dims[i]), "kilnGetTensorDescDimV2");
    }
    return dims;
  }

  kilnmdlDataset* get() const noexcept { return handle_; }

 private:
  kilnDataBuffer* buffer(size_t index) const {
    if (index >= buffers_.size()) {
      throw Error(KILN_ERROR_INVALID_PARAM, "kiln::Dataset: buffer index " + std::to_string(index) +
                                                " out of range (the dataset has " +
                                                std::to_string(buffers_.size()) + ")");
    }
    return buffers_[index];
  }
  void release() noexcept {
    if (handle_) kilnmdlDestroyDataset(handle_);
    for (kilnDataBuffer* b : buffers_) kilnDestroyDataBuffer(b);
    handle_ = nullptr;
    buffers_.clear();
  }

  kilnmdlDataset* handle_ = nullptr;
  std::vector<kilnDataBuffer*> buffers_;
};

// ---- Models -----------------------------------------------------------------------------------

// A loaded model (kilnmdlLoadFromFile / FromMem ... kilnmdlUnload) with its description.
class Model {
 public:
  Model() = default;
  // Loads a .kiln file for the current context's device.
  static Model load(const std::string& path) {
    uint32_t id = 0;
    check(kilnmdlLoadFromFile(path.c_str(), &id), "kilnmdlLoadFromFile");
    return Model(id);
  }
  // From bytes in host memory (copied).
  static Model load_from_memory(const void* data, size_t size) {
    uint32_t id = 0;
    check(kilnmdlLoadFromMem(data, size, &id), "kilnmdlLoadFromMem");
    return Model(id);
  }
  ~Model() { release(); }
  Model(Model&& other) noexcept
      : id_(other.id_),
        loaded_(std::exchange(other.loaded_, false)),
        desc_(std::exchange(other.desc_, nullptr)) {}
  Model& operator=(Model&& other) noexcept {
    if (this != &other) {
      release();
      id_ = other.id_;
      loaded_ = std::exchange(other.loaded_, false);
      desc_ = std::exchange(other.desc_, nullptr);
    }
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  uint32_t id() const noexcept { return id_; }
  kilnmdlDesc* desc() const noexcept { return desc_; }

  size_t num_inputs() const { return kilnmdlGetNumInputs(desc_); }
  size_t num_outputs() const { return kilnmdlGetNumOutputs(desc_); }
  // Bytes (0 when a dim is not fixed at compile time).
  size_t input_size(size_t i) const {
    return kilnmdlGetInputSizeByIndex(desc_, input_index_checked(i));
  }
  size_t output_size(size_t i) const {
    return kilnmdlGetOutputSizeByIndex(desc_, output_index_checked(i));
  }
  std::string input_name(size_t i) const {
    return check_handle(kilnmdlGetInputNameByIndex(desc_, input_index_checked(i)),
                        "kilnmdlGetInputNameByIndex");
  }
  std::string output_name(size_t i) const {
    return check_handle(kilnmdlGetOutputNameByIndex(desc_, output_index_checked(i)),
                        "kilnmdlGetOutputNameByIndex");
  }
  size_t input_index(const std::string& name) const {
    size_t index = 0;
    check(kilnmdlGetInputIndexByName(desc_, name.c_str(), &index), "kilnmdlGetInputIndexByName");
    return index;
  }
  size_t output_index(const std::string& name) const {
    size_t index = 0;
    check(kilnmdlGetOutputIndexByName(desc_, name.c_str(), &index), "kilnmdlGetOutputIndexByName");
    return index;
  }
  // Dims; -1 for a dim not fixed at compile time.
  std::vector<int64_t> input_dims(size_t i) const {
    kilnmdlIODims dims{};
    check(kilnmdlGetInputDims(desc_, i, &dims), "kilnmdlGetInputDims");
    return std::vector<int64_t>(dims.dims, dims.dims + dims.dimCount);
  }
  std::vector<int64_t> output_dims(size_t i) const {
    kilnmdlIODims dims{};
    check(kilnmdlGetOutputDims(desc_, i, &dims), "kilnmdlGetOutputDims");
    return std::vector<int64_t>(dims.dims, dims.dims + dims.dimCount);
  }
  kilnDataType input_data_type(size_t i) const {
    return kilnmdlGetInputDataType(desc_, input_index_checked(i));
  }
  kilnDataType output_data_type(size_t i) const {
    return kilnmdlGetOutputDataType(desc_, output_index_checked(i));
  }
  kilnFormat input_format(size_t i) const {
    return kilnmdlGetInputFormat(desc_, input_index_checked(i));
  }
  kilnFormat output_format(size_t i) const {
    return kilnmdlGetOutputFormat(desc_, output_index_checked(i));
  }

  // Runs on the calling thread (kilnmdlExecute).
  void execute(const Dataset& inputs, Dataset& outputs) const {
    check(kilnmdlExecute(id_, inputs.get(), outputs.get()), "kilnmdlExecute");
  }
  // Enqueues on `stream` (kilnmdlExecuteAsync); the datasets and the memory they refer
  // to must stay alive until the stream has run it.
  void execute_async(const Dataset& inputs, Dataset& outputs, const Stream& stream) const {
    check(kilnmdlExecuteAsync(id_, inputs.get(), outputs.get(), stream.get()),
          "kilnmdlExecuteAsync");
  }

 private:
  explicit Model(uint32_t id) : id_(id), loaded_(true) {
    desc_ = kilnmdlCreateDesc();
    if (desc_ == nullptr) {
      Error error(KILN_ERROR_FAILURE, detail::error_text(KILN_ERROR_FAILURE, "kilnmdlCreateDesc"));
      release();
      throw error;
    }
    kilnError code = kilnmdlGetDesc(desc_, id_);
    if (code != KILN_SUCCESS) {
      Error error(code, detail::error_text(code, "kilnmdlGetDesc"));
      release();
      throw error;
    }
  }
  size_t input_index_checked(size_t i) const { return index_checked(i, num_inputs(), "input"); }
  size_t output_index_checked(size_t i) const { return index_checked(i, num_outputs(), "output"); }
  static size_t index_checked(size_t i, size_t count, const char* what) {
    if (i >= count) {
      throw Error(KILN_ERROR_INVALID_PARAM,
                  std::string("kiln::Model: ") + what + " index " + std::to_string(i) +
                      " out of range (the model has " + std::to_string(count) + ")");
    }
    return i;
  }
  void release() noexcept {
    if (desc_) kilnmdlDestroyDesc(desc_);
    desc_ = nullptr;
    if (loaded_) kilnmdlUnload(id_);
    loaded_ = false;
  }

  uint32_t id_ = 0;
  bool loaded_ = false;
  kilnmdlDesc* desc_ = nullptr;
};

// ---- AIPP -------------------------------------------------------------------------------------

// A dynamic AIPP parameter set (kilnmdlCreateAIPP ... kilnmdlDestroyAIPP) for a model
// compiled with `aipp_mode: dynamic`. The setters return *this, so a set reads as a chain:
//   kiln::Aipp aipp(2);
//   aipp.input_format(KILN_YUV420SP_U8).src_image_size(1920, 1080).crop(0, 0, 960, 540, 0);
//   aipp.set_by_input_index(model, inputs, 0);  // writes it into the parameter input's buffer
class Aipp {
 public:
  explicit Aipp(uint64_t batch_size)
      : handle_(check_handle(kilnmdlCreateAIPP(batch_size), "kilnmdlCreateAIPP")) {}
  ~Aipp() {
    if (handle_) kilnmdlDestroyAIPP(handle_);
  }
  Aipp(Aipp&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Aipp& operator=(Aipp&& other) noexcept {
    if (this != &other) {
      if (handle_) kilnmdlDestroyAIPP(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Aipp(const Aipp&) = delete;
  Aipp& operator=(const Aipp&) = delete;

  Aipp& input_format(kilnAippInputFormat format) {
    check(kilnmdlSetAIPPInputFormat(handle_, format), "kilnmdlSetAIPPInputFormat");
    return *this;
  }
  Aipp& src_image_size(int32_t w, int32_t h) {
    check(kilnmdlSetAIPPSrcImageSize(handle_, w, h), "kilnmdlSetAIPPSrcImageSize");
    return *this;
  }
  // matrix: row-major 3x3 in 1/256 units.
  Aipp& csc(const int16_t matrix[9], const uint8_t output_bias[3], const uint8_t input_bias[3]) {
    check(kilnmdlSetAIPPCscParams(handle_, 1, matrix[0], matrix[1], matrix[2], matrix[3], matrix[4], matrix[5],
                                  matrix[6], matrix[7], matrix[8], output_bias[0], output_bias[1], output_bias[2],
                                  input_bias[0], input_bias[1], input_bias[2]),
          "kilnmdlSetAIPPCscParams");
    return *this;
  }
  Aipp& no_csc() {
    check(kilnmdlSetAIPPCscParams(handle_, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
          "kilnmdlSetAIPPCscParams");
    return *this;
  }
  Aipp& rbuv_swap(bool on) {
    check(kilnmdlSetAIPPRbuvSwapSwitch(handle_, on ? 1 : 0), "kilnmdlSetAIPPRbuvSwapSwitch");
    return *this;
  }
  Aipp& ax_swap(bool on) {
    check(kilnmdlSetAIPPAxSwapSwitch(handle_, on ? 1 : 0), "kilnmdlSetAIPPAxSwapSwitch");
    return *this;
  }
  // Per image (batch_index); the crop window is at (x, y).
  Aipp& crop(int32_t x, int32_t y, int32_t w, int32_t h, uint64_t batch_index) {
    check(kilnmdlSetAIPPCropParams(handle_, 1, x, y, w, h, batch_index), "kilnmdlSetAIPPCropParams");
    return *this;
  }
  Aipp& resize(int32_t in_w, int32_t in_h, int32_t out_w, int32_t out_h, uint64_t batch_index) {
    check(kilnmdlSetAIPPScfParams(handle_, 1, in_w, in_h, out_w, out_h, batch_index), "kilnmdlSetAIPPScfParams");
    return *this;
  }
  Aipp& padding(int32_t top, int32_t bottom, int32_t left, int32_t right, uint64_t batch_index) {
    check(kilnmdlSetAIPPPaddingParams(handle_, 1, top, bottom, left, right, batch_index),
          "kilnmdlSetAIPPPaddingParams");
    return *this;
  }
  Aipp& mean(const int16_t m[4], uint64_t batch_index) {
    check(kilnmdlSetAIPPDtcPixelMean(handle_, m[0], m[1], m[2], m[3], batch_index), "kilnmdlSetAIPPDtcPixelMean");
    return *this;
  }
  Aipp& min(const float m[4], uint64_t batch_index) {
    check(kilnmdlSetAIPPDtcPixelMin(handle_, m[0], m[1], m[2], m[3], batch_index), "kilnmdlSetAIPPDtcPixelMin");
    return *this;
  }
  Aipp& var_reci(const float v[4], uint64_t batch_index) {
    check(kilnmdlSetAIPPPixelVarReci(handle_, v[0], v[1], v[2], v[3], batch_index), "kilnmdlSetAIPPPixelVarReci");
    return *this;
  }

  // Writes the set into `inputs` for the model's dynamic AIPP: by the parameter input's
  // index (kilnmdlSetInputAIPP) or by the image input's (kilnmdlSetAIPPByInputIndex).
  void set_input(const Model& model, Dataset& inputs, size_t params_index) const {
    check(kilnmdlSetInputAIPP(model.id(), inputs.get(), params_index, handle_), "kilnmdlSetInputAIPP");
  }
  void set_by_input_index(const Model& model, Dataset& inputs, size_t image_index) const {
    check(kilnmdlSetAIPPByInputIndex(model.id(), inputs.get(), image_index, handle_), "kilnmdlSetAIPPByInputIndex");
  }

  kilnmdlAIPP* get() const noexcept { return handle_; }

 private:
  kilnmdlAIPP* handle_ = nullptr;
};

}  // namespace kiln

#endif  // KILN_KILN_HPP_
