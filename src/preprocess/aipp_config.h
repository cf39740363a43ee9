// Reads an AIPP configuration file (`kiln compile --insert-op-conf aipp.cfg`): ATC's
// protobuf text format (aipp.proto), one `aipp_op { ... }` block per model input.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "ops/aipp_params.h"

namespace kiln::preprocess {

// Parses the text; `name` (the file name) prefixes every error with the line, e.g.
// "aipp.cfg:4:3: no field named \"crop_sise_w\" in aipp_op". Checks what the file alone
// decides (modes, formats, switches and their fields); the compiler checks the rest against
// the model input (ops::validate_aipp), and AippInsertion::locate names the field's line.
Expected<std::vector<ops::AippInsertion>> parse_aipp_config(const std::string& text, const std::string& name);
Expected<std::vector<ops::AippInsertion>> read_aipp_config(const std::string& path);

}  // namespace kiln::preprocess
