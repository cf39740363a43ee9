// C API of the profiler (kilnprofInit/Start/Stop/Finalize), over the sessions of
// src/profiler. Independent of kilnInit: a program may set profiling up before it.
#include <cstring>
#include <string>

#include "kiln/kiln.h"
#include "profiler/profiler.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"

using kiln::Status;
using kiln::StatusCode;
using kiln::rt::api_entry;
using kiln::rt::ApiNeeds;
using kiln::rt::fail;

namespace {

// A failed session call: "no session" and "already set up" keep AscendCL's codes.
kilnError session_error(const char* api, Status status) {
  status.add_context("%s", api);
  if (status.code() == StatusCode::kFailedPrecondition)
    return fail(kiln::profiler::has_session() ? KILN_ERROR_REPEAT_INITIALIZE : KILN_ERROR_UNINITIALIZE,
                "%s", status.to_string().c_str());
  if (status.code() == StatusCode::kUnavailable)
    return fail(KILN_ERROR_WRITE_FILE, "%s", status.to_string().c_str());
  return fail(status, KILN_ERROR_FAILURE);
}

}  // namespace

extern "C" {

kilnError kilnprofInit(const char* profilerResultPath, size_t length) {
  static const char* const kApi = "kilnprofInit";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    if (profilerResultPath == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: profilerResultPath is NULL", kApi);
    if (length == 0 || length > 4096 || strnlen(profilerResultPath, length + 1) != length)
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: length %zu is not the length of profilerResultPath (1 to 4096 bytes)", kApi,
                  length);
    Status s = kiln::profiler::init_session(std::string(profilerResultPath, length));
    if (!s.ok()) return session_error(kApi, std::move(s));
    kiln::rt::clear_error();
    return KILN_SUCCESS;
  });
}

kilnError kilnprofStart(void) {
  return api_entry("kilnprofStart", ApiNeeds::kNothing, [&] {
    Status s = kiln::profiler::start_session();
    if (!s.ok()) return session_error("kilnprofStart", std::move(s));
    return KILN_SUCCESS;
  });
}

kilnError kilnprofStop(void) {
  return api_entry("kilnprofStop", ApiNeeds::kNothing, [&] {
    Status s = kiln::profiler::stop_session();
    if (!s.ok()) return session_error("kilnprofStop", std::move(s));
    return KILN_SUCCESS;
  });
}

kilnError kilnprofFinalize(void) {
  return api_entry("kilnprofFinalize", ApiNeeds::kNothing, [&] {
    Status s = kiln::profiler::finalize_session();
    if (!s.ok()) return session_error("kilnprofFinalize", std::move(s));
    return KILN_SUCCESS;
  });
}

}  // extern "C"
