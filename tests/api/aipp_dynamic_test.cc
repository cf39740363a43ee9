// Dynamic AIPP through the C API: parameter sets (kilnmdlCreateAIPP and the setters, each
// misuse with its message), a model compiled with `aipp_mode: dynamic` run with different
// crops, resizes, paddings and normalisations per image and compared with a scalar
// double-precision reference of the documented formulas (ops/aipp_params.h), every error of
// kilnmdlSetInputAIPP / kilnmdlSetAIPPByInputIndex, kilnmdlGetAippType and
// kilnmdlGetFirstAippInfo, and pitched copies (kilnrtMemcpy2d, kilnrtMemcpy2dAsync).
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kiln/kiln.h"
#include "kiln/kiln.hpp"
#include "model/kiln_model.h"
#include "ops/aipp_params.h"
#include "../process_temp_dir.h"

namespace {

std::string last_error() { return kilnGetRecentErrMsg(); }

::testing::AssertionResult error_mentions(const std::string& text) {
  const std::string m = last_error();
  if (m.find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the message \"" << m << "\" does not mention \"" << text << "\"";
}

// ---- The model: y = x * 1 with x float [2, 3, 6, 8] ------------------------------------------

constexpr int kBatch = 2, kC = 3, kH = 6, kW = 8;
constexpr int kSrcW = 16, kSrcH = 12;            // the NV12 frames fed at run time
constexpr int64_t kMaxSrcImageSize = 400;       // bytes per image the model takes at most
constexpr int64_t kFrameBytes = kSrcW * kSrcH * 3 / 2;  // 288

const char* kModelText = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  scale (float[2, 3, 6, 8] x) => (float[2, 3, 6, 8] y) {
    one = Constant <value = float {1.0}> ()
    y = Mul(x, one)
  }
)";

std::string temp_dir() {
  static const kiln::test_support::ProcessTempDir dir("kiln_aipp_dynamic_test");
  return dir.path();
}

// The model compiled with `insertions` (none: the plain model), written as .kiln.
std::string compile_model(const std::string& name, const std::vector<kiln::ops::AippInsertion>& insertions) {
  onnx::ModelProto m;
  auto parsed = onnx::OnnxParser::Parse(m, kModelText);
  EXPECT_TRUE(parsed.IsOK()) << parsed.ErrorMessage();
  const std::string bytes = m.SerializeAsString();
  kiln::compiler::CompileOptions options;
  options.aipp = insertions;
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), name, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  const std::string path = temp_dir() + "/" + name + ".kiln";
  kiln::Status st = kiln::compiler::write_compiled_model(*compiled, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

const std::string& dynamic_model_path() {
  static const std::string path = [] {
    kiln::ops::AippInsertion ins;
    ins.input_index = 0;
    ins.dynamic = true;
    ins.max_src_image_size = kMaxSrcImageSize;
    ins.where = "aipp_dynamic_test.cfg:1";
    return compile_model("scale_dynamic_aipp", {ins});
  }();
  return path;
}

const std::string& plain_model_path() {
  static const std::string path = compile_model("scale_plain", {});
  return path;
}

// A static AIPP: NV12 16x12, crop 8x6 at (4, 2), BT.601 full range, mean/min/var_reci.
kiln::ops::AippParams static_params() {
  kiln::ops::AippParams p;
  p.format = kiln::ops::AippFormat::kYuv420sp;
  p.src_w = kSrcW;
  p.src_h = kSrcH;
  kiln::ops::apply_csc_preset(p, kiln::ops::CscPreset::kBt601Full, false);
  kiln::ops::AippBatchParams& b = p.batch[0];
  b.crop = true;
  b.crop_x = 4, b.crop_y = 2, b.crop_w = kW, b.crop_h = kH;
  b.mean[0] = 123.5f, b.mean[1] = 116, b.mean[2] = 103;
  b.min[0] = 0.25f;
  b.var_reci[0] = 0.017f, b.var_reci[1] = 0.0175f, b.var_reci[2] = 0.0174f;
  return p;
}

const std::string& static_model_path() {
  static const std::string path = [] {
    kiln::ops::AippInsertion ins;
    ins.input_index = 0;
    ins.params = static_params();
    ins.where = "aipp_static_test.cfg:1";
    return compile_model("scale_static_aipp", {ins});
  }();
  return path;
}

// ---- The reference: the documented steps in double precision --------------------------------

// BT.601 full range YUV -> RGB in ATC's 1/256 units, as a user would write it.
constexpr int16_t kCsc[9] = {256, 0, 359, 256, -88, -183, 256, 454, 0};
constexpr uint8_t kCscInputBias[3] = {0, 128, 128};
constexpr uint8_t kCscOutputBias[3] = {0, 0, 0};

struct ImageParams {
  bool crop = false;
  int x = 0, y = 0, w = 0, h = 0;
  bool resize = false;
  int rw = 0, rh = 0;
  bool pad = false;
  int top = 0, bottom = 0, left = 0, right = 0;
  double mean[4] = {0, 0, 0, 0}, min[4] = {0, 0, 0, 0}, var_reci[4] = {1, 1, 1, 1};
};

// Step 2: the Y, U, V of NV12 pixel (x, y) of a w x h frame (chroma of its 2x2 block).
void reference_pixel(const uint8_t* frame, int w, int h, int x, int y, double yuv[3]) {
  const uint8_t* uv = frame + w * h + (y / 2) * w + (x / 2) * 2;
  yuv[0] = frame[y * w + x], yuv[1] = uv[0], yuv[2] = uv[1];
}

// Step 4: colour-space conversion of the resampled Y, U, V.
void reference_csc(const double yuv[3], double rgb[3]) {
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int c = 0; c < 3; ++c) s += kCsc[r * 3 + c] * (yuv[c] - kCscInputBias[c]);
    rgb[r] = std::clamp(s / 256.0 + kCscOutputBias[r], 0.0, 255.0);
  }
}

// Source coordinate of output index o resized from `in` to `out`: half-pixel centres.
void tap(int o, int in, int out, int* i0, int* i1, double* frac) {
  double s = (o + 0.5) * in / out - 0.5;
  s = std::clamp(s, 0.0, double(in - 1));
  *i0 = static_cast<int>(std::floor(s));
  *i1 = std::min(*i0 + 1, in - 1);
  *frac = s - *i0;
}

// One image's [3, kH, kW] output (NCHW).
std::vector<double> reference_image(const uint8_t* frame, const ImageParams& p) {
  const int cx = p.crop ? p.x : 0, cy = p.crop ? p.y : 0;
  const int cw = p.crop ? p.w : kSrcW, ch = p.crop ? p.h : kSrcH;
  const int rw = p.resize ? p.rw : cw, rh = p.resize ? p.rh : ch;
  const int left = p.pad ? p.left : 0, top = p.pad ? p.top : 0;
  std::vector<double> out(kC * kH * kW, 0.0);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      const int ry = y - top, rx = x - left;
      if (ry < 0 || ry >= rh || rx < 0 || rx >= rw) continue;  // padding: 0
      double v[3];
      int x0, x1, y0, y1;
      double fx, fy;
      tap(rx, cw, rw, &x0, &x1, &fx);
      tap(ry, ch, rh, &y0, &y1, &fy);
      double p00[3], p01[3], p10[3], p11[3];
      reference_pixel(frame, kSrcW, kSrcH, cx + x0, cy + y0, p00);
      reference_pixel(frame, kSrcW, kSrcH, cx + x1, cy + y0, p01);
      reference_pixel(frame, kSrcW, kSrcH, cx + x0, cy + y1, p10);
      reference_pixel(frame, kSrcW, kSrcH, cx + x1, cy + y1, p11);
      for (int c = 0; c < 3; ++c)
        v[c] = (1 - fy) * ((1 - fx) * p00[c] + fx * p01[c]) + fy * ((1 - fx) * p10[c] + fx * p11[c]);
      double rgb[3];
      reference_csc(v, rgb);
      for (int c = 0; c < 3; ++c)
        out[(c * kH + y) * kW + x] = (rgb[c] - p.mean[c] - p.min[c]) * p.var_reci[c];
    }
  return out;
}

// ---- Fixture -----------------------------------------------------------------------------------

class AippDynamicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  }
  void TearDown() override {
    for (void* p : device_) kilnrtFree(p);
    if (inputs_) kilnmdlDestroyDataset(inputs_);
    if (outputs_) kilnmdlDestroyDataset(outputs_);
    for (kilnDataBuffer* b : buffers_) kilnDestroyDataBuffer(b);
    if (aipp_) kilnmdlDestroyAIPP(aipp_);
    EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  }

  void* device_alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(kilnrtMalloc(&p, bytes, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS) << last_error();
    device_.push_back(p);
    return p;
  }
  kilnDataBuffer* buffer(void* data, size_t size) {
    kilnDataBuffer* b = kilnCreateDataBuffer(data, size);
    buffers_.push_back(b);
    return b;
  }
  uint32_t load(const std::string& path) {
    uint32_t id = 0;
    EXPECT_EQ(kilnmdlLoadFromFile(path.c_str(), &id), KILN_SUCCESS) << last_error();
    return id;
  }

  // Loads the dynamic model and binds device buffers: images, parameters, output.
  void load_dynamic() {
    ASSERT_FALSE(dynamic_model_path().empty());
    model_ = load(dynamic_model_path());
    kilnmdlDesc* desc = kilnmdlCreateDesc();
    ASSERT_EQ(kilnmdlGetDesc(desc, model_), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnmdlGetNumInputs(desc), 2u);
    EXPECT_STREQ(kilnmdlGetInputNameByIndex(desc, 0), "x");
    EXPECT_EQ(kilnmdlGetInputDataType(desc, 0), KILN_UINT8);
    EXPECT_EQ(kilnmdlGetInputSizeByIndex(desc, 0), size_t{kBatch * kMaxSrcImageSize});
    EXPECT_EQ(kilnmdlGetInputDataType(desc, 1), KILN_UINT8);
    params_bytes_ = kilnmdlGetInputSizeByIndex(desc, 1);
    EXPECT_EQ(params_bytes_, kiln::ops::aipp_serialized_bytes(kBatch));
    output_bytes_ = kilnmdlGetOutputSizeByIndex(desc, 0);
    EXPECT_EQ(output_bytes_, size_t{kBatch * kC * kH * kW * sizeof(float)});
    kilnmdlDestroyDesc(desc);
    images_dev_ = device_alloc(kBatch * kMaxSrcImageSize);
    params_dev_ = device_alloc(params_bytes_);
    output_dev_ = device_alloc(output_bytes_);
    inputs_ = kilnmdlCreateDataset();
    outputs_ = kilnmdlCreateDataset();
    ASSERT_EQ(kilnmdlAddDatasetBuffer(inputs_, buffer(images_dev_, kBatch * kMaxSrcImageSize)), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(inputs_, buffer(params_dev_, params_bytes_)), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(outputs_, buffer(output_dev_, output_bytes_)), KILN_SUCCESS);
    // Zeroed parameters: a run before kilnmdlSetInputAIPP finds no valid header.
    ASSERT_EQ(kilnrtMemset(params_dev_, params_bytes_, 0, params_bytes_), KILN_SUCCESS) << last_error();
  }

  // Random NV12 frames, each in a host buffer with a row pitch wider than the frame (as a
  // decoder hands them out), copied to the image input with kilnrtMemcpy2d.
  void upload_frames(unsigned seed) {
    constexpr size_t kPitch = 24, kRows = kSrcH * 3 / 2;
    std::mt19937 rng(seed);
    frames_.assign(kBatch, std::vector<uint8_t>(kFrameBytes));
    for (int n = 0; n < kBatch; ++n) {
      std::vector<uint8_t> pitched(kPitch * kRows, 0xEE);
      for (size_t r = 0; r < kRows; ++r)
        for (int c = 0; c < kSrcW; ++c) {
          const uint8_t v = static_cast<uint8_t>(rng());
          pitched[r * kPitch + c] = v;
          frames_[n][r * kSrcW + c] = v;
        }
      void* dst = static_cast<uint8_t*>(images_dev_) + n * kMaxSrcImageSize;
      ASSERT_EQ(kilnrtMemcpy2d(dst, kSrcW, pitched.data(), kPitch, kSrcW, kRows, KILN_MEMCPY_HOST_TO_DEVICE),
                KILN_SUCCESS)
          << last_error();
    }
  }

  // A set for both images: NV12 16x12 with BT.601 CSC and `image[n]` per image.
  kilnmdlAIPP* make_set(const ImageParams image[kBatch]) {
    kilnmdlAIPP* set = kilnmdlCreateAIPP(kBatch);
    EXPECT_NE(set, nullptr) << last_error();
    EXPECT_EQ(kilnmdlSetAIPPInputFormat(set, KILN_YUV420SP_U8), KILN_SUCCESS) << last_error();
    EXPECT_EQ(kilnmdlSetAIPPSrcImageSize(set, kSrcW, kSrcH), KILN_SUCCESS) << last_error();
    EXPECT_EQ(kilnmdlSetAIPPCscParams(set, 1, kCsc[0], kCsc[1], kCsc[2], kCsc[3], kCsc[4], kCsc[5], kCsc[6], kCsc[7],
                                      kCsc[8], kCscOutputBias[0], kCscOutputBias[1], kCscOutputBias[2],
                                      kCscInputBias[0], kCscInputBias[1], kCscInputBias[2]),
              KILN_SUCCESS)
        << last_error();
    for (uint64_t n = 0; n < kBatch; ++n) {
      const ImageParams& p = image[n];
      const int cw = p.crop ? p.w : kSrcW, ch = p.crop ? p.h : kSrcH;
      EXPECT_EQ(kilnmdlSetAIPPCropParams(set, p.crop, p.x, p.y, p.w, p.h, n), KILN_SUCCESS) << last_error();
      EXPECT_EQ(kilnmdlSetAIPPScfParams(set, p.resize, cw, ch, p.rw, p.rh, n), KILN_SUCCESS) << last_error();
      EXPECT_EQ(kilnmdlSetAIPPPaddingParams(set, p.pad, p.top, p.bottom, p.left, p.right, n), KILN_SUCCESS)
          << last_error();
      EXPECT_EQ(kilnmdlSetAIPPDtcPixelMean(set, static_cast<int16_t>(p.mean[0]), static_cast<int16_t>(p.mean[1]),
                                           static_cast<int16_t>(p.mean[2]), static_cast<int16_t>(p.mean[3]), n),
                KILN_SUCCESS)
          << last_error();
      EXPECT_EQ(kilnmdlSetAIPPDtcPixelMin(set, float(p.min[0]), float(p.min[1]), float(p.min[2]), float(p.min[3]), n),
                KILN_SUCCESS)
          << last_error();
      EXPECT_EQ(kilnmdlSetAIPPPixelVarReci(set, float(p.var_reci[0]), float(p.var_reci[1]), float(p.var_reci[2]),
                                           float(p.var_reci[3]), n),
                KILN_SUCCESS)
          << last_error();
    }
    return set;
  }

  // Runs the model and compares each image with the reference.
  void run_and_compare(const ImageParams image[kBatch]) {
    ASSERT_EQ(kilnmdlExecute(model_, inputs_, outputs_), KILN_SUCCESS) << last_error();
    std::vector<float> got(output_bytes_ / sizeof(float));
    ASSERT_EQ(kilnrtMemcpy(got.data(), output_bytes_, output_dev_, output_bytes_, KILN_MEMCPY_DEVICE_TO_HOST),
              KILN_SUCCESS)
        << last_error();
    for (int n = 0; n < kBatch; ++n) {
      const std::vector<double> want = reference_image(frames_[n].data(), image[n]);
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double g = got[n * want.size() + i];
        if (std::fabs(g - want[i]) > 1e-5 * std::max(1.0, std::fabs(want[i])) && ++bad <= 5)
          ADD_FAILURE() << "image " << n << " element " << i << " (c " << i / (kH * kW) << ", y "
                        << i / kW % kH << ", x " << i % kW << "): got " << g << ", want " << want[i];
      }
      EXPECT_EQ(bad, 0) << "image " << n;
    }
  }

  // Two images with different crops, a resize, a padding and their own normalisation.
  static void two_images(ImageParams image[kBatch]) {
    image[0] = ImageParams{};
    image[0].crop = true;
    image[0].x = 2, image[0].y = 4, image[0].w = kW, image[0].h = kH;
    image[0].mean[0] = 124, image[0].mean[1] = 116, image[0].mean[2] = 104;
    image[0].min[0] = 0.5, image[0].min[1] = 0.25, image[0].min[2] = 0.125;
    image[0].var_reci[0] = 1 / 58.395, image[0].var_reci[1] = 1 / 57.12, image[0].var_reci[2] = 1 / 57.375;
    image[1] = ImageParams{};
    image[1].crop = true;
    image[1].x = 5, image[1].y = 1, image[1].w = 10, image[1].h = 9;
    image[1].resize = true;
    image[1].rw = kW - 2, image[1].rh = kH - 1;
    image[1].pad = true;
    image[1].top = 1, image[1].bottom = 0, image[1].left = 1, image[1].right = 1;
    image[1].var_reci[0] = image[1].var_reci[1] = image[1].var_reci[2] = 1 / 255.0;
    for (ImageParams* p : {&image[0], &image[1]})
      for (int c = 0; c < 3; ++c) p->var_reci[c] = double(float(p->var_reci[c]));  // as the API stores them
  }

  uint32_t model_ = 0;
  size_t params_bytes_ = 0, output_bytes_ = 0;
  void* images_dev_ = nullptr;
  void* params_dev_ = nullptr;
  void* output_dev_ = nullptr;
  kilnmdlDataset* inputs_ = nullptr;
  kilnmdlDataset* outputs_ = nullptr;
  kilnmdlAIPP* aipp_ = nullptr;
  std::vector<kilnDataBuffer*> buffers_;
  std::vector<void*> device_;
  std::vector<std::vector<uint8_t>> frames_;
};

// ---- Parameter sets alone ------------------------------------------------------------------

TEST_F(AippDynamicTest, CreateRefusesAZeroOrHugeBatch) {
  EXPECT_EQ(kilnmdlCreateAIPP(0), nullptr);
  EXPECT_TRUE(error_mentions("batchSize 0 must be within 1..65536"));
  EXPECT_EQ(kilnmdlCreateAIPP(uint64_t{1} << 40), nullptr);
  EXPECT_TRUE(error_mentions("must be within"));
}

TEST_F(AippDynamicTest, DestroyTwiceIsAnError) {
  kilnmdlAIPP* set = kilnmdlCreateAIPP(1);
  ASSERT_NE(set, nullptr) << last_error();
  EXPECT_EQ(kilnmdlDestroyAIPP(set), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlDestroyAIPP(set), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("is not a live kilnmdlAIPP"));
  EXPECT_EQ(kilnmdlDestroyAIPP(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlSetAIPPSrcImageSize(set, 4, 4), KILN_ERROR_INVALID_PARAM);  // dead handle
  EXPECT_TRUE(error_mentions("kilnmdlSetAIPPSrcImageSize"));
}

TEST_F(AippDynamicTest, SettersCheckWhatTheyCanAlone) {
  aipp_ = kilnmdlCreateAIPP(2);
  ASSERT_NE(aipp_, nullptr) << last_error();
  EXPECT_EQ(kilnmdlSetAIPPCropParams(aipp_, 1, 0, 0, 4, 4, 2), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("batchIndex 2 is out of range: the set was created for batchSize 2"));
  EXPECT_EQ(kilnmdlSetAIPPScfParams(aipp_, 1, 4, 4, 2, 2, 7), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("batchIndex 7"));
  EXPECT_EQ(kilnmdlSetAIPPPaddingParams(aipp_, 0, 0, 0, 0, 0, 2), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlSetAIPPDtcPixelMean(aipp_, 0, 0, 0, 0, 2), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlSetAIPPDtcPixelMin(aipp_, 0, 0, 0, 0, 2), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlSetAIPPPixelVarReci(aipp_, 1, 1, 1, 1, 2), KILN_ERROR_INVALID_PARAM);

  EXPECT_EQ(kilnmdlSetAIPPCropParams(aipp_, 1, -1, 0, 4, 4, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("cropStartPosW/H -1,0 must not be negative"));
  EXPECT_EQ(kilnmdlSetAIPPCropParams(aipp_, 1, 0, 0, 0, 4, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("cropSizeW/H 0x4 must be positive"));
  EXPECT_EQ(kilnmdlSetAIPPCropParams(aipp_, 2, 0, 0, 4, 4, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("cropSwitch is 2; it must be 0 (off) or 1 (on)"));
  EXPECT_EQ(kilnmdlSetAIPPScfParams(aipp_, 1, 4, 4, 0, 2, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("must be positive"));
  EXPECT_EQ(kilnmdlSetAIPPPaddingParams(aipp_, 1, 0, -3, 0, 0, 1), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("bottom -3"));
  EXPECT_EQ(kilnmdlSetAIPPSrcImageSize(aipp_, -4, 4), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("srcImageSizeW/H -4x4 must be positive"));
  EXPECT_EQ(kilnmdlSetAIPPDtcPixelMin(aipp_, 0, NAN, 0, 0, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("dtcPixelMin of channel 1 is nan"));
  EXPECT_EQ(kilnmdlSetAIPPPixelVarReci(aipp_, 1, 1, INFINITY, 1, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("dtcPixelVarReci of channel 2"));
  EXPECT_EQ(kilnmdlSetAIPPRbuvSwapSwitch(aipp_, -1), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("rbuvSwapSwitch is -1"));
  EXPECT_EQ(kilnmdlSetAIPPAxSwapSwitch(aipp_, 3), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlSetAIPPCscParams(aipp_, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), KILN_ERROR_INVALID_PARAM);

  // Switched off, the sizes are ignored, as AscendCL does.
  EXPECT_EQ(kilnmdlSetAIPPCropParams(aipp_, 0, -1, -1, 0, 0, 1), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnmdlSetAIPPRbuvSwapSwitch(aipp_, 1), KILN_SUCCESS) << last_error();
}

TEST_F(AippDynamicTest, InputFormatsKeepAscendClNumbersAndRefuseTheOnesKilnDoesNotTake) {
  aipp_ = kilnmdlCreateAIPP(1);
  ASSERT_NE(aipp_, nullptr);
  for (kilnAippInputFormat f : {KILN_YUV420SP_U8, KILN_XRGB8888_U8, KILN_RGB888_U8, KILN_YUV400_U8, KILN_ARGB8888_U8,
                                KILN_YUYV_U8, KILN_YUV422SP_U8, KILN_AYUV444_U8}) {
    EXPECT_EQ(kilnmdlSetAIPPInputFormat(aipp_, f), KILN_SUCCESS) << f << ": " << last_error();
    EXPECT_STRNE(kiln::ops::aipp_format_name(static_cast<kiln::ops::AippFormat>(f)), "UNDEFINED");
  }
  for (kilnAippInputFormat f :
       {KILN_NC1HWC0DI_FP16, KILN_NC1HWC0DI_S8, KILN_RAW10, KILN_RAW12, KILN_RAW16, KILN_RAW24}) {
    EXPECT_EQ(kilnmdlSetAIPPInputFormat(aipp_, f), KILN_ERROR_FEATURE_UNSUPPORTED) << f;
    EXPECT_TRUE(error_mentions("is not one Kiln's AIPP takes"));
  }
  EXPECT_EQ(kilnmdlSetAIPPInputFormat(aipp_, static_cast<kilnAippInputFormat>(42)), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("input format 42 is not a kilnAippInputFormat"));
  EXPECT_EQ(kilnmdlSetAIPPInputFormat(aipp_, KILN_AIPP_RESERVED), KILN_ERROR_INVALID_PARAM);
}

// ---- Pitched copies ------------------------------------------------------------------------

TEST_F(AippDynamicTest, Memcpy2dCopiesRowsBetweenPitches) {
  constexpr size_t kWidth = 5, kHeight = 4, kHostPitch = 9, kDevPitch = 7;
  std::vector<uint8_t> host(kHostPitch * kHeight);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + 1);
  void* dev = device_alloc(kDevPitch * kHeight);
  ASSERT_EQ(kilnrtMemset(dev, kDevPitch * kHeight, 0xAB, kDevPitch * kHeight), KILN_SUCCESS);
  ASSERT_EQ(kilnrtMemcpy2d(dev, kDevPitch, host.data(), kHostPitch, kWidth, kHeight, KILN_MEMCPY_HOST_TO_DEVICE),
            KILN_SUCCESS)
      << last_error();
  std::vector<uint8_t> flat(kDevPitch * kHeight);
  ASSERT_EQ(kilnrtMemcpy(flat.data(), flat.size(), dev, flat.size(), KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
  for (size_t r = 0; r < kHeight; ++r)
    for (size_t c = 0; c < kDevPitch; ++c)
      EXPECT_EQ(flat[r * kDevPitch + c], c < kWidth ? host[r * kHostPitch + c] : 0xAB) << r << "," << c;

  // Back to the host, packed (pitch == width), with the async form on a stream.
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS);
  std::vector<uint8_t> packed(kWidth * kHeight, 0);
  ASSERT_EQ(kilnrtMemcpy2dAsync(packed.data(), kWidth, dev, kDevPitch, kWidth, kHeight, KILN_MEMCPY_DEVICE_TO_HOST,
                                stream),
            KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  for (size_t r = 0; r < kHeight; ++r)
    for (size_t c = 0; c < kWidth; ++c) EXPECT_EQ(packed[r * kWidth + c], host[r * kHostPitch + c]);
  EXPECT_EQ(kilnrtDestroyStream(stream), KILN_SUCCESS);

  // Nothing to copy.
  EXPECT_EQ(kilnrtMemcpy2d(dev, kDevPitch, host.data(), kHostPitch, kWidth, 0, KILN_MEMCPY_HOST_TO_DEVICE),
            KILN_SUCCESS);
}

TEST_F(AippDynamicTest, Memcpy2dChecksPitchesDomainsAndSpans) {
  std::vector<uint8_t> host(64);
  void* dev = device_alloc(32);
  EXPECT_EQ(kilnrtMemcpy2d(dev, 4, host.data(), 8, 6, 2, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("kilnrtMemcpy2d: width 6 exceeds dpitch 4"));
  EXPECT_EQ(kilnrtMemcpy2d(dev, 8, host.data(), 4, 6, 2, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("width 6 exceeds spitch 4"));
  // A device pointer where the kind wants host memory, and the other way round.
  EXPECT_EQ(kilnrtMemcpy2d(dev, 8, host.data(), 8, 8, 2, KILN_MEMCPY_HOST_TO_HOST), KILN_ERROR_INVALID_MEMORY);
  EXPECT_TRUE(error_mentions("needs host memory"));
  EXPECT_EQ(kilnrtMemcpy2d(host.data(), 8, dev, 8, 8, 2, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_TRUE(error_mentions("needs a live device allocation"));
  // 5 rows of pitch 8 span 36 bytes: past the 32-byte allocation.
  EXPECT_EQ(kilnrtMemcpy2d(dev, 8, host.data(), 8, 4, 5, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_TRUE(error_mentions("runs past the end"));
  EXPECT_EQ(kilnrtMemcpy2d(host.data() + 4, 8, host.data(), 8, 8, 4, KILN_MEMCPY_HOST_TO_HOST),
            KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("overlap"));
  EXPECT_EQ(kilnrtMemcpy2d(nullptr, 8, host.data(), 8, 8, 1, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMemcpy2d(dev, 8, host.data(), 8, 8, 1, static_cast<kilnrtMemcpyKind>(9)),
            KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMemcpy2d(dev, SIZE_MAX / 2, host.data(), 8, 8, 4, KILN_MEMCPY_HOST_TO_DEVICE),
            KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("overflow"));
  EXPECT_EQ(kilnrtMemcpy2dAsync(dev, 4, host.data(), 8, 6, 2, KILN_MEMCPY_HOST_TO_DEVICE, nullptr),
            KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("kilnrtMemcpy2dAsync: width 6 exceeds dpitch 4"));
}

// ---- A model with dynamic AIPP -------------------------------------------------------------

TEST_F(AippDynamicTest, ModelInputsReportTheirAippType) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  kilnmdlInputAippType type = KILN_DATA_WITHOUT_AIPP;
  size_t attached = 0;
  ASSERT_EQ(kilnmdlGetAippType(model_, 0, &type, &attached), KILN_SUCCESS) << last_error();
  EXPECT_EQ(type, KILN_DATA_WITH_DYNAMIC_AIPP);
  EXPECT_EQ(attached, 1u);
  ASSERT_EQ(kilnmdlGetAippType(model_, 1, &type, &attached), KILN_SUCCESS) << last_error();
  EXPECT_EQ(type, KILN_DYNAMIC_AIPP_NODE);
  EXPECT_EQ(attached, size_t{KILN_INVALID_NODE_INDEX});
  EXPECT_EQ(kilnmdlGetAippType(model_, 2, &type, &attached), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("input index 2 is out of range"));
  EXPECT_EQ(kilnmdlGetAippType(model_ + 1000, 0, &type, &attached), KILN_ERROR_INVALID_MODEL_ID);

  kilnAippInfo info{};
  info.size = sizeof info;
  EXPECT_EQ(kilnmdlGetFirstAippInfo(model_, 0, &info), KILN_ERROR_NOT_STATIC_AIPP);
  EXPECT_TRUE(error_mentions("input 0 ('x') has dynamic AIPP"));
  EXPECT_EQ(kilnmdlGetFirstAippInfo(model_, 1, &info), KILN_ERROR_NOT_STATIC_AIPP);
  EXPECT_TRUE(error_mentions("is the parameter input of a dynamic AIPP"));

  const uint32_t plain = load(plain_model_path());
  ASSERT_EQ(kilnmdlGetAippType(plain, 0, &type, &attached), KILN_SUCCESS) << last_error();
  EXPECT_EQ(type, KILN_DATA_WITHOUT_AIPP);
  EXPECT_EQ(attached, size_t{KILN_INVALID_NODE_INDEX});
  EXPECT_EQ(kilnmdlGetFirstAippInfo(plain, 0, &info), KILN_ERROR_NOT_STATIC_AIPP);
  EXPECT_TRUE(error_mentions("has no AIPP"));
  EXPECT_EQ(kilnmdlUnload(plain), KILN_SUCCESS);
}

TEST_F(AippDynamicTest, EachImageGetsItsOwnCropResizePaddingAndNormalisation) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  ASSERT_NO_FATAL_FAILURE(upload_frames(7));
  ImageParams image[kBatch];
  two_images(image);
  aipp_ = make_set(image);
  ASSERT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 1, aipp_), KILN_SUCCESS) << last_error();
  ASSERT_NO_FATAL_FAILURE(run_and_compare(image));

  // New parameters for the next run, written by the image input's index: swap the images'
  // settings and move the first crop.
  std::swap(image[0], image[1]);
  image[1].x = 0, image[1].y = 0;
  kilnmdlDestroyAIPP(aipp_);
  aipp_ = make_set(image);
  ASSERT_EQ(kilnmdlSetAIPPByInputIndex(model_, inputs_, 0, aipp_), KILN_SUCCESS) << last_error();
  ASSERT_NO_FATAL_FAILURE(upload_frames(8));
  ASSERT_NO_FATAL_FAILURE(run_and_compare(image));
}

TEST_F(AippDynamicTest, ASetOfOneRecordAppliesToEveryImage) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  ASSERT_NO_FATAL_FAILURE(upload_frames(9));
  ImageParams image[kBatch];
  image[0].resize = true;  // the whole 16x12 frame down to 8x6
  image[0].rw = kW, image[0].rh = kH;
  image[0].mean[0] = 10, image[0].mean[1] = 20, image[0].mean[2] = 30;
  image[1] = image[0];
  // Through the C++ wrapper this time.
  kiln::Aipp set(1);
  const int16_t mean[4] = {10, 20, 30, 0};
  set.input_format(KILN_YUV420SP_U8)
      .src_image_size(kSrcW, kSrcH)
      .csc(kCsc, kCscOutputBias, kCscInputBias)
      .resize(kSrcW, kSrcH, kW, kH, 0)
      .mean(mean, 0);
  ASSERT_EQ(kilnmdlSetAIPPByInputIndex(model_, inputs_, 0, set.get()), KILN_SUCCESS) << last_error();
  ASSERT_NO_FATAL_FAILURE(run_and_compare(image));
}

TEST_F(AippDynamicTest, RunningWithoutParametersSaysSo) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  ASSERT_NO_FATAL_FAILURE(upload_frames(1));
  EXPECT_NE(kilnmdlExecute(model_, inputs_, outputs_), KILN_SUCCESS);
  EXPECT_TRUE(error_mentions("bad magic"));
  EXPECT_TRUE(error_mentions("kilnmdlSetInputAIPP"));
}

TEST_F(AippDynamicTest, SetInputAippNamesTheWrongIndex) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  ImageParams image[kBatch];
  two_images(image);
  aipp_ = make_set(image);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 0, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("input 0 ('x') is the image of a dynamic AIPP; its parameter input is 1"));
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 2, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("input index 2 is out of range (model"));
  EXPECT_EQ(kilnmdlSetAIPPByInputIndex(model_, inputs_, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("is not an image input with dynamic AIPP (model"));
  EXPECT_EQ(kilnmdlSetInputAIPP(model_ + 1000, inputs_, 1, aipp_), KILN_ERROR_INVALID_MODEL_ID);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, nullptr, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 1, nullptr), KILN_ERROR_INVALID_PARAM);

  const uint32_t plain = load(plain_model_path());
  EXPECT_EQ(kilnmdlSetInputAIPP(plain, inputs_, 0, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("has no dynamic AIPP input (compile it with --insert-op-conf"));
  EXPECT_EQ(kilnmdlSetAIPPByInputIndex(plain, inputs_, 0, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("has no dynamic AIPP input"));
  EXPECT_EQ(kilnmdlUnload(plain), KILN_SUCCESS);
}

TEST_F(AippDynamicTest, SetInputAippChecksTheSetAgainstTheModel) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  ImageParams image[kBatch];
  two_images(image);
  auto expect_refused = [&](const char* text) {
    EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 1, aipp_), KILN_ERROR_INVALID_PARAM) << text;
    EXPECT_TRUE(error_mentions(text));
    kilnmdlDestroyAIPP(aipp_);
    aipp_ = make_set(image);
  };
  aipp_ = make_set(image);

  // An output the model input does not have: 7 wide instead of 8.
  ASSERT_EQ(kilnmdlSetAIPPPaddingParams(aipp_, 1, 1, 0, 0, 1, 1), KILN_SUCCESS);
  expect_refused("image 1: the AIPP output is 7x6");
  // A crop outside the frame.
  ASSERT_EQ(kilnmdlSetAIPPCropParams(aipp_, 1, 10, 4, kW, kH, 0), KILN_SUCCESS);
  expect_refused("load_start_pos_w 10 + crop_size_w 8 exceeds src_image_size_w 16");
  // A resize whose input is not the crop.
  ASSERT_EQ(kilnmdlSetAIPPScfParams(aipp_, 1, 12, 9, kW - 2, kH - 1, 1), KILN_SUCCESS);
  expect_refused("image 1: scfInputSize 12x9 must be the crop size 10x9");
  // A frame larger than max_src_image_size (20x20 NV12 is 600 bytes).
  ASSERT_EQ(kilnmdlSetAIPPSrcImageSize(aipp_, 20, 20), KILN_SUCCESS);
  ASSERT_EQ(kilnmdlSetAIPPCropParams(aipp_, 1, 0, 0, kW, kH, 0), KILN_SUCCESS);
  ASSERT_EQ(kilnmdlSetAIPPCropParams(aipp_, 1, 0, 0, 10, 9, 1), KILN_SUCCESS);
  expect_refused("takes 600 bytes, more than the model's max_src_image_size 400");
  // An odd NV12 width.
  ASSERT_EQ(kilnmdlSetAIPPSrcImageSize(aipp_, 15, 12), KILN_SUCCESS);
  expect_refused("needs an even width");
  // A grey format cannot feed 3 channels.
  ASSERT_EQ(kilnmdlSetAIPPInputFormat(aipp_, KILN_YUV400_U8), KILN_SUCCESS);
  ASSERT_EQ(kilnmdlSetAIPPCscParams(aipp_, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), KILN_SUCCESS);
  expect_refused("input_format YUV400_U8 gives 1 channel(s); the model input takes 3");

  // A batch size other than the model's, and incomplete sets.
  kilnmdlDestroyAIPP(aipp_);
  aipp_ = kilnmdlCreateAIPP(3);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("no input format"));
  ASSERT_EQ(kilnmdlSetAIPPInputFormat(aipp_, KILN_RGB888_U8), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("no source image size"));
  ASSERT_EQ(kilnmdlSetAIPPSrcImageSize(aipp_, kW, kH), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, inputs_, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("created for batchSize 3; the input takes 2 images"));
}

TEST_F(AippDynamicTest, SetInputAippChecksTheDatasetBuffer) {
  ASSERT_NO_FATAL_FAILURE(load_dynamic());
  ImageParams image[kBatch];
  two_images(image);
  aipp_ = make_set(image);

  kilnmdlDataset* one = kilnmdlCreateDataset();
  ASSERT_EQ(kilnmdlAddDatasetBuffer(one, buffer(images_dev_, kBatch * kMaxSrcImageSize)), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, one, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("the dataset has 1 buffers, none for the AIPP parameter input 1"));
  // Too small.
  void* small = device_alloc(16);
  ASSERT_EQ(kilnmdlAddDatasetBuffer(one, buffer(small, 16)), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, one, 1, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("has 16 bytes; the parameters take"));
  kilnmdlDestroyDataset(one);

  // Host memory where the model wants device memory.
  std::vector<uint8_t> host(params_bytes_);
  kilnmdlDataset* on_host = kilnmdlCreateDataset();
  ASSERT_EQ(kilnmdlAddDatasetBuffer(on_host, buffer(images_dev_, kBatch * kMaxSrcImageSize)), KILN_SUCCESS);
  ASSERT_EQ(kilnmdlAddDatasetBuffer(on_host, buffer(host.data(), host.size())), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlSetInputAIPP(model_, on_host, 1, aipp_), KILN_ERROR_INVALID_MEMORY);
  EXPECT_TRUE(error_mentions("is not"));
  EXPECT_TRUE(error_mentions("device memory of cpu:0"));
  kilnmdlDestroyDataset(on_host);
}

// ---- Static AIPP: kilnmdlGetFirstAippInfo ---------------------------------------------------

// A model whose static AIPP the compiler folds into the convolution reading its image (kiln
// AippConv, compiler/passes/aipp_conv_fusion.cc: images over 2 MiB): the C API still sees the
// input's AIPP in the AippConv node.
TEST_F(AippDynamicTest, AFoldedAippStillReportsItsStaticConfiguration) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    conv (float[1, 3, 480, 640] x) => (float[1, 16, 480, 640] y) {
      shape = Constant <value = int64[4] {16, 3, 3, 3}> ()
      w = ConstantOfShape <value = float[1] {0.1}> (shape)
      y = Conv <pads = [1, 1, 1, 1]> (x, w)
    }
  )";
  onnx::ModelProto m;
  auto parsed = onnx::OnnxParser::Parse(m, text);
  ASSERT_TRUE(parsed.IsOK()) << parsed.ErrorMessage();
  const std::string bytes = m.SerializeAsString();
  kiln::ops::AippInsertion ins;
  ins.params.format = kiln::ops::AippFormat::kRgb888;
  ins.params.src_w = 640;
  ins.params.src_h = 480;
  ins.where = "aipp_folded_test.cfg:1";
  kiln::compiler::CompileOptions options;
  options.aipp = {ins};
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), "conv_folded_aipp", options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  int folded = 0;
  for (const kiln::compiler::PassRecord& r : compiled->passes)
    if (auto it = r.fusions.find("Aipp+Conv"); it != r.fusions.end()) folded += it->second;
  ASSERT_EQ(folded, 1);
  const std::string path = temp_dir() + "/conv_folded_aipp.kiln";
  ASSERT_TRUE(kiln::compiler::write_compiled_model(*compiled, path).ok());

  const uint32_t id = load(path);
  kilnmdlInputAippType type = KILN_DATA_WITHOUT_AIPP;
  size_t attached = 0;
  ASSERT_EQ(kilnmdlGetAippType(id, 0, &type, &attached), KILN_SUCCESS) << last_error();
  EXPECT_EQ(type, KILN_DATA_WITH_STATIC_AIPP);
  kilnAippInfo info{};
  info.size = sizeof info;
  ASSERT_EQ(kilnmdlGetFirstAippInfo(id, 0, &info), KILN_SUCCESS) << last_error();
  EXPECT_EQ(info.inputFormat, KILN_RGB888_U8);
  EXPECT_EQ(info.srcImageSizeW, 640);
  EXPECT_EQ(info.srcImageSizeH, 480);
  ASSERT_EQ(info.outDims[0].aippOutdims.dimCount, 4u);
  EXPECT_EQ(info.outDims[0].aippOutdims.dims[1], 3);  // the image AIPP makes, not the conv's output
  EXPECT_EQ(info.outDims[0].aippOutdims.dims[2], 480);
  EXPECT_EQ(info.outDims[0].aippOutdims.dims[3], 640);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

TEST_F(AippDynamicTest, FirstAippInfoReadsAStaticConfiguration) {
  ASSERT_FALSE(static_model_path().empty());
  const uint32_t id = load(static_model_path());
  kilnmdlInputAippType type = KILN_DATA_WITHOUT_AIPP;
  size_t attached = 0;
  ASSERT_EQ(kilnmdlGetAippType(id, 0, &type, &attached), KILN_SUCCESS) << last_error();
  EXPECT_EQ(type, KILN_DATA_WITH_STATIC_AIPP);
  EXPECT_EQ(attached, size_t{KILN_INVALID_NODE_INDEX});

  kilnAippInfo info{};
  EXPECT_EQ(kilnmdlGetFirstAippInfo(id, 0, &info), KILN_ERROR_INVALID_PARAM);  // size not set
  EXPECT_TRUE(error_mentions("set it to sizeof(kilnAippInfo)"));
  info.size = sizeof info;
  ASSERT_EQ(kilnmdlGetFirstAippInfo(id, 0, &info), KILN_SUCCESS) << last_error();
  const kiln::ops::AippParams p = static_params();
  EXPECT_EQ(info.size, sizeof info);
  EXPECT_EQ(info.inputFormat, KILN_YUV420SP_U8);
  EXPECT_EQ(info.srcImageSizeW, kSrcW);
  EXPECT_EQ(info.srcImageSizeH, kSrcH);
  EXPECT_EQ(info.cropSwitch, 1);
  EXPECT_EQ(info.loadStartPosW, 4);
  EXPECT_EQ(info.loadStartPosH, 2);
  EXPECT_EQ(info.cropSizeW, kW);
  EXPECT_EQ(info.cropSizeH, kH);
  EXPECT_EQ(info.resizeSwitch, 0);
  EXPECT_EQ(info.paddingSwitch, 0);
  EXPECT_EQ(info.cscSwitch, 1);
  EXPECT_EQ(info.matrixR0C0, static_cast<int32_t>(p.matrix[0][0]));
  EXPECT_EQ(info.matrixR1C1, static_cast<int32_t>(p.matrix[1][1]));
  EXPECT_EQ(info.matrixR2C1, static_cast<int32_t>(p.matrix[2][1]));
  EXPECT_EQ(info.inputBias1, 128);
  EXPECT_FLOAT_EQ(info.meanChn0, 123.5f);
  EXPECT_FLOAT_EQ(info.minChn0, 0.25f);
  EXPECT_FLOAT_EQ(info.varReciChn1, 0.0175f);
  EXPECT_EQ(info.srcFormat, KILN_FORMAT_NCHW);
  EXPECT_EQ(info.srcDatatype, KILN_FLOAT);
  EXPECT_EQ(info.srcDimNum, 4u);
  EXPECT_EQ(info.shapeCount, 1u);
  ASSERT_EQ(info.outDims[0].aippOutdims.dimCount, 4u);
  EXPECT_EQ(info.outDims[0].aippOutdims.dims[1], kC);
  EXPECT_EQ(info.outDims[0].aippOutdims.dims[3], kW);
  EXPECT_EQ(info.outDims[0].srcSize, size_t{kBatch * kC * kH * kW * sizeof(float)});

  // Dynamic AIPP calls on a static input.
  aipp_ = kilnmdlCreateAIPP(1);
  kilnmdlDataset* ds = kilnmdlCreateDataset();
  EXPECT_EQ(kilnmdlSetAIPPByInputIndex(id, ds, 0, aipp_), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(error_mentions("has static AIPP: its parameters were fixed at compile time"));
  kilnmdlDestroyDataset(ds);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

}  // namespace
