// The status side channel of a rank with TCP links (StatusChannel): a thread answers every
// connection to the rank's TCP link listener with how many collectives the rank has started,
// and a timed-out operation asks its TCP peers the same, all at once, briefly.
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

namespace kiln::comm {
namespace {

constexpr uint32_t kStatusMagic = 0x4b4c4e53;  // "KLNS"
// How long a timed-out operation waits for its peers' answers: a live peer answers from its
// serving thread within a round trip; one that does not is dead, stopped or unreachable, and
// the error must not come much later than KILN_COMM_TIMEOUT.
constexpr auto kQueryBudget = std::chrono::milliseconds(250);
constexpr size_t kAnswerBytes = 4 + 4 + 8 + 8;  // frame length, magic, nonce, count

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

class TcpStatusChannel : public StatusChannel {
 public:
  TcpStatusChannel(int listen_fd, int wake_fd, uint64_t nonce, std::vector<PeerAddr> peers)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), nonce_(nonce), peers_(std::move(peers)) {}
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
  void serve();
  void answer(int fd);

  int listen_fd_;  // guarded by stop_mu_ once the thread is joined
  int wake_fd_;    // an eventfd: stop() wakes the serving thread's poll
  uint64_t nonce_;
  std::vector<PeerAddr> peers_;  // by rank
  std::atomic<uint64_t> started_{0};
  std::mutex stop_mu_;
  std::thread thread_;
};

// The serving thread. The listener took this rank's TCP links during the join; from then on
// every connection to it is a query, answered at once and closed (the asker sends nothing, so
// the close is a clean end of stream, never a reset that could discard the answer).
void TcpStatusChannel::serve() {
  for (;;) {
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    int r = ::poll(fds, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;  // a poll that fails otherwise would fail forever: stop serving
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & (POLLERR | POLLNVAL)) return;
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) answer(fd);
    }
  }
}

void TcpStatusChannel::answer(int fd) {
  WireWriter w;
  w.u32(kStatusMagic);
  w.u64(nonce_);  // the asker checks it is this world's rank, not a reused port
  w.u64(started_.load(std::memory_order_relaxed));
  // A few bytes into a new connection's empty send buffer: this never waits.
  send_frame(fd, w.data(), Clock::now() + std::chrono::milliseconds(50)).ignore_error();
  ::close(fd);
}

void TcpStatusChannel::query_collectives(std::span<const int> ranks, std::span<int64_t> counts) {
  struct Ask {
    int fd = -1;
    size_t index = 0;  // into ranks / counts
    char buf[kAnswerBytes];
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
    asks.push_back(a);
  }
  // 2. Collect the answers as they come, until all are in or the budget is spent.
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
      ssize_t r = ::recv(a.fd, a.buf + a.got, sizeof(a.buf) - a.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r > 0) a.got += static_cast<size_t>(r);
      if (r > 0 && a.got < sizeof(a.buf)) continue;
      // Complete, ended early or failed: take the answer if it is whole and this world's.
      if (Expected<uint64_t> started = decode_status_answer(a.buf, a.got, nonce_); started.ok()) {
        counts[a.index] = static_cast<int64_t>(std::min<uint64_t>(*started, INT64_MAX));
      }
      ::close(a.fd);
      a.fd = -1;
    }
  }
  for (Ask& a : asks) {
    if (a.fd >= 0) ::close(a.fd);
  }
}

}  // namespace

Expected<uint64_t> decode_status_answer(const char* p, size_t n, uint64_t nonce) {
  uint32_t len = 0, magic = 0;
  uint64_t from = 0, started = 0;
  WireReader rd(p, n);
  if (n != kAnswerBytes || !rd.u32(&len) || len != kAnswerBytes - 4 || !rd.u32(&magic) ||
      magic != kStatusMagic || !rd.u64(&from) || !rd.u64(&started)) {
    return invalid_argument("malformed status answer (%zu bytes)", n);
  }
  if (from != nonce) return invalid_argument("status answer from another world");
  return started;
}

Expected<std::unique_ptr<StatusChannel>> start_tcp_status_channel(const WorldTable& table,
                                                                  int listen_fd,
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
  auto channel = std::make_unique<TcpStatusChannel>(listen_fd, wake_fd, table.nonce,
                                                    std::move(addrs));
  KILN_RETURN_IF_ERROR(channel->start());
  return std::unique_ptr<StatusChannel>(std::move(channel));
}

}  // namespace kiln::comm
