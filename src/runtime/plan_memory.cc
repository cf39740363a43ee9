#include "runtime/plan_memory.h"

namespace kiln::rt {

Expected<Tensor> PlanMemory::block(size_t bytes) {
  if (block_.raw_data() && block_.storage_bytes() >= bytes) return block_;
  Expected<Tensor> memory = [&] {
    TensorAllocatorScope heap(nullptr);  // a block of its own, not the arena's free lists
    return Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(bytes)}, TensorInit::kUninitialized);
  }();
  if (!memory.ok()) return memory.status();
  block_ = std::move(memory).value();
  ++generation_;
  return block_;
}

void PlanMemory::retire(const void* base) {
  if (!block_.raw_data() || block_.raw_data() != base) return;
  block_ = Tensor();
  ++generation_;
}

}  // namespace kiln::rt
