// Options shared by several subcommands.
#include "tools/cli_options.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/status.h"
#include "runtime/device.h"
#include "tools/api_session.h"
#include "tools/subcommand.h"

namespace kiln::tools {

CLI::Option* add_input_shape_option(CLI::App& app, std::string* spec) {
  return app.add_option("--input-shape", *spec,
                        "Input shapes, as kiln compile: \"x:1,3,48,320;y:1,128\". An .onnx model is compiled "
                        "with them; for a .kiln with open dims, random inputs take them (and given inputs "
                        "must match). Needed for random inputs whose dims are open");
}

std::string check_input_specs(const std::vector<std::string>& specs) {
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return "--input '" + spec + "' is not NAME=FILE.npy";
  }
  return "";
}

std::string check_output_file(const char* option, const std::string& path) {
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_directory(path, ec))
    return str_format("%s %s is a directory; give the name of a file to write", option, path.c_str());
  return "";
}

std::string check_output_dir(const char* option, const std::string& path) {
  std::error_code ec;
  if (!path.empty() && std::filesystem::exists(path, ec) && !std::filesystem::is_directory(path, ec))
    return str_format("%s %s is a file, not a directory", option, path.c_str());
  return "";
}

int checked_threads(const std::string& command, const CLI::Option* option, int threads, int devices,
                    std::string* error) {
  if (!option || option->count() == 0) return 0;
  if (threads < 1) {
    *error = str_format("--threads must be at least 1 (got %d)", threads);
    return 0;
  }
  if (devices <= 0) {
    devices = 1;
    if (const char* env = std::getenv("KILN_DEVICES"); env && *env)
      if (auto config = rt::parse_device_spec(env); config.ok()) devices = config->count;
  }
  const int cores = cores_per_device(devices);
  if (threads > cores) {
    report_warning(command, str_format("--threads %d is more than the %d core%s %s; using %d", threads, cores,
                                       cores == 1 ? "" : "s",
                                       devices == 1 ? "this process may use" : "each device has", cores));
    threads = cores;
  }
  return threads;
}

void normalize_option_spelling(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (std::strcmp(a, "--") == 0) return;  // the rest are positional
    if (std::strncmp(a, "--", 2) != 0) continue;
    for (char* c = a + 2; *c && *c != '='; ++c)
      if (*c == '_') *c = '-';
  }
}

}  // namespace kiln::tools
