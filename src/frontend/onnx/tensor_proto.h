// TensorProto -> kiln::Tensor: raw and typed data fields with ONNX's packing rules, and
// external data files. Internal to the ONNX frontend.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::frontend {

struct TensorProtoContext {
  // Directory external-data locations are relative to; empty when unknown (importing from
  // bytes with no ImportOptions::external_data_dir), which makes external data an error.
  std::string external_data_dir;
};

// Converts `proto` to a Tensor. `what` names the tensor in errors ("initializer 'w'",
// "attribute 'value' of node 'c' (Constant)"). Never trusts the proto: dtype, dims, data
// sizes and external-data locations are all checked before anything is allocated.
Expected<Tensor> tensor_from_proto(const onnx::TensorProto& proto, const TensorProtoContext& ctx,
                                   const std::string& what);

// Maps an ONNX elem_type number to a DataType (0 = undefined is allowed).
Expected<DataType> dtype_from_onnx(int32_t elem_type, const std::string& what);

}  // namespace kiln::frontend
