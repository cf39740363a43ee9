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
#include <thread>

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

  // Enqueues a task and returns its sequence number (1, 2, ...) without waiting. When a
  // task fails, the stream enters an error state: the tasks queued after it are skipped
  // (event records still complete, so no waiter hangs) until synchronize() reports it.
  uint64_t submit(Engine engine, Task task);
  // Makes later tasks wait for the event's latest record at the time of the call.
  void wait_event(const Event& event);

  // Waits for every task submitted so far; timeout_ms < 0 waits forever. Returns the
  // error of the first failed task (and clears the error state), or a deadline error.
  Status synchronize(int64_t timeout_ms);
  // True when every submitted task has finished.
  bool idle() const;
  uint64_t submitted() const;
  StreamFence fence() const;

 private:
  struct Item {
    Engine engine;
    Task task;
    uint64_t seq;
  };
  void worker();

  Device& device_;
  Context* context_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // worker waits for tasks
  std::condition_variable done_cv_;   // synchronize waits for progress
  std::deque<Item> queue_;
  uint64_t next_seq_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> completed_;
  Status error_;       // first failure since the last synchronize
  bool stopping_ = false;
  bool worker_sleeping_ = false;
  std::thread thread_;
};

// An event: each record() makes a new generation that completes when the stream
// reaches it; waits refer to the generation current when they were made.
class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Enqueues a record on `stream`.
  void record(Stream& stream);
  // Back to the never-recorded state (queries report complete, waits are no-ops).
  void reset();
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
  void complete(uint64_t generation);

  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  uint64_t recorded_ = 0;   // generations handed out
  uint64_t completed_ = 0;  // highest generation completed
  std::chrono::steady_clock::time_point time_{};
  bool has_time_ = false;
};

}  // namespace kiln::rt
