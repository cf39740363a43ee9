// NonMaxSuppression (ONNX opsets 10..27): greedy per-class selection of boxes by score,
// dropping boxes that overlap a selected one by more than iou_threshold.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// The selected count depends on the data: [?, 3].
Status infer_nms(InferContext& ctx) {
  const std::string label = ctx.node().label();
  const ir::TensorType& bt = ctx.input_type(0);
  const ir::TensorType& st = ctx.input_type(1);
  if (bt.shape.has_rank() && bt.shape.rank() != 3)
    return invalid_argument("node %s: boxes has rank %d, expected 3 (batch x boxes x 4)", label.c_str(),
                            bt.shape.rank());
  if (st.shape.has_rank() && st.shape.rank() != 3)
    return invalid_argument("node %s: scores has rank %d, expected 3 (batch x classes x boxes)", label.c_str(),
                            st.shape.rank());
  ctx.set_output(0, DataType::kInt64, Shape({Dim(), Dim(3)}));
  return ok_status();
}

struct Box {
  double y1, x1, y2, x2;
};

// Boxes as (y1, x1, y2, x2) with any two opposite corners, or (x_center, y_center, w, h).
Box read_box(const float* b, bool center) {
  if (center) {
    const double xc = b[0], yc = b[1], w = b[2], h = b[3];
    return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
  }
  return {std::min<double>(b[0], b[2]), std::min<double>(b[1], b[3]), std::max<double>(b[0], b[2]),
          std::max<double>(b[1], b[3])};
}

double iou(const Box& a, const Box& b) {
  const double area_a = (a.y2 - a.y1) * (a.x2 - a.x1), area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
  if (area_a <= 0 || area_b <= 0) return 0;
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const double iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0;
  const double inter = ih * iw;
  return inter / (area_a + area_b - inter);
}

Status nms_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& boxes = *ctx.input(0);
  const Tensor& scores = *ctx.input(1);
  if (boxes.dtype() != DataType::kFloat32 || scores.dtype() != DataType::kFloat32)
    return invalid_argument("node %s: boxes and scores must be float32, got %s and %s", label.c_str(),
                            dtype_name(boxes.dtype()), dtype_name(scores.dtype()));
  if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 || scores.dim(0) != boxes.dim(0) ||
      scores.dim(2) != boxes.dim(1))
    return invalid_argument("node %s: boxes %s and scores %s, expected batch x n x 4 and batch x classes x n",
                            label.c_str(), dims_to_string(boxes.dims()).c_str(), dims_to_string(scores.dims()).c_str());
  // Optional scalar (or 1-element) inputs.
  auto scalar = [&](int i, const char* what, double fallback) -> Expected<double> {
    const Tensor* t = ctx.input(i);
    if (!t) return fallback;
    if (t->num_elements() != 1)
      return invalid_argument("node %s: %s has %lld elements, expected 1", label.c_str(), what,
                              (long long)t->num_elements());
    return t->element_as_double(0);
  };
  int64_t max_per_class = 0;
  if (const Tensor* t = ctx.input(2)) {
    if (t->num_elements() != 1 || (t->dtype() != DataType::kInt64 && t->dtype() != DataType::kInt32))
      return invalid_argument("node %s: max_output_boxes_per_class must be one int64", label.c_str());
    max_per_class = t->element_as_int64(0);
  }
  KILN_ASSIGN_OR_RETURN(double iou_threshold, scalar(3, "iou_threshold", 0.0));
  const bool has_score_threshold = ctx.has_input(4);
  KILN_ASSIGN_OR_RETURN(double score_threshold, scalar(4, "score_threshold", 0.0));
  const int64_t center = node.attr_int("center_point_box", 0);
  if (center != 0 && center != 1)
    return invalid_argument("node %s: center_point_box must be 0 or 1, got %lld", label.c_str(), (long long)center);
  const int64_t batches = boxes.dim(0), classes = scores.dim(1), n = boxes.dim(1);
  std::vector<int64_t> selected;  // triples
  if (max_per_class > 0) {
    std::vector<Box> bx(static_cast<size_t>(n));
    std::vector<int64_t> order, kept;
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < n; ++i) bx[i] = read_box(boxes.data<float>() + (b * n + i) * 4, center == 1);
      for (int64_t c = 0; c < classes; ++c) {
        const float* sc = scores.data<float>() + (b * classes + c) * n;
        order.clear();
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(sc[i])) continue;  // unordered: never selected (and keeps the sort well defined)
          if (!has_score_threshold || static_cast<double>(sc[i]) > score_threshold) order.push_back(i);
        }
        // Highest score first; ties keep the lower box index first.
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b2) { return sc[a] > sc[b2]; });
        kept.clear();
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
          bool keep = true;
          for (int64_t k : kept)
            if (iou(bx[i], bx[k]) > iou_threshold) {
              keep = false;
              break;
            }
          if (!keep) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, c, i});
        }
      }
    }
  }
  const int64_t count = static_cast<int64_t>(selected.size() / 3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt64, {count, 3}));
  std::copy(selected.begin(), selected.end(), y->data<int64_t>());
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("NonMaxSuppression")
                     .since(10)
                     .inputs(2, 5)
                     .outputs(1, 1)
                     .attr("center_point_box", AttrKind::kInt)
                     .infer(infer_nms)
                     .kernel(nms_kernel));

}  // namespace kiln::ops
