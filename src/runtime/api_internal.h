// What the C API implementation files share: the process-wide runtime state created by
// kilnInit, contexts, handle validation, and turning failures into error codes with a
// thread-local message (kilnGetRecentErrMsg).
#pragma once

#include <cstdarg>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "kiln/kiln.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace kiln::rt {

// A context binds a thread to a device and owns the streams created in it. The
// device's default context is made by kilnrtSetDevice; others by kilnrtCreateContext.
class Context {
 public:
  Context(Device& device, bool is_default) : device_(device), is_default_(is_default) {}
  ~Context();
  Device& device() const { return device_; }
  bool is_default() const { return is_default_; }
  // The stream used when the API is given a NULL stream; made on first use.
  Stream& default_stream();
  Stream* create_stream();
  // False if `s` is not a stream of this context.
  bool destroy_stream(Stream* s);
  Status synchronize(int64_t timeout_ms);

 private:
  Device& device_;
  bool is_default_;
  std::mutex mutex_;
  std::unique_ptr<Stream> default_stream_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// Live handles of one kind, so a destroyed or foreign handle is an error code.
template <typename T>
class HandleSet {
 public:
  void add(const T* p) {
    std::unique_lock lock(mutex_);
    live_.insert(p);
  }
  bool remove(const T* p) {
    std::unique_lock lock(mutex_);
    return live_.erase(p) > 0;
  }
  bool contains(const void* p) const {
    std::shared_lock lock(mutex_);
    return live_.count(static_cast<const T*>(p)) > 0;
  }
  std::vector<const T*> all() const {
    std::shared_lock lock(mutex_);
    return {live_.begin(), live_.end()};
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_set<const T*> live_;
};

// Everything between kilnInit and kilnFinalize.
struct RuntimeState {
  std::unique_ptr<DeviceManager> devices;
  HandleSet<Context> contexts;
  HandleSet<Stream> streams;
  HandleSet<Event> events;
  std::mutex default_contexts_mutex;
  std::vector<std::unique_ptr<Context>> default_contexts;  // per device id, null if none
  std::vector<int> set_device_counts;                      // kilnrtSetDevice - kilnrtResetDevice
  std::vector<std::unique_ptr<Context>> user_contexts;
  std::vector<std::unique_ptr<Event>> events_owned;
};

// The runtime state, or null before kilnInit / after kilnFinalize. Readers hold
// runtime_lock() shared; kilnInit/kilnFinalize hold it exclusively.
RuntimeState* runtime_state();
std::shared_mutex& runtime_lock();

// Records `message` as this thread's last error and returns `code`.
kilnError fail(kilnError code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Maps a Status to an error code (`fallback` for codes with no closer match).
kilnError fail(const Status& status, kilnError fallback = KILN_ERROR_FAILURE);
void clear_error();

// The calling thread's current context (set by kilnrtSetDevice/CreateContext/SetCurrentContext).
Context* current_context();
void set_current_context(Context* context);

// The stream a C handle names: NULL is the current context's default stream. Fails
// (with the message recorded) on a handle that is not a live stream.
Expected<Stream*> resolve_stream(kilnrtStream stream, const char* api);

}  // namespace kiln::rt
