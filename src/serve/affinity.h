// Core affinity of the server's threads (docs/serve.md, "Core pinning"): the HTTP threads
// (accept loop and connection pool) on some cores, the inference threads (the workers, their
// streams, the devices' compute) on the others, so that parsing requests and writing
// responses do not take a core in the middle of a model execution.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::serve {

// The cores the calling thread may run on, in increasing order.
std::vector<int> allowed_cores();

// "0-3,6,8-9" -> {0,1,2,3,6,8,9}: sorted, each once. invalid_argument naming the piece at
// fault for anything else (empty text, a reversed range, a core of CPU_SETSIZE or more).
Expected<std::vector<int>> parse_core_list(const std::string& text);

// {0,1,2,3,6} -> "0-3,6", as /proc/<pid>/status writes Cpus_allowed_list.
std::string core_list_text(const std::vector<int>& cores);

// Pins the calling thread to `cores` (nothing for an empty list). unavailable with the
// system's reason when refused.
Status pin_this_thread(const std::vector<int>& cores);

// The cores of each side under a pinning policy.
struct CorePlan {
  std::vector<int> http;       // empty: not pinned
  std::vector<int> inference;  // empty: not pinned
};

// The plan for `--pin MODE --http-cores H --inference-cores I` (empty text: not given) over
// the `allowed` cores: MODE "off" pins nothing (and the lists must not be given); empty MODE
// is "off" without lists and "auto" with one; "auto"
// gives the last ceil(n/8) allowed cores to HTTP (1 on 2..8 cores) and the rest to inference,
// or, when a list is given, that list to its side and the remaining allowed cores to the
// other. Errors name the list at fault: a core not allowed, the two lists sharing a core, a
// side left without cores (a single allowed core cannot be split).
Expected<CorePlan> plan_cores(std::string mode, const std::string& http_cores, const std::string& inference_cores,
                              const std::vector<int>& allowed);

}  // namespace kiln::serve
