// Core lists and the pinning plan of `kiln serve --pin/--http-cores/--inference-cores`
// (src/serve/affinity.h); the threads' actual affinity is checked end to end in serve_test.py.
#include <gtest/gtest.h>

#include <thread>

#include "serve/affinity.h"

namespace kiln::serve {
namespace {

TEST(AffinityTest, CoreListsParseAndPrintAsProcDoes) {
  auto c = parse_core_list("6,0-3,2,9-10");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(*c, (std::vector<int>{0, 1, 2, 3, 6, 9, 10}));
  EXPECT_EQ(core_list_text(*c), "0-3,6,9-10");
  EXPECT_EQ(core_list_text({5}), "5");
  for (const char* bad : {"", "a", "1,", "3-1", "-1", "1-", "0-99999", "1.5"}) {
    auto r = parse_core_list(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(parse_core_list("3-1").status().to_string().find("reversed"), std::string::npos);
}

TEST(AffinityTest, AutoGivesTheLastEighthToHttpAndTheRestToInference) {
  auto two = plan_cores("auto", "", "", {0, 1});
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->http, (std::vector<int>{1}));
  EXPECT_EQ(two->inference, (std::vector<int>{0}));
  std::vector<int> sixteen;
  for (int i = 0; i < 16; ++i) sixteen.push_back(i);
  auto big = plan_cores("auto", "", "", sixteen);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->http, (std::vector<int>{14, 15}));
  EXPECT_EQ(big->inference.size(), 14u);
}

TEST(AffinityTest, OneListGivenLeavesTheOtherCoresToTheOtherSide) {
  auto p = plan_cores("", "0", "", {0, 1, 2, 3});  // a list alone means auto
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->http, (std::vector<int>{0}));
  EXPECT_EQ(p->inference, (std::vector<int>{1, 2, 3}));
  auto q = plan_cores("auto", "", "2-3", {0, 1, 2, 3});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->http, (std::vector<int>{0, 1}));
  auto off = plan_cores("", "", "", {0, 1});
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->http.empty() && off->inference.empty());
}

TEST(AffinityTest, BadPlansNameWhatIsWrong) {
  auto expect = [](Expected<CorePlan> p, const std::string& words) {
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().to_string().find(words), std::string::npos) << p.status().to_string();
  };
  expect(plan_cores("auto", "0-1", "1", {0, 1}), "share a core");
  expect(plan_cores("auto", "5", "", {0, 1}), "core 5 is not one this process may run on (0-1)");
  expect(plan_cores("auto", "", "", {0}), "needs a core for the HTTP threads and one for inference");
  expect(plan_cores("auto", "0-1", "", {0, 1}), "needs a core");
  expect(plan_cores("off", "0", "", {0, 1}), "--pin off pins nothing");
  expect(plan_cores("auto", "x", "", {0, 1}), "--http-cores");
}

TEST(AffinityTest, PinningAThreadShowsInItsAffinity) {
  const std::vector<int> allowed = allowed_cores();
  ASSERT_FALSE(allowed.empty());
  std::vector<int> seen;
  std::thread t([&] {
    ASSERT_TRUE(pin_this_thread({allowed.back()}).ok());
    seen = allowed_cores();
  });
  t.join();
  EXPECT_EQ(seen, (std::vector<int>{allowed.back()}));
  EXPECT_EQ(allowed_cores(), allowed);  // the calling thread is left alone
}

}  // namespace
}  // namespace kiln::serve
