// `kiln comm-bench`: bandwidth and latency of one collective over a range of sizes (hccl_test
// and nccl-tests in one), through the public C API (include/kiln/comm.h). One rank per
// process under `mpirun` or KILN_RANK/KILN_WORLD_SIZE/KILN_ROOT_ADDR (kilnCommInitFromEnv),
// or `--ranks N` ranks as threads of this process on N CPU devices (kilnCommInitAll).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/check_values.h"
#include "kiln/comm.h"
#include "tools/api_session.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAlltoAll };

struct CollectiveName {
  const char* name;
  Collective op;
};
constexpr CollectiveName kCollectives[] = {{"allreduce", Collective::kAllReduce},
                                           {"allgather", Collective::kAllGather},
                                           {"reducescatter", Collective::kReduceScatter},
                                           {"broadcast", Collective::kBroadcast},
                                           {"reduce", Collective::kReduce},
                                           {"alltoall", Collective::kAlltoAll}};

struct TypeName {
  const char* name;  // printed
  const char* alias;
  kilnCommDataType type;
  size_t size;
};
constexpr TypeName kTypes[] = {
    {"int8", "char", KILN_COMM_INT8, 1},    {"uint8", "uchar", KILN_COMM_UINT8, 1},
    {"int16", "short", KILN_COMM_INT16, 2}, {"uint16", "ushort", KILN_COMM_UINT16, 2},
    {"int32", "int", KILN_COMM_INT32, 4},   {"uint32", "uint", KILN_COMM_UINT32, 4},
    {"int64", "long", KILN_COMM_INT64, 8},  {"uint64", "ulong", KILN_COMM_UINT64, 8},
    {"fp16", "half", KILN_COMM_FP16, 2},    {"bf16", "bfloat16", KILN_COMM_BF16, 2},
    {"fp32", "float", KILN_COMM_FP32, 4},   {"fp64", "double", KILN_COMM_FP64, 8}};

struct OpName {
  const char* name;
  kilnReduceOp op;
};
constexpr OpName kOps[] = {{"sum", KILN_REDUCE_SUM},
                           {"prod", KILN_REDUCE_PROD},
                           {"max", KILN_REDUCE_MAX},
                           {"min", KILN_REDUCE_MIN}};

struct CommBenchArgs {
  std::string collective;
  std::string begin = "8";
  std::string end = "256M";
  int64_t factor = 2;
  std::string dtype = "fp32";
  std::string redop = "sum";
  int iters = 20;
  int warmup = 5;
  int check = 0;
  int ranks = 0;  // 0: one rank per process, from the launcher's environment
  int root = 0;
  const CLI::Option* ranks_opt = nullptr;
};

// What the arguments resolve to.
struct Plan {
  Collective op;
  const char* op_name;
  TypeName type;
  OpName redop;
  bool reduces;  // redop applies
  bool rooted;   // root applies
  std::vector<uint64_t> sizes;
  int iters, warmup, root;
  bool check;
};

// "8", "64K", "256M", "1G" (binary multiples, an optional trailing "B" or "iB").
Expected<uint64_t> parse_size(const std::string& text, const char* flag) {
  std::string s = text;
  auto bad = [&]() {
    return invalid_argument(
        "%s %s: not a size (a number of bytes with an optional K, M or G suffix, e.g. 256M)", flag,
        text.c_str());
  };
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return bad();
  size_t pos = 0;
  uint64_t value = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
    if (value > (UINT64_MAX - 9) / 10) return bad();
    value = value * 10 + static_cast<uint64_t>(s[pos++] - '0');
  }
  std::string suffix = s.substr(pos);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix == "B") suffix.clear();
  if (suffix.size() == 3 && suffix.substr(1) == "IB") suffix.resize(1);
  if (suffix.size() == 2 && suffix[1] == 'B') suffix.resize(1);
  int shift = suffix.empty()  ? 0
              : suffix == "K" ? 10
              : suffix == "M" ? 20
              : suffix == "G" ? 30
                              : -1;
  if (shift < 0) return bad();
  if (shift > 0 && value > (uint64_t{1} << (63 - shift))) return bad();
  return value << shift;
}

Expected<Plan> make_plan(const CommBenchArgs& a) {
  Plan p{};
  bool found = false;
  std::string names;
  for (const CollectiveName& c : kCollectives) {
    names += names.empty() ? c.name : std::string(", ") + c.name;
    if (a.collective == c.name) p.op = c.op, p.op_name = c.name, found = true;
  }
  if (!found)
    return invalid_argument("unknown collective '%s' (one of %s)", a.collective.c_str(),
                            names.c_str());
  found = false;
  names.clear();
  for (const TypeName& t : kTypes) {
    names += names.empty() ? t.name : std::string(", ") + t.name;
    if (a.dtype == t.name || a.dtype == t.alias) p.type = t, found = true;
  }
  if (!found)
    return invalid_argument("-d %s: unknown data type (one of %s)", a.dtype.c_str(), names.c_str());
  found = false;
  for (const OpName& o : kOps)
    if (a.redop == o.name) p.redop = o, found = true;
  if (!found)
    return invalid_argument("-o %s: unknown reduce op (one of sum, prod, max, min)",
                            a.redop.c_str());
  p.reduces = p.op == Collective::kAllReduce || p.op == Collective::kReduce ||
              p.op == Collective::kReduceScatter;
  p.rooted = p.op == Collective::kBroadcast || p.op == Collective::kReduce;
  KILN_ASSIGN_OR_RETURN(uint64_t lo, parse_size(a.begin, "-b"));
  KILN_ASSIGN_OR_RETURN(uint64_t hi, parse_size(a.end, "-e"));
  if (lo > hi)
    return invalid_argument("-b %s is larger than -e %s", a.begin.c_str(), a.end.c_str());
  if (hi > (uint64_t{1} << 36)) return invalid_argument("-e %s: at most 64G", a.end.c_str());
  if (a.factor < 2)
    return invalid_argument("-f %lld: the step factor must be at least 2", (long long)a.factor);
  if (a.iters < 1) return invalid_argument("-n %d: at least one iteration", a.iters);
  if (a.warmup < 0)
    return invalid_argument("-w %d: warm-up iterations cannot be negative", a.warmup);
  if (a.check != 0 && a.check != 1)
    return invalid_argument("-c %d: 0 (no check) or 1 (check the data)", a.check);
  if (a.ranks_opt && a.ranks_opt->count() > 0 && (a.ranks < 1 || a.ranks > 256))
    return invalid_argument("--ranks %d: between 1 and 256", a.ranks);
  if (a.root < 0) return invalid_argument("--root %d: a rank number", a.root);
  for (uint64_t s = lo;; s *= static_cast<uint64_t>(a.factor)) {
    p.sizes.push_back(s);
    if (s == 0 || s > hi / static_cast<uint64_t>(a.factor)) break;
  }
  p.iters = a.iters;
  p.warmup = a.warmup;
  p.root = a.root;
  p.check = a.check == 1;
  return p;
}

// ---- Data: deterministic per-rank values whose reductions are exact in every type ----------


// Element i of rank r's send buffer. Small integers, so that sums over all ranks stay
// exact even in int8, fp16 and bf16 (at most 120 in magnitude); for prod only 1, 2 and -1,
// with at most one 2 per element over the ranks.
double value(const Plan& p, int nranks, int rank, uint64_t i) {
  uint64_t h =
      (i * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank + 1) * 0xBF58476D1CE4E5B9ull) >> 40;
  if (p.reduces && p.redop.op == KILN_REDUCE_PROD) {
    if (i % static_cast<uint64_t>(nranks) == static_cast<uint64_t>(rank) && h % 3 == 0) return 2;
    if (comm::is_signed_type(p.type.type) && h % 7 == 0) return -1;
    return 1;
  }
  uint64_t top = std::max<uint64_t>(1, std::min<uint64_t>(12, 120 / static_cast<uint64_t>(nranks)));
  return static_cast<double>(h % (top + 1));
}


double reduced(const Plan& p, int nranks, uint64_t i) {
  double acc = value(p, nranks, 0, i);
  for (int r = 1; r < nranks; ++r) acc = comm::combine_values(p.redop.op, acc, value(p, nranks, r, i));
  return acc;
}

// ---- One rank -----------------------------------------------------------------------------

// Per size, what each rank's call moves.
struct Counts {
  uint64_t total = 0;  // elements the size stands for (nccl-tests' "count")
  uint64_t send = 0;   // elements of the send buffer the call reads
  uint64_t recv = 0;   // elements of the receive buffer it writes
  uint64_t param = 0;  // the count argument of the call
};

Counts counts_for(Collective op, uint64_t bytes, size_t elem, int n) {
  Counts c;
  uint64_t count = bytes / elem;
  uint64_t un = static_cast<uint64_t>(n);
  switch (op) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
      c.total = c.send = c.recv = c.param = count;
      break;
    case Collective::kAllGather:
      c.param = c.send = count / un;
      c.total = c.recv = c.param * un;
      break;
    case Collective::kReduceScatter:
      c.param = c.recv = count / un;
      c.total = c.send = c.param * un;
      break;
    case Collective::kAlltoAll:
      c.param = count / un;
      c.total = c.send = c.recv = c.param * un;
      break;
  }
  return c;
}

double bus_factor(Collective op, int n) {
  double dn = n;
  switch (op) {
    case Collective::kAllReduce:
      return 2 * (dn - 1) / dn;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAlltoAll:
      return (dn - 1) / dn;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return 1;
  }
  return 1;
}

struct Row {
  uint64_t bytes;
  uint64_t count;
  double time_us;
  int64_t wrong;
};

// Everything one rank needs; the rank's current context is its device's.
class RankBench {
 public:
  RankBench(const Plan& plan, kilnComm comm, int rank, int nranks)
      : p_(plan), comm_(comm), rank_(rank), n_(nranks) {}

  Status setup() {
    KILN_ASSIGN_OR_RETURN(stream_, StreamHandle::create());
    uint64_t max_bytes = p_.sizes.back();
    size_t elem = p_.type.size;
    Counts c = counts_for(p_.op, max_bytes, elem, n_);
    KILN_ASSIGN_OR_RETURN(send_, DeviceBuffer::allocate(c.send * elem));
    KILN_ASSIGN_OR_RETURN(recv_, DeviceBuffer::allocate(std::max(c.recv, c.send) * elem));
    // The send data is the same for every size (element i of rank r), written once.
    KILN_RETURN_IF_ERROR(
        fill_device(send_->data(), c.send, [&](uint64_t i) { return value(p_, n_, rank_, i); }));
    return ok_status();
  }

  // Before the first size, as nccl-tests does: the warm-up iterations at the largest size,
  // so the first sizes do not pay for what any process's first operations pay once (first
  // touches of the buffers and the algorithms' scratch, the threads' first wake-ups).
  Status warm_up(uint64_t largest) {
    Counts c = counts_for(p_.op, largest, p_.type.size, n_);
    KILN_RETURN_IF_ERROR(barrier());
    for (int i = 0; i < p_.warmup; ++i) KILN_RETURN_IF_ERROR(once(c));
    return ok_status();
  }

  Expected<Row> run_size(uint64_t bytes) {
    size_t elem = p_.type.size;
    Counts c = counts_for(p_.op, bytes, elem, n_);
    // A sentinel no correct result holds (0x7f bytes: NaN or a huge value in every type).
    if (c.recv > 0)
      KILN_API_RETURN_IF_ERROR(kilnrtMemset(recv_->data(), recv_->size(), 0x7f, c.recv * elem));
    if (p_.op == Collective::kBroadcast && rank_ == p_.root && c.total > 0)
      KILN_API_RETURN_IF_ERROR(kilnrtMemcpy(recv_->data(), recv_->size(), send_->data(),
                                            c.total * elem, KILN_MEMCPY_DEVICE_TO_DEVICE));
    KILN_RETURN_IF_ERROR(barrier());
    for (int i = 0; i < p_.warmup; ++i) KILN_RETURN_IF_ERROR(once(c));
    KILN_RETURN_IF_ERROR(barrier());
    Clock::time_point start = Clock::now();
    for (int i = 0; i < p_.iters; ++i) KILN_RETURN_IF_ERROR(once(c));
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / p_.iters;
    int64_t wrong = 0;
    if (p_.check) {
      KILN_ASSIGN_OR_RETURN(wrong, count_wrong(c));
    }
    // The slowest rank's time and the wrong elements of all ranks.
    double time_max[1] = {us};
    int64_t wrong_sum[1] = {wrong};
    KILN_API_RETURN_IF_ERROR(kilnAllReduce(time_max, time_max, 1, KILN_COMM_FP64, KILN_REDUCE_MAX,
                                           comm_, stream_->get()));
    KILN_API_RETURN_IF_ERROR(kilnAllReduce(wrong_sum, wrong_sum, 1, KILN_COMM_INT64,
                                           KILN_REDUCE_SUM, comm_, stream_->get()));
    KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(stream_->get()));
    return Row{c.total * elem, c.total, time_max[0], wrong_sum[0]};
  }

 private:
  Status barrier() {
    KILN_API_RETURN_IF_ERROR(kilnBarrier(comm_, stream_->get()));
    KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(stream_->get()));
    return ok_status();
  }

  // One timed iteration: the call enqueued on the stream, then the stream synchronised.
  Status once(const Counts& c) {
    void* s = send_->data();
    void* r = recv_->data();
    kilnCommDataType t = p_.type.type;
    kilnrtStream st = stream_->get();
    switch (p_.op) {
      case Collective::kAllReduce:
        KILN_API_RETURN_IF_ERROR(kilnAllReduce(s, r, c.param, t, p_.redop.op, comm_, st));
        break;
      case Collective::kAllGather:
        KILN_API_RETURN_IF_ERROR(kilnAllGather(s, r, c.param, t, comm_, st));
        break;
      case Collective::kReduceScatter:
        KILN_API_RETURN_IF_ERROR(kilnReduceScatter(s, r, c.param, t, p_.redop.op, comm_, st));
        break;
      case Collective::kBroadcast:
        KILN_API_RETURN_IF_ERROR(
            kilnBroadcast(r, c.param, t, static_cast<uint32_t>(p_.root), comm_, st));
        break;
      case Collective::kReduce:
        KILN_API_RETURN_IF_ERROR(
            kilnReduce(s, r, c.param, t, p_.redop.op, static_cast<uint32_t>(p_.root), comm_, st));
        break;
      case Collective::kAlltoAll:
        KILN_API_RETURN_IF_ERROR(kilnAlltoAll(s, c.param, t, r, c.param, t, comm_, st));
        break;
    }
    KILN_API_RETURN_IF_ERROR(kilnrtSynchronizeStream(st));
    return ok_status();
  }

  // Element k of this rank's result, computed serially from every rank's send data.
  double expected(const Counts& c, uint64_t k) const {
    switch (p_.op) {
      case Collective::kAllReduce:
      case Collective::kReduce:
        return reduced(p_, n_, k);
      case Collective::kBroadcast:
        return value(p_, n_, p_.root, k);
      case Collective::kAllGather:
        return value(p_, n_, static_cast<int>(k / c.param), k % c.param);
      case Collective::kReduceScatter:
        return reduced(p_, n_, static_cast<uint64_t>(rank_) * c.param + k);
      case Collective::kAlltoAll:
        return value(p_, n_, static_cast<int>(k / c.param),
                     static_cast<uint64_t>(rank_) * c.param + k % c.param);
    }
    return 0;
  }

  Expected<int64_t> count_wrong(const Counts& c) {
    if (p_.op == Collective::kReduce && rank_ != p_.root) return 0;  // recvBuf is the root's only
    size_t elem = p_.type.size;
    constexpr uint64_t kChunk = 1 << 20;  // elements read back at a time
    std::vector<char> host(std::min<uint64_t>(c.recv, kChunk) * elem + 1);
    int64_t wrong = 0;
    for (uint64_t at = 0; at < c.recv; at += kChunk) {
      uint64_t n = std::min(kChunk, c.recv - at);
      KILN_API_RETURN_IF_ERROR(kilnrtMemcpy(host.data(), host.size(),
                                            static_cast<char*>(recv_->data()) + at * elem, n * elem,
                                            KILN_MEMCPY_DEVICE_TO_HOST));
      for (uint64_t k = 0; k < n; ++k) {
        double got = comm::load_value(p_.type.type, host.data(), k);
        if (!(got == expected(c, at + k))) ++wrong;
      }
    }
    return wrong;
  }

  template <typename F>
  Status fill_device(void* dst, uint64_t count, F&& f) {
    size_t elem = p_.type.size;
    constexpr uint64_t kChunk = 1 << 20;
    std::vector<char> host(std::min<uint64_t>(count, kChunk) * elem + 1);
    for (uint64_t at = 0; at < count; at += kChunk) {
      uint64_t n = std::min(kChunk, count - at);
      for (uint64_t k = 0; k < n; ++k) comm::store_value(p_.type.type, host.data(), k, f(at + k));
      KILN_API_RETURN_IF_ERROR(kilnrtMemcpy(static_cast<char*>(dst) + at * elem, n * elem,
                                            host.data(), n * elem, KILN_MEMCPY_HOST_TO_DEVICE));
    }
    return ok_status();
  }

  const Plan& p_;
  kilnComm comm_;
  int rank_, n_;
  std::unique_ptr<StreamHandle> stream_;
  std::unique_ptr<DeviceBuffer> send_, recv_;
};

void print_header(const Plan& p, int nranks, const char* how) {
  std::printf(
      "# kiln comm-bench %s: %d ranks (%s), %s, %d iterations after %d warm-up, data check %s\n",
      p.op_name, nranks, how, p.type.name, p.iters, p.warmup, p.check ? "on" : "off");
  std::printf(
      "# time: per-iteration average (enqueue on a stream + synchronise), slowest rank\n#\n");
  std::printf("# %12s %12s %7s %6s %5s %11s %8s %8s %7s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong");
  std::printf("# %12s %12s %7s %6s %5s %11s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

void print_row(const Plan& p, int nranks, const Row& r) {
  double algbw = r.time_us > 0 ? static_cast<double>(r.bytes) / (r.time_us * 1e3) : 0;
  double busbw = algbw * bus_factor(p.op, nranks);
  std::printf("  %12llu %12llu %7s %6s %5d %11.2f %8.2f %8.2f %7lld\n", (unsigned long long)r.bytes,
              (unsigned long long)r.count, p.type.name, p.reduces ? p.redop.name : "none",
              p.rooted ? p.root : -1, r.time_us, algbw, busbw, (long long)r.wrong);
  std::fflush(stdout);
}

// Runs every size on one rank; rank 0 prints. Returns the wrong element count over sizes.
Expected<int64_t> run_rank(const Plan& p, kilnComm comm, int rank, int nranks, const char* how) {
  RankBench bench(p, comm, rank, nranks);
  KILN_RETURN_IF_ERROR(bench.setup());
  if (rank == 0) print_header(p, nranks, how);
  if (!p.sizes.empty()) KILN_RETURN_IF_ERROR(bench.warm_up(*std::max_element(p.sizes.begin(), p.sizes.end())));
  int64_t wrong = 0;
  double bus_sum = 0;
  for (uint64_t bytes : p.sizes) {
    KILN_ASSIGN_OR_RETURN(Row row, bench.run_size(bytes));
    wrong += row.wrong;
    if (row.time_us > 0)
      bus_sum += static_cast<double>(row.bytes) / (row.time_us * 1e3) * bus_factor(p.op, nranks);
    if (rank == 0) print_row(p, nranks, row);
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", (long long)wrong,
                wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.4f GB/s\n#\n",
                bus_sum / static_cast<double>(p.sizes.size()));
  }
  return wrong;
}

int run_threads(const Plan& p, int nranks) {
  auto runtime = Runtime::init(RuntimeOptions{.devices = nranks});
  if (!runtime.ok()) return report_error("comm-bench", runtime.status().message());
  std::vector<int32_t> devices(static_cast<size_t>(nranks));
  for (int i = 0; i < nranks; ++i) devices[static_cast<size_t>(i)] = i;
  std::vector<kilnComm> comms(static_cast<size_t>(nranks), nullptr);
  {
    // kilnCommInitAll uses devices' contexts; make one current on this thread as callers do.
    auto guard = DeviceGuard::set(0);
    if (!guard.ok()) return report_error("comm-bench", guard.status().message());
    kilnError e = kilnCommInitAll(static_cast<uint32_t>(nranks), devices.data(), comms.data());
    if (e != KILN_SUCCESS)
      return report_error("comm-bench", api_error(e, "kilnCommInitAll").message());
  }
  std::mutex mutex;
  Status first_error;
  std::atomic<int64_t> wrong{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r]() {
      Status s = [&]() -> Status {
        KILN_ASSIGN_OR_RETURN(auto device, DeviceGuard::set(r));
        KILN_ASSIGN_OR_RETURN(int64_t w,
                              run_rank(p, comms[static_cast<size_t>(r)], r, nranks, "threads"));
        if (r == 0) wrong = w;
        return ok_status();
      }();
      if (!s.ok()) {
        std::lock_guard lock(mutex);
        if (first_error.ok()) {
          first_error = Status(s.code(), str_format("rank %d: %s", r, s.message().c_str()));
          // The other ranks would wait for this one until the timeout: stop them now.
          for (kilnComm c : comms) kilnCommAbort(c);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (kilnComm c : comms) kilnCommDestroy(c);
  if (!first_error.ok()) return report_error("comm-bench", first_error.message());
  return wrong.load() == 0 ? 0 : kExitError;
}

int run_process(const Plan& p) {
  auto runtime = Runtime::init(RuntimeOptions{});
  if (!runtime.ok()) return report_error("comm-bench", runtime.status().message());
  auto device = DeviceGuard::set(0);
  if (!device.ok()) return report_error("comm-bench", device.status().message());
  kilnComm comm = nullptr;
  kilnError e = kilnCommInitFromEnv(&comm);
  if (e != KILN_SUCCESS)
    return report_error("comm-bench",
                        api_error(e, "kilnCommInitFromEnv").message() +
                            " (or give --ranks N to run N ranks as threads of this process)");
  uint32_t rank = 0, size = 0;
  kilnCommGetRankId(comm, &rank);
  kilnCommGetRankSize(comm, &size);
  if (p.rooted && p.root >= static_cast<int>(size)) {
    kilnCommDestroy(comm);
    return report_error("comm-bench",
                        str_format("--root %d: the world has %u ranks", p.root, size));
  }
  auto wrong = run_rank(p, comm, static_cast<int>(rank), static_cast<int>(size), "processes");
  if (!wrong.ok()) {
    // Leave at once: the peers learn of it from this process's exit.
    kilnCommAbort(comm);
    std::fprintf(stderr, "kiln comm-bench: error: rank %u: %s\n", rank,
                 printable_one_line(wrong.status().message()).c_str());
    std::fflush(stderr);
    std::_Exit(kExitError);
  }
  kilnCommDestroy(comm);
  return *wrong == 0 ? 0 : kExitError;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<CommBenchArgs>();
  app.add_option("collective", args->collective,
                 "allreduce, allgather, reducescatter, broadcast, reduce or alltoall")
      ->required();
  app.add_option("-b,--minbytes", args->begin, "Smallest size, e.g. 8, 64K (default 8)");
  app.add_option("-e,--maxbytes", args->end, "Largest size, e.g. 256M, 1G (default 256M)");
  app.add_option("-f,--stepfactor", args->factor, "Size multiplier between steps (default 2)");
  app.add_option("-d,--datatype", args->dtype,
                 "int8, uint8, int16, uint16, int32, uint32, int64, uint64, fp16, bf16, fp32, fp64 "
                 "(default fp32)");
  app.add_option("-o,--op", args->redop, "Reduce op: sum, prod, max, min (default sum)");
  app.add_option("-n,--iters", args->iters, "Timed iterations per size (default 20)");
  app.add_option("-w,--warmup-iters", args->warmup, "Warm-up iterations per size, and at the largest size before the first (default 5)");
  app.add_option("-c,--check", args->check,
                 "1: check every result against the exact expected values (default 0)");
  args->ranks_opt = app.add_option(
      "--ranks", args->ranks,
      "Run N ranks as threads of this process, one CPU device each (default: one rank "
      "per process, from mpirun or KILN_RANK/KILN_WORLD_SIZE/KILN_ROOT_ADDR)");
  app.add_option("--root", args->root, "Root rank of broadcast and reduce (default 0)");
  return [args]() -> int {
    auto plan = make_plan(*args);
    if (!plan.ok()) {
      report_error("comm-bench", plan.status().message());
      return kExitUsage;
    }
    if (args->ranks_opt->count() > 0) {
      if (plan->rooted && plan->root >= args->ranks) {
        report_error("comm-bench",
                     str_format("--root %d: the world has %d ranks", plan->root, args->ranks));
        return kExitUsage;
      }
      return run_threads(*plan, args->ranks);
    }
    return run_process(*plan);
  };
}

}  // namespace

KILN_REGISTER_SUBCOMMAND("comm-bench",
                         "Benchmark a collective (bandwidth per size, like nccl-tests)", setup);

}  // namespace kiln::tools
