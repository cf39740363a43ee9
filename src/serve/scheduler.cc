// Queues, batching and workers of each model; the registry of loaded models (scheduler.h).
#include "serve/scheduler.h"

#include <pthread.h>

#include <algorithm>

#include "serve/affinity.h"

namespace kiln::serve {

ModelScheduler::ModelScheduler(std::shared_ptr<ServedModel> model, std::vector<kilnrtContext> devices,
                               Scheduling scheduling, Metrics& metrics, WorkerOptions options)
    : model_(std::move(model)),
      devices_(std::move(devices)),
      scheduling_(scheduling),
      options_(std::move(options)),
      metrics_(metrics),
      model_metrics_(metrics.model(model_->name())),
      queues_(scheduling == Scheduling::kStatic ? devices_.size() : 1),
      idle_(queues_.size(), 0) {
  for (size_t d = 0; d < devices_.size(); ++d)
    for (int i = 0; i < model_->config().instance_count; ++i)
      workers_.emplace_back([this, d] { work(static_cast<int>(d), scheduling_ == Scheduling::kStatic ? d : 0); });
}

ModelScheduler::~ModelScheduler() { shutdown(); }

void ModelScheduler::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
}

void ModelScheduler::stop_waiting() {
  {
    std::lock_guard lock(mutex_);
    no_wait_ = true;
  }
  cv_.notify_all();
}

Expected<std::future<InferResult>> ModelScheduler::submit(InferRequest request) {
  auto p = std::make_unique<Pending>();
  p->rows = model_->batched() ? request.inputs.at(0).shape.at(0) : 1;
  p->request = std::move(request);
  std::future<InferResult> f = p->done.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return unavailable("model '%s' is being unloaded", model_->name().c_str());
    if (queued_ >= static_cast<size_t>(model_->config().max_queue_size)) {
      ++model_metrics_.rejected;
      return resource_exhausted("model '%s' has %zu requests queued (max_queue_size)", model_->name().c_str(), queued_);
    }
    p->enqueued = Clock::now();
    if (p->request.timeout_us > 0) p->deadline = p->enqueued + std::chrono::microseconds(p->request.timeout_us);
    size_t q = 0;
    if (scheduling_ == Scheduling::kStatic) q = next_device_++ % queues_.size();
    queues_[q].push_back(std::move(p));
    ++queued_;
  }
  // Every worker may be waiting on this queue (dynamic) or on another (static): wake all;
  // the ones with nothing to do go back to sleep.
  cv_.notify_all();
  return f;
}

std::vector<std::unique_ptr<ModelScheduler::Pending>> ModelScheduler::take_batch(size_t queue,
                                                                                 std::unique_lock<std::mutex>& lock,
                                                                                 bool wait) {
  std::deque<std::unique_ptr<Pending>>& q = queues_[queue];
  const int64_t max_rows = model_->batched() ? model_->config().max_batch_size : 1;
  const auto delay = std::chrono::microseconds(model_->config().max_queue_delay_us);
  // Rows at the front of the queue that may join its first request's batch.
  auto batchable = [&](size_t* count) {
    int64_t rows = 0;
    size_t n = 0;
    for (const auto& p : q) {
      if (rows + p->rows > max_rows || (n > 0 && !same_row_shapes(q.front()->request, p->request))) break;
      rows += p->rows;
      ++n;
    }
    *count = n;
    return rows;
  };
  size_t count = 0;
  for (;;) {
    while (!q.empty() && q.front()->deadline <= Clock::now()) {
      ++model_metrics_.timed_out;
      q.front()->done.set_value(deadline_exceeded("request timed out after %lld us in the queue of model '%s'",
                                                  static_cast<long long>(q.front()->request.timeout_us),
                                                  model_->name().c_str()));
      q.pop_front();
      --queued_;
    }
    if (q.empty()) return {};
    int64_t rows = batchable(&count);
    const auto deadline = q.front()->enqueued + delay;
    // Full, cannot grow, shutting down (drain at once), or waited long enough.
    if (rows >= max_rows || count < q.size() || stopping_ || no_wait_ || Clock::now() >= deadline) break;
    if (!wait) return {};
    cv_.wait_until(lock, deadline);
  }
  std::vector<std::unique_ptr<Pending>> batch;
  for (size_t i = 0; i < count; ++i) {
    batch.push_back(std::move(q.front()));
    q.pop_front();
  }
  queued_ -= batch.size();
  return batch;
}

bool ModelScheduler::wait_for_work(size_t queue, std::unique_lock<std::mutex>& lock) {
  ++idle_[queue];
  cv_.wait(lock, [&] { return stopping_ || !queues_[queue].empty(); });
  --idle_[queue];
  return !queues_[queue].empty();  // empty: stopping and drained
}

void ModelScheduler::work(int device, size_t queue) {
  // Named for ps/top and the affinity test; pinned before the stream is created, whose
  // thread inherits the affinity. A model loaded over HTTP gets its workers from an HTTP
  // thread, so the cores are set here, not inherited. A refused pin leaves the thread where
  // it was (the cores were checked when the server started).
  pthread_setname_np(pthread_self(), "kiln-worker");
  (void)pin_this_thread(options_.cores);
  if (kilnrtSetCurrentContext(devices_[static_cast<size_t>(device)]) != KILN_SUCCESS) return;
  kilnrtStream stream = nullptr;
  if (options_.prefetch && kilnrtCreateStream(&stream) == KILN_SUCCESS) {
    work_prefetching(device, queue, stream);
    kilnrtDestroyStream(stream);
    return;
  }
  DeviceBuffers buffers;
  std::unique_lock lock(mutex_);
  while (wait_for_work(queue, lock)) {
    std::vector<std::unique_ptr<Pending>> batch = take_batch(queue, lock);
    if (batch.empty()) continue;
    lock.unlock();
    run_batch(device, buffers, std::move(batch));
    lock.lock();
  }
}

void ModelScheduler::stage(Slot& slot, DeviceBuffers& buffers, std::vector<std::unique_ptr<Pending>> batch) {
  slot.batch = std::move(batch);
  slot.requests.clear();
  for (const auto& p : slot.batch) slot.requests.push_back(&p->request);
  slot.expiry = Clock::time_point::min();
  for (const auto& p : slot.batch) slot.expiry = std::max(slot.expiry, p->deadline);
  slot.status = model_->stage(buffers, slot.requests, &slot.staged);
}

namespace {

// Set by a host callback enqueued after a batch's execution: tells its worker, waiting on
// the scheduler's condition variable for a batch to prefetch, that the device is free.
struct ExecutionEnd {
  std::mutex* mutex;
  std::condition_variable* cv;
  bool done = false;
  static void signal(void* self) {
    auto* e = static_cast<ExecutionEnd*>(self);
    {
      std::lock_guard lock(*e->mutex);
      e->done = true;
    }
    e->cv->notify_all();
  }
};

}  // namespace

void ModelScheduler::work_prefetching(int device, size_t queue, kilnrtStream stream) {
  DeviceBuffers buffers[2];  // the running batch's and the prefetched one's
  Slot slots[2];
  int cur = 0;
  bool running = false;  // slots[cur] holds a launched (or failed to stage) batch
  ExecutionEnd end{&mutex_, &cv_};
  // Called without the lock.
  auto launch = [&](Slot& slot) {
    slot.launched = Clock::now();
    {
      std::lock_guard lock(mutex_);
      end.done = !slot.status.ok();
    }
    if (!slot.status.ok()) return;
    slot.cancel.store(false, std::memory_order_relaxed);
    model_->launch(device, slot.staged, stream, &slot.cancel);
    if (kilnrtLaunchCallback(&ExecutionEnd::signal, &end, KILN_CALLBACK_BLOCK, stream) != KILN_SUCCESS) {
      std::lock_guard lock(mutex_);
      end.done = true;  // no signal to wait for: finish() waits for the stream
    }
  };
  const auto delay = std::chrono::microseconds(model_->config().max_queue_delay_us);
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!running) {
      if (!wait_for_work(queue, lock)) return;
      std::vector<std::unique_ptr<Pending>> batch = take_batch(queue, lock);
      if (batch.empty()) continue;
      lock.unlock();
      stage(slots[cur], buffers[cur], std::move(batch));
      launch(slots[cur]);
      running = true;
      lock.lock();
    }
    // While slots[cur] executes: wait for the next ready batch, unless an idle worker can
    // take it, or for the execution's end. The callback is skipped on a stream in error
    // state, so the stream itself is asked when a wait times out.
    std::vector<std::unique_ptr<Pending>> next;
    while (!end.done) {
      std::deque<std::unique_ptr<Pending>>& q = queues_[queue];
      if (idle_[queue] == 0 && !q.empty()) {
        next = take_batch(queue, lock, /*wait=*/false);
        if (!next.empty()) break;
      }
      const auto now = Clock::now();
      auto until = now + std::chrono::milliseconds(20);
      if (!q.empty() && q.front()->enqueued + delay > now) until = std::min(until, q.front()->enqueued + delay);
      // Every request of the running batch past its deadline (answered 503 already): stop
      // the execution at its next node. A failed task skips the callback, so from then on
      // the stream is asked every millisecond.
      Slot& running_slot = slots[cur];
      if (!running_slot.cancel.load(std::memory_order_relaxed) && running_slot.expiry <= now)
        running_slot.cancel.store(true, std::memory_order_relaxed);
      if (running_slot.cancel.load(std::memory_order_relaxed))
        until = std::min(until, now + std::chrono::milliseconds(1));
      else
        until = std::min(until, running_slot.expiry);
      if (cv_.wait_until(lock, until) == std::cv_status::timeout && !end.done) {
        kilnrtStreamStatus st = KILN_STREAM_STATUS_NOT_READY;
        if (kilnrtStreamQuery(stream, &st) != KILN_SUCCESS || st == KILN_STREAM_STATUS_COMPLETE) break;
      }
    }
    lock.unlock();
    const int other = cur ^ 1;
    if (!next.empty()) {
      stage(slots[other], buffers[other], std::move(next));
      ++model_metrics_.prefetched;
    }
    std::vector<std::vector<TensorData>> outputs;
    Status status = slots[cur].status;
    if (status.ok()) status = model_->finish(device, slots[cur].staged, stream, &outputs);
    if (status.code() == StatusCode::kDeadlineExceeded && slots[cur].cancel.load(std::memory_order_relaxed))
      ++model_metrics_.interrupted;
    // The device is free: the prefetched batch goes first, the answers after.
    running = !slots[other].batch.empty();
    if (running) launch(slots[other]);
    answer(device, slots[cur], status, outputs);
    if (running) cur = other;
    lock.lock();
  }
}

void ModelScheduler::run_batch(int device, DeviceBuffers& buffers, std::vector<std::unique_ptr<Pending>> batch) {
  Slot slot;
  slot.launched = Clock::now();
  slot.batch = std::move(batch);
  for (const auto& p : slot.batch) slot.requests.push_back(&p->request);
  std::vector<std::vector<TensorData>> outputs;
  Status status = model_->execute(device, buffers, slot.requests, &outputs);
  answer(device, slot, status, outputs);
}

void ModelScheduler::answer(int device, Slot& slot, const Status& status, std::vector<std::vector<TensorData>>& outputs) {
  // Queue time: until the execution began; compute time: from there to the outputs copied
  // out (without prefetch the input copy is in it; with prefetch it overlapped the previous
  // execution).
  const auto end = Clock::now();
  int64_t rows = 0;
  for (const auto& p : slot.batch) {
    rows += p->rows;
    model_metrics_.queue_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(slot.launched - p->enqueued).count();
  }
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - slot.launched).count();
  metrics_.record_batch(model_metrics_, rows, ns);
  metrics_.add_device_busy(device, ns);
  for (size_t r = 0; r < slot.batch.size(); ++r) {
    // Its client was answered 503 at the deadline (HttpServer) and drops this result.
    if (end > slot.batch[r]->deadline) ++model_metrics_.timed_out;
    if (status.ok()) {
      slot.batch[r]->done.set_value(std::move(outputs[r]));
    } else {
      slot.batch[r]->done.set_value(status);
    }
  }
  slot.batch.clear();
  slot.requests.clear();
}

Status ModelRegistry::load(const std::string& name) {
  std::lock_guard load_lock(load_mutex_);
  KILN_ASSIGN_OR_RETURN(ModelFiles files, find_model(repository_, name));
  std::shared_ptr<ModelScheduler> old;
  std::shared_ptr<LlmModel> old_llm;
  if (files.config.backend == "llm") {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<LlmModel> model, LlmModel::load(files, metrics_));
    std::lock_guard lock(map_mutex_);
    old_llm = std::exchange(llms_[name], std::move(model));
    if (auto it = models_.find(name); it != models_.end()) {
      old = std::move(it->second);
      models_.erase(it);
    }
  } else {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<ServedModel> model, ServedModel::load(files, devices_));
    auto scheduler = std::make_shared<ModelScheduler>(std::move(model), devices_, scheduling_, metrics_, worker_options_);
    std::lock_guard lock(map_mutex_);
    old = std::exchange(models_[name], std::move(scheduler));
    if (auto it = llms_.find(name); it != llms_.end()) {
      old_llm = std::move(it->second);
      llms_.erase(it);
    }
  }
  // The old version's queued requests (completions in progress) still run on it.
  if (old) old->shutdown();
  if (old_llm) old_llm->shutdown();
  return ok_status();
}

Status ModelRegistry::unload(const std::string& name) {
  std::lock_guard load_lock(load_mutex_);
  std::shared_ptr<ModelScheduler> old;
  std::shared_ptr<LlmModel> old_llm;
  {
    std::lock_guard lock(map_mutex_);
    if (auto it = models_.find(name); it != models_.end()) {
      old = std::move(it->second);
      models_.erase(it);
    } else if (auto l = llms_.find(name); l != llms_.end()) {
      old_llm = std::move(l->second);
      llms_.erase(l);
    } else {
      return not_found("model '%s' is not loaded", name.c_str());
    }
  }
  if (old) old->shutdown();
  if (old_llm) old_llm->shutdown();
  return ok_status();
}

void ModelRegistry::unload_all() {
  std::lock_guard load_lock(load_mutex_);
  std::map<std::string, std::shared_ptr<ModelScheduler>> models;
  std::map<std::string, std::shared_ptr<LlmModel>> llms;
  {
    std::lock_guard lock(map_mutex_);
    models.swap(models_);
    llms.swap(llms_);
  }
  for (auto& [name, m] : models) m->shutdown();
  for (auto& [name, m] : llms) m->shutdown();
}

void ModelRegistry::stop_waiting() {
  std::lock_guard lock(map_mutex_);
  for (auto& [name, m] : models_) m->stop_waiting();
}

std::shared_ptr<ModelScheduler> ModelRegistry::find(const std::string& name) const {
  std::lock_guard lock(map_mutex_);
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second;
}

std::shared_ptr<LlmModel> ModelRegistry::find_llm(const std::string& name) const {
  std::lock_guard lock(map_mutex_);
  auto it = llms_.find(name);
  return it == llms_.end() ? nullptr : it->second;
}

std::vector<std::string> ModelRegistry::loaded() const {
  std::lock_guard lock(map_mutex_);
  std::vector<std::string> names;
  for (const auto& [name, m] : models_) names.push_back(name);
  for (const auto& [name, m] : llms_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::serve
