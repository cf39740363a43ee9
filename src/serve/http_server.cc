// The KServe v2 HTTP endpoints (http_server.h).
#include "serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>

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
  res.set_content(j.dump(), kJson);
}

json tensor_metadata(const TensorInfo& t) {
  return {{"name", t.name}, {"datatype", kserve_datatype(t.dtype)}, {"shape", t.dims}};
}

}  // namespace

struct HttpServer::Impl {
  Impl(ModelRegistry& r, Metrics& m, const HttpOptions& o) : registry(r), metrics(m), options(o) {}
  ModelRegistry& registry;
  Metrics& metrics;
  HttpOptions options;
  httplib::Server server;
  std::atomic<bool> ready{true};

  // The loaded model named by the URL (and its version, when the URL gives one); otherwise
  // sends 404 (no such model in the repository, or not that version) or 400 (in the
  // repository but not loaded) and returns nullptr.
  std::shared_ptr<ModelScheduler> model_of(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    std::shared_ptr<ModelScheduler> m = registry.find(name);
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
    KILN_ASSIGN_OR_RETURN(std::future<InferResult> future, m.submit(std::move(request)));
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
      res.set_content(metrics.text(), "text/plain; version=0.0.4");
    });
    server.Get(std::string(kModel) + "/ready", [this](const httplib::Request& req, httplib::Response& res) {
      if (auto m = model_of(req, res)) send_json(res, {{"name", m->model().name()}, {"ready", true}});
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
        json e{{"name", name}, {"state", m ? "READY" : "UNAVAILABLE"}};
        if (m) e["version"] = m->model().version();
        j.push_back(std::move(e));
      }
      send_json(res, j);
    });
    server.Post(R"(/v2/repository/models/([^/]+)/(load|unload))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      Status s = req.matches[2] == "load" ? registry.load(name) : registry.unload(name);
      if (s.ok()) {
        send_json(res, json::object());
        std::fprintf(stderr, "kiln serve: %s model '%s'\n", req.matches[2] == "load" ? "loaded" : "unloaded", name.c_str());
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
    server.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics.count_http(res.status); });
  }
};

HttpServer::HttpServer(ModelRegistry& registry, Metrics& metrics, const HttpOptions& options)
    : impl_(std::make_unique<Impl>(registry, metrics, options)) {
  const int threads = options.threads;
  impl_->server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  impl_->server.set_payload_max_length(options.max_body_bytes);
  impl_->server.set_read_timeout(options.read_timeout_s, 0);
  impl_->server.set_keep_alive_max_count(1000);
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

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::stop() {
  impl_->ready = false;
  impl_->server.stop();
}

}  // namespace kiln::serve
