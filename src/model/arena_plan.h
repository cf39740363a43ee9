// The activation arena a .kiln carries: each activation of a static graph at a fixed offset in
// one block, planned by `kiln compile` (plan_arena) and checked by the loader (check_arena_plan)
// before the runtime lays its executions out by it (runtime/graph_executor.h, ExecutionState).
//
// Lifetimes are the runtime's, not an idealised compiler's, so that what is planned is what
// runs: a value lives from the step of its producer to the step of its last reader (a node, or a
// node whose subgraph reads it); a graph output, and a value nobody reads, to the end of the
// execution; no value is written over its input in place (the runtime's kernels never do); and
// the output of a view op (Reshape, Flatten, Squeeze, Unsqueeze, Identity) shares its input's
// place, which lives as long as either (the runtime makes such outputs as views of the input).
//
// A node whose kernel asks for a workspace per run (oneDNN scratchpads, layout buffers: noted
// when `kiln compile` prepares it, kernels/cpu/lent_workspace.h) carries the bytes in
// kWorkspaceBytesAttr, and the plan (version 2) gives it a range live during its step only: its
// inputs and outputs are live then, so the workspace overlaps neither, and it is planned memory,
// counted in the arena, reused across steps, instead of a per-thread block beside the arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::model {

// The version written: 2 adds the workspaces. Version 1 (activations only) is still read.
inline constexpr uint32_t kArenaPlanVersion = 2;
inline constexpr uint32_t kArenaPlanVersionWithoutWorkspaces = 1;
// Offsets and sizes are multiples of this (a cache line, the widest vector load).
inline constexpr size_t kArenaPlanAlignment = 64;

struct PlannedValue {
  const ir::Value* value = nullptr;  // a value of the plan's graph produced by one of its nodes
  size_t offset = 0;                 // in the arena
  size_t size = 0;                   // bytes reserved: the value's bytes rounded up to 64
};

// The workspace of one node's kernel, live during the node's step only.
struct PlannedWorkspace {
  const ir::Node* node = nullptr;  // a node of the plan's graph
  size_t offset = 0;               // in the arena
  size_t size = 0;                 // bytes reserved: the node's need rounded up to 64
};

struct ArenaPlan {
  size_t arena_bytes = 0;
  std::vector<PlannedValue> values;          // in production order
  std::vector<PlannedWorkspace> workspaces;  // in step order, at most one per node
};

// The node attribute (int, bytes) in which `kiln compile` records the workspace a node's
// kernel asks for per run; plan_arena plans it.
inline constexpr const char* kWorkspaceBytesAttr = "kiln_workspace_bytes";

// True for ops whose output 0 the runtime makes as a view of input 0.
bool is_view_op(const ir::Node& node);

// Plans the arena of `graph`, or nullopt when the graph cannot be planned ahead (a value whose
// shape or type is not static, a string or sequence value, an If/Loop/Scan or other ONNX node
// with a body, a graph with no activation). Kiln's own nodes with a body (kiln.FusedElementwise)
// are planned: their kernel computes the body, and the values it reads from the graph live
// until then. A node with a positive kWorkspaceBytesAttr gets a workspace. Fails only on a size
// that overflows or a graph not in execution order.
Expected<std::optional<ArenaPlan>> plan_arena(const ir::Graph& graph);

// Checks a plan read from a file against its graph: every value once, produced by a node of the
// graph and plannable; offsets and sizes aligned, each size at least the value's bytes, each
// range inside the arena; no two values live at the same step overlapping in the arena (but a
// view and the value it views, which share one range). Workspaces the same way: a node of the
// graph at most once, aligned, inside the arena, overlapping no value live at its step. The
// message names the values and nodes at fault.
Status check_arena_plan(const ir::Graph& graph, const ArenaPlan& plan);

}  // namespace kiln::model
