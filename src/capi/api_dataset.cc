// The C API's host objects: tensor descs, data buffers and datasets (include/kiln/kiln.h).
// They work with or without kilnInit, and their handles are checked against live sets so a
// destroyed or foreign handle is an error code.
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "capi/api_dataset.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "runtime/model_runtime.h"

namespace kiln::rt {

HandleSet<kilnTensorDesc>& tensor_descs() {
  static auto* set = new HandleSet<kilnTensorDesc>();
  return *set;
}
HandleSet<kilnDataBuffer>& data_buffers() {
  static auto* set = new HandleSet<kilnDataBuffer>();
  return *set;
}
HandleSet<kilnmdlDataset>& datasets() {
  static auto* set = new HandleSet<kilnmdlDataset>();
  return *set;
}

// Guards the contents of dataset-owned descs, which a queued execution writes on its
// stream's thread while the dataset may be read for another submission (output of one
// execution, input of the next). Callers reading them through the kilnGetTensorDesc*
// accessors synchronize with the stream first, as kiln.h says.
std::mutex& owned_desc_mutex() {
  static auto* m = new std::mutex();
  return *m;
}

namespace {

bool valid_c_dtype(int t) {
  return t == KILN_DT_UNDEFINED || from_c_dtype(static_cast<kilnDataType>(t));
}
bool valid_format(int f) { return f >= KILN_FORMAT_UNDEFINED && f <= KILN_FORMAT_NC1HWC0; }

const kilnTensorDesc* live_desc(const char* api, const kilnTensorDesc* desc) {
  if (desc && tensor_descs().contains(desc)) return desc;
  fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live tensor desc", api,
       static_cast<const void*>(desc));
  return nullptr;
}

}  // namespace
}  // namespace kiln::rt

using namespace kiln::rt;  // NOLINT: the C entry points below implement kiln::rt's API

// ---- Tensor descs ----------------------------------------------------------------------------

kilnTensorDesc* kilnCreateTensorDesc(kilnDataType dataType, int numDims, const int64_t* dims,
                                     kilnFormat format) {
  const char* api = "kilnCreateTensorDesc";
  return api_entry_or<kilnTensorDesc*>(api, ApiNeeds::kNothing, nullptr, [&]() -> kilnTensorDesc* {
    if (!valid_c_dtype(dataType)) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: data type %d is not a kilnDataType", api,
           static_cast<int>(dataType));
      return nullptr;
    }
    if (!valid_format(format)) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: format %d is not a kilnFormat", api,
           static_cast<int>(format));
      return nullptr;
    }
    if (numDims < 0 || numDims > KILN_MAX_DIM_CNT || (numDims > 0 && !dims)) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: numDims %d must be in [0, %d] with dims not NULL", api,
           numDims, KILN_MAX_DIM_CNT);
      return nullptr;
    }
    for (int i = 0; i < numDims; ++i)
      if (dims[i] < -2) {
        fail(KILN_ERROR_INVALID_PARAM, "%s: dim %d is %lld (-1: not fixed, -2: rank not known)",
             api, i, static_cast<long long>(dims[i]));
        return nullptr;
      }
    auto* d = new (std::nothrow) kilnTensorDesc();
    if (!d) {
      fail(KILN_ERROR_BAD_ALLOC, "%s: out of memory", api);
      return nullptr;
    }
    d->dtype = dataType;
    d->dims.assign(dims, dims + numDims);
    d->format = format;
    tensor_descs().add(d);
    return d;
  });
}

void kilnDestroyTensorDesc(const kilnTensorDesc* desc) {
  const char* api = "kilnDestroyTensorDesc";
  api_entry_void(api, ApiNeeds::kNothing, [&] {
    if (!desc) return;
    if (!tensor_descs().contains(desc)) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live tensor desc", api,
           static_cast<const void*>(desc));
      return;
    }
    if (desc->owned_by_dataset) {
      fail(KILN_ERROR_INVALID_PARAM,
           "%s: %p belongs to its dataset (kilnmdlGetDatasetTensorDesc); it goes with it", api,
           static_cast<const void*>(desc));
      return;
    }
    if (tensor_descs().remove(desc)) delete desc;
  });
}

kilnDataType kilnGetTensorDescType(const kilnTensorDesc* desc) {
  return api_entry_or<kilnDataType>(
      "kilnGetTensorDescType", ApiNeeds::kNothing, KILN_DT_UNDEFINED, [&]() -> kilnDataType {
        return live_desc("kilnGetTensorDescType", desc) ? desc->dtype : KILN_DT_UNDEFINED;
      });
}

kilnFormat kilnGetTensorDescFormat(const kilnTensorDesc* desc) {
  return api_entry_or<kilnFormat>(
      "kilnGetTensorDescFormat", ApiNeeds::kNothing, KILN_FORMAT_UNDEFINED, [&]() -> kilnFormat {
        return live_desc("kilnGetTensorDescFormat", desc) ? desc->format : KILN_FORMAT_UNDEFINED;
      });
}

size_t kilnGetTensorDescNumDims(const kilnTensorDesc* desc) {
  return api_entry_or<size_t>("kilnGetTensorDescNumDims", ApiNeeds::kNothing, 0, [&]() -> size_t {
    return live_desc("kilnGetTensorDescNumDims", desc) ? desc->dims.size() : 0;
  });
}

kilnError kilnGetTensorDescDimV2(const kilnTensorDesc* desc, size_t index, int64_t* dimSize) {
  const char* api = "kilnGetTensorDescDimV2";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    if (!live_desc(api, desc)) return KILN_ERROR_INVALID_PARAM;
    if (!dimSize) return fail(KILN_ERROR_INVALID_PARAM, "%s: dimSize is NULL", api);
    if (index >= desc->dims.size())
      return fail(KILN_ERROR_INVALID_PARAM, "%s: index %zu is out of range (the desc has %zu dims)",
                  api, index, desc->dims.size());
    *dimSize = desc->dims[index];
    return KILN_SUCCESS;
  });
}

size_t kilnGetTensorDescElementCount(const kilnTensorDesc* desc) {
  const char* api = "kilnGetTensorDescElementCount";
  return api_entry_or<size_t>(api, ApiNeeds::kNothing, 0, [&]() -> size_t {
    if (!live_desc(api, desc)) return 0;
    size_t n = 1;
    for (int64_t d : desc->dims) {
      if (d < 0) {
        fail(KILN_ERROR_INVALID_PARAM, "%s: the desc has dims not fixed", api);
        return 0;
      }
      if (d != 0 && n > SIZE_MAX / static_cast<size_t>(d)) {
        fail(KILN_ERROR_INVALID_PARAM, "%s: the element count overflows", api);
        return 0;
      }
      n *= static_cast<size_t>(d);
    }
    return n;
  });
}

size_t kilnGetTensorDescSize(const kilnTensorDesc* desc) {
  const char* api = "kilnGetTensorDescSize";
  return api_entry_or<size_t>(api, ApiNeeds::kNothing, 0, [&]() -> size_t {
    if (!live_desc(api, desc)) return 0;
    std::optional<kiln::DataType> t = from_c_dtype(desc->dtype);
    if (!t || *t == kiln::DataType::kString) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: data type %d has no fixed element size", api,
           static_cast<int>(desc->dtype));
      return 0;
    }
    bool has_zero = false;
    for (int64_t d : desc->dims) has_zero |= d == 0;
    size_t n = kilnGetTensorDescElementCount(desc);
    if (n == 0 && !has_zero) return 0;  // not fixed, or overflow: message recorded
    size_t elem = kiln::dtype_bytes(*t, 1);
    if (n > SIZE_MAX / elem) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: the size overflows", api);
      return 0;
    }
    return n * elem;
  });
}

// ---- Data buffers ----------------------------------------------------------------------------

kilnDataBuffer* kilnCreateDataBuffer(void* data, size_t size) {
  return api_entry_or<kilnDataBuffer*>(
      "kilnCreateDataBuffer", ApiNeeds::kNothing, nullptr, [&]() -> kilnDataBuffer* {
        if (!data && size) {
          fail(KILN_ERROR_INVALID_PARAM, "kilnCreateDataBuffer: data is NULL with size %zu", size);
          return nullptr;
        }
        auto* b = new (std::nothrow) kilnDataBuffer{data, size};
        if (!b) {
          fail(KILN_ERROR_BAD_ALLOC, "kilnCreateDataBuffer: out of memory");
          return nullptr;
        }
        data_buffers().add(b);
        return b;
      });
}

kilnError kilnDestroyDataBuffer(const kilnDataBuffer* dataBuffer) {
  return api_entry("kilnDestroyDataBuffer", ApiNeeds::kNothing, [&] {
    if (!dataBuffer || !data_buffers().remove(dataBuffer))
      return fail(KILN_ERROR_INVALID_PARAM, "kilnDestroyDataBuffer: %p is not a live data buffer",
                  static_cast<const void*>(dataBuffer));
    delete dataBuffer;
    return KILN_SUCCESS;
  });
}

kilnError kilnUpdateDataBuffer(kilnDataBuffer* dataBuffer, void* data, size_t size) {
  const char* api = "kilnUpdateDataBuffer";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    if (!dataBuffer || !data_buffers().contains(dataBuffer))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live data buffer", api,
                  static_cast<void*>(dataBuffer));
    if (!data && size)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: data is NULL with size %zu", api, size);
    dataBuffer->data = data;
    dataBuffer->size = size;
    return KILN_SUCCESS;
  });
}

void* kilnGetDataBufferAddr(const kilnDataBuffer* dataBuffer) {
  return api_entry_or<void*>("kilnGetDataBufferAddr", ApiNeeds::kNothing, nullptr, [&]() -> void* {
    if (!dataBuffer || !data_buffers().contains(dataBuffer)) {
      fail(KILN_ERROR_INVALID_PARAM, "kilnGetDataBufferAddr: %p is not a live data buffer",
           static_cast<const void*>(dataBuffer));
      return nullptr;
    }
    return dataBuffer->data;
  });
}

size_t kilnGetDataBufferSizeV2(const kilnDataBuffer* dataBuffer) {
  return api_entry_or<size_t>("kilnGetDataBufferSizeV2", ApiNeeds::kNothing, 0, [&]() -> size_t {
    if (!dataBuffer || !data_buffers().contains(dataBuffer)) {
      fail(KILN_ERROR_INVALID_PARAM, "kilnGetDataBufferSizeV2: %p is not a live data buffer",
           static_cast<const void*>(dataBuffer));
      return 0;
    }
    return dataBuffer->size;
  });
}

// ---- Datasets --------------------------------------------------------------------------------

kilnmdlDataset* kilnmdlCreateDataset(void) {
  return api_entry_or<kilnmdlDataset*>(
      "kilnmdlCreateDataset", ApiNeeds::kNothing, nullptr, [&]() -> kilnmdlDataset* {
        auto* d = new (std::nothrow) kilnmdlDataset();
        if (!d) {
          fail(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDataset: out of memory");
          return nullptr;
        }
        datasets().add(d);
        return d;
      });
}

kilnError kilnmdlDestroyDataset(const kilnmdlDataset* dataset) {
  return api_entry("kilnmdlDestroyDataset", ApiNeeds::kNothing, [&] {
    if (!dataset || !datasets().remove(dataset))
      return fail(KILN_ERROR_INVALID_PARAM, "kilnmdlDestroyDataset: %p is not a live dataset",
                  static_cast<const void*>(dataset));
    // Its descs stop being handles; a queued execution may still hold (and write) them.
    for (const auto& d : dataset->descs)
      if (d) tensor_descs().remove(d.get());
    delete dataset;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlAddDatasetBuffer(kilnmdlDataset* dataset, kilnDataBuffer* dataBuffer) {
  const char* api = "kilnmdlAddDatasetBuffer";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    if (!dataset || !datasets().contains(dataset))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live dataset", api,
                  static_cast<void*>(dataset));
    if (!dataBuffer || !data_buffers().contains(dataBuffer))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live data buffer", api,
                  static_cast<void*>(dataBuffer));
    std::lock_guard lock(dataset->mutex);
    {
      dataset->buffers.push_back(dataBuffer);
    }
    return KILN_SUCCESS;
  });
}

size_t kilnmdlGetDatasetNumBuffers(const kilnmdlDataset* dataset) {
  return api_entry_or<size_t>(
      "kilnmdlGetDatasetNumBuffers", ApiNeeds::kNothing, 0, [&]() -> size_t {
        if (!dataset || !datasets().contains(dataset)) {
          fail(KILN_ERROR_INVALID_PARAM, "kilnmdlGetDatasetNumBuffers: %p is not a live dataset",
               static_cast<const void*>(dataset));
          return 0;
        }
        std::lock_guard lock(dataset->mutex);
        return dataset->buffers.size();
      });
}

kilnDataBuffer* kilnmdlGetDatasetBuffer(const kilnmdlDataset* dataset, size_t index) {
  const char* api = "kilnmdlGetDatasetBuffer";
  return api_entry_or<kilnDataBuffer*>(api, ApiNeeds::kNothing, nullptr, [&]() -> kilnDataBuffer* {
    if (!dataset || !datasets().contains(dataset)) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live dataset", api,
           static_cast<const void*>(dataset));
      return nullptr;
    }
    std::lock_guard lock(dataset->mutex);
    if (index >= dataset->buffers.size()) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: index %zu is out of range (the dataset has %zu buffers)",
           api, index, dataset->buffers.size());
      return nullptr;
    }
    return dataset->buffers[index];
  });
}

kilnError kilnmdlSetDatasetTensorDesc(kilnmdlDataset* dataset, kilnTensorDesc* tensorDesc,
                                      size_t index) {
  const char* api = "kilnmdlSetDatasetTensorDesc";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    if (!dataset || !datasets().contains(dataset))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live dataset", api,
                  static_cast<void*>(dataset));
    if (!live_desc(api, tensorDesc)) return KILN_ERROR_INVALID_PARAM;
    for (size_t k = 0; k < tensorDesc->dims.size(); ++k)
      if (tensorDesc->dims[k] < 0)
        return fail(KILN_ERROR_INVALID_PARAM,
                    "%s: dim %zu of the desc is %lld; an actual shape has every dim >= 0", api, k,
                    static_cast<long long>(tensorDesc->dims[k]));
    std::lock_guard lock(dataset->mutex);
    if (index >= dataset->buffers.size())
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: index %zu is out of range (the dataset has %zu buffers)", api, index,
                  dataset->buffers.size());
    {
      if (dataset->descs.size() < dataset->buffers.size())
        dataset->descs.resize(dataset->buffers.size());
      std::shared_ptr<kilnTensorDesc>& slot = dataset->descs[index];
      if (!slot) {
        slot = std::make_shared<kilnTensorDesc>();
        slot->owned_by_dataset = true;
        tensor_descs().add(slot.get());
      }
      std::lock_guard desc_lock(owned_desc_mutex());
      slot->dtype = tensorDesc->dtype;
      slot->dims = tensorDesc->dims;
      slot->format = tensorDesc->format;
    }
    return KILN_SUCCESS;
  });
}

kilnTensorDesc* kilnmdlGetDatasetTensorDesc(const kilnmdlDataset* dataset, size_t index) {
  const char* api = "kilnmdlGetDatasetTensorDesc";
  return api_entry_or<kilnTensorDesc*>(api, ApiNeeds::kNothing, nullptr, [&]() -> kilnTensorDesc* {
    if (!dataset || !datasets().contains(dataset)) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live dataset", api,
           static_cast<const void*>(dataset));
      return nullptr;
    }
    std::lock_guard lock(dataset->mutex);
    if (index >= dataset->buffers.size()) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: index %zu is out of range (the dataset has %zu buffers)",
           api, index, dataset->buffers.size());
      return nullptr;
    }
    if (index >= dataset->descs.size() || !dataset->descs[index]) {
      fail(KILN_ERROR_INVALID_PARAM,
           "%s: buffer %zu has no tensor desc (none set, and no execution wrote one)", api, index);
      return nullptr;
    }
    return dataset->descs[index].get();
  });
}
