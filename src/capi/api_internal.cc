// The C API's shared state: the runtime created by kilnInit, error messages, contexts and
// the current context of each thread, stream handles, finalize hooks, and the queues
// that hand host callbacks to subscribed report threads.
#include "capi/api_internal.h"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <system_error>
#include <unordered_map>

namespace kiln::rt {
namespace {

// Written only under runtime_lock() held exclusively (kilnInit/kilnFinalize).
RuntimeState* g_state = nullptr;

thread_local std::string t_error_message;
// The current context and its serial (see Context::serial()).
thread_local Context* t_context = nullptr;
thread_local uint64_t t_context_serial = 0;
// The last failure of resolve_stream on this thread, so fail(status) returns its code.
thread_local std::string t_resolve_message;
thread_local kilnError t_resolve_code = KILN_SUCCESS;

std::mutex& hooks_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::function<void()>>& hooks() {
  static auto* h = new std::vector<std::function<void()>>();  // never destroyed: no exit-order issue
  return *h;
}

// ---- Report threads --------------------------------------------------------------------

struct ReportItem {
  enum class State { kPending, kRunning, kDone };
  kilnrtCallback fn;
  void* user_data;
  const Stream* stream;
  State state = State::kPending;
};

struct ReportQueue {
  std::deque<std::shared_ptr<ReportItem>> items;
  std::condition_variable cv;  // items arrived, or the thread lost its last stream
  int streams = 0;             // streams this thread subscribed to
};

class ReportHub {
 public:
  void dispatch(const Stream* stream, kilnrtCallback fn, void* user_data, bool block) {
    std::unique_lock lock(mutex_);
    auto sub = subscriber_.find(stream);
    if (closed_ || sub == subscriber_.end()) {
      lock.unlock();
      fn(user_data);
      return;
    }
    auto item = std::make_shared<ReportItem>(ReportItem{fn, user_data, stream});
    std::shared_ptr<ReportQueue>& queue = threads_[sub->second];
    queue->items.push_back(item);
    queue->cv.notify_all();
    if (block) done_cv_.wait(lock, [&] { return item->state == ReportItem::State::kDone; });
  }

  Status subscribe(uint64_t thread, const Stream* stream) {
    std::lock_guard lock(mutex_);
    auto sub = subscriber_.find(stream);
    if (sub != subscriber_.end()) {
      if (sub->second == thread) {
        return invalid_argument("thread %llu already subscribed to %s",
                                static_cast<unsigned long long>(thread), stream->name().c_str());
      }
      return invalid_argument("%s already has a report thread (%llu); a stream has one at most",
                              stream->name().c_str(), static_cast<unsigned long long>(sub->second));
    }
    std::shared_ptr<ReportQueue>& queue = threads_[thread];
    if (!queue) queue = std::make_shared<ReportQueue>();
    ++queue->streams;
    subscriber_[stream] = thread;
    return Status();
  }

  Status unsubscribe(uint64_t thread, const Stream* stream) {
    std::vector<std::shared_ptr<ReportItem>> orphans;
    {
      std::lock_guard lock(mutex_);
      auto sub = subscriber_.find(stream);
      if (sub == subscriber_.end() || sub->second != thread) {
        return invalid_argument("thread %llu has not subscribed to %s",
                                static_cast<unsigned long long>(thread), stream->name().c_str());
      }
      drop_locked(sub, &orphans);
    }
    run_taken(orphans);
    return Status();
  }

  void forget(const Stream* stream) {
    std::vector<std::shared_ptr<ReportItem>> orphans;
    {
      std::lock_guard lock(mutex_);
      auto sub = subscriber_.find(stream);
      if (sub == subscriber_.end()) return;
      drop_locked(sub, &orphans);
    }
    run_taken(orphans);
  }

  Status process(uint64_t thread, int64_t timeout_ms) {
    std::unique_lock lock(mutex_);
    auto it = threads_.find(thread);
    if (it == threads_.end() || it->second->streams == 0) {
      return failed_precondition("thread %llu subscribed to no stream (call kilnrtSubscribeReport first)",
                                 static_cast<unsigned long long>(thread));
    }
    std::shared_ptr<ReportQueue> queue = it->second;  // survives an unsubscribe meanwhile
    auto ready = [&] { return !queue->items.empty() || queue->streams == 0 || closed_; };
    if (timeout_ms < 0) {
      queue->cv.wait(lock, ready);
    } else {
      queue->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    }
    if (queue->items.empty()) {
      if (closed_ || queue->streams == 0) {
        return failed_precondition("thread %llu lost its subscriptions while waiting",
                                   static_cast<unsigned long long>(thread));
      }
      return deadline_exceeded("no callback arrived within %lld ms",
                               static_cast<long long>(timeout_ms));
    }
    std::vector<std::shared_ptr<ReportItem>> taken(queue->items.begin(), queue->items.end());
    queue->items.clear();
    for (auto& item : taken) item->state = ReportItem::State::kRunning;
    lock.unlock();
    run_taken(taken);
    return Status();
  }

  void close() {
    std::vector<std::shared_ptr<ReportItem>> orphans;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      for (auto& [thread, queue] : threads_) {
        for (auto& item : queue->items) {
          item->state = ReportItem::State::kRunning;
          orphans.push_back(item);
        }
        queue->items.clear();
        queue->streams = 0;
        queue->cv.notify_all();
      }
      threads_.clear();
      subscriber_.clear();
    }
    run_taken(orphans);
  }

  void reopen() {
    std::lock_guard lock(mutex_);
    closed_ = false;
  }

 private:
  // Removes a subscription; its queued callbacks go to `orphans`, marked running.
  void drop_locked(std::unordered_map<const Stream*, uint64_t>::iterator sub,
                   std::vector<std::shared_ptr<ReportItem>>* orphans) {
    const Stream* stream = sub->first;
    auto it = threads_.find(sub->second);
    subscriber_.erase(sub);
    if (it == threads_.end()) return;
    ReportQueue& queue = *it->second;
    for (auto item = queue.items.begin(); item != queue.items.end();) {
      if ((*item)->stream == stream) {
        (*item)->state = ReportItem::State::kRunning;
        orphans->push_back(*item);
        item = queue.items.erase(item);
      } else {
        ++item;
      }
    }
    if (--queue.streams == 0) {
      queue.cv.notify_all();
      threads_.erase(it);
    }
  }

  // Runs callbacks taken from a queue (in order), then wakes streams blocked on them.
  void run_taken(const std::vector<std::shared_ptr<ReportItem>>& items) {
    if (items.empty()) return;
    for (const auto& item : items) item->fn(item->user_data);
    {
      std::lock_guard lock(mutex_);
      for (const auto& item : items) item->state = ReportItem::State::kDone;
    }
    done_cv_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable done_cv_;  // blocking callbacks finished
  std::unordered_map<uint64_t, std::shared_ptr<ReportQueue>> threads_;
  std::unordered_map<const Stream*, uint64_t> subscriber_;
  bool closed_ = false;
};

ReportHub& hub() {
  static auto* h = new ReportHub();  // never destroyed: stream threads may outlive statics
  return *h;
}

}  // namespace

// ---- State and errors --------------------------------------------------------------------

RuntimeState* runtime_state() { return g_state; }

std::shared_mutex& runtime_lock() {
  static auto* m = new std::shared_mutex();
  return *m;
}

// Used by kilnInit / kilnFinalize (api_runtime.cc) under the exclusive lock.
void set_runtime_state(RuntimeState* state) { g_state = state; }

kilnError fail(kilnError code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  t_error_message = str_vformat(fmt, args);
  va_end(args);
  return code;
}

kilnError fail(const Status& status, kilnError fallback) {
  t_error_message = status.to_string();
  if (t_resolve_code != KILN_SUCCESS && t_error_message == t_resolve_message) {
    return t_resolve_code;
  }
  switch (status.code()) {
    case StatusCode::kOk:
      t_error_message.clear();
      return KILN_SUCCESS;
    case StatusCode::kInvalidArgument:
      return KILN_ERROR_INVALID_PARAM;
    case StatusCode::kDeadlineExceeded:
      return KILN_ERROR_RT_TIMEOUT;
    case StatusCode::kResourceExhausted:
      return KILN_ERROR_BAD_ALLOC;
    case StatusCode::kUnsupported:
      return KILN_ERROR_FEATURE_UNSUPPORTED;
    default:
      return fallback;
  }
}

void clear_error() { t_error_message.clear(); }

const char* recent_error_message() { return t_error_message.c_str(); }

// ---- Current context ------------------------------------------------------------------------

Context* current_context() {
  RuntimeState* state = runtime_state();
  if (state == nullptr || t_context == nullptr) return nullptr;
  // The context may have been destroyed by another thread (or kilnFinalize) since.
  if (!state->contexts.contains(t_context) || t_context->serial() != t_context_serial) {
    t_context = nullptr;
    return nullptr;
  }
  return t_context;
}

void set_current_context(Context* context) {
  t_context = context;
  t_context_serial = context ? context->serial() : 0;
}

Expected<Stream*> resolve_stream(kilnrtStream stream, const char* api) {
  Status status;
  kilnError code;
  if (stream == nullptr) {
    Context* context = current_context();
    if (context != nullptr) {
      try {
        return &context->default_stream();
      } catch (const std::system_error& e) {
        return resource_exhausted("%s: cannot start the default stream's thread: %s", api, e.what());
      }
    }
    status = failed_precondition(
        "%s: stream is NULL (the default stream) but this thread has no current context "
        "(call kilnrtSetDevice or kilnrtCreateContext)",
        api);
    code = KILN_ERROR_RT_CONTEXT_NULL;
  } else {
    RuntimeState* state = runtime_state();
    if (state != nullptr && state->streams.contains(stream)) {
      return static_cast<Stream*>(stream);
    }
    status = not_found("%s: stream %p is not a live stream (destroyed, or not a stream)", api,
                       stream);
    code = KILN_ERROR_INVALID_RESOURCE_HANDLE;
  }
  t_resolve_message = status.to_string();
  t_resolve_code = code;
  fail(code, "%s", t_resolve_message.c_str());
  return status;
}

// ---- Context ----------------------------------------------------------------------------

uint64_t Context::next_serial() {
  static std::atomic<uint64_t> serial{0};
  return serial.fetch_add(1, std::memory_order_relaxed) + 1;
}

void Context::retire_stream(std::unique_ptr<Stream> s) {
  if (!s) return;
  if (RuntimeState* state = runtime_state()) state->streams.remove(s.get());
  // Callbacks waiting for a report thread run here, so the stream can drain.
  forget_stream_reports(s.get());
  s.reset();  // waits for the stream's tasks
}

Context::~Context() {
  std::vector<std::unique_ptr<Stream>> streams;
  std::unique_ptr<Stream> default_stream;
  {
    std::lock_guard lock(mutex_);
    streams.swap(streams_);
    default_stream = std::move(default_stream_);
  }
  for (auto& s : streams) retire_stream(std::move(s));
  retire_stream(std::move(default_stream));
}

Stream& Context::default_stream() {
  std::lock_guard lock(mutex_);
  if (!default_stream_) default_stream_ = std::make_unique<Stream>(device_, this);
  return *default_stream_;
}

Stream* Context::create_stream() {
  std::unique_ptr<Stream> s;
  try {
    s = std::make_unique<Stream>(device_, this);
  } catch (const std::system_error&) {
    return nullptr;  // no thread could be started
  }
  Stream* raw = s.get();
  {
    std::lock_guard lock(mutex_);
    streams_.push_back(std::move(s));
  }
  if (RuntimeState* state = runtime_state()) state->streams.add(raw);
  return raw;
}

bool Context::destroy_stream(Stream* s) {
  std::unique_ptr<Stream> owned;
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [&](const std::unique_ptr<Stream>& p) { return p.get() == s; });
    if (it == streams_.end()) return false;
    owned = std::move(*it);
    streams_.erase(it);
  }
  retire_stream(std::move(owned));
  return true;
}

bool Context::on_stream_thread() {
  std::lock_guard lock(mutex_);
  if (default_stream_ && default_stream_->on_worker_thread()) return true;
  for (auto& s : streams_) {
    if (s->on_worker_thread()) return true;
  }
  return false;
}

Status Context::synchronize(int64_t timeout_ms) {
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(mutex_);
    if (default_stream_) streams.push_back(default_stream_.get());
    for (auto& s : streams_) streams.push_back(s.get());
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Status first;
  for (Stream* s : streams) {
    int64_t left = -1;
    if (timeout_ms >= 0) {
      left = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
    }
    Status e = s->synchronize(left);
    if (!e.ok() && first.ok()) first = std::move(e);
  }
  return first;
}

// ---- Finalize hooks -----------------------------------------------------------------------

void add_finalize_hook(std::function<void()> hook) {
  std::lock_guard lock(hooks_mutex());
  hooks().push_back(std::move(hook));
}

void run_finalize_hooks() {
  std::vector<std::function<void()>> copy;
  {
    std::lock_guard lock(hooks_mutex());
    copy = hooks();
  }
  for (auto& hook : copy) hook();
}

// ---- Report threads -----------------------------------------------------------------------

void dispatch_callback(const Stream* stream, kilnrtCallback fn, void* user_data, bool block) {
  hub().dispatch(stream, fn, user_data, block);
}

Status subscribe_report(uint64_t thread_id, const Stream* stream) {
  return hub().subscribe(thread_id, stream);
}

Status unsubscribe_report(uint64_t thread_id, const Stream* stream) {
  return hub().unsubscribe(thread_id, stream);
}

Status process_report(int64_t timeout_ms) {
  return hub().process(static_cast<uint64_t>(pthread_self()), timeout_ms);
}

void forget_stream_reports(const Stream* stream) { hub().forget(stream); }

void close_reports() { hub().close(); }

void reopen_reports() { hub().reopen(); }

}  // namespace kiln::rt
