// Request queues, dynamic batching and the per-device workers of each served model, and the
// registry of loaded models.
//
// Each model has `instance_count` workers per device. With dynamic scheduling (the
// default) every worker pulls from one shared queue of the model, so an idle device takes
// the next batch whichever device is busy (work stealing in its simplest form: nothing is
// assigned before a device is free). With static scheduling each request is assigned to a
// device round-robin when it arrives and waits in that device's queue even if another device
// is idle (a fixed stream-to-device assignment, kept for comparison).
//
// A worker forms a batch from the front of its queue: requests whose input dims past dim 0
// agree, up to max_batch_size rows, waiting at most max_queue_delay_us after the oldest
// request arrived for more to come.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/llm_model.h"
#include "serve/metrics.h"
#include "serve/served_model.h"

namespace kiln::serve {

enum class Scheduling { kDynamic, kStatic };

using InferResult = Expected<std::vector<TensorData>>;

class ModelScheduler {
 public:
  // Starts the workers; `devices` are the default contexts of the devices `model` is loaded on.
  ModelScheduler(std::shared_ptr<ServedModel> model, std::vector<kilnrtContext> devices, Scheduling scheduling,
                 Metrics& metrics);
  ~ModelScheduler();  // shutdown()
  ModelScheduler(const ModelScheduler&) = delete;
  ModelScheduler& operator=(const ModelScheduler&) = delete;

  const ServedModel& model() const { return *model_; }

  // Queues a request checked by ServedModel::check_request; the future gets its outputs (in
  // model order) or the execution's error. resource_exhausted when the model's queues hold
  // max_queue_size requests already, unavailable once shutdown() began.
  Expected<std::future<InferResult>> submit(InferRequest request);

  // Stops accepting requests, runs every queued one, joins the workers. Idempotent.
  void shutdown();
  // From now on batches go out without waiting for max_queue_delay_us (the server is
  // stopping: the requests in flight must be answered before the workers are joined).
  void stop_waiting();

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    InferRequest request;
    int64_t rows = 1;
    Clock::time_point enqueued;
    Clock::time_point deadline = Clock::time_point::max();  // request.timeout_us after enqueued
    std::promise<InferResult> done;
  };
  void work(int device, size_t queue);
  // Called with the lock held and queues_[queue] not empty; may wait (unlocking) for more
  // requests. Empty when another worker took the requests meanwhile. Requests at the front
  // whose deadline passed are answered with deadline_exceeded and dropped.
  std::vector<std::unique_ptr<Pending>> take_batch(size_t queue, std::unique_lock<std::mutex>& lock);
  void run_batch(int device, DeviceBuffers& buffers, std::vector<std::unique_ptr<Pending>> batch);

  std::shared_ptr<ServedModel> model_;
  std::vector<kilnrtContext> devices_;
  Scheduling scheduling_;
  Metrics& metrics_;
  ModelMetrics& model_metrics_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::deque<std::unique_ptr<Pending>>> queues_;  // one (dynamic) or one per device (static)
  size_t queued_ = 0;
  size_t next_device_ = 0;  // static: round-robin position
  bool stopping_ = false;
  bool no_wait_ = false;
  std::vector<std::thread> workers_;
};

// The models being served, by name. Loading and unloading are serialised; lookups are not
// blocked by a load in progress (a reload swaps the new model in when it is ready, and the
// old one finishes its queued requests before it is unloaded).
class ModelRegistry {
 public:
  ModelRegistry(std::string repository, std::vector<kilnrtContext> devices, Scheduling scheduling, Metrics& metrics)
      : repository_(std::move(repository)), devices_(std::move(devices)), scheduling_(scheduling), metrics_(metrics) {}
  ~ModelRegistry() { unload_all(); }

  // (Re)loads `name` from the repository: not_found when the repository has no such model.
  Status load(const std::string& name);
  // not_found when `name` is not loaded. Queued requests still run.
  Status unload(const std::string& name);
  void unload_all();
  // ModelScheduler::stop_waiting on every model.
  void stop_waiting();
  // nullptr when not loaded (or a decoder model).
  std::shared_ptr<ModelScheduler> find(const std::string& name) const;
  // A decoder model (config.json "backend": "llm"); nullptr when not loaded (or not one).
  std::shared_ptr<LlmModel> find_llm(const std::string& name) const;
  std::vector<std::string> loaded() const;
  const std::string& repository() const { return repository_; }

 private:
  const std::string repository_;
  const std::vector<kilnrtContext> devices_;
  const Scheduling scheduling_;
  Metrics& metrics_;
  std::mutex load_mutex_;       // one load or unload at a time
  mutable std::mutex map_mutex_;
  std::map<std::string, std::shared_ptr<ModelScheduler>> models_;
  std::map<std::string, std::shared_ptr<LlmModel>> llms_;  // a name is in one map at most
};

}  // namespace kiln::serve
