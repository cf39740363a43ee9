// One rank of a multi-process communication test: joins its world through
// kilnCommInitFromEnv (mpirun, or KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR) and runs
//   comm_worker matrix [--quick]        every collective x dtype x reduce op x count x in-place,
//                                       compared with a serial computation of the expected
//                                       result from every rank's deterministic data;
//   comm_worker fault kill|stall|hang|partition V [COUNT]
//                                       rank V SIGKILLs / SIGSTOPs itself in the middle of
//                                       a large AllReduce (of COUNT fp32, default 4 Mi; a
//                                       small COUNT: among many back to back, the one-shot
//                                       path through the links' mailboxes), or (hang) stays alive and running
//                                       but its stream stops before its third one (a blocking
//                                       host callback that never returns, like a hung kernel);
//                                       every other rank must fail with an error naming rank
//                                       V. With partition no rank misbehaves (V is ignored):
//                                       netns_test.sh cuts the link between the two hosts
//                                       from outside. Prints one line per rank:
//                                       "FAULT rank=R code=C seconds=S epoch=E message=M"
//                                       (E: the wall clock when the operation ended, to
//                                       compare with the moment the link was cut).
//   comm_worker endure SECONDS          AllReduces of 1 Mi fp32 back to back for SECONDS, each
//                                       checked (rank r sends r + 1 + i: the sum is exact);
//                                       netns_test.sh cuts the link meanwhile for less than the
//                                       timeout, which they must ride out. Prints
//                                       "ENDURE rank=R ops=N wrong=W code=C longest=S message=M"
//                                       (S: the slowest operation with its vote to go on, in
//                                       seconds).
// Driven by tests/comm/multiprocess_test.py and tests/comm/netns_test.sh.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/check_values.h"
#include "kiln/comm.h"
#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

struct TypeInfo {
  kilnCommDataType type;
  const char* name;
  size_t size;
  bool is_signed;
};
constexpr TypeInfo kTypes[] = {
    {KILN_COMM_INT8, "int8", 1, true},   {KILN_COMM_UINT8, "uint8", 1, false},
    {KILN_COMM_INT16, "int16", 2, true}, {KILN_COMM_UINT16, "uint16", 2, false},
    {KILN_COMM_INT32, "int32", 4, true}, {KILN_COMM_UINT32, "uint32", 4, false},
    {KILN_COMM_INT64, "int64", 8, true}, {KILN_COMM_UINT64, "uint64", 8, false},
    {KILN_COMM_FP16, "fp16", 2, true},   {KILN_COMM_BF16, "bf16", 2, true},
    {KILN_COMM_FP32, "fp32", 4, true},   {KILN_COMM_FP64, "fp64", 8, true}};

struct OpInfo {
  kilnReduceOp op;
  const char* name;
};
constexpr OpInfo kOps[] = {{KILN_REDUCE_SUM, "sum"},
                           {KILN_REDUCE_PROD, "prod"},
                           {KILN_REDUCE_MAX, "max"},
                           {KILN_REDUCE_MIN, "min"}};


// Element i of rank r's data for a case. Values keep every reduction exact in every type:
// sums of small integers (|sum| <= 120, also fp16/bf16-exact), for prod only 1, -1 and at
// most one 2 per element; halves for the float types so that their sums are not integers.
double value(const TypeInfo& t, kilnReduceOp op, int nranks, int rank, uint64_t i, uint32_t salt) {
  uint64_t h = (i * 0x9E3779B97F4A7C15ull) ^
               ((static_cast<uint64_t>(rank) + 1) * 0xBF58476D1CE4E5B9ull) ^
               (static_cast<uint64_t>(salt) * 0x94D049BB133111EBull);
  h ^= h >> 31;
  h *= 0xD6E8FEB86CA5E3A5ull;
  h ^= h >> 29;
  if (op == KILN_REDUCE_PROD) {
    if (i % static_cast<uint64_t>(nranks) == static_cast<uint64_t>(rank) && h % 3 == 0) return 2;
    if (t.is_signed && (h >> 8) % 5 == 0) return -1;
    return 1;
  }
  int64_t top = std::max<int64_t>(1, std::min<int64_t>(12, 120 / nranks));
  double v = static_cast<double>(h % static_cast<uint64_t>(top + 1));
  if (t.is_signed && (h >> 16) % 3 == 0) v = -v;
  bool is_float = t.type == KILN_COMM_FP16 || t.type == KILN_COMM_BF16 ||
                  t.type == KILN_COMM_FP32 || t.type == KILN_COMM_FP64;
  if (is_float && (h >> 20) % 2 == 0 && std::fabs(v) * nranks < 60) v += 0.5;
  return v;
}


// Device memory with a tail canary (guards against writes past the end).
constexpr size_t kCanary = 64;

struct Buffer {
  void* dev = nullptr;
  size_t bytes = 0;  // usable bytes, the canary follows
};

class Worker {
 public:
  Worker(kilnComm comm, int rank, int n, kilnrtStream stream)
      : comm_(comm), rank_(rank), n_(n), stream_(stream) {}

  bool api(kilnError e, const char* call, const std::string& what) {
    if (e == KILN_SUCCESS) return true;
    fail(what, std::string(call) + " returned " + std::to_string(e) + ": " + kilnGetRecentErrMsg());
    return false;
  }

  void fail(const std::string& what, const std::string& why) {
    ++failures_;
    if (failures_ <= 20)
      std::fprintf(stderr, "rank %d: FAIL %s: %s\n", rank_, what.c_str(), why.c_str());
  }

  Buffer alloc(size_t bytes) {
    Buffer b;
    b.bytes = bytes;
    if (kilnrtMalloc(&b.dev, bytes + kCanary, KILN_MEM_MALLOC_NORMAL_ONLY) != KILN_SUCCESS) {
      std::fprintf(stderr, "rank %d: kilnrtMalloc(%zu) failed: %s\n", rank_, bytes + kCanary,
                   kilnGetRecentErrMsg());
      std::exit(2);
    }
    return b;
  }
  void release(Buffer& b) {
    if (b.dev) kilnrtFree(b.dev);
    b.dev = nullptr;
  }

  // Writes `host` (bytes) to the buffer at offset `at`, and the canary after the buffer.
  void upload(Buffer& b, const std::vector<char>& host, size_t at = 0) {
    std::vector<char> canary(kCanary, static_cast<char>(0xA5));
    if (!host.empty())
      kilnrtMemcpy(static_cast<char*>(b.dev) + at, b.bytes + kCanary - at, host.data(), host.size(),
                   KILN_MEMCPY_HOST_TO_DEVICE);
    kilnrtMemcpy(static_cast<char*>(b.dev) + b.bytes, kCanary, canary.data(), kCanary,
                 KILN_MEMCPY_HOST_TO_DEVICE);
  }
  std::vector<char> download(const Buffer& b) {
    std::vector<char> host(b.bytes + kCanary);
    kilnrtMemcpy(host.data(), host.size(), b.dev, b.bytes + kCanary, KILN_MEMCPY_DEVICE_TO_HOST);
    return host;
  }
  bool canary_ok(const std::vector<char>& host, size_t bytes) {
    for (size_t i = 0; i < kCanary; ++i)
      if (static_cast<unsigned char>(host[bytes + i]) != 0xA5) return false;
    return true;
  }

  std::vector<char> make_data(const TypeInfo& t, kilnReduceOp op, int rank, uint64_t count,
                              uint32_t salt) {
    std::vector<char> host(count * t.size);
    for (uint64_t i = 0; i < count; ++i)
      kiln::comm::store_value(t.type, host.data(), i, value(t, op, n_, rank, i, salt));
    return host;
  }

  // Compares `count` elements of `got` (from element `at`) with expect(k).
  template <typename F>
  void compare(const std::string& what, const TypeInfo& t, const char* got, uint64_t at,
               uint64_t count, F expect) {
    uint64_t wrong = 0;
    for (uint64_t k = 0; k < count; ++k) {
      double g = kiln::comm::load_value(t.type, got, at + k);
      double e = expect(k);
      if (!(g == e)) {
        if (wrong == 0)
          fail(what, "element " + std::to_string(k) + " is " + std::to_string(g) + ", expected " +
                         std::to_string(e));
        ++wrong;
      }
    }
    if (wrong > 1)
      std::fprintf(stderr, "rank %d:   (%llu wrong elements in all)\n", rank_,
                   (unsigned long long)wrong);
  }

  bool sync(const std::string& what) {
    return api(kilnrtSynchronizeStream(stream_), "kilnrtSynchronizeStream", what);
  }

  // ---- The cases --------------------------------------------------------------------------

  // AllReduce, Reduce (root), ReduceScatter: reducing collectives.
  void reducing(const char* coll, const TypeInfo& t, const OpInfo& op, uint64_t count,
                bool in_place, int root) {
    uint32_t salt = ++salt_;
    std::string what = std::string(coll) + " " + t.name + " " + op.name +
                       " count=" + std::to_string(count) +
                       (in_place ? " in-place" : " out-of-place") + " root=" + std::to_string(root);
    bool scatter = std::strcmp(coll, "ReduceScatter") == 0;
    bool reduce = std::strcmp(coll, "Reduce") == 0;
    uint64_t send_count = scatter ? count * static_cast<uint64_t>(n_) : count;
    uint64_t recv_count = count;
    std::vector<char> mine = make_data(t, op.op, rank_, send_count, salt);
    Buffer send = alloc(send_count * t.size);
    upload(send, mine);
    Buffer recv;
    void* recv_ptr;
    size_t recv_offset = 0;  // element offset of the result in the buffer read back
    if (in_place) {
      // In-place ReduceScatter (NCCL's convention): the result lands on this rank's block.
      if (scatter) recv_offset = static_cast<size_t>(rank_) * count;
      recv_ptr = static_cast<char*>(send.dev) + recv_offset * t.size;
    } else {
      recv = alloc(recv_count * t.size);
      upload(recv, std::vector<char>(recv_count * t.size, 0x7f));
      recv_ptr = recv.dev;
    }
    kilnError e;
    if (scatter)
      e = kilnReduceScatter(send.dev, recv_ptr, count, t.type, op.op, comm_, stream_);
    else if (reduce)
      e = kilnReduce(send.dev, recv_ptr, count, t.type, op.op, static_cast<uint32_t>(root), comm_,
                     stream_);
    else
      e = kilnAllReduce(send.dev, recv_ptr, count, t.type, op.op, comm_, stream_);
    if (api(e, coll, what) && sync(what)) {
      auto expect = [&](uint64_t k) {
        uint64_t i = scatter ? static_cast<uint64_t>(rank_) * count + k : k;
        double acc = value(t, op.op, n_, 0, i, salt);
        for (int r = 1; r < n_; ++r) acc = kiln::comm::combine_values(op.op, acc, value(t, op.op, n_, r, i, salt));
        return acc;
      };
      bool has_result = !reduce || rank_ == root;
      const Buffer& out = in_place ? send : recv;
      std::vector<char> got = download(out);
      if (!canary_ok(got, out.bytes)) fail(what, "wrote past the end of the receive buffer");
      if (has_result) compare(what, t, got.data(), recv_offset, recv_count, expect);
      if (!in_place) {
        std::vector<char> sent = download(send);
        if (std::memcmp(sent.data(), mine.data(), mine.size()) != 0)
          fail(what, "changed the send buffer");
      }
    }
    release(send);
    release(recv);
    ++cases_;
  }

  void broadcast(const TypeInfo& t, uint64_t count, int root) {
    uint32_t salt = ++salt_;
    std::string what = std::string("Broadcast ") + t.name + " count=" + std::to_string(count) +
                       " root=" + std::to_string(root);
    Buffer buf = alloc(count * t.size);
    upload(buf, make_data(t, KILN_REDUCE_SUM, rank_, count, salt));
    if (api(kilnBroadcast(buf.dev, count, t.type, static_cast<uint32_t>(root), comm_, stream_),
            "kilnBroadcast", what) &&
        sync(what)) {
      std::vector<char> got = download(buf);
      if (!canary_ok(got, buf.bytes)) fail(what, "wrote past the end of the buffer");
      compare(what, t, got.data(), 0, count,
              [&](uint64_t k) { return value(t, KILN_REDUCE_SUM, n_, root, k, salt); });
    }
    release(buf);
    ++cases_;
  }

  void allgather(const TypeInfo& t, uint64_t count, bool in_place) {
    uint32_t salt = ++salt_;
    std::string what = std::string("AllGather ") + t.name + " count=" + std::to_string(count) +
                       (in_place ? " in-place" : " out-of-place");
    std::vector<char> mine = make_data(t, KILN_REDUCE_SUM, rank_, count, salt);
    uint64_t total = count * static_cast<uint64_t>(n_);
    Buffer recv = alloc(total * t.size);
    Buffer send;
    void* send_ptr;
    if (in_place) {
      // NCCL's in-place AllGather: this rank's block already sits at its place in recvBuf.
      std::vector<char> init(total * t.size, 0x7f);
      std::copy(mine.begin(), mine.end(),
                init.begin() + static_cast<ptrdiff_t>(rank_ * count * t.size));
      upload(recv, init);
      send_ptr = static_cast<char*>(recv.dev) + rank_ * count * t.size;
    } else {
      upload(recv, std::vector<char>(total * t.size, 0x7f));
      send = alloc(count * t.size);
      upload(send, mine);
      send_ptr = send.dev;
    }
    if (api(kilnAllGather(send_ptr, recv.dev, count, t.type, comm_, stream_), "kilnAllGather",
            what) &&
        sync(what)) {
      std::vector<char> got = download(recv);
      if (!canary_ok(got, recv.bytes)) fail(what, "wrote past the end of the receive buffer");
      compare(what, t, got.data(), 0, total, [&](uint64_t k) {
        return value(t, KILN_REDUCE_SUM, n_, static_cast<int>(k / count), k % count, salt);
      });
    }
    release(send);
    release(recv);
    ++cases_;
  }

  void alltoall(const TypeInfo& t, uint64_t count) {
    uint32_t salt = ++salt_;
    std::string what = std::string("AlltoAll ") + t.name + " count=" + std::to_string(count);
    uint64_t total = count * static_cast<uint64_t>(n_);
    Buffer send = alloc(total * t.size), recv = alloc(total * t.size);
    upload(send, make_data(t, KILN_REDUCE_SUM, rank_, total, salt));
    upload(recv, std::vector<char>(total * t.size, 0x7f));
    if (api(kilnAlltoAll(send.dev, count, t.type, recv.dev, count, t.type, comm_, stream_),
            "kilnAlltoAll", what) &&
        sync(what)) {
      std::vector<char> got = download(recv);
      if (!canary_ok(got, recv.bytes)) fail(what, "wrote past the end of the receive buffer");
      compare(what, t, got.data(), 0, total, [&](uint64_t k) {
        // Block j came from rank j's block for this rank.
        return value(t, KILN_REDUCE_SUM, n_, static_cast<int>(k / count),
                     static_cast<uint64_t>(rank_) * count + k % count, salt);
      });
    }
    release(send);
    release(recv);
    ++cases_;
  }

  // Elements rank `src` sends rank `dst` in the AlltoAllV case `base`.
  uint64_t v_count(int src, int dst, uint64_t base) const {
    return base == 0
               ? 0
               : (static_cast<uint64_t>(src) * 3 + static_cast<uint64_t>(dst) * 5) % 4 * base +
                     (src == dst ? 1 : 0);
  }

  void alltoallv(const TypeInfo& t, uint64_t base) {
    uint32_t salt = ++salt_;
    std::string what = std::string("AlltoAllV ") + t.name + " base=" + std::to_string(base);
    std::vector<uint64_t> scount(n_), sdispl(n_), rcount(n_), rdispl(n_);
    uint64_t stotal = 0, rtotal = 0;
    for (int j = 0; j < n_; ++j) {
      // Gaps of 2 elements between send blocks, and received blocks in reverse rank order,
      // so that displacements are really used.
      scount[j] = v_count(rank_, j, base);
      sdispl[j] = stotal;
      stotal += scount[j] + 2;
    }
    for (int j = n_ - 1; j >= 0; --j) {
      rcount[j] = v_count(j, rank_, base);
      rdispl[j] = rtotal;
      rtotal += rcount[j];
    }
    Buffer send = alloc(stotal * t.size), recv = alloc(rtotal * t.size);
    upload(send, make_data(t, KILN_REDUCE_SUM, rank_, stotal, salt));
    upload(recv, std::vector<char>(rtotal * t.size, 0x7f));
    if (api(kilnAlltoAllV(send.dev, scount.data(), sdispl.data(), t.type, recv.dev, rcount.data(),
                          rdispl.data(), t.type, comm_, stream_),
            "kilnAlltoAllV", what) &&
        sync(what)) {
      std::vector<char> got = download(recv);
      if (!canary_ok(got, recv.bytes)) fail(what, "wrote past the end of the receive buffer");
      for (int j = 0; j < n_; ++j) {
        // Rank j's displacement of its block for this rank.
        uint64_t jd = 0;
        for (int d = 0; d < rank_; ++d) jd += v_count(j, d, base) + 2;
        compare(what + " block from rank " + std::to_string(j), t, got.data(), rdispl[j], rcount[j],
                [&](uint64_t k) { return value(t, KILN_REDUCE_SUM, n_, j, jd + k, salt); });
      }
    }
    release(send);
    release(recv);
    ++cases_;
  }

  // A ring of Send/Recv inside a group: each rank sends to the next, receives from the previous.
  void send_recv(const TypeInfo& t, uint64_t count) {
    uint32_t salt = ++salt_;
    std::string what = std::string("Send/Recv ring ") + t.name + " count=" + std::to_string(count);
    Buffer send = alloc(count * t.size), recv = alloc(count * t.size);
    upload(send, make_data(t, KILN_REDUCE_SUM, rank_, count, salt));
    upload(recv, std::vector<char>(count * t.size, 0x7f));
    uint32_t next = static_cast<uint32_t>((rank_ + 1) % n_),
             prev = static_cast<uint32_t>((rank_ + n_ - 1) % n_);
    bool ok = api(kilnGroupStart(), "kilnGroupStart", what);
    ok = ok && api(kilnSend(send.dev, count, t.type, next, comm_, stream_), "kilnSend", what);
    ok = ok && api(kilnRecv(recv.dev, count, t.type, prev, comm_, stream_), "kilnRecv", what);
    ok = api(kilnGroupEnd(), "kilnGroupEnd", what) && ok;
    if (ok && sync(what)) {
      std::vector<char> got = download(recv);
      if (!canary_ok(got, recv.bytes)) fail(what, "wrote past the end of the receive buffer");
      compare(what, t, got.data(), 0, count, [&](uint64_t k) {
        return value(t, KILN_REDUCE_SUM, n_, static_cast<int>(prev), k, salt);
      });
    }
    release(send);
    release(recv);
    ++cases_;
  }

  void barrier() {
    if (api(kilnBarrier(comm_, stream_), "kilnBarrier", "Barrier")) sync("Barrier");
    ++cases_;
  }

  int failures() const { return failures_; }
  int cases() const { return cases_; }

 private:
  kilnComm comm_;
  int rank_, n_;
  kilnrtStream stream_;
  int failures_ = 0;
  int cases_ = 0;
  uint32_t salt_ = 0;
};

int run_matrix(kilnComm comm, int rank, int n, kilnrtStream stream, bool quick) {
  Worker w(comm, rank, n, stream);
  Clock::time_point start = Clock::now();
  // Counts: 0, 1, a prime below the rank count's multiples (not divisible by 2, 3, 4, 8),
  // one spanning several pipeline chunks (for some types, to keep the suite fast).
  std::vector<uint64_t> counts = {0, 1, 7, 1031};
  const uint64_t kLarge = 300007;
  int i = 0;
  for (const TypeInfo& t : kTypes) {
    bool big_type =
        t.type == KILN_COMM_FP32 || t.type == KILN_COMM_BF16 || t.type == KILN_COMM_INT64;
    for (const OpInfo& op : kOps) {
      for (uint64_t count : counts) {
        for (bool in_place : {false, true}) {
          if (quick && count == 7 && in_place) continue;
          int root = (i++) % n;
          w.reducing("AllReduce", t, op, count, in_place, root);
          w.reducing("Reduce", t, op, count, in_place, root);
          w.reducing("ReduceScatter", t, op, count, in_place, root);
        }
      }
      if (big_type && (!quick || op.op == KILN_REDUCE_SUM)) {
        w.reducing("AllReduce", t, op, kLarge, false, 0);
        if (!quick) {
          w.reducing("ReduceScatter", t, op, kLarge / 8, true, 0);
          w.reducing("Reduce", t, op, kLarge, false, n - 1);
        }
      }
    }
    for (uint64_t count : counts) {
      int root = (i++) % n;
      w.broadcast(t, count, root);
      w.allgather(t, count, false);
      w.allgather(t, count, true);
      w.alltoall(t, count);
      if (!quick || count <= 7) {
        w.alltoallv(t, count);
        w.send_recv(t, count);
      }
    }
    if (big_type) {
      w.broadcast(t, kLarge, n - 1);
      w.allgather(t, kLarge / 4, false);
      w.alltoall(t, kLarge / 8);
    }
  }
  w.barrier();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Every rank learns whether any rank failed (so one summary line decides).
  int64_t failed[1] = {w.failures()};
  kilnError e = kilnAllReduce(failed, failed, 1, KILN_COMM_INT64, KILN_REDUCE_SUM, comm, stream);
  if (e == KILN_SUCCESS) e = kilnrtSynchronizeStream(stream);
  if (e != KILN_SUCCESS) {
    std::fprintf(stderr, "rank %d: final AllReduce failed: %s\n", rank, kilnGetRecentErrMsg());
    return 1;
  }
  std::printf("rank %d of %d: %d cases, %d failed here, %lld failed on all ranks, %.2f s\n", rank,
              n, w.cases(), w.failures(), (long long)failed[0], seconds);
  std::fflush(stdout);
  return failed[0] == 0 ? 0 : 1;
}

// The hung victim's stream: a host task that never returns (the test kills the process).
void hang_forever(void*) {
  for (;;) pause();
}

// The fault test: a few good AllReduces, then a large one during which `victim` kills or
// stops itself; the others report how their operation ended.
int run_fault(kilnComm comm, int rank, int n, kilnrtStream stream, const std::string& mode,
              int victim, uint64_t kCount) {
  void *send = nullptr, *recv = nullptr;
  if (kilnrtMalloc(&send, kCount * 4, KILN_MEM_MALLOC_NORMAL_ONLY) != KILN_SUCCESS ||
      kilnrtMalloc(&recv, kCount * 4, KILN_MEM_MALLOC_NORMAL_ONLY) != KILN_SUCCESS) {
    std::fprintf(stderr, "rank %d: kilnrtMalloc failed: %s\n", rank, kilnGetRecentErrMsg());
    return 2;
  }
  kilnrtMemset(send, kCount * 4, 0, kCount * 4);
  for (int i = 0; i < 3; ++i) {
    if (kilnAllReduce(send, recv, std::min<uint64_t>(kCount, 1024), KILN_COMM_FP32,
                      KILN_REDUCE_SUM, comm, stream) !=
            KILN_SUCCESS ||
        kilnrtSynchronizeStream(stream) != KILN_SUCCESS) {
      std::fprintf(stderr, "rank %d: warm-up AllReduce failed: %s\n", rank, kilnGetRecentErrMsg());
      return 2;
    }
  }
  std::printf("STARTED rank=%d\n", rank);  // warmed up: netns_test.sh may cut the link now
  std::fflush(stdout);
  if (rank == victim && (mode == "kill" || mode == "stall")) {
    // From another thread, a little into the big AllReduce.
    std::thread([mode]() {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      std::printf("FAULT victim pid=%d %s\n", static_cast<int>(getpid()), mode.c_str());
      std::fflush(stdout);
      raise(mode == "kill" ? SIGKILL : SIGSTOP);
    }).detach();
  }
  Clock::time_point start = Clock::now();
  kilnError e = KILN_SUCCESS;
  // AllReduces back to back until one fails (the victim never gets past a few).
  for (int i = 0; i < 100000 && e == KILN_SUCCESS; ++i) {
    if (rank == victim && mode == "hang" && i == 2) {
      std::printf("FAULT victim pid=%d hang\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      e = kilnrtLaunchCallback(hang_forever, nullptr, KILN_CALLBACK_BLOCK, stream);
    }
    if (e == KILN_SUCCESS)
      e = kilnAllReduce(send, recv, kCount, KILN_COMM_FP32, KILN_REDUCE_SUM, comm, stream);
    if (e == KILN_SUCCESS) e = kilnrtSynchronizeStream(stream);
    if (std::chrono::duration<double>(Clock::now() - start).count() > 120) break;
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::string message = e == KILN_SUCCESS ? "" : kilnGetRecentErrMsg();
  for (char& c : message)
    if (c == '\n') c = ' ';
  kilnError async = KILN_SUCCESS;
  kilnCommGetAsyncError(comm, &async);
  const double epoch =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::printf("FAULT rank=%d code=%d async=%d seconds=%.3f epoch=%.3f message=%s\n", rank, e, async,
              seconds, epoch, message.c_str());
  std::fflush(stdout);
  // Stay a while, so that the victim stays the only rank that went away while the others
  // report, then leave without waiting for the broken world.
  const char* timeout = std::getenv("KILN_COMM_TIMEOUT");
  std::this_thread::sleep_for(
      std::chrono::milliseconds(static_cast<int>(1000 * (timeout ? std::atof(timeout) : 3))));
  std::_Exit(e == KILN_SUCCESS ? 3 : 0);
}

// The endurance run (above): every result checked, the slowest operation reported.
int run_endure(kilnComm comm, int rank, int n, kilnrtStream stream, double duration) {
  constexpr uint64_t kCount = 1 << 20;
  void *send = nullptr, *recv = nullptr, *vote = nullptr;
  if (kilnrtMalloc(&send, kCount * 4, KILN_MEM_MALLOC_NORMAL_ONLY) != KILN_SUCCESS ||
      kilnrtMalloc(&recv, kCount * 4, KILN_MEM_MALLOC_NORMAL_ONLY) != KILN_SUCCESS ||
      kilnrtMalloc(&vote, 8, KILN_MEM_MALLOC_NORMAL_ONLY) != KILN_SUCCESS) {
    std::fprintf(stderr, "rank %d: kilnrtMalloc failed: %s\n", rank, kilnGetRecentErrMsg());
    return 2;
  }
  std::vector<float> host(kCount);
  const Clock::time_point start = Clock::now();
  kilnError e = KILN_SUCCESS;
  int ops = 0, wrong = 0;
  double longest = 0;
  for (float stop = 0; e == KILN_SUCCESS && stop == 0; ++ops) {
    // Small integers: every partial sum is exact in fp32, whatever the reduction order.
    const float mine = static_cast<float>(rank + 1 + ops % 7);
    std::fill(host.begin(), host.end(), mine);
    const Clock::time_point op_start = Clock::now();
    e = kilnrtMemcpy(send, kCount * 4, host.data(), kCount * 4, KILN_MEMCPY_HOST_TO_DEVICE);
    if (e == KILN_SUCCESS) e = kilnAllReduce(send, recv, kCount, KILN_COMM_FP32, KILN_REDUCE_SUM, comm, stream);
    if (e == KILN_SUCCESS) e = kilnrtSynchronizeStream(stream);
    if (e == KILN_SUCCESS) e = kilnrtMemcpy(host.data(), kCount * 4, recv, kCount * 4, KILN_MEMCPY_DEVICE_TO_HOST);
    if (e != KILN_SUCCESS) break;
    const float expected = static_cast<float>(n * (n + 1) / 2 + n * (ops % 7));
    wrong += std::any_of(host.begin(), host.end(), [&](float v) { return v != expected; });
    // Every rank must run the same number of operations: whether to go on is agreed on (the
    // maximum of the ranks' "my time is up").
    float up[2] = {std::chrono::duration<double>(Clock::now() - start).count() >= duration ? 1.f : 0.f, 0};
    e = kilnrtMemcpy(vote, 8, up, 8, KILN_MEMCPY_HOST_TO_DEVICE);
    if (e == KILN_SUCCESS)
      e = kilnAllReduce(vote, static_cast<char*>(vote) + 4, 1, KILN_COMM_FP32, KILN_REDUCE_MAX, comm, stream);
    if (e == KILN_SUCCESS) e = kilnrtSynchronizeStream(stream);
    if (e == KILN_SUCCESS) e = kilnrtMemcpy(&stop, 4, static_cast<char*>(vote) + 4, 4, KILN_MEMCPY_DEVICE_TO_HOST);
    // The operation and the vote: a cut link may stall either.
    longest = std::max(longest, std::chrono::duration<double>(Clock::now() - op_start).count());
    if (ops == 0) {
      std::printf("STARTED rank=%d\n", rank);  // netns_test.sh may cut the link now
      std::fflush(stdout);
    }
  }
  std::string message = e == KILN_SUCCESS ? "" : kilnGetRecentErrMsg();
  for (char& c : message)
    if (c == '\n') c = ' ';
  std::printf("ENDURE rank=%d ops=%d wrong=%d code=%d longest=%.3f message=%s\n", rank, ops, wrong, e,
              longest, message.c_str());
  std::fflush(stdout);
  for (void* p : {send, recv, vote}) kilnrtFree(p);
  return e == KILN_SUCCESS && wrong == 0 ? 0 : 1;
}

int usage() {
  std::fprintf(stderr,
               "usage: comm_worker matrix [--quick] | comm_worker fault kill|stall|hang|partition VICTIM_RANK "
               "[COUNT] | comm_worker endure SECONDS\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string mode = argv[1];
  bool quick = argc >= 3 && std::string(argv[2]) == "--quick";
  std::string fault_kind;
  int victim = -1;
  uint64_t fault_count = 4 << 20;  // 16 MiB of fp32: long enough to be interrupted
  if (mode == "fault") {
    if (argc != 4 && argc != 5) return usage();
    fault_kind = argv[2];
    victim = std::atoi(argv[3]);
    if (argc == 5) fault_count = std::strtoull(argv[4], nullptr, 10);
    if (fault_count == 0) return usage();
    if (fault_kind != "kill" && fault_kind != "stall" && fault_kind != "hang" && fault_kind != "partition")
      return usage();
  } else if (mode == "endure") {
    if (argc != 3 || std::atof(argv[2]) <= 0) return usage();
  } else if (mode != "matrix") {
    return usage();
  }
  if (kilnInit(nullptr) != KILN_SUCCESS || kilnrtSetDevice(0) != KILN_SUCCESS) {
    std::fprintf(stderr, "comm_worker: runtime start failed: %s\n", kilnGetRecentErrMsg());
    return 2;
  }
  kilnComm comm = nullptr;
  if (kilnCommInitFromEnv(&comm) != KILN_SUCCESS) {
    std::fprintf(stderr, "comm_worker: kilnCommInitFromEnv failed: %s\n", kilnGetRecentErrMsg());
    return 2;
  }
  uint32_t rank = 0, size = 0;
  kilnCommGetRankId(comm, &rank);
  kilnCommGetRankSize(comm, &size);
  kilnrtStream stream = nullptr;
  if (kilnrtCreateStream(&stream) != KILN_SUCCESS) {
    std::fprintf(stderr, "comm_worker: kilnrtCreateStream failed: %s\n", kilnGetRecentErrMsg());
    return 2;
  }
  int rc;
  if (mode == "fault") {
    if (victim < 0 || victim >= static_cast<int>(size)) return usage();
    rc =
        run_fault(comm, static_cast<int>(rank), static_cast<int>(size), stream, fault_kind, victim,
                  fault_count);
  } else if (mode == "endure") {
    rc = run_endure(comm, static_cast<int>(rank), static_cast<int>(size), stream, std::atof(argv[2]));
  } else {
    rc = run_matrix(comm, static_cast<int>(rank), static_cast<int>(size), stream, quick);
  }
  kilnrtDestroyStream(stream);
  kilnCommDestroy(comm);
  kilnFinalize();
  return rc;
}
