// Status: canonical codes, messages and context chains.
#include "core/status.h"

#include <cstdio>
#include <cstdlib>

namespace kiln {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
  }
  return "unknown";
}

std::string str_vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::string out(static_cast<size_t>(n), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

std::string str_format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = str_vformat(fmt, args);
  va_end(args);
  return s;
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_.reset(new State{code, std::move(message), {}});
}

Status::Status(const Status& other) {
  if (other.state_) state_.reset(new State(*other.state_));
}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_.reset(other.state_ ? new State(*other.state_) : nullptr);
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (!state_) return "ok";
  return state_->context + state_->message;
}

Status& Status::add_context_str(std::string context) {
  if (state_ && !context.empty()) state_->context = context + ": " + state_->context;
  return *this;
}

Status& Status::add_context(const char* fmt, ...) {
  if (!state_) return *this;
  va_list args;
  va_start(args, fmt);
  std::string ctx = str_vformat(fmt, args);
  va_end(args);
  return add_context_str(std::move(ctx));
}

#define KILN_DEFINE_STATUS_CTOR(fn, code)  \
  Status fn(const char* fmt, ...) {        \
    va_list args;                          \
    va_start(args, fmt);                   \
    std::string msg = str_vformat(fmt, args); \
    va_end(args);                          \
    return Status(code, std::move(msg));   \
  }
KILN_DEFINE_STATUS_CTOR(invalid_argument, StatusCode::kInvalidArgument)
KILN_DEFINE_STATUS_CTOR(not_found, StatusCode::kNotFound)
KILN_DEFINE_STATUS_CTOR(out_of_range, StatusCode::kOutOfRange)
KILN_DEFINE_STATUS_CTOR(failed_precondition, StatusCode::kFailedPrecondition)
KILN_DEFINE_STATUS_CTOR(resource_exhausted, StatusCode::kResourceExhausted)
KILN_DEFINE_STATUS_CTOR(unavailable, StatusCode::kUnavailable)
KILN_DEFINE_STATUS_CTOR(internal_error, StatusCode::kInternal)
KILN_DEFINE_STATUS_CTOR(data_loss, StatusCode::kDataLoss)
KILN_DEFINE_STATUS_CTOR(unsupported, StatusCode::kUnsupported)
KILN_DEFINE_STATUS_CTOR(deadline_exceeded, StatusCode::kDeadlineExceeded)
#undef KILN_DEFINE_STATUS_CTOR

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "kiln internal error at %s:%d: check failed: %s %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace kiln
