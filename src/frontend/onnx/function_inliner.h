// Model-local ONNX functions (ModelProto.functions): every node that calls one is replaced,
// before import, by the function body's nodes with their values renamed and their
// attribute references (ref_attr_name) bound to the call's attributes.
#pragma once

#include <onnx/onnx_pb.h>

#include "core/status.h"

namespace kiln::frontend {

// Calls nested deeper than this (a function calling itself, directly or not) are an error.
inline constexpr int kMaxFunctionDepth = 64;

// Expands, in the main graph and in every subgraph, each node whose (domain, op_type) names
// one of model.functions(): formal inputs and outputs become the call's actual names
// (omitted optional inputs stay omitted), other body values and node names get a prefix
// unique to the call, and an attribute with ref_attr_name takes the call's attribute of
// that name (or is dropped, leaving the op's default). Domains the functions import and the
// model does not are added to the model's opset imports. Errors name the calling node.
Status inline_model_functions(onnx::ModelProto& model);

}  // namespace kiln::frontend
