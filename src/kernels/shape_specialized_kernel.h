// Fast kernels for nodes whose shapes are known only at run time (a model compiled with open
// dims: batch, sequence length, image size). Kiln's fast kernels plan from static shapes
// (oneDNN primitives, packed GEMM tiles, Highway loops sized at prepare). A node with open
// dims gets a ShapeSpecializedKernel instead: on the first run at a new input-shape signature
// it builds the node's concrete twin (a one-node graph whose inputs have the run's dims, the
// same attributes, weights shared without a copy, outputs inferred by the op's inference),
// prepares the fast kernel for it through the ordinary selection, and keeps the result in a
// small per-node cache keyed by the input dims (bounded, least recently used out). A repeated
// shape costs a lock and a compare of the input dims; a shape no fast kernel accepts runs on
// the op's reference kernel, and that outcome is cached as well.
//
// The same twin, built at representative extents (every open dim set to kProbeExtent,
// consistently per symbol), lets compile-time decisions (kernel report, layout assignment)
// ask whether a node with open dims will run on a fast kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels {

// A node copied into a graph of its own at concrete input shapes.
struct ConcreteNode {
  std::unique_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;  // owned by graph
};

// Whether some tensor input or output of `node` has a known rank and an open dim (the case
// the per-shape kernels serve). Values of unknown rank do not count: their kernels do not
// plan from shapes.
bool has_open_dims(const ir::Node& node);

// The node's twin with input i of dims `input_dims[i]` (null: input i keeps its declared
// type, e.g. an omitted input, a sequence, or an initializer). Initializers are shared,
// attributes copied, outputs re-inferred from scratch. Fails when the op's inference rejects
// the shapes.
Expected<ConcreteNode> concretize(const ir::Node& node,
                                  const std::vector<const std::vector<int64_t>*>& input_dims);

// The extent open dims take in a compile-time probe: large enough for the windows, strides
// and dilations of real models' convolutions and pools, small enough to keep inference cheap.
inline constexpr int64_t kProbeExtent = 64;

// The twin at representative extents (see above), or an error saying why it cannot be made
// (an input of unknown rank, inference failing at those extents).
Expected<ConcreteNode> probe_twin(const ir::Node& node);

// The kernel select_kernel gives a node with open dims: null when the op has no fast kernel
// at all (the node then runs on its reference kernel at every shape).
std::unique_ptr<Kernel> make_shape_specialized_kernel(const ir::Node& node, DeviceKind device);

// Per-node cache bound (KILN_SHAPE_CACHE, default 16): prepared shapes kept per node.
size_t shape_cache_capacity();

}  // namespace kiln::kernels
