// AIPP insertion (`kiln compile --insert-op-conf`): each configured model input becomes the
// raw uint8 image it is made from, read by a kiln Aipp node that writes the float32 tensor
// the rest of the graph read before (ops/aipp_params.h). The input keeps its name, so a user
// feeds the image where the tensor went; the node's output takes the name "<input>_aipp".
#include <algorithm>

#include "compiler/compiler.h"
#include "ops/aipp_params.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

// The model input's layout and size: NCHW when dim 1 is a channel count AIPP can write,
// else NHWC when dim 3 is.
Expected<ops::AippOutputDesc> aipp_output_desc(const ir::Value& x, const ops::AippInsertion& ins) {
  const Shape& s = x.shape();
  if (x.dtype() != DataType::kFloat32 || !s.has_rank() || s.rank() != 4 || !s.is_static())
    return invalid_argument("%s", ins.locate("related_input_rank " + std::to_string(ins.input_index) + ": input '" +
                                             x.name() + "' is " + x.type().to_string() +
                                             "; AIPP feeds a float32 image input of 4 fixed dims (use --input-shape)")
                                      .c_str());
  const std::vector<int64_t> d = s.static_dims();
  auto is_channels = [](int64_t c) { return c == 1 || c == 3 || c == 4; };
  ops::AippOutputDesc out;
  out.batch = d[0];
  if (is_channels(d[1])) {
    out.channels = d[1], out.height = d[2], out.width = d[3];
  } else if (is_channels(d[3])) {
    out.nhwc = true;
    out.channels = d[3], out.height = d[1], out.width = d[2];
  } else {
    return invalid_argument("%s", ins.locate("input '" + x.name() + "' " + s.to_string() +
                                             " has no channel dim of 1, 3 or 4 (NCHW or NHWC)")
                                      .c_str());
  }
  return out;
}

}  // namespace

Status insert_aipp(ir::Graph& g, const std::vector<ops::AippInsertion>& insertions) {
  if (insertions.empty()) return ok_status();
  std::vector<ir::Value*> data_inputs;
  for (ir::Value* v : g.inputs())
    if (!v->has_initializer()) data_inputs.push_back(v);
  for (const ops::AippInsertion& ins : insertions) {
    if (ins.input_index < 0 || ins.input_index >= static_cast<int64_t>(data_inputs.size()))
      return invalid_argument("%s", ins.locate("related_input_rank " + std::to_string(ins.input_index) +
                                               ": the model has " + std::to_string(data_inputs.size()) + " input(s)")
                                        .c_str());
    ir::Value* x = data_inputs[static_cast<size_t>(ins.input_index)];
    KILN_ASSIGN_OR_RETURN(ops::AippOutputDesc out, aipp_output_desc(*x, ins));
    ops::AippParams params = ins.params;
    std::vector<int64_t> raw_dims{out.batch};
    if (!ins.dynamic) {
      // src_image_size 0 (or absent) means the model input's size, as in ATC.
      if (params.src_w == 0) params.src_w = static_cast<int32_t>(out.width);
      if (params.src_h == 0) params.src_h = static_cast<int32_t>(out.height);
      Status valid = ops::validate_aipp(params, out);
      if (!valid.ok())
        return invalid_argument("%s", ins.locate(valid.message() + " (input '" + x->name() + "')").c_str());
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> image, ops::aipp_image_dims(params.format, params.src_w, params.src_h));
      raw_dims.insert(raw_dims.end(), image.begin(), image.end());
    } else {
      raw_dims.push_back(ins.max_src_image_size);
    }

    // x (float image) becomes "<x>_aipp", the node's output; a new uint8 input takes the name.
    const std::string name = x->name();
    for (const std::string& taken : {name + "_aipp", name + "_aipp_params"})
      if (g.find_value(taken))
        return invalid_argument("input '%s': the graph already has a value named '%s'", name.c_str(), taken.c_str());
    KILN_RETURN_IF_ERROR(g.rename_value(x, name + "_aipp"));
    KILN_ASSIGN_OR_RETURN(ir::Value * raw, g.add_value(name));
    raw->type() = ir::TensorType{};
    raw->type().dtype = DataType::kUInt8;
    raw->type().shape = Shape::from_static(raw_dims);
    std::replace(g.inputs().begin(), g.inputs().end(), x, raw);
    std::vector<ir::Value*> node_inputs{raw};
    if (ins.dynamic) {
      KILN_ASSIGN_OR_RETURN(ir::Value * pv, g.add_value(name + "_aipp_params"));
      pv->type().dtype = DataType::kUInt8;
      pv->type().shape = Shape::from_static({static_cast<int64_t>(ops::aipp_serialized_bytes(out.batch))});
      g.inputs().push_back(pv);
      node_inputs.push_back(pv);
    }
    ir::Node* n = g.add_node("aipp_" + name, ops::kAippOp, ops::kKilnDomain, ops::kKilnOpset, node_inputs, {x});
    n->attrs()["mode"] = ir::Attribute::from_string(ins.dynamic ? "dynamic" : "static");
    n->attrs()["output_layout"] = ir::Attribute::from_string(out.nhwc ? "NHWC" : "NCHW");
    n->attrs()["output_shape"] = ir::Attribute::from_ints(x->shape().static_dims());
    if (ins.dynamic) {
      n->attrs()["max_src_image_size"] = ir::Attribute::from_int(ins.max_src_image_size);
    } else {
      const std::vector<uint8_t> bytes = ops::serialize_aipp(params);
      Tensor t = Tensor::make(DataType::kUInt8, {static_cast<int64_t>(bytes.size())});
      std::copy(bytes.begin(), bytes.end(), t.data<uint8_t>());
      n->attrs()["params"] = ir::Attribute::from_tensor(std::move(t));
    }
  }
  g.opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  return g.topological_sort();
}

}  // namespace kiln::compiler
