// The table of KILN_* environment variables and the check of the environment against it.
#include "core/env_knobs.h"

#include <omp.h>
#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/status.h"

extern char** environ;

namespace kiln {
namespace {

bool is_one_of(const char* value, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (strcasecmp(value, n) == 0) return true;
  return false;
}

// An integer in [lo, hi], the whole string.
bool is_integer_in(const char* value, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value, &end, 10);
  return end != value && *end == '\0' && errno == 0 && v >= lo && v <= hi;
}

bool is_positive_number(const char* value) {
  char* end = nullptr;
  double v = std::strtod(value, &end);
  return end != value && *end == '\0' && std::isfinite(v) && v > 0;
}

bool valid_log_level(const char* v) {
  return is_one_of(v, {"error", "warning", "info", "debug", "trace"}) || is_integer_in(v, 0, 4);
}
bool valid_kernels(const char* v) { return is_one_of(v, {"fast", "reference"}); }
bool valid_threads(const char* v) { return is_integer_in(v, 1, 1 << 20); }
bool valid_switch(const char* v) { return is_one_of(v, {"0", "1"}); }
bool valid_model_load(const char* v) { return is_one_of(v, {"read", "read-all", "map"}); }
bool valid_chunk_bytes(const char* v) { return is_integer_in(v, 64, 1LL << 40); }
bool valid_shm_buffer(const char* v) { return is_integer_in(v, 1, 1LL << 40); }
bool valid_rank(const char* v) { return is_integer_in(v, 0, 1 << 24); }
bool valid_world_size(const char* v) { return is_integer_in(v, 1, 1 << 24); }
bool valid_mmap_threshold(const char* v) { return is_integer_in(v, 0, 32LL << 20); }

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<EnvKnob>& env_knobs() {
  // Defaults and values as the readers implement them (the file named in each comment).
  static const std::vector<EnvKnob> knobs = {
      // core/logging.cc
      {"KILN_LOG_LEVEL", "error, warning, info, debug, trace (or 0..4)", "warning",
       "Least severe log messages printed to stderr.", valid_log_level},
      // core/parallel.cc, runtime/device.cc
      {"KILN_NUM_THREADS", "an integer >= 1 (capped at the cores the process may use)", "all cores",
       "Intra-op threads per device; kiln run/bench --threads set it.", valid_threads},
      // core/parallel.cc
      {"KILN_PIN_THREADS", "0, 1", "0",
       "1 pins a device's intra-op threads one per core; 0 leaves them to the scheduler.", valid_switch},
      // runtime/device.cc
      {"KILN_DEVICES", "cpu or cpu:N", "cpu:1",
       "Splits the cores into N logical CPU devices.", nullptr, true},
      // kernels/kernel_registry.cc
      {"KILN_KERNELS", "fast, reference", "fast",
       "reference runs every node on its reference kernel (as --reference-kernels).", valid_kernels},
      // kernels/shape_specialized_kernel.cc
      {"KILN_SHAPE_CACHE", "an integer 1..4096", "16",
       "Prepared shapes a fast kernel keeps per node for models with open dims.", nullptr, true},
      // kernels/cpu/matmul.cc
      {"KILN_PACKED_GEMM", "0, 1", "chosen per CPU",
       "1 forces Kiln's packed GEMM for constant-weight MatMul, 0 forces oneDNN's.", valid_switch},
      // model/model_reader.cc
      {"KILN_MODEL_LOAD", "read, read-all, map", "read",
       "How a .kiln file is loaded: read into memory (its cold tail of unused original weights mapped), "
       "all of it read, or mmap'ed.",
       valid_model_load, true},
      // runtime/model_runtime.cc
      {"KILN_ARENA_PLAN", "0, 1", "1",
       "0 ignores the arena plan a .kiln carries: executions plan from their first one, as before plans "
       "(for A/B measurements).",
       valid_switch},
      // runtime/execution_pool.h
      {"KILN_ARENA_LOAN", "0, 1", "1",
       "0 stops lending each kernel run the free part of the arena plan's block for its workspace (for A/B "
       "measurements).",
       valid_switch},
      // kernels/cpu/conv_transpose.cc
      {"KILN_DECONV_DIRECT", "0, 1", "1",
       "0 runs ConvTranspose with non-overlapping windows on oneDNN's deconvolution instead of Kiln's direct "
       "kernel (for A/B measurements).",
       valid_switch},
      // runtime/execution_pool.h
      {"KILN_ARENA_WORKSPACE", "0, 1", "1",
       "0 ignores the kernel workspaces a .kiln's arena plan places (the free part of the arena is lent "
       "instead; for A/B measurements).",
       valid_switch},
      // runtime/malloc_policy.cc
      {"KILN_MALLOC_MMAP_THRESHOLD", "bytes, an integer 0..33554432", "0",
       "glibc's mmap threshold (and trim threshold, twice it), fixed at kilnInit so that large freed blocks go "
       "back to the system; 0 leaves glibc's dynamic one (as does setting MALLOC_MMAP_THRESHOLD_ or "
       "GLIBC_TUNABLES).",
       valid_mmap_threshold},
      // compiler/pass_manager.cc
      {"KILN_VERIFY_PASSES", "0, 1", "1 in debug builds, 0 in release builds",
       "Runs the IR verifier after every compiler pass.", valid_switch},
      // profiler/profiler.cc
      {"KILN_PROFILE", "a directory", "unset (no profile)",
       "Profiles the whole process and writes the profile into this directory at exit.", nullptr},
      // profiler/op_record.cc
      {"KILN_PEAK_GFLOPS_PER_CORE", "a number > 0", "from the CPU's vector width",
       "Peak fp32 GFLOP/s of one core, for the profiler's efficiency column.", is_positive_number},
      // tools/conformance_compare.cc
      {"KILN_DEBUG_PERTURB_NODE", "a node name", "unset",
       "kiln compare / conformance testing: perturbs this node's first output in the optimised graph.",
       nullptr},
      {"KILN_DEBUG_PERTURB_DELTA", "a number", "0.01", "The perturbation KILN_DEBUG_PERTURB_NODE adds.",
       nullptr, true},
      // apps/ocr/model_cache.cc
      {"KILN_CACHE_DIR", "a directory", "$XDG_CACHE_HOME/kiln, else ~/.cache/kiln",
       "Where kiln ocr (and include/kiln/ocr.h) keeps the .kiln models it compiles.", nullptr},
      // dsl/build_cache.cc
      {"KILN_DSL_CACHE_DIR", "a directory", "$XDG_CACHE_HOME/kiln/dsl, else ~/.cache/kiln/dsl",
       "Where DSL kernels are compiled to and loaded from (one .cc and one .so per kernel).", nullptr},
      // compiler/passes/fusion_util.cc
      {"KILN_CUSTOM_OP_EPILOGUE", "0, 1", "1",
       "0 keeps custom ops that compute a built-in activation out of conv/matmul epilogues (DSL kernels).",
       valid_switch},
      // core/fault_inject.cc (read before main; a bad spec is reported there and arms nothing)
      {"KILN_FAULT_INJECT", "rules SITE:N, SITE:every:N, SITE:p:P, seed:S (SITE: alloc, kernel, copy), comma-separated",
       "unset (no fault)",
       "Testing: fails the N-th / every N-th / a random share of allocations, kernel runs or copies through the "
       "normal error path (docs/reliability.md).",
       nullptr, true},
      // comm/communicator.cc, comm/link.cc
      {"KILN_COMM_TIMEOUT", "seconds, a number in (0, 1e6]", "30",
       "How long a collective waits for a peer before it fails.", nullptr, true},
      {"KILN_COMM_ALGO", "ring, halving_doubling, tree, pairwise, hierarchical, oneshot, auto", "auto",
       "Collective algorithm.", nullptr, true},
      // capi/api_comm.cc, comm/bootstrap.cc
      {"KILN_COMM_TRANSPORT", "auto, tcp", "auto", "tcp forces TCP between ranks on one host.", nullptr, true},
      // comm/algorithms/group.cc
      {"KILN_COMM_CHUNK_BYTES", "an integer >= 64", "524288", "Pipeline chunk of the collective algorithms.",
       valid_chunk_bytes},
      // comm/shm_transport.cc
      {"KILN_COMM_SHM_BUFFER", "bytes, an integer", "up to 256 MiB per rank",
       "Ring buffer size of the shared-memory transport.", valid_shm_buffer},
      {"KILN_COMM_SHM_SINGLE_COPY", "0, 1", "0", "1 sends shared-memory messages with one copy (process_vm_readv).",
       valid_switch},
      // comm/bootstrap.cc
      {"KILN_COMM_SECRET", "a string", "unset (a key derived from the root info)",
       "The job's secret: every bootstrap and TCP link connection proves it knows it (HMAC).", nullptr},
      // comm/launch_env.cc: set by a launcher, as mpirun sets OMPI_COMM_WORLD_*.
      {"KILN_RANK", "an integer >= 0", "from the MPI launcher", "This process's rank.", valid_rank},
      {"KILN_WORLD_SIZE", "an integer >= 1", "from the MPI launcher", "Ranks in all.", valid_world_size},
      {"KILN_LOCAL_RANK", "an integer >= 0", "from the MPI launcher", "Rank among the ranks of this host.",
       valid_rank},
      {"KILN_ROOT_ADDR", "host:port", "unset", "Where rank 0 listens for the others to join.", nullptr},
      {"KILN_JOB_ID", "a string", "unset", "Tells concurrent jobs on one host apart.", nullptr},
      // Read by tests, benchmarks and scripts, not by Kiln itself: declared so that setting
      // them is no warning.
      {"KILN_ALLOC_TEST_MODEL", "a .kiln file", "unset", "tests/api: the model the allocation test counts.",
       nullptr},
      {"KILN_ALLOC_TEST_STACKS", "any value", "unset", "tests/api: the allocation test prints up to 200 stacks.",
       nullptr},
      {"KILN_SOURCE_DIR", "a directory", "set by CTest", "tests/api: the source tree, for test models.", nullptr},
      {"KILN_STRESS_SECONDS", "seconds", "10", "tests/api: how long the stress test runs.", nullptr},
      {"KILN_LLM_TEST_DATA", "a directory", "the CTest fixture's", "tests/llm: the data make_test_data.py wrote.",
       nullptr},
      {"KILN_E2E_PYTHON", "a python3", "/usr/bin/python3", "tests/e2e: the Python with torch and onnx.", nullptr},
      {"KILN_E2E_NODE", "a node", "node", "tests/e2e: Node.js for ONNX Runtime.", nullptr},
      {"KILN_E2E_NO_PIL", "any value", "unset", "tests/e2e: decode test images without PIL.", nullptr},
      {"KILN_E2E_KEEP", "0|1", "0", "tests/e2e: 1 keeps the -O0, mixed and open-dims .kiln files.", nullptr},
      {"KILN_BIN", "a kiln executable", "unset", "bench/ scripts: the kiln command to measure.", nullptr},
      {"KILN_BENCH_PYTHON", "a python3", "/usr/bin/python3", "bench/ scripts: the Python with numpy and onnx.",
       nullptr},
      {"KILN_REPO", "a directory", "unset", "bench/buckets: the source tree, for ONNX Runtime's script.", nullptr},
      {"KILN_BUILD_LOCK", "a file", "unset", "scripts/test-sanitizers.sh: flock'ed around its builds.", nullptr},
  };
  return knobs;
}

const EnvKnob* find_env_knob(const std::string& name) {
  for (const EnvKnob& k : env_knobs())
    if (name == k.name) return &k;
  return nullptr;
}

std::vector<std::string> environment_warnings() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const char* entry = *e;
    if (std::strncmp(entry, "KILN_", 5) != 0) continue;
    const char* eq = std::strchr(entry, '=');
    if (!eq) continue;
    std::string name(entry, eq);
    const char* value = eq + 1;
    const EnvKnob* knob = find_env_knob(name);
    if (!knob) {
      const EnvKnob* best = nullptr;
      size_t best_distance = 4;  // suggest only close names
      for (const EnvKnob& k : env_knobs()) {
        size_t d = edit_distance(name, k.name);
        if (d < best_distance) best_distance = d, best = &k;
      }
      out.push_back(best ? str_format("%s is not a Kiln variable (ignored); did you mean %s?", name.c_str(), best->name)
                         : str_format("%s is not a Kiln variable (ignored; docs/cli.md lists them)", name.c_str()));
      continue;
    }
    if (name == "KILN_NUM_THREADS" && valid_threads(value) && std::atoi(value) > omp_get_num_procs()) {
      // Capped in core/parallel.cc: more threads than cores only contend.
      out.push_back(str_format("KILN_NUM_THREADS=%s is more than the %d cores this process may use; using %d", value,
                               omp_get_num_procs(), omp_get_num_procs()));
      continue;
    }
    if (!*value || !knob->valid || knob->checked_where_read || knob->valid(value)) continue;
    out.push_back(str_format("%s='%s' is not valid: it takes %s (default: %s)", knob->name, value, knob->values,
                             knob->default_value));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void warn_about_environment(const char* who) {
  static std::once_flag once;
  std::call_once(once, [who] {
    for (const std::string& w : environment_warnings()) std::fprintf(stderr, "%s: warning: %s\n", who, w.c_str());
  });
}

}  // namespace kiln
