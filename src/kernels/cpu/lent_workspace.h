// Memory the runtime lends the kernel it runs on this thread, for that one run: a range of the
// model's planned arena (issue 33). The oneDNN kernels' workspace (onednn::thread_workspace:
// primitive scratchpads, layout buffers) is served from it when it is large enough, so that
// memory is the arena's instead of a per-thread block beside it. The range is the workspace
// `kiln compile` planned for the node (WorkspaceNeedRecorder below, model/arena_plan.h) or else
// the largest part of the arena no value holds during the step.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kiln::kernels {

struct LentWorkspace {
  char* data = nullptr;  // 64-byte aligned, or null
  size_t bytes = 0;
  bool planned = false;  // the node's planned workspace (else a free part of the arena)
};

// Process-wide counts of the workspaces onednn::thread_workspace handed out, by where they came
// from: the node's planned range, a free part of the arena, the thread's own block (tests and
// the docs' measurements read them).
struct WorkspaceCounts {
  std::atomic<uint64_t> planned{0}, free_range{0}, own_block{0};
};
inline WorkspaceCounts& workspace_counts() {
  static WorkspaceCounts counts;
  return counts;
}

// Who lends the current run its workspace, asked only when a kernel wants one (finding a free
// range costs a sort of the live values: not paid by the runs of kernels without a workspace).
// `lend(owner, step, bytes)` returns memory unused by anything else until the run ends,
// preferably at least `bytes` long (the caller checks).
struct WorkspaceLender {
  LentWorkspace (*lend)(void* owner, size_t step, size_t bytes) = nullptr;
  void* owner = nullptr;
  size_t step = 0;
};

// The calling thread's lender; empty outside a WorkspaceLenderScope. OpenMP workers of a kernel
// have none: what they ask for comes from their own per-thread blocks.
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

// Compile time: while alive, the workspace the kernels prepared on this thread will ask
// onednn::thread_workspace for per run (the largest one noted: a kernel asks once per run, and
// a candidate refused after noting only makes the plan larger, never too small). The compiler
// prepares each node's kernel under one and plans the result into the arena. Nests.
class WorkspaceNeedRecorder {
 public:
  WorkspaceNeedRecorder() : outer_(current()) { current() = this; }
  ~WorkspaceNeedRecorder() { current() = outer_; }
  WorkspaceNeedRecorder(const WorkspaceNeedRecorder&) = delete;
  WorkspaceNeedRecorder& operator=(const WorkspaceNeedRecorder&) = delete;
  size_t bytes() const { return bytes_; }
  // The recorder of the calling thread, or null.
  static WorkspaceNeedRecorder*& current() {
    thread_local WorkspaceNeedRecorder* recorder = nullptr;
    return recorder;
  }
  void note(size_t bytes) { bytes_ = std::max(bytes_, bytes); }

 private:
  size_t bytes_ = 0;
  WorkspaceNeedRecorder* outer_;
};

// Called by a kernel at prepare with the workspace each of its runs asks for on the calling
// thread; nothing outside a WorkspaceNeedRecorder.
inline void note_workspace_need(size_t bytes) {
  if (WorkspaceNeedRecorder* r = WorkspaceNeedRecorder::current()) r->note(bytes);
}

}  // namespace kiln::kernels
