// The compile driver behind `kiln compile`: ONNX -> IR -> fixed input shapes -> the pass
// pipeline (pass_manager.h: constant folding, inference, gradient lowering, simplification,
// CSE, dead-node removal) -> .kiln.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pass_manager.h"
#include "core/status.h"
#include "frontend/onnx/onnx_importer.h"
#include "ir/graph.h"
#include "model/kiln_model.h"
#include "ops/aipp_params.h"

namespace kiln::compiler {

// Input shapes fixed at compile time, as ATC's --input_shape: "x:1,3,224,224;y:1,128".
using InputShapes = std::map<std::string, std::vector<int64_t>>;
Expected<InputShapes> parse_input_shapes(const std::string& spec);

// Shape buckets (ATC's "gears"), as `kiln compile` takes them:
//   --dynamic-batch-size "1,4,8": the batch sizes (axis 0 of every input whose axis 0 is
//     symbolic);
//   --dynamic-dims "x:1,3,48,320;x:1,3,48,640": each item binds one input's full shape, the
//     k-th bucket is formed by the k-th item of each input;
//   --pad-value "x:0;mask:0": per input, what padding fills (default 0).
Expected<std::vector<int64_t>> parse_dynamic_batch(const std::string& spec);
Expected<std::vector<InputShapes>> parse_dynamic_dims(const std::string& spec);
Expected<std::map<std::string, double>> parse_pad_values(const std::string& spec);

struct CompileOptions {
  InputShapes input_shapes;
  PassOptions passes;  // -O level, disabled passes, verification after each pass
  // Shape buckets: at most one of the two. Each bucket is compiled separately with the
  // whole pipeline, plus one variant with the bucketed dims left symbolic (the dynamic path).
  std::vector<int64_t> dynamic_batch;
  std::vector<InputShapes> dynamic_dims;
  std::map<std::string, double> pad_values;
  // --insert-op-conf: image preprocessing put in front of model inputs (preprocess/aipp_config.h).
  std::vector<ops::AippInsertion> aipp;
  // Stores each constant weight in the layout this CPU's fast kernel packs it into
  // (weight_prepacking.cc), so that loading the .kiln neither packs nor copies it.
  bool prepack_weights = true;
  // Called after each bucket is compiled with a one-line progress message.
  std::function<void(const std::string&)> progress;
};

// The result of checking a model (ATC --mode=3): everything found, not just the first.
struct CheckReport {
  std::vector<std::string> unsupported_nodes;  // "node 'x' op Foo (domain ai.onnx, opset 17)"
  std::vector<std::string> shape_problems;     // inference errors, one per line
  std::vector<std::string> notes;              // e.g. symbolic input dims left open
  bool ok() const { return unsupported_nodes.empty() && shape_problems.empty(); }
};

// One shape bucket of a model compiled with --dynamic-batch-size / --dynamic-dims: the
// graph compiled for these input shapes.
struct CompiledVariant {
  InputShapes shapes;
  std::shared_ptr<ir::Graph> graph;
};

struct CompiledModel {
  std::shared_ptr<ir::Graph> graph;
  // Shape buckets, smallest first; empty for a model compiled for one set of shapes.
  // `graph` is then the first variant's graph.
  std::vector<CompiledVariant> variants;
  model::BucketKind bucket_kind = model::BucketKind::kNone;  // kNone iff variants is empty
  std::shared_ptr<ir::Graph> dynamic_graph;  // bucketed dims left symbolic (buckets only)
  std::map<std::string, double> pad_values;  // bucketed inputs only
  model::ModelInfo info;
  std::vector<std::string> notes;  // what the compiler did, for the report
  std::vector<PassRecord> passes;  // one per pass run, in order
  size_t nodes_before = 0;         // nodes as imported
  Precision precision = Precision::kFp32;  // --precision (the nodes carry what it decided)
};

// Imports an ONNX file and compiles it. Errors name the file and the node at fault.
Expected<CompiledModel> compile_onnx_file(const std::string& path, const CompileOptions& options);
Expected<CompiledModel> compile_onnx_bytes(const void* data, size_t size, const std::string& name,
                                           const CompileOptions& options);
// Writes a compiled model (with its shape buckets, if any) as a .kiln file.
Status write_compiled_model(const CompiledModel& compiled, const std::string& path);
// Checks an ONNX file without writing anything (`kiln compile --check`).
Expected<CheckReport> check_onnx_file(const std::string& path, const CompileOptions& options);

// Fixes input dims: binds symbolic dims of the named inputs to the given extents and
// substitutes every other use of the same symbol in the graph. Errors on unknown input
// names, rank mismatches and conflicts with static dims. An extent of -1 (never from the
// command line) keeps the declared dim.
Status apply_input_shapes(ir::Graph& graph, const InputShapes& shapes);

// Puts a kiln Aipp node in front of each configured input (compiler/aipp_insertion.cc): the
// input becomes the raw uint8 image. Runs after apply_input_shapes (the input's size must be
// fixed). Errors name the configuration file's line and field.
Status insert_aipp(ir::Graph& graph, const std::vector<ops::AippInsertion>& insertions);

// Turns Constant nodes into initializers (computing the tensor with the op's reference
// kernel, so every value_* form works), so their data lands in the page-aligned weight
// section and is mapped, not copied, at load. Returns how many were folded.
Expected<int> fold_constant_nodes(ir::Graph& graph);

// Replaces each Gradient node (ai.onnx.preview.training) with the ops computing its
// gradients by reverse-mode differentiation. Returns how many were lowered.
Expected<int> lower_gradient_nodes(ir::Graph& graph);

// What prepack_weights did.
struct PrepackSummary {
  size_t nodes = 0;    // nodes given packed weights
  size_t weights = 0;  // packed weights stored
  size_t bytes = 0;    // their bytes
  size_t workspace_nodes = 0;      // nodes given a workspace need (model::kWorkspaceBytesAttr)
  size_t workspace_max_bytes = 0;  // the largest
};
// Prepares each node's fast kernel and, with `store_packs`, keeps the packings it makes of
// constant weights on the node (kernels/prepacked_weights.h); records on each node the
// workspace its kernel asks for per run (model::kWorkspaceBytesAttr, kernels/cpu/
// lent_workspace.h), which the arena plan then places. Nodes with open dims are left to pack at
// run time and get no workspace need.
Expected<PrepackSummary> prepack_weights(ir::Graph& graph, bool store_packs = true);
// Removes nodes none of whose outputs reach a graph output.
int remove_dead_nodes(ir::Graph& graph);

}  // namespace kiln::compiler
