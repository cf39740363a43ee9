#include "apps/ocr/text_detection.h"

#include <polyclipping/clipper.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

namespace kiln::ocr {

DetectionSize detection_preprocess(const cv::Mat& bgr, const DetectionOptions& options, std::vector<float>* chw) {
  // DetResizeForTest, limit_type "max": shrink only when the longer side is above the limit.
  int h = bgr.rows, w = bgr.cols;
  float ratio = std::max(h, w) > options.limit_side ? static_cast<float>(options.limit_side) / std::max(h, w) : 1.0f;
  int resize_h = static_cast<int>(std::round(static_cast<float>(h) * ratio / 32.0f)) * 32;
  int resize_w = static_cast<int>(std::round(static_cast<float>(w) * ratio / 32.0f)) * 32;
  resize_h = std::max(resize_h, 32);
  resize_w = std::max(resize_w, 32);
  cv::Mat resized;
  cv::resize(bgr, resized, cv::Size(resize_w, resize_h));  // INTER_LINEAR, as cv2.resize
  int gear = std::max(options.gear, 1);
  DetectionSize size{resize_h, resize_w, (resize_h + gear - 1) / gear * gear, (resize_w + gear - 1) / gear * gear};
  const int out_w = size.padded_width;
  chw->resize(static_cast<size_t>(3) * size.padded_height * out_w);
  std::fill(chw->begin(), chw->end(), 0.0f);
  // NormalizeImage: (x / 255 - mean) / std per channel, in the image's BGR order.
  static const float kMean[3] = {0.485f, 0.456f, 0.406f};
  static const float kStd[3] = {0.229f, 0.224f, 0.225f};
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * kStd[c]);
    shift[c] = -kMean[c] / kStd[c];
  }
  size_t plane = static_cast<size_t>(size.padded_height) * out_w;
  for (int y = 0; y < resize_h; ++y) {
    const uint8_t* row = resized.ptr<uint8_t>(y);
    float* out0 = chw->data() + static_cast<size_t>(y) * out_w;
    for (int x = 0; x < resize_w; ++x)
      for (int c = 0; c < 3; ++c) out0[c * plane + x] = row[3 * x + c] * scale[c] + shift[c];
  }
  return size;
}

namespace {

// get_mini_boxes: the contour's minimum-area rectangle, corners ordered as PaddleOCR does
// (sorted by x; of the two leftmost the upper is first, of the two rightmost the upper is
// second), and its shorter side.
Quad mini_box(const std::vector<cv::Point2f>& points, float* short_side) {
  cv::RotatedRect rect = cv::minAreaRect(points);
  cv::Point2f p[4];
  rect.points(p);
  std::sort(p, p + 4, [](const cv::Point2f& a, const cv::Point2f& b) { return a.x < b.x; });
  int i1 = 0, i2 = 1, i3 = 2, i4 = 3;
  if (p[1].y > p[0].y) { i1 = 0; i4 = 1; } else { i1 = 1; i4 = 0; }
  if (p[3].y > p[2].y) { i2 = 2; i3 = 3; } else { i2 = 3; i3 = 2; }
  *short_side = std::min(rect.size.width, rect.size.height);
  return {p[i1], p[i2], p[i3], p[i4]};
}

// box_score_fast: the mean probability inside the box, over its bounding rectangle.
float box_score_fast(const cv::Mat& prob, const Quad& box) {
  int w = prob.cols, h = prob.rows;
  float min_x = box[0].x, max_x = box[0].x, min_y = box[0].y, max_y = box[0].y;
  for (const cv::Point2f& p : box) {
    min_x = std::min(min_x, p.x); max_x = std::max(max_x, p.x);
    min_y = std::min(min_y, p.y); max_y = std::max(max_y, p.y);
  }
  int xmin = std::clamp(static_cast<int>(std::floor(min_x)), 0, w - 1);
  int xmax = std::clamp(static_cast<int>(std::ceil(max_x)), 0, w - 1);
  int ymin = std::clamp(static_cast<int>(std::floor(min_y)), 0, h - 1);
  int ymax = std::clamp(static_cast<int>(std::ceil(max_y)), 0, h - 1);
  cv::Mat mask = cv::Mat::zeros(ymax - ymin + 1, xmax - xmin + 1, CV_8UC1);
  std::vector<cv::Point> poly;
  // numpy's astype(int32) truncates toward zero.
  for (const cv::Point2f& p : box) poly.emplace_back(static_cast<int>(p.x - xmin), static_cast<int>(p.y - ymin));
  cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{poly}, cv::Scalar(1));
  return static_cast<float>(cv::mean(prob(cv::Rect(xmin, ymin, xmax - xmin + 1, ymax - ymin + 1)), mask)[0]);
}

// unclip: the box grown by area * ratio / perimeter with round joins (pyclipper's
// PyclipperOffset, JT_ROUND, ET_CLOSEDPOLYGON). pyclipper takes integer coordinates.
std::vector<cv::Point2f> unclip(const Quad& box, float ratio) {
  double area = 0, length = 0;
  for (int i = 0; i < 4; ++i) {
    const cv::Point2f& a = box[i];
    const cv::Point2f& b = box[(i + 1) % 4];
    area += static_cast<double>(a.x) * b.y - static_cast<double>(b.x) * a.y;
    length += std::hypot(static_cast<double>(b.x - a.x), static_cast<double>(b.y - a.y));
  }
  area = std::abs(area) / 2;
  std::vector<cv::Point2f> out;
  if (length <= 0) return out;
  double distance = area * ratio / length;
  ClipperLib::Path path;
  for (const cv::Point2f& p : box)
    path.emplace_back(static_cast<ClipperLib::cInt>(p.x), static_cast<ClipperLib::cInt>(p.y));
  ClipperLib::ClipperOffset offset;
  offset.AddPath(path, ClipperLib::jtRound, ClipperLib::etClosedPolygon);
  ClipperLib::Paths solution;
  offset.Execute(solution, distance);
  if (solution.empty()) return out;
  // One polygon for a convex box; if Clipper returns more, the largest is the text.
  const ClipperLib::Path* best = &solution[0];
  for (const ClipperLib::Path& p : solution)
    if (std::abs(ClipperLib::Area(p)) > std::abs(ClipperLib::Area(*best))) best = &p;
  for (const ClipperLib::IntPoint& p : *best) out.emplace_back(static_cast<float>(p.X), static_cast<float>(p.Y));
  return out;
}

}  // namespace

std::vector<DetectedBox> db_postprocess(const float* probability, int height, int width, size_t row_stride,
                                        int src_width, int src_height, const DetectionOptions& options) {
  cv::Mat prob(height, width, CV_32FC1, const_cast<float*>(probability), row_stride * sizeof(float));
  cv::Mat bitmap;
  cv::threshold(prob, bitmap, options.threshold, 255, cv::THRESH_BINARY);
  bitmap.convertTo(bitmap, CV_8UC1);
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(bitmap, contours, cv::RETR_LIST, cv::CHAIN_APPROX_SIMPLE);
  size_t count = std::min(contours.size(), static_cast<size_t>(options.max_candidates));
  std::vector<DetectedBox> boxes;
  for (size_t i = 0; i < count; ++i) {
    std::vector<cv::Point2f> contour(contours[i].begin(), contours[i].end());
    float short_side = 0;
    Quad box = mini_box(contour, &short_side);
    if (short_side < options.min_size) continue;
    float score = box_score_fast(prob, box);
    if (options.box_threshold > score) continue;
    std::vector<cv::Point2f> expanded = unclip(box, options.unclip_ratio);
    if (expanded.size() < 3) continue;
    Quad grown = mini_box(expanded, &short_side);
    if (short_side < options.min_size + 2) continue;
    DetectedBox out;
    out.score = score;
    for (int k = 0; k < 4; ++k) {
      // np.round(x / width * dest_width), clipped, then astype(int16).
      float x = std::round(grown[k].x / width * src_width);
      float y = std::round(grown[k].y / height * src_height);
      out.quad[k] = cv::Point2f(std::clamp(x, 0.0f, static_cast<float>(src_width)),
                                std::clamp(y, 0.0f, static_cast<float>(src_height)));
    }
    boxes.push_back(out);
  }
  return boxes;
}

namespace {

// order_points_clockwise: top-left has the smallest x+y, bottom-right the largest; of the
// other two, top-right has the smaller y-x.
Quad order_clockwise(const Quad& pts) {
  int tl = 0, br = 0;
  for (int i = 1; i < 4; ++i) {
    if (pts[i].x + pts[i].y < pts[tl].x + pts[tl].y) tl = i;
    if (pts[i].x + pts[i].y > pts[br].x + pts[br].y) br = i;
  }
  std::vector<cv::Point2f> rest;
  for (int i = 0; i < 4; ++i)
    if (i != tl && i != br) rest.push_back(pts[i]);
  if (rest.size() != 2) return pts;  // degenerate (np.delete of one index twice): keep as is
  bool first_is_tr = rest[0].y - rest[0].x <= rest[1].y - rest[1].x;
  return {pts[tl], first_is_tr ? rest[0] : rest[1], pts[br], first_is_tr ? rest[1] : rest[0]};
}

}  // namespace

std::vector<Quad> order_and_filter_boxes(const std::vector<DetectedBox>& boxes, int image_width, int image_height) {
  std::vector<Quad> kept;
  for (const DetectedBox& b : boxes) {
    Quad q = order_clockwise(b.quad);
    for (cv::Point2f& p : q) {
      // clip_det_res: int(min(max(x, 0), w - 1)).
      p.x = static_cast<float>(static_cast<int>(std::min(std::max(p.x, 0.0f), static_cast<float>(image_width - 1))));
      p.y = static_cast<float>(static_cast<int>(std::min(std::max(p.y, 0.0f), static_cast<float>(image_height - 1))));
    }
    int rect_width = static_cast<int>(cv::norm(q[0] - q[1]));
    int rect_height = static_cast<int>(cv::norm(q[0] - q[3]));
    if (rect_width <= 3 || rect_height <= 3) continue;
    kept.push_back(q);
  }
  // sorted_boxes: by (top-left y, top-left x), then one bubbling pass that puts boxes on the
  // same row (tops within 10 pixels) left to right.
  std::stable_sort(kept.begin(), kept.end(), [](const Quad& a, const Quad& b) {
    return a[0].y != b[0].y ? a[0].y < b[0].y : a[0].x < b[0].x;
  });
  for (size_t i = 0; i + 1 < kept.size(); ++i)
    for (size_t j = i + 1; j-- > 0;) {
      if (std::abs(kept[j + 1][0].y - kept[j][0].y) < 10 && kept[j + 1][0].x < kept[j][0].x)
        std::swap(kept[j], kept[j + 1]);
      else
        break;
    }
  return kept;
}

}  // namespace kiln::ocr
