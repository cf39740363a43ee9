#include "kernels/prepacked_weights.h"

#include <cstring>

#include "core/logging.h"

namespace kiln::kernels {
namespace {

thread_local PackRecorder* t_recorder = nullptr;
thread_local const ir::Node* t_source = nullptr;

std::atomic<uint64_t> g_hits{0}, g_misses{0};
std::atomic<bool> g_miss_noted{false};

bool key_equals(const Tensor& t, const std::string& key) {
  return t.dtype() == DataType::kUInt8 && t.size_bytes() == key.size() && t.raw_data() &&
         std::memcmp(t.raw_data(), key.data(), key.size()) == 0;
}

}  // namespace

PackRecorder::PackRecorder() : outer_(t_recorder) { t_recorder = this; }
PackRecorder::~PackRecorder() { t_recorder = outer_; }

PrepackedSource::PrepackedSource(const ir::Node& node) : outer_(t_source) { t_source = &node; }
PrepackedSource::~PrepackedSource() { t_source = outer_; }

std::shared_ptr<void> find_prepacked(const void* source, const std::string& key, size_t size) {
  const ir::Node* node = t_source;
  if (!node || !source) return nullptr;
  const ir::Attribute* blobs = node->attr(kPrepackedAttr);
  const ir::Attribute* keys = node->attr(kPrepackedKeyAttr);
  const ir::Attribute* inputs = node->attr(kPrepackedInputAttr);
  if (!blobs || !keys || !inputs || blobs->kind != ir::AttrKind::kTensors ||
      keys->kind != ir::AttrKind::kTensors || inputs->kind != ir::AttrKind::kInts)
    return nullptr;
  const size_t n = blobs->tensors.size();
  if (keys->tensors.size() != n || inputs->ints.size() != n) return nullptr;
  bool packed_from_source = false;  // the node has a packing of this weight, maybe another key
  for (size_t k = 0; k < n; ++k) {
    const int64_t index = inputs->ints[k];
    const ir::Value* v = index >= 0 ? node->input(static_cast<size_t>(index)) : nullptr;
    if (!v || !v->has_initializer() || v->initializer()->raw_data() != source) continue;
    packed_from_source = true;
    const Tensor& blob = blobs->tensors[k];
    const auto address = reinterpret_cast<uintptr_t>(blob.raw_data());
    if (!key_equals(keys->tensors[k], key) || blob.dtype() != DataType::kUInt8 || blob.size_bytes() < size ||
        !blob.raw_data() || address % 64 != 0)
      continue;
    g_hits.fetch_add(1, std::memory_order_relaxed);
    // The deleter's copy of the tensor keeps the loaded model's storage alive.
    return std::shared_ptr<void>(const_cast<void*>(blob.raw_data()), [keep = blob](void*) {});
  }
  if (packed_from_source) {
    g_misses.fetch_add(1, std::memory_order_relaxed);
    if (!g_miss_noted.exchange(true))
      KILN_LOG(kWarning,
               "node %s: the model's weights were packed for another CPU, oneDNN version or thread "
               "count (oneDNN may choose another weight layout at another thread count); packing them "
               "again at load (compile the model on this machine with KILN_NUM_THREADS set to the thread "
               "count it runs at to skip this)",
               node->label().c_str());
  }
  return nullptr;
}

void record_pack(const void* source, std::string key, std::shared_ptr<void> bytes, size_t size) {
  if (PackRecorder* r = t_recorder) r->packs_.push_back({source, std::move(key), std::move(bytes), size});
}

PrepackStats prepack_stats() {
  return {g_hits.load(std::memory_order_relaxed), g_misses.load(std::memory_order_relaxed)};
}

}  // namespace kiln::kernels
