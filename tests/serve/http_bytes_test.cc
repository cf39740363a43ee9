// HttpServer::serve_bytes: one connection's bytes through httplib's parser and the routes
// without a socket (what the serve_http fuzz target drives), over a repository with no model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace kiln::serve {
namespace {

class HttpBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = std::filesystem::temp_directory_path() / ("kiln_http_bytes_" + std::to_string(getpid()));
    std::filesystem::create_directories(repo_ / "present_not_loaded");
    registry_ = std::make_unique<ModelRegistry>(repo_.string(), std::vector<kilnrtContext>{}, Scheduling::kDynamic,
                                                metrics_);
    HttpOptions options;
    options.max_body_bytes = 1024;
    server_ = std::make_unique<HttpServer>(*registry_, metrics_, options);
  }
  void TearDown() override {
    server_.reset();
    registry_.reset();
    std::filesystem::remove_all(repo_);
  }
  std::string serve(const std::string& bytes) {
    statuses_.clear();
    return server_->serve_bytes(bytes, &statuses_);
  }

  std::filesystem::path repo_;
  Metrics metrics_{1};
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<HttpServer> server_;
  std::vector<int> statuses_;
};

TEST_F(HttpBytesTest, KeepAliveRequestsAreAnsweredInOrder) {
  std::string out = serve(
      "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /v2/models/nope HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v2/models/present_not_loaded/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
      "GET /v2 HTTP/1.1\r\nConnection: close\r\n\r\n"
      "GET /v2/health/live HTTP/1.1\r\n\r\n");  // after the close: never read
  EXPECT_EQ(statuses_, (std::vector<int>{200, 404, 400, 200}));
  EXPECT_NE(out.find(R"({"live":true})"), std::string::npos) << out;
  EXPECT_NE(out.find("unknown model 'nope'"), std::string::npos) << out;
  EXPECT_NE(out.find("is not loaded"), std::string::npos) << out;
}

TEST_F(HttpBytesTest, MalformedAndOversizedRequestsGetErrorsNotCrashes) {
  // A bad request line is answered and the connection kept: the empty line after it is one more.
  serve("GET\r\n\r\n");
  EXPECT_EQ(statuses_, (std::vector<int>{400, 400}));
  std::string out = serve("DELETE /v2/models/x HTTP/1.1\r\n\r\n");
  EXPECT_EQ(statuses_, (std::vector<int>{404}));
  EXPECT_NE(out.find("no such endpoint"), std::string::npos) << out;
  out = serve("POST /v2/models/x/infer HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, '{'));
  EXPECT_EQ(statuses_, (std::vector<int>{413}));
  // A body shorter than its Content-Length: the connection ends, nothing waits for the rest.
  serve("POST /v2/models/x/infer HTTP/1.1\r\nContent-Length: 100\r\n\r\n{}");
  EXPECT_EQ(statuses_, (std::vector<int>{400}));
  EXPECT_EQ(serve(""), "");
  EXPECT_TRUE(statuses_.empty());
}

// Bytes that are not UTF-8 in the path or a header end up in error messages: nlohmann::json
// throws on them when the body is written: a 500 from a handler, and out of httplib's error
// handler an exception that stopped the server (a single request; the serve_http fuzz
// target's regressions).
TEST_F(HttpBytesTest, BytesThatAreNotUtf8GetTheirErrorNotAnException) {
  std::string out = serve("GET /\xff HTTP/1.1\r\n\r\n");
  EXPECT_EQ(statuses_, (std::vector<int>{404}));
  EXPECT_NE(out.find("no such endpoint: GET /\xEF\xBF\xBD"), std::string::npos) << out;
  out = serve("GET /v2/models/%ff HTTP/1.1\r\n\r\n");
  EXPECT_EQ(statuses_, (std::vector<int>{404}));
  EXPECT_NE(out.find("unknown model '\xEF\xBF\xBD'"), std::string::npos) << out;
}

TEST_F(HttpBytesTest, AtMostMaxRequestsAreServedPerConnection) {
  std::string many;
  for (int i = 0; i < 40; ++i) many += "GET /v2/health/live HTTP/1.1\r\n\r\n";
  statuses_.clear();
  server_->serve_bytes(many, &statuses_, 3);
  EXPECT_EQ(statuses_.size(), 3u);
}

}  // namespace
}  // namespace kiln::serve
