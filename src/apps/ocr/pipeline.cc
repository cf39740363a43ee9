#include "apps/ocr/pipeline.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "apps/ocr/line_merging.h"
#include "apps/ocr/model_cache.h"
#include "apps/ocr/model_runner.h"
#include "apps/ocr/text_recognition.h"
#include "core/npy.h"
#include "kiln/kiln.h"

namespace kiln::ocr {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Input geometry of the recognition and classification networks (rec_image_shape,
// cls_image_shape) and the shape buckets they are compiled with. A batch of crops (up to
// `batch`, similar widths) runs as sub-batches of exactly a bucket's batch size (5 = 3 + 1 +
// 1), each padded to its own widest crop and then to the next bucket width: the networks'
// cost is linear in the batch (PP-OCRv4 rec, 1 thread: 8.9 ms at 1x320, 50 ms at 6x320), so
// padding a batch of 4 to 6 would waste a third, and the buckets' widths are close enough
// that padding to the next costs at most a third and ~10% on average. A crop wider than the
// widest bucket runs the dynamic variant.
constexpr int kTextHeight = 48;
constexpr int kRecMinWidth = 320;
constexpr int kClsWidth = 192;
const std::vector<int> kBucketBatches = {1, 3, 6};
const std::vector<int> kRecBucketWidths = {320, 480, 640, 800, 960, 1120, 1280, 1600, 1920};

// The bucket batch sizes a batch of at most `batch` crops runs as (only those are compiled:
// every bucket is prepared when the model loads).
std::vector<int> bucket_batches(int batch) {
  std::vector<int> sizes;
  for (int b : kBucketBatches)
    if (b <= batch) sizes.push_back(b);
  return sizes;
}

// Splits `count` into bucket batch sizes, largest first.
std::vector<size_t> sub_batches(size_t count) {
  std::vector<size_t> sizes;
  for (auto it = kBucketBatches.rbegin(); it != kBucketBatches.rend(); ++it)
    while (count >= static_cast<size_t>(*it)) {
      sizes.push_back(static_cast<size_t>(*it));
      count -= static_cast<size_t>(*it);
    }
  return sizes;
}

std::string bucket_spec(const std::vector<int>& batches, const std::vector<int>& widths) {
  std::string spec;
  for (int b : batches)
    for (int w : widths) spec += str_format("%sx:%d,3,%d,%d", spec.empty() ? "" : ";", b, kTextHeight, w);
  return spec;
}

// The device side of one runtime device: its context and the three models loaded on it.
struct DeviceModels {
  kilnrtContext context = nullptr;
  std::unique_ptr<ModelRunner> det, cls, rec;
};

// What a thread runs models with: a stream of one device and the buffers of its calls.
struct Worker {
  int device = 0;
  kilnrtStream stream = nullptr;
  RunSlot slot;
  // Host buffers reused from call to call (fresh memory costs a page fault per 4 KiB).
  std::vector<float> input, output;
  ~Worker() {
    if (stream) kilnrtDestroyStream(stream);
  }
};

// Detection's result for one image, handed to recognition.
struct Detected {
  std::vector<Quad> boxes;     // in the decoded image's pixels
  std::vector<cv::Mat> crops;  // one per box
  int scale_down = 1;
  std::string note;
  double ms = 0;
};

}  // namespace

struct Pipeline::Impl {
  PipelineOptions options;
  std::atomic<int64_t> dumped[3] = {0, 0, 0};  // det, cls, rec inputs written (options.dump_inputs)

  // Writes one model input for calibration (options.dump_inputs); a no-op when off.
  Status dump_input(int role, const std::vector<float>& input, const std::vector<int64_t>& dims) {
    if (options.dump_inputs.empty()) return ok_status();
    static const char* const kRoles[] = {"det", "cls", "rec"};
    const int64_t seq = dumped[role]++;
    const std::filesystem::path dir =
        std::filesystem::path(options.dump_inputs) / kRoles[role] / str_format("%06lld", static_cast<long long>(seq));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return unavailable("cannot create %s: %s", dir.string().c_str(), ec.message().c_str());
    Tensor t = Tensor::make(DataType::kFloat32, dims);
    if (static_cast<size_t>(t.num_elements()) > input.size())
      return internal_error("dumping a %s input: %zu values for %s", kRoles[role], input.size(),
                            dims_to_string(dims).c_str());
    std::copy(input.begin(), input.begin() + t.num_elements(), t.data<float>());
    return write_npy((dir / "x.npy").string(), t);
  }
  std::optional<CtcAlphabet> alphabet;
  std::vector<DeviceModels> devices;
  std::mutex pool_mutex;
  std::vector<std::unique_ptr<Worker>> idle;
  int next_device = 0;

  ~Impl() {
    // Streams and models go before the contexts they live in.
    idle.clear();
    for (DeviceModels& d : devices) {
      if (d.context) kilnrtSetCurrentContext(d.context);
      d.det.reset();
      d.cls.reset();
      d.rec.reset();
      if (d.context) kilnrtDestroyContext(d.context);
    }
  }

  Status load(const PipelineOptions& opts);
  Expected<std::unique_ptr<Worker>> acquire(int device = -1);
  void release(std::unique_ptr<Worker> w);
  Expected<Detected> detect(Worker& w, const DecodedImage& image);
  Expected<OcrResult> recognize(Worker& w, Detected detected);
  Status classify_angles(Worker& w, std::vector<cv::Mat>& crops);

  // [begin, end) ranges over `count` crops sorted by aspect ratio: batches of `batch`, each
  // split into bucket-sized sub-batches.
  static std::vector<std::pair<size_t, size_t>> batch_ranges(size_t count, int batch) {
    std::vector<std::pair<size_t, size_t>> ranges;
    for (size_t begin = 0; begin < count; begin += static_cast<size_t>(batch)) {
      size_t at = begin;
      for (size_t n : sub_batches(std::min(count, begin + batch) - begin)) {
        ranges.emplace_back(at, at + n);
        at += n;
      }
    }
    return ranges;
  }
};

Status Pipeline::Impl::load(const PipelineOptions& opts) {
  options = opts;
  namespace fs = std::filesystem;
  fs::path dir(options.model_dir);
  if (options.model_dir.empty()) return invalid_argument("no OCR model folder given");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("%s: no such model folder", options.model_dir.c_str());
  // A file name is the folder's; an absolute path (a model given on its own) is itself.
  auto file = [&](const std::string& name) { return (dir / name).string(); };
  auto missing = [&](const std::string& name, const char* hint) {
    if (fs::path(name).is_absolute()) return not_found("%s: no such model file%s", name.c_str(), hint);
    return not_found("%s: the model folder has no %s%s", options.model_dir.c_str(), name.c_str(), hint);
  };
  for (const std::string& name : {options.files.detection, options.files.recognition, options.files.dictionary})
    if (!fs::is_regular_file(file(name), ec)) return missing(name, "");
  if (options.angle_classifier && !fs::is_regular_file(file(options.files.classifier), ec))
    return missing(options.files.classifier, " (or turn the angle classifier off)");
  for (int batch : {options.cls_batch, options.rec_batch})
    if (batch < 1 || batch > kBucketBatches.back())
      return invalid_argument("batch %d is outside 1..%d", batch, kBucketBatches.back());
  KILN_ASSIGN_OR_RETURN(CtcAlphabet a, CtcAlphabet::load(file(options.files.dictionary)));
  alphabet = std::move(a);

  // Compile (or find in the cache) the three models.
  std::string cache = cache_directory(options.cache_dir);
  const char* precision = compiler::precision_name(options.precision);
  auto compile = [&](const std::string& onnx, compiler::CompileOptions co, const std::string& key) -> Expected<std::string> {
    co.passes.precision = options.precision;
    KILN_ASSIGN_OR_RETURN(CachedModel m, compile_cached(onnx, co, key + " precision=" + precision, cache, options.progress));
    return m.path;
  };
  KILN_ASSIGN_OR_RETURN(std::string det_path, compile(file(options.files.detection), {}, "det open-dims"));
  compiler::CompileOptions rec_options;
  std::string rec_buckets = bucket_spec(bucket_batches(options.rec_batch), kRecBucketWidths);
  KILN_ASSIGN_OR_RETURN(rec_options.dynamic_dims, compiler::parse_dynamic_dims(rec_buckets));
  KILN_ASSIGN_OR_RETURN(std::string rec_path, compile(file(options.files.recognition), rec_options, "rec " + rec_buckets));
  std::string cls_path;
  if (options.angle_classifier) {
    compiler::CompileOptions cls_options;
    std::string cls_buckets = bucket_spec(bucket_batches(options.cls_batch), {kClsWidth});
    KILN_ASSIGN_OR_RETURN(cls_options.dynamic_dims, compiler::parse_dynamic_dims(cls_buckets));
    KILN_ASSIGN_OR_RETURN(cls_path, compile(file(options.files.classifier), cls_options, "cls " + cls_buckets));
  }

  uint32_t count = 0;
  kilnError e = kilnrtGetDeviceCount(&count);
  if (e != KILN_SUCCESS) return api_status(e, "kilnrtGetDeviceCount");
  devices.resize(count);
  for (uint32_t d = 0; d < count; ++d) {
    DeviceModels& dm = devices[d];
    e = kilnrtCreateContext(&dm.context, static_cast<int32_t>(d));
    if (e != KILN_SUCCESS) return api_status(e, "kilnrtCreateContext");
    // A cached file that does not load (an older Kiln's, a damaged one) is compiled again once.
    auto load_model = [&](const std::string& path) -> Expected<std::unique_ptr<ModelRunner>> {
      Expected<std::unique_ptr<ModelRunner>> r = ModelRunner::load(path);
      if (!r.ok()) {
        evict_cached(path);
        Status st = r.status();
        st.add_context("while loading the cached %s (removed; the next run compiles it again)", path.c_str());
        return st;
      }
      return r;
    };
    KILN_ASSIGN_OR_RETURN(dm.det, load_model(det_path));
    KILN_ASSIGN_OR_RETURN(dm.rec, load_model(rec_path));
    if (options.angle_classifier) {
      KILN_ASSIGN_OR_RETURN(dm.cls, load_model(cls_path));
    }
  }
  if (options.streams <= 0) options.streams = static_cast<int>(count);
  return ok_status();
}

Expected<std::unique_ptr<Worker>> Pipeline::Impl::acquire(int device) {
  std::unique_ptr<Worker> w;
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    for (auto it = idle.begin(); it != idle.end(); ++it)
      if (device < 0 || (*it)->device == device) {
        w = std::move(*it);
        idle.erase(it);
        break;
      }
    if (!w) {
      w = std::make_unique<Worker>();
      w->device = device >= 0 ? device : next_device;
      next_device = (next_device + 1) % static_cast<int>(devices.size());
    }
  }
  kilnError e = kilnrtSetCurrentContext(devices[w->device].context);
  if (e != KILN_SUCCESS) return api_status(e, "kilnrtSetCurrentContext");
  if (!w->stream) {
    e = kilnrtCreateStream(&w->stream);
    if (e != KILN_SUCCESS) return api_status(e, "kilnrtCreateStream");
  }
  return w;
}

void Pipeline::Impl::release(std::unique_ptr<Worker> w) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  idle.push_back(std::move(w));
}

Expected<Detected> Pipeline::Impl::detect(Worker& w, const DecodedImage& image) {
  auto start = Clock::now();
  const cv::Mat& bgr = image.bgr;
  DetectionSize input = detection_preprocess(bgr, options.detection, &w.input);
  std::vector<float>& probability = w.output;
  std::vector<int64_t> dims;
  const int64_t h = input.padded_height, wd = input.padded_width;
  KILN_RETURN_IF_ERROR(dump_input(0, w.input, {1, 3, h, wd}));
  KILN_RETURN_IF_ERROR(devices[w.device].det->run(w.stream, w.slot, w.input, {1, 3, h, wd},
                                                  static_cast<size_t>(h) * wd, &probability, &dims),
                       "text detection");
  if (dims.size() != 4 || dims[2] != h || dims[3] != wd)
    return internal_error("text detection: output shape does not match the %lldx%lld input",
                          static_cast<long long>(h), static_cast<long long>(wd));
  std::vector<DetectedBox> found = db_postprocess(probability.data(), input.height, input.width,
                                                  static_cast<size_t>(wd), bgr.cols, bgr.rows, options.detection);
  Detected d;
  d.boxes = order_and_filter_boxes(found, bgr.cols, bgr.rows);
  d.crops.reserve(d.boxes.size());
  for (const Quad& q : d.boxes) d.crops.push_back(crop_text_box(bgr, q));
  d.scale_down = image.scale_down;
  d.note = image.note;
  d.ms = ms_since(start);
  return d;
}

// Indices of `crops` ordered by aspect ratio (width / height), as PaddleOCR batches them.
static std::vector<size_t> by_aspect_ratio(const std::vector<cv::Mat>& crops) {
  std::vector<size_t> order(crops.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return static_cast<float>(crops[a].cols) / crops[a].rows < static_cast<float>(crops[b].cols) / crops[b].rows;
  });
  return order;
}

Status Pipeline::Impl::classify_angles(Worker& w, std::vector<cv::Mat>& crops) {
  std::vector<size_t> order = by_aspect_ratio(crops);
  std::vector<float>& batch_input = w.input;
  std::vector<float>& scores = w.output;
  std::vector<int64_t> dims;
  for (auto [begin, end] : batch_ranges(order.size(), options.cls_batch)) {
    std::vector<const cv::Mat*> batch;
    for (size_t k = begin; k < end; ++k) batch.push_back(&crops[order[k]]);
    normalize_batch(batch, kTextHeight, kClsWidth, &batch_input);
    int64_t n = static_cast<int64_t>(batch.size());
    KILN_RETURN_IF_ERROR(dump_input(1, batch_input, {n, 3, kTextHeight, kClsWidth}));
    KILN_RETURN_IF_ERROR(devices[w.device].cls->run(w.stream, w.slot, batch_input, {n, 3, kTextHeight, kClsWidth},
                                                    static_cast<size_t>(n) * 2, &scores, &dims),
                         "angle classification");
    if (dims.size() != 2 || dims[0] != n || dims[1] != 2)
      return internal_error("angle classification: output is not %lld x 2", static_cast<long long>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float* s = scores.data() + 2 * i;
      // Labels "0" and "180": turn the crop when the classifier is sure it is upside down.
      if (s[1] > s[0] && s[1] > options.classifier_threshold) {
        cv::Mat turned;
        cv::rotate(crops[order[begin + i]], turned, cv::ROTATE_180);
        crops[order[begin + i]] = turned;
      }
    }
  }
  return ok_status();
}

Expected<OcrResult> Pipeline::Impl::recognize(Worker& w, Detected detected) {
  auto start = Clock::now();
  std::vector<cv::Mat>& crops = detected.crops;
  if (options.angle_classifier && !crops.empty()) KILN_RETURN_IF_ERROR(classify_angles(w, crops));
  std::vector<std::string> texts(crops.size());
  std::vector<float> confidences(crops.size(), 0.0f);
  std::vector<size_t> order = by_aspect_ratio(crops);
  std::vector<float>& batch_input = w.input;
  std::vector<float>& probabilities = w.output;
  std::vector<int64_t> dims;
  const size_t classes = alphabet->size();
  for (auto [begin, end] : batch_ranges(order.size(), options.rec_batch)) {
    std::vector<const cv::Mat*> batch;
    for (size_t k = begin; k < end; ++k) batch.push_back(&crops[order[k]]);
    int width = recognition_batch_width(batch, kTextHeight, kRecMinWidth);
    normalize_batch(batch, kTextHeight, width, &batch_input);
    int64_t n = static_cast<int64_t>(batch.size());
    // CTC steps are the width downsampled by 8 in PP-OCRv3/v4 and by 4 in older models.
    size_t bound = static_cast<size_t>(n) * (width / 4 + 2) * classes;
    KILN_RETURN_IF_ERROR(dump_input(2, batch_input, {n, 3, kTextHeight, width}));
    KILN_RETURN_IF_ERROR(devices[w.device].rec->run(w.stream, w.slot, batch_input, {n, 3, kTextHeight, width}, bound,
                                                    &probabilities, &dims),
                         "text recognition");
    if (dims.size() != 3 || dims[0] != n || dims[2] != static_cast<int64_t>(classes))
      return invalid_argument("text recognition: output has %lld classes, the dictionary %zu (dictionary and model "
                              "do not match)",
                              static_cast<long long>(dims.size() == 3 ? dims[2] : -1), classes);
    int steps = static_cast<int>(dims[1]);
    for (int64_t i = 0; i < n; ++i) {
      size_t index = order[begin + i];
      alphabet->decode(probabilities.data() + static_cast<size_t>(i) * steps * classes, steps,
                       static_cast<int>(classes), &texts[index], &confidences[index]);
    }
  }
  OcrResult result;
  for (size_t i = 0; i < crops.size(); ++i) {
    if (confidences[i] < options.drop_score) continue;
    TextLine line;
    line.text = std::move(texts[i]);
    line.confidence = confidences[i];
    line.box = detected.boxes[i];
    for (cv::Point2f& p : line.box) p *= static_cast<float>(detected.scale_down);
    result.lines.push_back(std::move(line));
  }
  if (options.merge_lines) result.lines = merge_same_row_lines(std::move(result.lines));
  result.note = std::move(detected.note);
  result.ms = detected.ms + ms_since(start);
  return result;
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

Expected<std::unique_ptr<Pipeline>> Pipeline::create(const PipelineOptions& options) {
  auto impl = std::make_unique<Impl>();
  KILN_RETURN_IF_ERROR(impl->load(options));
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

int Pipeline::devices() const { return static_cast<int>(impl_->devices.size()); }
int Pipeline::streams() const { return impl_->options.streams; }

Expected<OcrResult> Pipeline::run(const DecodedImage& image) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Worker> w, impl_->acquire());
  Expected<Detected> detected = impl_->detect(*w, image);
  Expected<OcrResult> result = detected.ok() ? impl_->recognize(*w, std::move(*detected)) : Expected<OcrResult>(detected.status());
  impl_->release(std::move(w));
  return result;
}

namespace {

// A bounded queue between a lane's two stages.
template <typename T>
class StageQueue {
 public:
  explicit StageQueue(size_t capacity) : capacity_(capacity) {}
  void push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_; });
    items_.push_back(std::move(item));
    not_empty_.notify_one();
  }
  T pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty(); });
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
};

struct Handoff {
  size_t index = 0;
  bool last = false;  // no more images for this lane
  std::optional<Expected<Detected>> detected;
};

}  // namespace

void Pipeline::run_many(size_t count, const std::function<Expected<DecodedImage>(size_t)>& load,
                        const std::function<void(size_t, Expected<OcrResult>)>& done) {
  std::atomic<size_t> next{0};
  std::mutex done_mutex;
  auto deliver = [&](size_t index, Expected<OcrResult> result) {
    std::lock_guard<std::mutex> lock(done_mutex);
    done(index, std::move(result));
  };
  int lanes = std::max(1, std::min<int>(impl_->options.streams, static_cast<int>(std::max<size_t>(count, 1))));
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<StageQueue<Handoff>>> queues;
  for (int lane = 0; lane < lanes; ++lane) {
    queues.push_back(std::make_unique<StageQueue<Handoff>>(2));
    StageQueue<Handoff>* queue = queues.back().get();
    int device = lane % static_cast<int>(impl_->devices.size());
    // Detection stage: decode, detect, crop; hand the crops on.
    threads.emplace_back([&, queue, device] {
      Expected<std::unique_ptr<Worker>> w = impl_->acquire(device);
      for (size_t i; (i = next.fetch_add(1)) < count;) {
        Handoff h;
        h.index = i;
        if (!w.ok()) {
          h.detected.emplace(w.status());
        } else {
          auto read_start = Clock::now();
          Expected<DecodedImage> image = load(i);
          if (image.ok()) {
            double read_ms = ms_since(read_start);
            Expected<Detected> d = impl_->detect(**w, *image);
            if (d.ok()) d->ms += read_ms;  // an image's time runs from reading its file
            h.detected.emplace(std::move(d));
          } else {
            h.detected.emplace(image.status());
          }
        }
        queue->push(std::move(h));
      }
      Handoff last;
      last.last = true;
      queue->push(std::move(last));
      if (w.ok()) impl_->release(std::move(*w));
    });
    // Recognition stage: classify, recognise, deliver.
    threads.emplace_back([&, queue, device] {
      Expected<std::unique_ptr<Worker>> w = impl_->acquire(device);
      for (;;) {
        Handoff h = queue->pop();
        if (h.last) break;
        if (!h.detected->ok())
          deliver(h.index, h.detected->status());
        else if (!w.ok())
          deliver(h.index, w.status());
        else
          deliver(h.index, impl_->recognize(**w, std::move(**h.detected)));
      }
      if (w.ok()) impl_->release(std::move(*w));
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace kiln::ocr
