// The calling thread's cancellation flag for the executions it submits (execution_cancel.h).
#include "runtime/execution_cancel.h"

namespace kiln::rt {
namespace {

thread_local const std::atomic<bool>* t_cancel_flag = nullptr;

}  // namespace

ExecutionCancelScope::ExecutionCancelScope(const std::atomic<bool>* flag) : previous_(t_cancel_flag) {
  t_cancel_flag = flag;
}

ExecutionCancelScope::~ExecutionCancelScope() { t_cancel_flag = previous_; }

const std::atomic<bool>* ExecutionCancelScope::current() { return t_cancel_flag; }

Status execution_cancelled(const std::string& node_label, size_t step, size_t steps) {
  return deadline_exceeded("execution cancelled by its caller before node %s (step %zu of %zu)", node_label.c_str(),
                           step + 1, steps);
}

}  // namespace kiln::rt
