// Tests of the model C API (kilnmdl*, datasets, data buffers, tensor descs): ONNX backend
// node tests compiled to .kiln and run through kilnmdlExecute(Async) against the outputs
// in their test data; concurrent executions from threads, streams and devices; caller
// workspaces (kilnmdlLoadFromFileWithMem, kilnmdlQuerySize); activation arenas; and the
// error code of every misuse.
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "core/runtime_value.h"
#include "core/tensor.h"
#include "frontend/onnx/value_proto.h"
#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "runtime/graph_executor.h"
#include "runtime/model_runtime.h"
#include "../process_temp_dir.h"

namespace {

namespace fs = std::filesystem;
using kiln::DataType;
using kiln::Tensor;

std::string last_error() { return kilnGetRecentErrMsg(); }

bool error_mentions(const std::string& text) {
  return last_error().find(text) != std::string::npos;
}

std::string backend_dir() {
  const char* src = std::getenv("KILN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/onnx/backend";
}

std::string temp_dir() {
  static const kiln::test_support::ProcessTempDir dir("kiln_model_test");
  return dir.path();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string write_config(const std::string& name, const std::string& json) {
  std::string path = temp_dir() + "/" + name;
  std::ofstream(path) << json;
  return path;
}

// ---- Models and their test data --------------------------------------------------------------

// A model compiled to .kiln with one set of inputs (in model-input order: graph inputs
// without an initializer) and the outputs expected for them.
struct Case {
  std::string kiln_path;
  std::vector<Tensor> inputs;
  std::vector<Tensor> expected;
};

std::string write_kiln(const kiln::compiler::CompiledModel& compiled, const std::string& name) {
  std::string out = temp_dir() + "/" + name + ".kiln";
  kiln::Status st = kiln::model::write_model(*compiled.graph, compiled.info, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// An ONNX backend test's model.onnx compiled to .kiln (as `kiln compile` does).
std::string compile_backend(const std::string& test) {
  auto compiled = kiln::compiler::compile_onnx_file(backend_dir() + "/" + test + "/model.onnx", {});
  EXPECT_TRUE(compiled.ok()) << test << ": " << compiled.status().to_string();
  if (!compiled.ok()) return "";
  std::string name = test;
  for (char& ch : name)
    if (ch == '/') ch = '_';
  return write_kiln(*compiled, name);
}

// An ONNX backend test (e.g. "node/test_add") compiled to .kiln, with its test_data_set_0.
// Compiled once per process.
const Case& backend_case(const std::string& test) {
  static std::mutex mutex;
  static std::map<std::string, Case> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(test);
  if (it != cache.end()) return it->second;
  Case& c = cache[test];
  std::string dir = backend_dir() + "/" + test;
  auto compiled = kiln::compiler::compile_onnx_file(dir + "/model.onnx", {});
  EXPECT_TRUE(compiled.ok()) << test << ": " << compiled.status().to_string();
  if (!compiled.ok()) return c;
  std::string name = test;
  for (char& ch : name)
    if (ch == '/') ch = '_';
  c.kiln_path = write_kiln(*compiled, name);
  const kiln::ir::Graph& g = *compiled->graph;
  int k = 0;
  for (const kiln::ir::Value* v : g.inputs()) {
    if (v->has_initializer()) continue;
    std::string path = dir + "/test_data_set_0/input_" + std::to_string(k++) + ".pb";
    auto value = kiln::frontend::read_value_proto(path, v->type());
    EXPECT_TRUE(value.ok() && value->is_tensor()) << path << ": " << value.status().to_string();
    if (value.ok()) c.inputs.push_back(value->tensor());
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    std::string path = dir + "/test_data_set_0/output_" + std::to_string(i) + ".pb";
    auto value = kiln::frontend::read_value_proto(path, g.outputs()[i]->type());
    EXPECT_TRUE(value.ok() && value->is_tensor()) << path << ": " << value.status().to_string();
    if (value.ok()) c.expected.push_back(value->tensor());
  }
  return c;
}

// A model written in the ONNX text syntax, compiled to .kiln.
std::string compile_text(const std::string& name, const char* text) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  std::string bytes = m.SerializeAsString();
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), name, {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  return write_kiln(*compiled, name);
}

// z = x + y with the first dim not fixed at compile time.
const char* kDynamicAdd = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  dynamic_add (float[N, 4] x, float[N, 4] y) => (float[N, 4] z) {
    z = Add(x, y)
  }
)";

// Values of ONNX backend tests compare as onnx.backend.test does: rtol 1e-3, atol 1e-7 for
// floating point; everything else exactly.
::testing::AssertionResult tensors_match(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.dims() != want.dims())
    return ::testing::AssertionFailure()
           << "got " << got.description() << ", want " << want.description();
  if (kiln::dtype_is_float(want.dtype())) {
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      double g = got.element_as_double(i), w = want.element_as_double(i);
      if (std::isnan(w) && std::isnan(g)) continue;
      if (!(std::fabs(g - w) <= 1e-7 + 1e-3 * std::fabs(w)))
        return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
    }
    return ::testing::AssertionSuccess();
  }
  if (std::memcmp(got.raw_data(), want.raw_data(), want.size_bytes()) != 0)
    return ::testing::AssertionFailure() << "elements differ";
  return ::testing::AssertionSuccess();
}

// ---- Device memory and datasets --------------------------------------------------------------

// Device memory of the current device, freed at scope end.
class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes) : size_(bytes) {
    EXPECT_EQ(kilnrtMalloc(&p_, bytes ? bytes : 1, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS)
        << last_error();
  }
  ~DeviceMem() {
    if (p_) {
      EXPECT_EQ(kilnrtFree(p_), KILN_SUCCESS) << last_error();
    }
  }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  void* get() const { return p_; }
  size_t size() const { return size_; }
  void upload(const void* src, size_t n) {
    if (n) {
      EXPECT_EQ(kilnrtMemcpy(p_, size_, src, n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS)
          << last_error();
    }
  }
  std::vector<uint8_t> download(size_t n) const {
    std::vector<uint8_t> out(n);
    if (n) {
      EXPECT_EQ(kilnrtMemcpy(out.data(), n, p_, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS)
          << last_error();
    }
    return out;
  }
  void fill(int value) {
    EXPECT_EQ(kilnrtMemset(p_, size_, value, size_), KILN_SUCCESS) << last_error();
  }
  // Forgets the memory without freeing it (kilnFinalize released it).
  void forget() { p_ = nullptr; }
  // Frees now (to test a freed pointer).
  void free_now() {
    EXPECT_EQ(kilnrtFree(p_), KILN_SUCCESS) << last_error();
    p_ = nullptr;
  }

 private:
  void* p_ = nullptr;
  size_t size_;
};

// The input and output datasets of executions of one case, with device buffers behind them
// (on the device current at construction).
class Io {
 public:
  // Output buffers hold the expected output bytes plus `output_slack`.
  explicit Io(const Case& c, size_t output_slack = 0) {
    for (const Tensor& t : c.inputs) add_input(t.raw_data(), t.size_bytes());
    for (const Tensor& t : c.expected) add_output(t.size_bytes() + output_slack);
  }
  Io() = default;
  ~Io() {
    EXPECT_EQ(kilnmdlDestroyDataset(input), KILN_SUCCESS) << last_error();
    EXPECT_EQ(kilnmdlDestroyDataset(output), KILN_SUCCESS) << last_error();
    for (kilnDataBuffer* b : buffers_)
      EXPECT_EQ(kilnDestroyDataBuffer(b), KILN_SUCCESS) << last_error();
  }
  Io(const Io&) = delete;
  Io& operator=(const Io&) = delete;

  void add_input(const void* host, size_t bytes) {
    in_mem.push_back(std::make_unique<DeviceMem>(bytes));
    in_mem.back()->upload(host, bytes);
    add(input, in_mem.back()->get(), bytes);
  }
  void add_output(size_t bytes) {
    out_mem.push_back(std::make_unique<DeviceMem>(bytes));
    out_mem.back()->fill(0xee);  // a sentinel no test output equals
    add(output, out_mem.back()->get(), bytes);
  }
  void add(kilnmdlDataset* dataset, void* data, size_t bytes) {
    kilnDataBuffer* b = kilnCreateDataBuffer(data, bytes);
    ASSERT_NE(b, nullptr) << last_error();
    buffers_.push_back(b);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(dataset, b), KILN_SUCCESS) << last_error();
  }
  void reset_outputs() {
    for (auto& m : out_mem) m->fill(0xee);
  }

  // Output i as the output dataset's desc describes it after an execution.
  Tensor output_tensor(size_t i) const {
    const kilnTensorDesc* d = kilnmdlGetDatasetTensorDesc(output, i);
    EXPECT_NE(d, nullptr) << last_error();
    if (!d) return Tensor();
    std::vector<int64_t> dims(kilnGetTensorDescNumDims(d));
    for (size_t k = 0; k < dims.size(); ++k)
      EXPECT_EQ(kilnGetTensorDescDimV2(d, k, &dims[k]), KILN_SUCCESS);
    auto dtype = kiln::rt::from_c_dtype(kilnGetTensorDescType(d));
    EXPECT_TRUE(dtype.has_value());
    if (!dtype) return Tensor();
    Tensor t = Tensor::make(*dtype, dims);
    EXPECT_EQ(kilnGetTensorDescSize(d), t.size_bytes());
    std::vector<uint8_t> bytes = out_mem[i]->download(t.size_bytes());
    if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
    return t;
  }
  // True when output i still holds the sentinel (nothing was written).
  bool output_untouched(size_t i) const {
    for (uint8_t b : out_mem[i]->download(out_mem[i]->size()))
      if (b != 0xee) return false;
    return true;
  }

  ::testing::AssertionResult outputs_match(const Case& c) const {
    for (size_t i = 0; i < c.expected.size(); ++i) {
      ::testing::AssertionResult r = tensors_match(output_tensor(i), c.expected[i]);
      if (!r) return r << " (output " << i << ")";
    }
    return ::testing::AssertionSuccess();
  }

  kilnmdlDataset* input = kilnmdlCreateDataset();
  kilnmdlDataset* output = kilnmdlCreateDataset();
  std::vector<std::unique_ptr<DeviceMem>> in_mem, out_mem;

 private:
  std::vector<kilnDataBuffer*> buffers_;
};

uint32_t load(const std::string& path) {
  uint32_t id = 0;
  EXPECT_EQ(kilnmdlLoadFromFile(path.c_str(), &id), KILN_SUCCESS) << last_error();
  return id;
}

// A runtime with two CPU devices for each test; device 0 current.
class ModelApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = write_config("two_devices.json", R"({"devices": "cpu:2"})");
    ASSERT_EQ(kilnInit(config_.c_str()), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  }
  void TearDown() override { EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error(); }

  std::string config_;
};

// ---- Running models --------------------------------------------------------------------------

TEST_F(ModelApiTest, BackendNodeTestsMatchTheirExpectedOutputs) {
  const char* tests[] = {
      "node/test_add",                        // two inputs
      "node/test_add_uint8",                  // integer elements
      "node/test_conv_with_strides_padding",  // rank 4
      "node/test_gemm_default_matrix_bias",   // three inputs
      "node/test_softmax_axis_0",
      "node/test_if",                      // If: branches are subgraphs
      "node/test_loop11",                  // Loop: scalar inputs, a scan output
      "node/test_scan9_sum",               // Scan
      "pytorch-converted/test_Conv2d",     // weights as initializer-backed inputs
      "pytorch-converted/test_GLU",        // several nodes
      "pytorch-converted/test_Embedding",  // int64 indices
  };
  for (const char* test : tests) {
    SCOPED_TRACE(test);
    const Case& c = backend_case(test);
    ASSERT_FALSE(c.kiln_path.empty());
    uint32_t id = load(c.kiln_path);
    Io io(c);
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
    EXPECT_TRUE(io.outputs_match(c));
    // A second execution reuses the context and its arena, with the same result.
    io.reset_outputs();
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
    EXPECT_TRUE(io.outputs_match(c));
    EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS) << last_error();
  }
}

// Host memory mapped with kilnrtHostRegister is read by the model where the program wrote
// it (node/test_gemm_default_matrix_bias: three inputs, the ONNX test data's expected
// output), and only while it is registered; misuse is an error code naming the problem.
TEST_F(ModelApiTest, RegisteredHostMemoryIsReadWithoutACopy) {
  const Case& c = backend_case("node/test_gemm_default_matrix_bias");
  ASSERT_FALSE(c.kiln_path.empty());
  uint32_t id = load(c.kiln_path);
  Io io;
  std::vector<std::vector<uint8_t>> host;
  for (const Tensor& t : c.inputs) {
    const auto* bytes = static_cast<const uint8_t*>(t.raw_data());
    host.emplace_back(bytes, bytes + t.size_bytes());
    void* device = nullptr;
    ASSERT_EQ(kilnrtHostRegister(host.back().data(), host.back().size(), KILN_HOST_REGISTER_MAPPED, &device),
              KILN_SUCCESS)
        << last_error();
    EXPECT_EQ(device, host.back().data());  // the CPU device addresses host memory as it is
    io.add(io.input, device, host.back().size());
  }
  for (const Tensor& t : c.expected) io.add_output(t.size_bytes());
  ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
  EXPECT_TRUE(io.outputs_match(c));
  // Written in place, read again: the model sees the program's memory, not a copy of it.
  std::vector<uint8_t> first = host[0];
  std::fill(host[0].begin(), host[0].end(), 0);
  io.reset_outputs();
  ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
  EXPECT_FALSE(io.outputs_match(c));
  host[0] = first;

  // Registered memory is host memory too: a copy source for any device, whatever the kind
  // says (device 1 here; it is registered for device 0).
  ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS) << last_error();
  {
    DeviceMem on1(host[0].size());
    for (kilnrtMemcpyKind kind : {KILN_MEMCPY_HOST_TO_DEVICE, KILN_MEMCPY_DEFAULT}) {
      on1.fill(0);
      ASSERT_EQ(kilnrtMemcpy(on1.get(), on1.size(), host[0].data(), host[0].size(), kind), KILN_SUCCESS)
          << last_error();
      EXPECT_EQ(on1.download(host[0].size()), host[0]);
    }
    std::vector<uint8_t> back(host[0].size());
    ASSERT_EQ(kilnrtMemcpy(back.data(), back.size(), host[0].data(), host[0].size(), KILN_MEMCPY_HOST_TO_HOST),
              KILN_SUCCESS)
        << last_error();
    EXPECT_EQ(back, host[0]);
  }
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();

  void* device = nullptr;
  // Registered twice, or overlapping device memory: refused.
  EXPECT_EQ(kilnrtHostRegister(host[0].data() + 4, 4, KILN_HOST_REGISTER_MAPPED, &device), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(std::string(last_error()).find("overlaps a registered host range"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtHostRegister(io.out_mem[0]->get(), 4, KILN_HOST_REGISTER_MAPPED, &device), KILN_ERROR_INVALID_MEMORY);
  // The owner frees it, not kilnrtFree; bad arguments.
  EXPECT_EQ(kilnrtFree(host[0].data()), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(std::string(last_error()).find("kilnrtHostUnregister"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtHostRegister(nullptr, 4, KILN_HOST_REGISTER_MAPPED, &device), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtHostRegister(host[0].data(), 0, KILN_HOST_REGISTER_MAPPED, &device), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtHostRegister(host[0].data(), 4, static_cast<kilnrtHostRegisterType>(7), &device),
            KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtHostUnregister(host[0].data() + 4), KILN_ERROR_INVALID_MEMORY);  // not a start
  EXPECT_EQ(kilnrtHostUnregister(io.out_mem[0]->get()), KILN_ERROR_INVALID_MEMORY);  // not registered

  // Unregistered, the memory is host memory again, which execution refuses.
  for (auto& h : host) EXPECT_EQ(kilnrtHostUnregister(h.data()), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtHostUnregister(host[0].data()), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(std::string(last_error()).find("is not device memory"), std::string::npos) << last_error();
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS) << last_error();
}

TEST_F(ModelApiTest, DescribesInputsAndOutputs) {
  // test_Conv2d: inputs '0' (x), '1' (W) and '2' (B), where W and B have initializers: the
  // model takes one input.
  const Case& c = backend_case("pytorch-converted/test_Conv2d");
  uint32_t id = load(c.kiln_path);
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  ASSERT_NE(desc, nullptr);
  ASSERT_EQ(kilnmdlGetDesc(desc, id), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnmdlGetNumInputs(desc), 1u);
  ASSERT_EQ(kilnmdlGetNumOutputs(desc), 1u);
  EXPECT_STREQ(kilnmdlGetInputNameByIndex(desc, 0), "0");
  EXPECT_STREQ(kilnmdlGetOutputNameByIndex(desc, 0), "3");
  EXPECT_EQ(kilnmdlGetInputDataType(desc, 0), KILN_FLOAT);
  EXPECT_EQ(kilnmdlGetOutputDataType(desc, 0), KILN_FLOAT);
  EXPECT_EQ(kilnmdlGetInputFormat(desc, 0), KILN_FORMAT_NCHW);
  EXPECT_EQ(kilnmdlGetInputSizeByIndex(desc, 0), 2u * 3 * 7 * 5 * 4);
  EXPECT_EQ(kilnmdlGetOutputSizeByIndex(desc, 0), 2u * 4 * 5 * 4 * 4);
  kilnmdlIODims dims;
  ASSERT_EQ(kilnmdlGetInputDims(desc, 0, &dims), KILN_SUCCESS) << last_error();
  EXPECT_STREQ(dims.name, "0");
  ASSERT_EQ(dims.dimCount, 4u);
  EXPECT_EQ(std::vector<int64_t>(dims.dims, dims.dims + 4), (std::vector<int64_t>{2, 3, 7, 5}));
  ASSERT_EQ(kilnmdlGetOutputDims(desc, 0, &dims), KILN_SUCCESS) << last_error();
  EXPECT_EQ(std::vector<int64_t>(dims.dims, dims.dims + dims.dimCount),
            (std::vector<int64_t>{2, 4, 5, 4}));
  size_t index = 9;
  EXPECT_EQ(kilnmdlGetInputIndexByName(desc, "0", &index), KILN_SUCCESS);
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(kilnmdlGetOutputIndexByName(desc, "3", &index), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlGetInputIndexByName(desc, "1", &index),
            KILN_ERROR_INVALID_PARAM);  // has an initializer
  EXPECT_TRUE(error_mentions("'1'")) << last_error();
  EXPECT_EQ(kilnmdlDestroyDesc(desc), KILN_SUCCESS);

  // A rank-2 model: ND format. Three inputs in graph order.
  const Case& gemm = backend_case("node/test_gemm_default_matrix_bias");
  uint32_t gemm_id = load(gemm.kiln_path);
  desc = kilnmdlCreateDesc();
  ASSERT_EQ(kilnmdlGetDesc(desc, gemm_id), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnmdlGetNumInputs(desc), 3u);
  EXPECT_STREQ(kilnmdlGetInputNameByIndex(desc, 2), "c");
  EXPECT_EQ(kilnmdlGetInputFormat(desc, 0), KILN_FORMAT_ND);
  EXPECT_EQ(kilnmdlGetOutputFormat(desc, 0), KILN_FORMAT_ND);
  EXPECT_EQ(kilnmdlDestroyDesc(desc), KILN_SUCCESS);

  // Dims not fixed at compile time are -1, and their size 0.
  uint32_t dyn = load(compile_text("dynamic_add", kDynamicAdd));
  desc = kilnmdlCreateDesc();
  ASSERT_EQ(kilnmdlGetDesc(desc, dyn), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnmdlGetInputDims(desc, 1, &dims), KILN_SUCCESS) << last_error();
  EXPECT_STREQ(dims.name, "y");
  EXPECT_EQ(std::vector<int64_t>(dims.dims, dims.dims + dims.dimCount),
            (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(kilnmdlGetInputSizeByIndex(desc, 0), 0u);
  EXPECT_EQ(kilnmdlDestroyDesc(desc), KILN_SUCCESS);
  for (uint32_t m : {id, gemm_id, dyn}) EXPECT_EQ(kilnmdlUnload(m), KILN_SUCCESS);
}

TEST_F(ModelApiTest, DynamicInputShapesComeFromTheDatasetAndOutputDimsGoBack) {
  uint32_t id = load(compile_text("dynamic_add", kDynamicAdd));
  for (int64_t n : {3, 1, 7}) {
    SCOPED_TRACE(n);
    std::vector<float> x(static_cast<size_t>(n) * 4), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = 0.5f * static_cast<float>(i);
      y[i] = 100.0f - static_cast<float>(i);
    }
    Io io;
    io.add_input(x.data(), x.size() * 4);
    io.add_input(y.data(), y.size() * 4);
    io.add_output(7 * 4 * 4);  // room for the largest n
    // Without the actual shape the execution cannot know n.
    EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_MODEL_INPUT_NOT_MATCH);
    EXPECT_TRUE(error_mentions("kilnmdlSetDatasetTensorDesc")) << last_error();
    int64_t dims[2] = {n, 4};
    for (size_t k = 0; k < 2; ++k) {
      kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 2, dims, KILN_FORMAT_ND);
      ASSERT_NE(d, nullptr) << last_error();
      ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io.input, d, k), KILN_SUCCESS) << last_error();
      kilnDestroyTensorDesc(d);  // the dataset keeps a copy
    }
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
    Tensor z = io.output_tensor(0);
    ASSERT_EQ(z.dims(), (std::vector<int64_t>{n, 4}));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(z.data<float>()[i], x[i] + y[i]) << i;
  }
  // A shape that contradicts a fixed dim is refused, naming the input and both shapes.
  Io io;
  std::vector<float> x(15);
  io.add_input(x.data(), 60);
  io.add_input(x.data(), 60);
  io.add_output(60);
  int64_t bad[2] = {3, 5};
  kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 2, bad, KILN_FORMAT_ND);
  ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io.input, d, 0), KILN_SUCCESS);
  ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io.input, d, 1), KILN_SUCCESS);
  kilnDestroyTensorDesc(d);
  EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_MODEL_INPUT_NOT_MATCH);
  EXPECT_TRUE(error_mentions("'x'") && error_mentions("[3,5]") && error_mentions("[?,4]"))
      << last_error();
  // The wrong data type in a desc is refused too.
  int64_t good[2] = {3, 4};
  d = kilnCreateTensorDesc(KILN_INT32, 2, good, KILN_FORMAT_ND);
  ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io.input, d, 0), KILN_SUCCESS);
  kilnDestroyTensorDesc(d);
  EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_MODEL_INPUT_NOT_MATCH);
  EXPECT_TRUE(error_mentions("int32")) << last_error();
  // An output larger than its buffer fails at run time, naming the output and the sizes.
  Io small;
  small.add_input(x.data(), 48);
  small.add_input(x.data(), 48);
  small.add_output(8);
  d = kilnCreateTensorDesc(KILN_FLOAT, 2, good, KILN_FORMAT_ND);
  ASSERT_EQ(kilnmdlSetDatasetTensorDesc(small.input, d, 0), KILN_SUCCESS);
  ASSERT_EQ(kilnmdlSetDatasetTensorDesc(small.input, d, 1), KILN_SUCCESS);
  kilnDestroyTensorDesc(d);
  EXPECT_EQ(kilnmdlExecute(id, small.input, small.output), KILN_ERROR_MODEL_OUTPUT_NOT_MATCH);
  EXPECT_TRUE(error_mentions("'z'") && error_mentions("48 bytes") && error_mentions("holds 8"))
      << last_error();
  EXPECT_TRUE(small.output_untouched(0));
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

// ---- Concurrency -----------------------------------------------------------------------------

TEST_F(ModelApiTest, EightThreadsExecuteOneModelConcurrently) {
  const Case& conv = backend_case("pytorch-converted/test_Conv2d");
  const Case& loop = backend_case("node/test_loop11");
  uint32_t conv_id = load(conv.kiln_path);
  uint32_t loop_id = load(loop.kiln_path);
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  constexpr int kThreads = 8, kRuns = 6;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Contexts are thread-current: each thread sets its device.
      ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
      const Case& c = t % 2 ? loop : conv;
      uint32_t id = t % 2 ? loop_id : conv_id;
      Io io(c);
      for (int r = 0; r < kRuns; ++r) {
        io.reset_outputs();
        ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
        ASSERT_TRUE(io.outputs_match(c)) << "thread " << t << " run " << r;
        ++successes;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(successes.load(), kThreads * kRuns);
  auto model = kiln::rt::ModelTable::get().find(conv_id);
  ASSERT_NE(model, nullptr);
  kiln::rt::Model::Stats stats = model->stats();
  EXPECT_EQ(stats.executions, static_cast<uint64_t>(kThreads / 2 * kRuns));
  EXPECT_GE(stats.contexts, 1u);
  EXPECT_LE(stats.contexts, static_cast<size_t>(kThreads / 2));
  EXPECT_EQ(kilnmdlUnload(conv_id), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlUnload(loop_id), KILN_SUCCESS);
}

// The executor itself (below the C API, where no engine lock serializes): one prepared
// executor of a Loop model run from 8 threads at once.
TEST(GraphExecutorConcurrencyTest, OneExecutorRunsFromManyThreadsAtOnce) {
  const Case& c = backend_case("node/test_loop11");
  auto loaded = kiln::model::load_model(c.kiln_path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto executor = kiln::rt::GraphExecutor::create(loaded->graph);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  const kiln::rt::GraphExecutor& ex = **executor;
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        std::vector<std::pair<size_t, kiln::RuntimeValue>> feeds;
        for (size_t i = 0; i < c.inputs.size(); ++i) feeds.emplace_back(i, c.inputs[i]);
        std::vector<kiln::RuntimeValue> outs;
        kiln::Status st = ex.run_indexed(feeds, &outs);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(outs.size(), c.expected.size());
        for (size_t i = 0; i < outs.size(); ++i)
          ASSERT_TRUE(tensors_match(outs[i].tensor(), c.expected[i]));
        ++successes;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(successes.load(), 8 * 20);
}

TEST_F(ModelApiTest, AsyncExecutionsOnTwoStreamsOfTwoDevices) {
  const Case& c = backend_case("pytorch-converted/test_Conv2d");
  constexpr int kPerStream = 4;
  struct DeviceWork {
    uint32_t model = 0;
    kilnrtStream streams[2] = {nullptr, nullptr};
    std::vector<std::unique_ptr<Io>> ios;
  };
  DeviceWork work[2];
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(kilnrtSetDevice(d), KILN_SUCCESS) << last_error();
    work[d].model = load(c.kiln_path);
    for (auto& s : work[d].streams) ASSERT_EQ(kilnrtCreateStream(&s), KILN_SUCCESS) << last_error();
    for (int k = 0; k < 2 * kPerStream; ++k) work[d].ios.push_back(std::make_unique<Io>(c));
  }
  // Submit everything, alternating devices, then wait.
  for (int k = 0; k < kPerStream; ++k)
    for (int d = 0; d < 2; ++d) {
      ASSERT_EQ(kilnrtSetDevice(d), KILN_SUCCESS);
      for (int s = 0; s < 2; ++s) {
        Io& io = *work[d].ios[static_cast<size_t>(s * kPerStream + k)];
        ASSERT_EQ(kilnmdlExecuteAsync(work[d].model, io.input, io.output, work[d].streams[s]),
                  KILN_SUCCESS)
            << last_error();
      }
    }
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(kilnrtSetDevice(d), KILN_SUCCESS);
    for (auto& s : work[d].streams)
      ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
    for (auto& io : work[d].ios) EXPECT_TRUE(io->outputs_match(c)) << "device " << d;
  }
  // A model runs only on its own device's streams.
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  Io& io0 = *work[0].ios[0];
  EXPECT_EQ(kilnmdlExecuteAsync(work[1].model, io0.input, io0.output, work[0].streams[0]),
            KILN_ERROR_RT_STREAM_CONTEXT);
  EXPECT_TRUE(error_mentions("cpu:1") && error_mentions("cpu:0")) << last_error();
  // And synchronously only with its device's context current.
  EXPECT_EQ(kilnmdlExecute(work[1].model, io0.input, io0.output), KILN_ERROR_RESOURCE_NOT_MATCH);
  // The default stream (NULL) works too.
  io0.reset_outputs();
  ASSERT_EQ(kilnmdlExecuteAsync(work[0].model, io0.input, io0.output, nullptr), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(nullptr), KILN_SUCCESS) << last_error();
  EXPECT_TRUE(io0.outputs_match(c));
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(kilnrtSetDevice(d), KILN_SUCCESS);
    work[d].ios.clear();
    for (auto& s : work[d].streams) EXPECT_EQ(kilnrtDestroyStream(s), KILN_SUCCESS) << last_error();
    EXPECT_EQ(kilnmdlUnload(work[d].model), KILN_SUCCESS);
  }
}

// Holds a stream in a blocking host callback until released.
struct Gate {
  std::atomic<bool> open{false};
  static void wait(void* p) {
    auto* g = static_cast<Gate*>(p);
    while (!g->open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

TEST_F(ModelApiTest, ExecuteAsyncReturnsBeforeTheExecutionAndUnloadWaitsForIt) {
  const Case& c = backend_case("pytorch-converted/test_Conv2d");
  uint32_t id = load(c.kiln_path);
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS) << last_error();
  Io io(c);
  Gate gate;
  ASSERT_EQ(kilnrtLaunchCallback(&Gate::wait, &gate, KILN_CALLBACK_BLOCK, stream), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnmdlExecuteAsync(id, io.input, io.output, stream), KILN_SUCCESS) << last_error();
  // Submitted, not run: the stream is held by the callback.
  kilnrtStreamStatus status = KILN_STREAM_STATUS_COMPLETE;
  ASSERT_EQ(kilnrtStreamQuery(stream, &status), KILN_SUCCESS);
  EXPECT_EQ(status, KILN_STREAM_STATUS_NOT_READY);
  EXPECT_TRUE(io.output_untouched(0));
  // Unload waits for the queued execution.
  std::atomic<bool> unloaded{false};
  std::thread unloader([&] {
    EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS) << last_error();
    unloaded = true;
  });
  // Once the id is gone, new executions are refused...
  while (kiln::rt::ModelTable::get().find(id)) std::this_thread::yield();
  EXPECT_EQ(kilnmdlExecuteAsync(id, io.input, io.output, stream), KILN_ERROR_INVALID_MODEL_ID);
  // ...but the one in flight still runs, and unload returns only after it.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(unloaded.load());
  gate.open = true;
  unloader.join();
  EXPECT_TRUE(unloaded.load());
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  EXPECT_TRUE(io.outputs_match(c));
  EXPECT_EQ(kilnrtDestroyStream(stream), KILN_SUCCESS);
}

TEST_F(ModelApiTest, FailingAsyncExecutionPutsTheStreamInErrorState) {
  uint32_t id = load(compile_text("dynamic_add", kDynamicAdd));
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS) << last_error();
  std::vector<float> x(12, 1.5f);
  int64_t dims[2] = {3, 4};
  kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 2, dims, KILN_FORMAT_ND);
  // `bad` has an 8-byte output buffer for a 48-byte output: valid at submission (the
  // output size is not known then), failing when the execution runs.
  Io bad, good;
  for (Io* io : {&bad, &good}) {
    io->add_input(x.data(), 48);
    io->add_input(x.data(), 48);
    io->add_output(io == &bad ? 8 : 48);
    ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io->input, d, 0), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io->input, d, 1), KILN_SUCCESS);
  }
  kilnDestroyTensorDesc(d);
  ASSERT_EQ(kilnmdlExecuteAsync(id, bad.input, bad.output, stream), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnmdlExecuteAsync(id, good.input, good.output, stream), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtSynchronizeStream(stream), KILN_ERROR_RT_TASK_FAILED);
  EXPECT_TRUE(error_mentions("'z'") && error_mentions("holds 8")) << last_error();
  // The execution queued after the failure was skipped; the error state is cleared.
  EXPECT_TRUE(good.output_untouched(0));
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnmdlExecuteAsync(id, good.input, good.output, stream), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  Tensor z = good.output_tensor(0);
  ASSERT_EQ(z.dims(), (std::vector<int64_t>{3, 4}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(z.data<float>()[i], 3.0f);
  EXPECT_EQ(kilnrtDestroyStream(stream), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

TEST_F(ModelApiTest, KernelFailureIsAnErrorCodeNamingTheNode) {
  // Gather with an index out of range: the bytes are valid, the kernel refuses them.
  const Case& c = backend_case("pytorch-converted/test_Embedding");
  uint32_t id = load(c.kiln_path);
  std::vector<int64_t> indices(c.inputs[0].num_elements(), 1000);
  Io io;
  io.add_input(indices.data(), indices.size() * sizeof(int64_t));
  io.add_output(c.expected[0].size_bytes());
  EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_FAILURE);
  EXPECT_TRUE(error_mentions("kilnmdlExecute") && error_mentions("Gather")) << last_error();
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

TEST_F(ModelApiTest, ManyModelsLoadedAtOnce) {
  const Case& conv = backend_case("pytorch-converted/test_Conv2d");
  const Case& iff = backend_case("node/test_if");
  std::vector<uint8_t> bytes = read_bytes(conv.kiln_path);
  std::vector<std::pair<uint32_t, const Case*>> models;
  for (int i = 0; i < 12; ++i) {
    uint32_t id = 0;
    if (i % 3 == 0) {
      ASSERT_EQ(kilnmdlLoadFromMem(bytes.data(), bytes.size(), &id), KILN_SUCCESS) << last_error();
      models.emplace_back(id, &conv);
    } else if (i % 3 == 1) {
      models.emplace_back(load(conv.kiln_path), &conv);
    } else {
      models.emplace_back(load(iff.kiln_path), &iff);
    }
  }
  for (size_t i = 0; i < models.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_NE(models[i].first, models[j].first);
  EXPECT_EQ(kiln::rt::ModelTable::get().size(), models.size());
  // Interleaved executions of all of them.
  for (int round = 0; round < 2; ++round)
    for (auto& [id, c] : models) {
      Io io(*c);
      ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
      EXPECT_TRUE(io.outputs_match(*c)) << "model " << id;
    }
  for (auto& [id, c] : models) EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
  EXPECT_EQ(kiln::rt::ModelTable::get().size(), 0u);
}

TEST_F(ModelApiTest, SteadyStateExecutionsAllocateNoActivations) {
  const Case& c = backend_case("pytorch-converted/test_GLU");
  uint32_t id = load(c.kiln_path);
  auto model = kiln::rt::ModelTable::get().find(id);
  ASSERT_NE(model, nullptr);
  Io io(c);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
  kiln::rt::Model::Stats warm = model->stats();
  // The .kiln's arena plan serves every activation from the first execution on: none from the
  // context's arena.
  EXPECT_EQ(warm.arenas.fresh_blocks, 0u);
  EXPECT_GT(warm.planned_outputs, 0u);
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
  EXPECT_TRUE(io.outputs_match(c));
  kiln::rt::Model::Stats steady = model->stats();
  EXPECT_EQ(steady.contexts, 1u);
  EXPECT_EQ(steady.arenas.fresh_blocks, warm.arenas.fresh_blocks);  // everything reused
  // Outputs take the tensors finished values left (the execution state's pool), or else the
  // arena's free blocks.
  EXPECT_GT(steady.recycled_outputs + steady.arenas.reused_blocks,
            warm.recycled_outputs + warm.arenas.reused_blocks);
  EXPECT_GT(steady.recycled_outputs, warm.recycled_outputs);
  // Nothing held between executions but the blocks parked for the next one.
  EXPECT_EQ(steady.arenas.in_use, steady.parked_bytes);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

// z = Relu(x + y) * x with the first dim open: values in between, so activations are
// allocated and recycled.
const char* kDynamicChain = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  dynamic_chain (float[N, 64] x, float[N, 64] y) => (float[N, 64] z) {
    s = Add(x, y)
    r = Relu(s)
    z = Mul(r, x)
  }
)";

// Runs dynamic_chain at batch n and checks z against the same arithmetic done here.
void run_chain(uint32_t id, int64_t n) {
  SCOPED_TRACE(n);
  std::vector<float> x(static_cast<size_t>(n) * 64), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.25f * static_cast<float>(i % 37) - 3.0f;
    y[i] = 2.0f - 0.125f * static_cast<float>(i % 29);
  }
  Io io;
  io.add_input(x.data(), x.size() * 4);
  io.add_input(y.data(), y.size() * 4);
  io.add_output(x.size() * 4);
  int64_t dims[2] = {n, 64};
  for (size_t k = 0; k < 2; ++k) {
    kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 2, dims, KILN_FORMAT_ND);
    ASSERT_EQ(kilnmdlSetDatasetTensorDesc(io.input, d, k), KILN_SUCCESS) << last_error();
    kilnDestroyTensorDesc(d);
  }
  ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
  Tensor z = io.output_tensor(0);
  ASSERT_EQ(z.dims(), (std::vector<int64_t>{n, 64}));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(z.data<float>()[i], std::max(x[i] + y[i], 0.0f) * x[i]) << i;
}

TEST_F(ModelApiTest, EachShapeSignatureKeepsItsActivationsAcrossShapeChanges) {
  uint32_t id = load(compile_text("dynamic_chain", kDynamicChain));
  auto model = kiln::rt::ModelTable::get().find(id);
  ASSERT_NE(model, nullptr);
  for (int64_t n : {3, 5}) run_chain(id, n);
  kiln::rt::Model::Stats warm = model->stats();
  EXPECT_EQ(warm.shape_signatures, 2u);
  // Alternating shapes: every activation comes back from its signature's own state, so the
  // arena is not asked for a block (a single state would give back and re-take the blocks
  // of the other shape at every change).
  for (int round = 0; round < 6; ++round)
    for (int64_t n : {3, 5}) run_chain(id, n);
  kiln::rt::Model::Stats steady = model->stats();
  EXPECT_EQ(steady.shape_signatures, 2u);
  EXPECT_EQ(steady.arenas.fresh_blocks, warm.arenas.fresh_blocks);
  EXPECT_EQ(steady.arenas.reused_blocks, warm.arenas.reused_blocks);
  EXPECT_GT(steady.recycled_outputs, warm.recycled_outputs);
  EXPECT_EQ(steady.arenas.in_use, steady.parked_bytes);
  // Many shapes: the states stay within their bound, the least recently used go, and every
  // execution is still right.
  for (int64_t n = 1; n <= 20; ++n) run_chain(id, n);
  kiln::rt::Model::Stats many = model->stats();
  EXPECT_LE(many.shape_signatures, kiln::rt::SignatureStates::kMaxStates);
  EXPECT_GE(many.evicted_signatures, 20u - kiln::rt::SignatureStates::kMaxStates);
  // Nothing in use but parked blocks; a block may be up to twice the size it serves (the
  // arena's best fit), which the arena counts and the pool does not.
  EXPECT_LE(many.parked_bytes, many.arenas.in_use);
  EXPECT_LE(many.arenas.in_use, 2 * many.parked_bytes);
  for (int64_t n : {20, 3}) run_chain(id, n);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

TEST_F(ModelApiTest, ModelsAreReleasedAtFinalize) {
  const Case& c = backend_case("pytorch-converted/test_Conv2d");
  uint32_t id = load(c.kiln_path);
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS);
  Io* io = new Io(c);
  ASSERT_EQ(kilnmdlExecuteAsync(id, io->input, io->output, stream), KILN_SUCCESS) << last_error();
  // kilnFinalize waits for the work, then releases the model (and the device memory).
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kiln::rt::ModelTable::get().size(), 0u);
  EXPECT_EQ(kilnmdlUnload(id), KILN_ERROR_UNINITIALIZE);
  ASSERT_EQ(kilnInit(config_.c_str()), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnmdlUnload(id), KILN_ERROR_INVALID_MODEL_ID);
  // The datasets and buffers are host objects that outlive the runtime; their device
  // memory went with kilnFinalize, so only the handles are released here.
  for (auto& m : io->in_mem) m->forget();
  for (auto& m : io->out_mem) m->forget();
  delete io;
}

// ---- Caller workspaces ---------------------------------------------------------------------

TEST_F(ModelApiTest, QuerySizeAndLoadWithCallerWorkspace) {
  const Case& c = backend_case("pytorch-converted/test_Conv2d");
  size_t work = 0, weight = 0;
  {
    // Weights as the ONNX model has them (compiled without pre-packing): W float32[4,3,3,2]
    // and B float32[4].
    kiln::compiler::CompileOptions plain;
    plain.prepack_weights = false;
    auto compiled = kiln::compiler::compile_onnx_file(
        backend_dir() + "/pytorch-converted/test_Conv2d/model.onnx", plain);
    ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
    const std::string path = write_kiln(*compiled, "test_Conv2d_plain");
    ASSERT_EQ(kilnmdlQuerySize(path.c_str(), &work, &weight), KILN_SUCCESS) << last_error();
    EXPECT_EQ(weight, (4u * 3 * 3 * 2 + 4) * 4);
  }
  // Pre-packed (as `kiln compile` writes it): the weights the loaded model reads, W in the
  // convolution's layout, not its original, which stays in the file's cold tail.
  ASSERT_EQ(kilnmdlQuerySize(c.kiln_path.c_str(), &work, &weight), KILN_SUCCESS) << last_error();
  auto loaded = kiln::model::load_model(c.kiln_path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->cold_tail_mapped);
  EXPECT_EQ(loaded->cold_weight_bytes, 4u * 3 * 3 * 2 * 4);  // W alone
  size_t packed = 0;
  for (const auto& node : loaded->graph->nodes())
    if (const kiln::ir::Attribute* a = node->attr(kiln::ir::kPrepackedAttr))
      for (const kiln::Tensor& t : a->tensors) packed += t.size_bytes();
  EXPECT_GE(packed, 4u * 3 * 3 * 2 * 4);
  EXPECT_EQ(weight, 4u * 4 + packed);  // B and the packed W
  // At least the output, float32[2,4,5,4], must fit.
  EXPECT_GE(work, 2u * 4 * 5 * 4 * 4);

  uint32_t id = 0;
  {
    DeviceMem small(work - 64);
    EXPECT_EQ(
        kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, small.get(), small.size(), nullptr, 0),
        KILN_ERROR_INVALID_PARAM);
    EXPECT_TRUE(error_mentions("kilnmdlQuerySize")) << last_error();
  }
  std::vector<uint8_t> host(work + 64);
  void* host_aligned = host.data() + (64 - reinterpret_cast<uintptr_t>(host.data()) % 64) % 64;
  EXPECT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, host_aligned, work, nullptr, 0),
            KILN_ERROR_INVALID_MEMORY);
  EXPECT_TRUE(error_mentions("not device memory")) << last_error();
  void* pinned = nullptr;
  ASSERT_EQ(kilnrtMallocHost(&pinned, work), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, pinned, work, nullptr, 0),
            KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtFreeHost(pinned), KILN_SUCCESS);
  DeviceMem workspace(work + 64);
  EXPECT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id,
                                       static_cast<char*>(workspace.get()) + 8, work, nullptr, 0),
            KILN_ERROR_MEMORY_ADDRESS_UNALIGNED);
  int weights_elsewhere = 0;
  EXPECT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, workspace.get(), work,
                                       &weights_elsewhere, 4),
            KILN_ERROR_FEATURE_UNSUPPORTED);
  {
    // Device 1's memory while device 0 is current.
    ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS);
    DeviceMem other(work);
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
    EXPECT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, other.get(), work, nullptr, 0),
              KILN_ERROR_INVALID_MEMORY);
    EXPECT_TRUE(error_mentions("cpu:1")) << last_error();
    ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS);
  }
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);

  // Exactly the queried size works, from several threads (one execution at a time).
  ASSERT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, workspace.get(), work, nullptr, 0),
            KILN_SUCCESS)
      << last_error();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
      Io io(c);
      for (int r = 0; r < 5; ++r) {
        io.reset_outputs();
        ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
        ASSERT_TRUE(io.outputs_match(c));
      }
    });
  for (auto& th : threads) th.join();
  auto model = kiln::rt::ModelTable::get().find(id);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->stats().contexts, 1u);
  EXPECT_LE(model->stats().arenas.peak_in_use, work);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);

  // A workspace freed while the model is loaded is refused at the next execution.
  {
    auto ws = std::make_unique<DeviceMem>(work);
    ASSERT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, ws->get(), work, nullptr, 0),
              KILN_SUCCESS)
        << last_error();
    // The I/O buffers first: allocated after the free, they could take the freed address
    // (the check is of live allocations, and a new one there is live: 1 run in 23 here).
    Io io(c);
    ws->free_now();
    EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_INVALID_MEMORY);
    EXPECT_TRUE(error_mentions("workspace")) << last_error();
    EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
  }

  // A NULL workPtr leaves the activations to the runtime (as AscendCL does).
  ASSERT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, nullptr, 0, nullptr, 0),
            KILN_SUCCESS);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

TEST_F(ModelApiTest, WorkspaceOfIfModelsIsBoundedAndOfOthersRefused) {
  const Case& iff = backend_case("node/test_if");
  size_t work = 0, weight = 0;
  ASSERT_EQ(kilnmdlQuerySize(iff.kiln_path.c_str(), &work, &weight), KILN_SUCCESS) << last_error();
  DeviceMem workspace(work);
  uint32_t id = 0;
  ASSERT_EQ(
      kilnmdlLoadFromFileWithMem(iff.kiln_path.c_str(), &id, workspace.get(), work, nullptr, 0),
      KILN_SUCCESS)
      << last_error();
  Io io(iff);
  ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
  EXPECT_TRUE(io.outputs_match(iff));
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);

  // A Loop's trip count is known only at run time; so are dims not fixed.
  const Case& loop = backend_case("node/test_loop11");
  EXPECT_EQ(kilnmdlQuerySize(loop.kiln_path.c_str(), &work, &weight),
            KILN_ERROR_FEATURE_UNSUPPORTED);
  EXPECT_TRUE(error_mentions("Loop") && error_mentions("cannot be bounded")) << last_error();
  std::string dyn = compile_text("dynamic_add", kDynamicAdd);
  EXPECT_EQ(kilnmdlQuerySize(dyn.c_str(), &work, &weight), KILN_ERROR_FEATURE_UNSUPPORTED);
  EXPECT_TRUE(error_mentions("not fixed")) << last_error();
  DeviceMem some(4096);
  EXPECT_EQ(kilnmdlLoadFromFileWithMem(dyn.c_str(), &id, some.get(), some.size(), nullptr, 0),
            KILN_ERROR_FEATURE_UNSUPPORTED);
}

// The .kiln's arena plan is what runs: kilnmdlQuerySize's work size is the arena the compiler
// plans for the graph (model::plan_arena, which `kiln compile --report` prints as
// runtime_arena_bytes), a workspace of exactly that size runs the model to its ONNX test data
// with every activation in the plan and none outside it, and one byte less is refused at load.
TEST_F(ModelApiTest, AWorkspaceOfExactlyThePlannedArenaRunsTheModel) {
  // With `computes` false, the model is one view of its input (Flatten, Reshape): its planned
  // output is never asked for, the runtime views the input instead.
  const struct {
    const char* test;
    bool computes;
  } tests[] = {{"pytorch-converted/test_Conv2d", true},          {"pytorch-converted/test_BatchNorm2d_eval", true},
               {"pytorch-converted/test_MaxPool2d", true},       {"pytorch-converted/test_Linear", true},
               {"pytorch-operator/test_operator_flatten", false}, {"pytorch-operator/test_operator_view", false},
               {"pytorch-operator/test_operator_chunk", true},    {"pytorch-operator/test_operator_conv", true},
               {"node/test_softmax_example", true}};
  for (const auto& [test, computes] : tests) {
    SCOPED_TRACE(test);
    const Case& c = backend_case(test);
    auto compiled = kiln::compiler::compile_onnx_file(backend_dir() + "/" + test + "/model.onnx", {});
    ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
    auto planned = kiln::model::plan_arena(*compiled->graph);
    ASSERT_TRUE(planned.ok() && planned->has_value());
    size_t work = 0, weight = 0;
    ASSERT_EQ(kilnmdlQuerySize(c.kiln_path.c_str(), &work, &weight), KILN_SUCCESS) << last_error();
    EXPECT_EQ(work, (*planned)->arena_bytes);

    DeviceMem workspace(work);
    uint32_t id = 0;
    EXPECT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, workspace.get(), work - 1, nullptr, 0),
              KILN_ERROR_INVALID_PARAM);
    EXPECT_TRUE(error_mentions("kilnmdlQuerySize")) << last_error();
    ASSERT_EQ(kilnmdlLoadFromFileWithMem(c.kiln_path.c_str(), &id, workspace.get(), work, nullptr, 0), KILN_SUCCESS)
        << last_error();
    for (int r = 0; r < 3; ++r) {
      Io io(c);
      ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << "execution " << r << ": " << last_error();
      EXPECT_TRUE(io.outputs_match(c)) << "execution " << r;
    }
    auto model = kiln::rt::ModelTable::get().find(id);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->stats().planned_outputs > 0, computes);
    EXPECT_EQ(model->stats().planned_bytes, computes ? work : 0);
    EXPECT_EQ(model->stats().arenas.peak_in_use, 0u) << "activations outside the plan";
    EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);

    // Without a workspace: the same plan, in a block of the context's own, from the first execution.
    id = load(c.kiln_path);
    Io io(c);
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
    EXPECT_TRUE(io.outputs_match(c));
    model = kiln::rt::ModelTable::get().find(id);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->stats().planned_bytes, computes ? work : 0);
    EXPECT_EQ(model->stats().planned_outputs > 0, computes);
    EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
  }
}

// ---- Activation arenas (below the C API) -----------------------------------------------------

TEST(ExecutionArenaTest, WorkspaceArenaRefusesRatherThanOverruns) {
  alignas(64) static char workspace[256];
  auto arena = std::make_shared<kiln::rt::ExecutionArena>(workspace, sizeof(workspace));
  arena->begin_run();
  {
    kiln::TensorAllocatorScope scope(arena);
    auto a = Tensor::allocate(DataType::kFloat32, {32});  // 128 bytes
    ASSERT_TRUE(a.ok());
    EXPECT_GE(static_cast<char*>(a->raw_data()), workspace);
    EXPECT_LT(static_cast<char*>(a->raw_data()), workspace + sizeof(workspace));
    auto b = Tensor::allocate(DataType::kFloat32, {40});  // 160 bytes rounds to 192: no room
    EXPECT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), kiln::StatusCode::kResourceExhausted);
    size_t refused = 0;
    EXPECT_TRUE(arena->refused(&refused));
    EXPECT_EQ(refused, 192u);
    // Kernels that cannot fail (Tensor::make) get heap memory; the refusal stays recorded.
    Tensor c = Tensor::make(DataType::kFloat32, {40});
    EXPECT_TRUE(c.raw_data() < workspace || c.raw_data() >= workspace + sizeof(workspace));
    // String tensors never come from the arena.
    auto s = Tensor::allocate(DataType::kString, {2});
    ASSERT_TRUE(s.ok());
    // A freed block is reused for the same size.
    void* first = a->raw_data();
    *a = Tensor();
    auto again = Tensor::allocate(DataType::kInt32, {32});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->raw_data(), first);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(again->data<int32_t>()[i], 0);  // zeroed
  }
  EXPECT_EQ(arena->stats().in_use, 0u);
  arena->begin_run();
  EXPECT_FALSE(arena->refused());
  // Outside a scope, tensors come from the heap.
  Tensor h = Tensor::make(DataType::kFloat32, {4});
  EXPECT_TRUE(h.raw_data() < workspace || h.raw_data() >= workspace + sizeof(workspace));
  EXPECT_EQ(kiln::current_tensor_allocator(), nullptr);
}

TEST(ExecutionArenaTest, HeapArenaReusesBlocksAndTrimsSizesNoLongerUsed) {
  auto arena = std::make_shared<kiln::rt::ExecutionArena>();
  Tensor kept;
  for (int run = 0; run < 3; ++run) {
    arena->begin_run();
    kiln::TensorAllocatorScope scope(arena);
    Tensor a = Tensor::make(DataType::kFloat32, {100});
    Tensor b = Tensor::make(DataType::kFloat32, {1000});
    if (run == 0) kept = a;  // outlives the scope; its deleter returns it later
  }
  kiln::rt::ExecutionArena::Stats s = arena->stats();
  EXPECT_EQ(s.fresh_blocks, 3u);  // run 0: a, b; run 1: a again while `kept` holds the first
  EXPECT_EQ(s.in_use, 448u);
  kept = Tensor();
  EXPECT_EQ(arena->stats().in_use, 0u);
  // Sizes unused for several executions stay while the arena holds at most four times the largest
  // peak of the last 16 executions, and go back to the heap once those executions are past.
  for (int run = 0; run < 6; ++run) arena->begin_run();
  EXPECT_GT(arena->stats().held, 0u);
  for (int run = 0; run < 16; ++run) arena->begin_run();
  EXPECT_EQ(arena->stats().held, 0u);
}

TEST(ExecutionArenaTest, HeapArenaKeepsTheBlocksOfShapesItAlternatesBetween) {
  // Five sizes in rotation (a model with open dims fed five shapes in turn): each is unused
  // for four executions at a time, and all five together stay under twice the largest.
  // Blocks come in size classes (16000 B -> 16384, 6400 -> 7168, 4000 -> 4032, 3200, 2000 ->
  // 2048) and a request takes a free block of up to twice its class: 4000 B reuses the 7168-B
  // block and 2000 B the 3200-B one, so only three blocks are ever made.
  auto arena = std::make_shared<kiln::rt::ExecutionArena>();
  const int64_t sizes[] = {4000, 1600, 1000, 800, 500};
  for (int run = 0; run < 20; ++run) {
    arena->begin_run();
    kiln::TensorAllocatorScope scope(arena);
    Tensor t = Tensor::make(DataType::kFloat32, {sizes[run % 5]});
    if (run == 4) EXPECT_EQ(arena->stats().fresh_blocks, 3u);
  }
  EXPECT_EQ(arena->stats().fresh_blocks, 3u);  // every later execution reused a block
  EXPECT_EQ(arena->stats().reused_blocks, 17u);
}

// ---- Misuse ----------------------------------------------------------------------------------

TEST_F(ModelApiTest, MisuseReturnsErrorCodes) {
  const Case& c = backend_case("node/test_add");
  uint32_t id = load(c.kiln_path);
  Io io(c);

  // Unknown model ids.
  EXPECT_EQ(kilnmdlExecute(id + 1000, io.input, io.output), KILN_ERROR_INVALID_MODEL_ID);
  EXPECT_TRUE(error_mentions("kilnmdlExecute") && error_mentions(std::to_string(id + 1000)))
      << last_error();
  EXPECT_EQ(kilnmdlExecuteAsync(id + 1000, io.input, io.output, nullptr),
            KILN_ERROR_INVALID_MODEL_ID);
  EXPECT_EQ(kilnmdlUnload(id + 1000), KILN_ERROR_INVALID_MODEL_ID);
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  EXPECT_EQ(kilnmdlGetDesc(desc, id + 1000), KILN_ERROR_INVALID_MODEL_ID);
  // A desc not filled, indices out of range.
  EXPECT_EQ(kilnmdlGetInputNameByIndex(desc, 0), nullptr);
  EXPECT_TRUE(error_mentions("kilnmdlGetDesc")) << last_error();
  ASSERT_EQ(kilnmdlGetDesc(desc, id), KILN_SUCCESS);
  kilnmdlIODims dims;
  EXPECT_EQ(kilnmdlGetInputDims(desc, 2, &dims), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlGetOutputDims(desc, 0, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlGetOutputSizeByIndex(desc, 1), 0u);
  EXPECT_EQ(kilnmdlGetInputDataType(desc, 5), KILN_DT_UNDEFINED);
  EXPECT_EQ(kilnmdlDestroyDesc(desc), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlDestroyDesc(desc), KILN_ERROR_INVALID_PARAM);  // twice

  // Host memory where device memory belongs.
  const Tensor& x = c.inputs[0];
  {
    Io host;
    host.add(host.input, const_cast<void*>(x.raw_data()), x.size_bytes());
    host.add_input(c.inputs[1].raw_data(), c.inputs[1].size_bytes());
    host.add_output(c.expected[0].size_bytes());
    EXPECT_EQ(kilnmdlExecute(id, host.input, host.output), KILN_ERROR_INVALID_MEMORY);
    EXPECT_TRUE(error_mentions("input 0 ('x')") && error_mentions("not device memory"))
        << last_error();
    EXPECT_EQ(kilnmdlExecuteAsync(id, host.input, host.output, nullptr), KILN_ERROR_INVALID_MEMORY);
  }
  {
    std::vector<float> out(60);
    Io host;
    host.add_input(x.raw_data(), x.size_bytes());
    host.add_input(c.inputs[1].raw_data(), c.inputs[1].size_bytes());
    host.add(host.output, out.data(), out.size() * 4);
    EXPECT_EQ(kilnmdlExecute(id, host.input, host.output), KILN_ERROR_INVALID_MEMORY);
    EXPECT_TRUE(error_mentions("output 0 ('sum')")) << last_error();
  }
  {
    // Pinned host memory, and device memory of the other device.
    void* pinned = nullptr;
    ASSERT_EQ(kilnrtMallocHost(&pinned, x.size_bytes()), KILN_SUCCESS);
    ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS);
    auto other = std::make_unique<DeviceMem>(x.size_bytes());
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
    for (void* p : {pinned, other->get()}) {
      Io mixed;
      mixed.add(mixed.input, p, x.size_bytes());
      mixed.add_input(c.inputs[1].raw_data(), c.inputs[1].size_bytes());
      mixed.add_output(c.expected[0].size_bytes());
      EXPECT_EQ(kilnmdlExecute(id, mixed.input, mixed.output), KILN_ERROR_INVALID_MEMORY);
      EXPECT_TRUE(error_mentions(p == pinned ? "pinned host memory" : "device cpu:1"))
          << last_error();
    }
    ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS);
    other.reset();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
    EXPECT_EQ(kilnrtFreeHost(pinned), KILN_SUCCESS);
  }
  {
    // A freed device pointer.
    Io freed(c);
    freed.in_mem[0]->free_now();
    EXPECT_EQ(kilnmdlExecute(id, freed.input, freed.output), KILN_ERROR_INVALID_MEMORY);
  }
  {
    // Wrong counts, buffers too small.
    Io one;
    one.add_input(x.raw_data(), x.size_bytes());
    one.add_output(c.expected[0].size_bytes());
    EXPECT_EQ(kilnmdlExecute(id, one.input, one.output), KILN_ERROR_MODEL_INPUT_NOT_MATCH);
    EXPECT_TRUE(error_mentions("takes 2 inputs") && error_mentions("has 1")) << last_error();
    Io no_output;
    no_output.add_input(x.raw_data(), x.size_bytes());
    no_output.add_input(x.raw_data(), x.size_bytes());
    EXPECT_EQ(kilnmdlExecute(id, no_output.input, no_output.output),
              KILN_ERROR_MODEL_OUTPUT_NOT_MATCH);
    Io short_input;
    short_input.add_input(x.raw_data(), x.size_bytes() - 4);
    short_input.add_input(x.raw_data(), x.size_bytes());
    short_input.add_output(c.expected[0].size_bytes());
    EXPECT_EQ(kilnmdlExecute(id, short_input.input, short_input.output),
              KILN_ERROR_MODEL_INPUT_NOT_MATCH);
    EXPECT_TRUE(error_mentions("'x'") && error_mentions("needs 240 bytes") &&
                error_mentions("holds 236"))
        << last_error();
    Io short_output;
    short_output.add_input(x.raw_data(), x.size_bytes());
    short_output.add_input(x.raw_data(), x.size_bytes());
    short_output.add_output(c.expected[0].size_bytes() - 1);
    EXPECT_EQ(kilnmdlExecute(id, short_output.input, short_output.output),
              KILN_ERROR_MODEL_OUTPUT_NOT_MATCH);
    EXPECT_TRUE(error_mentions("'sum'") && error_mentions("needs 240 bytes")) << last_error();
    // An output buffer that claims more than its allocation holds.
    Io overclaim;
    overclaim.add_input(x.raw_data(), x.size_bytes());
    overclaim.add_input(x.raw_data(), x.size_bytes());
    overclaim.out_mem.push_back(std::make_unique<DeviceMem>(c.expected[0].size_bytes()));
    overclaim.add(overclaim.output, overclaim.out_mem[0]->get(),
                  c.expected[0].size_bytes() + (1 << 20));
    EXPECT_EQ(kilnmdlExecute(id, overclaim.input, overclaim.output), KILN_ERROR_INVALID_MEMORY);
    EXPECT_TRUE(error_mentions("runs past the end")) << last_error();
  }
  {
    // Null and dead handles.
    EXPECT_EQ(kilnmdlExecute(id, nullptr, io.output), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnmdlExecute(id, io.input, nullptr), KILN_ERROR_INVALID_PARAM);
    kilnmdlDataset* dead = kilnmdlCreateDataset();
    EXPECT_EQ(kilnmdlDestroyDataset(dead), KILN_SUCCESS);
    EXPECT_EQ(kilnmdlExecute(id, dead, io.output), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnmdlDestroyDataset(dead), KILN_ERROR_INVALID_PARAM);
    // A buffer destroyed while still in a dataset.
    kilnmdlDataset* ds = kilnmdlCreateDataset();
    kilnDataBuffer* b = kilnCreateDataBuffer(io.in_mem[0]->get(), x.size_bytes());
    ASSERT_EQ(kilnmdlAddDatasetBuffer(ds, b), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(ds, b), KILN_SUCCESS);
    ASSERT_EQ(kilnDestroyDataBuffer(b), KILN_SUCCESS);
    EXPECT_EQ(kilnmdlExecute(id, ds, io.output), KILN_ERROR_INVALID_PARAM);
    EXPECT_TRUE(error_mentions("destroyed")) << last_error();
    EXPECT_EQ(kilnDestroyDataBuffer(b), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnmdlAddDatasetBuffer(ds, b), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnmdlAddDatasetBuffer(nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnmdlDestroyDataset(ds), KILN_SUCCESS);
    EXPECT_EQ(kilnGetDataBufferAddr(b), nullptr);
    EXPECT_EQ(kilnGetDataBufferSizeV2(nullptr), 0u);
    EXPECT_EQ(kilnCreateDataBuffer(nullptr, 16), nullptr);
    EXPECT_EQ(kilnUpdateDataBuffer(nullptr, nullptr, 0), KILN_ERROR_INVALID_PARAM);
  }
  {
    // Dataset indices out of range.
    EXPECT_EQ(kilnmdlGetDatasetNumBuffers(io.input), 2u);
    EXPECT_EQ(kilnmdlGetDatasetBuffer(io.input, 2), nullptr);
    EXPECT_TRUE(error_mentions("index 2") && error_mentions("2 buffers")) << last_error();
    EXPECT_EQ(kilnmdlGetDatasetTensorDesc(io.output, 1), nullptr);
    int64_t d3[3] = {3, 4, 5};
    kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 3, d3, KILN_FORMAT_ND);
    EXPECT_EQ(kilnmdlSetDatasetTensorDesc(io.input, d, 2), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnmdlSetDatasetTensorDesc(nullptr, d, 0), KILN_ERROR_INVALID_PARAM);
    int64_t neg[1] = {-1};
    kilnTensorDesc* open = kilnCreateTensorDesc(KILN_FLOAT, 1, neg, KILN_FORMAT_ND);
    ASSERT_NE(open, nullptr);
    EXPECT_EQ(kilnmdlSetDatasetTensorDesc(io.input, open, 0), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnGetTensorDescElementCount(open), 0u);
    kilnDestroyTensorDesc(open);
    // The dataset's own descs are not the caller's to destroy.
    ASSERT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_SUCCESS) << last_error();
    kilnTensorDesc* owned = kilnmdlGetDatasetTensorDesc(io.output, 0);
    ASSERT_NE(owned, nullptr);
    kilnDestroyTensorDesc(owned);
    EXPECT_TRUE(error_mentions("belongs to its dataset")) << last_error();
    EXPECT_EQ(kilnGetTensorDescNumDims(owned), 3u);
    // Tensor desc accessors.
    int64_t dim = 0;
    EXPECT_EQ(kilnGetTensorDescDimV2(d, 3, &dim), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnGetTensorDescDimV2(d, 2, nullptr), KILN_ERROR_INVALID_PARAM);
    EXPECT_EQ(kilnGetTensorDescDimV2(d, 2, &dim), KILN_SUCCESS);
    EXPECT_EQ(dim, 5);
    EXPECT_EQ(kilnGetTensorDescElementCount(d), 60u);
    EXPECT_EQ(kilnGetTensorDescSize(d), 240u);
    EXPECT_EQ(kilnGetTensorDescFormat(d), KILN_FORMAT_ND);
    kilnDestroyTensorDesc(d);
    EXPECT_EQ(kilnGetTensorDescType(d), KILN_DT_UNDEFINED);  // destroyed
    EXPECT_EQ(kilnCreateTensorDesc(KILN_FLOAT, -1, nullptr, KILN_FORMAT_ND), nullptr);
    EXPECT_EQ(kilnCreateTensorDesc(KILN_FLOAT, 2, nullptr, KILN_FORMAT_ND), nullptr);
    EXPECT_EQ(kilnCreateTensorDesc(static_cast<kilnDataType>(5), 0, nullptr, KILN_FORMAT_ND),
              nullptr);
    EXPECT_EQ(kilnCreateTensorDesc(KILN_FLOAT, 0, nullptr, static_cast<kilnFormat>(9)), nullptr);
  }

  // Loading: missing file, null parameters, truncated and corrupted bytes.
  uint32_t other = 0;
  std::string missing = temp_dir() + "/no_such_model.kiln";
  EXPECT_EQ(kilnmdlLoadFromFile(missing.c_str(), &other), KILN_ERROR_READ_MODEL_FAILURE);
  EXPECT_TRUE(error_mentions("no_such_model.kiln")) << last_error();
  EXPECT_EQ(kilnmdlLoadFromFile(nullptr, &other), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlLoadFromFile(c.kiln_path.c_str(), nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlLoadFromMem(nullptr, 100, &other), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnmdlQuerySize(c.kiln_path.c_str(), nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
  size_t work = 0, weight = 0;
  EXPECT_EQ(kilnmdlQuerySize(missing.c_str(), &work, &weight), KILN_ERROR_READ_MODEL_FAILURE);
  std::vector<uint8_t> bytes = read_bytes(c.kiln_path);
  ASSERT_GT(bytes.size(), 64u);
  for (size_t n : {size_t{1}, size_t{16}, size_t{63}, size_t{64}, size_t{65}, bytes.size() / 2,
                   bytes.size() - 1}) {
    EXPECT_NE(kilnmdlLoadFromMem(bytes.data(), n, &other), KILN_SUCCESS) << n << " bytes";
    EXPECT_FALSE(last_error().empty());
  }
  for (size_t at : {size_t{0}, size_t{8}, size_t{100}, bytes.size() - 1}) {
    std::vector<uint8_t> corrupt = bytes;
    corrupt[at] ^= 0x5a;
    EXPECT_NE(kilnmdlLoadFromMem(corrupt.data(), corrupt.size(), &other), KILN_SUCCESS)
        << "byte " << at;
  }
  EXPECT_EQ(kilnmdlLoadFromMem(bytes.data(), 16, &other), KILN_ERROR_PARSE_MODEL);
  EXPECT_TRUE(error_mentions("kilnmdlLoadFromMem") && error_mentions("truncated")) << last_error();
  // Model bytes in device memory.
  {
    DeviceMem dev(bytes.size());
    dev.upload(bytes.data(), bytes.size());
    EXPECT_EQ(kilnmdlLoadFromMem(dev.get(), bytes.size(), &other), KILN_ERROR_INVALID_MEMORY);
  }
  // The C API carries tensors: a sequence output is refused at load, naming it.
  std::string seq = compile_backend("node/test_if_seq");
  EXPECT_EQ(kilnmdlLoadFromFile(seq.c_str(), &other), KILN_ERROR_FEATURE_UNSUPPORTED);
  EXPECT_TRUE(error_mentions("output 'res'") && error_mentions("tensors only")) << last_error();

  // No current context on a new thread.
  std::thread([&] {
    uint32_t tid = 0;
    EXPECT_EQ(kilnmdlLoadFromFile(c.kiln_path.c_str(), &tid), KILN_ERROR_RT_CONTEXT_NULL);
    EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_RT_CONTEXT_NULL);
    EXPECT_EQ(kilnmdlExecuteAsync(id, io.input, io.output, nullptr), KILN_ERROR_RT_CONTEXT_NULL);
  }).join();
  // A stream handle that is not a stream.
  int not_a_stream = 0;
  EXPECT_EQ(kilnmdlExecuteAsync(id, io.input, io.output, &not_a_stream),
            KILN_ERROR_INVALID_RESOURCE_HANDLE);

  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlUnload(id), KILN_ERROR_INVALID_MODEL_ID);
  EXPECT_EQ(kilnmdlExecute(id, io.input, io.output), KILN_ERROR_INVALID_MODEL_ID);
}

TEST(ModelApiUninitializedTest, ModelFunctionsNeedKilnInit) {
  uint32_t id = 0;
  EXPECT_EQ(kilnmdlLoadFromFile("x.kiln", &id), KILN_ERROR_UNINITIALIZE);
  EXPECT_TRUE(error_mentions("kilnmdlLoadFromFile")) << last_error();
  EXPECT_EQ(kilnmdlExecute(1, nullptr, nullptr), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnmdlExecuteAsync(1, nullptr, nullptr, nullptr), KILN_ERROR_UNINITIALIZE);
  size_t a = 0, b = 0;
  EXPECT_EQ(kilnmdlQuerySize("x.kiln", &a, &b), KILN_ERROR_UNINITIALIZE);
  // Descs, buffers and datasets are host objects: they work without kilnInit.
  kilnmdlDataset* ds = kilnmdlCreateDataset();
  ASSERT_NE(ds, nullptr);
  kilnDataBuffer* buf = kilnCreateDataBuffer(nullptr, 0);
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(kilnmdlAddDatasetBuffer(ds, buf), KILN_SUCCESS);
  EXPECT_EQ(kilnmdlDestroyDataset(ds), KILN_SUCCESS);
  EXPECT_EQ(kilnDestroyDataBuffer(buf), KILN_SUCCESS);
}

}  // namespace
