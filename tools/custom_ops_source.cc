// Loading --custom-ops files (custom_ops_source.h): plugin libraries, and Python files run by
// the interpreter in a child process. Why a child process and not an embedded interpreter:
// the kiln command links no Python, a Python file's crash, exit() or endless loop cannot take
// the compiler with it (a timeout ends it), and the exchange is the same definition form a
// plugin registers, so the compiler checks both alike (docs/dsl.md, "Custom ops in Python").
#include "tools/custom_ops_source.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "compiler/custom_op_plugin.h"

extern char** environ;

namespace kiln::tools {
namespace {

#ifndef KILN_PYTHON_EXECUTABLE
#define KILN_PYTHON_EXECUTABLE "python3"
#endif

// Long enough for a file that imports NumPy or PyTorch on a busy machine.
constexpr int kPythonTimeoutSeconds = 120;

// Imports kiln.dsl (which imports the extension Kiln was built with) and exports the file.
constexpr const char* kExportScript =
    "import sys\n"
    "from kiln.dsl import _export_main\n"
    "sys.exit(_export_main(sys.argv[1:]))\n";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The last non-empty line of a process's output (Python's traceback ends with the error).
std::string last_line(const std::string& text) {
  std::istringstream lines(text);
  std::string line, last;
  while (std::getline(lines, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last.empty() ? "(no output)" : last;
}

// The build tree's package (build/<preset>/python, next to tools/kiln) when this kiln runs
// from a build tree; an installed kiln finds the installed package on the default path.
std::string build_tree_package_dir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  std::filesystem::path dir = exe.parent_path().parent_path() / "python";
  return std::filesystem::is_regular_file(dir / "kiln" / "dsl.py", ec) ? dir.string() : "";
}

// A temporary folder removed when this goes out of scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-custom-ops-XXXXXX").string();
    if (mkdtemp(pattern.data())) path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// Runs the exporter on `file`; its result is the JSON it wrote. Output of the child (the
// file's prints, a traceback) goes to a log read only when it failed.
Expected<nlohmann::json> run_exporter(const std::string& file) {
  TempDir tmp;
  if (tmp.path.empty()) return unavailable("custom ops of %s: cannot create a temporary folder", file.c_str());
  const std::string out_path = (tmp.path / "ops.json").string();
  const std::string log_path = (tmp.path / "python.log").string();

  std::vector<std::string> env_strings;
  const std::string package = build_tree_package_dir();
  const char* python_path = std::getenv("PYTHONPATH");
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) env_strings.emplace_back(*e);
  if (!package.empty() || python_path)
    env_strings.push_back("PYTHONPATH=" + package + (package.empty() || !python_path ? "" : ":") +
                          (python_path ? python_path : ""));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> arg_strings = {KILN_PYTHON_EXECUTABLE, "-c", kExportScript, file, out_path};
  std::vector<char*> argv;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return unavailable("custom ops of %s: cannot run the Python interpreter %s: %s", file.c_str(),
                       KILN_PYTHON_EXECUTABLE, std::strerror(rc));

  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kPythonTimeoutSeconds);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return unavailable("custom ops of %s: the Python file did not finish within %d s", file.c_str(),
                         kPythonTimeoutSeconds);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(out_path, ec)) {
    // The exporter never ran: the interpreter could not import kiln.dsl, or was killed.
    std::string why = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                          : last_line(read_file(log_path));
    return unavailable("custom ops of %s: %s could not run kiln.dsl's exporter (is the kiln Python package "
                       "installed, or on PYTHONPATH?): %s",
                       file.c_str(), KILN_PYTHON_EXECUTABLE, why.c_str());
  }
  nlohmann::json result = nlohmann::json::parse(read_file(out_path), nullptr, /*allow_exceptions=*/false);
  if (result.is_discarded() || !result.is_object())
    return internal_error("custom ops of %s: the exporter wrote no JSON object", file.c_str());
  return result;
}

// The definitions in the exporter's JSON, with the storage their pointers point into.
struct Definitions {
  struct Owned {
    std::string domain, op_type, compute;
    std::vector<std::string> attr_names;
    std::vector<const char*> attr_name_ptrs;
    std::vector<float> attr_defaults;
  };
  std::vector<Owned> owned;
  std::vector<kilnCustomOpDef> defs;
};

Status read_definitions(const std::string& file, const nlohmann::json& ops, Definitions& out) {
  if (!ops.is_array()) return internal_error("custom ops of %s: the exporter's 'ops' is not a list", file.c_str());
  out.owned.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const nlohmann::json& op = ops[i];
    Definitions::Owned& o = out.owned[i];
    bool typed = op.is_object() && op.value("domain", nlohmann::json()).is_string() &&
                 op.value("op_type", nlohmann::json()).is_string() &&
                 op.value("compute", nlohmann::json()).is_string() &&
                 op.value("num_inputs", nlohmann::json()).is_number_integer() &&
                 op.value("attr_names", nlohmann::json()).is_array() &&
                 op.value("attr_defaults", nlohmann::json()).is_array() &&
                 op["attr_names"].size() == op["attr_defaults"].size();
    for (size_t a = 0; typed && a < op["attr_names"].size(); ++a)
      typed = op["attr_names"][a].is_string() && op["attr_defaults"][a].is_number();
    if (!typed) return internal_error("custom ops of %s: the exporter's definition %zu is malformed", file.c_str(), i);
    o.domain = op["domain"];
    o.op_type = op["op_type"];
    o.compute = op["compute"];
    for (size_t a = 0; a < op["attr_names"].size(); ++a) {
      o.attr_names.push_back(op["attr_names"][a]);
      o.attr_defaults.push_back(op["attr_defaults"][a].get<float>());
    }
  }
  for (Definitions::Owned& o : out.owned) {
    for (const std::string& n : o.attr_names) o.attr_name_ptrs.push_back(n.c_str());
    kilnCustomOpDef d{};
    d.struct_size = sizeof d;
    d.domain = o.domain.c_str();
    d.op_type = o.op_type.c_str();
    d.num_inputs = ops[&o - out.owned.data()]["num_inputs"].get<int32_t>();
    d.num_attrs = static_cast<int32_t>(o.attr_names.size());
    d.attr_names = o.attr_name_ptrs.data();
    d.attr_defaults = o.attr_defaults.data();
    d.compute = o.compute.c_str();
    d.infer = nullptr;
    out.defs.push_back(d);
  }
  return ok_status();
}

Expected<std::vector<std::string>> load_python_custom_ops(const std::string& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return not_found("custom ops file %s: no such file", file.c_str());
  KILN_ASSIGN_OR_RETURN(nlohmann::json result, run_exporter(file));
  if (result.contains("error")) {
    const nlohmann::json& error = result["error"];
    // Already "FILE:LINE: Type: message", the place a user looks first.
    return invalid_argument("%s", error.is_string() ? error.get<std::string>().c_str() : "(no message)");
  }
  Definitions defs;
  KILN_RETURN_IF_ERROR(read_definitions(file, result.value("ops", nlohmann::json()), defs));
  return compiler::register_custom_op_definitions(file, defs.defs);
}

}  // namespace

Expected<std::vector<std::string>> load_custom_ops(const std::string& path) {
  if (ends_with(path, ".py")) return load_python_custom_ops(path);
  return compiler::load_custom_op_plugin(path);
}

}  // namespace kiln::tools
