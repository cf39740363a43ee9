// Static memory planning: lifetime analysis of intermediate values over the graph's node
// order, in-place reuse for unary elementwise ops, and offset assignment in one arena.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/offset_assignment.h"
#include "core/status.h"
#include "ir/graph.h"

namespace kiln::compiler {

// Offsets and slot sizes are multiples of this; 64 bytes is one cache line and the widest
// vector load (AVX-512), so every planned tensor is aligned for the kernels.
inline constexpr size_t kArenaAlignment = 64;

struct PlanOptions {
  // Lets a unary elementwise op write its output over its input when that input dies at the
  // op and the sizes match (the two values then share one buffer).
  bool allow_inplace = true;
};

// One planned value. Execution step s is the index of the node in graph.nodes().
struct Slot {
  const ir::Value* value = nullptr;
  std::string name;
  size_t offset = 0;  // in the arena, a multiple of kArenaAlignment
  size_t size = 0;    // bytes of the tensor rounded up to kArenaAlignment
  int first = 0;      // step of the producing node
  int last = 0;       // step of the last reader (a node, or a node whose subgraph reads it)
  // Index of the buffer this slot lives in: values joined by in-place reuse share one buffer
  // (and one offset); every other value has a buffer of its own.
  int buffer = 0;
  // Index (into MemoryPlan::slots) of the input whose memory this value overwrites in place,
  // or -1.
  int inplace_of = -1;
};

struct MemoryPlan {
  std::vector<Slot> slots;  // in production order
  size_t arena_bytes = 0;   // end of the highest placed slot
  size_t naive_bytes = 0;   // sum of all slot sizes: one allocation per value, no reuse
  // Largest sum of buffer sizes live at one step, for this order and these in-place choices:
  // no placement of these buffers can use less.
  size_t lower_bound_bytes = 0;
  size_t weights_bytes = 0;  // constant data the model carries, as it came (not in the arena)
  // Of that, what a prepared model does not read: the originals of weights stored pre-packed
  // (the .kiln's cold tail, docs/model-format.md); and the packed copies it reads instead.
  size_t cold_weights_bytes = 0;
  size_t prepacked_bytes = 0;
  int inplace_count = 0;     // values written over their input
  int dynamic_values = 0;    // values whose size is only known at run time (not in the arena)
  std::string strategy;      // the offset assignment kept, e.g. "greedy-by-size/first-fit"
  std::vector<std::string> notes;
};

// Plans the arena for the intermediate values and outputs of `graph`, executed in node order.
// Graph inputs and initializers are not in the arena; graph outputs live to the end. Values
// without a static shape or known dtype are listed in the notes as planned at run time. Fails
// if a node reads a value produced by a later node (the graph is not in execution order) or a
// size does not fit in size_t.
Expected<MemoryPlan> plan_memory(const ir::Graph& graph, const PlanOptions& options = {});

// The offset assignment alone (core/offset_assignment.h), which plan_memory runs over the
// values' buffers; the scheduling pass and tests call it too.
using kiln::assign_offsets;

// True for ops whose output may be written over their first input (elementwise, one output of
// the input's dtype and size).
bool is_inplace_candidate_op(const ir::Node& node);

}  // namespace kiln::compiler
