// Constant nodes turned into initializers (constant_nodes.h).
#include "quant/constant_nodes.h"

namespace kiln::quant {

int constant_nodes_to_initializers(onnx::ModelProto& model) {
  onnx::GraphProto& g = *model.mutable_graph();
  onnx::GraphProto kept;
  int moved = 0;
  for (const onnx::NodeProto& n : g.node()) {
    const bool constant = n.op_type() == "Constant" && (n.domain().empty() || n.domain() == "ai.onnx") &&
                          n.output_size() == 1 && n.attribute_size() == 1 && n.attribute(0).name() == "value" &&
                          n.attribute(0).has_t();
    if (!constant) {
      *kept.add_node() = n;
      continue;
    }
    onnx::TensorProto* t = g.add_initializer();
    *t = n.attribute(0).t();
    t->set_name(n.output(0));
    ++moved;
  }
  if (moved) g.mutable_node()->Swap(kept.mutable_node());
  return moved;
}

}  // namespace kiln::quant
