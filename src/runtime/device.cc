// Devices: splitting the host's cores into logical CPU devices, device configs, engines'
// thread scope, and waiting for a device's streams.
#include "runtime/device.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json_brief.h"
#include "core/parallel.h"
#include "runtime/malloc_policy.h"
#include "runtime/memory.h"
#include "runtime/stream.h"

namespace kiln::rt {
namespace {

// More logical devices than this is a typo, not a configuration.
constexpr int kMaxDevices = 1024;

// The cores this process may run on, in increasing order.
std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cores.push_back(c);
    }
  }
  if (cores.empty()) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::max(1L, n); ++c) cores.push_back(static_cast<int>(c));
  }
  return cores;
}

size_t physical_memory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return size_t{1} << 32;  // unknown: assume 4 GiB
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

bool set_thread_cores(const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The cores this thread was last pinned to by Kiln (empty: never, or unknown), so scopes
// on a stream's own thread, already pinned, cost no system call.
thread_local std::vector<int> pinned_cores;

// ComputeScopes alive on this thread: only the outermost one's end may release its team.
thread_local int compute_scope_depth = 0;

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

Expected<DeviceConfig> config_from_json_devices(const nlohmann::json& devices,
                                                const std::string& path) {
  if (devices.is_string()) {
    Expected<DeviceConfig> c = parse_device_spec(devices.get<std::string>());
    if (!c.ok()) return std::move(c).take_status().add_context("config '%s'", path.c_str());
    return c;
  }
  if (!devices.is_object()) {
    return invalid_argument(
        "config '%s': \"devices\" must be a string such as \"cpu:2\" or an object such as "
        "{\"kind\": \"cpu\", \"count\": 2, \"memory_mb\": 4096}, got %s",
        path.c_str(), devices.type_name());
  }
  DeviceConfig config;
  for (auto it = devices.begin(); it != devices.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "kind") {
      if (!v.is_string() || v.get<std::string>() != "cpu") {
        return invalid_argument("config '%s': devices.kind is %s, the only kind is \"cpu\"",
                                path.c_str(), json_brief(v).c_str());
      }
    } else if (key == "count") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxDevices) {
        return invalid_argument("config '%s': devices.count is %s, expected an integer in 1..%d",
                                path.c_str(), json_brief(v).c_str(), kMaxDevices);
      }
      config.count = static_cast<int>(v.get<int64_t>());
    } else if (key == "memory_mb") {
      // Up to 2^40 MB keeps the byte count far from overflow.
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 40)) {
        return invalid_argument("config '%s': devices.memory_mb is %s, expected a positive integer",
                                path.c_str(), json_brief(v).c_str());
      }
      config.memory_limit = static_cast<size_t>(v.get<int64_t>()) << 20;
    } else {
      return invalid_argument(
          "config '%s': unknown key devices.%s (known: kind, count, memory_mb)", path.c_str(),
          key.c_str());
    }
  }
  return config;
}

}  // namespace

bool fences_passed(const std::vector<StreamFence>& fences) {
  for (const StreamFence& f : fences) {
    if (f.completed && f.completed->load(std::memory_order_acquire) < f.target) return false;
  }
  return true;
}

bool pin_thread_to_cores(const std::vector<int>& cores) {
  if (cores.empty() || !set_thread_cores(cores)) return false;
  pinned_cores = cores;
  return true;
}

// ---- Device ----------------------------------------------------------------------------

Device::Device(int id, std::vector<int> cores, size_t memory_limit)
    : id_(id),
      cores_(std::move(cores)),
      memory_limit_(memory_limit),
      memory_(std::make_unique<MemoryPool>(id, memory_limit)) {}

Device::~Device() = default;

void Device::add_stream(Stream* s) {
  std::lock_guard lock(streams_mutex_);
  streams_.push_back(s);
}

void Device::remove_stream(Stream* s) {
  {
    std::lock_guard lock(streams_mutex_);
    streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
  }
  // A waiter may be waiting for the stream that just went away (its counter is final).
  { std::lock_guard lock(progress_mutex_); }
  progress_cv_.notify_all();
}

std::vector<StreamFence> Device::fence_all_streams() {
  std::lock_guard lock(streams_mutex_);
  std::vector<StreamFence> fences;
  fences.reserve(streams_.size());
  for (Stream* s : streams_) fences.push_back(s->fence());
  return fences;
}

void Device::notify_progress(std::atomic<uint64_t>& request) {
  {
    std::lock_guard lock(progress_mutex_);
    request.store(Stream::kNoRequest, std::memory_order_seq_cst);
  }
  progress_cv_.notify_all();  // waiters not done yet ask again
}

Status Device::synchronize(int64_t timeout_ms) {
  if (Stream* s = Stream::current(); s != nullptr && &s->device() == this) {
    return failed_precondition("%s: cannot wait for the device from a task of its %s",
                               name().c_str(), s->name().c_str());
  }
  Stream::wake_deferred(nullptr);  // no task left waiting for a poll of its worker
  // Fences rather than calls into the streams: a stream may be destroyed meanwhile,
  // and its completed counter outlives it.
  std::vector<StreamFence> fences = fence_all_streams();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool passed = true;
  {
    std::unique_lock lock(progress_mutex_);
    for (;;) {
      // Ask each stream still short of its fence to wake us there (see
      // Stream::run_item), then check; whoever is woken early asks again.
      {
        std::lock_guard streams(streams_mutex_);
        for (Stream* s : streams_) {
          for (const StreamFence& f : fences) {
            if (f.completed != s->completed_) continue;
            if (f.target < s->device_notify_at_.load(std::memory_order_seq_cst)) {
              s->device_notify_at_.store(f.target, std::memory_order_seq_cst);
            }
          }
        }
      }
      std::atomic_thread_fence(std::memory_order_seq_cst);  // the requests before the check
      if (fences_passed(fences)) break;
      if (timeout_ms < 0) {
        progress_cv_.wait(lock);
      } else if (progress_cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
                 !fences_passed(fences)) {
        passed = false;
        break;
      }
    }
  }
  if (!passed) {
    size_t busy = 0;
    for (const StreamFence& f : fences) {
      if (f.completed->load(std::memory_order_acquire) < f.target) ++busy;
    }
    return deadline_exceeded("%s: %zu of %zu streams still busy after %lld ms", name().c_str(),
                             busy, fences.size(), static_cast<long long>(timeout_ms));
  }
  // Report (and clear) the first task failure of any stream of the device.
  Status first;
  std::lock_guard lock(streams_mutex_);
  for (Stream* s : streams_) {
    Status e = s->take_error();
    if (!e.ok() && first.ok()) first = std::move(e);
  }
  return first;
}

// ---- ComputeScope ------------------------------------------------------------------------

namespace {

// Threads a compute task on `device` runs with: its cores, capped by KILN_NUM_THREADS.
int compute_threads(const Device& device) {
  return std::max(1, std::min(device.num_threads(), num_threads()));
}

// How many of the device's cores (from the first) a compute task's leading thread runs on:
// the first alone when it leads a team of two or more, whose other threads go one per core on
// the rest (pin_team_one_per_core), else (or with KILN_PIN_THREADS=0) all of them.
size_t leader_core_count(const Device& device, int threads) {
  return threads >= 2 && device.cores().size() >= 2 && pin_threads() ? 1 : device.cores().size();
}

}  // namespace

std::vector<int> compute_leader_cores(const Device& device) {
  const std::vector<int>& cores = device.cores();
  return {cores.begin(), cores.begin() + static_cast<std::ptrdiff_t>(
                                             leader_core_count(device, compute_threads(device)))};
}

ComputeScope::ComputeScope(const Device& device, Team team) : team_(team) {
  ++compute_scope_depth;
  const int n = compute_threads(device);
  saved_threads_ = set_thread_num_threads_override(n);
  const std::vector<int>& cores = device.cores();
  const size_t lead = leader_core_count(device, n);
  if (pinned_cores.size() != lead || !std::equal(pinned_cores.begin(), pinned_cores.end(), cores.begin())) {
    cpu_set_t wanted;
    CPU_ZERO(&wanted);
    for (size_t i = 0; i < lead; ++i)
      if (cores[i] >= 0 && cores[i] < CPU_SETSIZE) CPU_SET(cores[i], &wanted);
    CPU_ZERO(&saved_cores_);
    if (pthread_getaffinity_np(pthread_self(), sizeof(saved_cores_), &saved_cores_) == 0 &&
        !CPU_EQUAL(&saved_cores_, &wanted) &&
        pthread_setaffinity_np(pthread_self(), sizeof(wanted), &wanted) == 0)
      restore_affinity_ = true;
  }
  pin_team_one_per_core(cores.data(), static_cast<int>(cores.size()), n);
}

ComputeScope::~ComputeScope() {
  // A stream's thread (pinned for good) keeps its team; see ComputeScope::Team.
  if (--compute_scope_depth == 0 && pinned_cores.empty() &&
      (team_ == Team::kRelease || team_leaders() > 1))
    release_thread_team();
  set_thread_num_threads_override(saved_threads_);
  if (restore_affinity_) pthread_setaffinity_np(pthread_self(), sizeof(saved_cores_), &saved_cores_);
}

// ---- Configuration -----------------------------------------------------------------------

Expected<DeviceConfig> parse_device_spec(const std::string& text) {
  std::string spec = trim(text);
  std::string lower = spec;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  DeviceConfig config;
  if (lower == "cpu") return config;
  size_t colon = lower.find(':');
  std::string kind = lower.substr(0, colon);
  if (kind != "cpu") {
    return invalid_argument("device spec '%s': unknown device kind '%s' (expected \"cpu\" or \"cpu:N\")",
                            spec.c_str(), spec.substr(0, colon).c_str());
  }
  std::string count = spec.substr(colon + 1);
  bool digits = !count.empty() && count.size() <= 9 &&
                std::all_of(count.begin(), count.end(),
                            [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  long n = digits ? std::strtol(count.c_str(), nullptr, 10) : 0;
  if (!digits || n < 1 || n > kMaxDevices) {
    return invalid_argument("device spec '%s': device count '%s' is not an integer in 1..%d",
                            spec.c_str(), count.c_str(), kMaxDevices);
  }
  config.count = static_cast<int>(n);
  return config;
}

Expected<DeviceConfig> read_device_config(const std::string& json_path) {
  std::ifstream in(json_path, std::ios::binary);
  if (!in) return not_found("config '%s': cannot open the file", json_path.c_str());
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (in.bad()) return not_found("config '%s': cannot read the file", json_path.c_str());
  return parse_device_config(text, json_path);
}

Expected<DeviceConfig> parse_device_config(const std::string& text, const std::string& json_path) {
  nlohmann::json config;
  if (!trim(text).empty()) {  // an empty file is an empty config, as AscendCL allows
    config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) {
      return data_loss("config '%s': not valid JSON", json_path.c_str());
    }
    if (!config.is_object()) {
      return invalid_argument("config '%s': expected a JSON object, got %s", json_path.c_str(),
                              config.type_name());
    }
  }
  if (config.is_object() && config.contains("devices")) {
    return config_from_json_devices(config["devices"], json_path);
  }
  if (const char* env = std::getenv("KILN_DEVICES"); env && *env) {
    Expected<DeviceConfig> c = parse_device_spec(env);
    if (!c.ok()) return std::move(c).take_status().add_context("KILN_DEVICES");
    return c;
  }
  return DeviceConfig{};
}

// ---- DeviceManager -------------------------------------------------------------------------

Expected<std::unique_ptr<DeviceManager>> DeviceManager::create(const DeviceConfig& config) {
  if (config.count < 1 || config.count > kMaxDevices) {
    return invalid_argument("device count %d is not in 1..%d", config.count, kMaxDevices);
  }
  // Before any model loads: the allocator's policy holds for the load's temporaries too.
  apply_malloc_policy();
  std::vector<int> cores = allowed_cores();
  int n = config.count;
  int c = static_cast<int>(cores.size());
  size_t limit = config.memory_limit ? config.memory_limit : physical_memory() / n;
  auto manager = std::unique_ptr<DeviceManager>(new DeviceManager());
  for (int i = 0; i < n; ++i) {
    std::vector<int> mine;
    if (n <= c) {
      // Contiguous, even split: device i gets [i*c/n, (i+1)*c/n).
      for (int k = i * c / n; k < (i + 1) * c / n; ++k) mine.push_back(cores[k]);
    } else {
      mine.push_back(cores[i % c]);
    }
    manager->devices_.push_back(std::make_unique<Device>(i, std::move(mine), limit));
  }
  return manager;
}

DeviceManager::~DeviceManager() = default;

Device* DeviceManager::device(int id) const {
  if (id < 0 || id >= count()) return nullptr;
  return devices_[static_cast<size_t>(id)].get();
}

}  // namespace kiln::rt
