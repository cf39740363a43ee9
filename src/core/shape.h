// Shapes with static and symbolic dimensions ("batch", "seq"), and unknown rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// One dimension: a known extent (>= 0), a named symbol, or unknown (no name, -1).
struct Dim {
  int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit so that Shape{1, 3, 224, 224} reads well
  static Dim symbolic(std::string name) {
    Dim d;
    d.symbol = std::move(name);
    return d;
  }
  bool is_static() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string to_string() const;
};

class Shape {
 public:
  Shape() : has_rank_(false) {}
  Shape(std::initializer_list<Dim> dims) : has_rank_(true), dims_(dims) {}
  explicit Shape(std::vector<Dim> dims) : has_rank_(true), dims_(std::move(dims)) {}
  static Shape from_static(const std::vector<int64_t>& dims);
  static Shape unknown_rank() { return Shape(); }

  bool has_rank() const { return has_rank_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  const std::vector<Dim>& dims() const { return dims_; }
  std::vector<Dim>& dims() { return dims_; }
  const Dim& operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  Dim& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  // True when the rank and every extent are known.
  bool is_static() const;
  // The extents; only meaningful when is_static().
  std::vector<int64_t> static_dims() const;
  // Product of extents, or -1 if not static.
  int64_t num_elements() const;
  bool operator==(const Shape& o) const { return has_rank_ == o.has_rank_ && dims_ == o.dims_; }
  // "[1,3,224,224]", "[batch,128]", "[?,3]", "[*]" for unknown rank.
  std::string to_string() const;

 private:
  bool has_rank_;
  std::vector<Dim> dims_;
};

// Product of a static dim list (1 for rank 0).
int64_t num_elements(const std::vector<int64_t>& dims);
// "[1,3,224,224]"
std::string dims_to_string(const std::vector<int64_t>& dims);

}  // namespace kiln
