// `kiln conformance`: runs ONNX backend test folders (model.onnx + test_data_set_*/input_*.pb,
// output_*.pb) through Kiln and compares with the expected outputs. Each test runs in its
// own forked process, so a crash or a hang (timeout) is that test's failure and the run
// goes on. An expectations file lists the tests that do not pass yet: a test outside the
// list that fails, or a listed test that passes, fails the run (so the list only shrinks).
// With --check-levels each test also runs compiled at -O0, and its -O3 outputs must match
// the -O0 ones (conformance_compare.h: kLevelRtol relative to max|ref|): any mismatch fails
// the run, since optimisation must not change results.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "compiler/compiler.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "runtime/graph_executor.h"
#include "tools/conformance_compare.h"
#include "tools/subcommand.h"

namespace fs = std::filesystem;

namespace kiln::tools {
namespace {

struct ConformanceArgs {
  std::string dir;
  std::string filter;
  int jobs = 0;
  std::string json;
  std::string expect;
  std::string write_expectations;
  double timeout_s = 60;
  bool quiet_passes = false;
  bool check_levels = false;
};

enum class Outcome { kPass, kFail, kSkip };

// The -O3 vs -O0 check of --check-levels.
enum class LevelCheck { kNotChecked, kAgree, kMismatch };

struct TestResult {
  std::string name;  // "<suite>/<test>"
  Outcome outcome = Outcome::kFail;
  std::string message;
  double ms = 0;
  LevelCheck levels = LevelCheck::kNotChecked;
  std::string levels_message;  // why the levels disagree
};

// What the level check found in the child: checked or not, and the first disagreement.
struct LevelResult {
  bool checked = false;
  std::string mismatch;  // empty when -O3 and -O0 agree
};

// ---- One test, run in a child process ------------------------------------------------------

// Compiles the test model at -O0 and runs it on `feeds`: the reference of the level check.
Expected<std::vector<RuntimeValue>> run_at_o0(const fs::path& dir, const std::vector<rt::NamedValue>& feeds) {
  compiler::CompileOptions options;
  options.passes.opt_level = 0;
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file((dir / "model.onnx").string(), options),
                        "compile");
  KILN_ASSIGN_OR_RETURN(auto executor, rt::GraphExecutor::create(compiled.graph), "prepare");
  std::vector<RuntimeValue> outputs;
  KILN_RETURN_IF_ERROR(executor->run(feeds, &outputs), "run");
  return outputs;
}

// Compares the -O3 outputs with a -O0 run of the same inputs (outputs of random ops excepted).
LevelResult check_levels(const fs::path& dir, const ir::Graph& g, const std::vector<rt::NamedValue>& feeds,
                         const std::vector<RuntimeValue>& outputs, const RandomOutputs& random) {
  LevelResult result;
  result.checked = true;
  auto reference = run_at_o0(dir, feeds);
  if (!reference.ok()) {
    result.mismatch = "-O0 fails where -O3 runs: " + reference.status().to_string();
    return result;
  }
  if (reference->size() != outputs.size()) {
    result.mismatch = str_format("-O0 gives %zu outputs, -O3 %zu", reference->size(), outputs.size());
    return result;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ir::Value* v = g.outputs()[i];
    if (random.for_output(v)) continue;
    ValueDiff d = diff_values(outputs[i], (*reference)[i], kLevelRtol, kLevelAtol);
    if (d.within()) continue;
    result.mismatch = d.mismatch.empty()
                          ? str_format("output '%s': -O3 differs from -O0 by %g (max |ref| %g, %.3g x tolerance)",
                                       v->name().c_str(), d.max_abs, d.max_ref, d.error)
                          : str_format("output '%s': -O3 %s", v->name().c_str(), d.mismatch.c_str());
    return result;
  }
  return result;
}

Expected<std::string> run_test(const fs::path& dir, bool levels, LevelResult* level_result) {
  fs::path data = dir / "test_data_set_0";
  if (!fs::is_directory(data)) return not_found("no test_data_set_0");
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled,
                        compiler::compile_onnx_file((dir / "model.onnx").string(), {}), "compile");
  // Tests of --check-levels perturb the -O3 graph (never set in normal runs).
  KILN_RETURN_IF_ERROR(apply_debug_perturbation(*compiled.graph).status());
  const ir::Graph& g = *compiled.graph;
  std::vector<rt::NamedValue> feeds;
  int k = 0;
  for (const ir::Value* v : g.inputs()) {
    // input_i.pb belongs to the i-th graph input that is not also an initializer.
    if (v->has_initializer()) continue;
    fs::path p = data / ("input_" + std::to_string(k++) + ".pb");
    if (!fs::exists(p)) {
      // Optional inputs may be left out of the data set: an empty optional.
      if (v->type().kind == ir::TypeKind::kOptionalTensor || v->type().kind == ir::TypeKind::kOptionalSequence) {
        feeds.push_back({v->name(), RuntimeValue()});
        continue;
      }
      return not_found("%s is missing (input '%s')", p.filename().c_str(), v->name().c_str());
    }
    KILN_ASSIGN_OR_RETURN(RuntimeValue value, read_test_value(p.string(), v->type()), "input '%s'",
                          v->name().c_str());
    feeds.push_back({v->name(), std::move(value)});
  }
  KILN_ASSIGN_OR_RETURN(auto executor, rt::GraphExecutor::create(compiled.graph), "prepare");
  std::vector<RuntimeValue> outputs;
  KILN_RETURN_IF_ERROR(executor->run(feeds, &outputs), "run");
  RandomOutputs random = random_outputs(g);
  // Before the comparison with the expected outputs, so a test that fails still says
  // whether optimisation changed its results.
  if (levels) *level_result = check_levels(dir, g, feeds, outputs, random);
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const ir::Value* v = g.outputs()[i];
    fs::path p = data / ("output_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) return not_found("%s is missing", p.filename().c_str());
    KILN_ASSIGN_OR_RETURN(RuntimeValue want, read_test_value(p.string(), v->type()), "expected output '%s'",
                          v->name().c_str());
    Status s = compare_values(outputs[i], want, random.for_output(v));
    if (!s.ok()) return s.add_context("output '%s'", v->name().c_str());
  }
  return std::string();
}

// Child side: runs the test and writes "P", "S<reason>" or "F<reason>" to `fd`; with the
// level check, then a newline and "=" (levels agree), "!<reason>" or "-" (not checked).
[[noreturn]] void child_main(const fs::path& dir, bool levels, int fd) {
  set_num_threads(1);  // the runner parallelises across tests
  set_log_level(LogLevel::kError);
  std::string line;
  LevelResult level_result;
  try {
    auto r = run_test(dir, levels, &level_result);
    if (r.ok()) {
      line = "P";
    } else if (r.status().code() == StatusCode::kNotFound && r.status().to_string().find("test_data_set") != std::string::npos) {
      line = "S" + r.status().to_string();
    } else {
      line = "F" + r.status().to_string();
    }
  } catch (const std::exception& e) {
    line = std::string("Funexpected exception: ") + e.what();
  }
  // Messages name files relative to the test folder: reasons stay the same on every machine.
  auto relative = [prefix = dir.string() + "/"](std::string text) {
    for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
    return printable_one_line(text);
  };
  line = relative(line);
  if (levels)
    line += "\n" + (!level_result.checked ? std::string("-")
                                          : level_result.mismatch.empty() ? std::string("=")
                                                                          : "!" + relative(level_result.mismatch));
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::_exit(0);
}

// ---- The parent: a pool of child processes -------------------------------------------------

struct Running {
  pid_t pid;
  int fd;
  size_t index;
  std::chrono::steady_clock::time_point start;
  std::string out;
};

std::string describe_exit(int wstatus) {
  if (WIFSIGNALED(wstatus)) return str_format("crashed (signal %d: %s)", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) return str_format("exited with code %d", WEXITSTATUS(wstatus));
  return "ended without a result";
}

void run_all(const std::vector<fs::path>& dirs, const std::string& suite, const ConformanceArgs& args,
             std::vector<TestResult>& results, const std::function<void(const TestResult&)>& on_done) {
  results.assign(dirs.size(), TestResult{});
  size_t next = 0;
  std::vector<Running> running;
  const int jobs = std::max(1, args.jobs);
  const auto timeout = std::chrono::duration<double>(args.timeout_s);
  while (next < dirs.size() || !running.empty()) {
    while (next < dirs.size() && static_cast<int>(running.size()) < jobs) {
      int fds[2];
      if (::pipe(fds) != 0) {
        results[next] = {suite + "/" + dirs[next].filename().string(), Outcome::kFail, "cannot create a pipe", 0,
                         LevelCheck::kNotChecked, ""};
        on_done(results[next++]);
        continue;
      }
      std::fflush(stdout);
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        child_main(dirs[next], args.check_levels, fds[1]);
      }
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        results[next] = {suite + "/" + dirs[next].filename().string(), Outcome::kFail, "cannot fork", 0,
                         LevelCheck::kNotChecked, ""};
        on_done(results[next++]);
        continue;
      }
      running.push_back({pid, fds[0], next++, std::chrono::steady_clock::now(), {}});
    }
    std::vector<pollfd> pfds;
    for (const Running& r : running) pfds.push_back({r.fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 50);
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      char buf[4096];
      bool eof = false;
      if (pfds[i].revents & (POLLIN | POLLHUP)) {
        ssize_t n = ::read(r.fd, buf, sizeof(buf));
        if (n > 0) r.out.append(buf, static_cast<size_t>(n));
        else eof = true;
      }
      auto elapsed = std::chrono::steady_clock::now() - r.start;
      bool timed_out = !eof && elapsed > timeout;
      if (!eof && !timed_out) {
        ++i;
        continue;
      }
      if (timed_out) ::kill(r.pid, SIGKILL);
      int wstatus = 0;
      ::waitpid(r.pid, &wstatus, 0);
      ::close(r.fd);
      TestResult& res = results[r.index];
      res.name = suite + "/" + dirs[r.index].filename().string();
      res.ms = std::chrono::duration<double, std::milli>(elapsed).count();
      if (timed_out) {
        res.outcome = Outcome::kFail;
        res.message = str_format("timed out after %.0f s", args.timeout_s);
      } else if (r.out.empty()) {
        res.outcome = Outcome::kFail;
        res.message = describe_exit(wstatus);
      } else {
        std::string out = r.out, levels;
        if (size_t nl = out.find('\n'); nl != std::string::npos) {
          levels = out.substr(nl + 1);
          out.resize(nl);
        }
        res.outcome = out[0] == 'P' ? Outcome::kPass : out[0] == 'S' ? Outcome::kSkip : Outcome::kFail;
        res.message = out.substr(1);
        if (!levels.empty() && levels[0] == '=') res.levels = LevelCheck::kAgree;
        if (!levels.empty() && levels[0] == '!') {
          res.levels = LevelCheck::kMismatch;
          res.levels_message = levels.substr(1);
        }
      }
      on_done(res);
      pfds.erase(pfds.begin() + static_cast<std::ptrdiff_t>(i));
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

// ---- Expectations --------------------------------------------------------------------------

// Lines "suite/test<whitespace>reason"; '#' starts a comment.
Expected<std::map<std::string, std::string>> read_expectations(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open expectations file %s", path.c_str());
  std::map<std::string, std::string> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.find_first_of(" \t");
    std::string name = line.substr(0, sp);
    std::string reason = sp == std::string::npos ? "" : line.substr(line.find_first_not_of(" \t", sp));
    if (reason.empty()) return invalid_argument("%s:%d: '%s' has no reason", path.c_str(), n, name.c_str());
    out[name] = reason;
  }
  return out;
}

std::string short_reason(const std::string& message) {
  std::string r = message.substr(0, 160);
  return r.empty() ? "fails" : r;
}

int run_conformance(const ConformanceArgs& args) {
  std::error_code ec;
  if (!fs::is_directory(args.dir, ec)) return report_error("conformance", args.dir + ": not a directory");
  std::string suite = fs::path(args.dir).lexically_normal().filename().string();
  if (suite.empty()) suite = fs::path(args.dir).lexically_normal().parent_path().filename().string();
  std::regex filter;
  try {
    filter = std::regex(args.filter.empty() ? ".*" : args.filter);
  } catch (const std::regex_error& e) {
    return usage_error("conformance", "--filter '" + args.filter + "' is not a valid regex: " + e.what());
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(args.dir, ec))
    if (entry.is_directory() && fs::exists(entry.path() / "model.onnx") &&
        std::regex_search(entry.path().filename().string(), filter))
      dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, std::string> expected;
  if (!args.expect.empty()) {
    auto e = read_expectations(args.expect);
    if (!e.ok()) return report_error("conformance", e.status().to_string());
    expected = std::move(*e);
  }
  ConformanceArgs a = args;
  if (a.jobs <= 0) a.jobs = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  std::printf("running %zu tests from %s with %d jobs\n", dirs.size(), args.dir.c_str(), a.jobs);
  std::vector<TestResult> results;
  run_all(dirs, suite, a, results, [&](const TestResult& r) {
    bool listed = expected.count(r.name) > 0;
    if (r.outcome == Outcome::kPass) {
      if (!a.quiet_passes || listed) std::printf("PASS %s%s\n", r.name.c_str(), listed ? " (listed as failing: remove it from the expectations)" : "");
    } else if (r.outcome == Outcome::kSkip) {
      std::printf("SKIP %s: %s\n", r.name.c_str(), r.message.c_str());
    } else {
      std::printf("FAIL %s%s: %s\n", r.name.c_str(), listed ? " [expected]" : "", r.message.c_str());
    }
    if (r.levels == LevelCheck::kMismatch)
      std::printf("LEVELS %s: -O3 and -O0 disagree: %s\n", r.name.c_str(), r.levels_message.c_str());
    std::fflush(stdout);
  });

  int passed = 0, failed = 0, skipped = 0, unexpected_fail = 0, unexpected_pass = 0;
  int levels_checked = 0, levels_mismatch = 0;
  for (const TestResult& r : results) {
    levels_checked += r.levels != LevelCheck::kNotChecked;
    levels_mismatch += r.levels == LevelCheck::kMismatch;
    bool listed = expected.count(r.name) > 0;
    if (r.outcome == Outcome::kPass) {
      ++passed;
      if (listed) ++unexpected_pass;
    } else if (r.outcome == Outcome::kSkip) {
      ++skipped;
    } else {
      ++failed;
      if (!listed) ++unexpected_fail;
    }
  }
  if (!args.json.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const TestResult& r : results) {
      nlohmann::json t = {{"name", r.name},
                          {"status", r.outcome == Outcome::kPass ? "pass" : r.outcome == Outcome::kSkip ? "skip" : "fail"},
                          {"message", r.message},
                          {"ms", r.ms}};
      if (args.check_levels) {
        t["levels"] = r.levels == LevelCheck::kAgree      ? "agree"
                      : r.levels == LevelCheck::kMismatch ? "mismatch"
                                                          : "not checked";
        if (!r.levels_message.empty()) t["levels_message"] = r.levels_message;
      }
      j.push_back(std::move(t));
    }
    std::ofstream(args.json) << j.dump(1) << "\n";
  }
  if (!args.write_expectations.empty()) {
    // Keeps the other suites' lines and the reasons already written for tests still failing.
    std::map<std::string, std::string> all;
    if (fs::exists(args.write_expectations)) {
      auto old = read_expectations(args.write_expectations);
      if (old.ok()) all = *old;
    }
    for (const TestResult& r : results) {
      if (r.outcome == Outcome::kFail) {
        if (!all.count(r.name)) all[r.name] = short_reason(r.message);
      } else {
        all.erase(r.name);
      }
    }
    std::ofstream out(args.write_expectations);
    out << "# ONNX backend tests that Kiln does not pass yet: suite/test, then the reason.\n"
           "# `kiln conformance DIR --expect FILE` fails when a test outside this list fails\n"
           "# and when a listed test passes, so the list only shrinks.\n";
    for (const auto& [name, reason] : all) out << name << "\t" << reason << "\n";
  }
  if (!args.expect.empty())
    std::printf("expectations: %d failures listed, %d unexpected failures, %d listed tests now pass\n",
                failed - unexpected_fail, unexpected_fail, unexpected_pass);
  if (args.check_levels)
    std::printf("levels: %d tests checked, %d agree, %d mismatches (-O3 vs -O0, rtol %g of max|ref| + atol %g)\n",
                levels_checked, levels_checked - levels_mismatch, levels_mismatch, kLevelRtol, kLevelAtol);
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  // Results that differ from what is expected are exit code 3, apart from errors of the tool
  // itself (1) and of its options (2).
  if (levels_mismatch) return kExitDiffer;
  if (!args.expect.empty()) return unexpected_fail || unexpected_pass ? kExitDiffer : 0;
  return failed ? kExitDiffer : 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<ConformanceArgs>();
  app.add_option("dir", args->dir, "A folder of ONNX backend tests (e.g. onnx-node-tests/node)")->required();
  app.add_option("--filter", args->filter, "Run only tests whose folder name matches this regex");
  app.add_option("--jobs", args->jobs, "Tests run in parallel (default: the core count)");
  app.add_option("--json", args->json, "Write every result to this JSON file");
  app.add_option("--expect", args->expect,
                 "Expectations file listing the tests that do not pass yet (fail on any other outcome)");
  app.add_option("--write-expectations", args->write_expectations,
                 "Update this expectations file with the failures of this run");
  app.add_option("--timeout", args->timeout_s, "Seconds a test may take before it counts as hung (default 60)");
  app.add_flag("--quiet-passes", args->quiet_passes, "Do not print a line for each passing test");
  app.add_flag("--check-levels", args->check_levels,
               "Also run each test compiled at -O0 and fail when the -O3 outputs differ from it");
  return [args] { return run_conformance(*args); };
}

KILN_REGISTER_SUBCOMMAND("conformance", "Run ONNX backend conformance tests and compare with their outputs", setup);

}  // namespace
}  // namespace kiln::tools
