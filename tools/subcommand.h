// The subcommands of the `kiln` command register themselves here, one file each.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kiln::tools {

// Adds the subcommand's options to `app`; the returned callback runs it and gives
// the process exit code.
using SubcommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct Subcommand {
  std::string name;
  std::string summary;
  SubcommandSetup setup;
};

std::vector<Subcommand>& subcommands();

struct SubcommandRegistrar {
  SubcommandRegistrar(std::string name, std::string summary, SubcommandSetup setup) {
    subcommands().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

// Exit codes, the same for every subcommand (docs/cli.md):
//   0 success;
//   1 error of the model, its inputs or the run (bad file, wrong input name or shape, failed
//     execution, out of memory);
//   2 usage error: an unknown option, or an option value malformed or out of range, found
//     before any model is opened;
//   3 the results differ (compare: outputs beyond tolerance; conformance: tests failing).
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitDiffer = 3;

// `text` with control characters and invalid UTF-8 escaped as \xNN: one printable line.
std::string printable_one_line(const std::string& text);

// Prints "kiln <cmd>: error: <message>" (made one printable line) to stderr and returns
// kExitError.
int report_error(const std::string& command, const std::string& message);

// The same for a usage error: returns kExitUsage.
int usage_error(const std::string& command, const std::string& message);

// Prints "kiln <cmd>: warning: <message>" to stderr.
void report_warning(const std::string& command, const std::string& message);

}  // namespace kiln::tools

#define KILN_REGISTER_SUBCOMMAND(name, summary, setup) \
  static ::kiln::tools::SubcommandRegistrar KILN_CONCAT(kiln_subcommand_, __COUNTER__)(name, summary, setup)
