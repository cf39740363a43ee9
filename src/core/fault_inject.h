// Fault injection (KILN_FAULT_INJECT, issue 32): makes chosen allocations, kernel executions
// or memory copies fail, so that tests and the soak drive the runtime's error paths the way a
// real out-of-memory, a failing kernel or a failing DMA would, and check that the process
// keeps working afterwards.
//
// The spec is a comma-separated list of rules, one per site at most:
//   SITE:N         fail the N-th event at SITE (counted from 1 since the spec was set)
//   SITE:every:N   fail every N-th event at SITE
//   SITE:p:P       fail each event at SITE with probability P in (0, 1]
//   seed:S         seed of the probabilities (default 1; the same seed, the same sequence)
// with SITE one of
//   alloc   device memory (kilnrtMalloc), pinned host memory (kilnrtMallocHost) and the
//           activation blocks an execution takes from its arena
//   kernel  one node's kernel run in a model execution
//   copy    kilnrtMemcpy(2d), and the copy-engine tasks of kilnrtMemcpy(2d)Async and
//           kilnrtMemsetAsync
// e.g. KILN_FAULT_INJECT=kernel:every:500,copy:p:0.001,seed:7.
//
// Cost when nothing is armed: one relaxed atomic load per site visit.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kiln::fault {

enum class Site : int { kAlloc = 0, kKernel = 1, kCopy = 2 };
inline constexpr int kNumSites = 3;

namespace detail {
extern std::atomic<bool> armed;  // some site has a rule
uint64_t hit(Site site);
}  // namespace detail

// Counts one event at `site`; returns its number (1, 2, ...) when it is to fail, else 0.
inline uint64_t should_fail(Site site) {
  if (__builtin_expect(!detail::armed.load(std::memory_order_relaxed), 1)) return 0;
  return detail::hit(site);
}

// The error of the `event`-th event at `site`, which should_fail said is to fail; `what`
// names the operation ("node conv1 (Conv)", "kilnrtMalloc of 4096 bytes"). Allocations fail
// as resource exhausted, kernels and copies as internal errors; the message starts with
// "injected fault" and names the rule.
Status injected_error(Site site, uint64_t event, const std::string& what);

// Replaces the rules with those of `spec` (the syntax above; "" disarms) and restarts the
// counts. Thread-safe, but events racing with it may be counted under either spec.
Status configure(const std::string& spec);
// Checks `spec` without arming anything.
Status check_spec(const std::string& spec);
// The spec in force ("" when disarmed), as configure() was given it.
std::string current_spec();
// Faults injected at `site` since the last configure().
uint64_t injected(Site site);

const char* site_name(Site site);

}  // namespace kiln::fault
