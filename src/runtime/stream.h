// Streams and events. A stream is an in-order asynchronous queue of tasks on one device:
// submit() returns at once, a host thread of the stream runs the tasks in order, taking
// the device's compute or copy engine for each. Events mark points in a stream; other
// streams (of any device) and host threads wait on them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "runtime/device.h"

namespace kiln::rt {

class Context;
class Event;

// Which engine of the device runs a task.
enum class Engine {
  kCompute,  // kernels, model executions: under the compute engine with the device's cores
  kCopy,     // memcpy / memset: under the copy engine
  kHost,     // bookkeeping and host callbacks: no engine
};

using Task = std::function<Status()>;

class Stream {
 public:
  Stream(Device& device, Context* context);
  // Waits for the queued work, then stops the stream's thread.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return device_; }
  Context* context() const { return context_; }
  // "stream 0x... on cpu:N", for messages.
  std::string name() const;

  // Enqueues a task and returns its sequence number (1, 2, ...) without waiting. When a
  // task fails, the stream enters an error state: the tasks queued after it are skipped
  // (event records still complete, so no waiter hangs) until synchronize() reports it.
  // `label` (a string literal) names the task on the profiler's timeline.
  // `caller_may_run`: a host task that may also run on a thread synchronizing the stream
  // (see wait_idle) instead of the stream's own thread; for tasks that only wait on other
  // processes and need nothing of the stream's thread (collectives).
  uint64_t submit(Engine engine, Task task, const char* label = nullptr, bool caller_may_run = false);
  // Makes later tasks wait for the event's latest record at the time of the call.
  void wait_event(const Event& event);

  // Waits for every task submitted so far; timeout_ms < 0 waits forever. Returns the
  // error of the first failed task (and clears the error state), or a deadline error.
  // Waiting forever, the caller first runs the `caller_may_run` tasks at the head of the
  // queue itself while the stream's thread is not running one: a collective enqueued and
  // then synchronized runs on the caller's thread with no hand-over between threads (two
  // context switches per operation when the launcher binds each rank to one core: ~8 of
  // the ~10 us of an 8-byte AllReduce between two processes on two cores).
  Status synchronize(int64_t timeout_ms);
  // The two halves of synchronize(): wait for the tasks submitted so far (a deadline
  // error on timeout; the error state is left alone), and take (clear) the error state.
  Status wait_idle(int64_t timeout_ms);
  Status take_error();
  // True on the stream's own thread (inside one of its tasks), where waiting for the
  // stream or destroying it would wait for itself.
  bool on_worker_thread() const;
  // The stream whose thread is calling (inside one of its tasks), or null.
  static Stream* current();
  // True when every submitted task has finished.
  bool idle() const;
  // Wakes the threads of streams holding a task queued for a synchronizing caller (see
  // submit()): for a caller that asks about progress instead of synchronizing.
  static void wake_deferred_workers() { wake_deferred(nullptr); }
  uint64_t submitted() const;
  StreamFence fence() const;

 private:
  friend class Device;
  friend class Event;
  // No one asked to hear about any position (see notify_at_).
  static constexpr uint64_t kNoRequest = ~uint64_t{0};
  struct Item {
    Engine engine;
    Task task;
    uint64_t seq;
    bool always;  // runs in the error state too (event records and waits)
    const char* label;  // for the profiler; null: named by its engine
    bool caller_may_run;  // see submit()
  };
  uint64_t enqueue(Engine engine, Task task, bool always, const char* label = nullptr,
                   bool caller_may_run = false);
  // wait_idle(forever)'s first part: runs the caller_may_run tasks at the head of the queue
  // on the calling thread while no other thread runs one of the stream's tasks.
  void run_queued_on_caller();
  void worker();
  // `completed` is completed_.get(), passed in so the hot loop does not read the cache
  // line the submitter writes on every submit.
  void run_item(Item& item, std::atomic<uint64_t>* completed);
  // Spins a few microseconds for a task after `seen`; false if none came.
  bool spin_for_work(uint64_t seen) const;
  // Wakes the workers of every stream whose task was queued without a wake-up (enqueue()),
  // but `except`'s: a thread about to wait for several streams (one thread driving the
  // ranks of several devices) must not wait a poll interval for each.
  static void wake_deferred(const Stream* except);
  // Wakes the worker if it sleeps while a task waits for it.
  void wake_if_waiting();

  Device& device_;
  Context* context_;
  // From here on the submitter writes on every submit: a cache line apart from the
  // read-only fields above, which the worker reads for every task.
  alignas(64) mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // worker waits for tasks
  std::condition_variable done_cv_;   // synchronize waits for progress
  // A vector, swapped whole with the worker's batch: both keep their capacity, so a
  // steady stream of tasks allocates nothing.
  std::vector<Item> queue_;
  uint64_t next_seq_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> completed_;
  Status error_;       // first failure since the last synchronize
  bool stopping_ = false;
  bool worker_sleeping_ = false;
  // The sleeping worker wakes by itself every kPollInterval (stream.cc), so a task a caller
  // may run can be queued without a wake-up: see enqueue().
  bool worker_polling_ = false;
  // Until when the sleeping worker polls instead of sleeping for good: a while after it
  // last saw the stream given a task (next_seq_ past poll_seen_). Worker only.
  std::chrono::steady_clock::time_point poll_until_{};
  uint64_t poll_seen_ = 0;
  // In the list of streams with a task queued without a wake-up (set and cleared under that
  // list's mutex, stream.cc; read without it to skip the lock when already listed).
  std::atomic<bool> deferred_listed_{false};
  // A thread runs tasks of this stream (the worker its batch, or a synchronizing caller one
  // task): the other waits, which keeps the tasks in order.
  bool running_ = false;
  // next_seq_, readable without the lock by the spinning worker; on its own cache line so
  // the spinning does not slow the submitter's lock.
  alignas(64) std::atomic<uint64_t> published_{0};
  alignas(64) std::atomic<bool> has_error_{false};  // error_ is set, readable without the lock
  // The lowest position a thread in wait_idle() (resp. Device::synchronize) waits for:
  // the worker wakes it when a task reaches it, not after every task. Set under mutex_
  // (resp. the device's progress mutex), cleared to kNoRequest by the worker under it.
  std::atomic<uint64_t> notify_at_{kNoRequest};
  std::atomic<uint64_t> device_notify_at_{kNoRequest};
  std::thread thread_;                  // last: starts once the members above exist
};

// An event: each record() makes a new generation that completes when the stream
// reaches it; waits refer to the generation current when they were made.
class Event {
 public:
  Event() = default;
  // Waits until no stream task refers to the event any more.
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // Releases an event without waiting: when stream tasks (records, waits) still refer to
  // it, the last of them deletes it (kilnrtDestroyEvent).
  static void destroy(std::unique_ptr<Event> event);

  // Enqueues a record on `stream`.
  void record(Stream& stream);
  // Back to the never-recorded state (queries report complete, waits are no-ops).
  void reset();
  // The same in stream order: enqueues a reset of the records made so far on `stream`.
  void enqueue_reset(Stream& stream);
  // The latest generation at the time of the call (0: never recorded).
  uint64_t generation() const;
  bool is_complete(uint64_t generation) const;
  bool query() const { return is_complete(generation()); }
  // Waits for `generation`; timeout_ms < 0 waits forever.
  Status wait(uint64_t generation, int64_t timeout_ms) const;
  Status synchronize(int64_t timeout_ms) const { return wait(generation(), timeout_ms); }
  // Completion time of the latest completed record; error if it never completed.
  Expected<std::chrono::steady_clock::time_point> timestamp() const;

 private:
  friend class Stream;
  void complete(uint64_t generation);
  void reset_up_to(uint64_t generation);
  // Stream tasks referring to the event hold a use while queued.
  void acquire() const;
  void release() const;

  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  uint64_t recorded_ = 0;   // generations handed out
  uint64_t completed_ = 0;  // every generation up to this one has completed
  // Generations above completed_ + 1 that completed early (records of one event on
  // several streams may finish out of order), sorted.
  std::vector<uint64_t> completed_early_;
  uint64_t base_ = 0;  // recorded_ at the last reset(): generations up to it are "never"
  std::chrono::steady_clock::time_point time_{};
  uint64_t time_generation_ = 0;  // the generation time_ belongs to
  bool has_time_ = false;
  mutable int uses_ = 0;
  bool retired_ = false;  // destroy() was called; the last use deletes the event
};

// kilnFinalize sets this so stream tasks waiting on an event that can no longer complete
// give up (with an error) instead of hanging; kilnInit clears it.
void set_event_waits_abandoned(bool abandoned);

}  // namespace kiln::rt
