// Devices of the runtime. The CPU device kind splits the host's cores into N logical
// devices (KILN_DEVICES=cpu:N or the kilnInit config); each owns its cores, a memory
// domain with a caching allocator, a compute engine (one compute task at a time, run
// with the device's cores through parallel_for) and a copy engine (memcpy/memset tasks,
// so copies overlap compute as DMA does on an accelerator).
#pragma once

#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::rt {

class MemoryPool;
class Stream;

// How far one stream had got when a fence was taken: the fence is passed once the
// stream's completed counter reaches `target` (or the stream is gone).
struct StreamFence {
  std::shared_ptr<const std::atomic<uint64_t>> completed;
  uint64_t target = 0;
};
bool fences_passed(const std::vector<StreamFence>& fences);

class Device {
 public:
  Device(int id, std::vector<int> cores, size_t memory_limit);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int id() const { return id_; }
  std::string name() const { return "cpu:" + std::to_string(id_); }
  const std::vector<int>& cores() const { return cores_; }
  int num_threads() const { return static_cast<int>(cores_.size()); }
  size_t memory_limit() const { return memory_limit_; }
  MemoryPool& memory() { return *memory_; }

  // Engines: a task holds its engine's lock while it runs. Compute tasks also run with
  // the device's thread count and core affinity (see ComputeScope).
  std::mutex& compute_engine() { return compute_mutex_; }
  std::mutex& copy_engine() { return copy_mutex_; }

  // Streams register themselves so the device can synchronize them and take fences.
  void add_stream(Stream* s);
  void remove_stream(Stream* s);
  // Waits until every stream of the device is idle; timeout_ms < 0 waits forever.
  Status synchronize(int64_t timeout_ms);
  // The current position of every stream of the device (for stream-ordered reuse).
  std::vector<StreamFence> fence_all_streams();
  // Called by a stream whose task reached the position a synchronize() asked about
  // (`request`, a stream's device_notify_at_): clears the request, wakes the waiters.
  void notify_progress(std::atomic<uint64_t>& request);

 private:
  int id_;
  std::vector<int> cores_;
  size_t memory_limit_;
  std::unique_ptr<MemoryPool> memory_;
  std::mutex compute_mutex_;
  std::mutex copy_mutex_;
  std::mutex streams_mutex_;
  std::vector<Stream*> streams_;
  // synchronize() waits here; streams notify it only when they reach a requested position,
  // so a long queue drains without a wake-up per task.
  std::mutex progress_mutex_;
  std::condition_variable progress_cv_;
};

// While alive, parallel_for on this thread uses the device's thread count, and the thread
// and its OpenMP team run on the device's cores: as a set, or with KILN_PIN_THREADS=1 one
// thread per core when the team has two or more (this thread on the first core, see
// pin_team_one_per_core).
// The affinity is compared and saved as a cpu_set_t: a scope allocates nothing (it wraps every
// synchronous model execution).
class ComputeScope {
 public:
  // What the outermost scope on a thread other than a stream's does with the thread's OpenMP
  // team at its end (see release_thread_team): a stream's thread keeps its team for its next
  // task; another thread keeps it only while no other thread leads one, or ends it at once
  // (a model load, whose team would idle beside the stream's that runs the model).
  enum class Team { kKeepUnlessShared, kRelease };
  explicit ComputeScope(const Device& device, Team team = Team::kKeepUnlessShared);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  int saved_threads_;
  Team team_;
  bool restore_affinity_ = false;  // false when the thread already ran on those cores
  cpu_set_t saved_cores_;
};

// The cores ComputeScope puts the thread running a compute task of `device` on: a stream's
// own thread is pinned to them for good.
std::vector<int> compute_leader_cores(const Device& device);

// Pins the calling thread to `cores` for good (a stream's own thread, so ComputeScope has
// nothing to change for its tasks). Returns false when the system refuses.
bool pin_thread_to_cores(const std::vector<int>& cores);

struct DeviceConfig {
  int count = 1;             // logical CPU devices
  size_t memory_limit = 0;   // bytes per device; 0: physical memory / count
};

// Parses KILN_DEVICES-style text ("cpu", "cpu:2") or a kilnInit JSON config file
// ({"devices": "cpu:2"} or {"devices": {"kind": "cpu", "count": 2, "memory_mb": 4096}}).
// A config without "devices" leaves the choice to KILN_DEVICES (default: one device).
// Errors: not_found (file unreadable), data_loss (not JSON), invalid_argument (values).
Expected<DeviceConfig> parse_device_spec(const std::string& spec);
Expected<DeviceConfig> read_device_config(const std::string& json_path);
// The same on the file's text: what read_device_config does once the file is read (the
// kilnInit fuzz target's entry point). `json_path` only names the config in messages.
Expected<DeviceConfig> parse_device_config(const std::string& text, const std::string& json_path);

class DeviceManager {
 public:
  // Creates the devices; the cores this process may use are split evenly (a device gets
  // at least one core; with more devices than cores, devices share cores round-robin).
  static Expected<std::unique_ptr<DeviceManager>> create(const DeviceConfig& config);
  ~DeviceManager();
  int count() const { return static_cast<int>(devices_.size()); }
  // Null (with no error) when out of range; callers turn that into KILN_ERROR_INVALID_DEVICE.
  Device* device(int id) const;

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace kiln::rt
