// Logging with levels read once from KILN_LOG_LEVEL.
#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("KILN_LOG_LEVEL");
  if (!v || !*v) return LogLevel::kWarning;
  static const char* kNames[] = {"error", "warning", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i)
    if (strcasecmp(v, kNames[i]) == 0) return static_cast<LogLevel>(i);
  if (v[0] >= '0' && v[0] <= '4' && v[1] == '\0') return static_cast<LogLevel>(v[0] - '0');
  return LogLevel::kWarning;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }

void log_message(LogLevel level, const char* file, int line, const char* fmt, ...) {
  static const char kTag[] = {'E', 'W', 'I', 'D', 'T'};
  va_list args;
  va_start(args, fmt);
  std::string msg = str_vformat(fmt, args);
  va_end(args);
  const char* base = std::strrchr(file, '/');
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[kiln %c %s:%d] %s\n", kTag[static_cast<int>(level)], base ? base + 1 : file,
               line, msg.c_str());
}

}  // namespace kiln
