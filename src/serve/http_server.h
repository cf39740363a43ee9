// The KServe v2 HTTP/REST endpoints over the model registry, served by cpp-httplib (a
// maintained, header-only HTTP/1.1 server with a thread per connection; its parser, not
// ours, reads the requests). Routes:
//   GET  /v2, /v2/health/live, /v2/health/ready, /metrics
//   GET  /v2/models/<m>[/versions/<v>], /v2/models/<m>[/versions/<v>]/ready
//   POST /v2/models/<m>[/versions/<v>]/infer   (JSON, or binary tensors after a JSON header)
//   POST /v2/repository/index, /v2/repository/models/<m>/load, .../unload
// Every error is a JSON {"error": "..."} body: 400 bad request, 404 unknown model or route,
// 413 body over the limit, 503 queue full (with Retry-After), every connection thread taken
// and --http-max-waiting connections waiting, or shutting down, 500 a failed execution.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/log_file.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace kiln::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  int threads = 64;  // connections served at once (each keep-alive connection holds one)
  size_t max_body_bytes = size_t{64} << 20;
  int read_timeout_s = 30;  // a client that sends nothing for this long (in or between requests) is disconnected
  int request_timeout_s = 60;  // a request (line, headers, body) must arrive whole within this of its first byte
  int max_waiting = 256;     // connections waiting for a thread; beyond, a connection gets 503 at once
  std::vector<int> cores;   // empty: not pinned; else listen() and the connection threads run there
  LogFile* log = nullptr;   // when set: one line per request (method, path, status, bytes), and loads
};

class HttpServer {
 public:
  HttpServer(ModelRegistry& registry, Metrics& metrics, const HttpOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket: the port bound, or unavailable naming host and port.
  Expected<int> bind();
  // Serves until stop(); returns once the requests in flight are answered. The calling
  // thread (the accept loop) is pinned to options.cores, and the connection threads it
  // starts (named kiln-http) inherit them.
  Status listen();
  // Safe from any thread; health/ready turns false at once. Before listen() has begun accepting
  // it does not stop the accept loop about to start (httplib's stop() acts on a running loop
  // only): callers wait for listening() first.
  void stop();
  // True from the moment listen()'s accept loop runs until it ends.
  bool listening() const;

  // One connection served without a socket (the fuzz target fuzz/serve_http.cc, tests):
  // httplib's parser reads the requests out of `bytes` (keep-alive: one after another until
  // the bytes end, a request closes the connection or `max_requests` were answered), and each
  // is routed and answered as listen() would, the handlers and models included. Returns the
  // bytes the server wrote back; *statuses, when given, gets each response's HTTP status.
  // Needs no bind(); safe from any thread, as the handlers are.
  std::string serve_bytes(std::string_view bytes, std::vector<int>* statuses = nullptr,
                          int max_requests = 16);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve
