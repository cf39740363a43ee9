// Resource exhaustion at the bootstrap: with no file descriptor left (RLIMIT_NOFILE), joining
// a world fails at once with an error naming the limit, not at the deadline with a
// misleading one, and works again once descriptors are back.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "comm/bootstrap.h"
#include "comm/transport.h"

namespace kiln::comm {
namespace {

using std::chrono::milliseconds;

// Lowers the soft RLIMIT_NOFILE to the lowest free descriptor number: no new descriptor can be
// had until the destructor restores the limit.
class NoFreeDescriptors {
 public:
  NoFreeDescriptors() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    int lowest_free = 0;
    while (fcntl(lowest_free, F_GETFD) != -1) ++lowest_free;
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(lowest_free);
    ok_ = setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~NoFreeDescriptors() { setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

TEST(Exhaustion, JoinWithoutFileDescriptorsFailsAtOnceNamingTheLimitAndRecovers) {
  Expected<RootInfo> root = start_root("127.0.0.1:0");
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  Status s;
  const auto start = Clock::now();
  {
    NoFreeDescriptors limit;
    ASSERT_TRUE(limit.ok());
    s = join_world(JoinOptions{0, 1, *root, false}, Clock::now() + milliseconds(3000)).status();
  }
  EXPECT_LT(Clock::now() - start, milliseconds(1000)) << "waited for the deadline: " << s.to_string();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Too many open files"), std::string::npos) << s.to_string();

  // Recovered: the same process joins a world once descriptors are back.
  Expected<RootInfo> again = start_root("127.0.0.1:0");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  Expected<std::unique_ptr<Transport>> t = join_world(JoinOptions{0, 1, *again, false}, Clock::now() + milliseconds(3000));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
}

TEST(Exhaustion, ConnectWithoutFileDescriptorsIsResourceExhaustedAtOnce) {
  int port = 0;
  Expected<int> listener = tcp_listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(listener.ok());
  Expected<int> fd = resource_exhausted("unset");
  const auto start = Clock::now();
  {
    NoFreeDescriptors limit;
    ASSERT_TRUE(limit.ok());
    fd = tcp_connect("127.0.0.1:" + std::to_string(port), Clock::now() + milliseconds(3000));
  }
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kResourceExhausted) << fd.status().to_string();
  EXPECT_NE(fd.status().message().find("Too many open files"), std::string::npos) << fd.status().to_string();
  Expected<int> back = tcp_connect("127.0.0.1:" + std::to_string(port), Clock::now() + milliseconds(3000));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ::close(*back);
  ::close(*listener);
}

}  // namespace
}  // namespace kiln::comm
