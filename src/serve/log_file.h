// The server's log file, rotated by size (`kiln serve --log-file PATH --log-max-bytes N
// --log-keep K`): a line that would take PATH past N bytes first renames PATH to PATH.1
// (PATH.1 to PATH.2, ..., dropping PATH.K), then starts a new PATH. So at most (K + 1) x N
// bytes of log are kept, whatever the server's uptime. Lines are written whole, one write
// each, under a lock (HTTP threads log concurrently) and flushed at once (a crash loses none).
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/status.h"

namespace kiln::serve {

class LogFile {
 public:
  // Opens PATH for appending (an existing file keeps its lines and counts toward max_bytes).
  // invalid_argument for max_bytes < 1024 or keep < 1 (or > 100); unavailable when PATH
  // cannot be opened.
  static Expected<std::unique_ptr<LogFile>> open(const std::string& path, int64_t max_bytes, int keep);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Appends one line, prefixed with the UTC time (ISO 8601, milliseconds); a newline is added.
  // A failed rotation (a rename refused) keeps writing to the current file.
  void write(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  LogFile(std::string path, int64_t max_bytes, int keep) : path_(std::move(path)), max_bytes_(max_bytes), keep_(keep) {}
  void rotate();  // called with mutex_ held
  const std::string path_;
  const int64_t max_bytes_;
  const int keep_;
  std::mutex mutex_;
  FILE* file_ = nullptr;
  int64_t bytes_ = 0;  // in the current file
};

}  // namespace kiln::serve
