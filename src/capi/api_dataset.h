// The C API's host objects that more than one family of entry points reads: tensor descs,
// data buffers and datasets (defined with their entry points in api_dataset.cc; AIPP's in
// api_aipp.cc write into dataset buffers), the live-handle sets that check them, and the
// prologue of an entry point that needs kilnInit.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "kiln/kiln.h"
#include "capi/api_internal.h"

struct kilnTensorDesc {
  kilnDataType dtype = KILN_DT_UNDEFINED;
  std::vector<int64_t> dims;
  kilnFormat format = KILN_FORMAT_UNDEFINED;
  bool owned_by_dataset = false;  // kilnmdlGetDatasetTensorDesc hands these out
};

struct kilnDataBuffer {
  void* data = nullptr;
  size_t size = 0;
};

struct kilnmdlDataset {
  mutable std::mutex mutex;  // executions on stream threads update `descs`
  std::vector<kilnDataBuffer*> buffers;
  // Per buffer index: the shape set by kilnmdlSetDatasetTensorDesc (inputs) or written by
  // an execution (outputs). Shared with queued executions, which write them when they run.
  std::vector<std::shared_ptr<kilnTensorDesc>> descs;
};

namespace kiln::rt {

HandleSet<kilnTensorDesc>& tensor_descs();
HandleSet<kilnDataBuffer>& data_buffers();
HandleSet<kilnmdlDataset>& datasets();
// Guards the contents of dataset-owned descs (a queued execution writes them on its stream's
// thread while the dataset may be read for another submission).
std::mutex& owned_desc_mutex();

}  // namespace kiln::rt
