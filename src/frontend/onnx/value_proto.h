// Reads the values of ONNX test-data files (test_data_set_N/input_i.pb, output_i.pb): a
// TensorProto, a SequenceProto of tensors or an OptionalProto, as the declared type says.
#pragma once

#include <string>

#include "core/runtime_value.h"
#include "core/status.h"
#include "ir/graph.h"

namespace kiln::frontend {

// Reads the protobuf file at `path` as the kind `declared` names: a tensor (TensorProto),
// a sequence (SequenceProto whose items are tensors) or an optional (OptionalProto; an
// empty one is RuntimeValue() / kNone). An empty sequence takes declared.dtype as its
// element type. The file is untrusted: a parse failure, a content of another kind, items
// of differing dtypes or a dtype other than the declared one are errors naming the file.
Expected<RuntimeValue> read_value_proto(const std::string& path, const ir::TensorType& declared);

}  // namespace kiln::frontend
