// The KServe v2 body codec and the repository config of src/serve, without a server: what
// each malformed body or config is refused with, and the bytes a good one carries.
#include <gtest/gtest.h>

#include <cstring>

#include "serve/infer_codec.h"
#include "serve/model_config.h"
#include "serve/served_model.h"

namespace kiln::serve {
namespace {

std::vector<float> floats(const TensorData& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

void expect_error(std::string_view body, const std::string& words, std::optional<size_t> header = std::nullopt) {
  auto r = parse_infer_request(body, header);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().to_string().find(words), std::string::npos) << r.status().to_string();
}

TEST(InferCodecTest, JsonDataNestedOrFlatIsRowMajor) {
  auto r = parse_infer_request(
      R"({"id":"7","inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1,2],[3.5,4]]}]})", std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->id, "7");
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(floats(r->inputs[0]), (std::vector<float>{1, 2, 3.5f, 4}));
}

TEST(InferCodecTest, BinaryTensorsFollowTheHeaderInOrder) {
  std::string header =
      R"({"inputs":[{"name":"a","datatype":"INT16","shape":[2],"parameters":{"binary_data_size":4}},)"
      R"({"name":"b","datatype":"UINT8","shape":[3],"parameters":{"binary_data_size":3}}]})";
  int16_t a[2] = {-3, 300};
  std::string body = header + std::string(reinterpret_cast<char*>(a), 4) + "\x01\x02\x03";
  auto r = parse_infer_request(body, header.size());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->inputs.size(), 2u);
  int16_t back[2];
  std::memcpy(back, r->inputs[0].bytes.data(), 4);
  EXPECT_EQ(back[0], -3);
  EXPECT_EQ(back[1], 300);
  EXPECT_EQ(r->inputs[1].bytes, (std::vector<uint8_t>{1, 2, 3}));
  expect_error(body.substr(0, body.size() - 1), "only 2 bytes", header.size());
  expect_error(body + "!", "1 bytes of binary data follow", header.size());
  expect_error(body, "the body has only", body.size() + 1);
}

TEST(InferCodecTest, MalformedBodiesAreNamed) {
  expect_error("{", "not valid JSON");
  expect_error("[]", "not a JSON object");
  expect_error(R"({"inputs":[]})", "no 'inputs'");
  expect_error(R"({"inputs":[{"datatype":"FP32","shape":[1],"data":[1]}]})", "no string 'name'");
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP99","shape":[1],"data":[1]}]})", "'FP99'");
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[-1],"data":[1]}]})", "non-negative");
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[1,2]}]})", "holds 2 elements");
  expect_error(R"({"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[300]}]})", "300 is not an integer");
  expect_error(R"({"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1.5]}]})", "1.5 is not an integer");
  expect_error(R"({"inputs":[{"name":"x","datatype":"BOOL","shape":[1],"data":[1]}]})", "BOOL data");
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1048576,1048576,1048576],"data":[]}]})",
               "too large");
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1]}]})", "neither 'data'");
}

// A million nested arrays (2 MB of body) in "data" or "shape", or in a config field, is an
// error, not a stack overflow (the nesting was recursed into, or dumped into the message).
TEST(InferCodecTest, DeeplyNestedValuesAreRefusedWithoutRecursingIntoThem) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":)" + deep + "}]}", "more than 64 deep");
  expect_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":)" + deep + R"(,"data":[1]}]})",
               "array nested too deep");
  auto c = parse_model_config(R"({"backend":)" + deep + "}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().to_string().find("array nested too deep"), std::string::npos) << c.status().to_string();
}

TEST(InferCodecTest, ResponseKeepsTheRequestedOutputsAsAsked) {
  InferRequest req;
  req.id = "q";
  req.outputs = {{"b", true}, {"a", false}};
  TensorData a{"a", DataType::kInt64, {2}, {}};
  int64_t av[2] = {5, -6};
  a.bytes.assign(reinterpret_cast<uint8_t*>(av), reinterpret_cast<uint8_t*>(av) + 16);
  TensorData b{"b", DataType::kUInt8, {3}, {9, 8, 7}};
  auto r = encode_infer_response("m", "2", req, {a, b});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->header_length.has_value());
  std::string header = r->body.substr(0, *r->header_length);
  EXPECT_NE(header.find(R"("name":"b","parameters":{"binary_data_size":3})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("data":[5,-6])"), std::string::npos) << header;
  EXPECT_EQ(r->body.substr(*r->header_length), "\x09\x08\x07");
  req.outputs = {{"c", false}};
  EXPECT_FALSE(encode_infer_response("m", "2", req, {a, b}).ok());
}

TEST(ModelConfigTest, FieldsAndTheirLimits) {
  auto c = parse_model_config(R"({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500},
                                  "instance_count": 2, "precision": "bf16", "batch_buckets": [1, 4, 8]})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->max_batch_size, 8);
  EXPECT_EQ(c->max_queue_delay_us, 500);
  EXPECT_EQ(c->instance_count, 2);
  EXPECT_EQ(c->precision, "bf16");
  EXPECT_EQ(c->batch_buckets, (std::vector<int64_t>{1, 4, 8}));
  for (auto [text, words] : std::vector<std::pair<const char*, const char*>>{
           {R"({"max_batch": 4})", "unknown field 'max_batch'"},
           {R"({"max_batch_size": -1})", "'max_batch_size' is -1"},
           {R"({"instance_count": 0})", "'instance_count' is 0"},
           {R"({"precision": "int4"})", "'precision'"},
           {R"({"batch_buckets": [1, 2]})", "needs 'max_batch_size'"},
           {R"({"max_batch_size": 8, "batch_buckets": [1, 2]})", "below 'max_batch_size'"},
           {R"({"dynamic_batching": {"max_queue_delay_microseconds": 5}})", "needs 'max_batch_size'"},
           {R"({"dynamic_batching": {"delay": 5}})", "dynamic_batching.delay"},
           {"{", "not valid JSON"}}) {
    auto bad = parse_model_config(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().to_string().find(words), std::string::npos) << bad.status().to_string();
  }
}

TEST(ModelConfigTest, ModelNamesArePathComponents) {
  EXPECT_TRUE(valid_model_name("resnet50_v1.5-int8"));
  for (const char* bad : {"", ".", "..", "a/b", "a b", "x\n"}) EXPECT_FALSE(valid_model_name(bad)) << bad;
}

TEST(BatchingTest, RequestsShareABatchWhenDimsPastTheBatchAgree) {
  InferRequest a, b, c;
  a.inputs = {{"x", DataType::kFloat32, {1, 3, 4}, {}}};
  b.inputs = {{"x", DataType::kFloat32, {5, 3, 4}, {}}};
  c.inputs = {{"x", DataType::kFloat32, {1, 3, 5}, {}}};
  EXPECT_TRUE(same_row_shapes(a, b));
  EXPECT_FALSE(same_row_shapes(a, c));
}

}  // namespace
}  // namespace kiln::serve
