// Kiln's socket loop under httplib's parser (http_connection.h).
#include "serve/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/status.h"
#include "serve/infer_codec.h"

namespace kiln::serve {
namespace {

constexpr int kIdleSliceMs = 100;  // how often an idle connection looks at stopping()

// poll() on one socket, retried on EINTR: > 0 ready, 0 timed out, < 0 error.
int poll_one(int sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    int r = ::poll(&p, 1, timeout_ms);
    if (r >= 0 || errno != EINTR) return r;
  }
}

void address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  port = 0;
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof(text));
    port = ntohs(a.sin6_port);
  }
  ip = text;
}

constexpr size_t kLingeringBacklog = 8;  // overflow connections answered with a lingering close

thread_local bool tls_rejecting = false;
thread_local bool tls_linger = false;

}  // namespace

DeadlineSocketStream::DeadlineSocketStream(int sock, const ConnectionLimits& limits) : sock_(sock), limits_(limits) {}

bool DeadlineSocketStream::wait_for_request(const std::function<bool()>& stopping) {
  if (begin_ < end_) return true;  // a pipelined request is already here
  const auto until = Clock::now() + std::chrono::seconds(limits_.keep_alive_timeout_s);
  while (!stopping()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    int r = poll_one(sock_, POLLIN, static_cast<int>(std::min<long long>(left, kIdleSliceMs)));
    if (r < 0) return false;
    if (r > 0) return true;  // bytes, or the end of the stream (the read will tell)
  }
  return false;
}

void DeadlineSocketStream::start_request() {
  deadline_ = Clock::now() + std::chrono::seconds(limits_.request_timeout_s);
  deadline_hit_ = false;
}

int DeadlineSocketStream::read_wait_ms() const {
  long long wait = 1000LL * limits_.read_timeout_s;
  if (deadline_ != Clock::time_point::max())
    wait = std::min<long long>(
        wait, std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count());
  return static_cast<int>(std::max<long long>(wait, 0));
}

bool DeadlineSocketStream::is_readable() const {
  return begin_ < end_ || poll_one(sock_, POLLIN, read_wait_ms()) > 0;
}

bool DeadlineSocketStream::is_writable() const {
  if (poll_one(sock_, POLLOUT, 1000 * limits_.write_timeout_s) <= 0) return false;
  // As httplib's own stream: a peer that has closed its side is not written to (a streamed
  // completion stops when its client is gone). Peeking leaves any request bytes in place.
  char byte;
  ssize_t n = ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

ssize_t DeadlineSocketStream::read(char* ptr, size_t size) {
  if (begin_ == end_) {
    const int wait = read_wait_ms();
    if (wait == 0 || poll_one(sock_, POLLIN, wait) <= 0) {
      // Silence for the read timeout, or the request's time is up: the read fails and
      // httplib ends the connection (a 400 for a request cut in its headers).
      if (Clock::now() >= deadline_) deadline_hit_ = true;
      return -1;
    }
    ssize_t n;
    do {
      n = ::recv(sock_, buffer_, sizeof(buffer_), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    begin_ = 0;
    end_ = static_cast<size_t>(n);
  }
  size_t n = std::min(size, end_ - begin_);
  std::memcpy(ptr, buffer_ + begin_, n);
  begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t DeadlineSocketStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do {
    n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void DeadlineSocketStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) addr.ss_family = AF_UNSPEC;
  address_of(addr, ip, port);
}

void DeadlineSocketStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) addr.ss_family = AF_UNSPEC;
  address_of(addr, ip, port);
}

BoundedConnectionQueue::BoundedConnectionQueue(size_t threads, size_t max_waiting)
    : pool_(threads), max_waiting_(max_waiting) {}

void BoundedConnectionQueue::enqueue(std::function<void()> fn) {
  // A connection waits from here until a thread takes it up; counted in, counted out there.
  if (waiting_.fetch_add(1, std::memory_order_relaxed) < max_waiting_) {
    pool_.enqueue([this, fn = std::move(fn)] {
      waiting_.fetch_sub(1, std::memory_order_relaxed);
      fn();
    });
    return;
  }
  waiting_.fetch_sub(1, std::memory_order_relaxed);
  overflow_waiting_.fetch_add(1, std::memory_order_relaxed);
  overflow_.enqueue([this, fn = std::move(fn)] {
    // A short backlog lingers over each answer (answer_busy); a long one closes at once, so
    // that clients which keep their sockets open cannot hold the overflow thread.
    tls_rejecting = true;
    tls_linger = overflow_waiting_.fetch_sub(1, std::memory_order_relaxed) <= kLingeringBacklog;
    fn();
    tls_rejecting = false;
  });
}

void BoundedConnectionQueue::shutdown() {
  pool_.shutdown();
  overflow_.shutdown();
}

bool BoundedConnectionQueue::rejecting() { return tls_rejecting; }

void answer_busy(int sock, size_t threads, size_t max_waiting) {
  const std::string body = error_body(str_format(
      "the server is busy: all %zu HTTP threads are taken and %zu connections already wait for one "
      "(--http-threads, --http-max-waiting); retry later",
      threads, max_waiting));
  const std::string head = str_format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: %zu\r\n\r\n",
      body.size());
  const std::string answer = head + body;
  // The answer fits the socket's empty send buffer: a send that would block is a client
  // that takes nothing, dropped.
  (void)::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  // Lingering close: data left unread when the socket closes makes the kernel reset the
  // connection, which can discard the answer before the client reads it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(tls_linger ? 1000 : 0);
  char sink[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0 || poll_one(sock, POLLIN, static_cast<int>(left)) <= 0) break;
    ssize_t n = ::recv(sock, sink, sizeof(sink), 0);
    if (n <= 0 && !(n < 0 && errno == EINTR)) break;
  }
}

}  // namespace kiln::serve
