// launch_env_from_environment: rank, size and root address from OpenMPI's environment or
// from KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR. Under a plain `mpirun -np N` on one
// host, rank 0 starts the root listener and hands its address to the others through a
// rendezvous file named after OpenMPI's job id.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/bootstrap.h"

namespace kiln::comm {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? v : nullptr;
}

Expected<int> parse_int(const char* name, const char* v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || x < lo || x > hi) {
    return invalid_argument("%s='%s' is not an integer in [%d, %d]", name, v, lo, hi);
  }
  return static_cast<int>(x);
}

uint64_t hash_str(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

// The job id every rank of one mpirun shares.
const char* mpi_job_id() {
  if (const char* v = env("OMPI_MCA_ess_base_jobid")) return v;
  if (const char* v = env("PMIX_NAMESPACE")) return v;
  return env("OMPI_MCA_orte_ess_jobid");
}

std::string rendezvous_path(const std::string& job) {
  std::string safe;
  for (char c : job) safe += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return str_format("/tmp/kiln-comm-%s-%u.root", safe.c_str(), static_cast<unsigned>(getuid()));
}

// When this process started, in seconds since the epoch (0 if unknown).
double process_start_time() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(line.substr(paren + 2));
  std::string f;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
    if (i == 22) start_ticks = std::strtoull(f.c_str(), nullptr, 10);
  }
  std::ifstream proc_stat("/proc/stat");
  unsigned long long btime = 0;
  while (std::getline(proc_stat, line)) {
    if (line.rfind("btime ", 0) == 0) btime = std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  long hz = sysconf(_SC_CLK_TCK);
  if (btime == 0 || hz <= 0) return 0;
  return static_cast<double>(btime) + static_cast<double>(start_ticks) / static_cast<double>(hz);
}

Status write_rendezvous(const std::string& path, const RootInfo& root) {
  std::string tmp = path + str_format(".%d.tmp", static_cast<int>(getpid()));
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return unavailable("cannot write the rendezvous file %s: %s", tmp.c_str(),
                       std::strerror(errno));
  }
  std::fprintf(f, "kiln-comm-root 1 %016llx %s\n", static_cast<unsigned long long>(root.unique_id),
               root.addr.c_str());
  std::fclose(f);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return unavailable("cannot write the rendezvous file %s: %s", path.c_str(),
                       std::strerror(errno));
  }
  return ok_status();
}

// Waits for rank 0's file; ignores files left by a job that died long before this one.
Expected<RootInfo> read_rendezvous(const std::string& path, double timeout) {
  const double started = process_start_time();
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout));
  for (;;) {
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 &&
        (started == 0 || static_cast<double>(st.st_mtime) >= started - 30.0)) {
      std::ifstream f(path);
      std::string tag, uid_hex, addr;
      int version = 0;
      if (f >> tag >> version >> uid_hex >> addr && tag == "kiln-comm-root" && version == 1) {
        RootInfo root;
        root.unique_id = std::strtoull(uid_hex.c_str(), nullptr, 16);
        root.addr = addr;
        if (root.unique_id != 0 && split_host_port(addr).ok()) return root;
      }
    }
    if (Clock::now() >= deadline) {
      return deadline_exceeded(
          "rank 0 did not publish its bootstrap address in %s within %g s (KILN_COMM_TIMEOUT); "
          "without KILN_ROOT_ADDR all ranks must run on one host",
          path.c_str(), timeout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Expected<LaunchEnv> launch_env_from_environment() {
  LaunchEnv out;
  const char* kiln_rank = env("KILN_RANK");
  const char* kiln_size = env("KILN_WORLD_SIZE");
  const char* mpi_rank = env("OMPI_COMM_WORLD_RANK");
  const char* mpi_size = env("OMPI_COMM_WORLD_SIZE");
  const char* root_addr = env("KILN_ROOT_ADDR");
  bool from_mpi = false;
  if (kiln_rank != nullptr && kiln_size != nullptr) {
    KILN_ASSIGN_OR_RETURN(out.size, parse_int("KILN_WORLD_SIZE", kiln_size, 1, 1 << 16));
    KILN_ASSIGN_OR_RETURN(out.rank, parse_int("KILN_RANK", kiln_rank, 0, out.size - 1));
    if (const char* v = env("KILN_LOCAL_RANK")) {
      KILN_ASSIGN_OR_RETURN(out.local_rank, parse_int("KILN_LOCAL_RANK", v, 0, 1 << 16));
    }
  } else if (mpi_rank != nullptr && mpi_size != nullptr) {
    from_mpi = true;
    KILN_ASSIGN_OR_RETURN(out.size, parse_int("OMPI_COMM_WORLD_SIZE", mpi_size, 1, 1 << 16));
    KILN_ASSIGN_OR_RETURN(out.rank, parse_int("OMPI_COMM_WORLD_RANK", mpi_rank, 0, out.size - 1));
    if (const char* v = env("OMPI_COMM_WORLD_LOCAL_RANK")) {
      KILN_ASSIGN_OR_RETURN(out.local_rank,
                            parse_int("OMPI_COMM_WORLD_LOCAL_RANK", v, 0, 1 << 16));
    }
  } else {
    std::string missing;
    if (kiln_rank == nullptr) missing += " KILN_RANK";
    if (kiln_size == nullptr) missing += " KILN_WORLD_SIZE";
    return failed_precondition(
        "no launcher environment: run under mpirun (OMPI_COMM_WORLD_RANK/SIZE) or set KILN_RANK, "
        "KILN_WORLD_SIZE and KILN_ROOT_ADDR (missing:%s)",
        missing.c_str());
  }
  const char* transport = env("KILN_COMM_TRANSPORT");
  out.force_tcp = transport != nullptr && std::strcmp(transport, "tcp") == 0;
  const char* job = mpi_job_id();
  if (const char* v = env("KILN_JOB_ID")) job = v;

  if (root_addr != nullptr) {
    KILN_RETURN_IF_ERROR(split_host_port(root_addr).status(), "KILN_ROOT_ADDR");
    // Every rank derives the same id from the address (and the job, when there is one).
    out.root.addr = root_addr;
    out.root.unique_id = hash_str(std::string(root_addr) + "|" + (job ? job : ""));
    if (out.rank == 0) {
      KILN_ASSIGN_OR_RETURN(auto hp, split_host_port(root_addr));
      // Listen on every interface at that port: the name may be one other hosts use for us.
      KILN_ASSIGN_OR_RETURN(RootInfo started,
                            start_root_with_id(":" + std::to_string(hp.second), out.root.unique_id),
                            "rank 0 starting the root listener for KILN_ROOT_ADDR=%s", root_addr);
      (void)started;
    }
    return out;
  }
  if (!from_mpi) {
    return failed_precondition("KILN_RANK and KILN_WORLD_SIZE are set but KILN_ROOT_ADDR "
                               "(host:port rank 0 listens on) is not");
  }
  // mpirun without KILN_ROOT_ADDR: a rendezvous file, which only works on one host.
  if (const char* local_size = env("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    if (std::atoi(local_size) != out.size) {
      return failed_precondition(
          "the %d ranks of this mpirun span several hosts (%s on this one): set KILN_ROOT_ADDR "
          "to host:port of rank 0's host",
          out.size, local_size);
    }
  }
  if (job == nullptr) {
    return failed_precondition("under mpirun without KILN_ROOT_ADDR, but OpenMPI's job id "
                               "(OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE) is not set: set "
                               "KILN_ROOT_ADDR");
  }
  std::string path = rendezvous_path(job);
  if (out.rank == 0) {
    KILN_ASSIGN_OR_RETURN(out.root, start_root_with_id("127.0.0.1:0", random_id(), path),
                          "rank 0 starting the root listener");
    Status s = write_rendezvous(path, out.root);
    if (!s.ok()) {
      stop_root(out.root.unique_id);
      return s;
    }
    return out;
  }
  KILN_ASSIGN_OR_RETURN(out.root, read_rendezvous(path, comm_timeout_seconds()),
                        "rank %d finding rank 0", out.rank);
  return out;
}

}  // namespace kiln::comm
