// Queues, batching and workers of each model; the registry of loaded models (scheduler.h).
#include "serve/scheduler.h"

#include <algorithm>

namespace kiln::serve {

ModelScheduler::ModelScheduler(std::shared_ptr<ServedModel> model, std::vector<kilnrtContext> devices,
                               Scheduling scheduling, Metrics& metrics)
    : model_(std::move(model)),
      devices_(std::move(devices)),
      scheduling_(scheduling),
      metrics_(metrics),
      model_metrics_(metrics.model(model_->name())),
      queues_(scheduling == Scheduling::kStatic ? devices_.size() : 1) {
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
                                                                                 std::unique_lock<std::mutex>& lock) {
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

void ModelScheduler::work(int device, size_t queue) {
  if (kilnrtSetCurrentContext(devices_[static_cast<size_t>(device)]) != KILN_SUCCESS) return;
  DeviceBuffers buffers;
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queues_[queue].empty(); });
    if (queues_[queue].empty()) return;  // stopping and drained
    std::vector<std::unique_ptr<Pending>> batch = take_batch(queue, lock);
    if (batch.empty()) continue;
    lock.unlock();
    run_batch(device, buffers, std::move(batch));
    lock.lock();
  }
}

void ModelScheduler::run_batch(int device, DeviceBuffers& buffers, std::vector<std::unique_ptr<Pending>> batch) {
  const auto start = Clock::now();
  std::vector<const InferRequest*> requests;
  int64_t rows = 0;
  for (const auto& p : batch) {
    requests.push_back(&p->request);
    rows += p->rows;
    model_metrics_.queue_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(start - p->enqueued).count();
  }
  std::vector<std::vector<TensorData>> outputs;
  Status status = model_->execute(device, buffers, requests, &outputs);
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  metrics_.record_batch(model_metrics_, rows, ns);
  metrics_.add_device_busy(device, ns);
  const auto end = Clock::now();
  for (size_t r = 0; r < batch.size(); ++r) {
    // Its client was answered 503 at the deadline (HttpServer) and drops this result.
    if (end > batch[r]->deadline) ++model_metrics_.timed_out;
    if (status.ok()) {
      batch[r]->done.set_value(std::move(outputs[r]));
    } else {
      batch[r]->done.set_value(status);
    }
  }
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
    auto scheduler = std::make_shared<ModelScheduler>(std::move(model), devices_, scheduling_, metrics_);
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
