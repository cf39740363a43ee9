// `kiln ops`: the operators Kiln supports, with their domains and opset ranges.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "ops/registry.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct OpsArgs {
  bool json = false;
};

int run_ops(const OpsArgs& args) {
  // (domain, name) -> opset ranges, sorted for a stable listing.
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<int64_t, int64_t>>> ops;
  for (const ops::OpSchema* s : ops::OpRegistry::instance().all())
    ops[{s->domain(), s->name()}].push_back({s->first_opset(), s->last_opset()});
  if (args.json) {
    nlohmann::json j = nlohmann::json::array();
    for (auto& [key, ranges] : ops) {
      std::sort(ranges.begin(), ranges.end());
      nlohmann::json r = nlohmann::json::array();
      for (const auto& [a, b] : ranges) r.push_back({a, b});
      j.push_back({{"domain", key.first.empty() ? "ai.onnx" : key.first}, {"op", key.second}, {"opsets", r}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (auto& [key, ranges] : ops) {
    std::sort(ranges.begin(), ranges.end());
    std::string text;
    for (const auto& [a, b] : ranges) text += (text.empty() ? "" : ", ") + std::to_string(a) + "-" + std::to_string(b);
    std::printf("%-12s %-32s opsets %s\n", key.first.empty() ? "ai.onnx" : key.first.c_str(), key.second.c_str(),
                text.c_str());
  }
  std::printf("%zu operators\n", ops.size());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<OpsArgs>();
  app.add_flag("--json", args->json, "Print the list as JSON");
  return [args] { return run_ops(*args); };
}

KILN_REGISTER_SUBCOMMAND("ops", "List the supported operators and their opset ranges", setup);

}  // namespace
}  // namespace kiln::tools
