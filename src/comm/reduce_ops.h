// Reduce kernels of the collectives: one Reducer (acc = acc op in, or out = x op in,
// element-wise) per kilnCommDataType x kilnReduceOp, and the names and sizes of those enums
// for messages.
#pragma once

#include <cstddef>

#include "comm/transport.h"
#include "kiln/comm.h"

namespace kiln::comm {

// Bytes per element of a kilnCommDataType value; 0 for a value that is not one.
size_t comm_dtype_size(int dtype);
// "int8", "fp16", "bf16", ... ; "?" for a value that is not a kilnCommDataType.
const char* comm_dtype_name(int dtype);
// "sum", "prod", "max", "min"; "?" otherwise.
const char* reduce_op_name(int op);

// The reducer for (dtype, op), or null when either value is out of range. Integers wrap
// (two's complement) on overflow; fp16 and bf16 are widened to float, combined and
// rounded back to nearest even, which equals the correctly rounded fp16/bf16 result
// (float has more than 2p + 2 bits for both). max/min of a NaN keep the other operand's
// order-dependent choice, as the x86 max/min instructions do.
const Reducer* reducer_for(int dtype, int op);

}  // namespace kiln::comm
