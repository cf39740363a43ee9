// A full disk for the tests of writers, without filling a file system: while a FileSizeLimit
// lives, no file of this process grows past `bytes` (RLIMIT_FSIZE; a write past it fails with
// EFBIG, "File too large", SIGXFSZ being ignored meanwhile). Process-wide: for tests that run
// one at a time.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <cstddef>

namespace kiln::test {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(size_t bytes) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ignore, &saved_action_);
    getrlimit(RLIMIT_FSIZE, &saved_limit_);
    rlimit low = saved_limit_;
    low.rlim_cur = static_cast<rlim_t>(bytes);
    ok_ = setrlimit(RLIMIT_FSIZE, &low) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_limit_);
    sigaction(SIGXFSZ, &saved_action_, nullptr);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  struct sigaction saved_action_ {};
  rlimit saved_limit_{};
  bool ok_ = false;
};

}  // namespace kiln::test
