// The KServe v2 inference request and response bodies: JSON tensors and Triton's binary
// tensor extension (a JSON header of Inference-Header-Content-Length bytes, then each
// binary tensor's raw row-major bytes in order). Pure functions of the body: no model here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::serve {

// A tensor as the protocol carries it: row-major bytes of `shape` in `dtype`.
struct TensorData {
  std::string name;
  DataType dtype = DataType::kUndefined;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct RequestedOutput {
  std::string name;
  bool binary = false;  // parameters.binary_data
};

struct InferRequest {
  std::string id;                        // echoed in the response
  std::vector<TensorData> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output, as binary_data_output says
  bool binary_data_output = false;       // parameters.binary_data_output
  // parameters.timeout (Triton's name), microseconds; 0: none. A request still queued when
  // it passes is answered with an error instead of being run; one executing then is answered
  // with the error at once and its result dropped when it comes.
  int64_t timeout_us = 0;
};

// "FP32" <-> DataType::kFloat32 (the protocol's tensor data types; BYTES is not carried).
const char* kserve_datatype(DataType dtype);
std::optional<DataType> dtype_from_kserve(std::string_view name);

// Parses a request body. `header_length` is the Inference-Header-Content-Length value when
// the request has one (binary tensors follow the JSON header), else nullopt. Errors are
// invalid_argument naming the tensor and field at fault: malformed JSON, a missing or
// mistyped field, data of the wrong count or type, a binary section of the wrong size.
Expected<InferRequest> parse_infer_request(std::string_view body, std::optional<size_t> header_length);

struct EncodedResponse {
  std::string body;
  std::optional<size_t> header_length;  // set when binary tensors follow the JSON header
};

// The response to `request` for `outputs` (every output of the model, in its order), keeping
// those the request asked for (all when it named none), each as JSON data or binary.
Expected<EncodedResponse> encode_infer_response(const std::string& model, const std::string& version,
                                                const InferRequest& request, const std::vector<TensorData>& outputs);

// {"error": "<message>"}, the protocol's error body.
std::string error_body(const std::string& message);

}  // namespace kiln::serve
