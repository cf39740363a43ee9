// Memory the runtime lends the kernel it runs on this thread, for that one run: the part of the
// model's planned arena that no value holds while the node runs (issue 33). The oneDNN kernels'
// workspace (onednn::thread_workspace: primitive scratchpads, layout buffers) is served from it
// when it is large enough, so that memory is the arena's instead of a per-thread block beside it.
#pragma once

#include <cstddef>

namespace kiln::kernels {

struct LentWorkspace {
  char* data = nullptr;  // 64-byte aligned, or null
  size_t bytes = 0;
};

// Who lends the current run its workspace, asked only when a kernel wants one (finding the free
// range costs a sort of the live values: not paid by the runs of kernels without a workspace).
// `lend(owner, step)` returns memory unused by anything else until the run ends.
struct WorkspaceLender {
  LentWorkspace (*lend)(void* owner, size_t step) = nullptr;
  void* owner = nullptr;
  size_t step = 0;
};

// The calling thread's lender; empty outside a WorkspaceLenderScope.
inline thread_local WorkspaceLender t_workspace_lender;

// Makes `lender` the calling thread's for what runs while the scope lives (the runtime wraps one
// kernel run in it); the previous one comes back at its end.
class WorkspaceLenderScope {
 public:
  explicit WorkspaceLenderScope(const WorkspaceLender& lender) : saved_(t_workspace_lender) {
    t_workspace_lender = lender;
  }
  ~WorkspaceLenderScope() { t_workspace_lender = saved_; }
  WorkspaceLenderScope(const WorkspaceLenderScope&) = delete;
  WorkspaceLenderScope& operator=(const WorkspaceLenderScope&) = delete;

 private:
  WorkspaceLender saved_;
};

}  // namespace kiln::kernels
