// The `kiln` subcommands that need OpenCV, cpp-httplib (and with it OpenSSL) or libonnx live in
// a module, libkiln_apps.so, which the command loads (dlopen) only when one of them runs, so
// that `kiln run`, `compile` and the other commands do not map those libraries and their
// dependencies (with libcrypto, 10.6 MiB of every `kiln run`'s peak RSS before; issue 33). The
// module resolves Kiln's own code from the executable, which exports its symbols for it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tools/quantize_command.h"

namespace kiln::tools {

inline constexpr char kAppsModule[] = "libkiln_apps.so";

// What the executable calls in the module beyond its subcommands: `kiln compile --precision
// int8` quantises through `kiln quantize`'s code.
struct AppsModuleApi {
  const char* kiln_version;  // KILN_VERSION_STRING of the build the module belongs to
  int (*run_quantize)(const QuantizeArgs& args);
  const std::vector<std::string>& (*default_quant_op_types)();
};

// Whether `name` is one of the module's subcommands (ocr, video-bench, serve, loadgen, quantize).
bool is_apps_module_command(std::string_view name);

// Loads the module once per process (later calls return the first call's result): its
// subcommands register themselves into subcommands(). The module is looked for beside the
// executable, in its ../lib and ../<install libdir>, then on the loader's path; the error names
// the module and why it could not be loaded.
Expected<const AppsModuleApi*> load_apps_module();

}  // namespace kiln::tools

// The module's entry point, looked up by name: its AppsModuleApi.
extern "C" const kiln::tools::AppsModuleApi* kiln_apps_module_api();
