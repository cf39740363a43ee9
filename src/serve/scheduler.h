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
//
// Prefetch (on by default): a worker runs its batch on a stream of its device
// (kilnmdlExecuteAsync) and, while it executes, takes the next batch that is ready and
// copies its inputs into a second set of device buffers; when the execution ends, the
// prefetched batch is launched at once and only then are the finished batch's outputs copied
// out and its requests answered. The device waits neither for the input copy nor for the
// answers. A worker prefetches only when no other worker of the queue is waiting for work
// (an idle device takes the batch instead) and only a batch that is ready (full, or its
// batching delay passed): prefetch does not make batches smaller. A prefetched request has
// started: its timeout no longer drops it unrun.
//
// Interruption (prefetch only): while its batch executes, the worker also waits for the
// latest deadline of the batch's requests; once every one has passed (each was answered 503
// by its HTTP thread), it sets the batch's cancellation flag and the execution stops at its
// next node boundary, so the device takes the next batch instead of finishing work nobody
// waits for. Counted in ModelMetrics::interrupted. Without prefetch the worker is inside the
// synchronous execution and nothing watches the deadlines: the batch runs to its end.
#pragma once

#include <atomic>
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

// How the workers of every model run.
struct WorkerOptions {
  bool prefetch = true;    // stage the next batch during the current execution (above)
  std::vector<int> cores;  // empty: not pinned; else each worker (and the stream it creates) runs there
};

using InferResult = Expected<std::vector<TensorData>>;

class ModelScheduler {
 public:
  // Starts the workers; `devices` are the default contexts of the devices `model` is loaded on.
  ModelScheduler(std::shared_ptr<ServedModel> model, std::vector<kilnrtContext> devices, Scheduling scheduling,
                 Metrics& metrics, WorkerOptions options = {});
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
  // A batch taken from the queue, staged and (prefetch) launched on the worker's stream.
  struct Slot {
    std::vector<std::unique_ptr<Pending>> batch;
    std::vector<const InferRequest*> requests;
    StagedBatch staged;
    Status status;  // of stage(); a batch that failed to stage is not launched
    Clock::time_point launched;
    // The latest deadline of the batch's requests (max() when one has none): past it every
    // request has been answered 503, and the worker sets `cancel`, which stops the execution
    // at its next node (runtime/execution_cancel.h).
    Clock::time_point expiry = Clock::time_point::max();
    std::atomic<bool> cancel{false};
  };
  void work(int device, size_t queue);
  void work_prefetching(int device, size_t queue, kilnrtStream stream);
  // Waits for work on `queue`, counted in idle_ meanwhile; false once stopping and drained.
  bool wait_for_work(size_t queue, std::unique_lock<std::mutex>& lock);
  // Called with the lock held and queues_[queue] not empty; with `wait`, may wait (unlocking)
  // for more requests; without, returns nothing unless a batch is ready now. Empty when
  // another worker took the requests meanwhile. Requests at the front whose deadline passed
  // are answered with deadline_exceeded and dropped.
  std::vector<std::unique_ptr<Pending>> take_batch(size_t queue, std::unique_lock<std::mutex>& lock, bool wait = true);
  void run_batch(int device, DeviceBuffers& buffers, std::vector<std::unique_ptr<Pending>> batch);
  void stage(Slot& slot, DeviceBuffers& buffers, std::vector<std::unique_ptr<Pending>> batch);
  // Metrics, and each request's outputs or the batch's error; empties the slot.
  void answer(int device, Slot& slot, const Status& status, std::vector<std::vector<TensorData>>& outputs);

  std::shared_ptr<ServedModel> model_;
  std::vector<kilnrtContext> devices_;
  Scheduling scheduling_;
  const WorkerOptions options_;
  Metrics& metrics_;
  ModelMetrics& model_metrics_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::deque<std::unique_ptr<Pending>>> queues_;  // one (dynamic) or one per device (static)
  size_t queued_ = 0;
  std::vector<int> idle_;  // per queue: workers waiting for work (prefetch leaves it to them)
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
  ModelRegistry(std::string repository, std::vector<kilnrtContext> devices, Scheduling scheduling, Metrics& metrics,
                WorkerOptions workers = {})
      : repository_(std::move(repository)),
        devices_(std::move(devices)),
        scheduling_(scheduling),
        worker_options_(std::move(workers)),
        metrics_(metrics) {}
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
  const WorkerOptions worker_options_;
  Metrics& metrics_;
  std::mutex load_mutex_;       // one load or unload at a time
  mutable std::mutex map_mutex_;
  std::map<std::string, std::shared_ptr<ModelScheduler>> models_;
  std::map<std::string, std::shared_ptr<LlmModel>> llms_;  // a name is in one map at most
};

}  // namespace kiln::serve
