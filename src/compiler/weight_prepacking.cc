// Weight pre-packing (kernels/prepacked_weights.h): each node's fast kernel is prepared once
// here, the packings it does of its constant weights are recorded, and their bytes are kept on
// the node, so that the .kiln carries the weights in the layout the kernel consumes and a load
// neither packs nor copies them. Runs last, on the final graph, for the CPU compiling (the
// layouts are those its kernels pick; a CPU that picks others packs at load, as without this).
// The same preparation notes the workspace each kernel asks for per run (kernels/cpu/
// lent_workspace.h), kept on the node for the arena plan (model/arena_plan.h).
#include <algorithm>
#include <cstring>

#include "compiler/compiler.h"
#include "core/logging.h"
#include "kernels/cpu/lent_workspace.h"
#include "kernels/kernel_registry.h"
#include "kernels/prepacked_weights.h"
#include "model/arena_plan.h"

namespace kiln::compiler {
namespace {

bool static_node(const ir::Node& node) {
  for (const ir::Value* v : node.inputs())
    if (v && !v->shape().is_static()) return false;
  for (const ir::Value* v : node.outputs())
    if (v && !v->shape().is_static()) return false;
  return true;
}

bool has_initializer_input(const ir::Node& node) {
  for (const ir::Value* v : node.inputs())
    if (v && v->has_initializer()) return true;
  return false;
}

Expected<Tensor> bytes_tensor(const void* data, size_t size) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(size)}));
  if (size) std::memcpy(t.raw_data(), data, size);
  return t;
}

// Records the workspace `kernel` (prepared under `need`) asks for per run on `node`.
void keep_workspace_need(ir::Node& node, const kernels::Kernel* kernel, const kernels::WorkspaceNeedRecorder& need,
                         PrepackSummary& summary) {
  node.attrs().erase(model::kWorkspaceBytesAttr);
  if (!kernel || need.bytes() == 0) return;
  node.attrs()[model::kWorkspaceBytesAttr] = ir::Attribute::from_int(static_cast<int64_t>(need.bytes()));
  ++summary.workspace_nodes;
  summary.workspace_max_bytes = std::max(summary.workspace_max_bytes, need.bytes());
  KILN_LOG(kDebug, "node %s: a %zu-byte workspace per run", node.label().c_str(), need.bytes());
}

}  // namespace

Expected<PrepackSummary> prepack_weights(ir::Graph& graph, bool store_packs) {
  PrepackSummary summary;
  if (!kernels::fast_kernels_enabled()) return summary;
  for (const auto& n : graph.nodes()) {
    ir::Node& node = *n;
    // Control flow and fused bodies ask for no workspace of the thread (and a fused body's
    // kernel may build code: not worth preparing twice).
    if (!static_node(node) || !node.subgraphs().empty()) continue;
    const bool pack = store_packs && has_initializer_input(node) && !node.has_attr(kernels::kPrepackedAttr);
    kernels::WorkspaceNeedRecorder need;
    kernels::PackRecorder recorder;
    std::unique_ptr<kernels::Kernel> kernel = kernels::select_kernel(node);
    keep_workspace_need(node, kernel.get(), need, summary);
    if (!pack || !kernel || recorder.packs().empty()) continue;
    ir::Attribute blobs, keys, inputs;
    blobs.kind = keys.kind = ir::AttrKind::kTensors;
    inputs.kind = ir::AttrKind::kInts;
    for (const kernels::RecordedPack& pack : recorder.packs()) {
      int64_t index = -1;
      for (size_t i = 0; i < node.inputs().size(); ++i) {
        const ir::Value* v = node.input(i);
        if (v && v->has_initializer() && v->initializer()->raw_data() == pack.source) index = static_cast<int64_t>(i);
      }
      if (index < 0 || !pack.bytes) continue;  // packed from a converted copy, not the initializer
      KILN_ASSIGN_OR_RETURN(Tensor blob, bytes_tensor(pack.bytes.get(), pack.size), "node %s: packed weights",
                            node.label().c_str());
      KILN_ASSIGN_OR_RETURN(Tensor key, bytes_tensor(pack.key.data(), pack.key.size()));
      blobs.tensors.push_back(std::move(blob));
      keys.tensors.push_back(std::move(key));
      inputs.ints.push_back(index);
      KILN_LOG(kDebug, "node %s: input %lld (%zu bytes) stored pre-packed, %zu bytes", node.label().c_str(),
               static_cast<long long>(index), node.input(static_cast<size_t>(index))->initializer()->size_bytes(),
               pack.size);
      summary.bytes += pack.size;
      ++summary.weights;
    }
    if (inputs.ints.empty()) continue;
    node.attrs()[kernels::kPrepackedAttr] = std::move(blobs);
    node.attrs()[kernels::kPrepackedKeyAttr] = std::move(keys);
    node.attrs()[kernels::kPrepackedInputAttr] = std::move(inputs);
    ++summary.nodes;
  }
  return summary;
}

}  // namespace kiln::compiler
