// The `kiln` command: compile, run and inspect models.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "core/env_knobs.h"
#include "core/status.h"
#include "core/version.h"
#include "tools/apps_module.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {

std::vector<Subcommand>& subcommands() {
  static std::vector<Subcommand> list;
  return list;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one.
size_t utf8_sequence_length(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  return n;
}

// The subcommand the arguments name: the first that is not an option (the command's own
// options, --help and --version, take no value).
std::string_view named_subcommand(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') return argv[i];
  return {};
}

}  // namespace

std::string printable_one_line(const std::string& text) {
  // Names in a damaged model may hold any bytes: escape control characters and bytes that
  // are not UTF-8 so that an error stays one readable line.
  std::string out;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = utf8_sequence_length(text, i);
    if (n == 0 || c < 0x20 || c == 0x7f) {
      out += str_format("\\x%02x", c);
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

int report_error(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "kiln %s: error: %s\n", command.c_str(), printable_one_line(message).c_str());
  return kExitError;
}

int usage_error(const std::string& command, const std::string& message) {
  report_error(command, message);
  return kExitUsage;
}

void report_warning(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "kiln %s: warning: %s\n", command.c_str(), printable_one_line(message).c_str());
}

}  // namespace kiln::tools

int main(int argc, char** argv) {
  using namespace kiln::tools;
  // Before anything reads a knob: name misspelt KILN_* variables and values they do not take.
  kiln::warn_about_environment("kiln");
  normalize_option_spelling(argc, argv);
  CLI::App app{"Kiln: compile ONNX models into offline .kiln models and run them.", "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Run 'kiln <command> --help' for the options of a command. Every option may also be spelt with "
             "underscores, as ATC's (--input_shape). Exit codes: 0 ok, 1 model or run error, 2 usage error, "
             "3 results differ (compare, conformance); docs/cli.md has the table and the KILN_* variables.");
  // The module's subcommands register when it loads (apps_module.h): for one of them, and for
  // the list of every command (`kiln`, `kiln --help`, not `kiln --version`), which leaves them
  // out when it is missing.
  const std::string_view named = named_subcommand(argc, argv);
  const bool version_only = std::find(argv + 1, argv + argc, std::string_view("--version")) != argv + argc;
  if (is_apps_module_command(named)) {
    auto module = load_apps_module();
    if (!module.ok()) return report_error(std::string(named), module.status().to_string());
  } else if (named.empty() && !version_only) {
    load_apps_module().status().ignore_error();
  }
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
