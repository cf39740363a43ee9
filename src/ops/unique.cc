// Unique (opset 11): the distinct elements (or slices along `axis`) of a tensor, sorted or
// in order of first occurrence, with first-occurrence indices, inverse indices and counts.
// Slices compare lexicographically, as NumPy's unique(axis=...) does; NaNs sort last and
// are equal to each other.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/elementwise_common.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

Status infer_unique(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  Shape y = Shape{Dim()};
  if (ctx.node().has_attr("axis")) {
    y = Shape::unknown_rank();
    if (xt.shape.has_rank()) {
      KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(ctx.node(), ctx.node().attr_int("axis", 0), xt.shape.rank()));
      y = xt.shape;
      y[axis] = Dim();
    }
  }
  ctx.set_output(0, xt.dtype, y);
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, DataType::kInt64, Shape{Dim()});
  return ok_status();
}

// -1, 0 or 1 comparing two scalars; NaN after every number and equal to NaN.
template <typename T>
int compare_values(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : na ? 1 : -1;
  }
  return a < b ? -1 : b < a ? 1 : 0;
}

template <typename T>
void unique_items(const T* x, int64_t outer, int64_t n, int64_t inner, bool sorted, std::vector<int64_t>* first,
                  std::vector<int64_t>* inverse, std::vector<int64_t>* counts) {
  // Item i is the slice x[o, i, j] over every o, j.
  auto cmp = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        const int c = compare_values(x[(o * n + a) * inner + j], x[(o * n + b) * inner + j]);
        if (c != 0) return c;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  // Groups of equal items in sorted order; the first of each (stable sort) is its first occurrence.
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  std::vector<int64_t> group_first, group_count;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || cmp(order[i - 1], order[i]) != 0) {
      group_first.push_back(order[i]);
      group_count.push_back(0);
    }
    group_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(group_first.size()) - 1;
    ++group_count.back();
  }
  // Output position of each group: sorted order, or order of first occurrence.
  std::vector<int64_t> rank(group_first.size());
  std::vector<int64_t> by_pos(group_first.size());
  std::iota(by_pos.begin(), by_pos.end(), 0);
  if (!sorted)
    std::sort(by_pos.begin(), by_pos.end(), [&](int64_t a, int64_t b) {
      return group_first[static_cast<size_t>(a)] < group_first[static_cast<size_t>(b)];
    });
  for (size_t p = 0; p < by_pos.size(); ++p) rank[static_cast<size_t>(by_pos[p])] = static_cast<int64_t>(p);
  first->resize(group_first.size());
  counts->resize(group_first.size());
  for (size_t g = 0; g < group_first.size(); ++g) {
    (*first)[static_cast<size_t>(rank[g])] = group_first[g];
    (*counts)[static_cast<size_t>(rank[g])] = group_count[g];
  }
  inverse->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    (*inverse)[static_cast<size_t>(i)] = rank[static_cast<size_t>(group_of[static_cast<size_t>(i)])];
}

Status unique_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const bool sorted = node.attr_int("sorted", 1) != 0;
  const bool has_axis = node.has_attr("axis");
  int axis = 0;
  int64_t outer = 1, n = x.num_elements(), inner = 1;
  if (has_axis) {
    if (x.rank() == 0) return invalid_argument("node %s: axis given for a scalar input", node.label().c_str());
    KILN_ASSIGN_OR_RETURN(axis, normalize_axis(node, node.attr_int("axis", 0), x.rank()));
    n = x.dim(axis);
    outer = num_elements(std::vector<int64_t>(x.dims().begin(), x.dims().begin() + axis));
    inner = num_elements(std::vector<int64_t>(x.dims().begin() + axis + 1, x.dims().end()));
  }
  std::vector<int64_t> first, inverse, counts;
  bool known = true;
  if (x.dtype() == DataType::kString) {
    unique_items(x.data<std::string>(), outer, n, inner, sorted, &first, &inverse, &counts);
  } else {
    known = dispatch_numeric(x.dtype(), [&]<typename T>() {
      unique_items(x.data<T>(), outer, n, inner, sorted, &first, &inverse, &counts);
    });
  }
  if (!known) return unsupported_dtype(node, x.dtype());
  const int64_t u = static_cast<int64_t>(first.size());
  std::vector<int64_t> ydims = {u};
  if (has_axis) {
    ydims = x.dims();
    ydims[static_cast<size_t>(axis)] = u;
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), ydims));
  auto gather = [&]<typename T>() {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < u; ++k)
        for (int64_t j = 0; j < inner; ++j)
          y->data<T>()[(o * u + k) * inner + j] = x.data<T>()[(o * n + first[static_cast<size_t>(k)]) * inner + j];
  };
  if (x.dtype() == DataType::kString)
    gather.template operator()<std::string>();
  else
    dispatch_numeric(x.dtype(), gather);
  const std::vector<int64_t>* lists[3] = {&first, &inverse, &counts};
  for (int i = 1; i < ctx.num_outputs() && i < 4; ++i) {
    const std::vector<int64_t>& v = *lists[i - 1];
    KILN_ASSIGN_OR_RETURN(Tensor * t, ctx.allocate_output(i, DataType::kInt64, {static_cast<int64_t>(v.size())}));
    std::copy(v.begin(), v.end(), t->data<int64_t>());
  }
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Unique")
                     .since(11)
                     .inputs(1, 1)
                     .outputs(1, 4)
                     .attr("axis", AttrKind::kInt)
                     .attr("sorted", AttrKind::kInt)
                     .infer(infer_unique)
                     .kernel(with_half_as_float(unique_kernel)));

}  // namespace kiln::ops
