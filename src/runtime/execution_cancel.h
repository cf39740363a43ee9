// Cooperative cancellation of model executions: a caller's flag that the graph executor
// checks between nodes.
//
// A caller that may want to stop an execution it submits (kiln serve, when every request
// of a running batch has passed its deadline) opens an ExecutionCancelScope around
// kilnmdlExecute or kilnmdlExecuteAsync. The execution watches the scope's flag: the C API
// carries it into the stream task of an asynchronous execution (the scope is read when
// the execution is submitted, not when it runs), and GraphExecutor reads it once at the
// start of each run and loads it (relaxed) before every node. Once the flag is set, the
// node running finishes and the execution stops before the next one with
// deadline_exceeded (execution_cancelled()), which the C API reports as a failed
// execution (a stream then enters its error state, cleared by kilnrtSynchronizeStream).
// The outputs of a cancelled execution are not written.
//
// Cost: a run without a scope tests one null pointer per node; with one, a relaxed atomic
// load per node. No lock is taken. A node is not interrupted inside: a kernel runs to its
// end, so an execution stops at most one node's time after the flag is set.
//
// Internal to Kiln (the public C API has no cancellation yet): the flag must outlive every
// execution submitted under the scope, and is set from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "core/status.h"

namespace kiln::rt {

class ExecutionCancelScope {
 public:
  // Executions submitted by this thread while the scope is open watch `flag` (null: none).
  explicit ExecutionCancelScope(const std::atomic<bool>* flag);
  ~ExecutionCancelScope();
  ExecutionCancelScope(const ExecutionCancelScope&) = delete;
  ExecutionCancelScope& operator=(const ExecutionCancelScope&) = delete;

  // The flag of the innermost open scope of this thread, or null.
  static const std::atomic<bool>* current();

 private:
  const std::atomic<bool>* previous_;
};

// The status of an execution stopped by its flag before `node_label`, step `step` of `steps`.
Status execution_cancelled(const std::string& node_label, size_t step, size_t steps);

}  // namespace kiln::rt
