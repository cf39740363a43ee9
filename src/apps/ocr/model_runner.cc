#include "apps/ocr/model_runner.h"

#include <algorithm>

namespace kiln::ocr {

Status api_status(kilnError code, const char* call) {
  const char* message = kilnGetRecentErrMsg();
  if (message && *message) return internal_error("%s", message);
  return internal_error("%s failed with error %d", call, static_cast<int>(code));
}

#define OCR_API_CHECK(call)                                  \
  do {                                                       \
    kilnError ocr_api_code_ = (call);                        \
    if (ocr_api_code_ != KILN_SUCCESS) return api_status(ocr_api_code_, #call); \
  } while (0)

RunSlot::~RunSlot() {
  if (in_) kilnrtFree(in_);
  if (out_) kilnrtFree(out_);
}

Expected<void*> RunSlot::grow(void** buffer, size_t* have, size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  if (*have >= bytes) return *buffer;
  if (*buffer) kilnrtFree(*buffer);
  *buffer = nullptr;
  *have = 0;
  // Some headroom, so that growing batches do not reallocate at every step.
  size_t want = bytes + bytes / 4;
  OCR_API_CHECK(kilnrtMalloc(buffer, want, KILN_MEM_MALLOC_HUGE_FIRST));
  *have = want;
  return *buffer;
}

Expected<std::unique_ptr<ModelRunner>> ModelRunner::load(const std::string& kiln_path) {
  std::unique_ptr<ModelRunner> runner(new ModelRunner());
  OCR_API_CHECK(kilnmdlLoadFromFile(kiln_path.c_str(), &runner->id_));
  runner->loaded_ = true;
  runner->path_ = kiln_path;
  return runner;
}

ModelRunner::~ModelRunner() {
  if (loaded_) kilnmdlUnload(id_);
}

namespace {

// The datasets and descriptors of one call, destroyed however it ends.
struct CallResources {
  kilnmdlDataset* inputs = nullptr;
  kilnmdlDataset* outputs = nullptr;
  kilnDataBuffer* in_buffer = nullptr;
  kilnDataBuffer* out_buffer = nullptr;
  kilnTensorDesc* in_desc = nullptr;
  ~CallResources() {
    if (inputs) kilnmdlDestroyDataset(inputs);
    if (outputs) kilnmdlDestroyDataset(outputs);
    if (in_buffer) kilnDestroyDataBuffer(in_buffer);
    if (out_buffer) kilnDestroyDataBuffer(out_buffer);
    if (in_desc) kilnDestroyTensorDesc(in_desc);
  }
};

}  // namespace

Status ModelRunner::run(kilnrtStream stream, RunSlot& slot, const std::vector<float>& input,
                        const std::vector<int64_t>& dims, size_t max_output_elements, std::vector<float>* output,
                        std::vector<int64_t>* output_dims) const {
  size_t in_bytes = input.size() * sizeof(float);
  size_t out_bytes = max_output_elements * sizeof(float);
  KILN_ASSIGN_OR_RETURN(void* in_device, slot.input(in_bytes));
  KILN_ASSIGN_OR_RETURN(void* out_device, slot.output(out_bytes));
  OCR_API_CHECK(kilnrtMemcpyAsync(in_device, in_bytes, input.data(), in_bytes, KILN_MEMCPY_HOST_TO_DEVICE, stream));

  CallResources r;
  r.inputs = kilnmdlCreateDataset();
  r.outputs = kilnmdlCreateDataset();
  r.in_buffer = kilnCreateDataBuffer(in_device, in_bytes);
  r.out_buffer = kilnCreateDataBuffer(out_device, out_bytes);
  r.in_desc = kilnCreateTensorDesc(KILN_FLOAT, static_cast<int>(dims.size()), dims.data(), KILN_FORMAT_NCHW);
  if (!r.inputs || !r.outputs || !r.in_buffer || !r.out_buffer || !r.in_desc)
    return resource_exhausted("%s: cannot create the datasets of a run", path_.c_str());
  OCR_API_CHECK(kilnmdlAddDatasetBuffer(r.inputs, r.in_buffer));
  OCR_API_CHECK(kilnmdlAddDatasetBuffer(r.outputs, r.out_buffer));
  OCR_API_CHECK(kilnmdlSetDatasetTensorDesc(r.inputs, r.in_desc, 0));
  OCR_API_CHECK(kilnmdlExecuteAsync(id_, r.inputs, r.outputs, stream));
  OCR_API_CHECK(kilnrtSynchronizeStream(stream));

  kilnTensorDesc* out_desc = kilnmdlGetDatasetTensorDesc(r.outputs, 0);
  if (!out_desc) return internal_error("%s: the run reported no output shape", path_.c_str());
  output_dims->clear();
  size_t elements = 1;
  for (size_t i = 0; i < kilnGetTensorDescNumDims(out_desc); ++i) {
    int64_t d = 0;
    OCR_API_CHECK(kilnGetTensorDescDimV2(out_desc, i, &d));
    output_dims->push_back(d);
    elements *= static_cast<size_t>(d);
  }
  if (elements > max_output_elements)
    return internal_error("%s: output of %zu elements exceeds the %zu expected", path_.c_str(), elements,
                          max_output_elements);
  output->resize(elements);
  OCR_API_CHECK(kilnrtMemcpy(output->data(), elements * sizeof(float), out_device, elements * sizeof(float),
                             KILN_MEMCPY_DEVICE_TO_HOST));
  return ok_status();
}

}  // namespace kiln::ocr
