// The connections of kiln serve's HTTP server as Kiln reads them: httplib parses each request
// and runs the handlers, but the socket loop around its parser is ours, for two limits
// httplib 0.11 does not have (docs/serve.md, "Slow clients"):
//   - a whole-request deadline: httplib's read timeout restarts at every byte, so a client
//     trickling a byte a second kept a connection thread for ever; here a request (line,
//     headers and body) must arrive whole within request_timeout_s of its first byte;
//   - a bound on the connections waiting for a thread: httplib's pool queues accepted
//     connections without limit, unanswered; past the bound a connection gets a 503 at once.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace kiln::serve {

struct ConnectionLimits {
  int read_timeout_s = 30;       // silence allowed within a request
  int keep_alive_timeout_s = 30;  // silence allowed before a request (the first included)
  int request_timeout_s = 60;    // a request must arrive whole within this of its first byte
  int write_timeout_s = 5;       // a client that takes nothing for this long is dropped
  size_t keep_alive_max_requests = 1000;
};

// A connected socket as httplib's Stream. Reads are buffered (httplib's line reader asks for
// one byte at a time) and each waits at most the read timeout, and never past the deadline
// of the request being read.
class DeadlineSocketStream final : public httplib::Stream {
 public:
  DeadlineSocketStream(int sock, const ConnectionLimits& limits);

  // Waits, in slices, for the first byte of the next request (or for bytes already read):
  // false when the keep-alive timeout passes, the peer closes, or stopping() turns true.
  bool wait_for_request(const std::function<bool()>& stopping);
  // Starts the clock of one request: from now its reads end at the request deadline.
  void start_request();
  // True once a read was cut by the request deadline (not by silence).
  bool deadline_hit() const { return deadline_hit_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return sock_; }

 private:
  using Clock = std::chrono::steady_clock;
  // Milliseconds a read may wait now: the read timeout, cut at the request deadline.
  int read_wait_ms() const;

  int sock_;
  ConnectionLimits limits_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool deadline_hit_ = false;
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;  // buffer_[begin_, end_) read from the socket, not yet taken
};

// httplib's thread pool with a bound on the connections waiting for one of its threads.
// Past `max_waiting`, a connection goes to one overflow thread instead, which answers it with
// a 503 (rejecting() is true there while it runs the connection) and closes it.
class BoundedConnectionQueue final : public httplib::TaskQueue {
 public:
  BoundedConnectionQueue(size_t threads, size_t max_waiting);
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  // On the overflow thread, while it runs a connection: answer 503 and close.
  static bool rejecting();
  size_t max_waiting() const { return max_waiting_; }

 private:
  httplib::ThreadPool pool_;
  httplib::ThreadPool overflow_{1};
  size_t max_waiting_;
  std::atomic<size_t> waiting_{0};
  std::atomic<size_t> overflow_waiting_{0};
};

// Answers a connection that found no thread with a 503 naming the bound, before its request
// has been read (HTTP allows an early answer), then reads and drops what the client sends for
// up to a second (while the overflow backlog is short) so that closing does not reset the
// connection under the answer. Call it on the overflow thread (rejecting() true).
void answer_busy(int sock, size_t threads, size_t max_waiting);

}  // namespace kiln::serve
