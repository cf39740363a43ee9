// Weights packed by `kiln compile` (compiler/weight_prepacking.cc): each constant weight a
// fast kernel repacks at prepare (oneDNN's blocked formats for convolutions and matmuls) is
// packed once at compile time and stored in the .kiln beside the node, tagged with the
// layout it was packed into. At load the kernel's packing function finds the bytes there and
// uses them where they lie in the loaded file: no packing work and no second copy.
//
// The node carries three attributes (ir/attribute.h), one entry per packed weight:
//   kiln_prepacked        tensors  the packed bytes (uint8, 1-D), 64-byte aligned in the file
//   kiln_prepacked_key    tensors  what they were packed as (uint8, 1-D): the packing
//                                  library, its version, the source and packed layouts
//   kiln_prepacked_input  ints     the node input they were packed from
// A key is an exact description: a kernel that would pack differently on this CPU (another
// ISA's blocking) finds no equal key, packs from the original weight as before, and the
// loader notes it once per process. So the original weight stays in the file (in its cold
// tail, model_format.h, which a load does not read), for that case, for reference kernels
// (KILN_KERNELS=reference) and for tools that read the graph.
//
// The mechanism is generic: a kernel's packing function calls find_prepacked() before
// packing and record_pack() after; select_kernel() sets the node being prepared.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::kernels {

using ir::kPrepackedAttr;
using ir::kPrepackedInputAttr;
using ir::kPrepackedKeyAttr;

// One packing a kernel did (what PackRecorder collects).
struct RecordedPack {
  const void* source = nullptr;  // the weight's data that was packed
  std::string key;               // what it was packed as
  std::shared_ptr<void> bytes;   // the packed data
  size_t size = 0;
};

// While alive, the packings done on this thread are recorded (compile time). Nests: the
// innermost recorder gets them.
class PackRecorder {
 public:
  PackRecorder();
  ~PackRecorder();
  PackRecorder(const PackRecorder&) = delete;
  PackRecorder& operator=(const PackRecorder&) = delete;
  const std::vector<RecordedPack>& packs() const { return packs_; }

 private:
  friend void record_pack(const void*, std::string, std::shared_ptr<void>, size_t);
  std::vector<RecordedPack> packs_;
  PackRecorder* outer_;
};

// While alive, packing functions on this thread look for `node`'s prepacked weights (set by
// select_kernel around a factory's prepare).
class PrepackedSource {
 public:
  explicit PrepackedSource(const ir::Node& node);
  ~PrepackedSource();
  PrepackedSource(const PrepackedSource&) = delete;
  PrepackedSource& operator=(const PrepackedSource&) = delete;

 private:
  const ir::Node* outer_;
};

// The stored packing of `source` (an initializer of the node being prepared) as `key`, of
// at least `size` bytes and 64-byte aligned, or null. The pointer shares ownership with the
// loaded model's storage: it stays valid while held.
std::shared_ptr<void> find_prepacked(const void* source, const std::string& key, size_t size);

// Tells the thread's recorder, if any, of a packing just done.
void record_pack(const void* source, std::string key, std::shared_ptr<void> bytes, size_t size);

// Process-wide counts: packings served from the model (hits), packings done although the
// node had prepacked weights for that input, none with the key this CPU needs (misses).
struct PrepackStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
};
PrepackStats prepack_stats();

}  // namespace kiln::kernels
