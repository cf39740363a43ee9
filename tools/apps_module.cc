// Finding and loading libkiln_apps.so (apps_module.h).
#include "tools/apps_module.h"

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/version.h"

namespace kiln::tools {
namespace {

// Beside the executable (the build tree's tools/ has none), its ../lib (the build tree and an
// install whose libdir is lib), its ../<libdir> (an install's bin/ and, say,
// lib/x86_64-linux-gnu), then the loader's own search (LD_LIBRARY_PATH, the system's folders).
std::vector<std::string> module_candidates() {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path prefix = self.parent_path().parent_path();
    out.push_back((self.parent_path() / kAppsModule).string());
    out.push_back((prefix / "lib" / kAppsModule).string());
    out.push_back((prefix / KILN_INSTALL_LIBDIR / kAppsModule).string());
  }
  out.push_back(kAppsModule);
  return out;
}

Expected<const AppsModuleApi*> load() {
  std::string why = "not found";
  for (const std::string& path : module_candidates()) {
    if (path.find('/') != std::string::npos && !std::filesystem::exists(path)) continue;
    // RTLD_NOW: a module that does not fit this executable fails here, naming the symbol,
    // not in the middle of a command. Never closed: its subcommands stay registered.
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      why = e != nullptr ? e : "dlopen failed";
      continue;
    }
    auto entry = reinterpret_cast<decltype(&kiln_apps_module_api)>(::dlsym(h, "kiln_apps_module_api"));
    const AppsModuleApi* api = entry != nullptr ? entry() : nullptr;
    if (api == nullptr || std::strcmp(api->kiln_version, KILN_VERSION_STRING) != 0)
      return failed_precondition("%s is not the module of this kiln (version %s)", path.c_str(),
                                 KILN_VERSION_STRING);
    return api;
  }
  return unavailable("this command is in the module %s, which cannot be loaded (%s); it is built "
                     "with the kiln target and installed beside libkiln.so",
                     kAppsModule, why.c_str());
}

}  // namespace

bool is_apps_module_command(std::string_view name) {
  for (std::string_view c : {"ocr", "video-bench", "serve", "loadgen", "quantize"})
    if (name == c) return true;
  return false;
}

Expected<const AppsModuleApi*> load_apps_module() {
  static std::once_flag once;
  static Expected<const AppsModuleApi*>* loaded = nullptr;  // never destroyed
  std::call_once(once, [] { loaded = new Expected<const AppsModuleApi*>(load()); });
  return *loaded;
}

}  // namespace kiln::tools
