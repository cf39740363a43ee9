// Status, Expected and the propagation macros.
#include "core/status.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

Status fails_with_context() {
  KILN_RETURN_IF_ERROR(invalid_argument("weight rank %d, expected 4", 3), "node '%s'", "conv1");
  return ok_status();
}

Expected<int> half_of(int x) {
  if (x % 2) return invalid_argument("%d is odd", x);
  return x / 2;
}

Status quarter(int x, int* out) {
  KILN_ASSIGN_OR_RETURN(int h, half_of(x), "halving %d", x);
  KILN_ASSIGN_OR_RETURN(*out, half_of(h));
  return ok_status();
}

TEST(StatusTest, OkIsCheapAndEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(StatusTest, ContextChainsOutermostFirst) {
  Status s = fails_with_context();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "node 'conv1': weight rank 3, expected 4");
}

TEST(StatusTest, AssignOrReturnUnwrapsAndPropagates) {
  int out = 0;
  EXPECT_TRUE(quarter(12, &out).ok());
  EXPECT_EQ(out, 3);
  Status s = quarter(6, &out);
  EXPECT_EQ(s.to_string(), "3 is odd");
  s = quarter(5, &out);
  EXPECT_EQ(s.to_string(), "halving 5: 5 is odd");
}

}  // namespace
}  // namespace kiln

#include "core/logging.h"

namespace kiln {
namespace {

TEST(LoggingTest, LevelGatesMessages) {
  LogLevel saved = log_level();
  set_log_level(LogLevel::kWarning);
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  EXPECT_TRUE(log_enabled(LogLevel::kWarning));
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  set_log_level(LogLevel::kTrace);
  EXPECT_TRUE(log_enabled(LogLevel::kDebug));
  set_log_level(saved);
}

}  // namespace
}  // namespace kiln
