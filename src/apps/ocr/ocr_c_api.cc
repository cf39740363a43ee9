// include/kiln/ocr.h over ocr::Pipeline: handles, argument checks, Status -> kilnError with
// the message left for kilnGetRecentErrMsg, no exception across the C boundary.
#include "kiln/ocr.h"

#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "apps/ocr/pipeline.h"
#include "capi/api_internal.h"

struct kilnOcrPipeline {
  std::unique_ptr<kiln::ocr::Pipeline> pipeline;
  std::mutex messages_mutex;
  std::vector<std::string> run_files_messages;
};

struct kilnOcrResult {
  kiln::ocr::OcrResult result;
};

namespace {

using kiln::rt::fail;

kilnError fail_status(const kiln::Status& status) {
  if (status.code() == kiln::StatusCode::kNotFound) return fail(status, KILN_ERROR_INVALID_FILE);
  if (status.code() == kiln::StatusCode::kInvalidArgument || status.code() == kiln::StatusCode::kDataLoss)
    return fail(status, KILN_ERROR_INVALID_PARAM);
  return fail(status);
}

// Runs `body`, turning exceptions (out of memory, OpenCV's) into error codes.
template <typename Body>
kilnError guarded(const char* api, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(KILN_ERROR_BAD_ALLOC, "%s: out of memory", api);
  } catch (const std::exception& e) {
    return fail(KILN_ERROR_FAILURE, "%s: %s", api, e.what());
  }
}

kilnError deliver(kiln::Expected<kiln::ocr::OcrResult> r, kilnOcrResult** result) {
  if (!r.ok()) return fail_status(r.status());
  *result = new kilnOcrResult{std::move(*r)};
  kiln::rt::clear_error();
  return KILN_SUCCESS;
}

const kiln::ocr::TextLine* line_at(const kilnOcrResult* result, size_t index) {
  if (!result || index >= result->result.lines.size()) return nullptr;
  return &result->result.lines[index];
}

}  // namespace

extern "C" {

kilnError kilnOcrOptionsInit(kilnOcrOptions* options) {
  if (!options) return fail(KILN_ERROR_INVALID_PARAM, "kilnOcrOptionsInit: options is NULL");
  kiln::ocr::DetectionOptions det;
  kiln::ocr::PipelineOptions defaults;
  *options = kilnOcrOptions{};
  options->precision = KILN_OCR_PRECISION_FP32;
  options->angleClassifier = 1;
  options->detThreshold = det.threshold;
  options->detBoxThreshold = det.box_threshold;
  options->detUnclipRatio = det.unclip_ratio;
  options->detLimitSide = det.limit_side;
  options->dropScore = defaults.drop_score;
  options->mergeLines = defaults.merge_lines ? 1 : 0;
  options->detGear = det.gear;
  options->recBatch = defaults.rec_batch;
  return KILN_SUCCESS;
}

kilnError kilnOcrCreate(const kilnOcrOptions* options, kilnOcrPipeline** pipeline) {
  static const char* const kApi = "kilnOcrCreate";
  if (!options || !pipeline) return fail(KILN_ERROR_INVALID_PARAM, "%s: options or pipeline is NULL", kApi);
  if (!options->modelDir) return fail(KILN_ERROR_INVALID_PARAM, "%s: options.modelDir is NULL", kApi);
  if (options->detLimitSide < 32 || options->detThreshold <= 0 || options->detThreshold >= 1 ||
      options->detBoxThreshold < 0 || options->detBoxThreshold > 1 || options->detUnclipRatio <= 0 ||
      options->streams < 0 || options->detGear < 32 || options->detGear % 32 != 0 || options->recBatch < 1 ||
      options->recBatch > 6 ||
      options->precision < KILN_OCR_PRECISION_FP32 || options->precision > KILN_OCR_PRECISION_MIXED)
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: an option is out of range (detLimitSide >= 32, thresholds in (0, 1), unclip ratio > 0, "
                "streams >= 0, detGear a multiple of 32, recBatch 1..6, precision FP32 or MIXED); start from kilnOcrOptionsInit",
                kApi);
  return guarded(kApi, [&]() -> kilnError {
    kiln::ocr::PipelineOptions o;
    o.model_dir = options->modelDir;
    if (options->cacheDir) o.cache_dir = options->cacheDir;
    o.precision = options->precision == KILN_OCR_PRECISION_MIXED ? kiln::compiler::Precision::kMixed
                                                                  : kiln::compiler::Precision::kFp32;
    o.streams = options->streams;
    o.angle_classifier = options->angleClassifier != 0;
    o.detection.threshold = options->detThreshold;
    o.detection.box_threshold = options->detBoxThreshold;
    o.detection.unclip_ratio = options->detUnclipRatio;
    o.detection.limit_side = options->detLimitSide;
    o.drop_score = options->dropScore;
    o.merge_lines = options->mergeLines != 0;
    o.detection.gear = options->detGear;
    o.rec_batch = options->recBatch;
    kiln::Expected<std::unique_ptr<kiln::ocr::Pipeline>> p = kiln::ocr::Pipeline::create(o);
    if (!p.ok()) return fail_status(p.status());
    auto handle = std::make_unique<kilnOcrPipeline>();
    handle->pipeline = std::move(*p);
    *pipeline = handle.release();
    return KILN_SUCCESS;
  });
}

kilnError kilnOcrDestroy(kilnOcrPipeline* pipeline) {
  if (!pipeline) return fail(KILN_ERROR_INVALID_PARAM, "kilnOcrDestroy: pipeline is NULL");
  delete pipeline;
  return KILN_SUCCESS;
}

kilnError kilnOcrRunFile(kilnOcrPipeline* pipeline, const char* path, kilnOcrResult** result) {
  static const char* const kApi = "kilnOcrRunFile";
  if (!pipeline || !path || !result) return fail(KILN_ERROR_INVALID_PARAM, "%s: a parameter is NULL", kApi);
  return guarded(kApi, [&]() -> kilnError {
    kiln::Expected<kiln::ocr::DecodedImage> image = kiln::ocr::read_image_file(path);
    if (!image.ok()) return fail_status(image.status());
    return deliver(pipeline->pipeline->run(*image), result);
  });
}

kilnError kilnOcrRunEncoded(kilnOcrPipeline* pipeline, const void* data, size_t size, kilnOcrResult** result) {
  static const char* const kApi = "kilnOcrRunEncoded";
  if (!pipeline || (!data && size > 0) || !result) return fail(KILN_ERROR_INVALID_PARAM, "%s: a parameter is NULL", kApi);
  return guarded(kApi, [&]() -> kilnError {
    kiln::Expected<kiln::ocr::DecodedImage> image =
        kiln::ocr::decode_image(static_cast<const uint8_t*>(data), size, "<buffer>");
    if (!image.ok()) return fail_status(image.status());
    return deliver(pipeline->pipeline->run(*image), result);
  });
}

kilnError kilnOcrRunPixels(kilnOcrPipeline* pipeline, const uint8_t* pixels, int32_t width, int32_t height,
                           size_t stride, kilnOcrPixelFormat format, kilnOcrResult** result) {
  static const char* const kApi = "kilnOcrRunPixels";
  if (!pipeline || !result) return fail(KILN_ERROR_INVALID_PARAM, "%s: a parameter is NULL", kApi);
  if (format < KILN_OCR_PIXEL_BGR || format > KILN_OCR_PIXEL_GRAY)
    return fail(KILN_ERROR_INVALID_PARAM, "%s: unknown pixel format %d", kApi, static_cast<int>(format));
  return guarded(kApi, [&]() -> kilnError {
    kiln::Expected<kiln::ocr::DecodedImage> image = kiln::ocr::image_from_pixels(
        pixels, width, height, stride, static_cast<kiln::ocr::PixelFormat>(static_cast<int>(format)));
    if (!image.ok()) return fail_status(image.status());
    return deliver(pipeline->pipeline->run(*image), result);
  });
}

kilnError kilnOcrRunFiles(kilnOcrPipeline* pipeline, const char* const* paths, size_t count, kilnOcrResult** results,
                          kilnError* errors) {
  static const char* const kApi = "kilnOcrRunFiles";
  if (!pipeline || (count > 0 && (!paths || !results)))
    return fail(KILN_ERROR_INVALID_PARAM, "%s: a parameter is NULL", kApi);
  for (size_t i = 0; i < count; ++i)
    if (!paths[i]) return fail(KILN_ERROR_INVALID_PARAM, "%s: paths[%zu] is NULL", kApi, i);
  return guarded(kApi, [&]() -> kilnError {
    std::vector<std::string> messages(count);
    std::vector<kilnError> codes(count, KILN_SUCCESS);
    for (size_t i = 0; i < count; ++i) results[i] = nullptr;
    pipeline->pipeline->run_many(
        count, [&](size_t i) { return kiln::ocr::read_image_file(paths[i]); },
        [&](size_t i, kiln::Expected<kiln::ocr::OcrResult> r) {
          if (r.ok()) {
            results[i] = new kilnOcrResult{std::move(*r)};
          } else {
            codes[i] = fail_status(r.status());
            messages[i] = r.status().to_string();
          }
        });
    kilnError first = KILN_SUCCESS;
    for (size_t i = 0; i < count; ++i) {
      if (errors) errors[i] = codes[i];
      if (first == KILN_SUCCESS && codes[i] != KILN_SUCCESS) {
        first = fail(codes[i], "%s", messages[i].c_str());  // the first failure's message for kilnGetRecentErrMsg
      }
    }
    std::lock_guard<std::mutex> lock(pipeline->messages_mutex);
    pipeline->run_files_messages = std::move(messages);
    return first;
  });
}

const char* kilnOcrRunFilesMessage(const kilnOcrPipeline* pipeline, size_t index) {
  if (!pipeline || index >= pipeline->run_files_messages.size()) return "";
  return pipeline->run_files_messages[index].c_str();
}

size_t kilnOcrResultNumLines(const kilnOcrResult* result) { return result ? result->result.lines.size() : 0; }

const char* kilnOcrResultLineText(const kilnOcrResult* result, size_t index) {
  const kiln::ocr::TextLine* line = line_at(result, index);
  if (!line) {
    fail(KILN_ERROR_INVALID_PARAM, "kilnOcrResultLineText: no line %zu", index);
    return nullptr;
  }
  return line->text.c_str();
}

float kilnOcrResultLineConfidence(const kilnOcrResult* result, size_t index) {
  const kiln::ocr::TextLine* line = line_at(result, index);
  return line ? line->confidence : 0.0f;
}

kilnError kilnOcrResultLineBox(const kilnOcrResult* result, size_t index, float box[8]) {
  const kiln::ocr::TextLine* line = line_at(result, index);
  if (!line || !box) return fail(KILN_ERROR_INVALID_PARAM, "kilnOcrResultLineBox: no line %zu (or box is NULL)", index);
  for (int k = 0; k < 4; ++k) {
    box[2 * k] = line->box[k].x;
    box[2 * k + 1] = line->box[k].y;
  }
  return KILN_SUCCESS;
}

double kilnOcrResultTimeMs(const kilnOcrResult* result) { return result ? result->result.ms : 0.0; }

const char* kilnOcrResultNote(const kilnOcrResult* result) { return result ? result->result.note.c_str() : ""; }

void kilnOcrDestroyResult(kilnOcrResult* result) { delete result; }

}  // extern "C"
