// What the Aipp op's kernels share: the node's attributes decoded once, the parameters of a
// run (the static attribute or the dynamic input), the input check, and the channel fetch
// of one source pixel (step 2 of ops/aipp_params.h).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/aipp_params.h"

namespace kiln::ops {

struct AippNodeInfo {
  bool dynamic = false;
  AippParams params;            // static only
  int64_t image_bytes = 0;      // static only: bytes of one raw image
  int64_t max_src_image_size = 0;  // dynamic only
  AippOutputDesc out;
  std::vector<int64_t> output_dims;
};

// Decodes and validates the node's attributes (a static node's parameters included).
Expected<AippNodeInfo> aipp_node_info(const ir::Node& node);
// The parameters for one run: the static ones, or the dynamic input's, validated against
// the output and max_src_image_size.
Expected<AippParams> aipp_run_params(const ir::Node& node, const AippNodeInfo& info, const Tensor* params_input);
// The image input holds a batch of raw images of the parameters' format and size.
Status check_aipp_image(const ir::Node& node, const AippNodeInfo& info, const AippParams& p, const Tensor* image);
// Step 2: the channel values of source pixel (x, y) of one raw image, swaps applied:
// ch[0..2] the colour channels (Y,U,V or R,G,B; ch[0] alone for a grey image), ch[3] alpha.
void aipp_fetch_pixel(const AippParams& p, const uint8_t* image, int64_t x, int64_t y, float ch[4]);

// kiln AippConv (ops/aipp_conv.cc): a static Aipp and the convolution reading its image, folded
// into one node by compiler/passes/aipp_conv_fusion.cc. It carries the Aipp node's attributes,
// so aipp_node_info and aipp_description read it as they read an Aipp node.
inline constexpr const char* kAippConvOp = "AippConv";
// The profiler's task record that AippConv's fast kernel writes around the Aipp part of each
// strip (the Aipp rows into the strip buffer); the rest of the node's op time is the
// convolution. `kiln video-bench` counts these records, not the node, as preprocessing.
inline constexpr const char* kAippConvRowsTask = "AippConv: Aipp rows";
// An Aipp or AippConv node: the node that reads a model input's raw image.
bool is_aipp_node(const ir::Node& node);

// The Aipp (or AippConv) node reading graph input `input` (its raw image), or null.
const ir::Node* aipp_node_for_input(const ir::Graph& graph, const ir::Value* input);
// One line for `kiln inspect`: "static AIPP: input_format: YUV420SP_U8 ... -> NCHW [1,3,224,224]".
std::string aipp_description(const ir::Node& node);

}  // namespace kiln::ops
