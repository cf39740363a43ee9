// One model of the OCR pipeline driven through the public C API (include/kiln/kiln.h), as
// any application would: loaded on a device, executed on a stream with float32 input of any
// shape the model takes (open dims and shape buckets are the runtime's business), output 0
// copied back to the host.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kiln/kiln.h"

namespace kiln::ocr {

// A failed C API call as a Status with the runtime's message.
Status api_status(kilnError code, const char* call);

// Device buffers and datasets one stage reuses from call to call (one per stage thread).
class RunSlot {
 public:
  RunSlot() = default;
  ~RunSlot();
  RunSlot(const RunSlot&) = delete;
  RunSlot& operator=(const RunSlot&) = delete;
  // Device memory of at least `bytes` for the input / output (grown, never shrunk).
  Expected<void*> input(size_t bytes) { return grow(&in_, &in_bytes_, bytes); }
  Expected<void*> output(size_t bytes) { return grow(&out_, &out_bytes_, bytes); }

 private:
  static Expected<void*> grow(void** buffer, size_t* have, size_t bytes);
  void* in_ = nullptr;
  void* out_ = nullptr;
  size_t in_bytes_ = 0, out_bytes_ = 0;
};

class ModelRunner {
 public:
  // Loads on the current context's device.
  static Expected<std::unique_ptr<ModelRunner>> load(const std::string& kiln_path);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Runs the model on `input` (dims `dims`) on `stream` and waits for it; `output` gets
  // output 0 (at most `max_output_elements`, the caller's bound on its size) and
  // `output_dims` its shape. Safe to call from several threads with distinct slots.
  Status run(kilnrtStream stream, RunSlot& slot, const std::vector<float>& input, const std::vector<int64_t>& dims,
             size_t max_output_elements, std::vector<float>* output, std::vector<int64_t>* output_dims) const;

  const std::string& path() const { return path_; }

 private:
  ModelRunner() = default;
  uint32_t id_ = 0;
  bool loaded_ = false;
  std::string path_;
};

}  // namespace kiln::ocr
