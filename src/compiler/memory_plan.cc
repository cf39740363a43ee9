// Static memory planning: lifetimes over node order, in-place reuse, arena offset assignment.
#include "compiler/memory_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/dtype.h"

namespace kiln::compiler {
namespace {

// Elementwise ops of the default domain whose output element i depends only on input element
// i of input 0 (other inputs, like Clip's bounds, are scalars), so writing out[i] over in[i]
// never clobbers an element still to be read.
constexpr std::string_view kInplaceOps[] = {
    "Abs",     "Ceil",     "Clip",       "Cos",     "Elu",         "Erf",   "Exp",
    "Floor",   "Gelu",     "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log",
    "Mish",    "Neg",      "Not",        "Reciprocal", "Relu",    "Round", "Selu",
    "Sigmoid", "Sign",     "Sin",        "Softplus", "Softsign",  "Sqrt",  "Tan",
    "Tanh",    "ThresholdedRelu",
};

size_t round_up(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Bytes of a statically shaped tensor value; false when the element count or byte count
// overflows.
bool static_tensor_bytes(const ir::Value& v, size_t* bytes) {
  int64_t count = 1;
  for (int64_t d : v.shape().static_dims()) {
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) return false;
    count *= d;
  }
  const int bits = dtype_bits(v.dtype());
  if (bits <= 0 || static_cast<uint64_t>(count) > std::numeric_limits<size_t>::max() / 8 / bits)
    return false;
  *bytes = dtype_bytes(v.dtype(), count);
  return *bytes <= std::numeric_limits<size_t>::max() - kArenaAlignment;
}

// Names of the values a subgraph (recursively) reads from enclosing scopes: node inputs and
// subgraph outputs not defined inside it (no producer, no initializer, not a subgraph input).
// ONNX forbids a subgraph name shadowing an outer one, so such a name is the outer value's.
void collect_subgraph_reads(const ir::Graph& g, std::vector<std::string>* names) {
  auto free_value = [&g](const ir::Value* v) {
    return v && v->producer() == nullptr && !v->has_initializer() &&
           std::find(g.inputs().begin(), g.inputs().end(), v) == g.inputs().end();
  };
  for (const auto& node : g.nodes()) {
    for (const ir::Value* in : node->inputs())
      if (free_value(in)) names->push_back(in->name());
    for (const ir::Graph* sub : node->subgraphs())
      if (sub) collect_subgraph_reads(*sub, names);
  }
  for (const ir::Value* out : g.outputs())
    if (free_value(out)) names->push_back(out->name());
}

}  // namespace

bool is_inplace_candidate_op(const ir::Node& node) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") return false;
  return std::find(std::begin(kInplaceOps), std::end(kInplaceOps), node.op_type()) !=
         std::end(kInplaceOps);
}

Expected<MemoryPlan> plan_memory(const ir::Graph& graph, const PlanOptions& options) {
  MemoryPlan plan;
  plan.weights_bytes = graph.weight_bytes();
  plan.cold_weights_bytes = graph.cold_weight_bytes();
  plan.prepacked_bytes = graph.prepacked_bytes();
  const auto& nodes = graph.nodes();
  const int steps = static_cast<int>(nodes.size());

  // Slots, in production order.
  std::unordered_map<const ir::Value*, int> slot_of;
  std::unordered_map<std::string, int> slot_by_name;
  std::unordered_set<const ir::Value*> produced;
  std::vector<size_t> exact_bytes;  // unrounded, for the in-place size match
  constexpr int kMaxDynamicNotes = 16;
  for (int s = 0; s < steps; ++s) {
    const ir::Node& node = *nodes[s];
    for (const ir::Value* out : node.outputs()) {
      if (!out) continue;
      if (!produced.insert(out).second)
        return failed_precondition(
            "memory planning: value '%s' is produced twice (again by node %s)",
            out->name().c_str(), node.label().c_str());
      const ir::TensorType& t = out->type();
      if (!t.is_tensor() || t.dtype == DataType::kUndefined || t.dtype == DataType::kString ||
          !t.shape.is_static()) {
        if (plan.dynamic_values++ < kMaxDynamicNotes)
          plan.notes.push_back(str_format("value '%s' (%s) of node %s planned at run time",
                                          out->name().c_str(), t.to_string().c_str(),
                                          node.label().c_str()));
        continue;
      }
      size_t bytes = 0;
      if (!static_tensor_bytes(*out, &bytes))
        return invalid_argument("memory planning: value '%s' of node %s: %s is too large",
                                out->name().c_str(), node.label().c_str(), t.to_string().c_str());
      Slot slot;
      slot.value = out;
      slot.name = out->name();
      slot.size = round_up(bytes);
      slot.first = slot.last = s;
      slot_of[out] = static_cast<int>(plan.slots.size());
      slot_by_name[out->name()] = static_cast<int>(plan.slots.size());
      plan.slots.push_back(std::move(slot));
      exact_bytes.push_back(bytes);
    }
  }
  if (plan.dynamic_values > kMaxDynamicNotes)
    plan.notes.push_back(
        str_format("... %d values planned at run time in all", plan.dynamic_values));

  // Lifetimes: to the last node that reads the value, directly or from one of its subgraphs.
  auto extend = [&](int slot, int s, const ir::Node& node) -> Status {
    Slot& sl = plan.slots[slot];
    if (sl.first >= s)
      return failed_precondition(
          "memory planning: node %s (step %d) reads '%s' produced at step %d; the graph is not "
          "in execution order",
          node.label().c_str(), s, sl.name.c_str(), sl.first);
    sl.last = std::max(sl.last, s);
    return ok_status();
  };
  std::vector<std::string> sub_reads;
  for (int s = 0; s < steps; ++s) {
    const ir::Node& node = *nodes[s];
    for (const ir::Value* in : node.inputs()) {
      if (!in) continue;
      auto it = slot_of.find(in);
      if (it != slot_of.end()) KILN_RETURN_IF_ERROR(extend(it->second, s, node));
    }
    sub_reads.clear();
    for (const ir::Graph* sub : node.subgraphs())
      if (sub) collect_subgraph_reads(*sub, &sub_reads);
    for (const std::string& name : sub_reads) {
      auto it = slot_by_name.find(name);
      if (it != slot_by_name.end()) KILN_RETURN_IF_ERROR(extend(it->second, s, node));
    }
  }
  std::unordered_set<const ir::Value*> graph_outputs(graph.outputs().begin(),
                                                     graph.outputs().end());
  for (const ir::Value* out : graph.outputs()) {
    auto it = slot_of.find(out);
    if (it != slot_of.end()) plan.slots[it->second].last = steps - 1;
  }

  // Buffers. In place: out of a unary elementwise node joins the buffer of its input 0 when
  // that input dies at the node, is not a graph output, is read by no other input of the node,
  // and has the same dtype and byte size.
  std::vector<size_t> buf_size;
  std::vector<int> buf_first, buf_last;
  for (int s = 0; s < steps; ++s) {
    const ir::Node& node = *nodes[s];
    int inplace_in = -1;
    if (options.allow_inplace && node.num_outputs() == 1 && node.output(0) &&
        node.num_inputs() >= 1 && node.input(0) && is_inplace_candidate_op(node)) {
      const ir::Value* in = node.input(0);
      auto in_it = slot_of.find(in);
      auto out_it = slot_of.find(node.output(0));
      bool ok = in_it != slot_of.end() && out_it != slot_of.end() &&
                plan.slots[in_it->second].last == s && !graph_outputs.count(in) &&
                in->dtype() == node.output(0)->dtype() &&
                exact_bytes[in_it->second] == exact_bytes[out_it->second];
      for (int i = 1; ok && i < node.num_inputs(); ++i)
        if (node.input(i) == in) ok = false;
      if (ok) inplace_in = in_it->second;
    }
    for (const ir::Value* out : node.outputs()) {
      auto it = slot_of.find(out);
      if (it == slot_of.end()) continue;
      Slot& sl = plan.slots[it->second];
      if (inplace_in >= 0) {
        const int b = plan.slots[inplace_in].buffer;
        sl.buffer = b;
        sl.inplace_of = inplace_in;
        buf_last[b] = std::max(buf_last[b], sl.last);
        ++plan.inplace_count;
        continue;
      }
      sl.buffer = static_cast<int>(buf_size.size());
      buf_size.push_back(sl.size);
      buf_first.push_back(sl.first);
      buf_last.push_back(sl.last);
    }
  }

  // Naive: every value its own allocation. Lower bound: the peak of live buffer bytes. With
  // in-place reuse the input and output of such a node share one buffer, so at that step the
  // pair counts once (the output really does need no new memory); the bound is therefore for
  // this order *and* these in-place choices, and still no placement of the buffers can beat it.
  for (const Slot& sl : plan.slots) plan.naive_bytes += sl.size;
  std::vector<size_t> add(static_cast<size_t>(steps) + 1, 0);
  std::vector<size_t> sub(static_cast<size_t>(steps) + 1, 0);
  for (size_t b = 0; b < buf_size.size(); ++b) {
    add[buf_first[b]] += buf_size[b];
    sub[buf_last[b] + 1] += buf_size[b];
  }
  size_t live = 0;
  for (int s = 0; s < steps; ++s) {
    live = live + add[s] - sub[s];
    plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, live);
  }

  std::vector<size_t> offsets;
  plan.arena_bytes = assign_offsets(buf_size, buf_first, buf_last, &offsets, &plan.strategy);
  for (Slot& sl : plan.slots) sl.offset = offsets[sl.buffer];
  if (plan.inplace_count > 0)
    plan.notes.push_back(
        str_format("%d values written in place over their input", plan.inplace_count));
  return plan;
}

}  // namespace kiln::compiler
