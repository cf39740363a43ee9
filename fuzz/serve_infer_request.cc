// Fuzz target: the server's KServe v2 infer request decoding (serve::parse_infer_request,
// JSON tensors and the binary tensor extension), then the response encoding of the tensors
// it decoded, as `kiln serve` answers POST /v2/models/<m>/infer.
// Input: one flag byte; when its low bit is set, a 4-byte little-endian
// Inference-Header-Content-Length follows; the rest is the request body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "serve/infer_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 16)) return -1;
  std::optional<size_t> header_length;
  size_t at = 1;
  if (data[0] & 1) {
    if (size < 5) return -1;
    uint32_t n = 0;
    std::memcpy(&n, data + 1, 4);
    header_length = n;
    at = 5;
  }
  std::string_view body(reinterpret_cast<const char*>(data) + at, size - at);
  kiln::Expected<kiln::serve::InferRequest> request =
      kiln::serve::parse_infer_request(body, header_length);
  if (!request.ok()) return 0;
  // A decoded tensor holds exactly its shape's bytes (what the model's input check relies on).
  for (const kiln::serve::TensorData& t : request->inputs) {
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(elements, d, &elements)) std::abort();
    }
    if (kiln::dtype_bytes(t.dtype, elements) != t.bytes.size()) std::abort();
  }
  // The response to it, with its inputs as the model's outputs.
  (void)kiln::serve::encode_infer_response("m", "1", *request, request->inputs);
  return 0;
}
