// The progress engine: liveness checks of peers, and LinkTransport::exchange's loop of
// non-blocking sends and receives with spin-then-yield-then-sleep waiting (the links
// themselves are in ring_link.cc).
#include "comm/link.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace kiln::comm {
namespace {

// Bytes one op moves per visit of the exchange loop, so a step's sends and receives take
// turns (the peer's data is consumed while still in cache, and both directions flow).
constexpr size_t kVisitBudget = 256 << 10;
constexpr size_t kMaxElemSize = 16;
// Waiting: spinning on the CPU (LinkTransport::spin_*), then yielding until kYieldTime, then
// sleeping (8 ranks on 2 cores must not starve the ones with work).
constexpr auto kYieldTime = std::chrono::milliseconds(5);
constexpr auto kPeerCheckInterval = std::chrono::milliseconds(5);
constexpr char kAbortedText[] = "communicator aborted";

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h ^ 0xff;  // separates consecutive strings
}

std::string read_small_file(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return std::string();
  char buf[256];
  size_t n = std::fread(buf, 1, sizeof(buf), f);
  std::fclose(f);
  return std::string(buf, n);
}

std::string read_link(const char* path) {
  char buf[256];
  ssize_t n = readlink(path, buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

struct RecvState {
  size_t done = 0;       // bytes delivered to (or reduced into) the destination
  size_t forwarded = 0;  // bytes of the destination sent on to RecvOp::forward
  size_t stash_len = 0;  // bytes of an element split across pieces of the stream
  alignas(16) unsigned char stash[kMaxElemSize];
};

// Small inline arrays so a small exchange allocates nothing.
template <typename T, size_t N>
class SmallArray {
 public:
  explicit SmallArray(size_t n) : n_(n) {
    if (n > N) heap_.resize(n);
    data_ = n > N ? heap_.data() : inline_;
    for (size_t i = 0; i < n; ++i) data_[i] = T();
  }
  T& operator[](size_t i) { return data_[i]; }

 private:
  size_t n_;
  T inline_[N];
  std::vector<T> heap_;
  T* data_;
};

Status progress_send(Link* link, const SendOp& op, size_t* done, bool* progressed) {
  const char* src = static_cast<const char*>(op.data);
  const size_t stop = *done + std::min(op.bytes - *done, kVisitBudget);
  while (*done < stop) {
    size_t sent = 0;
    KILN_RETURN_IF_ERROR(link->try_send(src + *done, stop - *done, &sent));
    if (sent == 0) break;
    *done += sent;
    *progressed = true;
  }
  return ok_status();
}

// Combines `bytes` received bytes at `in` into the destination at offset `at`: with the
// op's operand when it has one (data = operand op received), else in place.
inline void reduce_piece(const RecvOp& op, size_t at, const void* in, size_t bytes) {
  char* dst = static_cast<char*>(op.data) + at;
  const char* x = static_cast<const char*>(op.operand);
  if (x == nullptr || x == op.data) {
    op.reduce->apply(dst, in, bytes);
  } else {
    op.reduce->apply_to(dst, x + at, in, bytes);
  }
}

// Sends what the receive has written and not yet forwarded on to `fwd` (RecvOp::forward).
Status progress_forward(Link* fwd, const RecvOp& op, RecvState* st, bool* progressed) {
  const char* src = static_cast<const char*>(op.data);
  while (st->forwarded < st->done) {
    size_t sent = 0;
    KILN_RETURN_IF_ERROR(fwd->try_send(src + st->forwarded, st->done - st->forwarded, &sent));
    if (sent == 0) break;
    st->forwarded += sent;
    *progressed = true;
  }
  return ok_status();
}

// Progresses one receive. `fwd`: the link to forward to, or null while the op does not
// forward or may not yet (earlier bytes to that peer are pending); a forwarding receive
// takes a piece at a time and passes each on at once. On error *failed_peer is the peer
// whose link failed.
Status progress_recv(Link* link, Link* fwd, const RecvOp& op, RecvState* st, bool* progressed,
                     int* failed_peer) {
  auto forward = [&]() -> Status {
    if (fwd == nullptr) return ok_status();
    Status s = progress_forward(fwd, op, st, progressed);
    if (!s.ok()) *failed_peer = op.forward;
    return s;
  };
  *failed_peer = op.peer;
  KILN_RETURN_IF_ERROR(forward());
  char* dst = static_cast<char*>(op.data);
  const size_t step = op.forward >= 0 ? kPiece : kVisitBudget;
  const size_t stop = st->done + std::min(op.bytes - st->done, kVisitBudget);
  if (op.reduce == nullptr) {
    while (st->done < stop) {
      size_t got = 0;
      KILN_RETURN_IF_ERROR(link->try_recv(dst + st->done, std::min(stop - st->done, step), &got));
      if (got == 0) break;
      st->done += got;
      *progressed = true;
      KILN_RETURN_IF_ERROR(forward());
    }
    return ok_status();
  }
  const size_t es = op.reduce->elem_size;
  while (st->done + st->stash_len < op.bytes && st->done < stop) {
    const char* p = nullptr;
    size_t len = 0;
    KILN_RETURN_IF_ERROR(link->peek(&p, &len));
    if (len == 0) break;
    *progressed = true;
    len = std::min(len, op.bytes - st->done - st->stash_len);
    if (st->stash_len > 0) {
      // Finish the element that straddled the previous piece's end.
      size_t take = std::min(es - st->stash_len, len);
      std::memcpy(st->stash + st->stash_len, p, take);
      link->consume(take);
      st->stash_len += take;
      if (st->stash_len == es) {
        reduce_piece(op, st->done, st->stash, es);
        st->done += es;
        st->stash_len = 0;
      }
      continue;
    }
    size_t whole = std::min(len, kPiece) / es * es;
    if (whole > 0) {
      reduce_piece(op, st->done, p, whole);  // straight out of the link's buffer
      link->consume(whole);
      st->done += whole;
      KILN_RETURN_IF_ERROR(forward());
      continue;
    }
    std::memcpy(st->stash, p, len);  // fewer than one element before the buffer wraps
    link->consume(len);
    st->stash_len = len;
  }
  return forward();  // the last piece (stash) too
}

// Only AMD's `rep movsb` has the cliff (link.h); elsewhere glibc's memcpy is the faster copy
// (on an Intel Xeon VM, 64 KiB pieces through a 4 MiB ring: 16.5 GB/s against the loop's 12.2
// at 16 MiB, 9.3 against 7.0 at 64 MiB).
#if defined(__x86_64__) || defined(__i386__)
const bool kCopyWithLoop = [] {
  __builtin_cpu_init();  // may run before libgcc's own constructor does it
  return __builtin_cpu_is("amd") != 0;
}();
#else
constexpr bool kCopyWithLoop = false;
#endif
}  // namespace

void copy_bytes(void* dst_v, const void* src_v, size_t n) {
#if defined(__AVX__) || defined(__SSE2__)
  if (n >= 512 && kCopyWithLoop) {
    char* dst = static_cast<char*>(dst_v);
    const char* src = static_cast<const char*>(src_v);
#if defined(__AVX__)
    using Vec = __m256i;
#define KILN_LOADU(p) _mm256_loadu_si256(reinterpret_cast<const Vec*>(p))
#define KILN_STORE(p, v) _mm256_store_si256(reinterpret_cast<Vec*>(p), v)
#else
    using Vec = __m128i;
#define KILN_LOADU(p) _mm_loadu_si128(reinterpret_cast<const Vec*>(p))
#define KILN_STORE(p, v) _mm_store_si128(reinterpret_cast<Vec*>(p), v)
#endif
    constexpr size_t kV = sizeof(Vec);
    // Align the stores; the loads stay unaligned.
    size_t head = (kV - (reinterpret_cast<uintptr_t>(dst) & (kV - 1))) & (kV - 1);
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    while (n >= 4 * kV) {
      Vec a = KILN_LOADU(src);
      Vec b = KILN_LOADU(src + kV);
      Vec c = KILN_LOADU(src + 2 * kV);
      Vec d = KILN_LOADU(src + 3 * kV);
      KILN_STORE(dst, a);
      KILN_STORE(dst + kV, b);
      KILN_STORE(dst + 2 * kV, c);
      KILN_STORE(dst + 3 * kV, d);
      src += 4 * kV;
      dst += 4 * kV;
      n -= 4 * kV;
    }
#undef KILN_LOADU
#undef KILN_STORE
    std::memcpy(dst, src, n);
    return;
  }
#endif
  std::memcpy(dst_v, src_v, n);
}

Status cancelled_error(const char* op) {
  return failed_precondition("%s: %s", op != nullptr && *op ? op : "exchange", kAbortedText);
}

bool is_cancelled(const Status& status) {
  if (status.code() != StatusCode::kFailedPrecondition) return false;
  const std::string& m = status.message();
  size_t n = sizeof(kAbortedText) - 1;
  return m.size() >= n && m.compare(m.size() - n, n, kAbortedText) == 0;
}

double comm_timeout_seconds() {
  const char* v = std::getenv("KILN_COMM_TIMEOUT");
  if (v != nullptr && *v) {
    char* end = nullptr;
    double t = std::strtod(v, &end);
    if (end != v && t > 0) return t;
  }
  return 30.0;
}

PeerInfo local_peer_info(int rank) {
  PeerInfo info;
  info.rank = rank;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "localhost");
  info.host = host;
  // Processes share shared memory and pids when they share the boot and the pid namespace;
  // the network namespace makes two `ip netns` namespaces of one machine two hosts.
  uint64_t h = 1469598103934665603ull;
  h = fnv1a(h, info.host);
  h = fnv1a(h, read_small_file("/proc/sys/kernel/random/boot_id"));
  h = fnv1a(h, read_link("/proc/self/ns/net"));
  h = fnv1a(h, read_link("/proc/self/ns/pid"));
  info.host_id = h == 0 ? 1 : h;
  info.pid = static_cast<int64_t>(getpid());
  return info;
}

std::string describe_peer(const PeerInfo& peer) {
  return str_format("rank %d (host %s, pid %lld)", peer.rank, peer.host.c_str(),
                    static_cast<long long>(peer.pid));
}

namespace {

// The state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...); 0 if unknown, 'X' if gone.
char process_state(int64_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  std::string stat = read_small_file(path);
  if (stat.empty()) return access("/proc/self/stat", R_OK) == 0 ? 'X' : 0;  // if /proc works
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return 0;
  return stat[paren + 2];
}

}  // namespace

bool process_exited(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  // kill() still succeeds on a zombie (exited, not yet reaped by its parent).
  char state = process_state(pid);
  return state == 'Z' || state == 'X';
}

bool process_stopped(int64_t pid) {
  if (pid <= 0 || pid == static_cast<int64_t>(getpid())) return false;
  char state = process_state(pid);
  return state == 'T' || state == 't';
}

// ---- LinkTransport ----------------------------------------------------------------------

LinkTransport::LinkTransport(int rank, std::vector<PeerInfo> peers,
                             std::vector<std::unique_ptr<Link>> links,
                             std::unique_ptr<StatusChannel> status)
    : rank_(rank), peers_(std::move(peers)), links_(std::move(links)), status_(std::move(status)) {
  // More ranks on this host than CPUs to run them: spinning only steals the time of the
  // rank being waited for, so yield after two looks (OpenMPI's yield_when_idle; 16 looks with
  // a pause after each were ~0.6 us of every wait).
  size_t local = 0;
  for (const PeerInfo& p : peers_) local += p.host_id == peers_[static_cast<size_t>(rank_)].host_id;
  cpu_set_t set;
  CPU_ZERO(&set);
  size_t cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? static_cast<size_t>(CPU_COUNT(&set))
                                                             : 1;
  if (local > cpus) {
    spin_polls_ = 2;
    spin_time_ = std::chrono::microseconds(0);
  }
}

LinkTransport::~LinkTransport() {
  if (status_) status_->stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& link : links_) {
    if (link) link->close(error_culprit_);
  }
}

void LinkTransport::abort() {
  aborted_.store(true, std::memory_order_release);
  // Nobody needs this rank's count once its links are closed (peers see the close).
  if (status_) status_->stop();
  std::lock_guard<std::mutex> lock(mu_);
  // Peers waiting on this rank learn at once that it is gone instead of timing out.
  for (auto& link : links_) {
    if (link) link->close();
  }
}

Status LinkTransport::fail(Status status, int culprit) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& link : links_) {
    if (link) link->cancel_sends();  // no peer may read our buffers once we return
  }
  if (error_.ok()) {
    error_ = status;
    error_culprit_ = culprit;
    broken_.store(true, std::memory_order_release);
    // Tell every peer now, and whom to blame: a rank waiting on this one then names the
    // rank at fault rather than this one, and fails at once rather than at its deadline.
    for (auto& link : links_) {
      if (link) link->close(culprit);
    }
    // TCP peers get the culprit as an urgent byte; give it a moment to arrive before the
    // connection's end does (a peer that sees the end first cannot read the byte anymore).
    bool tcp = false;
    for (auto& link : links_) tcp = tcp || (link && link->poll_fd() >= 0);
    if (tcp && culprit >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& link : links_) {
      if (link) link->finish_close();
    }
  }
  return status;
}

int LinkTransport::find_dead_or_stopped_peer(std::string* what) const {
  const uint64_t host = peers_[static_cast<size_t>(rank_)].host_id;
  for (size_t p = 0; p < peers_.size(); ++p) {
    const PeerInfo& peer = peers_[p];
    if (static_cast<int>(p) == rank_ || peer.host_id != host) continue;
    // A peer that failed first, said why (the rank it blamed) and exited is not at fault.
    if (links_[p] && links_[p]->reported_culprit() >= 0) continue;
    if (process_exited(peer.pid)) {
      *what = "exited";
      return static_cast<int>(p);
    }
    if (process_stopped(peer.pid)) {
      *what = "is stopped (SIGSTOP or a debugger)";
      return static_cast<int>(p);
    }
  }
  return -1;
}

void LinkTransport::enter_collective() {
  ++collectives_started_;
  for (auto& link : links_)
    if (link) link->publish_collectives(collectives_started_);
  if (status_) status_->publish_collectives(collectives_started_);
}

int LinkTransport::find_peer_behind(int64_t* started) {
  std::vector<int64_t> counts(links_.size(), -1);
  std::vector<int> ask;  // peers whose links cannot see their count (TCP)
  for (size_t p = 0; p < links_.size(); ++p) {
    if (static_cast<int>(p) == rank_ || !links_[p]) continue;
    counts[p] = links_[p]->peer_collectives();
    if (counts[p] < 0) ask.push_back(static_cast<int>(p));
  }
  if (status_ && !ask.empty()) {
    std::vector<int64_t> answers(ask.size(), -1);
    status_->query_collectives(ask, answers);
    for (size_t i = 0; i < ask.size(); ++i) counts[static_cast<size_t>(ask[i])] = answers[i];
  }
  int behind = -1;
  for (size_t p = 0; p < links_.size(); ++p) {
    const int64_t n = counts[p];
    if (n < 0 || n >= static_cast<int64_t>(collectives_started_)) continue;
    if (behind < 0 || n < *started) {
      behind = static_cast<int>(p);
      *started = n;
    }
  }
  return behind;
}

int LinkTransport::reported_culprit_of_any_peer() const {
  for (size_t p = 0; p < links_.size(); ++p) {
    if (!links_[p]) continue;
    const int r = links_[p]->reported_culprit();
    if (r >= 0 && r < size() && r != rank_) return r;
  }
  return -1;
}

Status LinkTransport::peer_error(const char* op, int peer, const Status& status) {
  std::string message = status.message();
  int culprit = peer;
  if (status.code() == StatusCode::kUnavailable && message.find(" exited") == std::string::npos) {
    // A peer that closed its side often did so because a third rank failed and it gave up
    // first: name the rank at fault, from the peer's report or from this host's processes.
    int reported = links_[static_cast<size_t>(peer)]->reported_culprit();
    std::string what;
    int dead = find_dead_or_stopped_peer(&what);
    if (dead >= 0 && dead != peer) {
      culprit = dead;
      message = str_format("%s %s (and %s)", describe_peer(peers_[static_cast<size_t>(dead)]).c_str(),
                           what.c_str(), message.c_str());
    } else if (dead == peer) {
      message = str_format("%s %s", describe_peer(peers_[static_cast<size_t>(peer)]).c_str(),
                           what.c_str());
    } else if (reported >= 0 && reported != peer && reported < size() && reported != rank_) {
      culprit = reported;
      message = str_format("%s failed or stopped answering (%s gave up on it and closed its "
                           "connection)",
                           describe_peer(peers_[static_cast<size_t>(reported)]).c_str(),
                           describe_peer(peers_[static_cast<size_t>(peer)]).c_str());
    }
  }
  return fail(Status(status.code(), str_format("%s: %s", op, message.c_str())), culprit);
}

Status LinkTransport::check_ops(std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                                const Deadline& deadline) const {
  const char* op = deadline.op != nullptr && *deadline.op ? deadline.op : "exchange";
  int n = size();
  for (const SendOp& s : sends) {
    if (s.peer < 0 || s.peer >= n || links_[static_cast<size_t>(s.peer)] == nullptr) {
      return invalid_argument("%s: send to rank %d of a world of %d ranks", op, s.peer, n);
    }
    if (s.data == nullptr && s.bytes > 0) {
      return invalid_argument("%s: send of %zu bytes to rank %d from a null buffer", op, s.bytes,
                              s.peer);
    }
    if (s.small && s.bytes > kSmallMessageBytes) {
      return invalid_argument("%s: small send of %zu bytes to rank %d (at most %zu)", op,
                              s.bytes, s.peer, kSmallMessageBytes);
    }
  }
  for (const RecvOp& r : recvs) {
    if (r.peer < 0 || r.peer >= n || links_[static_cast<size_t>(r.peer)] == nullptr) {
      return invalid_argument("%s: receive from rank %d of a world of %d ranks", op, r.peer, n);
    }
    if (r.data == nullptr && r.bytes > 0) {
      return invalid_argument("%s: receive of %zu bytes from rank %d into a null buffer", op,
                              r.bytes, r.peer);
    }
    if (r.reduce != nullptr &&
        (r.reduce->apply == nullptr || r.reduce->elem_size == 0 ||
         r.reduce->elem_size > kMaxElemSize || r.bytes % r.reduce->elem_size != 0)) {
      return invalid_argument("%s: receive of %zu bytes from rank %d with a reducer of %zu-byte "
                              "elements",
                              op, r.bytes, r.peer, r.reduce->elem_size);
    }
    if (r.operand != nullptr && r.operand != r.data &&
        (r.reduce == nullptr || r.reduce->apply_to == nullptr)) {
      return invalid_argument("%s: receive from rank %d with an operand but no reducer that "
                              "writes to a third buffer",
                              op, r.peer);
    }
    if (r.small && (r.bytes > kSmallMessageBytes || r.reduce != nullptr || r.forward >= 0)) {
      return invalid_argument("%s: small receive of %zu bytes from rank %d (at most %zu, no "
                              "reducer, not forwarded)",
                              op, r.bytes, r.peer, kSmallMessageBytes);
    }
    if (r.forward >= n || (r.forward >= 0 && links_[static_cast<size_t>(r.forward)] == nullptr)) {
      return invalid_argument("%s: receive forwarded to rank %d of a world of %d ranks", op,
                              r.forward, n);
    }
  }
  return ok_status();
}

namespace {

// Whether receive i may forward now: in its forward peer's stream its bytes follow every
// send of the exchange to that peer and the bytes earlier receives forward to it.
template <typename Sent, typename Received>
bool forward_ready(std::span<const SendOp> sends, Sent& sent, std::span<const RecvOp> recvs,
                   Received& recvd, size_t i) {
  const int to = recvs[i].forward;
  for (size_t k = 0; k < sends.size(); ++k) {
    if (sends[k].peer == to && sent[k] < sends[k].bytes) return false;
  }
  for (size_t j = 0; j < i; ++j) {
    if (recvs[j].forward == to && recvd[j].forwarded < recvs[j].bytes) return false;
  }
  return true;
}

}  // namespace

Status LinkTransport::exchange(std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                               const Deadline& deadline) {
  const char* op = deadline.op != nullptr && *deadline.op ? deadline.op : "exchange";
  if (broken_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  if (aborted_.load(std::memory_order_acquire)) return fail(cancelled_error(op));
  KILN_RETURN_IF_ERROR(check_ops(sends, recvs, deadline));

  SmallArray<size_t, 16> sent(sends.size());
  SmallArray<RecvState, 16> recvd(recvs.size());
  int idle = 0;
  Clock::time_point idle_since{};
  Clock::time_point next_peer_check{};
  for (;;) {
    bool progressed = false;
    bool all_done = true;
    for (size_t i = 0; i < sends.size(); ++i) {
      if (sent[i] == sends[i].bytes) continue;
      all_done = false;
      bool earlier_pending = false;  // ops to one peer run in the order given
      for (size_t j = 0; j < i && !earlier_pending; ++j) {
        earlier_pending = sends[j].peer == sends[i].peer && sent[j] < sends[j].bytes;
      }
      if (earlier_pending) continue;
      Link* link = links_[static_cast<size_t>(sends[i].peer)].get();
      Status s;
      if (sends[i].small && link->has_mailbox()) {
        bool posted = false;
        s = link->try_send_small(static_cast<const char*>(sends[i].data), sends[i].bytes, &posted);
        if (posted) {
          sent[i] = sends[i].bytes;
          progressed = true;
        }
      } else {
        s = progress_send(link, sends[i], &sent[i], &progressed);
      }
      if (!s.ok()) return peer_error(op, sends[i].peer, s);
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      const RecvOp& r = recvs[i];
      if (recvd[i].done == r.bytes && (r.forward < 0 || recvd[i].forwarded == r.bytes)) continue;
      all_done = false;
      bool earlier_pending = false;
      for (size_t j = 0; j < i && !earlier_pending; ++j) {
        earlier_pending = recvs[j].peer == r.peer && recvd[j].done < recvs[j].bytes;
      }
      if (earlier_pending) continue;  // nothing received, so nothing to forward either
      Link* from = links_[static_cast<size_t>(r.peer)].get();
      if (r.small && from->has_mailbox()) {
        bool got = false;
        Status s = from->try_recv_small(static_cast<char*>(r.data), r.bytes, &got);
        if (!s.ok()) return peer_error(op, r.peer, s);
        if (got) {
          recvd[i].done = r.bytes;
          progressed = true;
        }
        continue;
      }
      Link* fwd = nullptr;
      if (r.forward >= 0 && forward_ready(sends, sent, recvs, recvd, i)) {
        fwd = links_[static_cast<size_t>(r.forward)].get();
      }
      int failed_peer = r.peer;
      Status s = progress_recv(links_[static_cast<size_t>(r.peer)].get(), fwd, r, &recvd[i],
                               &progressed, &failed_peer);
      if (!s.ok()) return peer_error(op, failed_peer, s);
    }
    if (all_done) return ok_status();
    if (aborted_.load(std::memory_order_relaxed)) return fail(cancelled_error(op));
    if (progressed) {
      idle = 0;
      continue;
    }
    if (++idle < spin_polls_) {
      cpu_relax();
      continue;
    }
    Clock::time_point now = Clock::now();
    if (idle == spin_polls_) {
      idle_since = now;
      next_peer_check = now + kPeerCheckInterval;
    }
    if (now >= deadline.at) {
      // Name the peer we wait for: a missing receive first (it did not send), else a send
      // it did not take.
      const PeerInfo* culprit = nullptr;
      std::string detail;
      for (size_t i = 0; i < recvs.size() && culprit == nullptr; ++i) {
        if (recvd[i].done < recvs[i].bytes) {
          culprit = &peers_[static_cast<size_t>(recvs[i].peer)];
          detail = str_format("received %zu of %zu bytes from it", recvd[i].done, recvs[i].bytes);
        }
      }
      for (size_t i = 0; i < sends.size() && culprit == nullptr; ++i) {
        if (sent[i] < sends[i].bytes) {
          culprit = &peers_[static_cast<size_t>(sends[i].peer)];
          detail = str_format("it took %zu of %zu bytes sent to it", sent[i], sends[i].bytes);
        }
      }
      for (size_t i = 0; i < recvs.size() && culprit == nullptr; ++i) {
        if (recvs[i].forward >= 0 && recvd[i].forwarded < recvs[i].bytes) {
          culprit = &peers_[static_cast<size_t>(recvs[i].forward)];
          detail = str_format("it took %zu of %zu bytes forwarded to it", recvd[i].forwarded,
                              recvs[i].bytes);
        }
      }
      // The rank waited on may itself be waiting on the one at fault: a stopped or dead
      // process of this host is the better name.
      std::string what;
      int stuck = find_dead_or_stopped_peer(&what);
      std::string waited = culprit ? describe_peer(*culprit) : std::string("a peer");
      if (stuck >= 0) {
        const PeerInfo& p = peers_[static_cast<size_t>(stuck)];
        return fail(deadline_exceeded("%s: %s did not answer within %g s (KILN_COMM_TIMEOUT): "
                                      "it %s; waiting on %s, %s",
                                      op, describe_peer(p).c_str(), comm_timeout_seconds(),
                                      what.c_str(), waited.c_str(), detail.c_str()),
                    stuck);
      }
      // A rank that has not started this collective is busy or blocked elsewhere: the ranks
      // between it and this one are only waiting.
      int64_t behind_started = 0;
      const int behind = find_peer_behind(&behind_started);
      if (behind >= 0) {
        const PeerInfo& p = peers_[static_cast<size_t>(behind)];
        return fail(deadline_exceeded("%s: %s did not answer within %g s (KILN_COMM_TIMEOUT): it has "
                                      "not started this operation (it started %lld collectives "
                                      "of this communicator, this rank %llu); waiting on %s, %s",
                                      op, describe_peer(p).c_str(), comm_timeout_seconds(),
                                      static_cast<long long>(behind_started),
                                      static_cast<unsigned long long>(collectives_started_),
                                      waited.c_str(), detail.c_str()),
                    behind);
      }
      // A peer that gave up first may have said whom it gave up on.
      const int reported = reported_culprit_of_any_peer();
      if (reported >= 0 && (!culprit || reported != culprit->rank)) {
        const PeerInfo& p = peers_[static_cast<size_t>(reported)];
        return fail(deadline_exceeded("%s: %s did not answer within %g s (KILN_COMM_TIMEOUT), as "
                                      "another rank found; waiting on %s, %s",
                                      op, describe_peer(p).c_str(), comm_timeout_seconds(),
                                      waited.c_str(), detail.c_str()),
                    reported);
      }
      return fail(deadline_exceeded("%s: %s did not answer within %g s (KILN_COMM_TIMEOUT); %s",
                                    op, waited.c_str(), comm_timeout_seconds(), detail.c_str()),
                  culprit ? culprit->rank : -1);
    }
    if (now >= next_peer_check) {
      next_peer_check = now + kPeerCheckInterval;
      for (size_t i = 0; i < recvs.size(); ++i) {
        if (recvd[i].done == recvs[i].bytes) continue;
        Status s = links_[static_cast<size_t>(recvs[i].peer)]->check_peer();
        if (!s.ok()) return peer_error(op, recvs[i].peer, s);
      }
      for (size_t i = 0; i < sends.size(); ++i) {
        if (sent[i] == sends[i].bytes) continue;
        Status s = links_[static_cast<size_t>(sends[i].peer)]->check_peer();
        if (!s.ok()) return peer_error(op, sends[i].peer, s);
      }
      for (size_t i = 0; i < recvs.size(); ++i) {
        if (recvs[i].forward < 0 || recvd[i].forwarded == recvs[i].bytes) continue;
        Status s = links_[static_cast<size_t>(recvs[i].forward)]->check_peer();
        if (!s.ok()) return peer_error(op, recvs[i].forward, s);
      }
    }
    auto waited = now - idle_since;
    if (waited < spin_time_) {
      cpu_relax();
    } else if (waited < kYieldTime) {
      sched_yield();
    } else {
      // Long wait: sleep on the sockets if every pending link has one, else briefly.
      pollfd fds[16];
      size_t nfds = 0;
      bool all_fds = true;
      for (size_t i = 0; i < recvs.size() && all_fds; ++i) {
        if (recvd[i].done == recvs[i].bytes) continue;
        int fd = links_[static_cast<size_t>(recvs[i].peer)]->poll_fd();
        if (fd < 0 || nfds == 16) all_fds = false;
        else fds[nfds++] = pollfd{fd, POLLIN, 0};
      }
      for (size_t i = 0; i < sends.size() && all_fds; ++i) {
        if (sent[i] == sends[i].bytes) continue;
        int fd = links_[static_cast<size_t>(sends[i].peer)]->poll_fd();
        if (fd < 0 || nfds == 16) all_fds = false;
        else fds[nfds++] = pollfd{fd, POLLOUT, 0};
      }
      for (size_t i = 0; i < recvs.size() && all_fds; ++i) {
        if (recvs[i].forward < 0 || recvd[i].forwarded == recvd[i].done) continue;
        int fd = links_[static_cast<size_t>(recvs[i].forward)]->poll_fd();
        if (fd < 0 || nfds == 16) all_fds = false;
        else fds[nfds++] = pollfd{fd, POLLOUT, 0};
      }
      if (all_fds && nfds > 0) {
        poll(fds, nfds, 2);
      } else {
        timespec ts{0, 100 * 1000};
        nanosleep(&ts, nullptr);
      }
    }
  }
}

}  // namespace kiln::comm
