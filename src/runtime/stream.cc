// Streams (an in-order queue run by one host thread) and events (generations completed
// by record tasks).
#include "runtime/stream.h"

#include <algorithm>

#include "core/fault_inject.h"
#include "profiler/profiler.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::rt {
namespace {

// How long an idle stream thread looks for more work before it sleeps: long enough to
// catch the next task of a caller submitting in a loop (no wake-up system call), short
// enough not to burn a core the device's kernels could use. The first part spins with
// pause; the rest yields between looks, so a thread that is ready to run on this core
// (the submitter, another stream) gets it.
constexpr auto kSpin = std::chrono::microseconds(1);
constexpr auto kSpinYield = std::chrono::microseconds(4);

// How long synchronize looks for the stream to finish before it sleeps: a short task (an
// 8-byte collective, a tiny model) ends within microseconds, and a wake-up through the
// condition variable costs about as much again on each side. Yields between looks, so the
// stream's own thread (on the same core, when cores are few) runs.
constexpr auto kSyncSpin = std::chrono::microseconds(20);

// A task a synchronizing caller may run (a collective) is queued without waking a sleeping
// worker when the worker polls: the caller that synchronizes next runs it with no thread
// hand-over, and a wake-up is the costliest part of a small collective where ranks outnumber
// cores (the woken worker preempts a rank mid-operation: 8-byte AllReduce of 4 processes on
// 2 cores, ~22 -> ~8 us). The next task queued behind it, a synchronize of another stream or
// the device, and a query of the stream wake the worker; a caller that does none of these
// still gets its task run within kPollInterval by the polling worker. Each poll is a wake-up
// that preempts a rank on a full core: 5 ms rather than 1 took an 8-byte AllReduce of 4
// processes on 2 cores from ~5.8 to ~5.2 us (median of 8 runs, with spin_polls_ 2 in the
// comm's LinkTransport). The worker polls for kPollLinger after the stream was last given a
// task, then sleeps until woken (the first task after an idle spell wakes it).
constexpr auto kPollInterval = std::chrono::milliseconds(5);
constexpr auto kPollLinger = std::chrono::milliseconds(50);

// The streams with a task queued without a wake-up (see Stream::wake_deferred), and their
// number, read without the lock: a caller submitting and synchronizing one stream in a loop
// takes the list's lock only once (its stream stays listed), not twice per task.
std::mutex deferred_mutex;
std::vector<Stream*> deferred_streams;
std::atomic<size_t> deferred_count{0};

// A waiting task re-checks the abandon flag this often (only while blocked).
constexpr int64_t kAbandonPollMs = 50;

std::atomic<bool> event_waits_abandoned{false};

// Set on each stream's own thread.
thread_local Stream* t_worker_stream = nullptr;
// The profiler's track per engine of this thread's stream (-1 until first profiled task),
// and that stream: a thread synchronizing streams runs tasks of several (run_queued_on_caller).
thread_local int t_profile_tracks[3] = {-1, -1, -1};
thread_local const Stream* t_profile_stream = nullptr;

const char* default_task_label(Engine engine) {
  switch (engine) {
    case Engine::kCompute: return "compute task";
    case Engine::kCopy: return "copy task";
    case Engine::kHost: return "host task";
  }
  return "task";
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

void set_event_waits_abandoned(bool abandoned) {
  event_waits_abandoned.store(abandoned, std::memory_order_release);
}

// ---- Stream ------------------------------------------------------------------------------

Stream::Stream(Device& device, Context* context)
    : device_(device),
      context_(context),
      completed_(std::make_shared<std::atomic<uint64_t>>(0)),
      thread_([this] { worker(); }) {
  device_.add_stream(this);
}

Stream::~Stream() {
  KILN_CHECK(!on_worker_thread(), "%s destroyed from one of its own tasks", name().c_str());
  bool wake;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
  thread_.join();  // the worker drains the queue first
  {
    std::lock_guard deferred(deferred_mutex);
    if (deferred_listed_.load(std::memory_order_relaxed)) {
      deferred_streams.erase(std::find(deferred_streams.begin(), deferred_streams.end(), this));
      deferred_count.store(deferred_streams.size(), std::memory_order_release);
    }
  }
  device_.remove_stream(this);
}

std::string Stream::name() const {
  return str_format("stream %p on %s", static_cast<const void*>(this), device_.name().c_str());
}

uint64_t Stream::submit(Engine engine, Task task, const char* label, bool caller_may_run) {
  return enqueue(engine, std::move(task), /*always=*/false, label, caller_may_run && engine == Engine::kHost);
}

uint64_t Stream::enqueue(Engine engine, Task task, bool always, const char* label, bool caller_may_run) {
  uint64_t seq;
  bool wake, deferred;
  {
    std::lock_guard lock(mutex_);
    seq = ++next_seq_;
    queue_.push_back(Item{engine, std::move(task), seq, always, label, caller_may_run});
    published_.store(seq, std::memory_order_release);
    // Alone in the queue and the worker polling: left to the synchronizing caller (see
    // kPollInterval), and the worker keeps polling.
    deferred = caller_may_run && worker_polling_ && queue_.size() == 1;
    wake = worker_sleeping_ && !deferred;
  }
  if (deferred && !deferred_listed_.load(std::memory_order_acquire)) {
    std::lock_guard lock(deferred_mutex);
    if (!deferred_listed_.load(std::memory_order_relaxed)) {
      deferred_listed_.store(true, std::memory_order_release);
      deferred_streams.push_back(this);
      deferred_count.store(deferred_streams.size(), std::memory_order_release);
    }
  }
  // A spinning or busy worker finds the task without a wake-up.
  if (wake) work_cv_.notify_one();
  return seq;
}

void Stream::wake_deferred(const Stream* except) {
  // Nothing listed but `except` (whose tasks the caller runs itself): it stays listed, so
  // its next deferred task need not list it again. A stream listed concurrently and missed
  // here is run by its worker's next poll.
  const size_t listed = deferred_count.load(std::memory_order_acquire);
  if (listed == 0) return;
  if (listed == 1 && except != nullptr && except->deferred_listed_.load(std::memory_order_acquire))
    return;
  std::lock_guard lock(deferred_mutex);  // before any stream's mutex (see enqueue)
  bool keep_except = false;
  for (Stream* s : deferred_streams) {
    if (s == except) {
      keep_except = true;
      continue;
    }
    s->deferred_listed_.store(false, std::memory_order_release);
    s->wake_if_waiting();
  }
  deferred_streams.clear();
  if (keep_except) deferred_streams.push_back(const_cast<Stream*>(except));
  deferred_count.store(deferred_streams.size(), std::memory_order_release);
}

void Stream::wake_if_waiting() {
  bool wake;
  {
    std::lock_guard lock(mutex_);
    wake = worker_sleeping_ && !running_ && !queue_.empty();
  }
  if (wake) work_cv_.notify_one();
}

bool Stream::spin_for_work(uint64_t seen) const {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    // Look at the submitter's counter only every few pauses: each look pulls its cache
    // line away from the submitter, and a few tasks arriving meanwhile make one batch.
    for (int i = 0; i < 4; ++i) {
      if (published_.load(std::memory_order_acquire) != seen) return true;
      for (int k = 0; k < 16; ++k) cpu_relax();
    }
    if (std::chrono::steady_clock::now() - start > kSpin) break;
  }
  for (;;) {
    std::this_thread::yield();
    if (published_.load(std::memory_order_acquire) != seen) return true;
    if (std::chrono::steady_clock::now() - start > kSpinYield) return false;
  }
}

void Stream::worker() {
  // The stream's thread lives where ComputeScope puts a compute task's leading thread (the
  // device's first core when the task runs two or more threads), so its tasks need no
  // affinity change.
  pin_thread_to_cores(compute_leader_cores(device_));
  t_worker_stream = this;
  std::vector<Item> batch;
  std::atomic<uint64_t>* completed = completed_.get();
  std::unique_lock lock(mutex_);
  // Spin only right after a batch of its own: a task that arrives while the worker spins
  // but is run by a synchronizing caller must not start another spin. A caller submitting
  // and running a collective every few microseconds would otherwise keep this thread
  // spinning for good, taking a core from the ranks (4 processes on 2 cores: all four
  // ranks on one core, the spinning stream threads on the other, 8-byte AllReduce ~8 us).
  bool may_spin = false;
  for (;;) {
    if (queue_.empty() || running_) {  // nothing to do, or a synchronizing caller runs a task
      if (stopping_ && queue_.empty()) return;
      bool arrived = false;
      if (may_spin) {
        may_spin = false;
        uint64_t seen = next_seq_;
        lock.unlock();
        arrived = spin_for_work(seen);
        lock.lock();
      }
      if (!arrived) {
        while ((queue_.empty() || running_) && !stopping_) {
          worker_sleeping_ = true;
          // Tasks given since the last look (run here, by a caller, or still queued) keep
          // the worker polling; the clock is read here rather than on every submit.
          const auto now = std::chrono::steady_clock::now();
          if (next_seq_ != poll_seen_) {
            poll_seen_ = next_seq_;
            poll_until_ = now + kPollLinger;
          }
          if (now < poll_until_) {
            worker_polling_ = true;
            work_cv_.wait_for(lock, kPollInterval);
            worker_polling_ = false;
          } else {
            work_cv_.wait(lock);
          }
          worker_sleeping_ = false;
        }
      }
      continue;
    }
    // Take everything queued at once: one lock round trip per batch, not per task.
    batch.swap(queue_);
    running_ = true;
    lock.unlock();
    for (Item& item : batch) run_item(item, completed);
    batch.clear();
    lock.lock();
    running_ = false;
    may_spin = true;
  }
}

void Stream::run_item(Item& item, std::atomic<uint64_t>* completed) {
  Status status;
  if (item.task && (item.always || !has_error_.load(std::memory_order_acquire))) {
    // The task's span (and the ops and copies recorded inside it) go on the track of this
    // stream's engine; it starts once the task holds its engine, so waiting for the engine
    // shows as a gap.
    bool profiled = false;
    int64_t profile_start = -1;
    if (KILN_UNLIKELY(profiler::enabled())) {
      int e = static_cast<int>(item.engine);
      if (t_profile_stream != this) {
        t_profile_stream = this;
        for (int& track : t_profile_tracks) track = -1;
      }
      if (t_profile_tracks[e] < 0)
        t_profile_tracks[e] = profiler::stream_track(this, device_.id(), device_.name(),
                                                     device_.num_threads(),
                                                     static_cast<profiler::EngineKind>(e));
      profiler::set_thread_track(t_profile_tracks[e]);
      profiled = true;
    }
    switch (item.engine) {
      case Engine::kCompute: {
        std::lock_guard engine(device_.compute_engine());
        ComputeScope scope(device_);
        if (KILN_UNLIKELY(profiled)) profile_start = profiler::now_ns();
        status = item.task();
        break;
      }
      case Engine::kCopy: {
        std::lock_guard engine(device_.copy_engine());
        if (KILN_UNLIKELY(profiled)) profile_start = profiler::now_ns();
        // KILN_FAULT_INJECT's copy site: the task fails, as a failing DMA would, before it runs.
        if (uint64_t event = fault::should_fail(fault::Site::kCopy); KILN_UNLIKELY(event != 0))
          status = fault::injected_error(fault::Site::kCopy, event, item.label ? item.label : "copy task");
        else
          status = item.task();
        break;
      }
      case Engine::kHost:
        if (KILN_UNLIKELY(profiled)) profile_start = profiler::now_ns();
        status = item.task();
        break;
    }
    if (KILN_UNLIKELY(profiled)) {
      profiler::record_task(item.label ? item.label : default_task_label(item.engine),
                            profile_start);
      profiler::set_thread_track(-1);
    }
  }
  item.task = nullptr;  // release what the task captured before anyone sees it done
  if (!status.ok()) {
    std::lock_guard lock(mutex_);
    if (error_.ok()) {
      status.add_context("task %llu on %s", static_cast<unsigned long long>(item.seq),
                         name().c_str());
      error_ = std::move(status);
      has_error_.store(true, std::memory_order_release);
    }
  }
  // Pairs with the requests of wait_idle() and Device::synchronize(): either the waiter
  // sees the new count when it checks, or this thread sees its request and wakes it.
  completed->store(item.seq, std::memory_order_seq_cst);
  if (item.seq >= notify_at_.load(std::memory_order_seq_cst)) {
    {
      std::lock_guard lock(mutex_);
      notify_at_.store(kNoRequest, std::memory_order_seq_cst);
    }
    done_cv_.notify_all();  // waiters not done yet ask again
  }
  if (item.seq >= device_notify_at_.load(std::memory_order_seq_cst)) {
    device_.notify_progress(device_notify_at_);
  }
}

void Stream::run_queued_on_caller() {
  std::unique_lock lock(mutex_);
  bool ran = false;
  while (!running_ && !stopping_ && !queue_.empty() && queue_.front().caller_may_run) {
    Item item = std::move(queue_.front());
    queue_.erase(queue_.begin());
    running_ = true;
    lock.unlock();
    // Inside the task this thread counts as the stream's (Stream::current, and waiting for
    // the stream from the task is refused as on the stream's thread).
    Stream* outer = t_worker_stream;
    t_worker_stream = this;
    run_item(item, completed_.get());
    t_worker_stream = outer;
    lock.lock();
    running_ = false;
    ran = true;
  }
  // What is left is the stream thread's, which may have gone to sleep meanwhile.
  if (ran && !queue_.empty() && worker_sleeping_) work_cv_.notify_one();
}

Status Stream::wait_idle(int64_t timeout_ms) {
  if (on_worker_thread()) {
    return failed_precondition("%s: cannot wait for the stream from one of its own tasks",
                               name().c_str());
  }
  // Other streams' deferred tasks run on their threads meanwhile; this one's on this thread
  // (waiting forever) or on its own.
  wake_deferred(timeout_ms < 0 ? this : nullptr);
  // With a timeout the caller must be back in time, and a task may take longer.
  if (timeout_ms < 0) {
    run_queued_on_caller();
    // All done here (the common case of a caller running its stream's tasks): no lock.
    if (completed_->load(std::memory_order_acquire) >= published_.load(std::memory_order_acquire))
      return Status();
  }
  const auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::milliseconds(timeout_ms);
  {
    const uint64_t submitted = published_.load(std::memory_order_acquire);
    while (completed_->load(std::memory_order_acquire) < submitted) {
      if (std::chrono::steady_clock::now() - start > kSyncSpin) break;
      std::this_thread::yield();
    }
  }
  std::unique_lock lock(mutex_);
  uint64_t target = next_seq_;
  bool finished = true;
  for (;;) {
    // Ask the worker to wake us at `target` (the lowest request wins; whoever is woken
    // early asks again), then check: see run_item().
    if (target < notify_at_.load(std::memory_order_seq_cst)) {
      notify_at_.store(target, std::memory_order_seq_cst);
    }
    if (completed_->load(std::memory_order_seq_cst) >= target) break;
    if (timeout_ms < 0) {
      done_cv_.wait(lock);
    } else if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
               completed_->load(std::memory_order_seq_cst) < target) {
      finished = false;
      break;
    }
  }
  if (!finished) {
    uint64_t left = target - completed_->load(std::memory_order_acquire);
    return deadline_exceeded("%s: %llu of %llu tasks still pending after %lld ms", name().c_str(),
                             static_cast<unsigned long long>(left),
                             static_cast<unsigned long long>(target),
                             static_cast<long long>(timeout_ms));
  }
  return Status();
}

Status Stream::take_error() {
  // A task that failed set has_error_ before its completion was published: a caller that
  // waited for it sees the flag without the lock.
  if (!has_error_.load(std::memory_order_acquire)) return Status();
  std::lock_guard lock(mutex_);
  Status error = std::move(error_);
  error_ = Status();
  has_error_.store(false, std::memory_order_release);
  return error;
}

Status Stream::synchronize(int64_t timeout_ms) {
  KILN_RETURN_IF_ERROR(wait_idle(timeout_ms));
  return take_error();
}

bool Stream::on_worker_thread() const { return t_worker_stream == this; }

Stream* Stream::current() { return t_worker_stream; }

bool Stream::idle() const {
  std::lock_guard lock(mutex_);
  return completed_->load(std::memory_order_acquire) >= next_seq_;
}

uint64_t Stream::submitted() const {
  std::lock_guard lock(mutex_);
  return next_seq_;
}

StreamFence Stream::fence() const {
  std::lock_guard lock(mutex_);
  return StreamFence{completed_, next_seq_};
}

void Stream::wait_event(const Event& event) {
  uint64_t generation = event.generation();
  // Nothing to wait for: never recorded, or that record already ran.
  if (generation == 0 || event.is_complete(generation)) return;
  event.acquire();
  const Event* e = &event;
  enqueue(
      Engine::kHost,
      [e, generation]() -> Status {
        Status status;
        for (;;) {
          status = e->wait(generation, kAbandonPollMs);
          if (status.ok() || event_waits_abandoned.load(std::memory_order_acquire)) break;
        }
        if (KILN_UNLIKELY(profiler::enabled()) && status.ok())
          profiler::record_flow_end(profiler::flow_id(e, generation));
        e->release();
        if (!status.ok()) status.add_context("wait for an event abandoned by kilnFinalize");
        return status;
      },
      /*always=*/true, "StreamWaitEvent");
}

// ---- Event -------------------------------------------------------------------------------

Event::~Event() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return uses_ == 0; });
}

void Event::destroy(std::unique_ptr<Event> event) {
  if (!event) return;
  {
    std::lock_guard lock(event->mutex_);
    if (event->uses_ > 0) {
      event->retired_ = true;
      event.release();  // the last release() deletes it
      return;
    }
  }
  // No use left: `event` deletes it here.
}

void Event::acquire() const {
  std::lock_guard lock(mutex_);
  ++uses_;
}

void Event::release() const {
  bool last_of_retired = false;
  {
    std::lock_guard lock(mutex_);
    --uses_;
    if (uses_ == 0) {
      if (retired_) {
        last_of_retired = true;
      } else {
        cv_.notify_all();  // a destructor may be waiting
      }
    }
  }
  if (last_of_retired) delete this;
}

void Event::record(Stream& stream) {
  uint64_t generation;
  {
    std::lock_guard lock(mutex_);
    generation = ++recorded_;
    ++uses_;
  }
  stream.enqueue(
      Engine::kHost,
      [this, generation]() -> Status {
        if (KILN_UNLIKELY(profiler::enabled()))
          profiler::record_flow_start(profiler::flow_id(this, generation));
        complete(generation);
        release();
        return Status();
      },
      /*always=*/true, "EventRecord");
}

void Event::complete(uint64_t generation) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  if (generation == completed_ + 1) {
    completed_ = generation;
    while (!completed_early_.empty() && completed_early_.front() == completed_ + 1) {
      completed_ = completed_early_.front();
      completed_early_.erase(completed_early_.begin());
    }
  } else if (generation > completed_) {
    completed_early_.insert(
        std::upper_bound(completed_early_.begin(), completed_early_.end(), generation),
        generation);
  }
  if (generation > base_ && generation >= time_generation_) {
    time_ = now;
    time_generation_ = generation;
    has_time_ = true;
  }
  cv_.notify_all();
}

void Event::reset() {
  std::lock_guard lock(mutex_);
  base_ = recorded_;
  has_time_ = false;
}

void Event::reset_up_to(uint64_t generation) {
  std::lock_guard lock(mutex_);
  base_ = std::max(base_, generation);
  if (time_generation_ <= base_) has_time_ = false;
}

void Event::enqueue_reset(Stream& stream) {
  uint64_t generation;
  {
    std::lock_guard lock(mutex_);
    generation = recorded_;  // later records are not undone by this reset
    ++uses_;
  }
  stream.enqueue(
      Engine::kHost,
      [this, generation]() -> Status {
        reset_up_to(generation);
        release();
        return Status();
      },
      /*always=*/true, "EventReset");
}

uint64_t Event::generation() const {
  std::lock_guard lock(mutex_);
  return recorded_ > base_ ? recorded_ : 0;
}

bool Event::is_complete(uint64_t generation) const {
  std::lock_guard lock(mutex_);
  return generation <= completed_ ||
         std::binary_search(completed_early_.begin(), completed_early_.end(), generation);
}

Status Event::wait(uint64_t generation, int64_t timeout_ms) const {
  std::unique_lock lock(mutex_);
  auto done = [&] {
    return generation <= completed_ ||
           std::binary_search(completed_early_.begin(), completed_early_.end(), generation);
  };
  if (timeout_ms < 0) {
    cv_.wait(lock, done);
    return Status();
  }
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
    return deadline_exceeded("event %p: record %llu not complete after %lld ms",
                             static_cast<const void*>(this),
                             static_cast<unsigned long long>(generation),
                             static_cast<long long>(timeout_ms));
  }
  return Status();
}

Expected<std::chrono::steady_clock::time_point> Event::timestamp() const {
  std::lock_guard lock(mutex_);
  if (recorded_ <= base_) {
    return failed_precondition("event %p was never recorded", static_cast<const void*>(this));
  }
  if (!has_time_ || time_generation_ != recorded_) {
    return failed_precondition("event %p: its latest record has not completed yet",
                               static_cast<const void*>(this));
  }
  return time_;
}

}  // namespace kiln::rt
