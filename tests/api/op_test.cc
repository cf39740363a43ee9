// Tests of single-operator mode (include/kiln/kiln_op.h): ONNX backend node tests run op by op
// through kilnopExecute and compared with the tests' expected outputs (read here with the ONNX
// protobuf classes, not Kiln's reader), the compiled-op cache (hits, key, bound), and errors.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/kiln_op.h"

namespace {

std::string last_error() { return kilnGetRecentErrMsg(); }

std::string node_dir() {
  const char* src = std::getenv("KILN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/onnx/backend/node";
}

// ONNX elem type -> kilnDataType and element size (this test's own table).
kilnDataType to_kiln(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return KILN_FLOAT;
    case onnx::TensorProto::DOUBLE: return KILN_DOUBLE;
    case onnx::TensorProto::INT64: return KILN_INT64;
    case onnx::TensorProto::INT32: return KILN_INT32;
    case onnx::TensorProto::BOOL: return KILN_BOOL;
    case onnx::TensorProto::UINT8: return KILN_UINT8;
    case onnx::TensorProto::INT8: return KILN_INT8;
    default: return KILN_DT_UNDEFINED;
  }
}

struct HostTensor {
  kilnDataType dtype = KILN_DT_UNDEFINED;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
  size_t count() const {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    return n;
  }
};

bool read_tensor(const std::string& path, HostTensor* out) {
  onnx::TensorProto t;
  std::ifstream in(path, std::ios::binary);
  if (!in || !t.ParseFromIstream(&in)) return false;
  out->dtype = to_kiln(t.data_type());
  out->dims.assign(t.dims().begin(), t.dims().end());
  size_t esize = kilnDataTypeSize(out->dtype);
  if (esize == 0) return false;
  if (!t.raw_data().empty()) {
    out->bytes.assign(t.raw_data().begin(), t.raw_data().end());
  } else if (t.float_data_size() > 0) {
    out->bytes.resize(t.float_data_size() * 4);
    std::memcpy(out->bytes.data(), t.float_data().data(), out->bytes.size());
  } else if (t.int64_data_size() > 0) {
    out->bytes.resize(t.int64_data_size() * 8);
    std::memcpy(out->bytes.data(), t.int64_data().data(), out->bytes.size());
  } else if (t.double_data_size() > 0) {
    out->bytes.resize(t.double_data_size() * 8);
    std::memcpy(out->bytes.data(), t.double_data().data(), out->bytes.size());
  } else if (t.int32_data_size() > 0) {  // int32, and bool/int8/uint8 widened to int32
    out->bytes.resize(t.int32_data_size() * esize);
    for (int i = 0; i < t.int32_data_size(); ++i) {
      int32_t v = t.int32_data(i);
      std::memcpy(out->bytes.data() + i * esize, &v, esize);
    }
  }
  return out->bytes.size() == out->count() * esize;
}

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  }
  void TearDown() override { kilnFinalize(); }
};
const auto* env = ::testing::AddGlobalTestEnvironment(new Env);

struct DevBuf {
  void* p = nullptr;
  kilnDataBuffer* buf = nullptr;
  explicit DevBuf(size_t n) {
    EXPECT_EQ(kilnrtMalloc(&p, n ? n : 1, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS);
    buf = kilnCreateDataBuffer(p, n);
  }
  ~DevBuf() {
    kilnDestroyDataBuffer(buf);
    kilnrtFree(p);
  }
};

struct Descs {
  std::vector<kilnTensorDesc*> v;
  ~Descs() {
    for (auto* d : v) kilnDestroyTensorDesc(d);
  }
  kilnTensorDesc* add(kilnDataType t, std::vector<int64_t> dims) {
    v.push_back(kilnCreateTensorDesc(t, static_cast<int>(dims.size()), dims.data(), KILN_FORMAT_ND));
    return v.back();
  }
};

// Converts the node's attributes; false on a kind the C API has no setter for.
bool set_attrs(const onnx::NodeProto& n, kilnopAttr* attr) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    kilnError e = KILN_SUCCESS;
    switch (a.type()) {
      case onnx::AttributeProto::INT: e = kilnopSetAttrInt(attr, a.name().c_str(), a.i()); break;
      case onnx::AttributeProto::FLOAT: e = kilnopSetAttrFloat(attr, a.name().c_str(), a.f()); break;
      case onnx::AttributeProto::STRING: e = kilnopSetAttrString(attr, a.name().c_str(), a.s().c_str()); break;
      case onnx::AttributeProto::INTS:
        e = kilnopSetAttrListInt(attr, a.name().c_str(), a.ints_size(), a.ints().data());
        break;
      case onnx::AttributeProto::FLOATS:
        e = kilnopSetAttrListFloat(attr, a.name().c_str(), a.floats_size(), a.floats().data());
        break;
      default: return false;
    }
    if (e != KILN_SUCCESS) return false;
  }
  return true;
}

// Runs node test `name` (model.onnx's one node, test_data_set_0) through kilnopExecute.
void run_node_test(const std::string& name) {
  std::string dir = node_dir() + "/" + name;
  onnx::ModelProto m;
  std::ifstream in(dir + "/model.onnx", std::ios::binary);
  ASSERT_TRUE(in && m.ParseFromIstream(&in)) << dir;
  ASSERT_EQ(m.graph().node_size(), 1);
  const onnx::NodeProto& node = m.graph().node(0);
  int opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain() == node.domain() || (o.domain() == "ai.onnx" && node.domain().empty())) opset = o.version();
  std::vector<HostTensor> ins(node.input_size()), want(node.output_size());
  for (int i = 0; i < node.input_size(); ++i)
    ASSERT_TRUE(read_tensor(dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb", &ins[i]));
  for (int i = 0; i < node.output_size(); ++i)
    ASSERT_TRUE(read_tensor(dir + "/test_data_set_0/output_" + std::to_string(i) + ".pb", &want[i]));
  kilnopAttr* attr = kilnopCreateAttr();
  ASSERT_TRUE(set_attrs(node, attr));
  Descs descs;
  std::vector<const kilnTensorDesc*> in_desc, out_desc;
  std::vector<std::unique_ptr<DevBuf>> in_buf, out_buf;
  std::vector<const kilnDataBuffer*> in_ptr;
  std::vector<kilnDataBuffer*> out_ptr;
  for (const HostTensor& t : ins) {
    in_desc.push_back(descs.add(t.dtype, t.dims));
    in_buf.push_back(std::make_unique<DevBuf>(t.bytes.size()));
    ASSERT_EQ(kilnrtMemcpy(in_buf.back()->p, t.bytes.size() ? t.bytes.size() : 1, t.bytes.data(), t.bytes.size(),
                           KILN_MEMCPY_HOST_TO_DEVICE),
              KILN_SUCCESS);
    in_ptr.push_back(in_buf.back()->buf);
  }
  for (const HostTensor& t : want) {
    out_desc.push_back(descs.add(t.dtype, t.dims));
    out_buf.push_back(std::make_unique<DevBuf>(t.bytes.size()));
    out_ptr.push_back(out_buf.back()->buf);
  }
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS);
  kilnError e = kilnopExecute(node.op_type().c_str(), node.domain().c_str(), opset, node.input_size(),
                              in_desc.data(), in_ptr.data(), node.output_size(), out_desc.data(), out_ptr.data(),
                              attr, stream);
  ASSERT_EQ(e, KILN_SUCCESS) << name << ": " << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  kilnrtDestroyStream(stream);
  kilnopDestroyAttr(attr);
  for (size_t k = 0; k < want.size(); ++k) {
    std::vector<uint8_t> got(want[k].bytes.size());
    ASSERT_EQ(kilnrtMemcpy(got.data(), got.size(), out_buf[k]->p, got.size(), KILN_MEMCPY_DEVICE_TO_HOST),
              KILN_SUCCESS);
    // onnx.backend.test's tolerance: rtol 1e-3, atol 1e-7 for floating point; exact otherwise.
    if (want[k].dtype == KILN_FLOAT || want[k].dtype == KILN_DOUBLE) {
      for (size_t i = 0; i < want[k].count(); ++i) {
        double g, w;
        if (want[k].dtype == KILN_FLOAT) {
          g = reinterpret_cast<const float*>(got.data())[i];
          w = reinterpret_cast<const float*>(want[k].bytes.data())[i];
        } else {
          g = reinterpret_cast<const double*>(got.data())[i];
          w = reinterpret_cast<const double*>(want[k].bytes.data())[i];
        }
        if ((std::isnan(w) && std::isnan(g)) || g == w) continue;  // NaN and infinities
        ASSERT_TRUE(std::fabs(g - w) <= 1e-7 + 1e-3 * std::fabs(w))
            << name << " output " << k << " element " << i << ": got " << g << ", want " << w;
      }
    } else {
      EXPECT_EQ(got, want[k].bytes) << name << " output " << k;
    }
  }
}

class NodeTest : public ::testing::TestWithParam<const char*> {};
TEST_P(NodeTest, MatchesOnnxExpectedOutputs) { run_node_test(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Backend, NodeTest,
    ::testing::Values("test_add", "test_sub", "test_mul", "test_div", "test_relu", "test_sigmoid", "test_tanh",
                      "test_exp", "test_softmax_axis_1", "test_matmul_2d", "test_transpose_all_permutations_0",
                      "test_concat_2d_axis_0", "test_gemm_default_no_bias", "test_conv_with_strides_padding",
                      "test_maxpool_2d_pads", "test_averagepool_2d_default", "test_leakyrelu", "test_elu",
                      "test_flatten_axis1", "test_sqrt", "test_abs", "test_neg", "test_hardsigmoid", "test_softplus",
                      "test_batchnorm_example", "test_where_example", "test_argmax_default_axis_example", "test_pow",
                      "test_max_example", "test_gather_0", "test_instancenorm_example", "test_cast_FLOAT_to_DOUBLE",
                      "test_gelu_default_1",
                      // several outputs (Y and Indices; Y, Mean and InvStdDev)
                      "test_maxpool_with_argmax_2d_precomputed_pads", "test_layer_normalization_2d_axis0"));

// ---- The compiled-op cache ------------------------------------------------------------------

struct CacheStats {
  uint64_t hits = 0, misses = 0;
  size_t entries = 0;
};
CacheStats stats() {
  CacheStats s;
  EXPECT_EQ(kilnopGetCacheStats(&s.hits, &s.misses, &s.entries), KILN_SUCCESS);
  return s;
}

// Runs y = LeakyRelu(x, alpha) on n floats (x = -1..) and returns y.
std::vector<float> leaky(int64_t n, float alpha, kilnError* err = nullptr) {
  Descs d;
  const kilnTensorDesc* in[] = {d.add(KILN_FLOAT, {n})};
  const kilnTensorDesc* out[] = {d.add(KILN_FLOAT, {n})};
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) - 1.0f;
  DevBuf bx(n * 4), by(n * 4);
  kilnrtMemcpy(bx.p, n * 4, x.data(), n * 4, KILN_MEMCPY_HOST_TO_DEVICE);
  kilnopAttr* attr = kilnopCreateAttr();
  kilnopSetAttrFloat(attr, "alpha", alpha);
  const kilnDataBuffer* ib[] = {bx.buf};
  kilnDataBuffer* ob[] = {by.buf};
  kilnError e = kilnopExecute("LeakyRelu", "", 16, 1, in, ib, 1, out, ob, attr, nullptr);
  if (err) *err = e;
  kilnopDestroyAttr(attr);
  EXPECT_EQ(kilnrtSynchronizeStream(nullptr), KILN_SUCCESS);
  kilnrtMemcpy(y.data(), n * 4, by.p, n * 4, KILN_MEMCPY_DEVICE_TO_HOST);
  return y;
}

TEST(OpCache, SecondCallHitsAndKeyDistinguishesAttributesAndShapes) {
  ASSERT_EQ(kilnopClearCache(), KILN_SUCCESS);
  ASSERT_EQ(kilnopSetCacheCapacity(256), KILN_SUCCESS);
  CacheStats s0 = stats();
  std::vector<float> y = leaky(4, 0.5f);
  CacheStats s1 = stats();
  EXPECT_EQ(s1.misses, s0.misses + 1);
  EXPECT_EQ(s1.entries, 1u);
  EXPECT_FLOAT_EQ(y[0], -0.5f);  // x = -1
  leaky(4, 0.5f);
  CacheStats s2 = stats();
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(s2.misses, s1.misses);
  // Another alpha: a new entry, and the result uses it (not the cached 0.5).
  y = leaky(4, 0.25f);
  CacheStats s3 = stats();
  EXPECT_EQ(s3.misses, s2.misses + 1);
  EXPECT_EQ(s3.entries, 2u);
  EXPECT_FLOAT_EQ(y[0], -0.25f);
  // Another shape: a new entry.
  y = leaky(8, 0.25f);
  CacheStats s4 = stats();
  EXPECT_EQ(s4.misses, s3.misses + 1);
  EXPECT_EQ(s4.entries, 3u);
  EXPECT_FLOAT_EQ(y[7], 6.0f);
}

TEST(OpCache, BoundIsRespectedLeastRecentlyUsedFirst) {
  ASSERT_EQ(kilnopClearCache(), KILN_SUCCESS);
  ASSERT_EQ(kilnopSetCacheCapacity(2), KILN_SUCCESS);
  leaky(1, 0.5f);
  leaky(2, 0.5f);
  leaky(1, 0.5f);  // 1 is now the most recent
  leaky(3, 0.5f);  // evicts 2
  EXPECT_EQ(stats().entries, 2u);
  CacheStats before = stats();
  leaky(1, 0.5f);
  EXPECT_EQ(stats().hits, before.hits + 1);
  leaky(2, 0.5f);
  EXPECT_EQ(stats().misses, before.misses + 1);
  EXPECT_EQ(stats().entries, 2u);
  EXPECT_NE(kilnopSetCacheCapacity(0), KILN_SUCCESS);
  ASSERT_EQ(kilnopSetCacheCapacity(256), KILN_SUCCESS);
}

TEST(OpCache, CompileThenExecuteHitsAndInferShapeTellsOutputs) {
  ASSERT_EQ(kilnopClearCache(), KILN_SUCCESS);
  Descs d;
  const kilnTensorDesc* in[] = {d.add(KILN_FLOAT, {2, 3}), d.add(KILN_FLOAT, {3, 5})};
  ASSERT_EQ(kilnopCompile("MatMul", nullptr, 13, 2, in, nullptr), KILN_SUCCESS) << last_error();
  CacheStats s = stats();
  kilnTensorDesc* out[1] = {nullptr};
  ASSERT_EQ(kilnopInferShape("MatMul", nullptr, 13, 2, in, 1, out, nullptr), KILN_SUCCESS) << last_error();
  EXPECT_EQ(stats().hits, s.hits + 1);
  ASSERT_NE(out[0], nullptr);
  EXPECT_EQ(kilnGetTensorDescType(out[0]), KILN_FLOAT);
  ASSERT_EQ(kilnGetTensorDescNumDims(out[0]), 2u);
  int64_t d0 = 0, d1 = 0;
  kilnGetTensorDescDimV2(out[0], 0, &d0);
  kilnGetTensorDescDimV2(out[0], 1, &d1);
  EXPECT_EQ(d0, 2);
  EXPECT_EQ(d1, 5);
  kilnDestroyTensorDesc(out[0]);
}

// Threads sharing the cache: each runs its own alpha and shape (misses and hits interleave).
TEST(OpCache, ConcurrentCallersGetTheirOwnResults) {
  ASSERT_EQ(kilnopClearCache(), KILN_SUCCESS);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &wrong] {
      kilnrtSetDevice(0);
      for (int i = 0; i < 40; ++i) {
        float alpha = 0.125f * static_cast<float>(1 + (i + t) % 3);
        int64_t n = 2 + (i % 2);
        std::vector<float> y = leaky(n, alpha);
        if (y[0] != -alpha || y[n - 1] != static_cast<float>(n - 2)) ++wrong;
      }
      kilnrtResetDevice(0);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(stats().entries, 6u);  // 3 alphas x 2 shapes
}

// ---- Errors -----------------------------------------------------------------------------------

TEST(OpErrors, ClearCodesAndMessages) {
  Descs d;
  const kilnTensorDesc* one[] = {d.add(KILN_FLOAT, {4})};
  const kilnTensorDesc* two[] = {d.add(KILN_FLOAT, {4}), d.add(KILN_FLOAT, {4})};
  const kilnTensorDesc* mixed[] = {d.add(KILN_FLOAT, {4}), d.add(KILN_INT64, {4})};
  const kilnTensorDesc* mm_bad[] = {d.add(KILN_FLOAT, {2, 3}), d.add(KILN_FLOAT, {4, 5})};
  // Unknown op.
  EXPECT_EQ(kilnopCompile("NoSuchOp", "", 17, 1, one, nullptr), KILN_ERROR_OP_TYPE_NOT_MATCH);
  EXPECT_NE(last_error().find("NoSuchOp"), std::string::npos) << last_error();
  // Wrong number of inputs.
  EXPECT_EQ(kilnopCompile("Add", "", 17, 1, one, nullptr), KILN_ERROR_OP_INPUT_NOT_MATCH) << last_error();
  EXPECT_NE(last_error().find("Add"), std::string::npos);
  // Dtype mismatch.
  EXPECT_EQ(kilnopCompile("Add", "", 17, 2, mixed, nullptr), KILN_ERROR_OP_INPUT_NOT_MATCH) << last_error();
  // Shape inference failure.
  EXPECT_EQ(kilnopCompile("MatMul", "", 13, 2, mm_bad, nullptr), KILN_ERROR_OP_INPUT_NOT_MATCH) << last_error();
  // Bad attribute: Softmax axis out of range.
  kilnopAttr* attr = kilnopCreateAttr();
  ASSERT_EQ(kilnopSetAttrInt(attr, "axis", 7), KILN_SUCCESS);
  EXPECT_NE(kilnopCompile("Softmax", "", 13, 1, one, attr), KILN_SUCCESS);
  EXPECT_NE(last_error().find("axis"), std::string::npos) << last_error();
  kilnopDestroyAttr(attr);
  // Null pointers and bad counts.
  EXPECT_EQ(kilnopCompile(nullptr, "", 17, 1, one, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnopCompile("Add", "", 17, 2, nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnopCompile("Add", "", 0, 2, two, nullptr), KILN_ERROR_INVALID_PARAM);
  const kilnTensorDesc* with_null[] = {one[0], nullptr};
  EXPECT_EQ(kilnopCompile("Add", "", 17, 2, with_null, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnopSetAttrInt(nullptr, "a", 1), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnopSetAttrString(nullptr, "a", nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnopSetAttrListInt(nullptr, "a", 2, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnopGetCacheStats(nullptr, nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
  // Outputs: a desc that differs from shape inference, null buffers, a host pointer.
  DevBuf a(16), b(16), y(16);
  const kilnDataBuffer* ib[] = {a.buf, b.buf};
  const kilnTensorDesc* wrong_out[] = {d.add(KILN_FLOAT, {5})};
  kilnDataBuffer* ob[] = {y.buf};
  EXPECT_EQ(kilnopExecute("Add", "", 17, 2, two, ib, 1, wrong_out, ob, nullptr, nullptr),
            KILN_ERROR_OP_OUTPUT_NOT_MATCH);
  EXPECT_NE(last_error().find("[5]"), std::string::npos) << last_error();
  const kilnTensorDesc* good_out[] = {d.add(KILN_FLOAT, {4})};
  EXPECT_EQ(kilnopExecute("Add", "", 17, 2, two, nullptr, 1, good_out, ob, nullptr, nullptr),
            KILN_ERROR_INVALID_PARAM);
  kilnDataBuffer* null_out[] = {nullptr};
  EXPECT_EQ(kilnopExecute("Add", "", 17, 2, two, ib, 1, good_out, null_out, nullptr, nullptr),
            KILN_ERROR_INVALID_PARAM);
  float host[4];
  kilnDataBuffer* hb = kilnCreateDataBuffer(host, sizeof host);
  kilnDataBuffer* host_out[] = {hb};
  EXPECT_NE(kilnopExecute("Add", "", 17, 2, two, ib, 1, good_out, host_out, nullptr, nullptr), KILN_SUCCESS);
  kilnDestroyDataBuffer(hb);
  // A buffer too small for its input.
  DevBuf small(4);
  const kilnDataBuffer* small_in[] = {a.buf, small.buf};
  EXPECT_NE(kilnopExecute("Add", "", 17, 2, two, small_in, 1, good_out, ob, nullptr, nullptr), KILN_SUCCESS);
  EXPECT_EQ(kilnrtSynchronizeStream(nullptr), KILN_SUCCESS) << last_error();
}

}  // namespace
