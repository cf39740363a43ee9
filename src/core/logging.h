// Logging with levels. KILN_LOG_LEVEL=error|warning|info|debug|trace (or 0..4) sets the
// threshold (default warning). Messages go to stderr, one line each.
#pragma once

#include "core/status.h"

namespace kiln {

enum class LogLevel : int { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
inline bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(log_level()); }
void log_message(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace kiln

// KILN_LOG(kInfo, "loaded %s in %.1f ms", path, ms): the check is one branch when off.
#define KILN_LOG(level, ...)                                                        \
  do {                                                                              \
    if (::kiln::log_enabled(::kiln::LogLevel::level))                               \
      ::kiln::log_message(::kiln::LogLevel::level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
