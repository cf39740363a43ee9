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

// Exit codes: 0 success, 1 error (bad model, bad input, failed run), 2 usage error.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// `text` with control characters and invalid UTF-8 escaped as \xNN: one printable line.
std::string printable_one_line(const std::string& text);

// Prints "kiln <cmd>: error: <message>" (made one printable line) to stderr and returns
// kExitError.
int report_error(const std::string& command, const std::string& message);

}  // namespace kiln::tools

#define KILN_REGISTER_SUBCOMMAND(name, summary, setup) \
  static ::kiln::tools::SubcommandRegistrar KILN_CONCAT(kiln_subcommand_, __COUNTER__)(name, summary, setup)
