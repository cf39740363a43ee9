// The server's counters, exported at GET /metrics in the Prometheus text format (version
// 0.0.4). Counters are atomics updated by the workers and HTTP threads without a lock;
// only adding a model's series takes one.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

// Batch sizes (rows per execution) are counted in buckets <= 1, 2, 4, ... 128, +Inf.
inline constexpr std::array<int64_t, 8> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128};

struct ModelMetrics {
  std::atomic<int64_t> requests{0};   // requests answered with outputs
  std::atomic<int64_t> failures{0};   // requests of this model answered with an error
  std::atomic<int64_t> rejected{0};   // refused with 503 because the queue was full
  std::atomic<int64_t> timed_out{0};  // parameters.timeout passed in the queue or executing
  std::atomic<int64_t> executions{0};
  std::atomic<int64_t> prefetched{0};  // executions whose inputs were copied during another's
  std::atomic<int64_t> interrupted{0};  // executions stopped early: every request's timeout had passed
  std::atomic<int64_t> queue_ns{0};   // summed over requests: enqueue -> execution start
  std::atomic<int64_t> compute_ns{0}; // summed over executions: (copy in,) run, copy out
  std::array<std::atomic<int64_t>, kBatchBuckets.size() + 1> batch_buckets{};  // not cumulative
  std::atomic<int64_t> batch_rows{0};
  // Decoder models (backend llm) only, exported when `llm` is set.
  std::atomic<bool> llm{false};
  std::atomic<int64_t> prompt_tokens{0};     // prompt tokens of admitted completions
  std::atomic<int64_t> generated_tokens{0};  // tokens the engine generated (stop tokens included)
  // The engine after its last step: KV blocks in use, of the pool, and its sequences.
  std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_total{0}, kv_block_bytes{0};
  std::atomic<int64_t> sequences_running{0}, sequences_waiting{0};
  // Chunked prefill: the step token budget (config.json llm.max_step_tokens, 0: none), the most
  // rows one engine pass ran, and the passes that ran prefill rows beside decode rows.
  std::atomic<int64_t> max_step_tokens{0}, peak_step_tokens{0}, mixed_steps{0};
};

// A device's caching allocator (kilnrtGetMemStats) and a model's execution memory
// (rt::Model::stats summed over its devices), read when /metrics is asked for.
struct DeviceMemoryStats {
  size_t in_use_bytes = 0, cached_bytes = 0, peak_bytes = 0, reserved_bytes = 0;
};
struct ModelMemoryStats {
  size_t arena_in_use_bytes = 0;  // activation blocks handed out now (execution arenas)
  size_t arena_peak_bytes = 0;    // highest in use, per device, summed
  size_t arena_held_bytes = 0;    // arena bytes owned: in use + free lists
  size_t planned_bytes = 0;       // the execution states' memory plans
};

class Metrics {
 public:
  explicit Metrics(int devices);
  // The series of `model`, created on first use and kept for the process's life (a
  // reloaded model keeps counting).
  ModelMetrics& model(const std::string& name);
  void add_device_busy(int device, int64_t ns) { device_busy_ns_[static_cast<size_t>(device)] += ns; }
  // An HTTP request answered with `status`, counted by status class (2xx, 4xx, 5xx).
  void count_http(int status);
  void record_batch(ModelMetrics& m, int64_t rows, int64_t compute_ns);
  // The Prometheus text exposition of everything, with the memory statistics given (per
  // device, and per model name).
  std::string text(const std::vector<DeviceMemoryStats>& devices = {},
                   const std::map<std::string, ModelMemoryStats>& models = {}) const;
  int devices() const { return static_cast<int>(device_busy_ns_.size()); }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_;
  std::vector<std::atomic<int64_t>> device_busy_ns_;
  std::array<std::atomic<int64_t>, 6> http_by_class_{};  // index status / 100
};

}  // namespace kiln::serve
