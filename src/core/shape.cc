// Shapes with static and symbolic dimensions.
#include "core/shape.h"

namespace kiln {

std::string Dim::to_string() const {
  if (is_static()) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

Shape Shape::from_static(const std::vector<int64_t>& dims) {
  std::vector<Dim> d(dims.begin(), dims.end());
  return Shape(std::move(d));
}

bool Shape::is_static() const {
  if (!has_rank_) return false;
  for (const auto& d : dims_)
    if (!d.is_static()) return false;
  return true;
}

std::vector<int64_t> Shape::static_dims() const {
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const auto& d : dims_) out.push_back(d.value);
  return out;
}

int64_t Shape::num_elements() const {
  if (!is_static()) return -1;
  int64_t n = 1;
  for (const auto& d : dims_) n *= d.value;
  return n;
}

std::string Shape::to_string() const {
  if (!has_rank_) return "[*]";
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += dims_[i].to_string();
  }
  return s + "]";
}

int64_t num_elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace kiln
