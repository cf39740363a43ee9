// The module's side of apps_module.h: the entry point the executable looks up.
#include "core/version.h"
#include "quant/qdq_plan.h"
#include "tools/apps_module.h"

extern "C" __attribute__((visibility("default"))) const kiln::tools::AppsModuleApi* kiln_apps_module_api() {
  static const kiln::tools::AppsModuleApi api{KILN_VERSION_STRING, &kiln::tools::run_quantize,
                                              &kiln::quant::default_op_types};
  return &api;
}
