// Size-rotated log file (log_file.h).
#include "serve/log_file.h"

#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

namespace kiln::serve {

Expected<std::unique_ptr<LogFile>> LogFile::open(const std::string& path, int64_t max_bytes, int keep) {
  if (max_bytes < 1024) return invalid_argument("--log-max-bytes must be at least 1024 (got %lld)", static_cast<long long>(max_bytes));
  if (keep < 1 || keep > 100) return invalid_argument("--log-keep must be 1..100 (got %d)", keep);
  std::unique_ptr<LogFile> log(new LogFile(path, max_bytes, keep));
  log->file_ = std::fopen(path.c_str(), "a");
  if (!log->file_) return unavailable("cannot open the log file %s: %s", path.c_str(), std::strerror(errno));
  std::fseek(log->file_, 0, SEEK_END);
  log->bytes_ = std::ftell(log->file_);
  return log;
}

LogFile::~LogFile() {
  if (file_) std::fclose(file_);
}

void LogFile::write(const std::string& line) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm utc{};
  gmtime_r(&tv.tv_sec, &utc);
  char stamp[40];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::string text = std::string(stamp) + "." + std::to_string(1000 + tv.tv_usec / 1000).substr(1) + "Z " + line + "\n";
  std::lock_guard lock(mutex_);
  if (bytes_ > 0 && bytes_ + static_cast<int64_t>(text.size()) > max_bytes_) rotate();
  if (!file_) return;
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
  bytes_ += static_cast<int64_t>(text.size());
}

void LogFile::rotate() {
  std::fclose(file_);
  file_ = nullptr;
  std::remove((path_ + "." + std::to_string(keep_)).c_str());
  for (int k = keep_ - 1; k >= 1; --k)
    std::rename((path_ + "." + std::to_string(k)).c_str(), (path_ + "." + std::to_string(k + 1)).c_str());
  std::rename(path_.c_str(), (path_ + ".1").c_str());
  // "a": if the rename was refused, the old file goes on growing rather than being lost.
  file_ = std::fopen(path_.c_str(), "a");
  if (file_) {
    std::fseek(file_, 0, SEEK_END);
    bytes_ = std::ftell(file_);
  }
}

}  // namespace kiln::serve
