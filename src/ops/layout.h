// Channel-blocked tensor layout, the CPU twin of CANN's 5HD format (NC1HWC0): a tensor of
// logical shape [N, C, S...] is stored as [N, C1, S..., C0] with C1 = C / C0, so the C0
// channels of one pixel are contiguous and a convolution kernel loads them as one vector
// (C0 = 8 floats for AVX2, 16 for AVX-512). In the graph a blocked value simply has the
// 5-D (for 2-D images) shape, so shape inference, memory planning and the executor need
// nothing special; the ops that read or write it say so with a format attribute, and the
// kiln TransData op converts between the two (docs/fused-ops.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace kiln::ops {

inline constexpr const char* kFormatPlain = "NCHW";       // [N, C, S...]
inline constexpr const char* kFormatBlocked = "NC1HWC0";  // [N, C/C0, S..., C0]

// Whether `format` is one of the two names above.
bool valid_format(const std::string& format);
bool is_blocked_format(const std::string& format);

// [N, C, S...] -> [N, C/c0, S..., c0]. Fails unless rank >= 3 and C (when known) is a
// multiple of c0 > 0.
Expected<Shape> blocked_shape(const Shape& plain, int64_t c0);
// [N, C1, S..., c0] -> [N, C1*c0, S...]. Fails unless rank >= 4 and the last dim (when
// known) equals c0.
Expected<Shape> plain_shape(const Shape& blocked, int64_t c0);

// The block C0 when `node` writes its output 0 in NC1HWC0 (FusedConv's y_format, Pooling's
// format, TransData's dst_format), else 0. For tools comparing values with a plain graph.
int64_t blocked_output_c0(const ir::Node& node);

// Element copies between the layouts (float32, float64, float16, bfloat16 and any other
// fixed-size type: the data are moved, not converted). Parallel over N*C1.
Expected<Tensor> to_blocked(const Tensor& plain, int64_t c0);
Expected<Tensor> to_plain(const Tensor& blocked, int64_t c0);
// The same copy into `out`, which has the converted dims and src's dtype (not checked).
void relayout_into(const Tensor& src, int64_t c0, bool to_block, Tensor& out);

// TransData's attributes: the direction and the block.
struct TransDataAttrs {
  bool to_block = false;
  int64_t c0 = 0;
};
Expected<TransDataAttrs> trans_data_attrs(const ir::Node& node);

// For ops that take some inputs and output 0 in the blocked layout and are defined as their
// plain twin on the plain views (kiln FusedConv, kiln Pooling): inference and the reference
// kernel. `blocked_inputs[i]` says whether input i is blocked (missing entries: plain).
// Inference runs `plain_infer` on a context whose blocked inputs have their plain shapes
// (and no constant values), then blocks output 0's shape. The kernel unblocks those inputs,
// runs `plain_kernel` and blocks output 0.
Status infer_on_plain_view(InferContext& ctx, int64_t c0, const std::vector<bool>& blocked_inputs,
                           bool blocked_output, const std::function<Status(InferContext&)>& plain_infer);
Status run_on_plain_view(KernelContext& ctx, int64_t c0, const std::vector<bool>& blocked_inputs,
                         bool blocked_output, const std::function<Status(KernelContext&)>& plain_kernel);
// The same with a block per input and for output 0 (0: plain), for ops whose tensors have
// different blocks: kiln FusedQLinearConv's channels-last int8 tensors are blocked by their
// whole channel count (C1 = 1, C0 = C: NHWC's bytes).
Status infer_on_plain_view(InferContext& ctx, const std::vector<int64_t>& input_c0, int64_t output_c0,
                           const std::function<Status(InferContext&)>& plain_infer);
Status run_on_plain_view(KernelContext& ctx, const std::vector<int64_t>& input_c0, int64_t output_c0,
                         const std::function<Status(KernelContext&)>& plain_kernel);

}  // namespace kiln::ops
