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

// The calling thread's loan; empty outside a LentWorkspaceScope.
inline thread_local LentWorkspace t_lent_workspace;

// Lends [data, data + bytes) to what runs on this thread while the scope lives (the runtime
// wraps one kernel run in it); the previous loan comes back at its end. The memory must be
// unused by anything else for the scope's whole life.
class LentWorkspaceScope {
 public:
  LentWorkspaceScope(char* data, size_t bytes) : saved_(t_lent_workspace) { t_lent_workspace = {data, bytes}; }
  ~LentWorkspaceScope() { t_lent_workspace = saved_; }
  LentWorkspaceScope(const LentWorkspaceScope&) = delete;
  LentWorkspaceScope& operator=(const LentWorkspaceScope&) = delete;

 private:
  LentWorkspace saved_;
};

}  // namespace kiln::kernels
