// CenterCropPad (opset 18): crops or zero-pads chosen axes to a target size around the
// center (an odd difference puts the extra element at the end).
#include <cstring>
#include <string>
#include <vector>

#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// Output dims of CenterCropPad from the input dims and the target sizes.
Expected<std::vector<int64_t>> crop_pad_dims(const ir::Node& node, const std::vector<int64_t>& in,
                                             const std::vector<int64_t>& shape) {
  const int rank = static_cast<int>(in.size());
  std::vector<int64_t> axes = node.attr_ints("axes");
  if (!node.has_attr("axes"))
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  if (axes.size() != shape.size())
    return invalid_argument("node %s: shape has %zu values for %zu axes", node.label().c_str(), shape.size(),
                            axes.size());
  std::vector<int64_t> out = in;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int a, normalize_axis(node, axes[i], rank));
    if (seen[static_cast<size_t>(a)])
      return invalid_argument("node %s: axis %lld is repeated", node.label().c_str(), (long long)axes[i]);
    seen[static_cast<size_t>(a)] = true;
    if (shape[i] < 0)
      return invalid_argument("node %s: target size %lld is negative", node.label().c_str(), (long long)shape[i]);
    out[static_cast<size_t>(a)] = shape[i];
  }
  return out;
}

Status infer_center_crop_pad(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  Shape out = xt.shape.has_rank() ? unknown_dims(xt.shape.rank()) : Shape::unknown_rank();
  std::optional<std::vector<int64_t>> shape = constant_ints(ctx, 1);
  if (shape && xt.shape.is_static()) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, crop_pad_dims(ctx.node(), xt.shape.static_dims(), *shape));
    out = Shape::from_static(dims);
  }
  ctx.set_output(0, xt.dtype, out);
  return ok_status();
}

Status center_crop_pad_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!ctx.input(1)) return invalid_argument("node %s: shape input is required", node.label().c_str());
  const Tensor& shape_t = *ctx.input(1);
  if ((shape_t.dtype() != DataType::kInt64 && shape_t.dtype() != DataType::kInt32) || shape_t.rank() != 1)
    return invalid_argument("node %s: shape must be a 1-D int32/int64 tensor, got %s", node.label().c_str(),
                            shape_t.description().c_str());
  if (x.dtype() != DataType::kString && dtype_bits(x.dtype()) < 8) return unsupported_dtype(node, x.dtype());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out_dims, crop_pad_dims(node, x.dims(), shape_t.to_int64_vector()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  const int rank = x.rank();
  if (y->num_elements() == 0 || x.num_elements() == 0) return ok_status();
  // Per axis: output index o reads input index o + shift (crop: shift > 0, pad: shift < 0).
  std::vector<int64_t> shift(static_cast<size_t>(rank));
  for (int a = 0; a < rank; ++a) {
    const int64_t in = x.dim(a), out = out_dims[static_cast<size_t>(a)];
    shift[static_cast<size_t>(a)] = in >= out ? (in - out) / 2 : -((out - in) / 2);
  }
  const std::vector<int64_t> in_strides = contiguous_strides(x.dims());
  const size_t esize = x.dtype() == DataType::kString ? 0 : dtype_bytes(x.dtype(), 1);
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (int64_t o = 0; o < y->num_elements(); ++o) {
    int64_t src = 0;
    bool inside = true;
    for (int a = 0; a < rank && inside; ++a) {
      const int64_t i = idx[static_cast<size_t>(a)] + shift[static_cast<size_t>(a)];
      inside = i >= 0 && i < x.dim(a);
      src += i * in_strides[static_cast<size_t>(a)];
    }
    if (inside) {
      if (esize == 0)
        y->data<std::string>()[o] = x.data<std::string>()[src];
      else
        std::memcpy(static_cast<uint8_t*>(y->raw_data()) + o * esize,
                    static_cast<const uint8_t*>(x.raw_data()) + src * esize, esize);
    }
    for (int a = rank - 1; a >= 0; --a) {
      if (++idx[static_cast<size_t>(a)] < out_dims[static_cast<size_t>(a)]) break;
      idx[static_cast<size_t>(a)] = 0;
    }
  }
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("CenterCropPad")
                     .since(18)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("axes", AttrKind::kInts)
                     .infer(infer_center_crop_pad)
                     .kernel(center_crop_pad_kernel));

}  // namespace kiln::ops
