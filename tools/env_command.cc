// `kiln env`: the KILN_* environment variables Kiln reads (core/env_knobs.h), with the values
// each takes, its default, what it does and its value in this environment.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/env_knobs.h"
#include "core/status.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct EnvArgs {
  bool json = false;
};

int run_env(const EnvArgs& args) {
  if (args.json) {
    nlohmann::json vars = nlohmann::json::array();
    for (const EnvKnob& k : env_knobs()) {
      const char* value = std::getenv(k.name);
      vars.push_back({{"name", k.name},
                      {"values", k.values},
                      {"default", k.default_value},
                      {"doc", k.doc},
                      {"value", value ? nlohmann::json(value) : nlohmann::json(nullptr)}});
    }
    nlohmann::json j = {{"variables", vars}, {"warnings", environment_warnings()}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (const EnvKnob& k : env_knobs()) {
    const char* value = std::getenv(k.name);
    std::printf("%s=%s\n    %s\n    takes %s; default %s\n", k.name, value ? value : "(unset)", k.doc, k.values,
                k.default_value);
  }
  // The warnings themselves were printed when the command started.
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<EnvArgs>();
  app.add_flag("--json", args->json, "Print the variables (and any warnings about them) as JSON");
  return [args] { return run_env(*args); };
}

KILN_REGISTER_SUBCOMMAND("env", "List the KILN_* environment variables: values, defaults, current settings", setup);

}  // namespace
}  // namespace kiln::tools
