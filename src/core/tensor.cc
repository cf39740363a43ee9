// Tensors: allocation, views, element access.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace kiln {
namespace {

// A block of std::string elements constructed in place.
struct StringBlock {
  std::vector<std::string> items;
};

// The block allocate() takes for n elements: rounded up to kTensorAlignment, at least one unit.
size_t padded_storage_bytes(DataType dtype, int64_t n) {
  const size_t bytes = dtype_bytes(dtype, n);
  const size_t padded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  return padded == 0 ? kTensorAlignment : padded;
}

// The allocator of the innermost TensorAllocatorScope on this thread (null: the heap).
thread_local const std::shared_ptr<TensorAllocator>* t_allocator = nullptr;

}  // namespace

TensorAllocatorScope::TensorAllocatorScope(std::shared_ptr<TensorAllocator> allocator)
    : allocator_(std::move(allocator)), saved_(t_allocator) {
  t_allocator = allocator_ ? &allocator_ : nullptr;
}

TensorAllocatorScope::~TensorAllocatorScope() { t_allocator = saved_; }

TensorAllocator* current_tensor_allocator() { return t_allocator ? t_allocator->get() : nullptr; }

Expected<Tensor> Tensor::allocate(DataType dtype, std::vector<int64_t> dims, TensorInit init) {
  return allocate_from(dtype, std::move(dims), t_allocator, init);
}

Expected<Tensor> Tensor::allocate_from(DataType dtype, std::vector<int64_t> dims,
                                       const std::shared_ptr<TensorAllocator>* allocator, TensorInit init) {
  if (dtype == DataType::kUndefined) return invalid_argument("cannot allocate an undefined dtype");
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid_argument("negative dimension %lld in %s", (long long)d,
                                       dims_to_string(dims).c_str());
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d)
      return resource_exhausted("tensor of shape %s is too large", dims_to_string(dims).c_str());
    n *= d;
  }
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.num_elements_ = n;
  if (dtype == DataType::kString) {
    auto block = std::make_shared<StringBlock>();
    try {
      block->items.resize(static_cast<size_t>(n));
    } catch (const std::bad_alloc&) {
      return resource_exhausted("out of memory for %lld strings", (long long)n);
    }
    t.data_ = block->items.data();
    t.owner_ = std::move(block);
    return t;
  }
  const size_t padded = padded_storage_bytes(dtype, n);
  if (allocator) {
    void* p = (*allocator)->allocate(padded);
    if (!p)
      return resource_exhausted("the activation arena has no room for %zu bytes (tensor %s%s)",
                                padded, dtype_name(dtype), dims_to_string(t.dims_).c_str());
    if (init == TensorInit::kZero) std::memset(p, 0, padded);
    t.data_ = p;
    t.storage_bytes_ = padded;
    // The deleter holds the allocator, so a tensor outliving its execution is still safe.
    t.owner_ = std::shared_ptr<const void>(p, [a = *allocator, padded](const void* q) {
      a->deallocate(const_cast<void*>(q), padded);
    });
    return t;
  }
  void* p = std::aligned_alloc(kTensorAlignment, padded);
  if (!p) return resource_exhausted("out of memory allocating %zu bytes", padded);
  if (init == TensorInit::kZero) std::memset(p, 0, padded);
  t.data_ = p;
  t.storage_bytes_ = padded;
  t.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return t;
}

Tensor Tensor::make(DataType dtype, std::vector<int64_t> dims) {
  auto t = t_allocator ? allocate_from(dtype, dims, t_allocator)
                       : allocate_from(dtype, std::move(dims), nullptr);
  // An arena out of room is not a Kiln bug: take the heap; the arena noted the refusal.
  if (!t.ok() && t_allocator) t = allocate_from(dtype, std::move(dims), nullptr);
  KILN_CHECK(t.ok(), "%s", t.status().to_string().c_str());
  return std::move(t).value();
}

Tensor Tensor::view(DataType dtype, std::vector<int64_t> dims, void* data,
                    std::shared_ptr<const void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.num_elements_ = kiln::num_elements(dims);
  t.dims_ = std::move(dims);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

bool Tensor::storage_bytes_for(DataType dtype, const std::vector<int64_t>& dims, size_t* bytes) {
  if (dtype == DataType::kUndefined || dtype == DataType::kString) return false;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d)) return false;
    n *= d;
  }
  *bytes = padded_storage_bytes(dtype, n);
  return true;
}

void Tensor::reuse_storage(DataType dtype, const std::vector<int64_t>& dims, TensorInit init) {
  dtype_ = dtype;
  dims_.assign(dims.begin(), dims.end());
  num_elements_ = kiln::num_elements(dims_);
  if (init == TensorInit::kZero) std::memset(data_, 0, storage_bytes_);
}

void Tensor::rebind_view(void* data) { data_ = data; }

void Tensor::become_view_of(const Tensor& base, const std::vector<int64_t>& dims) {
  dtype_ = base.dtype_;
  dims_.assign(dims.begin(), dims.end());
  num_elements_ = base.num_elements_;
  data_ = base.data_;
  storage_bytes_ = base.storage_bytes_;
  owner_ = base.owner_;
}

void Tensor::release_storage() {
  dtype_ = DataType::kUndefined;
  dims_.clear();
  num_elements_ = 0;
  data_ = nullptr;
  storage_bytes_ = 0;
  owner_.reset();
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  Tensor t = *this;
  t.num_elements_ = kiln::num_elements(dims);
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = make(dtype_, dims_);
  if (dtype_ == DataType::kString) {
    for (int64_t i = 0; i < num_elements_; ++i) t.data<std::string>()[i] = data<std::string>()[i];
  } else if (size_bytes()) {
    std::memcpy(t.data_, data_, size_bytes());
  }
  return t;
}

double Tensor::element_as_double(int64_t i) const {
  switch (dtype_) {
    case DataType::kFloat16: return fp16_to_float(data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_float(data<uint16_t>()[i]);
    default: break;
  }
  double v = 0;
  dispatch_numeric(dtype_, [&]<typename T>() { v = static_cast<double>(data<T>()[i]); });
  return v;
}

int64_t Tensor::element_as_int64(int64_t i) const {
  if (dtype_is_float(dtype_)) return static_cast<int64_t>(element_as_double(i));
  int64_t v = 0;
  dispatch_numeric(dtype_, [&]<typename T>() { v = static_cast<int64_t>(data<T>()[i]); });
  return v;
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> out(static_cast<size_t>(num_elements_));
  for (int64_t i = 0; i < num_elements_; ++i) out[static_cast<size_t>(i)] = element_as_int64(i);
  return out;
}

std::string Tensor::description() const {
  return std::string(dtype_name(dtype_)) + dims_to_string(dims_);
}

}  // namespace kiln
