// The shape options of the kiln command, in Kiln's spelling and in ATC's:
//   --input-shape "x:1,3,48,320;y:1,128"   fixed shapes; -1 leaves a dim open (ATC)
//   --dynamic-dims "x:1,3,48,320;x:1,3,48,640"   Kiln's form: full shapes, one item per input and bucket
//   --dynamic-dims "320;640"   ATC's form: one gear per ';', the values of the -1 dims of
//                              --input-shape in the order they appear there
//   --dynamic-batch-size "1,4,8"   batch buckets (axis 0 of the inputs whose axis 0 is open)
// Malformed text is a usage error (exit code 2); a name the model lacks is found later, by
// the compiler or the runtime, and is a model error (exit code 1).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/compiler.h"
#include "core/status.h"

namespace kiln::tools {

// --input-shape items in the order given; a dim of -1 is left open.
using OrderedShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;
Expected<OrderedShapes> parse_shape_list(const std::string& spec, const char* option = "--input-shape");

// As the compiler takes them (compiler::InputShapes), -1 kept for open dims.
compiler::InputShapes to_input_shapes(const OrderedShapes& shapes);

// Fills options.input_shapes, options.dynamic_dims and options.dynamic_batch from the three
// option texts (any may be empty), converting ATC's forms to Kiln's.
Status apply_shape_options(const std::string& input_shape, const std::string& dynamic_dims,
                           const std::string& dynamic_batch, compiler::CompileOptions& options);

// --input-shape for commands that run the model (run, bench, profile): every dim must be
// known, since random inputs take the shape. -1 is refused with a hint.
Expected<compiler::InputShapes> parse_run_shapes(const std::string& spec);

}  // namespace kiln::tools
