// The .kiln offline model: FlatBuffers metadata plus a page-aligned weight section.
//
// File layout (all integers little-endian):
//   [0, 64)            fixed header: magic "KILNMODL", format version, flags, offsets and
//                      sizes of the metadata and weight sections, XXH3-64 checksum of
//                      everything after the header
//   [64, ...)          FlatBuffers metadata (schema in kiln_model.fbs): Kiln version,
//                      source-model hash, target ISA features, the graph (values with
//                      types, nodes in execution order with attributes, subgraphs,
//                      initializers as (offset, size) into the weight section)
//   [page-aligned)     weight section: raw tensor bytes, each 64-byte aligned
//
// Loading reads the file into one page-aligned buffer (or maps it: LoadMode); initializer
// tensors view that buffer (no copy per tensor). The reader validates every offset, size,
// index and enum before use: a truncated, corrupted or hostile file is a Status naming what is wrong and where, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "model/arena_plan.h"

namespace kiln::model {

inline constexpr uint32_t kFormatVersion = 1;

// What the model was compiled for and from.
struct ModelInfo {
  uint32_t format_version = kFormatVersion;
  std::string kiln_version;     // e.g. "0.1.0"
  std::string source_hash;      // hex XXH3-64 of the source model bytes
  std::string source_name;      // file name of the source model
  std::string producer;         // producer recorded in the source model (e.g. "pytorch 1.13")
  std::string target_arch;      // "x86_64"
  std::vector<std::string> target_features;  // CPU ISA features: "avx2", "avx512f", "avx512_bf16", ...
  uint64_t checksum = 0;        // filled in by the writer / read back by the loader
};

// The features of the CPU this process runs on (for ModelInfo::target_features).
std::vector<std::string> host_cpu_features();

// How the shape buckets of a model were formed (kiln compile --dynamic-batch-size /
// --dynamic-dims).
enum class BucketKind : int32_t { kNone = 0, kBatch = 1, kDims = 2 };
inline constexpr int32_t kMaxBucketKind = 2;
const char* bucket_kind_name(BucketKind kind);  // "none", "batch", "dims"

// Input name -> the static dims one bucket was compiled for.
using BucketShapes = std::map<std::string, std::vector<int64_t>>;

// One shape bucket: the graph compiled for `shapes`.
struct ModelVariant {
  BucketShapes shapes;
  std::shared_ptr<ir::Graph> graph;
};

// A model compiled into shape buckets. Weights equal byte for byte across the graphs are
// stored once.
struct BucketedModel {
  BucketKind kind = BucketKind::kBatch;
  std::vector<ModelVariant> variants;          // smallest first; at least one
  std::map<std::string, double> pad_values;    // input -> pad value (absent: 0)
  std::shared_ptr<ir::Graph> dynamic_graph;    // bucketed dims left symbolic; may be null
};

// Writes `graph` (already compiled: typed, in execution order) to `path`.
// Writes to a temporary file and renames, so a failed write never leaves a partial model.
// A graph that can be planned ahead (model/arena_plan.h) carries its arena plan.
Status write_model(const ir::Graph& graph, const ModelInfo& info, const std::string& path);
// Same with the plan given (nullopt: none), written as it is: for tests of the loader's checks.
Status write_model(const ir::Graph& graph, const ModelInfo& info, const std::string& path,
                   const std::optional<ArenaPlan>& plan);
// Writes a model with shape buckets: variants[0].graph is the file's main graph (what a
// reader without bucket support runs), the others follow in the variant table.
Status write_model(const BucketedModel& model, const ModelInfo& info, const std::string& path);

// One variant of a loaded model. A file without buckets loads as one variant with no
// shapes whose graph is LoadedModel::graph.
struct LoadedVariant {
  BucketShapes shapes;
  std::shared_ptr<ir::Graph> graph;
};

// A loaded model. The graph's initializer tensors view the file mapping, which lives as
// long as any of them (or this object) does.
struct LoadedModel {
  ModelInfo info;
  std::shared_ptr<ir::Graph> graph;  // the first variant's graph
  size_t file_size = 0;
  size_t weight_bytes = 0;
  // Of those, the cold tail's (kiln_model.fbs): mapped, not read, by LoadMode::kRead.
  size_t cold_weight_bytes = 0;
  bool cold_tail_mapped = false;
  BucketKind bucket_kind = BucketKind::kNone;
  std::vector<LoadedVariant> variants;        // at least one
  std::map<std::string, double> pad_values;   // bucketed models only
  std::shared_ptr<ir::Graph> dynamic_graph;   // bucketed models only; may be null
  // The activation arena of `graph`, checked against it (arena_plan.h); absent in files
  // written before it and for graphs that cannot be planned ahead.
  std::optional<ArenaPlan> arena_plan;
};

// How load_model brings the file into memory.
//   kRead (default): read into a private page-aligned buffer. The process owns its copy: a
//     file replaced, truncated or rewritten while the model runs changes nothing (a mapping
//     would see the new bytes, or die of SIGBUS past a truncation), and the pages are plain
//     anonymous ones. Measured on a 2-core VM whose kernel samples page accesses (DAMON):
//     BERT-base (a 437 MB .kiln) ran 125-139 ms per execution read, 250-650 ms mapped, the
//     monitor's sampling of the mapped file pages slowing the whole process; with the
//     monitor stopped both ran 125-139.
//     The weight section's cold tail (the originals of weights stored pre-packed, which no
//     kernel reads once the model is prepared) is mapped instead, and so costs no memory
//     unless something reads it (reference kernels, a repack for another CPU); those pages
//     alone see a file rewritten in place or truncated (SIGBUS), which `kiln compile`
//     never does (it writes a new file and renames it over the old one).
//   kReadAll: read everything, the cold tail too.
//   kMap: map the file read-only (no copy; the page cache is shared by every process that
//     maps the same file).
// KILN_MODEL_LOAD=read|read-all|map chooses for load_model(path); anything else is kRead (logged).
enum class LoadMode { kRead, kReadAll, kMap };
LoadMode load_mode_from_env();

// Loads and validates `path` (load_mode_from_env(), or `mode`). Errors name the file, the
// section and offset at fault.
Expected<LoadedModel> load_model(const std::string& path);
Expected<LoadedModel> load_model(const std::string& path, LoadMode mode);
// Same for a model already in memory; the bytes are copied into an aligned buffer.
Expected<LoadedModel> load_model_from_memory(const void* data, size_t size);

// True if the bytes start with the .kiln magic (to tell .kiln from .onnx by content).
bool looks_like_kiln(const void* data, size_t size);

}  // namespace kiln::model
