// kiln.OcrPipeline and kiln.ocr: `kiln ocr` from Python, over include/kiln/ocr.h (the
// PP-OCR pipeline: detection, angle classification, recognition). A result is the dict of
// one image of `kiln ocr --json`: {"lines": [{"text", "confidence", "box"}], "ms", "note"}.
#include <memory>
#include <string>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "kiln/ocr.h"
#include "python/src/binders.h"
#include "python/src/errors.h"
#include "python/src/runtime_init.h"

namespace kiln::python {
namespace {

struct ResultDeleter {
  void operator()(kilnOcrResult* r) const { kilnOcrDestroyResult(r); }
};
using ResultPtr = std::unique_ptr<kilnOcrResult, ResultDeleter>;

py::dict result_dict(const kilnOcrResult* r) {
  py::list lines;
  for (size_t i = 0; i < kilnOcrResultNumLines(r); ++i) {
    float box[8];
    py::list corners;
    if (kilnOcrResultLineBox(r, i, box) == KILN_SUCCESS)
      for (int k = 0; k < 4; ++k) corners.append(py::make_tuple(box[2 * k], box[2 * k + 1]));
    py::dict line;
    line["text"] = py::str(kilnOcrResultLineText(r, i));
    line["confidence"] = kilnOcrResultLineConfidence(r, i);
    line["box"] = corners;
    lines.append(line);
  }
  py::dict out;
  out["lines"] = lines;
  out["ms"] = kilnOcrResultTimeMs(r);
  out["note"] = py::str(kilnOcrResultNote(r));
  return out;
}

class OcrPipeline {
 public:
  OcrPipeline(const std::string& model_dir, const std::string& precision, bool angle_classifier, bool merge_lines,
              int rec_batch, const std::optional<std::string>& cache_dir) {
    ensure_runtime(0);
    kilnOcrOptions o;
    kilnOcrOptionsInit(&o);
    o.modelDir = model_dir.c_str();
    if (cache_dir) o.cacheDir = cache_dir->c_str();
    if (precision == "mixed")
      o.precision = KILN_OCR_PRECISION_MIXED;
    else if (precision != "fp32")
      throw_error(KILN_ERROR_INVALID_PARAM, "precision '" + precision + "': expected 'fp32' or 'mixed'");
    o.angleClassifier = angle_classifier ? 1 : 0;
    o.mergeLines = merge_lines ? 1 : 0;
    o.recBatch = rec_batch;
    kilnError e;
    {
      py::gil_scoped_release unlocked;  // compiles the models on first use (seconds)
      e = kilnOcrCreate(&o, &pipeline_);
    }
    if (e != KILN_SUCCESS) throw_api_error(e, "kilnOcrCreate");
  }
  ~OcrPipeline() { close(); }

  void close() {
    if (pipeline_) kilnOcrDestroy(pipeline_);
    pipeline_ = nullptr;
  }

  // A path (str), encoded bytes (PNG/JPEG...), or pixels: uint8 [H, W, 3] (BGR unless
  // pixel_format="rgb") or [H, W] (grey), rows contiguous.
  py::dict run(const py::object& image, const std::string& pixel_format) {
    if (!pipeline_) throw_error(KILN_ERROR_INVALID_PARAM, "the OCR pipeline is closed");
    kilnOcrResult* raw = nullptr;
    kilnError e = KILN_SUCCESS;
    const char* call = "kilnOcrRunFile";
    if (py::isinstance<py::str>(image)) {
      const std::string path = py::cast<std::string>(image);
      py::gil_scoped_release unlocked;
      e = kilnOcrRunFile(pipeline_, path.c_str(), &raw);
    } else if (py::isinstance<py::bytes>(image)) {
      call = "kilnOcrRunEncoded";
      const std::string bytes = py::cast<std::string>(image);
      py::gil_scoped_release unlocked;
      e = kilnOcrRunEncoded(pipeline_, bytes.data(), bytes.size(), &raw);
    } else if (py::isinstance<py::array>(image)) {
      call = "kilnOcrRunPixels";
      auto a = py::cast<py::array>(image);
      if (a.dtype().kind() != 'u' || a.itemsize() != 1)
        throw_error(KILN_ERROR_INVALID_PARAM, "pixels must be uint8, got " + py::str(a.dtype()).cast<std::string>());
      const bool grey = a.ndim() == 2;
      if (!grey && !(a.ndim() == 3 && a.shape(2) == 3))
        throw_error(KILN_ERROR_INVALID_PARAM, "pixels must be [H, W, 3] (BGR or RGB) or [H, W] (grey)");
      const ssize_t channels = grey ? 1 : 3;
      if (a.strides(1) != channels || (!grey && a.strides(2) != 1))
        throw_error(KILN_ERROR_INVALID_PARAM, "pixels: each row's pixels must be contiguous (np.ascontiguousarray)");
      kilnOcrPixelFormat format = grey ? KILN_OCR_PIXEL_GRAY : KILN_OCR_PIXEL_BGR;
      if (!grey && pixel_format == "rgb")
        format = KILN_OCR_PIXEL_RGB;
      else if (!grey && pixel_format != "bgr")
        throw_error(KILN_ERROR_INVALID_PARAM, "pixel_format '" + pixel_format + "': expected 'bgr' or 'rgb'");
      const auto* pixels = static_cast<const uint8_t*>(a.data());
      const auto width = static_cast<int32_t>(a.shape(1)), height = static_cast<int32_t>(a.shape(0));
      const auto stride = static_cast<size_t>(a.strides(0));
      py::gil_scoped_release unlocked;
      e = kilnOcrRunPixels(pipeline_, pixels, width, height, stride, format, &raw);
    } else {
      throw_error(KILN_ERROR_INVALID_PARAM, "image: a path, encoded bytes or a uint8 NumPy array");
    }
    ResultPtr result(raw);
    if (e != KILN_SUCCESS) throw_api_error(e, call);
    return result_dict(result.get());
  }

 private:
  kilnOcrPipeline* pipeline_ = nullptr;
};

}  // namespace

void bind_ocr(py::module_& m) {
  py::class_<OcrPipeline>(m, "OcrPipeline",
                          "Reads the text in images with the PP-OCR models in model_dir (det, cls, rec), as "
                          "`kiln ocr` does (docs/ocr.md). The models are compiled once and cached.")
      .def(py::init<const std::string&, const std::string&, bool, bool, int, const std::optional<std::string>&>(),
           py::arg("model_dir"), py::arg("precision") = "fp32", py::arg("angle_classifier") = true,
           py::arg("merge_lines") = true, py::arg("rec_batch") = 1, py::arg("cache_dir") = py::none())
      .def("run", &OcrPipeline::run, py::arg("image"), py::arg("pixel_format") = "bgr",
           "run(image, pixel_format='bgr') -> {'lines': [{'text', 'confidence', 'box'}], 'ms', 'note'}: image is a "
           "path, encoded bytes or a uint8 [H, W, 3] / [H, W] array; lines in reading order, boxes as 4 (x, y) "
           "corners clockwise from the top-left in image pixels.")
      .def("close", &OcrPipeline::close, "Frees the pipeline (also when the object is collected).")
      .def("__enter__", [](OcrPipeline& p) -> OcrPipeline& { return p; }, py::return_value_policy::reference)
      .def("__exit__", [](OcrPipeline& p, const py::args&) {
        p.close();
        return false;
      });
}

}  // namespace kiln::python
