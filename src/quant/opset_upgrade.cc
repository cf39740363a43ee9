// Older ai.onnx opsets brought to opset 13 with ONNX's version converter (opset_upgrade.h).
#include "quant/opset_upgrade.h"

#include <onnx/version_converter/convert.h>

#include <exception>
#include <set>

#include "quant/qdq_writer.h"

namespace kiln::quant {
namespace {

int32_t onnx_elem_type(DataType t) {
  switch (t) {
    case DataType::kFloat32: return onnx::TensorProto::FLOAT;
    case DataType::kFloat16: return onnx::TensorProto::FLOAT16;
    case DataType::kFloat64: return onnx::TensorProto::DOUBLE;
    case DataType::kInt64: return onnx::TensorProto::INT64;
    case DataType::kInt32: return onnx::TensorProto::INT32;
    case DataType::kInt8: return onnx::TensorProto::INT8;
    case DataType::kUInt8: return onnx::TensorProto::UINT8;
    case DataType::kBool: return onnx::TensorProto::BOOL;
    default: return onnx::TensorProto::UNDEFINED;
  }
}

}  // namespace

Expected<bool> upgrade_opset(onnx::ModelProto& model, int64_t target, const ir::Graph& typed) {
  const int64_t from = onnx_opset(model);
  if (from >= target || from <= 0) return false;
  // Kiln's inferred types of the node outputs the model does not type itself.
  onnx::GraphProto& g = *model.mutable_graph();
  std::set<std::string> declared;
  for (const auto& v : g.value_info()) declared.insert(v.name());
  for (const auto& v : g.input()) declared.insert(v.name());
  for (const auto& v : g.output()) declared.insert(v.name());
  for (const auto& n : g.node())
    for (const std::string& out : n.output()) {
      const ir::Value* v = typed.find_value(out);
      if (out.empty() || declared.count(out) || !v || !v->type().is_tensor() || !v->shape().has_rank()) continue;
      const int32_t elem = onnx_elem_type(v->dtype());
      if (elem == onnx::TensorProto::UNDEFINED) continue;
      onnx::ValueInfoProto* vi = g.add_value_info();
      vi->set_name(out);
      onnx::TypeProto_Tensor* t = vi->mutable_type()->mutable_tensor_type();
      t->set_elem_type(elem);
      onnx::TensorShapeProto* shape = t->mutable_shape();
      for (const Dim& d : v->shape().dims()) {
        onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
        if (d.is_static()) dim->set_dim_value(d.value);
        else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
      }
    }
  onnx::ModelProto converted;
  try {
    converted = onnx::version_conversion::ConvertVersion(model, static_cast<int>(target));
  } catch (const std::exception& e) {
    return invalid_argument("converting ai.onnx opset %lld to %lld (ONNX's version converter): %s",
                            static_cast<long long>(from), static_cast<long long>(target), e.what());
  }
  converted.mutable_graph()->clear_value_info();
  model = std::move(converted);
  return true;
}

}  // namespace kiln::quant
