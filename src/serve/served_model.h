// One model of the repository loaded on every device, and the execution of a batch of
// requests on one of them through the public C API (include/kiln/kiln.h): the requests'
// input rows are copied into device memory one after another (concatenated along dim 0
// without a host copy), the model runs once, and each request gets its rows of every output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "serve/infer_codec.h"
#include "serve/metrics.h"
#include "serve/model_config.h"

namespace kiln::serve {

// An input or output as the model describes it; -1 marks a dim not fixed at compile time.
struct TensorInfo {
  std::string name;
  kilnDataType api_dtype = KILN_DT_UNDEFINED;
  DataType dtype = DataType::kUndefined;
  std::vector<int64_t> dims;
};

// Growable device buffers one worker reuses from batch to batch (any model of its device).
// Not thread-safe: one per worker thread.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  // The `index`-th input or output buffer, at least `bytes` large (grown, never shrunk).
  Expected<void*> input(size_t index, size_t bytes) { return grow(&in_, index, bytes); }
  Expected<void*> output(size_t index, size_t bytes) { return grow(&out_, index, bytes); }

 private:
  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
  };
  static Expected<void*> grow(std::vector<Block>* blocks, size_t index, size_t bytes);
  std::vector<Block> in_, out_;
};

class ServedModel {
 public:
  // Compiles model.onnx (with the config's precision and batch buckets) or reads model.kiln,
  // and loads it on each device whose default context is given. The calling thread's
  // current context is changed.
  static Expected<std::shared_ptr<ServedModel>> load(const ModelFiles& files, const std::vector<kilnrtContext>& devices);
  ~ServedModel();  // unloads from every device (kilnmdlUnload waits for executions in flight)
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  const std::string& name() const { return files_.name; }
  const std::string& version() const { return files_.version; }
  const ModelConfig& config() const { return files_.config; }
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  bool batched() const { return files_.config.max_batch_size > 0; }

  // Checks a request against the model (every input given once, known names, data types,
  // ranks, fixed dims, batch size, requested output names) and puts its inputs in the
  // model's order. invalid_argument naming the tensor at fault.
  Status check_request(InferRequest* request) const;

  // The runtime's memory statistics of this model (rt::Model::stats), summed over its devices.
  ModelMemoryStats memory_stats() const;

  // Runs `requests` (checked, inputs in model order; all with the same dims past dim 0 when
  // more than one) as one batch on `device`, whose context must be current on this thread.
  // (*outputs)[r] gets request r's outputs, in model order.
  Status execute(int device, DeviceBuffers& buffers, const std::vector<const InferRequest*>& requests,
                 std::vector<std::vector<TensorData>>* outputs) const;

 private:
  ServedModel() = default;
  ModelFiles files_;
  std::vector<uint8_t> kiln_bytes_;  // a compiled ONNX model, kept while it is loaded
  std::vector<kilnrtContext> contexts_;
  std::vector<uint32_t> ids_;        // per device
  std::vector<TensorInfo> inputs_, outputs_;
};

// Whether two checked requests may share a batch: same dims past dim 0 for every input.
bool same_row_shapes(const InferRequest& a, const InferRequest& b);

}  // namespace kiln::serve
