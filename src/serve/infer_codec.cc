// KServe v2 request parsing and response encoding (infer_codec.h).
#include "serve/infer_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/json_brief.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

struct DtypeName {
  DataType dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {DataType::kBool, "BOOL"},     {DataType::kUInt8, "UINT8"},   {DataType::kUInt16, "UINT16"},
    {DataType::kUInt32, "UINT32"}, {DataType::kUInt64, "UINT64"}, {DataType::kInt8, "INT8"},
    {DataType::kInt16, "INT16"},   {DataType::kInt32, "INT32"},   {DataType::kInt64, "INT64"},
    {DataType::kFloat16, "FP16"},  {DataType::kFloat32, "FP32"},  {DataType::kFloat64, "FP64"},
    {DataType::kBFloat16, "BF16"},
};

// Arrays nested deeper than this in "data" are refused: each level is a recursion below, and
// no tensor has that many dims (fuzz/regressions/serve_infer_request/deep_data.bin).
constexpr int kMaxDataNesting = 64;

// Appends the elements of a (possibly nested) JSON array in row-major order, checking each
// against the element type.
template <typename T>
Status append_elements(const json& data, std::vector<T>* out, const std::string& tensor, int depth = 0) {
  if (data.is_array()) {
    if (depth >= kMaxDataNesting)
      return invalid_argument("input '%s': 'data' nests arrays more than %d deep", tensor.c_str(), kMaxDataNesting);
    for (const json& e : data) KILN_RETURN_IF_ERROR(append_elements(e, out, tensor, depth + 1));
    return ok_status();
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!data.is_boolean()) return invalid_argument("input '%s': BOOL data holds %s", tensor.c_str(), json_brief(data).c_str());
    out->push_back(data.get<bool>());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!data.is_number())
      return invalid_argument("input '%s': numeric data holds %s", tensor.c_str(), json_brief(data).c_str());
    out->push_back(data.get<T>());
  } else {
    bool fits = data.is_number_unsigned() ? data.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                : data.is_number_integer()
                    ? data.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                          (data.get<int64_t>() < 0 ||
                           static_cast<uint64_t>(data.get<int64_t>()) <= static_cast<uint64_t>(std::numeric_limits<T>::max()))
                    : false;
    if (!fits)
      return invalid_argument("input '%s': %s is not an integer of the tensor's type", tensor.c_str(),
                              json_brief(data).c_str());
    out->push_back(data.is_number_unsigned() ? static_cast<T>(data.get<uint64_t>()) : static_cast<T>(data.get<int64_t>()));
  }
  return ok_status();
}

template <typename T>
void put(std::vector<uint8_t>* bytes, const std::vector<T>& v) {
  bytes->resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(bytes->data(), v.data(), bytes->size());
}

// JSON "data" -> row-major bytes of `dtype` (16-bit floats are given as numbers).
Status json_to_bytes(const json& data, TensorData* t) {
  switch (t->dtype) {
#define KILN_SERVE_CASE(DT, T)                                  \
  case DT: {                                                    \
    std::vector<T> v;                                           \
    KILN_RETURN_IF_ERROR(append_elements(data, &v, t->name));   \
    put(&t->bytes, v);                                          \
    return ok_status();                                         \
  }
    KILN_SERVE_CASE(DataType::kUInt8, uint8_t)
    KILN_SERVE_CASE(DataType::kUInt16, uint16_t)
    KILN_SERVE_CASE(DataType::kUInt32, uint32_t)
    KILN_SERVE_CASE(DataType::kUInt64, uint64_t)
    KILN_SERVE_CASE(DataType::kInt8, int8_t)
    KILN_SERVE_CASE(DataType::kInt16, int16_t)
    KILN_SERVE_CASE(DataType::kInt32, int32_t)
    KILN_SERVE_CASE(DataType::kInt64, int64_t)
    KILN_SERVE_CASE(DataType::kFloat32, float)
    KILN_SERVE_CASE(DataType::kFloat64, double)
#undef KILN_SERVE_CASE
    case DataType::kBool: {
      std::vector<bool> v;
      KILN_RETURN_IF_ERROR(append_elements(data, &v, t->name));
      t->bytes.assign(v.begin(), v.end());
      return ok_status();
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      std::vector<float> v;
      KILN_RETURN_IF_ERROR(append_elements(data, &v, t->name));
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        h[i] = t->dtype == DataType::kFloat16 ? float_to_fp16(v[i]) : float_to_bf16(v[i]);
      put(&t->bytes, h);
      return ok_status();
    }
    default: return unsupported("input '%s': data type not carried", t->name.c_str());
  }
}

template <typename T>
json elements(const std::vector<uint8_t>& bytes) {
  json a = json::array();
  size_t n = bytes.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      // JSON has no NaN or infinity; Triton writes them as null too.
      if (!std::isfinite(v)) {
        a.push_back(nullptr);
        continue;
      }
    }
    a.push_back(v);
  }
  return a;
}

Expected<json> bytes_to_json(const TensorData& t) {
  switch (t.dtype) {
    case DataType::kBool: {
      json a = json::array();
      for (uint8_t b : t.bytes) a.push_back(b != 0);
      return a;
    }
    case DataType::kUInt8: return elements<uint8_t>(t.bytes);
    case DataType::kUInt16: return elements<uint16_t>(t.bytes);
    case DataType::kUInt32: return elements<uint32_t>(t.bytes);
    case DataType::kUInt64: return elements<uint64_t>(t.bytes);
    case DataType::kInt8: return elements<int8_t>(t.bytes);
    case DataType::kInt16: return elements<int16_t>(t.bytes);
    case DataType::kInt32: return elements<int32_t>(t.bytes);
    case DataType::kInt64: return elements<int64_t>(t.bytes);
    case DataType::kFloat32: return elements<float>(t.bytes);
    case DataType::kFloat64: return elements<double>(t.bytes);
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      std::vector<float> f(t.bytes.size() / 2);
      for (size_t i = 0; i < f.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + 2 * i, 2);
        f[i] = t.dtype == DataType::kFloat16 ? fp16_to_float(h) : bf16_to_float(h);
      }
      std::vector<uint8_t> raw(f.size() * 4);
      if (!f.empty()) std::memcpy(raw.data(), f.data(), raw.size());
      return elements<float>(raw);
    }
    default: return unsupported("output '%s' has a data type the protocol does not carry", t.name.c_str());
  }
}

// Element count of a shape, refusing negative dims and counts past 2^40 (no body that large
// is accepted anyway, and the product must not overflow).
Expected<int64_t> element_count(const std::vector<int64_t>& shape, const std::string& tensor) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("input '%s': shape has the negative dim %lld", tensor.c_str(), static_cast<long long>(d));
    if (d > 0 && n > (int64_t{1} << 40) / d)
      return invalid_argument("input '%s': shape is too large", tensor.c_str());
    n *= d;
  }
  return n;
}

// Reads an optional "parameters" object member.
const json* parameter(const json& obj, const char* name) {
  auto p = obj.find("parameters");
  if (p == obj.end() || !p->is_object()) return nullptr;
  auto v = p->find(name);
  return v == p->end() ? nullptr : &*v;
}

Status parse_input(const json& in, size_t index, std::string_view* binary, TensorData* t) {
  if (!in.is_object()) return invalid_argument("inputs[%zu] is not an object", index);
  auto name = in.find("name");
  if (name == in.end() || !name->is_string()) return invalid_argument("inputs[%zu] has no string 'name'", index);
  t->name = name->get<std::string>();
  auto datatype = in.find("datatype");
  if (datatype == in.end() || !datatype->is_string())
    return invalid_argument("input '%s' has no string 'datatype'", t->name.c_str());
  auto dtype = dtype_from_kserve(datatype->get<std::string>());
  if (!dtype)
    return invalid_argument("input '%s': datatype '%s' is not one the server carries (BOOL, UINT8..UINT64, INT8..INT64, "
                            "FP16, BF16, FP32, FP64)", t->name.c_str(), datatype->get<std::string>().c_str());
  t->dtype = *dtype;
  auto shape = in.find("shape");
  if (shape == in.end() || !shape->is_array()) return invalid_argument("input '%s' has no 'shape' array", t->name.c_str());
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return invalid_argument("input '%s': shape %s is not a list of non-negative integers", t->name.c_str(),
                              json_brief(*shape).c_str());
    t->shape.push_back(d.get<int64_t>());
  }
  KILN_ASSIGN_OR_RETURN(int64_t count, element_count(t->shape, t->name));
  const size_t expected = dtype_bytes(t->dtype, count);
  if (const json* size = parameter(in, "binary_data_size")) {
    if (!size->is_number_unsigned())
      return invalid_argument("input '%s': binary_data_size is not a non-negative integer", t->name.c_str());
    uint64_t n = size->get<uint64_t>();
    if (n > binary->size())
      return invalid_argument("input '%s': binary_data_size %llu, but only %zu bytes of binary data remain",
                              t->name.c_str(), static_cast<unsigned long long>(n), binary->size());
    if (n != expected)
      return invalid_argument("input '%s': binary_data_size %llu, but shape %s of %s takes %zu bytes", t->name.c_str(),
                              static_cast<unsigned long long>(n), json_brief(*shape).c_str(), datatype->get<std::string>().c_str(),
                              expected);
    // From uint8_t pointers, a memmove: char iterators into a uint8_t vector were copied
    // element by element (3% of the server's CPU time at saturation, docs/serve.md).
    const auto* src = reinterpret_cast<const uint8_t*>(binary->data());
    t->bytes.assign(src, src + n);
    binary->remove_prefix(n);
    return ok_status();
  }
  auto data = in.find("data");
  if (data == in.end()) return invalid_argument("input '%s' has neither 'data' nor binary_data_size", t->name.c_str());
  KILN_RETURN_IF_ERROR(json_to_bytes(*data, t));
  if (t->bytes.size() != expected)
    return invalid_argument("input '%s': 'data' holds %zu elements, shape %s needs %lld", t->name.c_str(),
                            t->bytes.size() / std::max<size_t>(1, dtype_bytes(t->dtype, 1)), json_brief(*shape).c_str(),
                            static_cast<long long>(count));
  return ok_status();
}

}  // namespace

const char* kserve_datatype(DataType dtype) {
  for (const DtypeName& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return "BYTES";
}

std::optional<DataType> dtype_from_kserve(std::string_view name) {
  for (const DtypeName& d : kDtypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

// A message may quote bytes of the request (its path, a header) that are not UTF-8, on which
// dump() would throw: those are written as U+FFFD.
std::string error_body(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

Expected<InferRequest> parse_infer_request(std::string_view body, std::optional<size_t> header_length) {
  std::string_view header = body, binary;
  if (header_length) {
    if (*header_length > body.size())
      return invalid_argument("Inference-Header-Content-Length is %zu, but the body has only %zu bytes", *header_length,
                              body.size());
    header = body.substr(0, *header_length);
    binary = body.substr(*header_length);
  }
  json j = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("the request body is not valid JSON");
  if (!j.is_object()) return invalid_argument("the request body is not a JSON object");
  InferRequest r;
  if (auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) return invalid_argument("'id' must be a string");
    r.id = id->get<std::string>();
  }
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array() || inputs->empty())
    return invalid_argument("the request has no 'inputs' array");
  for (size_t i = 0; i < inputs->size(); ++i) {
    TensorData t;
    KILN_RETURN_IF_ERROR(parse_input((*inputs)[i], i, &binary, &t));
    for (const TensorData& other : r.inputs)
      if (other.name == t.name) return invalid_argument("input '%s' is given twice", t.name.c_str());
    r.inputs.push_back(std::move(t));
  }
  if (!binary.empty())
    return invalid_argument("%zu bytes of binary data follow the inputs' binary_data_size", binary.size());
  if (const json* t = parameter(j, "timeout")) {
    if (!t->is_number_unsigned()) return invalid_argument("parameters.timeout must be a non-negative integer (microseconds)");
    r.timeout_us = static_cast<int64_t>(std::min<uint64_t>(t->get<uint64_t>(), uint64_t{1} << 40));
  }
  if (const json* b = parameter(j, "binary_data_output")) {
    if (!b->is_boolean()) return invalid_argument("parameters.binary_data_output must be true or false");
    r.binary_data_output = b->get<bool>();
  }
  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    if (!outputs->is_array()) return invalid_argument("'outputs' must be an array");
    for (const json& o : *outputs) {
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
        return invalid_argument("an entry of 'outputs' has no string 'name'");
      RequestedOutput out{o["name"].get<std::string>(), r.binary_data_output};
      if (const json* b = parameter(o, "binary_data")) {
        if (!b->is_boolean()) return invalid_argument("output '%s': binary_data must be true or false", out.name.c_str());
        out.binary = b->get<bool>();
      }
      r.outputs.push_back(std::move(out));
    }
  }
  return r;
}

Expected<EncodedResponse> encode_infer_response(const std::string& model, const std::string& version,
                                                const InferRequest& request, const std::vector<TensorData>& outputs) {
  std::vector<RequestedOutput> wanted = request.outputs;
  if (wanted.empty())
    for (const TensorData& t : outputs) wanted.push_back({t.name, request.binary_data_output});
  json j;
  j["model_name"] = model;
  j["model_version"] = version;
  if (!request.id.empty()) j["id"] = request.id;
  j["outputs"] = json::array();
  std::string binary;
  for (const RequestedOutput& w : wanted) {
    const TensorData* t = nullptr;
    for (const TensorData& o : outputs)
      if (o.name == w.name) t = &o;
    if (!t) return invalid_argument("the request asks for output '%s', which the model does not have", w.name.c_str());
    json o{{"name", t->name}, {"datatype", kserve_datatype(t->dtype)}, {"shape", t->shape}};
    if (w.binary) {
      o["parameters"] = {{"binary_data_size", t->bytes.size()}};
      binary.append(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size());
    } else {
      KILN_ASSIGN_OR_RETURN(o["data"], bytes_to_json(*t));
    }
    j["outputs"].push_back(std::move(o));
  }
  EncodedResponse r;
  r.body = j.dump();
  bool any_binary = false;
  for (const RequestedOutput& w : wanted) any_binary = any_binary || w.binary;
  if (any_binary) {
    r.header_length = r.body.size();
    r.body += binary;
  }
  return r;
}

}  // namespace kiln::serve
