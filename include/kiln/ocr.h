/*
 * Kiln OCR: text detection, angle classification and recognition (PP-OCR models, with
 * PaddleOCR's defaults) on Kiln's runtime, as a library. `kiln ocr` is built on it.
 *
 *   kilnInit(NULL);
 *   kilnOcrOptions options;
 *   kilnOcrOptionsInit(&options);
 *   options.modelDir = "models";          // det/rec/cls .onnx + ppocr_keys_v1.txt
 *   kilnOcrPipeline* ocr;
 *   kilnOcrCreate(&options, &ocr);        // compiles the models once into the model cache
 *   kilnOcrResult* result;
 *   kilnOcrRunFile(ocr, "page.png", &result);
 *   for (size_t i = 0; i < kilnOcrResultNumLines(result); ++i)
 *     printf("%s\n", kilnOcrResultLineText(result, i));
 *   kilnOcrDestroyResult(result);
 *   kilnOcrDestroy(ocr);
 *   kilnFinalize();
 *
 * Errors follow kiln.h: a kilnError code, and the message in kilnGetRecentErrMsg(). A
 * pipeline may be run from several threads at once.
 */
#ifndef KILN_OCR_H_
#define KILN_OCR_H_

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kilnOcrPipeline kilnOcrPipeline;
typedef struct kilnOcrResult kilnOcrResult;

typedef enum {
  KILN_OCR_PRECISION_FP32 = 0,
  KILN_OCR_PRECISION_MIXED = 1, /* bf16 where it pays (kiln compile --precision mixed) */
} kilnOcrPrecision;

typedef enum {
  KILN_OCR_PIXEL_BGR = 0, /* 3 bytes per pixel */
  KILN_OCR_PIXEL_RGB = 1,
  KILN_OCR_PIXEL_GRAY = 2, /* 1 byte per pixel */
} kilnOcrPixelFormat;

typedef struct {
  const char* modelDir;          /* required: the PP-OCR model folder */
  const char* cacheDir;          /* NULL: KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln */
  kilnOcrPrecision precision;    /* default FP32 */
  int32_t streams;               /* pipeline lanes for kilnOcrRunFiles; 0 (default): one per device */
  int32_t angleClassifier;       /* 1 (default): turn upside-down lines; 0: skip the classifier */
  float detThreshold;            /* 0.3 */
  float detBoxThreshold;         /* 0.6 */
  float detUnclipRatio;          /* 1.5 */
  int32_t detLimitSide;          /* 960 */
  float dropScore;               /* 0.5: lines recognised with less confidence are dropped */
  int32_t mergeLines;            /* 1 (default): join the word boxes of one line; 0: PaddleOCR's boxes as they are */
  int32_t detGear;               /* 128: detection input padded to multiples of it (32: exact sizes) */
  int32_t recBatch;              /* 1: each crop recognised at its own width; up to 6 (PaddleOCR's batching) */
} kilnOcrOptions;

/* Fills `options` with the defaults above (modelDir NULL). */
KILN_API kilnError kilnOcrOptionsInit(kilnOcrOptions* options);

/* Needs kilnInit; loads the models on every device of the runtime. */
KILN_API kilnError kilnOcrCreate(const kilnOcrOptions* options, kilnOcrPipeline** pipeline);
KILN_API kilnError kilnOcrDestroy(kilnOcrPipeline* pipeline);

/* One image: a PNG/JPEG file, its bytes, or raw pixels (rows `stride` bytes apart). */
KILN_API kilnError kilnOcrRunFile(kilnOcrPipeline* pipeline, const char* path, kilnOcrResult** result);
KILN_API kilnError kilnOcrRunEncoded(kilnOcrPipeline* pipeline, const void* data, size_t size,
                                     kilnOcrResult** result);
KILN_API kilnError kilnOcrRunPixels(kilnOcrPipeline* pipeline, const uint8_t* pixels, int32_t width,
                                    int32_t height, size_t stride, kilnOcrPixelFormat format,
                                    kilnOcrResult** result);

/* Many image files through the pipeline's lanes (detection of one image overlapping the
 * recognition of another). `results[i]` gets image i's result, or NULL when it failed, and
 * `errors[i]` (if `errors` is not NULL) KILN_SUCCESS or the image's error code, and
 * kilnOcrRunFilesMessage(pipeline, i) its message. A failed image does not stop the others.
 * Returns KILN_SUCCESS when every image succeeded, else the first failure's code. */
KILN_API kilnError kilnOcrRunFiles(kilnOcrPipeline* pipeline, const char* const* paths, size_t count,
                                   kilnOcrResult** results, kilnError* errors);
/* The message of image `index` of the last kilnOcrRunFiles on this pipeline ("" if it succeeded). */
KILN_API const char* kilnOcrRunFilesMessage(const kilnOcrPipeline* pipeline, size_t index);

/* Lines in reading order (top to bottom, then left to right). */
KILN_API size_t kilnOcrResultNumLines(const kilnOcrResult* result);
KILN_API const char* kilnOcrResultLineText(const kilnOcrResult* result, size_t index); /* UTF-8 */
KILN_API float kilnOcrResultLineConfidence(const kilnOcrResult* result, size_t index);
/* The line's box: 4 corners (x, y) clockwise from the top-left, in original-image pixels. */
KILN_API kilnError kilnOcrResultLineBox(const kilnOcrResult* result, size_t index, float box[8]);
/* Milliseconds this image took (its own stages, from reading it to its last line). */
KILN_API double kilnOcrResultTimeMs(const kilnOcrResult* result);
/* What the pipeline has to say about the image ("" if nothing): it was decoded downscaled
 * (boxes are still in original pixels), or the decoder warned about corrupt data. */
KILN_API const char* kilnOcrResultNote(const kilnOcrResult* result);
KILN_API void kilnOcrDestroyResult(kilnOcrResult* result);

#ifdef __cplusplus
}
#endif

#endif /* KILN_OCR_H_ */
