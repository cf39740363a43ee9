// Fuzz target: the HTTP request path of `kiln serve`. The input is the bytes a client sends on
// one connection; serve::HttpServer::serve_bytes runs them through cpp-httplib's request
// parser (request line, headers, Content-Length and chunked bodies, keep-alive), Kiln's routes
// and handlers, the KServe v2 request decoding (JSON and binary tensors), the checks against
// the model and the scheduler, down to an execution of a tiny model and the response.
//
// The repository is written once per process into a temporary directory and loaded on one
// device: "add" (z = x + y, float[B, 4], max_batch_size 4: batched) and "mixed" (s = a + a,
// int32[2, 3]; n = Not(f), bool[3]: fixed shapes, two dtypes). An input may unload or reload
// them through the repository routes; both are loaded again before the next input.
//
// Oracle, besides sanitizers: every request answered gets a status, and none is a 500 (an
// exception escaping a handler, or a checked request failing to execute on these models).
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kiln.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;

constexpr const char* kAdd = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  add (float[B, 4] x, float[B, 4] y) => (float[B, 4] z) {
    z = Add(x, y)
  }
)";
constexpr const char* kMixed = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  mixed (int32[2, 3] a, bool[3] f) => (int32[2, 3] s, bool[3] n) {
    s = Add(a, a)
    n = Not(f)
  }
)";
constexpr const char* kModels[] = {"add", "mixed"};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "serve_http fuzz target: %s\n", what.c_str());
  std::abort();
}

void write_model(const fs::path& repo, const char* name, const char* text, const char* config) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  if (!st.IsOK()) fail(std::string("bad model text: ") + st.ErrorMessage());
  fs::create_directories(repo / name / "1");
  std::ofstream(repo / name / "1" / "model.onnx", std::ios::binary) << m.SerializeAsString();
  std::ofstream(repo / name / "config.json") << config;
}

struct World {
  fs::path repo;
  std::unique_ptr<serve::Metrics> metrics;
  std::unique_ptr<serve::ModelRegistry> registry;
  std::unique_ptr<serve::HttpServer> server;
};

World* world = nullptr;

void teardown() {
  if (world == nullptr) return;
  world->registry->unload_all();  // joins the workers before the runtime goes away
  std::error_code ec;
  fs::remove_all(world->repo, ec);
}

void ensure_loaded() {
  for (const char* name : kModels) {
    if (world->registry->find(name)) continue;
    Status s = world->registry->load(name);
    if (!s.ok()) fail("cannot load model '" + std::string(name) + "': " + s.to_string());
  }
}

World& get_world() {
  if (world != nullptr) return *world;
  world = new World;  // kept for the process's life (teardown at exit)
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = (fs::path(tmp && *tmp ? tmp : "/tmp") / "kiln_fuzz_serve_XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) fail("cannot create a temporary directory");
  world->repo = templ;
  write_model(world->repo, "add", kAdd, R"({"max_batch_size": 4})");
  write_model(world->repo, "mixed", kMixed, "{}");
  if (kilnInit(nullptr) != KILN_SUCCESS) fail(std::string("kilnInit: ") + kilnGetRecentErrMsg());
  kilnrtContext context = nullptr;
  if (kilnrtSetDevice(0) != KILN_SUCCESS || kilnrtGetCurrentContext(&context) != KILN_SUCCESS)
    fail(std::string("device 0: ") + kilnGetRecentErrMsg());
  world->metrics = std::make_unique<serve::Metrics>(1);
  world->registry = std::make_unique<serve::ModelRegistry>(
      world->repo.string(), std::vector<kilnrtContext>{context}, serve::Scheduling::kDynamic, *world->metrics);
  serve::HttpOptions options;
  options.max_body_bytes = size_t{1} << 20;
  world->server = std::make_unique<serve::HttpServer>(*world->registry, *world->metrics, options);
  std::atexit(teardown);
  ensure_loaded();
  return *world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  World& w = get_world();
  std::vector<int> statuses;
  std::string out = w.server->serve_bytes(
      std::string_view(reinterpret_cast<const char*>(data), size), &statuses);
  for (int status : statuses) {
    if (status < 100 || status > 599 || status == 500)
      fail("HTTP status " + std::to_string(status) + "; the server wrote:\n" + out.substr(0, 2000));
  }
  ensure_loaded();  // an input that unloaded a model
  return 0;
}
