// `kiln serve`: the KServe v2 / Triton HTTP inference server over a model repository
// (src/serve, docs/serve.md). Loads every model of the repository on every logical device,
// listens, and on SIGINT or SIGTERM stops accepting connections, answers the requests in
// flight and unloads.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime/device.h"
#include "serve/affinity.h"
#include "serve/http_server.h"
#include "serve/malloc_tuning.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct ServeArgs {
  std::string repository;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string devices;  // "cpu:N" or N; empty: KILN_DEVICES or 1
  int threads = 0;
  std::string scheduling = "dynamic";
  std::string prefetch = "on";
  std::string pin;  // off, auto; empty: auto when a core list is given, else off
  std::string http_cores, inference_cores;
  serve::CorePlan cores;  // from the three above
  std::string log_file;  // empty: messages on stdout/stderr only, no request lines
  int64_t log_max_bytes = int64_t{10} << 20;
  int log_keep = 5;
  int http_threads = 64;
  int http_read_timeout_s = 30;
  int http_request_timeout_s = 60;
  int http_max_waiting = 256;
  int64_t max_body_mb = 64;
  const CLI::Option* threads_opt = nullptr;
};

// --devices as a count: "cpu:N", "N", or 0 (KILN_DEVICES) when not given.
Expected<int> device_count(const std::string& spec) {
  if (spec.empty()) return 0;
  std::string text = spec.find_first_not_of("0123456789") == std::string::npos ? "cpu:" + spec : spec;
  KILN_ASSIGN_OR_RETURN(rt::DeviceConfig config, rt::parse_device_spec(text));
  return config.count;
}

// One of the server's own messages: on the console as before (tests and scripts read the
// "listening on" line from stdout) and, with --log-file, in the log.
void say(FILE* console, serve::LogFile* log, const std::string& line) {
  std::fprintf(console, "%s\n", line.c_str());
  std::fflush(console);
  if (log) log->write(line);
}

// Waits for SIGINT or SIGTERM (blocked in every thread, see serve()) and stops the server;
// returns when `done` is set without a signal.
void watch_signals(serve::HttpServer& server, serve::ModelRegistry& registry, serve::LogFile* log,
                   const std::atomic<bool>& done) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec tick{0, 200'000'000};
  while (!done.load()) {
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      say(stderr, log, str_format("kiln serve: %s: finishing the requests in flight, then stopping",
                                  sig == SIGINT ? "SIGINT" : "SIGTERM"));
      registry.stop_waiting();  // queued requests must not wait out their batching delay
      // A signal right after "listening" may come before the accept loop runs, when stopping
      // would not stop it (the server then served on and SIGTERM hung a CI run): wait for it.
      while (!done.load() && !server.listening()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      server.stop();
      return;
    }
  }
}

Status serve(const ServeArgs& args, int devices_wanted) {
  // Block the stop signals before any thread starts, so that every thread inherits the mask
  // and only the watcher's sigtimedwait receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<serve::LogFile> log_file;
  if (!args.log_file.empty()) {
    KILN_ASSIGN_OR_RETURN(log_file, serve::LogFile::open(args.log_file, args.log_max_bytes, args.log_keep));
  }
  serve::LogFile* log = log_file.get();
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> names, serve::list_repository(args.repository));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::init({.devices = devices_wanted, .threads = args.threads}));
  // After the runtime's own malloc policy (kilnInit), which it overrides for a server.
  const std::string malloc_policy = serve::apply_server_malloc_policy();
  std::vector<std::unique_ptr<DeviceGuard>> guards;
  std::vector<kilnrtContext> contexts;
  for (int d = 0; d < runtime->device_count(); ++d) {
    KILN_ASSIGN_OR_RETURN(auto guard, DeviceGuard::set(d), "device %d", d);
    contexts.push_back(guard->context());
    guards.push_back(std::move(guard));
  }
  const auto scheduling = args.scheduling == "static" ? serve::Scheduling::kStatic : serve::Scheduling::kDynamic;
  serve::Metrics metrics(runtime->device_count());
  serve::ModelRegistry registry(args.repository, contexts, scheduling, metrics,
                                {.prefetch = args.prefetch == "on", .cores = args.cores.inference});
  for (const std::string& name : names) {
    auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(registry.load(name));
    if (auto l = registry.find_llm(name)) {
      const llm::DecoderConfig& c = l->decoder();
      say(stdout, log, str_format("kiln serve: loaded decoder model '%s' version %s (%s, %lld layers, vocab %lld, context %lld) in "
                  "%.0f ms, served at /v1/completions", name.c_str(), l->version().c_str(), c.style.c_str(),
                  (long long)c.layers, (long long)c.vocab, (long long)c.context,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()));
      continue;
    }
    const serve::ServedModel& m = registry.find(name)->model();
    say(stdout, log, str_format("kiln serve: loaded model '%s' version %s (%zu input%s, max_batch_size %d) in %.0f ms", name.c_str(),
                m.version().c_str(), m.inputs().size(), m.inputs().size() == 1 ? "" : "s", m.config().max_batch_size,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()));
  }
  if (names.empty()) say(stdout, log, "kiln serve: the repository holds no models yet");
  serve::HttpOptions options;
  options.host = args.host;
  options.port = args.port;
  options.threads = args.http_threads;
  options.read_timeout_s = args.http_read_timeout_s;
  options.request_timeout_s = args.http_request_timeout_s;
  options.max_waiting = args.http_max_waiting;
  options.max_body_bytes = static_cast<size_t>(args.max_body_mb) << 20;
  options.cores = args.cores.http;
  options.log = log;
  serve::HttpServer server(registry, metrics, options);
  KILN_ASSIGN_OR_RETURN(int port, server.bind());
  if (!args.cores.http.empty())
    say(stdout, log, str_format("kiln serve: HTTP threads on cores %s, inference on cores %s",
                                serve::core_list_text(args.cores.http).c_str(),
                                serve::core_list_text(args.cores.inference).c_str()));
  say(stdout, log, str_format("kiln serve: listening on http://%s:%d (%d device%s x %d thread%s, %s scheduling, prefetch %s%s%s)", args.host.c_str(),
              port, runtime->device_count(), runtime->device_count() == 1 ? "" : "s", runtime->threads_per_device(),
              runtime->threads_per_device() == 1 ? "" : "s", args.scheduling.c_str(), args.prefetch.c_str(),
              malloc_policy.empty() ? "" : ", ", malloc_policy.c_str()));
  // From here this thread is the accept loop: on the HTTP cores, as the watcher it starts.
  KILN_RETURN_IF_ERROR(serve::pin_this_thread(args.cores.http), "the HTTP threads");
  std::atomic<bool> done{false};
  std::thread watcher([&] { watch_signals(server, registry, log, done); });
  Status listened = server.listen();
  done = true;
  watcher.join();
  registry.unload_all();
  KILN_RETURN_IF_ERROR(listened);
  say(stdout, log, "kiln serve: stopped");
  // Models unload before the devices are reset and the runtime finalised (guards, runtime).
  return ok_status();
}

int run_serve(ServeArgs args) {
  if (args.port < 0 || args.port > 65535)
    return usage_error("serve", str_format("--http-port must be 0..65535 (got %d)", args.port));
  if (args.http_threads < 1 || args.http_threads > 4096)
    return usage_error("serve", str_format("--http-threads must be 1..4096 (got %d)", args.http_threads));
  if (args.http_read_timeout_s < 1 || args.http_read_timeout_s > 3600)
    return usage_error("serve", str_format("--http-read-timeout must be 1..3600 seconds (got %d)", args.http_read_timeout_s));
  if (args.http_request_timeout_s < 1 || args.http_request_timeout_s > 86400)
    return usage_error("serve", str_format("--http-request-timeout must be 1..86400 seconds (got %d)",
                                           args.http_request_timeout_s));
  if (args.http_max_waiting < 0 || args.http_max_waiting > 65536)
    return usage_error("serve", str_format("--http-max-waiting must be 0..65536 (got %d)", args.http_max_waiting));
  if (args.max_body_mb < 1 || args.max_body_mb > 65536)
    return usage_error("serve", str_format("--max-body-mb must be 1..65536 (got %lld)", static_cast<long long>(args.max_body_mb)));
  // Pinning first: the devices split the cores this thread may run on when the runtime
  // starts (the inference cores), and --threads is checked against them.
  auto cores = serve::plan_cores(args.pin, args.http_cores, args.inference_cores, serve::allowed_cores());
  if (!cores.ok()) return usage_error("serve", cores.status().to_string());
  args.cores = *cores;
  if (Status s = serve::pin_this_thread(args.cores.inference); !s.ok()) return report_error("serve", s.to_string());
  auto devices = device_count(args.devices);
  if (!devices.ok()) return usage_error("serve", "--devices: " + devices.status().to_string());
  std::string error;
  args.threads = checked_threads("serve", args.threads_opt, args.threads, *devices, &error);
  if (!error.empty()) return usage_error("serve", error);
  Status s = serve(args, *devices);
  return s.ok() ? 0 : report_error("serve", s.to_string());
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  app.add_option("--model-repository", args->repository,
                 "Model repository: DIR/<model>/<version>/model.kiln or model.onnx, optional DIR/<model>/config.json "
                 "(docs/serve.md)")
      ->required();
  app.add_option("--http-port", args->port, "Port to listen on; 0 picks a free one (default 8000)");
  app.add_option("--host", args->host, "Address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)");
  app.add_option("--devices", args->devices, "Logical CPU devices, as cpu:N or N (default: KILN_DEVICES or 1)");
  args->threads_opt =
      app.add_option("--threads", args->threads, "Threads per device, at most its cores (default: the device's cores)");
  app.add_option("--scheduling", args->scheduling,
                 "dynamic: idle devices take the next batch from a shared queue (default); static: requests are "
                 "assigned to devices round-robin on arrival")
      ->check(CLI::IsMember({"dynamic", "static"}));
  app.add_option("--prefetch", args->prefetch,
                 "on: a worker copies the next batch's inputs while the current batch executes (default); off: "
                 "copy, execute, answer, one batch after another")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--pin", args->pin,
                 "off: threads run on any core; auto: HTTP threads on the last ceil(n/8) cores (or --http-cores), "
                 "inference on the others (or --inference-cores) (default: auto when a core list is given, else off)")
      ->check(CLI::IsMember({"off", "auto"}));
  app.add_option("--http-cores", args->http_cores,
                 "Cores of the HTTP threads, as 0-3,6 (default with --pin auto: the cores not for inference)");
  app.add_option("--inference-cores", args->inference_cores,
                 "Cores the devices split and the workers run on, as 0-3,6 (default with --pin auto: the cores not "
                 "for HTTP)");
  app.add_option("--log-file", args->log_file,
                 "Also write the server's messages and one line per HTTP request to this file, rotated by size");
  app.add_option("--log-max-bytes", args->log_max_bytes,
                 "Size at which the log file is rotated: PATH -> PATH.1 -> ... (default 10485760, at least 1024)");
  app.add_option("--log-keep", args->log_keep, "Rotated log files kept, PATH.1 .. PATH.K (default 5, 1..100)");
  app.add_option("--http-threads", args->http_threads,
                 "HTTP connections served at once, one thread each (default 64)");
  app.add_option("--http-read-timeout", args->http_read_timeout_s,
                 "Seconds a connection may send nothing, within a request or before the next, before it is closed "
                 "(default 30)");
  app.add_option("--http-request-timeout", args->http_request_timeout_s,
                 "Seconds a request (line, headers and body) may take to arrive, from its first byte, before its "
                 "connection is closed: a client trickling bytes cannot keep a thread (default 60)");
  app.add_option("--http-max-waiting", args->http_max_waiting,
                 "Connections that may wait for an HTTP thread when all are taken; more get 503 at once (default 256)");
  app.add_option("--max-body-mb", args->max_body_mb, "Largest request body accepted, in MiB; larger gets 413 (default 64)");
  return [args] { return run_serve(*args); };
}

KILN_REGISTER_SUBCOMMAND("serve", "Serve a model repository over the KServe v2 HTTP protocol (Triton-compatible)", setup);

}  // namespace
}  // namespace kiln::tools
