// Tests of the C++ wrappers (include/kiln/kiln.hpp): RAII ownership, moves, exceptions
// carrying the C API's code and message, copies checked byte for byte, and models from the
// ONNX backend test suite run through kiln::Model against their expected outputs.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "frontend/onnx/tensor_proto.h"
#include "kiln/kiln.hpp"
#include "model/kiln_model.h"
#include "../process_temp_dir.h"

namespace {

namespace fs = std::filesystem;

// Expects `statement` to throw kiln::Error with `code` and a message containing `text`.
#define EXPECT_KILN_ERROR(statement, expected_code, text)                         \
  do {                                                                            \
    try {                                                                         \
      statement;                                                                  \
      ADD_FAILURE() << #statement " did not throw";                               \
    } catch (const kiln::Error& e) {                                              \
      EXPECT_EQ(e.code(), (expected_code)) << e.what();                           \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what(); \
    }                                                                             \
  } while (0)

std::string backend_dir() {
  const char* src = std::getenv("KILN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/onnx/backend";
}

std::string temp_dir() {
  static const kiln::test_support::ProcessTempDir dir("kiln_hpp_test");
  return dir.path();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Reads a float32 TensorProto of the ONNX test data.
std::vector<float> read_float_tensor(const std::string& path, std::vector<int64_t>* dims) {
  onnx::TensorProto proto;
  std::vector<uint8_t> bytes = read_bytes(path);
  EXPECT_TRUE(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) << path;
  auto tensor = kiln::frontend::tensor_from_proto(proto, {}, path);
  EXPECT_TRUE(tensor.ok()) << tensor.status().to_string();
  if (!tensor.ok()) return {};
  EXPECT_EQ(tensor->dtype(), kiln::DataType::kFloat32) << path;
  if (dims) *dims = tensor->dims();
  const float* p = tensor->data<float>();
  return std::vector<float>(p, p + tensor->num_elements());
}

// Compiles a backend test's model.onnx to a .kiln file (as `kiln compile` does).
std::string compile_backend_model(const std::string& test) {
  std::string onnx_path = backend_dir() + "/" + test + "/model.onnx";
  auto compiled = kiln::compiler::compile_onnx_file(onnx_path, {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  std::string out = temp_dir() + "/" + fs::path(test).filename().string() + ".kiln";
  kiln::Status st = kiln::model::write_model(*compiled->graph, compiled->info, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// ONNX backend test comparison (onnx.backend.test: rtol 1e-3, atol 1e-7).
void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_LE(std::fabs(actual[i] - expected[i]), 1e-7 + 1e-3 * std::fabs(expected[i]))
        << what << " element " << i << ": " << actual[i] << " vs " << expected[i];
  }
}

std::vector<float> iota_floats(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i) - 3.25f;
  return v;
}

TEST(HppTest, RuntimeVersionAndDevices) {
  kiln::Runtime runtime;
  kiln::Version v = kiln::version();
  EXPECT_EQ(v.major, KILN_VERSION_MAJOR);
  EXPECT_EQ(v.minor, KILN_VERSION_MINOR);
  EXPECT_EQ(v.patch, KILN_VERSION_PATCH);
  EXPECT_GE(kiln::Device::count(), 1u);
  kiln::Device device(0);
  EXPECT_EQ(device.id(), 0);
  EXPECT_EQ(kiln::Device::current(), 0);
  EXPECT_EQ(kiln::data_type_size(KILN_FLOAT), 4u);
  EXPECT_EQ(kiln::data_type_size(KILN_FLOAT16), 2u);
  kiln::MemInfo info = kiln::memory_info();
  EXPECT_GT(info.total, 0u);
  EXPECT_LE(info.free, info.total);
  device.synchronize();
}

TEST(HppTest, ErrorsCarryCodeAndMessage) {
  // Nothing works before kilnInit.
  EXPECT_KILN_ERROR(kiln::Device(0), KILN_ERROR_UNINITIALIZE, "kilnrtSetDevice");
  kiln::Runtime runtime;
  EXPECT_KILN_ERROR(kiln::Runtime(), KILN_ERROR_REPEAT_INITIALIZE, "kilnInit");
  EXPECT_KILN_ERROR(kiln::Device(static_cast<int32_t>(kiln::Device::count()) + 3),
                    KILN_ERROR_INVALID_DEVICE, "kilnrtSetDevice");
  kiln::Device device(0);
  std::string missing = temp_dir() + "/no_such_model.kiln";
  try {
    kiln::Model::load(missing);
    ADD_FAILURE() << "loading a missing model did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_NE(e.code(), KILN_SUCCESS);
    EXPECT_NE(std::string(e.what()).find("kilnmdlLoadFromFile"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_model.kiln"), std::string::npos) << e.what();
  }
  // The C API's message is the thread's recent error, and kiln::check reports it.
  EXPECT_KILN_ERROR(kiln::check(kilnrtSetDevice(-1), "kilnrtSetDevice"), KILN_ERROR_INVALID_DEVICE,
                    kilnGetRecentErrMsg());
  // A copy larger than the buffer is refused, not performed.
  kiln::DeviceBuffer small(16);
  std::vector<uint8_t> big(64, 1);
  try {
    small.copy_from_host(big.data(), big.size());
    ADD_FAILURE() << "oversized copy did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_NE(e.code(), KILN_SUCCESS);
    EXPECT_NE(std::string(e.what()).find("kilnrtMemcpy"), std::string::npos) << e.what();
  }
  kiln::check(KILN_SUCCESS);  // no throw
}

TEST(HppTest, DeviceBufferRoundTripAndRelease) {
  kiln::Runtime runtime;
  kiln::Device device(0);
  const size_t before = device.memory_stats().inUse;
  std::vector<float> src = iota_floats(4099, 0.5f);  // not a multiple of any block size
  {
    kiln::DeviceBuffer a(src.size() * sizeof(float));
    EXPECT_FALSE(a.empty());
    EXPECT_GE(device.memory_stats().inUse, before + a.size());
    a.copy_from_host(src);
    EXPECT_EQ(a.to_host<float>(), src);

    // Device to device, then back.
    kiln::DeviceBuffer b(a.size());
    b.copy_from_device(a, a.size());
    std::vector<float> out(src.size());
    b.copy_to_host(out.data(), out.size() * sizeof(float));
    EXPECT_EQ(out, src);

    // Memset sets every byte.
    b.fill(0x5a);
    for (uint8_t byte : b.to_host<uint8_t>()) ASSERT_EQ(byte, 0x5a);

    // Moves transfer ownership; the moved-from buffer is empty and frees nothing.
    void* address = a.data();
    kiln::DeviceBuffer c(std::move(a));
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(c.data(), address);
    EXPECT_EQ(c.to_host<float>(), src);
    a = std::move(c);
    EXPECT_EQ(a.data(), address);
  }
  // Every buffer went back to the allocator.
  EXPECT_EQ(device.memory_stats().inUse, before);
}

TEST(HppTest, AsyncCopiesThroughPinnedMemoryAndEvents) {
  kiln::Runtime runtime;
  kiln::Device device(0);
  const size_t n = 1 << 16;
  kiln::HostBuffer pinned_in(n * sizeof(float));
  kiln::HostBuffer pinned_out(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) pinned_in.as<float>()[i] = static_cast<float>(i) * 0.25f;
  std::memset(pinned_out.data(), 0, pinned_out.size());

  kiln::Stream upload, download;
  kiln::Event uploaded, start, end;
  kiln::DeviceBuffer buffer(n * sizeof(float));
  start.record(upload);
  buffer.copy_from_host_async(pinned_in.data(), pinned_in.size(), upload);
  uploaded.record(upload);
  end.record(upload);
  // The download stream waits for the upload stream's event: stream order across streams.
  download.wait(uploaded);
  buffer.copy_to_host_async(pinned_out.data(), pinned_out.size(), download);
  download.synchronize();
  EXPECT_TRUE(download.query());
  EXPECT_TRUE(uploaded.query());
  EXPECT_EQ(std::memcmp(pinned_in.data(), pinned_out.data(), pinned_in.size()), 0);

  end.synchronize();
  float ms = kiln::Event::elapsed_ms(start, end);
  EXPECT_GE(ms, 0.0f);

  // Memset on a stream, then read back on the default stream after an event.
  kiln::Event filled;
  buffer.fill_async(0x11, upload);
  filled.record(upload);
  kiln::Stream default_stream = kiln::Stream::default_stream();
  default_stream.wait(filled);
  buffer.copy_to_host_async(pinned_out.data(), pinned_out.size(), default_stream);
  default_stream.synchronize(10000);
  for (size_t i = 0; i < pinned_out.size(); ++i) ASSERT_EQ(pinned_out.as<uint8_t>()[i], 0x11) << i;
}

TEST(HppTest, CallbacksRunInStreamOrder) {
  kiln::Runtime runtime;
  kiln::Device device(0);
  kiln::Stream stream;
  struct Log {
    std::vector<int> order;
    int next = 0;
  } log;
  auto record = [](void* user) {
    auto* l = static_cast<Log*>(user);
    l->order.push_back(l->next++);
  };
  for (int i = 0; i < 5; ++i) stream.launch_callback(record, &log);
  stream.synchronize();
  EXPECT_EQ(log.order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(HppTest, MovedFromStreamIsAnErrorNotTheDefaultStream) {
  kiln::Runtime runtime;
  kiln::Device device(0);
  kiln::Stream a;
  kiln::Stream b(std::move(a));
  b.synchronize();
  EXPECT_KILN_ERROR(a.synchronize(), KILN_ERROR_INVALID_RESOURCE_HANDLE, "moved-from");
  kiln::Event e;
  EXPECT_KILN_ERROR(e.record(a), KILN_ERROR_INVALID_RESOURCE_HANDLE, "moved-from");
}

TEST(HppTest, ContextsAreThreadCurrent) {
  kiln::Runtime runtime;
  kiln::Context context(0);  // created current
  EXPECT_EQ(kiln::Context::current(), context.get());
  std::atomic<bool> ok{false};
  std::thread worker([&] {
    context.make_current();
    ok = kiln::Context::current() == context.get() && kiln::Device::current() == 0;
    kiln::Stream stream;
    kiln::DeviceBuffer buffer(256);
    buffer.fill_async(3, stream);
    stream.synchronize();
    for (uint8_t byte : buffer.to_host<uint8_t>()) ok = ok && byte == 3;
  });
  worker.join();
  EXPECT_TRUE(ok);
}

// Runs a backend test's model through kiln::Model with its test data set 0.
void run_backend_test(const std::string& test, bool from_memory, bool async) {
  SCOPED_TRACE(test);
  std::string path = compile_backend_model(test);
  ASSERT_FALSE(path.empty());
  std::string data = backend_dir() + "/" + test + "/test_data_set_0";

  kiln::Runtime runtime;
  kiln::Device device(0);
  kiln::Model model;
  if (from_memory) {
    std::vector<uint8_t> bytes = read_bytes(path);
    model = kiln::Model::load_from_memory(bytes.data(), bytes.size());
  } else {
    model = kiln::Model::load(path);
  }

  size_t num_inputs = 0;
  while (fs::exists(data + "/input_" + std::to_string(num_inputs) + ".pb")) ++num_inputs;
  ASSERT_EQ(model.num_inputs(), num_inputs);
  ASSERT_EQ(model.num_outputs(), 1u);

  std::vector<kiln::DeviceBuffer> inputs;
  kiln::Dataset input_set, output_set;
  for (size_t i = 0; i < num_inputs; ++i) {
    std::vector<int64_t> dims;
    std::vector<float> values =
        read_float_tensor(data + "/input_" + std::to_string(i) + ".pb", &dims);
    EXPECT_EQ(model.input_dims(i), dims);
    EXPECT_EQ(model.input_data_type(i), KILN_FLOAT);
    EXPECT_EQ(model.input_index(model.input_name(i)), i);
    ASSERT_EQ(model.input_size(i), values.size() * sizeof(float));
    inputs.emplace_back(model.input_size(i));
    inputs.back().copy_from_host(values);
    input_set.add(inputs.back());
  }
  std::vector<int64_t> expected_dims;
  std::vector<float> expected = read_float_tensor(data + "/output_0.pb", &expected_dims);
  EXPECT_EQ(model.output_dims(0), expected_dims);
  EXPECT_EQ(model.output_data_type(0), KILN_FLOAT);
  ASSERT_EQ(model.output_size(0), expected.size() * sizeof(float));
  kiln::DeviceBuffer output(model.output_size(0));
  output_set.add(output);
  EXPECT_EQ(input_set.size(), num_inputs);
  EXPECT_EQ(output_set.size(), 1u);
  EXPECT_EQ(output_set.buffer_data(0), output.data());
  EXPECT_EQ(output_set.buffer_size(0), output.size());
  EXPECT_KILN_ERROR(model.input_size(num_inputs), KILN_ERROR_INVALID_PARAM, "out of range");

  if (async) {
    kiln::Stream stream;
    model.execute_async(input_set, output_set, stream);
    stream.synchronize();
  } else {
    model.execute(input_set, output_set);
  }
  expect_close(output.to_host<float>(), expected, test);
  EXPECT_EQ(output_set.output_shape(0), expected_dims);
}

TEST(HppTest, ModelWithTwoInputsMatchesOnnxTestData) {
  run_backend_test("node/test_basic_conv_with_padding", /*from_memory=*/false, /*async=*/false);
}

TEST(HppTest, ModelFromMemoryRunsOnAStream) {
  run_backend_test("pytorch-converted/test_Conv2d", /*from_memory=*/true, /*async=*/true);
}

TEST(HppTest, ModelRunsFromSeveralThreadsAtOnce) {
  const std::string test = "pytorch-converted/test_Conv2d_depthwise_padded";
  std::string path = compile_backend_model(test);
  ASSERT_FALSE(path.empty());
  std::string data = backend_dir() + "/" + test + "/test_data_set_0";
  std::vector<float> input = read_float_tensor(data + "/input_0.pb", nullptr);
  std::vector<float> expected = read_float_tensor(data + "/output_0.pb", nullptr);

  kiln::Runtime runtime;
  kiln::Context context(0);
  kiln::Model model = kiln::Model::load(path);
  ASSERT_EQ(model.num_inputs(), 1u);
  constexpr int kThreads = 3;
  constexpr int kRuns = 8;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        context.make_current();
        kiln::Stream stream;
        kiln::DeviceBuffer in(model.input_size(0)), out(model.output_size(0));
        kiln::Dataset ins, outs;
        ins.add(in);
        outs.add(out);
        std::vector<float> result(expected.size());
        for (int r = 0; r < kRuns; ++r) {
          in.copy_from_host_async(input.data(), in.size(), stream);
          out.fill_async(0, stream);
          model.execute_async(ins, outs, stream);
          out.copy_to_host_async(result.data(), out.size(), stream);
          stream.synchronize();
          for (size_t i = 0; i < result.size(); ++i) {
            if (std::fabs(result[i] - expected[i]) > 1e-7 + 1e-3 * std::fabs(expected[i])) {
              failures[t] = "run " + std::to_string(r) + " element " + std::to_string(i) + ": " +
                            std::to_string(result[i]) + " vs " + std::to_string(expected[i]);
              return;
            }
          }
        }
      } catch (const kiln::Error& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

TEST(HppTest, DatasetOwnsItsDataBuffers) {
  kiln::Runtime runtime;
  kiln::Device device(0);
  kiln::DeviceBuffer a(128), b(64);
  kiln::Dataset set;
  set.add(a).add(b);
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set.buffer_data(1), b.data());
  EXPECT_EQ(set.buffer_size(1), 64u);
  set.update(1, a.data(), 32);
  EXPECT_EQ(set.buffer_data(1), a.data());
  EXPECT_EQ(set.buffer_size(1), 32u);
  EXPECT_KILN_ERROR(set.buffer_data(2), KILN_ERROR_INVALID_PARAM, "out of range");
  kiln::Dataset moved(std::move(set));
  EXPECT_EQ(moved.size(), 2u);
  EXPECT_EQ(set.get(), nullptr);
}

}  // namespace
