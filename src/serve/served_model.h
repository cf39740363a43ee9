// One model of the repository loaded on every device, and the execution of a batch of
// requests on one of them through the public C API (include/kiln/kiln.h): the requests'
// input rows are copied into device memory one after another (concatenated along dim 0
// without a host copy), the model runs once, and each request gets its rows of every output.
#pragma once

#include <atomic>
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

// A batch whose inputs are in device memory, ready to run: its datasets and the buffers
// they point to (one DeviceBuffers set, which must not be reused until the batch is done).
// Made by ServedModel::stage; run by execute_staged, or by launch then finish.
class StagedBatch {
 public:
  StagedBatch() = default;
  ~StagedBatch();
  StagedBatch(const StagedBatch&) = delete;
  StagedBatch& operator=(const StagedBatch&) = delete;

 private:
  friend class ServedModel;
  void reset();  // destroys the datasets and their descriptions
  std::vector<const InferRequest*> requests_;
  std::vector<int64_t> rows_;  // each request's batch
  int64_t total_ = 0;
  kilnmdlDataset* in_ = nullptr;
  kilnmdlDataset* out_ = nullptr;
  std::vector<kilnDataBuffer*> data_buffers_;
  std::vector<kilnTensorDesc*> descs_;
  std::vector<size_t> out_bytes_;
  DeviceBuffers* buffers_ = nullptr;
  Status launched_;  // kilnmdlExecuteAsync's answer
  const std::atomic<bool>* cancel_ = nullptr;  // launch()'s
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

  // execute() in three steps, so that the input copy of the next batch overlaps the current
  // execution (prefetch, scheduler.h). stage() copies the requests' inputs into `buffers`
  // (on the calling thread) and builds the datasets; launch() enqueues the execution on
  // `stream` (of `device`) and returns at once; finish() waits for it and splits the outputs.
  // An execution that failed on the stream (or could not be launched) is run again
  // synchronously by finish(), which grows output buffers a model reports too small and
  // gives the runtime's error code in its message. `requests` must outlive the batch.
  Status stage(DeviceBuffers& buffers, const std::vector<const InferRequest*>& requests, StagedBatch* batch) const;
  // With `cancel`, setting it stops the execution at its next node (runtime/execution_cancel.h);
  // finish() then returns deadline_exceeded without running the batch again. It must
  // outlive the batch.
  void launch(int device, StagedBatch& batch, kilnrtStream stream, const std::atomic<bool>* cancel = nullptr) const;
  Status finish(int device, StagedBatch& batch, kilnrtStream stream, std::vector<std::vector<TensorData>>* outputs) const;

 private:
  ServedModel() = default;
  // Runs a staged batch on the calling thread, growing the output buffers (up to 4 times)
  // when the model reports a larger output than planned.
  Status execute_staged(int device, StagedBatch& batch) const;
  Status add_outputs(StagedBatch& batch) const;
  Status split_outputs(StagedBatch& batch, std::vector<std::vector<TensorData>>* outputs) const;
  ModelFiles files_;
  std::vector<uint8_t> kiln_bytes_;  // a compiled ONNX model, kept while it is loaded
  std::vector<kilnrtContext> contexts_;
  std::vector<uint32_t> ids_;        // per device
  std::vector<TensorInfo> inputs_, outputs_;
};

// Whether two checked requests may share a batch: same dims past dim 0 for every input.
bool same_row_shapes(const InferRequest& a, const InferRequest& b);

}  // namespace kiln::serve
