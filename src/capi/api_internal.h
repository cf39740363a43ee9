// What the C API implementation files share: the process-wide runtime state created by
// kilnInit, contexts, handle validation, and turning failures into error codes with a
// thread-local message (kilnGetRecentErrMsg).
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <functional>
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
  Context(Device& device, bool is_default)
      : device_(device), is_default_(is_default), serial_(next_serial()) {}
  // Synchronizes and destroys the context's streams.
  ~Context();
  Device& device() const { return device_; }
  bool is_default() const { return is_default_; }
  // Unique over the process's life, so a thread's current context that was destroyed
  // is not mistaken for a new one at the same address.
  uint64_t serial() const { return serial_; }
  // The stream used when the API is given a NULL stream; made on first use.
  Stream& default_stream();
  // Registered in runtime_state()->streams; null when no thread could be started.
  Stream* create_stream();
  // False if `s` is not a stream of this context.
  bool destroy_stream(Stream* s);
  Status synchronize(int64_t timeout_ms);
  // True inside a task of one of the context's streams, where destroying the context
  // would wait for that task.
  bool on_stream_thread();

 private:
  static uint64_t next_serial();
  // Forgets `s` (handle, report subscription) and destroys it: waits for its tasks.
  static void retire_stream(std::unique_ptr<Stream> s);

  Device& device_;
  bool is_default_;
  uint64_t serial_;
  std::mutex mutex_;
  std::unique_ptr<Stream> default_stream_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// Live handles of one kind, so a destroyed or foreign handle is an error code.
// Every API call on a stream or communicator checks its handle; a thread asking again for
// the handle it last found, with no handle of any set removed since, gets the answer
// without the lock (an 8-byte collective and its synchronize check three handles, and a
// shared lock is two locked instructions). Per kind of handle: one count of removals.
template <typename T>
class HandleSet {
 public:
  HandleSet() = default;
  HandleSet(const HandleSet&) = delete;
  HandleSet& operator=(const HandleSet&) = delete;
  ~HandleSet() { handle_removals().fetch_add(1, std::memory_order_release); }
  void add(const T* p) {
    std::unique_lock lock(mutex_);
    live_.insert(p);
  }
  bool remove(const T* p) {
    std::unique_lock lock(mutex_);
    handle_removals().fetch_add(1, std::memory_order_release);
    return live_.erase(p) > 0;
  }
  bool contains(const void* p) const {
    static thread_local LastFound last;
    if (last.set == this && last.handle == p &&
        last.removals == handle_removals().load(std::memory_order_acquire)) {
      return true;
    }
    std::shared_lock lock(mutex_);
    if (live_.count(static_cast<const T*>(p)) == 0) return false;
    // Removals take the lock exclusively: none runs now, so the count read here is the one
    // this answer is good for.
    last = LastFound{this, p, handle_removals().load(std::memory_order_acquire)};
    return true;
  }
  std::vector<const T*> all() const {
    std::shared_lock lock(mutex_);
    return {live_.begin(), live_.end()};
  }

 private:
  struct LastFound {
    const HandleSet* set = nullptr;
    const void* handle = nullptr;
    uint64_t removals = 0;
  };
  // Removals of handles from any set of this kind, and such sets destroyed (a new set may
  // reuse the address).
  static std::atomic<uint64_t>& handle_removals() {
    static std::atomic<uint64_t> removals{0};
    return removals;
  }

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
  std::mutex objects_mutex;  // guards user_contexts and events_owned
  std::atomic<bool> finalizing{false};  // kilnFinalize has begun
};

// The runtime state, or null before kilnInit / after kilnFinalize. Readers hold
// runtime_lock() shared; kilnInit/kilnFinalize hold it exclusively.
RuntimeState* runtime_state();
std::shared_mutex& runtime_lock();
// Only kilnInit/kilnFinalize, holding runtime_lock() exclusively.
void set_runtime_state(RuntimeState* state);

// Records `message` as this thread's last error and returns `code`.
kilnError fail(kilnError code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Maps a Status to an error code (`fallback` for codes with no closer match).
kilnError fail(const Status& status, kilnError fallback = KILN_ERROR_FAILURE);
void clear_error();
// This thread's last message (kilnGetRecentErrMsg).
const char* recent_error_message();

// The calling thread's current context (set by kilnrtSetDevice/CreateContext/SetCurrentContext).
Context* current_context();
void set_current_context(Context* context);

// The stream a C handle names: NULL is the current context's default stream. Fails
// (with the message recorded) on a handle that is not a live stream; fail() of that
// Status returns KILN_ERROR_RT_CONTEXT_NULL for a NULL stream with no current context
// and KILN_ERROR_INVALID_RESOURCE_HANDLE for a dead or foreign handle.
Expected<Stream*> resolve_stream(kilnrtStream stream, const char* api);

// Releases state of other parts of the runtime (models, ...) at kilnFinalize: hooks run in
// registration order after every stream has finished and been destroyed, before the
// devices (and their memory pools) go. A hook stays registered for the life of the
// process and runs at every kilnFinalize (register once, e.g. under std::call_once), so it
// must cope with nothing to release. Hooks run with runtime_lock() held exclusively: they
// must not call the C API.
void add_finalize_hook(std::function<void()> hook);
void run_finalize_hooks();

// Host callbacks and report threads (kilnrtLaunchCallback, kilnrtSubscribeReport,
// kilnrtProcessReport). A stream task calls dispatch_callback: with a subscribed thread
// the callback goes to that thread's queue (and, with `block`, the stream waits until it
// ran); otherwise it runs at once on the calling (stream) thread.
void dispatch_callback(const Stream* stream, kilnrtCallback fn, void* user_data, bool block);
Status subscribe_report(uint64_t thread_id, const Stream* stream);
// Callbacks of `stream` still waiting in the thread's queue run on the calling thread.
Status unsubscribe_report(uint64_t thread_id, const Stream* stream);
// Runs the callbacks queued for the calling thread, waiting up to timeout_ms (< 0:
// forever) for the first. failed_precondition when the thread subscribed to no stream,
// deadline_exceeded when none came.
Status process_report(int64_t timeout_ms);
// A stream is going away: drops its subscription, running its waiting callbacks here.
void forget_stream_reports(const Stream* stream);
// kilnFinalize: stops handing callbacks to threads (they run on the stream threads) and
// runs the ones waiting; reopen_reports() undoes it at kilnInit.
void close_reports();
void reopen_reports();

}  // namespace kiln::rt
