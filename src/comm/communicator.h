// A communicator: one rank of a world (rank, size, device, transport), the record of its
// operations in flight (so destroy can wait for them), its first asynchronous error,
// abort, the operation timeout (KILN_COMM_TIMEOUT) and the forced algorithm
// (KILN_COMM_ALGO). Operations of one communicator run one at a time, in the order the
// stream threads reach them; every rank must issue them in the same order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "comm/algorithms.h"
#include "comm/transport.h"
#include "core/status.h"
#include "kiln/comm.h"

namespace kiln::comm {

// The communicator settings read from the environment.
struct CommSettings {
  std::chrono::milliseconds timeout{30000};
  Algo algo = Algo::kAuto;
};
// KILN_COMM_TIMEOUT (seconds, > 0, fractions allowed; default 30) and KILN_COMM_ALGO;
// invalid_argument naming the variable for a bad value.
Expected<CommSettings> comm_settings_from_environment();

class Communicator {
 public:
  Communicator(std::unique_ptr<Transport> transport, int device, const CommSettings& settings);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  Transport& transport() { return *transport_; }
  std::chrono::milliseconds timeout() const { return settings_.timeout; }
  Algo algo() const { return settings_.algo; }

  // Marks an operation as queued; the operation is over when the returned token (and every
  // copy of it) is gone, whether its task ran or the stream skipped it.
  std::shared_ptr<void> begin_operation();
  // Waits until no operation is queued or running.
  void wait_operations();

  // Runs `body` as one operation: serialised with the communicator's other operations,
  // with the deadline starting now; a failure is recorded as the async error (code from
  // error_code()) and returned with the operation's name.
  template <typename Body>
  Status run(const char* op, Body&& body) {
    std::lock_guard lock(run_mutex_);
    if (aborted()) {
      Status st = failed_precondition("%s: communicator aborted", op);
      note_failure(st);
      return st;
    }
    AlgoContext ctx{&group_, Deadline{Clock::now() + settings_.timeout, op}, &scratch_,
                    settings_.algo};
    if (is_collective(op)) transport_->enter_collective();
    Status st = body(ctx);
    if (!st.ok()) note_failure(st);
    return st;
  }

  // Whether the operation `op` names is a collective (every rank of the communicator runs it),
  // not a point-to-point Send, Recv or grouped SendRecv.
  static bool is_collective(const char* op) {
    return std::strcmp(op, "Send") != 0 && std::strcmp(op, "Recv") != 0 &&
           std::strcmp(op, "SendRecv") != 0;
  }

  // The kilnError for a failed operation's Status: ABORTED after kilnCommAbort, TIMEOUT,
  // REMOTE (peer gone), else KILN_ERROR_FAILURE (INVALID_PARAM, BAD_ALLOC where they fit).
  kilnError error_code(const Status& status) const;
  void note_failure(const Status& status);
  // KILN_SUCCESS or the first failure's code.
  kilnError async_error() const { return async_error_.load(std::memory_order_acquire); }

  // Makes every pending and later operation fail (Transport::abort); never blocks.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  std::unique_ptr<Transport> transport_;
  int rank_;
  int size_;
  int device_;
  CommSettings settings_;
  Group group_;
  std::mutex run_mutex_;  // one operation at a time; guards scratch_
  Scratch scratch_;
  std::atomic<kilnError> async_error_{KILN_SUCCESS};
  std::atomic<bool> aborted_{false};
  // Operations queued or running, plus one held by the communicator itself until
  // wait_operations(): an operation's end takes the count from 1 to 0 only after that, so
  // it counts down without the lock (two locked instructions fewer per operation; an 8-byte
  // collective is a few microseconds). The step to 0 is made and notified under ops_mutex_.
  std::mutex ops_mutex_;
  std::condition_variable ops_cv_;
  std::atomic<int64_t> ops_in_flight_{1};
  bool released_own_count_ = false;  // guarded by ops_mutex_
};

}  // namespace kiln::comm
