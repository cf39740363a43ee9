// ONNX test-data files -> RuntimeValue: TensorProto, SequenceProto and OptionalProto.
#include "frontend/onnx/value_proto.h"

#include <onnx/onnx-data_pb.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>

#include "frontend/onnx/tensor_proto.h"

namespace kiln::frontend {

namespace {

Expected<std::string> read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return not_found("cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument("'%s' is not a regular file", path.c_str());
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > static_cast<size_t>(INT_MAX))
    return unsupported("'%s' is %zu bytes; a protobuf message is limited to 2 GB", path.c_str(), size);
  std::string bytes(size, '\0');
  if (size && std::fread(bytes.data(), 1, size, f.get()) != size)
    return data_loss("'%s': reading %zu bytes failed", path.c_str(), size);
  return bytes;
}

template <typename Proto>
Status parse(const std::string& bytes, Proto& proto, const std::string& path, const char* type_name) {
  bool parsed = false;
  try {
    parsed = proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  } catch (...) {
    parsed = false;
  }
  if (!parsed) return invalid_argument("'%s' is not a valid %s (protobuf parse failed)", path.c_str(), type_name);
  return ok_status();
}

// A tensor checked against the declared element type (undefined declares nothing).
Expected<Tensor> tensor_of(const onnx::TensorProto& proto, const TensorProtoContext& ctx, DataType declared,
                           const std::string& what) {
  KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(proto, ctx, what));
  if (declared != DataType::kUndefined && t.dtype() != declared)
    return invalid_argument("%s is %s, the model declares %s", what.c_str(), t.description().c_str(),
                            dtype_name(declared));
  return t;
}

Expected<RuntimeValue> sequence_of(const onnx::SequenceProto& proto, const TensorProtoContext& ctx,
                                   DataType declared, const std::string& what) {
  // An empty sequence may leave elem_type undefined; one with items must hold tensors.
  const bool empty = proto.tensor_values_size() == 0 && proto.sparse_tensor_values_size() == 0 &&
                     proto.sequence_values_size() == 0 && proto.map_values_size() == 0 &&
                     proto.optional_values_size() == 0;
  if (!(proto.elem_type() == onnx::SequenceProto::TENSOR ||
        (empty && proto.elem_type() == onnx::SequenceProto::UNDEFINED)))
    return unsupported("%s is a sequence of elem_type %d; Kiln sequences hold tensors (elem_type 1)", what.c_str(),
                       static_cast<int>(proto.elem_type()));
  if (!empty && proto.tensor_values_size() == 0)
    return invalid_argument("%s is a sequence of tensors but holds no tensor_values", what.c_str());
  std::vector<Tensor> items;
  items.reserve(static_cast<size_t>(proto.tensor_values_size()));
  DataType dtype = declared;
  for (int i = 0; i < proto.tensor_values_size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_of(proto.tensor_values(i), ctx, dtype, what + " item " + std::to_string(i)));
    dtype = t.dtype();
    items.push_back(std::move(t));
  }
  return RuntimeValue::sequence(dtype, std::move(items));
}

}  // namespace

Expected<RuntimeValue> read_value_proto(const std::string& path, const ir::TensorType& declared) {
  if (static_cast<int32_t>(declared.kind) < 0 || static_cast<int32_t>(declared.kind) > ir::kMaxTypeKind)
    return invalid_argument("'%s': declared type kind %d is not valid", path.c_str(),
                            static_cast<int>(declared.kind));
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  TensorProtoContext ctx;
  ctx.external_data_dir = std::filesystem::path(path).parent_path().string();
  if (ctx.external_data_dir.empty()) ctx.external_data_dir = ".";
  const std::string what = "'" + path + "'";
  switch (declared.kind) {
    case ir::TypeKind::kTensor: {
      onnx::TensorProto proto;
      KILN_RETURN_IF_ERROR(parse(bytes, proto, path, "TensorProto"));
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_of(proto, ctx, declared.dtype, what));
      return RuntimeValue(std::move(t));
    }
    case ir::TypeKind::kSequence: {
      onnx::SequenceProto proto;
      KILN_RETURN_IF_ERROR(parse(bytes, proto, path, "SequenceProto"));
      return sequence_of(proto, ctx, declared.dtype, what);
    }
    case ir::TypeKind::kOptionalTensor:
    case ir::TypeKind::kOptionalSequence: {
      onnx::OptionalProto proto;
      KILN_RETURN_IF_ERROR(parse(bytes, proto, path, "OptionalProto"));
      const bool want_tensor = declared.kind == ir::TypeKind::kOptionalTensor;
      switch (proto.elem_type()) {
        case onnx::OptionalProto::UNDEFINED:
          if (proto.has_tensor_value() || proto.has_sequence_value())
            return invalid_argument("%s is an optional with elem_type 0 (empty) that holds a value", what.c_str());
          return RuntimeValue();
        case onnx::OptionalProto::TENSOR: {
          if (!want_tensor)
            return invalid_argument("%s holds a tensor, the model declares %s", what.c_str(),
                                    declared.to_string().c_str());
          if (!proto.has_tensor_value())
            return invalid_argument("%s is an optional tensor with no tensor_value", what.c_str());
          KILN_ASSIGN_OR_RETURN(Tensor t, tensor_of(proto.tensor_value(), ctx, declared.dtype, what));
          return RuntimeValue(std::move(t));
        }
        case onnx::OptionalProto::SEQUENCE:
          if (want_tensor)
            return invalid_argument("%s holds a sequence, the model declares %s", what.c_str(),
                                    declared.to_string().c_str());
          if (!proto.has_sequence_value())
            return invalid_argument("%s is an optional sequence with no sequence_value", what.c_str());
          return sequence_of(proto.sequence_value(), ctx, declared.dtype, what);
        default:
          return unsupported("%s is an optional of elem_type %d; Kiln optionals hold tensors or sequences",
                             what.c_str(), static_cast<int>(proto.elem_type()));
      }
    }
  }
  return invalid_argument("'%s': declared type kind is not valid", path.c_str());
}

}  // namespace kiln::frontend
