// aipp_conv_fusion: a static kiln Aipp node and the convolution that alone reads its float32
// image -> one kiln AippConv (ops/aipp_conv.cc), whose fast kernel computes the convolution
// from strips of preprocessed rows held in cache and never stores the image (docs/aipp.md:
// for PP-OCRv4 det at 640x640 the 4.9 MB image was about half of the Aipp node's time, and the
// convolution read it back from memory). Runs after layout_assignment and
// precision_assignment, so the convolution's output layout (NC1HWC0 for a blocked reader) and
// precision are settled and the folded node keeps them.
//
// Folded when: the Aipp is static and writes NCHW; its image is larger than 2 MiB
// (kMinImageBytes: a smaller one stays in cache unfolded), no graph output, and has one reader, a 2-D ONNX Conv or kiln FusedConv reading it as X, with one group, at most 4 input
// channels, constant float32 W (and B), no residual Z, float32 compute and output, and a fast
// kernel (oneDNN takes its activation). Otherwise the pass leaves the pair and its note says
// why ("aipp_conv_fusion: aipp_x not folded: its image has 2 readers"). `--disable-pass
// aipp_conv_fusion` keeps every pair.
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "kernels/kernel_registry.h"
#include "ops/aipp.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::is_op;

// The convolution attributes AippConv carries (its schema's); x_format must be NCHW and
// y_dtype float32, and are dropped.
constexpr const char* kConvAttrs[] = {"auto_pad",          "dilations",        "group",
                                      "kernel_shape",      "pads",             "strides",
                                      "y_format",          "c0",               "activation",
                                      "activation_params", "activation_post_scale", "activation_post_shift",
                                      "precision"};
constexpr const char* kAippAttrs[] = {"mode", "params", "output_layout", "output_shape"};

// Input channels up to which the fold applies: the Aipp node writes 1, 3 or 4.
constexpr int64_t kMaxInputChannels = 4;

// Images up to this size are not folded: they stay in the core's L2 between the Aipp node and
// the convolution anyway (the Aipp kernel's kStreamBytes, the size from which it streams its
// output past the caches), and the strips only add their overheads (recomputed border rows, a
// oneDNN call per strip, a copy per channel block): MobileNetV2 at 224x224 (0.6 MB), one
// thread, load 7-8, three alternated `kiln profile` runs: folded 0.56-0.58 ms against
// 0.26-0.29 + 0.21-0.23 ms apart (docs/aipp.md).
constexpr int64_t kMinImageBytes = int64_t{2} << 20;

bool carried_conv_attr(const std::string& name) {
  for (const char* a : kConvAttrs)
    if (name == a) return true;
  return false;
}

class AippConvFolder {
 public:
  AippConvFolder(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    std::vector<ir::Node*> aipps;
    for (const auto& n : g_.nodes())
      if (is_op(*n, ops::kAippOp, ops::kKilnDomain)) aipps.push_back(n.get());
    for (ir::Node* aipp : aipps) {
      ir::Node* conv = nullptr;
      const std::string why = refusal(*aipp, &conv);
      if (!why.empty()) {
        ctx_.note("aipp_conv_fusion: " + aipp->name() + " not folded: " + why);
        continue;
      }
      fold(aipp, conv);
    }
    return fusion::finish(g_, removed_);
  }

 private:
  // Why `aipp` and its reader cannot be folded, or "" (then *conv is the reader).
  std::string refusal(const ir::Node& aipp, ir::Node** conv) const {
    if (aipp.attr_string("mode", "static") != "static") return "a dynamic Aipp (its parameters come at run time)";
    if (aipp.attr_string("output_layout", "NCHW") != "NCHW") return "its image is NHWC";
    const ir::Value* image = aipp.output(0);
    if (uses_.pinned(image)) return "its image is a graph output";
    if (image->shape().has_rank() && image->shape().is_static()) {
      int64_t bytes = static_cast<int64_t>(sizeof(float));
      for (int64_t d : image->shape().static_dims()) bytes *= d;
      if (bytes <= kMinImageBytes)
        return "its image (" + std::to_string(bytes) + " bytes) stays in the cache (folded from " +
               std::to_string(kMinImageBytes) + " bytes)";
    }
    const std::vector<ir::Node*>& readers = uses_.consumers(image);
    if (readers.size() != 1) return "its image has " + std::to_string(readers.size()) + " readers";
    ir::Node* c = readers[0];
    const std::string label = c->label();
    if (!is_op(*c, "Conv") && !is_op(*c, "FusedConv", ops::kKilnDomain))
      return "its reader " + label + " is no convolution";
    if (c->input(0) != image || c->num_inputs() > 3 || c->num_outputs() != 1)
      return "its reader " + label + " reads it as another input than X, or has a residual";
    for (const auto& [name, attr] : c->attrs()) {
      (void)attr;
      if (carried_conv_attr(name) || name == "x_format" || name == "y_dtype") continue;
      return label + " has attribute " + name;
    }
    if (c->attr_string("x_format", ops::kFormatPlain) != ops::kFormatPlain) return label + " reads a blocked X";
    if (c->attr_string("precision", "fp32") != "fp32") return label + " computes in " + c->attr_string("precision", "");
    if (c->attr_string("y_dtype", "float32") != "float32" || c->output(0)->dtype() != DataType::kFloat32)
      return label + " writes " + std::string(dtype_name(c->output(0)->dtype()));
    if (c->attr_int("group", 1) != 1) return label + " has groups";
    const ir::Value* w = c->input(1);
    const ir::Value* b = c->num_inputs() > 2 ? c->input(2) : nullptr;
    if (!fusion::constant(g_, w) || w->initializer()->dtype() != DataType::kFloat32)
      return label + ": W is not a float32 constant";
    if (b && (!fusion::constant(g_, b) || b->initializer()->dtype() != DataType::kFloat32))
      return label + ": B is not a float32 constant";
    const std::vector<int64_t>& wd = w->initializer()->dims();
    if (wd.size() != 4) return label + " is not a 2-D convolution";
    if (wd[1] > kMaxInputChannels)
      return label + " has " + std::to_string(wd[1]) + " input channels (at most " +
             std::to_string(kMaxInputChannels) + ")";
    if (!kernels::has_fast_kernel(*c)) return label + " has no fast kernel";
    *conv = c;
    return "";
  }

  void fold(ir::Node* aipp, ir::Node* conv) {
    std::vector<ir::Value*> inputs{aipp->input(0), conv->input(1)};
    if (conv->num_inputs() > 2 && conv->input(2)) inputs.push_back(conv->input(2));
    ir::AttributeMap attrs;
    for (const char* a : kAippAttrs)
      if (aipp->has_attr(a)) attrs[a] = aipp->attrs().at(a);
    for (const char* a : kConvAttrs)
      if (conv->has_attr(a)) attrs[a] = conv->attrs().at(a);
    const std::string name = fusion::fused_name({aipp, conv});
    const std::string folded = aipp->name() + " and " + conv->name();
    ir::Node* n = fusion::add_fused_node(g_, uses_, ops::kAippConvOp, {aipp, conv}, inputs, conv->output(0), removed_);
    n->set_name(name);
    n->attrs() = std::move(attrs);
    ctx_.note("aipp_conv_fusion: " + folded + " folded into AippConv " + name);
    ctx_.count_fusion("Aipp+Conv");
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo aipp_conv_fusion_pass() {
  PassInfo p;
  p.name = "aipp_conv_fusion";
  p.min_level = 2;
  p.description = "a static Aipp and the convolution reading its image -> kiln AippConv (no float32 image)";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    if (!fusion::kiln_op_available(ops::kAippConvOp)) {
      ctx.note("aipp_conv_fusion: kiln AippConv is not registered; nothing folded");
      return ok_status();
    }
    AippConvFolder f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
