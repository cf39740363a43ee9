// Core lists and pinning of the server's threads (affinity.h).
#include "serve/affinity.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace kiln::serve {
namespace {

Expected<int> parse_core(std::string_view s, const std::string& piece) {
  int core = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), core);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || core < 0 || core >= CPU_SETSIZE)
    return invalid_argument("'%s' is not a core number or range of them (0..%d)", piece.c_str(), CPU_SETSIZE - 1);
  return core;
}

std::vector<int> without(const std::vector<int>& all, const std::vector<int>& taken) {
  std::vector<int> rest;
  for (int c : all)
    if (std::find(taken.begin(), taken.end(), c) == taken.end()) rest.push_back(c);
  return rest;
}

}  // namespace

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

Expected<std::vector<int>> parse_core_list(const std::string& text) {
  if (text.empty()) return invalid_argument("the core list is empty");
  std::vector<int> cores;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string piece = text.substr(start, comma - start);
    const size_t dash = piece.find('-');
    KILN_ASSIGN_OR_RETURN(int first, parse_core(std::string_view(piece).substr(0, dash), piece));
    int last = first;
    if (dash != std::string::npos) {
      KILN_ASSIGN_OR_RETURN(last, parse_core(std::string_view(piece).substr(dash + 1), piece));
      if (last < first) return invalid_argument("'%s' is a reversed range", piece.c_str());
    }
    for (int c = first; c <= last; ++c) cores.push_back(c);
    start = comma + 1;
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  return cores;
}

std::string core_list_text(const std::vector<int>& cores) {
  std::string s;
  for (size_t i = 0; i < cores.size();) {
    size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cores[i]);
    if (j > i) s += '-' + std::to_string(cores[j]);
    i = j + 1;
  }
  return s;
}

Status pin_this_thread(const std::vector<int>& cores) {
  if (cores.empty()) return ok_status();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) CPU_SET(c, &set);
  if (int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0)
    return unavailable("cannot pin a thread to cores %s: %s", core_list_text(cores).c_str(), std::strerror(e));
  return ok_status();
}

Expected<CorePlan> plan_cores(std::string mode, const std::string& http_cores, const std::string& inference_cores,
                              const std::vector<int>& allowed) {
  if (mode.empty()) mode = http_cores.empty() && inference_cores.empty() ? "off" : "auto";
  if (mode == "off") {
    if (!http_cores.empty() || !inference_cores.empty())
      return invalid_argument("--pin off pins nothing: leave out --http-cores and --inference-cores");
    return CorePlan{};
  }
  if (mode != "auto") return invalid_argument("--pin must be off or auto (got '%s')", mode.c_str());
  CorePlan plan;
  auto given = [&](const std::string& text, const char* option, std::vector<int>* cores) -> Status {
    if (text.empty()) return ok_status();
    KILN_ASSIGN_OR_RETURN(*cores, parse_core_list(text), "%s", option);
    for (int c : *cores)
      if (std::find(allowed.begin(), allowed.end(), c) == allowed.end())
        return invalid_argument("%s: core %d is not one this process may run on (%s)", option, c,
                                core_list_text(allowed).c_str());
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(given(http_cores, "--http-cores", &plan.http));
  KILN_RETURN_IF_ERROR(given(inference_cores, "--inference-cores", &plan.inference));
  if (plan.http.empty() && plan.inference.empty()) {
    const size_t n = allowed.size();
    const size_t http = (n + 7) / 8;
    plan.inference.assign(allowed.begin(), allowed.end() - static_cast<std::ptrdiff_t>(http));
    plan.http.assign(allowed.end() - static_cast<std::ptrdiff_t>(http), allowed.end());
  } else if (plan.http.empty()) {
    plan.http = without(allowed, plan.inference);
  } else if (plan.inference.empty()) {
    plan.inference = without(allowed, plan.http);
  }
  if (without(plan.http, plan.inference).size() != plan.http.size())
    return invalid_argument("--http-cores %s and --inference-cores %s share a core", core_list_text(plan.http).c_str(),
                            core_list_text(plan.inference).c_str());
  if (plan.http.empty() || plan.inference.empty())
    return invalid_argument("core pinning needs a core for the HTTP threads and one for inference; this process may "
                            "run on %s only (--pin off)", core_list_text(allowed).c_str());
  return plan;
}

}  // namespace kiln::serve
