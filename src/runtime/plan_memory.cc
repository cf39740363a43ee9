#include "runtime/plan_memory.h"

namespace kiln::rt {

PlanMemory::PlanMemory(void* base, size_t bytes)
    : block_(Tensor::view(DataType::kUInt8, {static_cast<int64_t>(bytes)}, base, nullptr)),
      capacity_(bytes),
      external_(true) {}

Expected<Tensor> PlanMemory::block(size_t bytes) {
  if (block_.raw_data() && capacity_ >= bytes) return block_;
  if (external_)
    return resource_exhausted("the workspace holds %zu bytes for the memory plan, which needs %zu", capacity_, bytes);
  Expected<Tensor> memory = [&] {
    TensorAllocatorScope heap(nullptr);  // a block of its own, not the arena's free lists
    return Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(bytes)}, TensorInit::kUninitialized);
  }();
  if (!memory.ok()) return memory.status();
  block_ = std::move(memory).value();
  capacity_ = block_.storage_bytes();
  ++generation_;
  return block_;
}

void PlanMemory::retire(const void* base) {
  if (!block_.raw_data() || block_.raw_data() != base) return;
  block_ = Tensor();
  capacity_ = 0;
  ++generation_;
}

}  // namespace kiln::rt
