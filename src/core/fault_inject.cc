// KILN_FAULT_INJECT: the rules, their parser, and the counting behind should_fail().
#include "core/fault_inject.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace kiln::fault {

namespace detail {
std::atomic<bool> armed{false};
}  // namespace detail

namespace {

enum class Mode : int { kOff, kNth, kEvery, kProbability };

struct Rule {
  Mode mode = Mode::kOff;
  uint64_t n = 0;    // kNth, kEvery
  double p = 0;      // kProbability
};

struct Spec {
  Rule rules[kNumSites];
  uint64_t seed = 1;
};

// The rules in force. Written under `spec_mutex` by configure(); read without the lock on
// the failing path through the atomics below (mode, n and p packed per site).
struct SiteState {
  std::atomic<int> mode{0};
  std::atomic<uint64_t> n{0};
  std::atomic<uint64_t> p_bits{0};  // the probability scaled to 2^53
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> injected{0};
};
SiteState sites[kNumSites];
std::atomic<uint64_t> seed{1};
std::mutex spec_mutex;
std::string spec_text;  // under spec_mutex

const char* const kSiteNames[kNumSites] = {"alloc", "kernel", "copy"};

bool parse_uint(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

Status bad(const std::string& spec, const std::string& item, const char* why) {
  return invalid_argument("KILN_FAULT_INJECT='%s': '%s' %s (rules: SITE:N, SITE:every:N, SITE:p:P, seed:S; "
                          "SITE: alloc, kernel, copy)",
                          spec.c_str(), item.c_str(), why);
}

Expected<Spec> parse(const std::string& text) {
  Spec spec;
  if (text.empty()) return spec;
  for (const std::string& item : split(text, ',')) {
    std::vector<std::string> f = split(item, ':');
    if (f.size() == 2 && f[0] == "seed") {
      if (!parse_uint(f[1], &spec.seed)) return bad(text, item, "has no integer seed");
      continue;
    }
    int site = -1;
    for (int s = 0; s < kNumSites; ++s)
      if (f[0] == kSiteNames[s]) site = s;
    if (site < 0) return bad(text, item, "names no site");
    Rule& r = spec.rules[site];
    if (r.mode != Mode::kOff) return bad(text, item, "is a second rule for its site");
    if (f.size() == 2) {
      if (!parse_uint(f[1], &r.n) || r.n == 0) return bad(text, item, "needs an event number >= 1");
      r.mode = Mode::kNth;
    } else if (f.size() == 3 && f[1] == "every") {
      if (!parse_uint(f[2], &r.n) || r.n == 0) return bad(text, item, "needs a period >= 1");
      r.mode = Mode::kEvery;
    } else if (f.size() == 3 && f[1] == "p") {
      char* end = nullptr;
      r.p = std::strtod(f[2].c_str(), &end);
      if (f[2].empty() || *end != '\0' || !(r.p > 0 && r.p <= 1))
        return bad(text, item, "needs a probability in (0, 1]");
      r.mode = Mode::kProbability;
    } else {
      return bad(text, item, "is not a rule");
    }
  }
  return spec;
}

// SplitMix64: the event number and the seed give the draw, so a run is repeatable for a
// given order of events whatever the threads.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Arms the sites from KILN_FAULT_INJECT before main: a process under test fails from its
// first allocation on. A bad spec is reported here, once, and arms nothing.
struct ArmFromEnvironment {
  ArmFromEnvironment() {
    const char* v = std::getenv("KILN_FAULT_INJECT");
    if (!v || !*v) return;
    Status s = configure(v);
    if (!s.ok()) {
      std::fprintf(stderr, "kiln: warning: %s; no fault is injected\n", s.message().c_str());
      return;
    }
    std::fprintf(stderr, "kiln: warning: KILN_FAULT_INJECT=%s: injecting faults\n", v);
  }
} arm_from_environment;

}  // namespace

const char* site_name(Site site) { return kSiteNames[static_cast<int>(site)]; }

uint64_t detail::hit(Site site) {
  SiteState& s = sites[static_cast<int>(site)];
  const Mode mode = static_cast<Mode>(s.mode.load(std::memory_order_relaxed));
  if (mode == Mode::kOff) return 0;
  const uint64_t event = s.events.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t n = s.n.load(std::memory_order_relaxed);
  bool fail = false;
  switch (mode) {
    case Mode::kNth: fail = event == n; break;
    case Mode::kEvery: fail = event % n == 0; break;
    case Mode::kProbability:
      fail = (mix(seed.load(std::memory_order_relaxed) ^ mix(event * kNumSites + static_cast<uint64_t>(site))) >> 11) <
             s.p_bits.load(std::memory_order_relaxed);
      break;
    case Mode::kOff: break;
  }
  if (!fail) return 0;
  s.injected.fetch_add(1, std::memory_order_relaxed);
  return event;
}

Status injected_error(Site site, uint64_t event, const std::string& what) {
  const std::string rule = current_spec();
  const char* fmt = "injected fault (KILN_FAULT_INJECT=%s): %s %llu failed: %s";
  const char* event_name = site == Site::kAlloc ? "allocation" : site == Site::kKernel ? "kernel run" : "copy";
  const auto n = static_cast<unsigned long long>(event);
  return site == Site::kAlloc ? resource_exhausted(fmt, rule.c_str(), event_name, n, what.c_str())
                              : internal_error(fmt, rule.c_str(), event_name, n, what.c_str());
}

Status check_spec(const std::string& spec) { return parse(spec).status(); }

Status configure(const std::string& text) {
  Expected<Spec> spec = parse(text);
  if (!spec.ok()) return spec.status();
  std::lock_guard lock(spec_mutex);
  detail::armed.store(false, std::memory_order_relaxed);
  bool any = false;
  for (int i = 0; i < kNumSites; ++i) {
    const Rule& r = spec->rules[i];
    SiteState& s = sites[i];
    s.mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
    s.events.store(0, std::memory_order_relaxed);
    s.injected.store(0, std::memory_order_relaxed);
    s.n.store(r.n, std::memory_order_relaxed);
    s.p_bits.store(static_cast<uint64_t>(std::ldexp(r.p, 53)), std::memory_order_relaxed);
    s.mode.store(static_cast<int>(r.mode), std::memory_order_release);
    any = any || r.mode != Mode::kOff;
  }
  seed.store(spec->seed, std::memory_order_relaxed);
  spec_text = any ? text : "";
  detail::armed.store(any, std::memory_order_release);
  return ok_status();
}

std::string current_spec() {
  std::lock_guard lock(spec_mutex);
  return spec_text;
}

uint64_t injected(Site site) { return sites[static_cast<int>(site)].injected.load(std::memory_order_relaxed); }

}  // namespace kiln::fault
