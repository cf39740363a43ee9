// The C API of models: model descs, load/unload, kilnmdlQuerySize and sync/async execution
// (include/kiln/kiln.h); tensor descs, data buffers and datasets are in api_dataset.cc.
//
// Model descs are plain host objects: they work with or without kilnInit, and their handles
// are checked against a live set so a destroyed or foreign handle is an error code.
// Everything that touches a model needs kilnInit.
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "profiler/profiler.h"
#include "capi/api_dataset.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "runtime/device.h"
#include "runtime/execution_cancel.h"
#include "runtime/memory.h"
#include "runtime/model_runtime.h"
#include "runtime/stream.h"

struct kilnmdlDesc {
  bool filled = false;
  uint32_t model_id = 0;
  std::vector<kiln::rt::ModelIo> inputs;
  std::vector<kiln::rt::ModelIo> outputs;
};

namespace kiln::rt {

namespace {

HandleSet<kilnmdlDesc>& model_descs() {
  static auto* set = new HandleSet<kilnmdlDesc>();
  return *set;
}

kilnError fail_coded(const char* api, const CodedStatus& s) {
  return fail(s.code, "%s: %s", api, s.status.to_string().c_str());
}

// Releases the models at every kilnFinalize (after the streams are gone, so nothing is
// queued any more).
void ensure_finalize_hook() {
  static std::once_flag once;
  std::call_once(once, [] {
    add_finalize_hook([] {
      for (const std::shared_ptr<Model>& m : ModelTable::get().remove_all()) m->wait_idle();
    });
  });
}

// The device a model is loaded for: the current context's.
kilnError current_device(const char* api, Device** device) {
  Context* ctx = current_context();
  if (!ctx)
    return fail(
        KILN_ERROR_RT_CONTEXT_NULL,
        "%s: no current context on this thread (call kilnrtSetDevice or kilnrtCreateContext first)",
        api);
  *device = &ctx->device();
  return KILN_SUCCESS;
}

kilnError load(const char* api, Expected<model::LoadedModel> loaded,
               std::optional<BufferRef> workspace, uint32_t* model_id) {
  if (!loaded.ok()) {
    Status s = loaded.status();
    return fail(load_error_code(s), "%s: %s", api, s.to_string().c_str());
  }
  Device* device = nullptr;
  if (kilnError e = current_device(api, &device)) return e;
  std::shared_ptr<Model> model;
  CodedStatus s;
  {
    // Kernels are prepared with the device's thread count, as they run: oneDNN fixes a
    // primitive's threads when it creates it, and a primitive made for the process's 2
    // threads, run on a 1-core device (KILN_DEVICES=cpu:2), put a team of 2 spinning
    // threads on one core (MobileNetV2: 288 ms a run instead of 5). The team ends with the
    // load: runs may go to a stream's thread, and its team would otherwise idle beside theirs.
    ComputeScope scope(*device, ComputeScope::Team::kRelease);
    s = Model::create(std::move(loaded).value(), *device, workspace, &model);
  }
  if (!s.ok()) return fail_coded(api, s);
  ensure_finalize_hook();
  *model_id = ModelTable::get().add(std::move(model));
  return KILN_SUCCESS;
}

// The model named by `id`, or null with the error recorded in *error. With `token`, the
// lookup also counts an execution in flight, atomically with respect to kilnmdlUnload.
std::shared_ptr<Model> find_model(const char* api, uint32_t id, kilnError* error,
                                  std::shared_ptr<ExecutionToken>* token = nullptr) {
  std::shared_ptr<Model> m = ModelTable::get().find(id, token);
  if (!m) *error = fail(KILN_ERROR_INVALID_MODEL_ID, "%s: no model with id %u is loaded", api, id);
  return m;
}

// Snapshots the datasets into a request (so a queued execution does not read them again)
// and makes sure the output dataset has a tensor desc per output for the execution to fill.
CodedStatus make_request(const Model& model, const kilnmdlDataset* input, kilnmdlDataset* output,
                         ExecutionRequest* request,
                         std::vector<std::shared_ptr<kilnTensorDesc>>* output_descs) {
  if (!input || !datasets().contains(input))
    return coded(KILN_ERROR_INVALID_PARAM,
                 invalid_argument("the input dataset %p is not a live dataset",
                                  static_cast<const void*>(input)));
  if (!output || !datasets().contains(output))
    return coded(KILN_ERROR_INVALID_PARAM,
                 invalid_argument("the output dataset %p is not a live dataset",
                                  static_cast<void*>(output)));
  // Filled in place, not rebuilt: a request a thread reuses (kilnmdlExecute's) keeps the
  // capacity of its vectors, so a steady state allocates nothing here.
  {
    std::lock_guard lock(input->mutex);
    request->inputs.resize(input->buffers.size());
    for (size_t i = 0; i < input->buffers.size(); ++i) {
      const kilnDataBuffer* b = input->buffers[i];
      if (!data_buffers().contains(b))
        return coded(KILN_ERROR_INVALID_PARAM,
                     invalid_argument("buffer %zu of the input dataset was destroyed", i));
      InputBinding& in = request->inputs[i];
      in.buffer = {b->data, b->size};
      in.dtype = KILN_DT_UNDEFINED;
      if (i < input->descs.size() && input->descs[i]) {
        std::lock_guard desc_lock(owned_desc_mutex());
        if (in.dims)
          in.dims->assign(input->descs[i]->dims.begin(), input->descs[i]->dims.end());
        else
          in.dims = input->descs[i]->dims;
        in.dtype = input->descs[i]->dtype;
      } else {
        in.dims.reset();
      }
    }
  }
  std::lock_guard lock(output->mutex);
  request->outputs.resize(output->buffers.size());
  for (size_t i = 0; i < output->buffers.size(); ++i) {
    const kilnDataBuffer* b = output->buffers[i];
    if (!data_buffers().contains(b))
      return coded(KILN_ERROR_INVALID_PARAM,
                   invalid_argument("buffer %zu of the output dataset was destroyed", i));
    request->outputs[i] = {b->data, b->size};
  }
  output_descs->clear();
  if (output->buffers.size() == model.outputs().size()) {
    output->descs.resize(output->buffers.size());
    for (size_t i = 0; i < output->descs.size(); ++i) {
      std::shared_ptr<kilnTensorDesc>& d = output->descs[i];
      if (!d) {
        const ModelIo& io = model.outputs()[i];
        d = std::make_shared<kilnTensorDesc>();
        d->dtype = io.c_dtype;
        d->dims = io.dims;
        d->format = io.format;
        d->owned_by_dataset = true;
        tensor_descs().add(d.get());
      }
      output_descs->push_back(d);
    }
  }
  return {};
}

void write_output_descs(const Model& model, const std::vector<std::vector<int64_t>>& dims,
                        const std::vector<std::shared_ptr<kilnTensorDesc>>& descs) {
  std::lock_guard lock(owned_desc_mutex());
  for (size_t i = 0; i < descs.size() && i < dims.size(); ++i) {
    descs[i]->dtype = model.outputs()[i].c_dtype;
    descs[i]->dims.assign(dims[i].begin(), dims[i].end());
    descs[i]->format = model.outputs()[i].format;
  }
}

const ModelIo* io_at(const char* api, const kilnmdlDesc* desc, size_t index, bool input) {
  if (!desc || !model_descs().contains(desc)) {
    fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live model desc", api,
         static_cast<const void*>(desc));
    return nullptr;
  }
  const auto& ios = input ? desc->inputs : desc->outputs;
  if (!desc->filled) {
    fail(KILN_ERROR_INVALID_PARAM, "%s: the model desc was not filled by kilnmdlGetDesc", api);
    return nullptr;
  }
  if (index >= ios.size()) {
    fail(KILN_ERROR_INVALID_PARAM, "%s: %s index %zu is out of range (the model has %zu)", api,
         input ? "input" : "output", index, ios.size());
    return nullptr;
  }
  return &ios[index];
}

kilnError get_dims(const char* api, const kilnmdlDesc* desc, size_t index, kilnmdlIODims* dims,
                   bool input) {
  if (!dims) return fail(KILN_ERROR_INVALID_PARAM, "%s: dims is NULL", api);
  const ModelIo* io = io_at(api, desc, index, input);
  if (!io) return KILN_ERROR_INVALID_PARAM;
  std::memset(dims, 0, sizeof(*dims));
  std::strncpy(dims->name, io->name.c_str(), KILN_MAX_TENSOR_NAME_LEN - 1);
  if (!io->has_rank) {
    // Rank not known at compile time: AscendCL's convention, one dim of -2.
    dims->dimCount = 1;
    dims->dims[0] = -2;
    return KILN_SUCCESS;
  }
  dims->dimCount = io->dims.size();
  for (size_t k = 0; k < io->dims.size(); ++k) dims->dims[k] = io->dims[k];
  return KILN_SUCCESS;
}

kilnError index_by_name(const char* api, const kilnmdlDesc* desc, const char* name, size_t* index,
                        bool input) {
  if (!desc || !model_descs().contains(desc))
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live model desc", api,
                static_cast<const void*>(desc));
  if (!name || !index)
    return fail(KILN_ERROR_INVALID_PARAM, "%s: name and index must not be NULL", api);
  const auto& ios = input ? desc->inputs : desc->outputs;
  for (size_t i = 0; i < ios.size(); ++i)
    if (ios[i].name == name) {
      *index = i;
      return KILN_SUCCESS;
    }
  return fail(KILN_ERROR_INVALID_PARAM, "%s: the model has no %s named '%s'", api,
              input ? "input" : "output", name);
}

}  // namespace
}  // namespace kiln::rt

using namespace kiln::rt;  // NOLINT: the C entry points below implement kiln::rt's API

// ---- Model descs -----------------------------------------------------------------------------

kilnmdlDesc* kilnmdlCreateDesc(void) {
  return api_entry_or<kilnmdlDesc*>(
      "kilnmdlCreateDesc", ApiNeeds::kNothing, nullptr, [&]() -> kilnmdlDesc* {
        auto* d = new (std::nothrow) kilnmdlDesc();
        if (!d) {
          fail(KILN_ERROR_BAD_ALLOC, "kilnmdlCreateDesc: out of memory");
          return nullptr;
        }
        model_descs().add(d);
        return d;
      });
}

kilnError kilnmdlDestroyDesc(kilnmdlDesc* modelDesc) {
  return api_entry("kilnmdlDestroyDesc", ApiNeeds::kNothing, [&] {
    if (!modelDesc || !model_descs().remove(modelDesc))
      return fail(KILN_ERROR_INVALID_PARAM, "kilnmdlDestroyDesc: %p is not a live model desc",
                  static_cast<void*>(modelDesc));
    delete modelDesc;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlGetDesc(kilnmdlDesc* modelDesc, uint32_t modelId) {
  const char* api = "kilnmdlGetDesc";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!modelDesc || !model_descs().contains(modelDesc))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live model desc", api,
                  static_cast<void*>(modelDesc));
    kilnError error = KILN_SUCCESS;
    std::shared_ptr<Model> m = find_model(api, modelId, &error);
    if (!m) return error;
    modelDesc->inputs = m->inputs();
    modelDesc->outputs = m->outputs();
    modelDesc->model_id = modelId;
    modelDesc->filled = true;
    return KILN_SUCCESS;
  });
}

size_t kilnmdlGetNumInputs(kilnmdlDesc* modelDesc) {
  return api_entry_or<size_t>("kilnmdlGetNumInputs", ApiNeeds::kNothing, 0, [&]() -> size_t {
    if (!modelDesc || !model_descs().contains(modelDesc)) {
      fail(KILN_ERROR_INVALID_PARAM, "kilnmdlGetNumInputs: %p is not a live model desc",
           static_cast<void*>(modelDesc));
      return 0;
    }
    return modelDesc->inputs.size();
  });
}

size_t kilnmdlGetNumOutputs(kilnmdlDesc* modelDesc) {
  return api_entry_or<size_t>("kilnmdlGetNumOutputs", ApiNeeds::kNothing, 0, [&]() -> size_t {
    if (!modelDesc || !model_descs().contains(modelDesc)) {
      fail(KILN_ERROR_INVALID_PARAM, "kilnmdlGetNumOutputs: %p is not a live model desc",
           static_cast<void*>(modelDesc));
      return 0;
    }
    return modelDesc->outputs.size();
  });
}

size_t kilnmdlGetInputSizeByIndex(kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<size_t>("kilnmdlGetInputSizeByIndex", ApiNeeds::kNothing, 0, [&]() -> size_t {
    const ModelIo* io = io_at("kilnmdlGetInputSizeByIndex", modelDesc, index, true);
    return io ? io->size_bytes : 0;
  });
}

size_t kilnmdlGetOutputSizeByIndex(kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<size_t>(
      "kilnmdlGetOutputSizeByIndex", ApiNeeds::kNothing, 0, [&]() -> size_t {
        const ModelIo* io = io_at("kilnmdlGetOutputSizeByIndex", modelDesc, index, false);
        return io ? io->size_bytes : 0;
      });
}

const char* kilnmdlGetInputNameByIndex(const kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<const char*>(
      "kilnmdlGetInputNameByIndex", ApiNeeds::kNothing, nullptr, [&]() -> const char* {
        const ModelIo* io = io_at("kilnmdlGetInputNameByIndex", modelDesc, index, true);
        return io ? io->name.c_str() : nullptr;
      });
}

const char* kilnmdlGetOutputNameByIndex(const kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<const char*>(
      "kilnmdlGetOutputNameByIndex", ApiNeeds::kNothing, nullptr, [&]() -> const char* {
        const ModelIo* io = io_at("kilnmdlGetOutputNameByIndex", modelDesc, index, false);
        return io ? io->name.c_str() : nullptr;
      });
}

kilnError kilnmdlGetInputIndexByName(const kilnmdlDesc* modelDesc, const char* name,
                                     size_t* index) {
  return api_entry("kilnmdlGetInputIndexByName", ApiNeeds::kNothing, [&] {
    return index_by_name("kilnmdlGetInputIndexByName", modelDesc, name, index, true);
  });
}

kilnError kilnmdlGetOutputIndexByName(const kilnmdlDesc* modelDesc, const char* name,
                                      size_t* index) {
  return api_entry("kilnmdlGetOutputIndexByName", ApiNeeds::kNothing, [&] {
    return index_by_name("kilnmdlGetOutputIndexByName", modelDesc, name, index, false);
  });
}

kilnError kilnmdlGetInputDims(const kilnmdlDesc* modelDesc, size_t index, kilnmdlIODims* dims) {
  return api_entry("kilnmdlGetInputDims", ApiNeeds::kNothing, [&] {
    return get_dims("kilnmdlGetInputDims", modelDesc, index, dims, true);
  });
}

kilnError kilnmdlGetOutputDims(const kilnmdlDesc* modelDesc, size_t index, kilnmdlIODims* dims) {
  return api_entry("kilnmdlGetOutputDims", ApiNeeds::kNothing, [&] {
    return get_dims("kilnmdlGetOutputDims", modelDesc, index, dims, false);
  });
}

kilnDataType kilnmdlGetInputDataType(const kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<kilnDataType>(
      "kilnmdlGetInputDataType", ApiNeeds::kNothing, KILN_DT_UNDEFINED, [&]() -> kilnDataType {
        const ModelIo* io = io_at("kilnmdlGetInputDataType", modelDesc, index, true);
        return io ? io->c_dtype : KILN_DT_UNDEFINED;
      });
}

kilnDataType kilnmdlGetOutputDataType(const kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<kilnDataType>(
      "kilnmdlGetOutputDataType", ApiNeeds::kNothing, KILN_DT_UNDEFINED, [&]() -> kilnDataType {
        const ModelIo* io = io_at("kilnmdlGetOutputDataType", modelDesc, index, false);
        return io ? io->c_dtype : KILN_DT_UNDEFINED;
      });
}

kilnFormat kilnmdlGetInputFormat(const kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<kilnFormat>(
      "kilnmdlGetInputFormat", ApiNeeds::kNothing, KILN_FORMAT_UNDEFINED, [&]() -> kilnFormat {
        const ModelIo* io = io_at("kilnmdlGetInputFormat", modelDesc, index, true);
        return io ? io->format : KILN_FORMAT_UNDEFINED;
      });
}

kilnFormat kilnmdlGetOutputFormat(const kilnmdlDesc* modelDesc, size_t index) {
  return api_entry_or<kilnFormat>(
      "kilnmdlGetOutputFormat", ApiNeeds::kNothing, KILN_FORMAT_UNDEFINED, [&]() -> kilnFormat {
        const ModelIo* io = io_at("kilnmdlGetOutputFormat", modelDesc, index, false);
        return io ? io->format : KILN_FORMAT_UNDEFINED;
      });
}

// ---- Loading ---------------------------------------------------------------------------------

kilnError kilnmdlLoadFromFile(const char* modelPath, uint32_t* modelId) {
  const char* api = "kilnmdlLoadFromFile";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!modelPath || !modelId)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: modelPath and modelId must not be NULL", api);
    return load(api, kiln::model::load_model(modelPath), std::nullopt, modelId);
  });
}

kilnError kilnmdlLoadFromMem(const void* model, size_t modelSize, uint32_t* modelId) {
  const char* api = "kilnmdlLoadFromMem";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!model || !modelSize || !modelId)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: model and modelId must not be NULL, modelSize not 0",
                  api);
    if (std::optional<Allocation> a = MemoryRegistry::get().find(model, 1);
        a && a->kind == MemoryKind::kDevice)
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: model %p is device memory of cpu:%d; the bytes must be in host memory", api,
                  model, a->device);
    return load(api, kiln::model::load_model_from_memory(model, modelSize), std::nullopt, modelId);
  });
}

kilnError kilnmdlLoadFromFileWithMem(const char* modelPath, uint32_t* modelId, void* workPtr,
                                     size_t workSize, void* weightPtr, size_t weightSize) {
  const char* api = "kilnmdlLoadFromFileWithMem";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!modelPath || !modelId)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: modelPath and modelId must not be NULL", api);
    if (weightPtr)
      return fail(KILN_ERROR_FEATURE_UNSUPPORTED,
                  "%s: weightPtr must be NULL: weights stay in the mapped model file, shared by "
                  "every execution",
                  api);
    // As in AscendCL, a NULL workPtr leaves the activation memory to the runtime.
    std::optional<BufferRef> workspace;
    if (workPtr) workspace = BufferRef{workPtr, workSize};
    return load(api, kiln::model::load_model(modelPath), workspace, modelId);
  });
}

kilnError kilnmdlQuerySize(const char* fileName, size_t* workSize, size_t* weightSize) {
  const char* api = "kilnmdlQuerySize";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!fileName || !workSize || !weightSize)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: fileName, workSize and weightSize must not be NULL",
                  api);
    auto loaded = kiln::model::load_model(fileName);
    if (!loaded.ok())
      return fail(load_error_code(loaded.status()), "%s: %s", api,
                  loaded.status().to_string().c_str());
    auto sizes = model_sizes(*loaded);
    if (!sizes.ok())
      return fail(KILN_ERROR_FEATURE_UNSUPPORTED, "%s: %s: %s", api, fileName,
                  sizes.status().to_string().c_str());
    *workSize = sizes->work_bytes;
    *weightSize = sizes->weight_bytes;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlUnload(uint32_t modelId) {
  const char* api = "kilnmdlUnload";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    std::shared_ptr<Model> m = ModelTable::get().remove(modelId);
    if (!m)
      return fail(KILN_ERROR_INVALID_MODEL_ID, "%s: no model with id %u is loaded", api, modelId);
    // New executions no longer find the id; wait for the ones already running or queued.
    m->wait_idle();
    return KILN_SUCCESS;
  });
}

// ---- Execution -------------------------------------------------------------------------------

namespace {

// What a synchronous execution builds, kept per thread so that the vectors keep their capacity
// from one kilnmdlExecute to the next (a steady state then allocates nothing in the API).
struct SyncExecutionScratch {
  ExecutionRequest request;
  std::vector<std::shared_ptr<kilnTensorDesc>> output_descs;
  std::vector<std::vector<int64_t>> dims;
  bool busy = false;
};

}  // namespace

kilnError kilnmdlExecute(uint32_t modelId, const kilnmdlDataset* input, kilnmdlDataset* output) {
  const char* api = "kilnmdlExecute";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    // Keeps the model counted in flight (kilnmdlUnload waits for it) until this call returns.
    std::optional<ExecutionToken> token;
    std::shared_ptr<Model> m = ModelTable::get().find(modelId, &token);
    if (!m) return fail(KILN_ERROR_INVALID_MODEL_ID, "%s: no model with id %u is loaded", api, modelId);
    Context* ctx = current_context();
    if (!ctx)
      return fail(
          KILN_ERROR_RT_CONTEXT_NULL,
          "%s: no current context on this thread (call kilnrtSetDevice or kilnrtCreateContext first)",
          api);
    if (&ctx->device() != &m->device())
      return fail(KILN_ERROR_RESOURCE_NOT_MATCH,
                  "%s: model %u was loaded on %s, the current context is on %s", api, modelId,
                  m->device().name().c_str(), ctx->device().name().c_str());
    // A call made while this thread's scratch is in use (from within an execution) gets its own.
    thread_local SyncExecutionScratch thread_scratch;
    std::optional<SyncExecutionScratch> own;
    SyncExecutionScratch& scratch = thread_scratch.busy ? own.emplace() : thread_scratch;
    scratch.busy = true;
    struct Release {
      SyncExecutionScratch& s;
      ~Release() { s.busy = false; }
    } release{scratch};
    ExecutionRequest& request = scratch.request;
    CodedStatus s = make_request(*m, input, output, &request, &scratch.output_descs);
    if (s.ok()) s = m->bind(request);
    if (!s.ok()) return fail_coded(api, s);
    {
      Device& device = m->device();
      std::lock_guard engine(device.compute_engine());
      ComputeScope scope(device);
      // Runs on this thread: an ExecutionCancelScope the caller opened applies as it is.
      s = m->run(request, &scratch.dims);
    }
    if (!s.ok()) return fail_coded(api, s);
    write_output_descs(*m, scratch.dims, scratch.output_descs);
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlExecuteAsync(uint32_t modelId, const kilnmdlDataset* input, kilnmdlDataset* output,
                              kilnrtStream stream) {
  const char* api = "kilnmdlExecuteAsync";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    kilnError error = KILN_SUCCESS;
    // The token keeps the model alive and counted in flight until the task has run, or was
    // dropped unrun (a stream in error state skips it).
    std::shared_ptr<ExecutionToken> token;
    std::shared_ptr<Model> m = find_model(api, modelId, &error, &token);
    if (!m) return error;
    kiln::Expected<Stream*> resolved = resolve_stream(stream, api);
    if (!resolved.ok()) return fail(resolved.status());
    Stream* s = *resolved;
    if (&s->device() != &m->device())
      return fail(KILN_ERROR_RT_STREAM_CONTEXT, "%s: model %u was loaded on %s, %s is on %s", api,
                  modelId, m->device().name().c_str(), s->name().c_str(), s->device().name().c_str());
    auto request = std::make_shared<ExecutionRequest>();
    auto output_descs = std::make_shared<std::vector<std::shared_ptr<kilnTensorDesc>>>();
    CodedStatus st = make_request(*m, input, output, request.get(), output_descs.get());
    if (st.ok()) st = m->bind(*request);
    if (!st.ok()) return fail_coded(api, st);
    // The submitting thread's cancellation flag goes with the task (execution_cancel.h).
    const std::atomic<bool>* cancel = ExecutionCancelScope::current();
    s->submit(Engine::kCompute, [m, request, output_descs, token, cancel]() -> kiln::Status {
      kiln::Status result;
      try {
        ExecutionCancelScope cancel_scope(cancel);
        std::vector<std::vector<int64_t>> dims;
        CodedStatus r = m->run(*request, &dims);
        if (r.ok()) {
          write_output_descs(*m, dims, *output_descs);
        } else {
          result = std::move(r.status);
          result.add_context("kilnmdlExecuteAsync of model %u", m->id());
        }
      } catch (const std::bad_alloc&) {
        result =
            kiln::resource_exhausted("kilnmdlExecuteAsync of model %u: out of memory", m->id());
      } catch (const std::exception& e) {
        result = kiln::internal_error("kilnmdlExecuteAsync of model %u: unexpected exception: %s",
                                      m->id(), e.what());
      }
      // Released here rather than when the stream drops the task: kilnmdlUnload waits for it.
      token->release();
      return result;
    }, "ModelExecute");
    return KILN_SUCCESS;
  });
}
