// Element access and the reduce ops' serial reference for checks (check_values.h).
#include "comm/check_values.h"

#include <algorithm>

#include "core/dtype.h"

namespace kiln::comm {

void store_value(kilnCommDataType t, void* base, uint64_t i, double v) {
  switch (t) {
    case KILN_COMM_INT8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      break;
    case KILN_COMM_UINT8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
    case KILN_COMM_INT16:
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v);
      break;
    case KILN_COMM_UINT16:
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(v);
      break;
    case KILN_COMM_INT32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case KILN_COMM_UINT32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v);
      break;
    case KILN_COMM_INT64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case KILN_COMM_UINT64:
      static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v);
      break;
    case KILN_COMM_FP16:
      static_cast<uint16_t*>(base)[i] = float_to_fp16(static_cast<float>(v));
      break;
    case KILN_COMM_BF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case KILN_COMM_FP32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case KILN_COMM_FP64:
      static_cast<double*>(base)[i] = v;
      break;
  }
}

double load_value(kilnCommDataType t, const void* base, uint64_t i) {
  switch (t) {
    case KILN_COMM_INT8:
      return static_cast<const int8_t*>(base)[i];
    case KILN_COMM_UINT8:
      return static_cast<const uint8_t*>(base)[i];
    case KILN_COMM_INT16:
      return static_cast<const int16_t*>(base)[i];
    case KILN_COMM_UINT16:
      return static_cast<const uint16_t*>(base)[i];
    case KILN_COMM_INT32:
      return static_cast<const int32_t*>(base)[i];
    case KILN_COMM_UINT32:
      return static_cast<const uint32_t*>(base)[i];
    case KILN_COMM_INT64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case KILN_COMM_UINT64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case KILN_COMM_FP16:
      return fp16_to_float(static_cast<const uint16_t*>(base)[i]);
    case KILN_COMM_BF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case KILN_COMM_FP32:
      return static_cast<const float*>(base)[i];
    case KILN_COMM_FP64:
      return static_cast<const double*>(base)[i];
  }
  return 0;
}

double combine_values(kilnReduceOp op, double a, double b) {
  switch (op) {
    case KILN_REDUCE_SUM:
      return a + b;
    case KILN_REDUCE_PROD:
      return a * b;
    case KILN_REDUCE_MAX:
      return std::max(a, b);
    case KILN_REDUCE_MIN:
      return std::min(a, b);
  }
  return a;
}

bool is_signed_type(kilnCommDataType t) {
  return t != KILN_COMM_UINT8 && t != KILN_COMM_UINT16 && t != KILN_COMM_UINT32 &&
         t != KILN_COMM_UINT64;
}

}  // namespace kiln::comm
