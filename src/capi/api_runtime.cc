// C API of the runtime core: kilnInit/kilnFinalize, version and run mode, devices,
// contexts, streams, events, host callbacks and report threads, error messages, and
// data type sizes.
#include <pthread.h>

#include <cstdlib>
#include <new>
#include <shared_mutex>
#include <string>

#include "core/env_knobs.h"
#include "core/logging.h"
#include "kiln/kiln.h"
#include "profiler/profiler.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"

namespace kiln::rt {
namespace {

kilnError null_param(const char* api, const char* name) {
  return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, name);
}

kilnError no_context(const char* api) {
  return fail(KILN_ERROR_RT_CONTEXT_NULL,
              "%s: this thread has no current context (call kilnrtSetDevice or kilnrtCreateContext)",
              api);
}

kilnError bad_device(const RuntimeState& state, const char* api, int32_t id) {
  return fail(KILN_ERROR_INVALID_DEVICE, "%s: device %d does not exist (%d device%s: 0..%d)", api,
              id, state.devices->count(), state.devices->count() == 1 ? "" : "s",
              state.devices->count() - 1);
}

// A timeout argument in ms: -1 waits forever, anything below is an error.
bool bad_timeout(const char* api, int32_t timeout, kilnError* error) {
  if (timeout >= -1) return false;
  *error = fail(KILN_ERROR_INVALID_PARAM, "%s: timeout %d ms is invalid (-1 waits forever)", api,
                timeout);
  return true;
}

// The live event a handle names, or null with the error recorded in `error`.
Event* resolve_event(const RuntimeState& state, kilnrtEvent event, const char* api, const char* name,
                     kilnError* error) {
  if (event == nullptr) {
    *error = null_param(api, name);
    return nullptr;
  }
  if (!state.events.contains(event)) {
    *error = fail(KILN_ERROR_INVALID_RESOURCE_HANDLE,
                  "%s: %s %p is not a live event (destroyed, or not an event)", api, name, event);
    return nullptr;
  }
  return static_cast<Event*>(event);
}

// The helpers below run inside the entry guard (runtime_lock() held, runtime initialized).

// The error code of a stream synchronize: a wait that ran out of time, or the failure of
// a task since the last synchronize.
kilnError synchronize_stream(const char* api, Stream& stream, int64_t timeout_ms) {
  if (stream.on_worker_thread()) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: called from a task of %s, which would wait for itself",
                api, stream.name().c_str());
  }
  Status waited = stream.wait_idle(timeout_ms);
  if (!waited.ok()) {
    return fail(waited.code() == StatusCode::kDeadlineExceeded ? KILN_ERROR_RT_TIMEOUT
                                                               : KILN_ERROR_FAILURE,
                "%s: %s", api, waited.to_string().c_str());
  }
  Status error = stream.take_error();
  if (!error.ok()) {
    return fail(KILN_ERROR_RT_TASK_FAILED, "%s: %s", api, error.to_string().c_str());
  }
  return KILN_SUCCESS;
}

// KILN_DEVICES, else one device.
Expected<DeviceConfig> config_from_env() {
  const char* env = std::getenv("KILN_DEVICES");
  if (env == nullptr || *env == '\0') return DeviceConfig{};
  Expected<DeviceConfig> config = parse_device_spec(env);
  if (!config.ok()) return std::move(config).take_status().add_context("KILN_DEVICES");
  return config;
}

// Waits for every stream of every device; failures are dropped (nobody is left to
// report them to).
void drain_devices(RuntimeState& state) {
  for (int i = 0; i < state.devices->count(); ++i) {
    state.devices->device(i)->synchronize(-1).ignore_error();
  }
}

kilnError synchronize_device(const char* api, int32_t timeout) {
  kilnError error;
  if (bad_timeout(api, timeout, &error)) return error;
  Context* context = current_context();
  if (context == nullptr) return no_context(api);
  if (Stream* own = Stream::current(); own != nullptr && &own->device() == &context->device()) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: called from a task of %s, which would wait for itself",
                api, own->name().c_str());
  }
  Status s = context->device().synchronize(timeout);
  if (s.ok()) return KILN_SUCCESS;
  return fail(s.code() == StatusCode::kDeadlineExceeded ? KILN_ERROR_RT_TIMEOUT
                                                        : KILN_ERROR_RT_TASK_FAILED,
              "%s: %s", api, s.to_string().c_str());
}

kilnError synchronize_event(const RuntimeState* state, const char* api, kilnrtEvent event,
                            int32_t timeout) {
  kilnError error;
  if (bad_timeout(api, timeout, &error)) return error;
  Event* e = resolve_event(*state, event, api, "event", &error);
  if (e == nullptr) return error;
  Status s = e->synchronize(timeout);
  if (!s.ok()) return fail(KILN_ERROR_RT_TIMEOUT, "%s: %s", api, s.to_string().c_str());
  return KILN_SUCCESS;
}

// kilnrtRecordEvent and kilnrtResetEvent: resolve the event and the stream, then enqueue
// `op` (a record or a reset) of the event on the stream.
template <typename Op>
kilnError enqueue_event_op(const RuntimeState* state, const char* api, kilnrtEvent event,
                           kilnrtStream stream, Op op) {
  kilnError error;
  Event* e = resolve_event(*state, event, api, "event", &error);
  if (e == nullptr) return error;
  Expected<Stream*> s = resolve_stream(stream, api);
  if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  op(*e, **s);
  return KILN_SUCCESS;
}

}  // namespace
}  // namespace kiln::rt

using kiln::Expected;
using kiln::Status;
using kiln::StatusCode;
using kiln::rt::api_entry;
using kiln::rt::api_entry_or;
using kiln::rt::ApiNeeds;
using kiln::rt::Context;
using kiln::rt::Device;
using kiln::rt::Event;
using kiln::rt::fail;
using kiln::rt::runtime_lock;
using kiln::rt::runtime_state;
using kiln::rt::RuntimeState;
using kiln::rt::Stream;

extern "C" {

// ---- Errors and data types ------------------------------------------------------------

const char* kilnGetRecentErrMsg(void) { return kiln::rt::recent_error_message(); }

size_t kilnDataTypeSize(kilnDataType dataType) {
  switch (dataType) {
    case KILN_BOOL:
    case KILN_INT8:
    case KILN_UINT8:
      return 1;
    case KILN_FLOAT16:
    case KILN_BF16:
    case KILN_INT16:
    case KILN_UINT16:
      return 2;
    case KILN_FLOAT:
    case KILN_INT32:
    case KILN_UINT32:
      return 4;
    case KILN_INT64:
    case KILN_UINT64:
    case KILN_DOUBLE:
    case KILN_COMPLEX64:
      return 8;
    case KILN_COMPLEX128:
      return 16;
    case KILN_STRING:
    case KILN_DT_UNDEFINED:
      return 0;
  }
  return 0;
}

// ---- Initialisation ----------------------------------------------------------------------

kilnError kilnInit(const char* configPath) {
  static const char* const kApi = "kilnInit";
  // No lock from the guard: this function takes runtime_lock() itself.
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    // A misspelt KILN_* variable or a value it does not take is named once per process
    // (core/env_knobs.h), not silently ignored.
    kiln::warn_about_environment("kiln");
    // KILN_PROFILE=DIR profiles the whole process from its first kilnInit.
    kiln::profiler::start_env_session();
    std::unique_lock lock(runtime_lock());
    if (runtime_state() != nullptr) {
      return fail(KILN_ERROR_REPEAT_INITIALIZE,
                  "%s: the runtime is already initialized (call kilnFinalize first)", kApi);
    }
    Expected<kiln::rt::DeviceConfig> config =
        configPath ? kiln::rt::read_device_config(configPath) : kiln::rt::config_from_env();
    if (!config.ok()) {
      Status s = config.status();
      kilnError code = s.code() == StatusCode::kNotFound   ? KILN_ERROR_INVALID_FILE
                       : s.code() == StatusCode::kDataLoss ? KILN_ERROR_PARSE_FILE
                                                           : KILN_ERROR_INVALID_PARAM;
      return fail(code, "%s: %s", kApi, s.to_string().c_str());
    }
    auto devices = kiln::rt::DeviceManager::create(*config);
    if (!devices.ok()) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s", kApi, devices.status().to_string().c_str());
    }
    auto state = std::make_unique<RuntimeState>();
    state->devices = std::move(*devices);
    size_t n = static_cast<size_t>(state->devices->count());
    state->default_contexts.resize(n);
    state->set_device_counts.assign(n, 0);
    kiln::rt::set_event_waits_abandoned(false);
    kiln::rt::reopen_reports();
    kiln::rt::set_runtime_state(state.release());
    return KILN_SUCCESS;
  });
}

kilnError kilnFinalize(void) {
  static const char* const kApi = "kilnFinalize";
  // No lock from the guard: this function takes runtime_lock() itself.
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    // First, with the lock shared, let all work finish: host callbacks still running may
    // call the API themselves.
    {
      std::shared_lock lock(runtime_lock());
      RuntimeState* state = runtime_state();
      if (state == nullptr) return kiln::rt::not_initialized(kApi);
      if (Stream* s = Stream::current()) {
        return fail(KILN_ERROR_INVALID_PARAM,
                    "%s: called from a task of %s; kilnFinalize waits for every stream, that one "
                    "included",
                    kApi, s->name().c_str());
      }
      if (state->finalizing.exchange(true)) {
        return fail(KILN_ERROR_UNINITIALIZE, "%s: another thread is finalizing the runtime", kApi);
      }
      // Callbacks waiting for report threads run here; later ones run on stream threads.
      kiln::rt::close_reports();
      kiln::rt::drain_devices(*state);
    }
    std::unique_lock lock(runtime_lock());
    RuntimeState* state = runtime_state();
    kiln::rt::set_event_waits_abandoned(true);
    std::vector<std::unique_ptr<Context>> contexts;
    std::vector<std::unique_ptr<Event>> events;
    {
      std::lock_guard objects(state->objects_mutex);
      contexts.swap(state->user_contexts);
      events.swap(state->events_owned);
    }
    {
      std::lock_guard defaults(state->default_contexts_mutex);
      for (auto& c : state->default_contexts) {
        if (c) contexts.push_back(std::move(c));
      }
    }
    for (auto& c : contexts) {
      state->contexts.remove(c.get());
      c.reset();  // destroys its streams, each waiting for its tasks
    }
    for (auto& e : events) state->events.remove(e.get());
    events.clear();
    kiln::rt::run_finalize_hooks();
    kiln::rt::set_runtime_state(nullptr);
    kiln::rt::set_current_context(nullptr);
    delete state;  // the devices and their memory
    // KILN_PROFILE: everything so far is written now (and again, with more, at exit).
    Status written = kiln::profiler::flush_env_session();
    if (!written.ok()) KILN_LOG(kWarning, "KILN_PROFILE: %s", written.to_string().c_str());
    return KILN_SUCCESS;
  });
}

kilnError kilnrtGetVersion(int32_t* majorVersion, int32_t* minorVersion, int32_t* patchVersion) {
  static const char* const kApi = "kilnrtGetVersion";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    if (majorVersion == nullptr) return kiln::rt::null_param(kApi, "majorVersion");
    if (minorVersion == nullptr) return kiln::rt::null_param(kApi, "minorVersion");
    if (patchVersion == nullptr) return kiln::rt::null_param(kApi, "patchVersion");
    *majorVersion = KILN_VERSION_MAJOR;
    *minorVersion = KILN_VERSION_MINOR;
    *patchVersion = KILN_VERSION_PATCH;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtGetRunMode(kilnrtRunMode* runMode) {
  static const char* const kApi = "kilnrtGetRunMode";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    if (runMode == nullptr) return kiln::rt::null_param(kApi, "runMode");
    *runMode = KILN_HOST;
    return KILN_SUCCESS;
  });
}

// ---- Devices and contexts ------------------------------------------------------------------

kilnError kilnrtGetDeviceCount(uint32_t* count) {
  static const char* const kApi = "kilnrtGetDeviceCount";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (count == nullptr) return kiln::rt::null_param(kApi, "count");
    *count = static_cast<uint32_t>(state->devices->count());
    return KILN_SUCCESS;
  });
}

kilnError kilnrtSetDevice(int32_t deviceId) {
  static const char* const kApi = "kilnrtSetDevice";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    Device* device = state->devices->device(deviceId);
    if (device == nullptr) return kiln::rt::bad_device(*state, kApi, deviceId);
    {
      std::lock_guard defaults(state->default_contexts_mutex);
      auto& context = state->default_contexts[static_cast<size_t>(deviceId)];
      if (!context) {
        context = std::make_unique<Context>(*device, /*is_default=*/true);
        state->contexts.add(context.get());
      }
      ++state->set_device_counts[static_cast<size_t>(deviceId)];
      kiln::rt::set_current_context(context.get());
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtGetDevice(int32_t* deviceId) {
  static const char* const kApi = "kilnrtGetDevice";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (deviceId == nullptr) return kiln::rt::null_param(kApi, "deviceId");
    Context* context = kiln::rt::current_context();
    if (context == nullptr) return kiln::rt::no_context(kApi);
    *deviceId = context->device().id();
    return KILN_SUCCESS;
  });
}

kilnError kilnrtResetDevice(int32_t deviceId) {
  static const char* const kApi = "kilnrtResetDevice";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (state->devices->device(deviceId) == nullptr)
      return kiln::rt::bad_device(*state, kApi, deviceId);
    std::unique_ptr<Context> released;
    {
      std::lock_guard defaults(state->default_contexts_mutex);
      size_t id = static_cast<size_t>(deviceId);
      if (state->set_device_counts[id] == 0) {
        return fail(
            KILN_ERROR_INVALID_DEVICE,
            "%s: device %d is not set (every kilnrtSetDevice is already matched by a reset)", kApi,
            deviceId);
      }
      if (state->set_device_counts[id] == 1) {
        if (state->default_contexts[id]->on_stream_thread()) {
          return fail(KILN_ERROR_INVALID_PARAM,
                      "%s: called from a task of a stream of device %d's default context, which "
                      "would wait for itself",
                      kApi, deviceId);
        }
        released = std::move(state->default_contexts[id]);
        state->contexts.remove(released.get());
      }
      --state->set_device_counts[id];
    }
    if (released) {
      if (kiln::rt::current_context() == nullptr) kiln::rt::set_current_context(nullptr);
      released.reset();  // waits for its streams' tasks
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtSynchronizeDeviceWithTimeout(int32_t timeout) {
  return api_entry("kilnrtSynchronizeDeviceWithTimeout", ApiNeeds::kRuntime, [&] {
    return kiln::rt::synchronize_device("kilnrtSynchronizeDeviceWithTimeout", timeout);
  });
}

kilnError kilnrtSynchronizeDevice(void) {
  return api_entry("kilnrtSynchronizeDevice", ApiNeeds::kRuntime,
                   [&] { return kiln::rt::synchronize_device("kilnrtSynchronizeDevice", -1); });
}

kilnError kilnrtCreateContext(kilnrtContext* context, int32_t deviceId) {
  static const char* const kApi = "kilnrtCreateContext";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (context == nullptr) return kiln::rt::null_param(kApi, "context");
    *context = nullptr;
    Device* device = state->devices->device(deviceId);
    if (device == nullptr) return kiln::rt::bad_device(*state, kApi, deviceId);
    {
      auto created = std::make_unique<Context>(*device, /*is_default=*/false);
      Context* raw = created.get();
      {
        std::lock_guard objects(state->objects_mutex);
        state->user_contexts.push_back(std::move(created));
      }
      state->contexts.add(raw);
      kiln::rt::set_current_context(raw);
      *context = raw;
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtDestroyContext(kilnrtContext context) {
  static const char* const kApi = "kilnrtDestroyContext";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (context == nullptr) return kiln::rt::null_param(kApi, "context");
    if (!state->contexts.contains(context)) {
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE,
                  "%s: context %p is not a live context (destroyed, or not a context)", kApi,
                  context);
    }
    auto* target = static_cast<Context*>(context);
    if (target->is_default()) {
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: context %p is the default context of %s; kilnrtResetDevice releases it",
                  kApi, context, target->device().name().c_str());
    }
    if (target->on_stream_thread()) {
      return fail(
          KILN_ERROR_INVALID_PARAM,
          "%s: called from a task of one of the context's own streams, which would wait for "
          "itself",
          kApi);
    }
    std::unique_ptr<Context> released;
    {
      std::lock_guard objects(state->objects_mutex);
      for (auto it = state->user_contexts.begin(); it != state->user_contexts.end(); ++it) {
        if (it->get() == target) {
          released = std::move(*it);
          state->user_contexts.erase(it);
          break;
        }
      }
    }
    if (!released) {  // another thread destroyed it meanwhile
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: context %p was destroyed meanwhile",
                  kApi, context);
    }
    state->contexts.remove(target);
    if (kiln::rt::current_context() == nullptr) kiln::rt::set_current_context(nullptr);
    released.reset();  // waits for its streams' tasks
    return KILN_SUCCESS;
  });
}

kilnError kilnrtSetCurrentContext(kilnrtContext context) {
  static const char* const kApi = "kilnrtSetCurrentContext";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (context == nullptr) return kiln::rt::null_param(kApi, "context");
    if (!state->contexts.contains(context)) {
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE,
                  "%s: context %p is not a live context (destroyed, or not a context)", kApi,
                  context);
    }
    kiln::rt::set_current_context(static_cast<Context*>(context));
    return KILN_SUCCESS;
  });
}

kilnError kilnrtGetCurrentContext(kilnrtContext* context) {
  static const char* const kApi = "kilnrtGetCurrentContext";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (context == nullptr) return kiln::rt::null_param(kApi, "context");
    Context* current = kiln::rt::current_context();
    *context = current;
    if (current == nullptr) return kiln::rt::no_context(kApi);
    return KILN_SUCCESS;
  });
}

// ---- Streams ---------------------------------------------------------------------------------

kilnError kilnrtCreateStream(kilnrtStream* stream) {
  static const char* const kApi = "kilnrtCreateStream";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (stream == nullptr) return kiln::rt::null_param(kApi, "stream");
    *stream = nullptr;
    Context* context = kiln::rt::current_context();
    if (context == nullptr) return kiln::rt::no_context(kApi);
    {
      Stream* created = context->create_stream();
      if (created == nullptr) {
        return fail(KILN_ERROR_BAD_ALLOC, "%s: the system refused a thread for the stream", kApi);
      }
      *stream = created;
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtDestroyStream(kilnrtStream stream) {
  static const char* const kApi = "kilnrtDestroyStream";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (stream == nullptr) {
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: stream is NULL (the default stream belongs to its context and cannot be "
                  "destroyed)",
                  kApi);
    }
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    if ((*s)->on_worker_thread()) {
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: called from a task of %s itself, which would wait for itself", kApi,
                  (*s)->name().c_str());
    }
    if (!(*s)->context()->destroy_stream(*s)) {
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: stream %p was destroyed meanwhile", kApi,
                  stream);
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtSynchronizeStreamWithTimeout(kilnrtStream stream, int32_t timeout) {
  static const char* const kApi = "kilnrtSynchronizeStreamWithTimeout";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    kilnError error;
    if (kiln::rt::bad_timeout(kApi, timeout, &error)) return error;
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    return kiln::rt::synchronize_stream(kApi, **s, timeout);
  });
}

kilnError kilnrtSynchronizeStream(kilnrtStream stream) {
  static const char* const kApi = "kilnrtSynchronizeStream";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    return kiln::rt::synchronize_stream(kApi, **s, -1);
  });
}

kilnError kilnrtStreamQuery(kilnrtStream stream, kilnrtStreamStatus* status) {
  static const char* const kApi = "kilnrtStreamQuery";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (status == nullptr) return kiln::rt::null_param(kApi, "status");
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    const bool idle = (*s)->idle();
    // A task queued for a synchronizing caller (a collective) runs on the stream's thread
    // once somebody asks about it, rather than at the thread's next poll.
    if (!idle) Stream::wake_deferred_workers();
    *status = idle ? KILN_STREAM_STATUS_COMPLETE : KILN_STREAM_STATUS_NOT_READY;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtStreamWaitEvent(kilnrtStream stream, kilnrtEvent event) {
  static const char* const kApi = "kilnrtStreamWaitEvent";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    kilnError error;
    Event* e = kiln::rt::resolve_event(*state, event, kApi, "event", &error);
    if (e == nullptr) return error;
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    { (*s)->wait_event(*e); }
    return KILN_SUCCESS;
  });
}

// ---- Events -------------------------------------------------------------------------------------

}  // extern "C"

namespace {

// kilnrtCreateEventWithFlag and kilnrtCreateEvent, each with its own name in the messages.
kilnError create_event(RuntimeState* state, const char* kApi, kilnrtEvent* event, uint32_t flag) {
  if (event == nullptr) return kiln::rt::null_param(kApi, "event");
  *event = nullptr;
  // AscendCL's flags are accepted so ported code runs unchanged; every event takes
  // timestamps (the cost is one clock read) and can be waited on, so none changes anything.
  constexpr uint32_t kKnownFlags = KILN_EVENT_SYNC | KILN_EVENT_CAPTURE_STREAM_PROGRESS | KILN_EVENT_TIME_LINE;
  if ((flag & ~kKnownFlags) != 0) {
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: flag 0x%x has unknown bits (known: KILN_EVENT_SYNC, KILN_EVENT_CAPTURE_STREAM_PROGRESS, "
                "KILN_EVENT_TIME_LINE)", kApi, flag);
  }
  {
    auto created = std::make_unique<Event>();
    Event* raw = created.get();
    {
      std::lock_guard objects(state->objects_mutex);
      state->events_owned.push_back(std::move(created));
    }
    state->events.add(raw);
    *event = raw;
  }
  return KILN_SUCCESS;
}

}  // namespace

extern "C" {

kilnError kilnrtCreateEventWithFlag(kilnrtEvent* event, uint32_t flag) {
  static const char* const kApi = "kilnrtCreateEventWithFlag";
  return api_entry(kApi, ApiNeeds::kRuntime,
                   [&](RuntimeState* state) { return create_event(state, kApi, event, flag); });
}

kilnError kilnrtCreateEvent(kilnrtEvent* event) {
  static const char* const kApi = "kilnrtCreateEvent";
  return api_entry(kApi, ApiNeeds::kRuntime,
                   [&](RuntimeState* state) { return create_event(state, kApi, event, 0); });
}

kilnError kilnrtDestroyEvent(kilnrtEvent event) {
  static const char* const kApi = "kilnrtDestroyEvent";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (event == nullptr) return kiln::rt::null_param(kApi, "event");
    std::unique_ptr<Event> released;
    {
      std::lock_guard objects(state->objects_mutex);
      for (auto it = state->events_owned.begin(); it != state->events_owned.end(); ++it) {
        if (it->get() == event) {
          released = std::move(*it);
          state->events_owned.erase(it);
          break;
        }
      }
    }
    if (!released) {
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE,
                  "%s: event %p is not a live event (destroyed, or not an event)", kApi, event);
    }
    state->events.remove(released.get());
    // Records and waits still queued keep it alive until they ran.
    Event::destroy(std::move(released));
    return KILN_SUCCESS;
  });
}

kilnError kilnrtRecordEvent(kilnrtEvent event, kilnrtStream stream) {
  static const char* const kApi = "kilnrtRecordEvent";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    return kiln::rt::enqueue_event_op(state, kApi, event, stream,
                                      [](Event& e, Stream& s) { e.record(s); });
  });
}

kilnError kilnrtResetEvent(kilnrtEvent event, kilnrtStream stream) {
  static const char* const kApi = "kilnrtResetEvent";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    return kiln::rt::enqueue_event_op(state, kApi, event, stream,
                                      [](Event& e, Stream& s) { e.enqueue_reset(s); });
  });
}

kilnError kilnrtQueryEvent(kilnrtEvent event, kilnrtEventStatus* status) {
  static const char* const kApi = "kilnrtQueryEvent";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    kilnError error;
    Event* e = kiln::rt::resolve_event(*state, event, kApi, "event", &error);
    if (e == nullptr) return error;
    if (status == nullptr) return kiln::rt::null_param(kApi, "status");
    *status = e->query() ? KILN_EVENT_STATUS_COMPLETE : KILN_EVENT_STATUS_NOT_READY;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtSynchronizeEventWithTimeout(kilnrtEvent event, int32_t timeout) {
  return api_entry("kilnrtSynchronizeEventWithTimeout", ApiNeeds::kRuntime,
                   [&](RuntimeState* state) {
                     return kiln::rt::synchronize_event(state, "kilnrtSynchronizeEventWithTimeout",
                                                        event, timeout);
                   });
}

kilnError kilnrtSynchronizeEvent(kilnrtEvent event) {
  return api_entry("kilnrtSynchronizeEvent", ApiNeeds::kRuntime, [&](RuntimeState* state) {
    return kiln::rt::synchronize_event(state, "kilnrtSynchronizeEvent", event, -1);
  });
}

kilnError kilnrtEventElapsedTime(float* ms, kilnrtEvent startEvent, kilnrtEvent endEvent) {
  static const char* const kApi = "kilnrtEventElapsedTime";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (ms == nullptr) return kiln::rt::null_param(kApi, "ms");
    kilnError error;
    Event* start = kiln::rt::resolve_event(*state, startEvent, kApi, "startEvent", &error);
    if (start == nullptr) return error;
    Event* end = kiln::rt::resolve_event(*state, endEvent, kApi, "endEvent", &error);
    if (end == nullptr) return error;
    auto t0 = start->timestamp();
    if (!t0.ok()) {
      return fail(KILN_ERROR_RT_EVENT_NOT_RECORDED, "%s: startEvent: %s", kApi,
                  t0.status().to_string().c_str());
    }
    auto t1 = end->timestamp();
    if (!t1.ok()) {
      return fail(KILN_ERROR_RT_EVENT_NOT_RECORDED, "%s: endEvent: %s", kApi,
                  t1.status().to_string().c_str());
    }
    *ms = std::chrono::duration<float, std::milli>(*t1 - *t0).count();
    return KILN_SUCCESS;
  });
}

// ---- Host callbacks ------------------------------------------------------------------------------

kilnError kilnrtLaunchCallback(kilnrtCallback fn, void* userData, kilnrtCallbackBlockType blockType,
                               kilnrtStream stream) {
  static const char* const kApi = "kilnrtLaunchCallback";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (fn == nullptr) return kiln::rt::null_param(kApi, "fn");
    if (blockType != KILN_CALLBACK_NO_BLOCK && blockType != KILN_CALLBACK_BLOCK) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: blockType %d is not a kilnrtCallbackBlockType",
                  kApi, static_cast<int>(blockType));
    }
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    // Two pointers of capture fit std::function's inline storage (no allocation per call);
    // the task finds its stream as the one whose thread runs it.
    {
      if (blockType == KILN_CALLBACK_BLOCK) {
        (*s)->submit(kiln::rt::Engine::kHost, [fn, userData]() {
          kiln::rt::dispatch_callback(Stream::current(), fn, userData, /*block=*/true);
          return Status();
        });
      } else {
        (*s)->submit(kiln::rt::Engine::kHost, [fn, userData]() {
          kiln::rt::dispatch_callback(Stream::current(), fn, userData, /*block=*/false);
          return Status();
        });
      }
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtSubscribeReport(uint64_t threadId, kilnrtStream stream) {
  static const char* const kApi = "kilnrtSubscribeReport";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    Status st = kiln::rt::subscribe_report(threadId, *s);
    if (!st.ok()) return fail(KILN_ERROR_INVALID_PARAM, "%s: %s", kApi, st.to_string().c_str());
    return KILN_SUCCESS;
  });
}

kilnError kilnrtUnSubscribeReport(uint64_t threadId, kilnrtStream stream) {
  static const char* const kApi = "kilnrtUnSubscribeReport";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    Expected<Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    Status st = kiln::rt::unsubscribe_report(threadId, *s);
    if (!st.ok()) return fail(KILN_ERROR_INVALID_PARAM, "%s: %s", kApi, st.to_string().c_str());
    return KILN_SUCCESS;
  });
}

kilnError kilnrtProcessReport(int32_t timeout) {
  static const char* const kApi = "kilnrtProcessReport";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    {}
    kilnError error;
    if (kiln::rt::bad_timeout(kApi, timeout, &error)) return error;
    // Callbacks run without the runtime lock: they may call the API, and kilnFinalize may
    // be waiting for the streams that wait for them.
    Status st = kiln::rt::process_report(timeout);
    if (st.ok()) return KILN_SUCCESS;
    return fail(st.code() == StatusCode::kDeadlineExceeded ? KILN_ERROR_RT_TIMEOUT
                                                           : KILN_ERROR_INVALID_PARAM,
                "%s: %s", kApi, st.to_string().c_str());
  });
}

}  // extern "C"
