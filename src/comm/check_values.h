// Element access and the serial reference of the reduce ops, for code that checks what a
// collective computed (kiln comm-bench -c 1, the comm tests): values go in and out of buffers
// of any kilnCommDataType as doubles, which hold every value those checks use exactly.
#pragma once

#include <cstdint>

#include "kiln/comm.h"

namespace kiln::comm {

// Element i of a buffer of type t, written from / read as a double (integers truncate,
// fp16 / bf16 round to nearest even).
void store_value(kilnCommDataType t, void* base, uint64_t i, double v);
double load_value(kilnCommDataType t, const void* base, uint64_t i);

// a op b, as the serial reference computes it.
double combine_values(kilnReduceOp op, double a, double b);

// Whether t holds negative values (the signed integers and the float types).
bool is_signed_type(kilnCommDataType t);

}  // namespace kiln::comm
