// The `kiln` command: compile, run and inspect models.
#include <cstdio>
#include <exception>
#include <new>

#include "core/status.h"
#include "core/version.h"
#include "tools/subcommand.h"

namespace kiln::tools {

std::vector<Subcommand>& subcommands() {
  static std::vector<Subcommand> list;
  return list;
}

int report_error(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "kiln %s: error: %s\n", command.c_str(), message.c_str());
  return kExitError;
}

}  // namespace kiln::tools

int main(int argc, char** argv) {
  using namespace kiln::tools;
  CLI::App app{"Kiln: compile ONNX models into offline .kiln models and run them.", "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Run 'kiln <command> --help' for the options of a command.");
  std::function<int()> action;
  std::string chosen;
  for (const Subcommand& sc : subcommands()) {
    CLI::App* sub = app.add_subcommand(sc.name, sc.summary);
    auto run = sc.setup(*sub);
    std::string name = sc.name;
    sub->callback([&action, &chosen, run, name] {
      action = run;
      chosen = name;
    });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (!action) return kExitUsage;
  try {
    return action();
  } catch (const std::bad_alloc&) {
    return report_error(chosen, "out of memory");
  } catch (const std::exception& e) {
    return report_error(chosen, std::string("unexpected failure: ") + e.what());
  }
}
