// Tests of DFT (opsets 17 and 20), STFT, the window ops and MelWeightMatrix; expected values
// computed by NumPy (np.fft, np.hanning, np.blackman) and the ONNX reference formulas.
#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

TEST(SignalTest, Dft17RealInputOfNonPowerOfTwoLength) {
  // np.fft.fft([0.5, -1.25, 2.0, 3.5, -0.75])
  Tensor x = make<float>({1, 5, 1}, {0.5f, -1.25f, 2.0f, 3.5f, -0.75f});
  expect_tensor(
      run1("DFT", 17, {x}), {1, 5, 2},
      {4.0, 0.0, -4.567627457812106, 1.3572061365862864, 3.817627457812106, -1.1326921482964938,
       3.817627457812106, 1.1326921482964938, -4.567627457812106, -1.3572061365862864});
  // dft_length 6 zero-pads: np.fft.fft(x, n=6).
  expect_tensor(run1("DFT", 17, {x, i64({6}, {})}, {}, {1}), {1, 6, 2},
                {4.0, 0.0, -4.25, -1.299038105676658, 4.0, 3.4641016151377544, -0.5, 0.0, 4.0,
                 -3.4641016151377544, -4.25, 1.299038105676658});
}

Tensor complex8() {
  // x8 = arange(8) * 0.5 - 1 with x8[3] = 4, plus 1j * arange(8)[::-1] * 0.25
  std::vector<float> v;
  for (int i = 0; i < 8; ++i) {
    v.push_back(i == 3 ? 4.0f : i * 0.5f - 1.0f);
    v.push_back((7 - i) * 0.25f);
  }
  return make<float>({1, 8, 2}, v);
}

TEST(SignalTest, Dft17ComplexForwardAndInverse) {
  expect_tensor(run1("DFT", 17, {complex8()}), {1, 8, 2},
                {9.5, 7.0, -2.0606601717798214, 3.353553390593274, -1.0, 6.5, 0.8890872965260117,
                 -0.6464466094067263, -5.5, 1.0, 0.060660171779821415, 2.646446609406726, -3.0,
                 -4.5, -6.889087296526012, -1.3535533905932737});
  expect_tensor(run1("DFT", 17, {complex8()}, {{"inverse", attr_i(1)}}), {1, 8, 2},
                {1.1875, 0.875, -0.8611359120657515, -0.16919417382415922, -0.375, -0.5625,
                 0.007582521472477677, 0.33080582617584076, -0.6875, 0.125, 0.11113591206575146,
                 -0.08080582617584078, -0.125, 0.8125, -0.2575825214724777, 0.41919417382415924});
}

TEST(SignalTest, Dft20OnesidedAndItsInverse) {
  Tensor x = make<double>({1, 8, 1}, {-1.0, -0.5, 0.0, 4.0, 1.0, 1.5, 2.0, 2.5});
  // np.fft.rfft(x8); axis given as an input (opset 20).
  Tensor spectrum = run1("DFT", 20, {x, Tensor(), i64({1}, {})}, {{"onesided", attr_i(1)}}, {2});
  expect_tensor(spectrum, {1, 5, 2},
                {9.5, 0.0, -4.474873734152917, 2.353553390593274, -2.0, 5.5, 0.4748737341529168,
                 -1.6464466094067263, -5.5, 0.0},
                1e-12, 1e-12);
  // Inverse of a half spectrum is the real signal, length 2 * (5 - 1): np.fft.irfft.
  expect_tensor(run1("DFT", 20, {spectrum, Tensor(), i64({1}, {})},
                     {{"onesided", attr_i(1)}, {"inverse", attr_i(1)}}, {2}),
                {1, 8, 1}, {-1.0, -0.5, 0.0, 4.0, 1.0, 1.5, 2.0, 2.5}, 1e-12, 1e-12);
}

TEST(SignalTest, Dft20DefaultAxisIsSecondToLast) {
  // x [1, 2, 3, 1]: np.fft.fft(x2, axis=1) with x2 = [[1, 2, 3], [4, -5, 6.5]].
  Tensor x = make<float>({1, 2, 3, 1}, {1, 2, 3, 4, -5, 6.5f});
  expect_tensor(run1("DFT", 20, {x}), {1, 2, 3, 2},
                {6.0, 0.0, -1.5, 0.8660254037844386, -1.5, -0.8660254037844386, 5.5, 0.0, 3.25,
                 9.959292143521044, 3.25, -9.959292143521044});
}

TEST(SignalTest, DftRejectsBadInputs) {
  Tensor x = make<float>({1, 4, 3}, std::vector<float>(12, 1.0f));
  EXPECT_NE(run_error("DFT", 17, {x}).find("last dim"), std::string::npos);
  Tensor ok = make<float>({1, 4, 1}, {1, 2, 3, 4});
  EXPECT_NE(run_error("DFT", 17, {ok}, {{"axis", attr_i(2)}}).find("axis"), std::string::npos);
  EXPECT_NE(run_error("DFT", 17, {ok, i64({0}, {})}, {}, 1, {1}).find("dft_length"),
            std::string::npos);
  EXPECT_NE(run_error("DFT", 20, {ok, Tensor(), i64({-1}, {})}).find("axis"), std::string::npos);
}

TEST(SignalTest, StftWithWindowIsOnesidedByDefault) {
  Tensor s =
      make<float>({1, 10, 1}, {0.1f, 0.7f, -0.3f, 1.2f, 0.4f, -0.9f, 0.0f, 2.0f, -1.1f, 0.6f});
  Tensor window = run1("HannWindow", 17, {Tensor::scalar<int64_t>(4)});
  // Frames at 0, 3, 6 of length 4, times the periodic Hann window, np.fft.fft(...)[:3].
  expect_tensor(run1("STFT", 17, {s, i64({3}, {}), window}, {}, {1}), {1, 3, 3, 2},
                {0.65, 0.0, 0.3, 0.25, -1.25, 0.0, -0.7, 0.0, 0.9, -0.2, -1.1, 0.0, 0.2, 0.0, 1.1,
                 -0.7, -2.4, 0.0},
                1e-5, 1e-6);
  EXPECT_NE(run_error("STFT", 17, {s, i64({0}, {}), window}).find("frame_step"), std::string::npos);
  EXPECT_NE(run_error("STFT", 17, {s, i64({3}, {}), window, i64({5}, {})}).find("window length"),
            std::string::npos);
}

TEST(SignalTest, WindowsPeriodicAndSymmetric) {
  Tensor n = Tensor::scalar<int32_t>(6);
  expect_tensor(run1("HannWindow", 17, {n}), {6}, {0.0, 0.25, 0.75, 1.0, 0.75, 0.25});
  expect_tensor(
      run1("HannWindow", 17, {n}, {{"periodic", attr_i(0)}}), {6},
      {0.0, 0.34549150281252633, 0.9045084971874737, 0.9045084971874737, 0.34549150281252633, 0.0});
  expect_tensor(run1("HammingWindow", 17, {n}), {6},
                {0.08695652173913043, 0.3152173913043478, 0.7717391304347825, 1.0,
                 0.7717391304347827, 0.3152173913043478});
  expect_tensor(run1("HammingWindow", 17, {n}, {{"periodic", attr_i(0)}}), {6},
                {0.08695652173913043, 0.4024052851766544, 0.9128121061276933, 0.9128121061276935,
                 0.4024052851766545, 0.08695652173913043});
  expect_tensor(run1("BlackmanWindow", 17, {n}), {6}, {0.0, 0.13, 0.63, 1.0, 0.63, 0.13});
  Tensor d =
      run1("BlackmanWindow", 17, {n}, {{"periodic", attr_i(0)}, {"output_datatype", attr_i(11)}});
  EXPECT_EQ(d.dtype(), DataType::kFloat64);
  expect_tensor(
      d, {6},
      {0.0, 0.2007701432625305, 0.8492298567374694, 0.8492298567374694, 0.2007701432625305, 0.0},
      1e-12, 1e-12);
  EXPECT_NE(run_error("HannWindow", 17, {Tensor::scalar<int32_t>(-1)}).find("negative"),
            std::string::npos);
}

TEST(SignalTest, MelWeightMatrixMatchesTheOnnxFormula) {
  // The ONNX reference MelWeightMatrix for (3, 64, 16000, 0, 8000); rows past 12 are zero.
  Tensor y =
      run1("MelWeightMatrix", 17,
           {Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(64), Tensor::scalar<int32_t>(16000),
            Tensor::scalar<float>(0.0f), Tensor::scalar<float>(8000.0f)});
  std::vector<double> expected = {
      0.0, 0.0, 0.0,   1.0,     0.0,     0.0,     2.0 / 3, 1.0 / 3, 0.0,     1.0 / 3, 2.0 / 3,
      0.0, 0.0, 1.0,   0.0,     0.0,     5.0 / 6, 1.0 / 6, 0.0,     4.0 / 6, 2.0 / 6, 0.0,
      0.5, 0.5, 0.0,   2.0 / 6, 4.0 / 6, 0.0,     1.0 / 6, 5.0 / 6, 0.0,     0.0,     1.0,
      0.0, 0.0, 0.875, 0.0,     0.0,     0.75,    0.0,     0.0,     0.625,   0.0,     0.0,
      0.5, 0.0, 0.0,   0.375,   0.0,     0.0,     0.25,    0.0,     0.0,     0.125};
  expected.resize(33 * 3, 0.0);
  expect_tensor(y, {33, 3}, expected);
}

}  // namespace
}  // namespace kiln::ops
