// The status side channel of a rank with TCP links (StatusChannel): a thread answers every
// connection to the rank's TCP link listener with how many collectives the rank has started,
// and a timed-out operation asks its TCP peers the same, all at once, briefly. Both sides
// prove they know the world's key (bootstrap.h, "The status channel's exchange"): the
// listener is open to anyone who reaches its port.
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "comm/bootstrap.h"
#include "core/logging.h"

namespace kiln::comm {
namespace {

constexpr uint32_t kStatusMagic = 0x4b4c4e53;  // "KLNS"
constexpr uint8_t kStatusChallenge = 1, kStatusQuery = 2, kStatusAnswer = 3;
// How long a timed-out operation waits for its peers' answers: a live peer answers from its
// serving thread within two round trips; one that does not is dead, stopped or unreachable,
// and the error must not come much later than KILN_COMM_TIMEOUT.
constexpr auto kQueryBudget = std::chrono::milliseconds(250);
// How long the serving thread keeps a connection that has not asked yet: an asker gives up
// after kQueryBudget, so a connection older than this is a stranger's (or a dead asker's).
constexpr auto kServeBudget = std::chrono::milliseconds(500);
// Connections served at once. A stranger holding connections open costs a slot each; past
// this many the oldest is dropped, so a new (real) query is always heard.
constexpr size_t kMaxPending = 32;

// A frame of exactly `total` bytes (length prefix included) starting with the magic and
// `kind`: the reader is left after them.
bool open_frame(WireReader& rd, size_t n, size_t total, uint8_t kind) {
  uint32_t len = 0, magic = 0;
  uint8_t got_kind = 0;
  return n == total && rd.u32(&len) && len == total - 4 && rd.u32(&magic) &&
         magic == kStatusMagic && rd.u8(&got_kind) && got_kind == kind;
}

WireWriter frame_header(size_t total, uint8_t kind) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(total - 4));
  w.u32(kStatusMagic);
  w.u8(kind);
  return w;
}

// The part of a whole frame its MAC signs (everything after the length, before the MAC).
std::string_view signed_part(const char* p, size_t n) {
  return std::string_view(p + 4, n - 4 - kAuthMacBytes);
}

// A peer's listener, resolved at join time so a query does no name lookup.
struct PeerAddr {
  sockaddr_storage addr{};
  socklen_t len = 0;  // 0: unknown (the query skips the peer)
};

PeerAddr resolve(const std::string& host_port) {
  PeerAddr out;
  Expected<std::pair<std::string, int>> hp = split_host_port(host_port);
  if (!hp.ok()) return out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(hp->second);
  if (getaddrinfo(hp->first.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) return out;
  std::memcpy(&out.addr, res->ai_addr, res->ai_addrlen);
  out.len = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

// Sends a few bytes on a connection whose send buffer is empty: never waits. False when the
// peer is gone.
bool send_small(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(bytes.size());
}

// Reads what has arrived into buf[*got, want): 1 when the frame is whole, 0 when more is to
// come, -1 when the peer closed or failed before it was.
int recv_some(int fd, char* buf, size_t want, size_t* got) {
  ssize_t r = ::recv(fd, buf + *got, want - *got, MSG_DONTWAIT);
  if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  if (r == 0) return -1;
  *got += static_cast<size_t>(r);
  return *got == want ? 1 : 0;
}

class TcpStatusChannel : public StatusChannel {
 public:
  TcpStatusChannel(int rank, int listen_fd, int wake_fd, const WorldTable& table,
                   std::vector<PeerAddr> peers)
      : rank_(rank), listen_fd_(listen_fd), wake_fd_(wake_fd), key_(table.key),
        nonce_(table.nonce), peers_(std::move(peers)) {}
  ~TcpStatusChannel() override {
    stop();
    ::close(wake_fd_);
  }

  Status start() {
    try {
      thread_ = std::thread([this] { serve(); });
    } catch (const std::system_error& e) {
      return resource_exhausted("cannot start the status thread: %s", e.what());
    }
    return ok_status();
  }

  void publish_collectives(uint64_t started) override {
    started_.store(started, std::memory_order_relaxed);
  }

  void query_collectives(std::span<const int> ranks, std::span<int64_t> counts) override;

  void stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (thread_.joinable()) {
      uint64_t one = 1;
      ssize_t w = ::write(wake_fd_, &one, sizeof(one));
      (void)w;  // an eventfd write of 1 fails only on overflow, which cannot happen here
      thread_.join();
    }
    if (listen_fd_ >= 0) ::close(listen_fd_);  // later queries are refused at once
    listen_fd_ = -1;
  }

 private:
  // A connection being served: challenged, its query not (all) read yet.
  struct Pending {
    int fd = -1;
    Clock::time_point deadline;
    std::string challenge;
    char buf[kStatusQueryBytes];
    size_t got = 0;
  };

  void serve();
  void accept_one(std::vector<Pending>& pending);
  // Reads what `c` sent; answers and closes it when its query is whole, closes it when it
  // failed. False when the connection is done with.
  bool serve_one(Pending& c);
  void refuse(int fd, const char* why);

  const int rank_;
  int listen_fd_;  // guarded by stop_mu_ once the thread is joined
  int wake_fd_;    // an eventfd: stop() wakes the serving thread's poll
  const std::string key_;
  const uint64_t nonce_;
  std::vector<PeerAddr> peers_;  // by rank
  std::atomic<uint64_t> started_{0};
  std::mutex stop_mu_;
  std::thread thread_;
};

// The serving thread. The listener took this rank's TCP links during the join; from then on
// every connection to it is a query: challenged at once, answered when its query is whole and
// signed, closed either way. Connections are served side by side, so one that stalls (or a
// stranger's that never asks) does not hold up a peer's query.
void TcpStatusChannel::serve() {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign({{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    Clock::time_point next = Clock::time_point::max();
    for (const Pending& c : pending) {
      fds.push_back(pollfd{c.fd, POLLIN, 0});
      next = std::min(next, c.deadline);
    }
    int timeout_ms = -1;
    if (!pending.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()) + 1);
    }
    int r = ::poll(fds.data(), fds.size(), timeout_ms);
    if (r < 0 && errno != EINTR) break;  // a poll that fails otherwise would fail forever
    if (r > 0 && fds[0].revents != 0) break;
    if (r > 0 && (fds[1].revents & (POLLERR | POLLNVAL))) break;
    const Clock::time_point now = Clock::now();
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& c = pending[i];
      const short ev = r > 0 ? fds[i + 2].revents : 0;
      if (ev != 0 && !serve_one(c)) continue;
      if (now >= c.deadline) {
        // A stranger holding the port (silent, or sending a byte at a time), or an asker that
        // died: not worth a warning each.
        KILN_LOG(kDebug, "comm: rank %d's status channel closed a connection that did not ask "
                 "in time", rank_);
        ::close(c.fd);
        continue;
      }
      still.push_back(std::move(c));
    }
    pending = std::move(still);
    if (r > 0 && (fds[1].revents & POLLIN)) accept_one(pending);
  }
  for (Pending& c : pending) ::close(c.fd);
}

void TcpStatusChannel::accept_one(std::vector<Pending>& pending) {
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (pending.size() >= kMaxPending) {
    refuse(pending.front().fd, "too many connections at once: the oldest is dropped");
    pending.erase(pending.begin());
  }
  Pending c;
  c.fd = fd;
  c.deadline = Clock::now() + kServeBudget;
  c.challenge = auth_nonce();
  if (!send_small(fd, encode_status_challenge(c.challenge))) {
    ::close(fd);
    return;
  }
  pending.push_back(std::move(c));
}

bool TcpStatusChannel::serve_one(Pending& c) {
  int got = recv_some(c.fd, c.buf, sizeof(c.buf), &c.got);
  if (got == 0 && c.got >= 8) {
    // The length and magic are in: bytes of anything else are refused now, not at the
    // deadline.
    uint32_t len = 0, magic = 0;
    WireReader rd(c.buf, c.got);
    if (!rd.u32(&len) || !rd.u32(&magic) || len != kStatusQueryBytes - 4 || magic != kStatusMagic) {
      refuse(c.fd, "not a status query");
      return false;
    }
  }
  if (got == 0) return true;
  if (got < 0) {
    refuse(c.fd, c.got == 0 ? "closed without asking" : "closed in the middle of its query");
    return false;
  }
  Expected<StatusQuery> q = decode_status_query(c.buf, c.got, key_, nonce_, c.challenge);
  if (!q.ok()) {
    refuse(c.fd, q.status().message().c_str());
    return false;
  }
  // A few bytes into an empty send buffer: this never waits. The asker sent all it will, so
  // the close is a clean end of stream, never a reset that could discard the answer.
  send_small(c.fd, encode_status_answer(key_, nonce_, q->challenge,
                                        started_.load(std::memory_order_relaxed)));
  ::close(c.fd);
  return false;
}

void TcpStatusChannel::refuse(int fd, const char* why) {
  KILN_LOG(kWarning, "comm: rank %d's status channel refused the connection from %s: %s", rank_,
           socket_peer_addr(fd).c_str(), why);
  ::close(fd);
}

void TcpStatusChannel::query_collectives(std::span<const int> ranks, std::span<int64_t> counts) {
  // One exchange per peer: read its challenge, send the query, read the answer.
  struct Ask {
    int fd = -1;
    size_t index = 0;  // into ranks / counts
    std::string challenge = auth_nonce();
    bool asked = false;  // the query is sent: reading the answer
    char buf[std::max(kStatusChallengeBytes, kStatusAnswerBytes)];
    size_t got = 0;
  };
  std::fill(counts.begin(), counts.end(), -1);
  const Clock::time_point deadline = Clock::now() + kQueryBudget;
  // 1. Connect to every peer without waiting.
  std::vector<Ask> asks;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const size_t rank = static_cast<size_t>(ranks[i]);
    if (rank >= peers_.size() || peers_[rank].len == 0) continue;
    const PeerAddr& peer = peers_[rank];
    int fd = ::socket(peer.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&peer.addr), peer.len) != 0 &&
        errno != EINPROGRESS) {
      ::close(fd);  // refused at once: nobody serves there any more
      continue;
    }
    Ask a;
    a.fd = fd;
    a.index = i;
    asks.push_back(std::move(a));
  }
  // 2. Go through each exchange as the bytes come, until all are done or the budget is spent.
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    for (const Ask& a : asks) {
      if (a.fd >= 0) fds.push_back(pollfd{a.fd, POLLIN, 0});
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left) + 1) < 0 && errno != EINTR) break;
    for (Ask& a : asks) {
      if (a.fd < 0) continue;
      const size_t want = a.asked ? kStatusAnswerBytes : kStatusChallengeBytes;
      int got = recv_some(a.fd, a.buf, want, &a.got);
      if (got == 0) continue;
      bool go_on = false;
      if (got > 0 && !a.asked) {
        Expected<std::string> theirs = decode_status_challenge(a.buf, a.got);
        StatusQuery q{static_cast<uint32_t>(rank_), a.challenge};
        go_on = theirs.ok() && send_small(a.fd, encode_status_query(key_, nonce_, *theirs, q));
        a.asked = true;
        a.got = 0;
      } else if (got > 0) {
        // Taken only when it is whole, of this world and made for this question.
        Expected<uint64_t> started = decode_status_answer(a.buf, a.got, key_, nonce_, a.challenge);
        if (started.ok()) {
          counts[a.index] = static_cast<int64_t>(std::min<uint64_t>(*started, INT64_MAX));
        } else {
          KILN_LOG(kWarning, "comm: rank %d refused a status answer from rank %d: %s", rank_,
                   ranks[a.index], started.status().message().c_str());
        }
      }
      if (!go_on) {
        ::close(a.fd);
        a.fd = -1;
      }
    }
  }
  for (Ask& a : asks) {
    if (a.fd >= 0) ::close(a.fd);
  }
}

}  // namespace

std::string encode_status_challenge(const std::string& challenge) {
  WireWriter w = frame_header(kStatusChallengeBytes, kStatusChallenge);
  w.bytes(challenge.data(), challenge.size());
  return w.data();
}

Expected<std::string> decode_status_challenge(const char* p, size_t n) {
  WireReader rd(p, n);
  std::string challenge(kAuthNonceBytes, '\0');
  if (!open_frame(rd, n, kStatusChallengeBytes, kStatusChallenge) ||
      !rd.bytes(challenge.data(), challenge.size())) {
    return invalid_argument("malformed status challenge (%zu bytes)", n);
  }
  return challenge;
}

std::string encode_status_query(const std::string& key, uint64_t nonce,
                                const std::string& answerer_challenge, const StatusQuery& q) {
  WireWriter w = frame_header(kStatusQueryBytes, kStatusQuery);
  w.u64(nonce);
  w.u32(q.rank);
  w.bytes(q.challenge.data(), q.challenge.size());
  const std::string& body = w.data();
  std::string mac = auth_mac(key, "kiln status query", answerer_challenge,
                             std::string_view(body).substr(4));
  w.bytes(mac.data(), mac.size());
  return w.data();
}

Expected<StatusQuery> decode_status_query(const char* p, size_t n, const std::string& key,
                                          uint64_t nonce, const std::string& answerer_challenge) {
  WireReader rd(p, n);
  uint64_t from = 0;
  StatusQuery q;
  q.challenge.resize(kAuthNonceBytes);
  std::string mac(kAuthMacBytes, '\0');
  if (!open_frame(rd, n, kStatusQueryBytes, kStatusQuery) || !rd.u64(&from) ||
      !rd.u32(&q.rank) || !rd.bytes(q.challenge.data(), q.challenge.size()) ||
      !rd.bytes(mac.data(), mac.size())) {
    return invalid_argument("not a status query (%zu bytes)", n);
  }
  if (from != nonce) return invalid_argument("a status query of another world");
  if (!auth_mac_matches(mac, auth_mac(key, "kiln status query", answerer_challenge,
                                      signed_part(p, n)))) {
    return invalid_argument("authentication failed: the status query (rank %u) is not signed "
                             "with this job's key for this connection's challenge", q.rank);
  }
  return q;
}

std::string encode_status_answer(const std::string& key, uint64_t nonce,
                                 const std::string& asker_challenge, uint64_t started) {
  WireWriter w = frame_header(kStatusAnswerBytes, kStatusAnswer);
  w.u64(nonce);
  w.u64(started);
  std::string mac = auth_mac(key, "kiln status answer", asker_challenge,
                             std::string_view(w.data()).substr(4));
  w.bytes(mac.data(), mac.size());
  return w.data();
}

Expected<uint64_t> decode_status_answer(const char* p, size_t n, const std::string& key,
                                        uint64_t nonce, const std::string& asker_challenge) {
  WireReader rd(p, n);
  uint64_t from = 0, started = 0;
  std::string mac(kAuthMacBytes, '\0');
  if (!open_frame(rd, n, kStatusAnswerBytes, kStatusAnswer) || !rd.u64(&from) ||
      !rd.u64(&started) || !rd.bytes(mac.data(), mac.size())) {
    return invalid_argument("malformed status answer (%zu bytes)", n);
  }
  if (from != nonce) return invalid_argument("status answer from another world");
  if (!auth_mac_matches(mac, auth_mac(key, "kiln status answer", asker_challenge,
                                      signed_part(p, n)))) {
    return invalid_argument("authentication failed: the status answer is not signed with this "
                             "job's key for this question");
  }
  return started;
}

Expected<std::unique_ptr<StatusChannel>> start_tcp_status_channel(const WorldTable& table,
                                                                  int rank, int listen_fd,
                                                                  const std::vector<int>& peers) {
  std::vector<PeerAddr> addrs(table.peers.size());
  for (int p : peers) {
    addrs[static_cast<size_t>(p)] = resolve(table.data_addrs[static_cast<size_t>(p)]);
  }
  int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    ::close(listen_fd);
    return unavailable("cannot create the status channel's eventfd: %s", std::strerror(errno));
  }
  auto channel = std::make_unique<TcpStatusChannel>(rank, listen_fd, wake_fd, table,
                                                    std::move(addrs));
  KILN_RETURN_IF_ERROR(channel->start());
  return std::unique_ptr<StatusChannel>(std::move(channel));
}

}  // namespace kiln::comm
