// The KServe v2 HTTP endpoints (http_server.h).
#include "serve/http_server.h"

#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "serve/affinity.h"
#include "serve/completions_codec.h"
#include "serve/http_connection.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

constexpr char kJson[] = "application/json";
// <m> and the optional /versions/<v> of a model URL.
constexpr char kModel[] = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

int http_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnsupported: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded: return 503;
    default: return 500;
  }
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(error_body(message), kJson);
  if (status == 503) res.set_header("Retry-After", "1");
}

void send_status(httplib::Response& res, const Status& s) { send_error(res, http_status(s), s.to_string()); }

void send_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

json tensor_metadata(const TensorInfo& t) {
  return {{"name", t.name}, {"datatype", kserve_datatype(t.dtype)}, {"shape", t.dims}};
}

// httplib's server with its per-request entry point (protected: the socket loop calls it for
// each request read from an accepted socket) opened to serve_bytes, and with Kiln's socket
// loop (http_connection.h) in place of httplib's.
class HttplibServer : public httplib::Server {
 public:
  using httplib::Server::process_request;

  // Set before listen().
  ConnectionLimits limits;
  size_t threads = 0, max_waiting = 0;
  std::function<void()> on_busy;                                    // a connection refused with 503
  std::function<void(const std::string& peer)> on_request_deadline;  // a request cut at its deadline

 private:
  // httplib's socket loop is a private virtual: overriding it is allowed, calling it is not,
  // so the keep-alive loop is whole here, over a stream that enforces the request deadline.
  bool process_and_close_socket(socket_t sock) override {
    bool ret = false;
    if (BoundedConnectionQueue::rejecting()) {
      answer_busy(sock, threads, max_waiting);
      if (on_busy) on_busy();
    } else {
      DeadlineSocketStream stream(sock, limits);
      auto stopping = [this] { return svr_sock_ == INVALID_SOCKET; };
      for (size_t left = limits.keep_alive_max_requests; left > 0 && stream.wait_for_request(stopping); --left) {
        stream.start_request();
        bool closed = false;
        ret = process_request(stream, left == 1, closed, nullptr);
        if (stream.deadline_hit() && on_request_deadline) {
          std::string ip;
          int port = 0;
          stream.get_remote_ip_and_port(ip, port);
          on_request_deadline(ip + ":" + std::to_string(port));
        }
        if (!ret || closed || stream.deadline_hit()) break;
      }
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }
};

// A connection whose input is a byte string and whose output is collected: what httplib
// reads from and writes to in place of a socket (serve_bytes). Reads past the end return 0,
// the end of the stream, as a client that closed its side.
class ByteStream : public httplib::Stream {
 public:
  explicit ByteStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* p, size_t n) override {
    n = std::min(n, in_.size() - pos_);
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* p, size_t n) override {
    out_.append(p, n);
    return static_cast<ssize_t>(n);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  bool at_end() const { return pos_ == in_.size(); }
  std::string& out() { return out_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string out_;
};

// `text` with bytes outside printable ASCII as \xNN: a request path in the log cannot break
// its line or inject control characters.
std::string printable(const std::string& text) {
  std::string s;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      s += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      s += hex;
    }
  }
  return s;
}

// The statuses serve_bytes collects on this thread (the logger runs on the thread that
// answered the request).
thread_local std::vector<int>* tls_statuses = nullptr;

}  // namespace

struct HttpServer::Impl {
  Impl(ModelRegistry& r, Metrics& m, const HttpOptions& o) : registry(r), metrics(m), options(o) {}
  ModelRegistry& registry;
  Metrics& metrics;
  HttpOptions options;
  HttplibServer server;
  std::atomic<bool> ready{true};
  std::atomic<int64_t> completion_ids{0};

  // The loaded model named by the URL (and its version, when the URL gives one); otherwise
  // sends 404 (no such model in the repository, or not that version) or 400 (in the
  // repository but not loaded) and returns nullptr.
  std::shared_ptr<ModelScheduler> model_of(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    std::shared_ptr<ModelScheduler> m = registry.find(name);
    if (!m && registry.find_llm(name)) {
      send_error(res, 400, str_format("model '%s' is a decoder (backend llm): POST /v1/completions serves it",
                                      name.c_str()));
      return nullptr;
    }
    if (!m) {
      std::error_code ec;
      if (valid_model_name(name) && std::filesystem::is_directory(std::filesystem::path(registry.repository()) / name, ec))
        send_error(res, 400, str_format("model '%s' is not loaded (POST /v2/repository/models/%s/load loads it)",
                                        name.c_str(), name.c_str()));
      else
        send_error(res, 404, str_format("unknown model '%s'", name.c_str()));
      return nullptr;
    }
    if (req.matches[2].matched && req.matches[2] != m->model().version()) {
      send_error(res, 404, str_format("model '%s' has no version '%s' loaded (serving version %s)", name.c_str(),
                                      req.matches[2].str().c_str(), m->model().version().c_str()));
      return nullptr;
    }
    return m;
  }

  void infer(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<ModelScheduler> m = model_of(req, res);
    if (!m) return;
    ModelMetrics& counters = metrics.model(m->model().name());
    Status s = infer_on(*m, req, res);
    if (s.ok()) {
      ++counters.requests;
    } else {
      ++counters.failures;
      send_status(res, s);
    }
  }

  Status infer_on(ModelScheduler& m, const httplib::Request& req, httplib::Response& res) {
    std::optional<size_t> header_length;
    if (req.has_header("Inference-Header-Content-Length")) {
      const std::string v = req.get_header_value("Inference-Header-Content-Length");
      size_t n = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || v.empty())
        return invalid_argument("Inference-Header-Content-Length '%s' is not a byte count", v.c_str());
      header_length = n;
    }
    KILN_ASSIGN_OR_RETURN(InferRequest request, parse_infer_request(req.body, header_length));
    KILN_RETURN_IF_ERROR(m.model().check_request(&request));
    InferRequest echo{request.id, {}, request.outputs, request.binary_data_output, 0};  // inputs move into the queue
    const int64_t timeout_us = request.timeout_us;
    const auto submitted = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(std::future<InferResult> future, m.submit(std::move(request)));
    // The timeout holds while the batch executes too: the client is answered at its deadline
    // and the late result is dropped (the scheduler counts it in the timeouts).
    if (timeout_us > 0 && future.wait_until(submitted + std::chrono::microseconds(timeout_us)) != std::future_status::ready)
      return deadline_exceeded("request timed out after %lld us on model '%s' (queued or executing; a late result is "
                               "discarded)", static_cast<long long>(timeout_us), m.model().name().c_str());
    InferResult result = future.get();
    if (!result.ok()) return result.status();
    KILN_ASSIGN_OR_RETURN(EncodedResponse response,
                          encode_infer_response(m.model().name(), m.model().version(), echo, *result));
    res.status = 200;
    if (response.header_length) {
      res.set_header("Inference-Header-Content-Length", std::to_string(*response.header_length));
      res.set_content(std::move(response.body), "application/octet-stream");
    } else {
      res.set_content(std::move(response.body), kJson);
    }
    return ok_status();
  }

  // POST /v1/completions (OpenAI's protocol, completions_codec.h) on a decoder model.
  void completions(const httplib::Request& req, httplib::Response& res) {
    auto fail = [&](int status, const std::string& message) {
      res.status = status;
      res.set_content(openai_error_body(status, message), kJson);
      if (status == 503) res.set_header("Retry-After", "1");
    };
    Expected<CompletionRequest> parsed = parse_completion_request(req.body);
    if (!parsed.ok()) return fail(400, parsed.status().message());
    const std::string name = parsed->model;
    std::shared_ptr<LlmModel> m = registry.find_llm(name);
    if (!m) {
      std::error_code ec;
      if (registry.find(name))
        fail(400, str_format("model '%s' is not a decoder (backend llm): POST /v2/models/%s/infer serves it",
                             name.c_str(), name.c_str()));
      else if (valid_model_name(name) &&
               std::filesystem::is_directory(std::filesystem::path(registry.repository()) / name, ec))
        fail(400, str_format("model '%s' is not loaded", name.c_str()));
      else
        fail(404, str_format("unknown model '%s'", name.c_str()));
      return;
    }
    ModelMetrics& counters = metrics.model(name);
    // Text prompts through the model's tokenizer (a 400 naming it when there is none).
    if (Status prepared = m->prepare(&parsed->params); !prepared.ok()) {
      ++counters.failures;
      return fail(400, prepared.message());
    }
    auto completion = std::make_shared<Completion>(std::move(parsed->params));
    Status s = m->submit(completion);
    if (s.ok()) s = completion->wait_admitted();
    if (!s.ok()) {
      ++counters.failures;
      // The engine refuses a context larger than its whole KV pool as resource exhausted: that
      // request can never run, a client error, not an overload.
      const bool refused = s.code() == StatusCode::kResourceExhausted && s.message().find("max_queue_size") == std::string::npos;
      return fail(refused ? 400 : http_status(s), s.to_string());
    }
    CompletionHeader header{"cmpl-" + std::to_string(++completion_ids), static_cast<int64_t>(std::time(nullptr)), name};
    const size_t n = completion->params().prompts.size();
    if (!completion->params().stream) {
      std::vector<size_t> sent(n, 0);
      std::vector<bool> finished(n, false);
      std::vector<Completion::Choice> choices;
      bool done = false;
      while (!done) {
        s = completion->wait_for_update(sent, finished, &choices, &done);
        for (size_t i = 0; i < n; ++i) {
          sent[i] = choices[i].tokens.size();
          finished[i] = !choices[i].finish_reason.empty();
        }
      }
      // Each choice's text, made as its tokens came (LlmModel: cut before a stop string). An id
      // the tokenizer does not have (a model's vocabulary larger than its tokenizer's) failed
      // the completion, naming it.
      std::vector<std::string> texts;
      for (size_t i = 0; s.ok() && m->tokenizer() != nullptr && i < n; ++i) texts.push_back(choices[i].text);
      if (!s.ok()) {
        ++counters.failures;
        return fail(http_status(s) == 503 ? 503 : 500, s.to_string());
      }
      ++counters.requests;
      res.status = 200;
      res.set_content(encode_completion(header, completion->params().prompts, choices, texts), kJson);
      return;
    }
    // Server-sent events: one per token as the engine generates it, one per choice's end, then
    // "data: [DONE]". An error after the first event can only be sent as an event.
    // With a tokenizer each event carries the text its token completed (LlmModel decodes it as
    // the tokens come, llm::TextStream: a character split over byte tokens comes whole, text
    // that may begin a stop string waits), and the choice's last event the text held back
    // until then.
    struct Stream {
      std::shared_ptr<Completion> completion;
      CompletionHeader header;
      std::vector<size_t> sent;
      std::vector<bool> finished;
      bool ok = true;
      bool counted = false;  // in the model's requests or failures
    };
    auto stream = std::make_shared<Stream>(
        Stream{completion, header, std::vector<size_t>(n, 0), std::vector<bool>(n, false)});
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream, &counters](size_t, httplib::DataSink& sink) {
          std::vector<Completion::Choice> choices;
          bool done = false;
          Status st = stream->completion->wait_for_update(stream->sent, stream->finished, &choices, &done);
          std::string events;
          // The text of choice `c` from byte `from` (`to`: its end when npos); empty without a
          // tokenizer.
          auto text_of = [](const Completion::Choice& c, size_t from, size_t to) {
            return from >= c.text.size() ? std::string() : c.text.substr(from, to == std::string::npos ? to : to - from);
          };
          for (size_t i = 0; i < choices.size() && st.ok(); ++i) {
            const Completion::Choice& c = choices[i];
            for (size_t t = stream->sent[i]; t < c.tokens.size(); ++t) {
              const std::string text = text_of(c, t == 0 ? 0 : c.text_end[t - 1], c.text_end[t]);
              events += encode_completion_event(stream->header, i, {c.tokens[t]}, text, "");
            }
            stream->sent[i] = c.tokens.size();
            if (!c.finish_reason.empty() && !stream->finished[i]) {
              const std::string rest = text_of(c, c.text_end.empty() ? 0 : c.text_end.back(), std::string::npos);
              events += encode_completion_event(stream->header, i, {}, rest, c.finish_reason);
              stream->finished[i] = true;
            }
          }
          if (!st.ok() && !done) {
            stream->completion->cancel();  // nothing more can be sent for it
            done = true;
          }
          if (!st.ok()) {
            stream->ok = false;
            events += "data: " + openai_error_body(500, st.to_string()) + "\n\n";
          }
          if (done) events += "data: [DONE]\n\n";
          if (!sink.write(events.data(), events.size())) {
            stream->completion->cancel();  // the client went away: stop generating for it
            stream->ok = false;
            return false;
          }
          if (done) {
            // Counted before the end of the response reaches the client, so that a client
            // reading the metrics next sees this completion.
            ++(stream->ok ? counters.requests : counters.failures);
            stream->counted = true;
            sink.done();
          }
          return true;
        },
        [stream, &counters](bool success) {
          if (!success) stream->completion->cancel();
          if (!stream->counted) ++counters.failures;
        });
  }

  void routes() {
    server.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { send_json(res, {{"live", true}}); });
    server.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, {{"ready", ready.load()}});
      if (!ready) res.status = 503;
    });
    server.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, {{"name", "kiln"},
                      {"version", "0.1.0"},
                      {"extensions", {"binary_tensor_data", "model_repository"}}});
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::vector<DeviceMemoryStats> devices;
      for (int d = 0; d < metrics.devices(); ++d) {
        kilnrtMemStats st{};
        DeviceMemoryStats m;
        if (kilnrtGetMemStats(d, &st) == KILN_SUCCESS) m = {st.inUse, st.cached, st.peakInUse, st.reserved};
        devices.push_back(m);
      }
      std::map<std::string, ModelMemoryStats> models;
      for (const std::string& name : registry.loaded())
        if (auto m = registry.find(name)) models[name] = m->model().memory_stats();
      res.set_content(metrics.text(devices, models), "text/plain; version=0.0.4");
    });
    server.Get(std::string(kModel) + "/ready", [this](const httplib::Request& req, httplib::Response& res) {
      if (auto l = registry.find_llm(req.matches[1])) return send_json(res, {{"name", l->name()}, {"ready", true}});
      if (auto m = model_of(req, res)) send_json(res, {{"name", m->model().name()}, {"ready", true}});
    });
    server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array();
      for (const std::string& name : registry.loaded())
        if (registry.find_llm(name)) data.push_back({{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "kiln"}});
      send_json(res, {{"object", "list"}, {"data", data}});
    });
    server.Get(kModel, [this](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<ModelScheduler> m = model_of(req, res);
      if (!m) return;
      const ServedModel& model = m->model();
      json j{{"name", model.name()}, {"versions", {model.version()}}, {"platform", "kiln"}};
      j["inputs"] = json::array();
      j["outputs"] = json::array();
      for (const TensorInfo& t : model.inputs()) j["inputs"].push_back(tensor_metadata(t));
      for (const TensorInfo& t : model.outputs()) j["outputs"].push_back(tensor_metadata(t));
      j["max_batch_size"] = model.config().max_batch_size;
      send_json(res, j);
    });
    server.Post(std::string(kModel) + "/infer", [this](const httplib::Request& req, httplib::Response& res) { infer(req, res); });
    server.Post("/v2/repository/index", [this](const httplib::Request&, httplib::Response& res) {
      auto names = list_repository(registry.repository());
      if (!names.ok()) return send_status(res, names.status());
      json j = json::array();
      for (const std::string& name : *names) {
        auto m = registry.find(name);
        auto l = registry.find_llm(name);
        json e{{"name", name}, {"state", m || l ? "READY" : "UNAVAILABLE"}};
        if (m) e["version"] = m->model().version();
        if (l) e["version"] = l->version();
        j.push_back(std::move(e));
      }
      send_json(res, j);
    });
    server.Post(R"(/v2/repository/models/([^/]+)/(load|unload))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      Status s = req.matches[2] == "load" ? registry.load(name) : registry.unload(name);
      if (s.ok()) {
        send_json(res, json::object());
        const std::string line = str_format("kiln serve: %s model '%s'", req.matches[2] == "load" ? "loaded" : "unloaded", name.c_str());
        std::fprintf(stderr, "%s\n", line.c_str());
        if (options.log) options.log->write(line);
      } else {
        send_status(res, s);
      }
    });
    // Unmatched routes (404), bodies over the limit (413) and other errors httplib finds
    // itself get a protocol error body too.
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string what = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                         : res.status == 413 ? "the request body is larger than the server's limit"
                                             : "HTTP error " + std::to_string(res.status);
      res.set_content(error_body(what), kJson);
    });
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what += std::string(": ") + e.what();
      } catch (...) {
      }
      send_error(res, 500, what);
    });
    server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.count_http(res.status);
      if (tls_statuses != nullptr) tls_statuses->push_back(res.status);
      if (options.log)
        options.log->write(str_format("%s %s %s %d %zu bytes in, %zu out", req.remote_addr.c_str(), req.method.c_str(),
                                      printable(req.path).c_str(), res.status, req.body.size(), res.body.size()));
    });
  }
};

HttpServer::HttpServer(ModelRegistry& registry, Metrics& metrics, const HttpOptions& options)
    : impl_(std::make_unique<Impl>(registry, metrics, options)) {
  const size_t threads = static_cast<size_t>(options.threads), max_waiting = static_cast<size_t>(options.max_waiting);
  impl_->server.new_task_queue = [threads, max_waiting] {
    // Called by listen() on its thread: the pool's threads inherit its affinity and, for the
    // time they are started, its name.
    char name[16] = "kiln";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    pthread_setname_np(pthread_self(), "kiln-http");
    auto* pool = new BoundedConnectionQueue(threads, max_waiting);
    pthread_setname_np(pthread_self(), name);
    return pool;
  };
  impl_->server.set_payload_max_length(options.max_body_bytes);
  // A connection that sends nothing for read_timeout_s, within a request or before its next
  // one (also before the first), is closed, so that idle connections give their thread back;
  // a request that is not whole request_timeout_s after its first byte is cut, so that a
  // client trickling a byte at a time cannot keep a thread either (docs/serve.md, "Slow
  // clients"). Beyond the threads, max_waiting connections wait; more get a 503 at once.
  HttplibServer& server = impl_->server;
  server.limits.read_timeout_s = options.read_timeout_s;
  server.limits.keep_alive_timeout_s = options.read_timeout_s;
  server.limits.request_timeout_s = options.request_timeout_s;
  server.threads = threads;
  server.max_waiting = max_waiting;
  Impl* impl = impl_.get();
  server.on_busy = [impl] {
    impl->metrics.count_http(503);
    if (impl->options.log) impl->options.log->write("503 to a connection beyond --http-threads + --http-max-waiting");
  };
  server.on_request_deadline = [impl](const std::string& peer) {
    if (impl->options.log)
      impl->options.log->write(str_format("%s: request not whole %d s after its first byte: connection closed",
                                          peer.c_str(), impl->options.request_timeout_s));
  };
  // httplib writes a response's headers and body separately: with Nagle's algorithm the body
  // waits for the ACK of the headers, which the client delays (40 ms on Linux) - 50 ms a
  // request where the model takes 5.
  impl_->server.set_tcp_nodelay(true);
  impl_->routes();
}

HttpServer::~HttpServer() = default;

Expected<int> HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port == 0) {
    int port = impl_->server.bind_to_any_port(o.host);
    if (port < 0) return unavailable("cannot listen on %s: %s", o.host.c_str(), std::strerror(errno));
    return port;
  }
  if (!impl_->server.bind_to_port(o.host, o.port))
    return unavailable("cannot listen on %s:%d (%s)", o.host.c_str(), o.port,
                       errno ? std::strerror(errno) : "address in use or host not found");
  return o.port;
}

Status HttpServer::listen() {
  KILN_RETURN_IF_ERROR(pin_this_thread(impl_->options.cores), "the HTTP threads");
  impl_->server.listen_after_bind();
  return ok_status();
}

void HttpServer::stop() {
  impl_->ready = false;
  impl_->server.stop();
}

bool HttpServer::listening() const { return impl_->server.is_running(); }

std::string HttpServer::serve_bytes(std::string_view bytes, std::vector<int>* statuses, int max_requests) {
  ByteStream stream(bytes);
  tls_statuses = statuses;
  // As httplib's keep-alive loop over a socket: the last request allowed is answered with
  // "Connection: close"; a request that fails to parse or asks to close ends the connection.
  for (int i = 0; i < max_requests && !stream.at_end(); ++i) {
    bool closed = false;
    if (!impl_->server.process_request(stream, i + 1 == max_requests, closed, nullptr) || closed) break;
  }
  tls_statuses = nullptr;
  return std::move(stream.out());
}

}  // namespace kiln::serve
