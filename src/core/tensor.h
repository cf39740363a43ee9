// Tensors: a dtype, static dims and a pointer to elements, plus shared ownership of
// the memory behind them. A Tensor either owns an aligned buffer it allocated or views
// memory owned by someone else (an mmap'ed .kiln weight section, a user buffer), kept
// alive by a shared handle. Copying a Tensor copies the handle, not the elements.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/status.h"

namespace kiln {

inline constexpr size_t kTensorAlignment = 64;

// Where Tensor::allocate takes element storage from instead of the heap: a model
// execution installs its activation arena for the thread it runs on, so activations come
// from memory reused across executions (and, with a caller-given workspace, from that
// workspace only). Implementations must be thread-safe: a buffer may be released on any
// thread.
class TensorAllocator {
 public:
  virtual ~TensorAllocator() = default;
  // A kTensorAlignment-aligned block of `bytes` (a nonzero multiple of kTensorAlignment),
  // or null when the allocator has no room left.
  virtual void* allocate(size_t bytes) = 0;
  // Gives back a block from allocate() with the same `bytes`.
  virtual void deallocate(void* p, size_t bytes) = 0;
};

// While alive, Tensor::allocate on this thread draws non-string storage from `allocator`
// (string tensors stay on the heap). Each buffer holds a reference to the allocator and
// returns to it when the last tensor sharing it goes, wherever that happens. Scopes nest;
// a null allocator means the heap.
class TensorAllocatorScope {
 public:
  explicit TensorAllocatorScope(std::shared_ptr<TensorAllocator> allocator);
  ~TensorAllocatorScope();
  TensorAllocatorScope(const TensorAllocatorScope&) = delete;
  TensorAllocatorScope& operator=(const TensorAllocatorScope&) = delete;

 private:
  std::shared_ptr<TensorAllocator> allocator_;
  const std::shared_ptr<TensorAllocator>* saved_;
};

// The allocator installed on this thread, or null (the heap).
TensorAllocator* current_tensor_allocator();

// Whether new tensor storage is zero-filled (the default, which kernels that accumulate into
// their output rely on) or left as it is, for kernels that write every element anyway (the
// fill is a pass over memory the kernel is about to write: ~9% of MobileNetV2's time).
enum class TensorInit { kZero, kUninitialized };

class Tensor {
 public:
  Tensor() = default;

  // Allocates zero-initialised, 64-byte aligned storage, from the thread's
  // TensorAllocator when one is installed. String tensors hold default-constructed
  // std::string elements. Fails on overflow, negative dims, or an allocator out of room.
  static Expected<Tensor> allocate(DataType dtype, std::vector<int64_t> dims,
                                   TensorInit init = TensorInit::kZero);
  // Like allocate, but a Kiln bug (not bad input) if it fails; for kernels whose
  // output sizes were already validated. When the thread's TensorAllocator is out of
  // room it falls back to the heap (the allocator has seen the refusal, and its owner
  // fails the execution afterwards), so a full arena is an error, never an abort.
  static Tensor make(DataType dtype, std::vector<int64_t> dims);
  // Views `data` without copying; `owner` keeps it alive (may be null for memory
  // that outlives the tensor). Not for string tensors.
  static Tensor view(DataType dtype, std::vector<int64_t> dims, void* data,
                     std::shared_ptr<const void> owner);
  // A rank-0 tensor holding one value.
  template <typename T>
  static Tensor scalar(T value) {
    Tensor t = make(DataTypeOf<T>::value, {});
    *t.data<T>() = value;
    return t;
  }
  // A rank-1 tensor (or `dims` if given) holding `values`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, std::vector<int64_t> dims = {}) {
    if (dims.empty()) dims = {static_cast<int64_t>(values.size())};
    Tensor t = make(DataTypeOf<T>::value, dims);
    for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
    return t;
  }

  bool defined() const { return dtype_ != DataType::kUndefined; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t num_elements() const { return num_elements_; }
  size_t size_bytes() const { return dtype_bytes(dtype_, num_elements_); }
  Shape shape() const { return Shape::from_static(dims_); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  // Same elements, new dims (element count must match; checked by the caller).
  Tensor reshaped(std::vector<int64_t> dims) const;
  // A deep copy into fresh storage.
  Tensor clone() const;
  // Element i converted to double / int64 (numeric types, fp16, bf16, bool).
  double element_as_double(int64_t i) const;
  int64_t element_as_int64(int64_t i) const;
  // Values of an integer tensor (int32/int64) as int64; for shape-like inputs.
  std::vector<int64_t> to_int64_vector() const;
  // "float32[1,3,224,224]"
  std::string description() const;

  // ---- Storage reuse (GraphExecutor's per-execution recycling, runtime/graph_executor.h) --
  // Bytes of the block allocate() took for this tensor's elements (a multiple of
  // kTensorAlignment), shared by its reshaped() copies; 0 for views and string tensors,
  // whose storage Kiln did not size.
  size_t storage_bytes() const { return storage_bytes_; }
  // The bytes allocate() takes for `dims` of `dtype`: the elements rounded up to
  // kTensorAlignment (at least one unit). False for negative dims, an overflow or strings.
  static bool storage_bytes_for(DataType dtype, const std::vector<int64_t>& dims, size_t* bytes);
  // Whether this tensor's block could take other dims: it was sized by allocate() and no
  // other tensor (a view, a reshaped copy, a value still in use) shares it.
  bool storage_reusable() const { return storage_bytes_ > 0 && owner_ && owner_.use_count() == 1; }
  // Turns a storage_reusable() tensor into a new tensor of `dtype` and `dims` in the same
  // block, zero-filled unless `init` says otherwise; the dims vector keeps its capacity, so
  // a tensor of no more dims than before takes no allocation. Requires
  // storage_bytes_for(dtype, dims) == storage_bytes().
  void reuse_storage(DataType dtype, const std::vector<int64_t>& dims, TensorInit init);
  // Points a view (no owner: memory the caller keeps alive) at other memory with the same
  // dtype and dims, as a model execution does for its input buffers. Requires an owner-less
  // view.
  void rebind_view(void* data);
  // Makes this tensor `base` viewed with `dims` (same element count; checked by the caller), as
  // base.reshaped(dims) would be, but in this object: its dims vector keeps its capacity.
  void become_view_of(const Tensor& base, const std::vector<int64_t>& dims);
  // Lets go of the storage (the reference to it, or the view), keeping the dims vector's
  // capacity for become_view_of: an empty shell, undefined.
  void release_storage();
  bool is_unowned_view() const { return defined() && !owner_ && storage_bytes_ == 0; }

 private:
  static Expected<Tensor> allocate_from(DataType dtype, std::vector<int64_t> dims,
                                        const std::shared_ptr<TensorAllocator>* allocator,
                                        TensorInit init = TensorInit::kZero);

  DataType dtype_ = DataType::kUndefined;
  std::vector<int64_t> dims_;
  int64_t num_elements_ = 0;
  void* data_ = nullptr;
  size_t storage_bytes_ = 0;
  std::shared_ptr<const void> owner_;
};

}  // namespace kiln
