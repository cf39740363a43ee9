// Communicator state: settings from the environment, operations in flight, async error and
// abort.
#include "comm/communicator.h"

#include <cmath>
#include <cstdlib>

namespace kiln::comm {

Expected<CommSettings> comm_settings_from_environment() {
  CommSettings settings;
  if (const char* env = std::getenv("KILN_COMM_TIMEOUT"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    double seconds = std::strtod(env, &end);
    if (end == env || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 1e6) {
      return invalid_argument(
          "KILN_COMM_TIMEOUT='%s' is not a number of seconds in (0, 1e6]", env);
    }
    settings.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
  }
  if (const char* env = std::getenv("KILN_COMM_ALGO"); env != nullptr) {
    if (!algo_from_name(env, &settings.algo)) {
      return invalid_argument(
          "KILN_COMM_ALGO='%s' is not one of ring, halving_doubling, tree, pairwise, "
          "hierarchical, oneshot, auto",
          env);
    }
  }
  return settings;
}

Communicator::Communicator(std::unique_ptr<Transport> transport, int device,
                           const CommSettings& settings)
    : transport_(std::move(transport)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      device_(device),
      settings_(settings),
      group_(*transport_) {}

Communicator::~Communicator() { wait_operations(); }

std::shared_ptr<void> Communicator::begin_operation() {
  ops_in_flight_.fetch_add(1, std::memory_order_relaxed);
  // The deleter runs when the last copy of the token goes: after the task ran, or when the
  // stream dropped it unrun (error state, shutdown). Above 1 it counts down without the
  // lock; the last step (only once wait_operations dropped the communicator's own count)
  // is taken and notified under the lock, so a waiter that sees zero (and may then free the
  // communicator) runs only after the deleter is done with it.
  return std::shared_ptr<void>(this, [](Communicator* c) {
    int64_t n = c->ops_in_flight_.load(std::memory_order_relaxed);
    while (n > 1) {
      if (c->ops_in_flight_.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel)) return;
    }
    std::lock_guard lock(c->ops_mutex_);
    if (c->ops_in_flight_.fetch_sub(1, std::memory_order_acq_rel) == 1) c->ops_cv_.notify_all();
  });
}

void Communicator::wait_operations() {
  std::unique_lock lock(ops_mutex_);
  if (!released_own_count_) {
    released_own_count_ = true;
    ops_in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  }
  ops_cv_.wait(lock, [&] { return ops_in_flight_.load(std::memory_order_acquire) == 0; });
}

kilnError Communicator::error_code(const Status& status) const {
  if (status.ok()) return KILN_SUCCESS;
  if (aborted()) return KILN_ERROR_COMM_ABORTED;
  switch (status.code()) {
    case StatusCode::kDeadlineExceeded: return KILN_ERROR_COMM_TIMEOUT;
    case StatusCode::kUnavailable: return KILN_ERROR_COMM_REMOTE;
    case StatusCode::kInvalidArgument: return KILN_ERROR_INVALID_PARAM;
    case StatusCode::kResourceExhausted: return KILN_ERROR_BAD_ALLOC;
    default: return KILN_ERROR_FAILURE;
  }
}

void Communicator::note_failure(const Status& status) {
  kilnError expected = KILN_SUCCESS;
  async_error_.compare_exchange_strong(expected, error_code(status), std::memory_order_acq_rel);
}

void Communicator::abort() {
  aborted_.store(true, std::memory_order_release);
  transport_->abort();
}

}  // namespace kiln::comm
