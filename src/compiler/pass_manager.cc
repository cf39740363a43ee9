// The pass manager: registry, pipeline runner, per-pass records and the fusion switch file.
#include "compiler/pass_manager.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "compiler/passes/passes.h"
#include "core/logging.h"

namespace kiln::compiler {

bool PassOptions::default_verify_each_pass() {
  const char* env = std::getenv("KILN_VERIFY_PASSES");
  if (env && *env) return std::string(env) != "0";
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

void PassContext::begin_pass(const std::string& name) {
  records_.push_back(PassRecord{});
  records_.back().name = name;
}

PassRecord& PassContext::current() { return records_.empty() ? scratch_ : records_.back(); }

PassRegistry& PassRegistry::instance() {
  // Registered explicitly here rather than by static registrars, so a static link never
  // drops a pass and the pipeline order is written down in one place.
  static PassRegistry* registry = [] {
    auto* r = new PassRegistry;
    register_builtin_passes(*r);
    return r;
  }();
  return *registry;
}

Status PassRegistry::add(PassInfo info) {
  if (info.name.empty() || !info.run) return invalid_argument("a pass needs a name and a function");
  if (find(info.name)) return invalid_argument("pass '%s' is registered twice", info.name.c_str());
  if (info.required) info.min_level = 0;
  passes_.push_back(std::move(info));
  return ok_status();
}

const PassInfo* PassRegistry::find(const std::string& name) const {
  for (const PassInfo& p : passes_)
    if (p.name == name) return &p;
  return nullptr;
}

std::string PassRegistry::names() const {
  std::string s;
  for (const PassInfo& p : passes_) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

bool pass_enabled(const PassInfo& info, const PassOptions& options) {
  if (info.required) return true;
  return options.opt_level >= info.min_level && !options.disabled.count(info.name);
}

Status validate_pass_options(const PassOptions& options) {
  const PassRegistry& reg = PassRegistry::instance();
  if (options.opt_level < 0 || options.opt_level > 3)
    return invalid_argument("optimisation level %d is not one of 0..3", options.opt_level);
  for (const std::string& name : options.disabled) {
    const PassInfo* p = reg.find(name);
    if (!p) return invalid_argument("unknown pass '%s'; the passes are: %s", name.c_str(), reg.names().c_str());
    if (p->required)
      return invalid_argument("pass '%s' is required for a correct model and cannot be disabled", name.c_str());
  }
  return ok_status();
}

Status run_passes(ir::Graph& graph, PassContext& ctx) {
  KILN_RETURN_IF_ERROR(validate_pass_options(ctx.options()));
  return run_passes(graph, ctx, PassRegistry::instance());
}

Status run_passes(ir::Graph& graph, PassContext& ctx, const PassRegistry& registry) {
  for (const PassInfo& p : registry.passes()) {
    if (!pass_enabled(p, ctx.options())) continue;
    ctx.begin_pass(p.name);
    auto start = std::chrono::steady_clock::now();
    Status s = p.run(graph, ctx);
    ctx.current().ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    KILN_RETURN_IF_ERROR(s, "pass '%s'", p.name.c_str());
    KILN_LOG(kInfo, "pass %s: %d changed, %.2f ms", p.name.c_str(), ctx.current().changed, ctx.current().ms);
    if (ctx.options().verify_each_pass) {
      Status v = ir::verify(graph);
      if (!v.ok()) return internal_error("pass '%s' left an invalid graph: %s", p.name.c_str(), v.to_string().c_str());
    }
  }
  return ok_status();
}

namespace {

// Applies one switch: "off" disables, "on" re-enables; ALL covers every optional pass.
Status apply_switch(const std::string& name, const std::string& state, const std::string& source,
                    std::set<std::string>& disabled) {
  const PassRegistry& reg = PassRegistry::instance();
  if (state != "on" && state != "off")
    return invalid_argument("%s: switch '%s' has state '%s'; expected on or off", source.c_str(), name.c_str(),
                            state.c_str());
  if (name == "ALL") {
    for (const PassInfo& p : reg.passes())
      if (!p.required) {
        if (state == "off") disabled.insert(p.name);
        else disabled.erase(p.name);
      }
    return ok_status();
  }
  const PassInfo* p = reg.find(name);
  if (!p)
    return invalid_argument("%s: unknown pass '%s'; the passes are: %s", source.c_str(), name.c_str(),
                            reg.names().c_str());
  if (p->required) {
    if (state == "off")
      KILN_LOG(kWarning, "%s: pass '%s' is required for a correct model and stays on", source.c_str(), name.c_str());
    return ok_status();
  }
  if (state == "off") disabled.insert(name);
  else disabled.erase(name);
  return ok_status();
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

Expected<std::set<std::string>> parse_fusion_switch_text(const std::string& text, const std::string& source) {
  std::set<std::string> disabled;
  std::string body = trim(text);
  if (!body.empty() && body[0] == '{') {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument("%s: not valid JSON", source.c_str());
    auto sw = j.find("Switch");
    if (sw == j.end() || !sw->is_object())
      return invalid_argument("%s: expected {\"Switch\": {\"GraphFusion\": {...}}}", source.c_str());
    for (auto group = sw->begin(); group != sw->end(); ++group) {
      if (group.key() != "GraphFusion" && group.key() != "UBFusion")
        return invalid_argument("%s: unknown switch group '%s' (expected GraphFusion or UBFusion)", source.c_str(),
                                group.key().c_str());
      if (!group->is_object()) return invalid_argument("%s: \"%s\" must be an object", source.c_str(), group.key().c_str());
      // ALL first, so a named "on" can re-enable a pass whatever the key order.
      if (auto all = group->find("ALL"); all != group->end()) {
        if (!all->is_string()) return invalid_argument("%s: \"ALL\" must be \"on\" or \"off\"", source.c_str());
        KILN_RETURN_IF_ERROR(apply_switch("ALL", all->get<std::string>(), source, disabled));
      }
      for (auto it = group->begin(); it != group->end(); ++it) {
        if (it.key() == "ALL") continue;
        if (!it->is_string())
          return invalid_argument("%s: \"%s\" must be \"on\" or \"off\"", source.c_str(), it.key().c_str());
        KILN_RETURN_IF_ERROR(apply_switch(it.key(), it->get<std::string>(), source, disabled));
      }
    }
    return disabled;
  }
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  std::vector<std::pair<std::string, std::string>> items;
  while (std::getline(in, line)) {
    ++line_no;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    size_t colon = line.rfind(':');
    if (colon == std::string::npos)
      return invalid_argument("%s:%d: '%s' is not PassName:off", source.c_str(), line_no, line.c_str());
    items.emplace_back(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  for (const auto& [name, state] : items)
    if (name == "ALL") KILN_RETURN_IF_ERROR(apply_switch(name, state, source, disabled));
  for (const auto& [name, state] : items)
    if (name != "ALL") KILN_RETURN_IF_ERROR(apply_switch(name, state, source, disabled));
  return disabled;
}

Expected<std::set<std::string>> parse_fusion_switch_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open fusion switch file '%s'", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_fusion_switch_text(ss.str(), path);
}

Expected<std::vector<std::string>> parse_keep_dtype(const std::string& spec) {
  std::vector<std::string> entries;
  std::ifstream f(spec, std::ios::binary);
  if (f) {
    std::string line;
    int line_no = 0;
    while (std::getline(f, line)) {
      ++line_no;
      if (size_t hash = line.find('#'); hash != std::string::npos) line = line.substr(0, hash);
      line = trim(line);
      if (line.empty()) continue;
      for (const char* prefix : {"OpName:", "OpType:"})
        if (line.rfind(prefix, 0) == 0) line = trim(line.substr(std::string(prefix).size()));
      if (line.empty()) return invalid_argument("%s:%d: an empty keep-dtype entry", spec.c_str(), line_no);
      entries.push_back(line);
    }
    return entries;
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty())
      return invalid_argument("--keep-dtype '%s': an empty entry (give names or op types separated by commas, "
                              "or the path of a file listing them)", spec.c_str());
    entries.push_back(item);
  }
  return entries;
}

}  // namespace kiln::compiler
