// The one entry guard of the public C functions. Each C entry point is
//
//   kilnError kilnrtFoo(...) {
//     return api_entry("kilnrtFoo", ApiNeeds::kRuntime, [&](RuntimeState* state) -> kilnError {
//       ... the function's own work ...
//     });
//   }
//
// and the guard does what every entry point did by hand before: times the call for the
// profiler, holds runtime_lock() shared so kilnFinalize cannot pull the runtime away
// mid-call, fails with KILN_ERROR_UNINITIALIZE (one message) before kilnInit, and turns an
// exception into an error code, since none may cross the C boundary.
#pragma once

#include <exception>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <type_traits>
#include <utility>

#include "kiln/kiln.h"
#include "profiler/profiler.h"
#include "capi/api_internal.h"

namespace kiln::rt {

enum class ApiNeeds {
  // Host objects (tensor descs, data buffers, datasets, model descs, AIPP sets), the
  // profiler, versions: they work with or without kilnInit, and take no runtime lock.
  kNothing,
  // Everything that touches devices, contexts, streams, memory or models: the runtime
  // lock held shared for the whole call, and KILN_ERROR_UNINITIALIZE without kilnInit.
  kRuntime,
};

// The error of a call before kilnInit (or after kilnFinalize).
inline kilnError not_initialized(const char* api) {
  return fail(KILN_ERROR_UNINITIALIZE, "%s: the runtime is not initialized (call kilnInit first)",
              api);
}

namespace guard_detail {

// An exception that reached the entry point, as an error code with its message recorded.
inline kilnError exception_error(const char* api) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(KILN_ERROR_BAD_ALLOC, "%s: out of host memory", api);
  } catch (const std::exception& e) {
    return fail(KILN_ERROR_FAILURE, "%s: %s", api, e.what());
  } catch (...) {
    return fail(KILN_ERROR_FAILURE, "%s: unknown exception", api);
  }
}

// Runs `body` with the runtime state when it takes one (only with ApiNeeds::kRuntime,
// where the state is known to exist), else with nothing.
template <class F>
decltype(auto) call_body(F& body, RuntimeState* state) {
  if constexpr (std::is_invocable_v<F&, RuntimeState*>) {
    return body(state);
  } else {
    (void)state;
    return body();
  }
}

// The one prologue every entry point runs: the profiling scope, the runtime lock held shared
// and the init check (with ApiNeeds::kRuntime), and no exception past the C boundary. A
// failure of the guard itself (not initialized, an exception) is recorded for
// kilnGetRecentErrMsg, and the caller gets on_error(its code).
template <class T, class OnError, class F>
T guarded(const char* api, ApiNeeds needs, OnError on_error, F& body) noexcept {
  KILN_PROFILE_API(api);
  try {
    std::shared_lock<std::shared_mutex> lock;
    RuntimeState* state = nullptr;
    if (needs == ApiNeeds::kRuntime) {
      lock = std::shared_lock(runtime_lock());
      state = runtime_state();
      if (state == nullptr) return on_error(not_initialized(api));
    }
    return call_body(body, state);
  } catch (...) {
    return on_error(exception_error(api));
  }
}

}  // namespace guard_detail

// For entry points returning a value rather than kilnError (a handle, a size, a type):
// `fallback` is what the caller gets when the runtime is not initialized or an exception
// was thrown; the error is recorded for kilnGetRecentErrMsg either way.
template <class T, class F>
T api_entry_or(const char* api, ApiNeeds needs, T fallback, F&& body) noexcept {
  return guard_detail::guarded<T>(api, needs, [&](kilnError) { return fallback; }, body);
}

template <class F>
kilnError api_entry(const char* api, ApiNeeds needs, F&& body) noexcept {
  return guard_detail::guarded<kilnError>(api, needs, [](kilnError code) { return code; }, body);
}

// For the entry points returning nothing (kilnDestroyTensorDesc): the error is only recorded.
template <class F>
void api_entry_void(const char* api, ApiNeeds needs, F&& body) noexcept {
  api_entry_or<int>(api, needs, 0, [&](auto... state) {
    guard_detail::call_body(body, state...);
    return 0;
  });
}

}  // namespace kiln::rt
