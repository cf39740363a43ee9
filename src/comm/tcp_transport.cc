// TCP links between hosts (one non-blocking connection per pair of ranks, TCP_NODELAY),
// and the blocking-socket helpers the bootstrap shares with them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/bootstrap.h"
#include "core/logging.h"

namespace kiln::comm {
namespace {

constexpr uint32_t kLinkHelloMagic = 0x4b4c4e4c;  // "KLNL"
constexpr std::string_view kLinkLabel = "kiln link hello";
constexpr size_t kRecvBuffer = 256u << 10;

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 100));
}

class TcpLink : public Link {
 public:
  // same_host: the peer's pid is one of this host's, so its death can be told from a close.
  TcpLink(int fd, PeerInfo peer, bool same_host)
      : fd_(fd), peer_(std::move(peer)), same_host_(same_host), buf_(kRecvBuffer) {}
  ~TcpLink() override { ::close(fd_); }

  Status try_send(const char* p, size_t n, size_t* sent) override {
    *sent = 0;
    if (n == 0) return ok_status();
    ssize_t r = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      *sent = static_cast<size_t>(r);
      return ok_status();
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ok_status();
    return gone(errno);
  }

  Status peek(const char** p, size_t* len) override {
    if (pos_ == len_) {
      pos_ = len_ = 0;
      KILN_RETURN_IF_ERROR(recv_some(buf_.data(), buf_.size(), &len_));
    }
    *p = buf_.data() + pos_;
    *len = len_ - pos_;
    return ok_status();
  }

  void consume(size_t n) override { pos_ += n; }

  Status try_recv(char* dst, size_t n, size_t* got) override {
    *got = 0;
    if (pos_ < len_) {  // bytes a reducing receive left in the buffer come first
      size_t k = std::min(n, len_ - pos_);
      std::memcpy(dst, buf_.data() + pos_, k);
      pos_ += k;
      *got = k;
      return ok_status();
    }
    if (n == 0) return ok_status();
    return recv_some(dst, n, got);  // straight into the destination
  }

  int poll_fd() const override { return fd_; }

  Status check_peer() override {
    if (same_host_ && process_exited(peer_.pid)) {
      return unavailable("%s exited", describe_peer(peer_).c_str());
    }
    char c;
    if (pos_ == len_) {
      read_culprit();
      ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r == 0 || (peer_failed_ && r < 0)) return gone(0);  // failed and sends no more
    }
    return ok_status();
  }

  void close(int culprit) override {
    if (shut_.exchange(true)) return;
    if (culprit >= 0) {
      // The stream may be mid-message, so the rank to blame goes out of band, as one urgent
      // byte (ranks 0..253), a little before the close (finish_close) so the peer reads it
      // first.
      unsigned char b = culprit < 254 ? static_cast<unsigned char>(culprit) : 254;
      if (::send(fd_, &b, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT) != 1 && errno == EAGAIN) {
        // A full send buffer (the peer is not reading): grow it a little to fit the byte.
        int size = 0;
        socklen_t len = sizeof(size);
        getsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &size, &len);
        size += 64 << 10;
        if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) != 0) {
          setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
        }
        ::send(fd_, &b, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      close_delayed_ = true;
      return;
    }
    ::shutdown(fd_, SHUT_RDWR);
  }

  void finish_close() override {
    if (!close_delayed_) return;
    close_delayed_ = false;
    ::shutdown(fd_, SHUT_WR);  // reading on: the peer's report may still come
  }

  int reported_culprit() override {
    read_culprit();
    return culprit_;
  }

 private:
  // The urgent byte a failing peer sends before it closes. It must be read before a normal
  // read passes its place in the stream (which discards it), and that place is often the
  // end of a message, so it is looked for before every read (a cheap failing syscall).
  void read_culprit() {
    unsigned char b = 0;
    if (!peer_failed_ && ::recv(fd_, &b, 1, MSG_OOB | MSG_DONTWAIT) == 1) {
      peer_failed_ = true;
      if (b < 254) culprit_ = b;
    }
  }

  Status recv_some(char* dst, size_t n, size_t* got) {
    *got = 0;
    read_culprit();  // the bytes before it are still delivered
    // A read that starts at the urgent mark skips the byte and forgets it, and the byte can
    // arrive between read_culprit() and the read. So read only what was queued when we last
    // looked: SIOCINQ counts up to the mark (never past it), and a byte that arrived before
    // the count is seen by the read_culprit() that follows it.
    int queued = 0;
    if (::ioctl(fd_, SIOCINQ, &queued) == 0) {
      if (queued > 0) {
        n = std::min(n, static_cast<size_t>(queued));
      } else {
        // Nothing before the mark (or nothing at all): take the byte if it is there, then
        // learn whether the connection ended (a peek does not pass the mark for good).
        read_culprit();
        char c;
        ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) return gone(0);
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return gone(errno);
        return ok_status();  // nothing yet, or data that came just now (read next time)
      }
    }
    ssize_t r = ::recv(fd_, dst, n, MSG_DONTWAIT);
    if (r == 0) return gone(0);
    if (r < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return gone(errno);
      return ok_status();
    }
    *got = static_cast<size_t>(r);
    return ok_status();
  }

  Status gone(int err) {
    read_culprit();
    if (err == 0) return unavailable("%s closed its connection", describe_peer(peer_).c_str());
    return unavailable("%s closed its connection (%s)", describe_peer(peer_).c_str(),
                       std::strerror(err));
  }

  int fd_;
  PeerInfo peer_;
  bool same_host_;
  std::vector<char> buf_;
  size_t pos_ = 0;
  size_t len_ = 0;
  std::atomic<bool> shut_{false};
  bool close_delayed_ = false;  // close() sent the urgent byte; finish_close() shuts down
  bool peer_failed_ = false;    // the peer sent its failure byte
  int culprit_ = -1;            // the rank it blamed, or -1
};

Status wait_fd(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_until(deadline));
    if (r > 0) return ok_status();
    if (r < 0 && errno != EINTR) return unavailable("poll: %s", std::strerror(errno));
    if (Clock::now() >= deadline) return deadline_exceeded("%s timed out", what);
  }
}

}  // namespace

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Expected<std::pair<std::string, int>> split_host_port(const std::string& addr) {
  std::string host;
  std::string port;
  if (!addr.empty() && addr[0] == '[') {
    size_t close = addr.find(']');
    if (close == std::string::npos || close + 1 >= addr.size() || addr[close + 1] != ':') {
      return invalid_argument("address '%s' is not [host]:port", addr.c_str());
    }
    host = addr.substr(1, close - 1);
    port = addr.substr(close + 2);
  } else {
    size_t colon = addr.rfind(':');
    if (colon == std::string::npos) {
      return invalid_argument("address '%s' is not host:port", addr.c_str());
    }
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return invalid_argument("address '%s' has no valid port", addr.c_str());
  }
  int p = std::atoi(port.c_str());
  if (p > 65535) return invalid_argument("address '%s': port %d out of range", addr.c_str(), p);
  return std::make_pair(host, p);
}

Expected<int> tcp_listen(const std::string& host, int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  const char* node = host.empty() || host == "*" ? nullptr : host.c_str();
  if (node == nullptr) hints.ai_family = AF_INET;
  int gai = getaddrinfo(node, port_str.c_str(), &hints, &res);
  if (gai != 0) {
    return invalid_argument("cannot resolve '%s' to listen on: %s", host.c_str(),
                            gai_strerror(gai));
  }
  int err = 0;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
    err = errno;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return unavailable("cannot listen on %s:%d: %s", host.c_str(), port, std::strerror(err));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

Expected<int> tcp_connect(const std::string& addr, Clock::time_point deadline) {
  KILN_ASSIGN_OR_RETURN(auto hp, split_host_port(addr));
  std::string last_error = "timed out";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port_str = std::to_string(hp.second);
    int gai = getaddrinfo(hp.first.c_str(), port_str.c_str(), &hints, &res);
    if (gai != 0) {
      last_error = gai_strerror(gai);
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
          // Out of descriptors or memory: retrying until the deadline would only hide why.
          const int err = errno;
          freeaddrinfo(res);
          return resource_exhausted("cannot connect to %s: no socket: %s", addr.c_str(), std::strerror(err));
        }
        if (fd < 0) continue;
        set_nonblocking(fd, true);
        int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
          auto until = std::min(deadline, Clock::now() + std::chrono::seconds(2));
          Status w = wait_fd(fd, POLLOUT, until, "connect");
          int soerr = 0;
          socklen_t sl = sizeof(soerr);
          if (w.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) r = 0;
          else errno = soerr != 0 ? soerr : ETIMEDOUT;
        }
        if (r == 0) {
          freeaddrinfo(res);
          set_nodelay(fd);
          return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      freeaddrinfo(res);
    }
    if (Clock::now() >= deadline) {
      return deadline_exceeded("cannot connect to %s: %s", addr.c_str(), last_error.c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

namespace {

// The IP address of a socket name ("[v6]" in brackets), and its port; false for a family
// other than IPv4 and IPv6.
bool format_sockaddr(const sockaddr_storage& ss, std::string* ip, unsigned* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    *ip = "[";  // (not "[" + string: GCC 12 warns -Wrestrict on that)
    ip->append(buf);
    ip->push_back(']');
    *port = ntohs(a->sin6_port);
    return true;
  }
  if (ss.ss_family != AF_INET) return false;
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
  *ip = buf;
  *port = ntohs(a->sin_port);
  return true;
}

}  // namespace

std::string socket_local_ip(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  std::string ip;
  unsigned port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !format_sockaddr(ss, &ip, &port)) {
    return "127.0.0.1";
  }
  return ip;
}

std::string socket_peer_addr(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  std::string ip;
  unsigned port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !format_sockaddr(ss, &ip, &port)) return "?";
  return ip + ":" + std::to_string(port);
}

std::string reachable_host_ip() {
  // A UDP "connect" sends nothing; it only picks the interface of the default route.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(53);
    inet_pton(AF_INET, "8.8.8.8", &sa.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      std::string ip = socket_local_ip(fd);
      ::close(fd);
      if (ip != "0.0.0.0") return ip;
    } else {
      ::close(fd);
    }
  }
  ifaddrs* ifs = nullptr;
  std::string found = "127.0.0.1";
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
      if (std::strncmp(buf, "127.", 4) != 0) {
        found = buf;
        break;
      }
    }
    freeifaddrs(ifs);
  }
  return found;
}

Status send_frame(int fd, const std::string& payload, Clock::time_point deadline) {
  std::string msg(4, '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  std::memcpy(msg.data(), &n, 4);
  msg += payload;
  size_t off = 0;
  while (off < msg.size()) {
    ssize_t r = ::send(fd, msg.data() + off, msg.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      off += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return unavailable("connection closed (%s)", std::strerror(errno));
    }
    KILN_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, "send"));
  }
  return ok_status();
}

Expected<std::string> recv_frame(int fd, Clock::time_point deadline, size_t max_bytes) {
  auto read_exact = [&](char* p, size_t n) -> Status {
    size_t off = 0;
    while (off < n) {
      ssize_t r = ::recv(fd, p + off, n - off, MSG_DONTWAIT);
      if (r > 0) {
        off += static_cast<size_t>(r);
        continue;
      }
      if (r == 0) return unavailable("connection closed");
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return unavailable("connection closed (%s)", std::strerror(errno));
      }
      KILN_RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, "receive"));
    }
    return ok_status();
  };
  uint32_t n = 0;
  KILN_RETURN_IF_ERROR(read_exact(reinterpret_cast<char*>(&n), 4));
  if (n > max_bytes) {
    return invalid_argument("frame of %u bytes (at most %zu expected)", n, max_bytes);
  }
  std::string payload(n, '\0');
  KILN_RETURN_IF_ERROR(read_exact(payload.data(), n));
  return payload;
}

std::string encode_link_hello(uint64_t unique_id, uint64_t nonce, uint32_t rank) {
  WireWriter w;
  w.u32(kLinkHelloMagic);
  w.u64(unique_id);
  w.u64(nonce);
  w.u32(rank);
  return w.data();
}

Expected<uint32_t> decode_link_hello(const std::string& frame, uint64_t unique_id, uint64_t nonce) {
  WireReader r(frame.data(), frame.size());
  uint32_t magic = 0, rank = 0;
  uint64_t uid = 0, n = 0;
  if (!r.u32(&magic) || !r.u64(&uid) || !r.u64(&n) || !r.u32(&rank)) {
    return invalid_argument("truncated TCP link hello (%zu bytes)", frame.size());
  }
  if (magic != kLinkHelloMagic) return invalid_argument("not a Kiln TCP link hello");
  if (uid != unique_id || n != nonce) {
    return invalid_argument("TCP link hello from another communicator or world");
  }
  return rank;
}

Status make_tcp_links(const WorldTable& table, int rank, int listen_fd,
                      const std::vector<int>& peers, Clock::time_point deadline,
                      std::vector<std::unique_ptr<Link>>* links) {
  std::vector<int> fds(table.peers.size(), -1);
  auto cleanup = [&] {
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  // Connect to every lower peer first (the kernel completes those handshakes from the
  // listen backlog, so nobody waits for an accept), then accept the higher ones.
  size_t expect_accepts = 0;
  for (int p : peers) {
    if (p > rank) {
      ++expect_accepts;
      continue;
    }
    const std::string& addr = table.data_addrs[static_cast<size_t>(p)];
    Expected<int> fd = tcp_connect(addr, deadline);
    if (!fd.ok()) {
      cleanup();
      return Status(fd.status().code(),
                    str_format("cannot connect to %s at %s: %s",
                               describe_peer(table.peers[static_cast<size_t>(p)]).c_str(),
                               addr.c_str(), fd.status().message().c_str()));
    }
    fds[static_cast<size_t>(p)] = *fd;
    Status s = send_frame(*fd, encode_link_hello(table.unique_id, table.nonce,
                                                 static_cast<uint32_t>(rank)),
                          deadline);
    if (!s.ok()) {
      cleanup();
      return unavailable("cannot greet %s: %s",
                         describe_peer(table.peers[static_cast<size_t>(p)]).c_str(),
                         s.message().c_str());
    }
  }
  // Each lower peer challenges the hello; the answer proves this rank knows the world's key.
  // (A lower peer waits only on ranks below it, so these waits end.)
  for (int p : peers) {
    if (p > rank) continue;
    const int fd = fds[static_cast<size_t>(p)];
    Expected<std::string> challenge = recv_frame(fd, deadline, kAuthNonceBytes);
    Status s = challenge.ok() && challenge->size() != kAuthNonceBytes
                   ? invalid_argument("a challenge of %zu bytes", challenge->size())
                   : challenge.status();
    if (s.ok()) {
      const std::string hello = encode_link_hello(table.unique_id, table.nonce, static_cast<uint32_t>(rank));
      s = send_frame(fd, auth_mac(table.key, kLinkLabel, *challenge, hello), deadline);
    }
    if (!s.ok()) {
      cleanup();
      return Status(s.code() == StatusCode::kDeadlineExceeded ? s.code() : StatusCode::kUnavailable,
                    str_format("%s did not complete the TCP link handshake: %s",
                               describe_peer(table.peers[static_cast<size_t>(p)]).c_str(),
                               s.message().c_str()));
    }
  }
  size_t accepted = 0;
  std::string accept_error;  // why accept() failed last, for the deadline's message
  while (accepted < expect_accepts) {
    Status w = wait_fd(listen_fd, POLLIN, deadline, "accept");
    if (!w.ok()) {
      std::string missing;
      for (int p : peers) {
        if (p > rank && fds[static_cast<size_t>(p)] < 0) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(p);
        }
      }
      cleanup();
      return deadline_exceeded("rank(s) %s did not connect to rank %d's TCP listener in time%s",
                               missing.c_str(), rank, accept_error.c_str());
    }
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {  // the connection waits in the backlog
        accept_error = str_format(" (accepting failed: %s)", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      continue;
    }
    // A stray or stale connection is refused (logged, closed); only a hello of this world,
    // from an expected peer, answering the challenge with the world's key, counts. A peer
    // that stalls holds this loop for at most 5 s.
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    Expected<std::string> hello = recv_frame(fd, hello_deadline, 64);
    Expected<uint32_t> from =
        hello.ok() ? decode_link_hello(*hello, table.unique_id, table.nonce) : hello.status();
    uint32_t peer = from.ok() ? *from : 0;
    Status why = from.status();
    if (why.ok() && (peer >= table.peers.size() || static_cast<int>(peer) <= rank ||
                     std::find(peers.begin(), peers.end(), static_cast<int>(peer)) == peers.end())) {
      why = invalid_argument("rank %u is not a higher rank of another host", peer);
    } else if (why.ok() && fds[peer] >= 0) {
      why = invalid_argument("rank %u is linked already", peer);
    }
    if (why.ok()) {
      const std::string challenge = auth_nonce();
      why = send_frame(fd, challenge, hello_deadline);
      if (why.ok()) {
        Expected<std::string> answer = recv_frame(fd, hello_deadline, kAuthMacBytes);
        if (!answer.ok()) {
          why = answer.status();
        } else if (!auth_mac_matches(*answer, auth_mac(table.key, kLinkLabel, challenge, *hello))) {
          why = invalid_argument("authentication failed: the hello of rank %u is not signed with "
                                 "this job's key", peer);
        }
      }
    }
    if (!why.ok()) {
      KILN_LOG(kWarning, "comm: rank %d's TCP link listener refused the connection from %s: %s",
               rank, socket_peer_addr(fd).c_str(), why.message().c_str());
      ::close(fd);
      continue;
    }
    set_nodelay(fd);
    fds[peer] = fd;
    ++accepted;
  }
  for (int p : peers) {
    int fd = fds[static_cast<size_t>(p)];
    set_nonblocking(fd, true);
    const PeerInfo& peer = table.peers[static_cast<size_t>(p)];
    bool same_host = peer.host_id == table.peers[static_cast<size_t>(rank)].host_id;
    (*links)[static_cast<size_t>(p)] = std::make_unique<TcpLink>(fd, peer, same_host);
    fds[static_cast<size_t>(p)] = -1;
  }
  return ok_status();
}

}  // namespace kiln::comm
