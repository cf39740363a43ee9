// The profiler's recorder: host API calls, device tasks (stream tasks and the ops they
// run), copies, compile phases and event record/wait pairs, kept in per-thread buffers
// with steady-clock timestamps, and the profiling session (start, stop, write to a dir).
//
// Cost: with profiling off, every hook is one predictable branch on a global flag
// (`if (KILN_UNLIKELY(profiler::enabled()))`). With it on, a record is appended to the
// calling thread's own buffer without a lock (a thread takes the registry lock once, to
// register its buffer); a reader (the writers at finalize) sees every record published
// before it looked.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "core/status.h"

#ifndef KILN_UNLIKELY
#define KILN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#endif

namespace kiln::ir {
class Node;
}

namespace kiln::profiler {

namespace detail {
extern std::atomic<bool> g_enabled;
}

// True while a profiling session is recording. A build configured with -DKILN_PROFILER=OFF
// compiles every hook away (the baseline the overhead benchmark compares with); sessions
// then fail to start with a message saying so.
#if KILN_PROFILER_COMPILED_OUT
constexpr bool kCompiledIn = false;
#else
constexpr bool kCompiledIn = true;
#endif
inline bool enabled() { return kCompiledIn && detail::g_enabled.load(std::memory_order_relaxed); }

// Steady-clock nanoseconds (the timeline shows microseconds).
int64_t now_ns();

// ---- Tracks ------------------------------------------------------------------------------

// Device engines, numbered as the runtime's Engine enum is.
enum class EngineKind : int { kCompute = 0, kCopy = 1, kHost = 2 };
const char* engine_name(EngineKind engine);

// The track (one Chrome-trace thread) of `engine` of `stream` on device `device_id`
// named `device_name` with `cores` cores; registered on first use (takes a lock), the same
// id for the same (stream, engine) afterwards. Stream threads cache it.
int stream_track(const void* stream, int device_id, const std::string& device_name, int cores,
                 EngineKind engine);
// Records made on the calling thread go to `track` (a stream's engine track) until it is
// set back to -1 (the thread's own host track).
void set_thread_track(int track);

// ---- Recording (call only when enabled()) ------------------------------------------------

// A host API call that began at `start_ns` and ends now.
void record_api(const char* name, int64_t start_ns);
// A stream task that began at `start_ns` and ends now, on the current track.
void record_task(const char* label, int64_t start_ns);
// One node of a graph run by the executor with the kernel `implementation` ("reference",
// "onednn:..."): shapes, dtypes, formats, FLOPs and bytes come from the tensors it read and
// wrote. The form without `implementation` records "reference".
void record_op(const ir::Node& node, const std::string& model, const std::string& implementation,
               const std::vector<const RuntimeValue*>& inputs,
               const std::vector<RuntimeValue>& outputs, int64_t start_ns);
void record_op(const ir::Node& node, const std::string& model,
               const std::vector<const RuntimeValue*>& inputs,
               const std::vector<RuntimeValue>& outputs, int64_t start_ns);
// A copy of `bytes` bytes ("H2D", "D2H", "D2D", "H2H", "memset") that began at `start_ns`.
void record_copy(const char* direction, size_t bytes, int64_t start_ns);
// A compile that began at `start_ns` and ended now, with its phases (pass name,
// milliseconds) laid end to end from `start_ns` inside it.
void record_compile_phases(const std::vector<std::pair<std::string, double>>& phases,
                           int64_t start_ns);
// Flow arrows: an event record (start) and each stream wait it releases (finish) share an
// id made from the event and the generation recorded.
uint64_t flow_id(const void* event, uint64_t generation);
void record_flow_start(uint64_t id);
void record_flow_end(uint64_t id);

// Times a host API call from construction to destruction (one branch when off).
class ApiScope {
 public:
  explicit ApiScope(const char* name)
      : name_(name), start_(KILN_UNLIKELY(enabled()) ? now_ns() : -1) {}
  ~ApiScope() {
    if (KILN_UNLIKELY(start_ >= 0)) record_api(name_, start_);
  }
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;

 private:
  const char* name_;
  int64_t start_;
};

#define KILN_PROFILE_API(name) ::kiln::profiler::ApiScope KILN_CONCAT(kiln_prof_api_, __LINE__)(name)

// ---- Sessions ----------------------------------------------------------------------------

// kilnprofInit: names the output directory (created if missing). Fails when a session
// exists (kilnprofInit twice, or KILN_PROFILE set).
Status init_session(const std::string& dir);
// kilnprofStart / kilnprofStop: recording on and off (the session keeps its records).
Status start_session();
Status stop_session();
// kilnprofFinalize: stops, writes the records since init to the directory, ends the
// session (the records are dropped).
Status finalize_session();
bool has_session();
// The session's directory ("" when none).
std::string session_dir();

// KILN_PROFILE=DIR: at the first call (kilnInit calls it) starts a session writing to DIR,
// written again at each flush_env_session() (kilnFinalize) and at process exit, every time
// with everything recorded since the start.
void start_env_session();
Status flush_env_session();

}  // namespace kiln::profiler
