// Status and Expected<T>: how every internal Kiln function reports failure.
//
// OK costs one null pointer. A failed Status carries a canonical code, a message
// naming the thing at fault, and a chain of context lines added as it propagates
// (KILN_RETURN_IF_ERROR(expr, "while loading %s", name)). Kiln code does not throw.
#pragma once

#include <cstdarg>
#include <memory>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kInternal,
  kDataLoss,
  kUnsupported,
  kDeadlineExceeded,
};

const char* status_code_name(StatusCode code);

// printf-style formatting into a std::string.
std::string str_format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string str_vformat(const char* fmt, va_list args);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status ok_status() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without context.
  const std::string& message() const;
  // Message with the context chain, outermost context first:
  // "while compiling model.onnx: node 'conv1' (Conv): weight rank 3, expected 4".
  std::string to_string() const;

  // Adds a context line (printf-style). Returns *this for chaining.
  Status& add_context(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  Status& add_context_str(std::string context);
  void ignore_error() const {}

 private:
  struct State {
    StatusCode code;
    std::string message;
    std::string context;  // "outer: inner: " prefix, built as the error propagates
  };
  std::unique_ptr<State> state_;
};

inline Status ok_status() { return Status(); }

// Constructors for the canonical codes, printf-style.
Status invalid_argument(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status not_found(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status out_of_range(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status failed_precondition(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status resource_exhausted(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status unavailable(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status internal_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status data_loss(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status unsupported(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status deadline_exceeded(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {}         // NOLINT: implicit by design
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The error; OK if there is a value.
  Status status() const { return ok() ? Status() : std::get<1>(v_); }
  Status take_status() && { return ok() ? Status() : std::move(std::get<1>(v_)); }

 private:
  std::variant<T, Status> v_;
};

// Aborts with file and line: for Kiln bugs, never for bad input.
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Returns the Status of `expr` if it failed, adding optional printf-style context.
#define KILN_RETURN_IF_ERROR(expr, ...)                                \
  do {                                                                 \
    ::kiln::Status kiln_status_ = (expr);                              \
    if (!kiln_status_.ok()) {                                          \
      __VA_OPT__(kiln_status_.add_context(__VA_ARGS__);)               \
      return kiln_status_;                                             \
    }                                                                  \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr, ...)                \
  auto tmp = (expr);                                                   \
  if (!tmp.ok()) {                                                     \
    ::kiln::Status kiln_s_ = std::move(tmp).take_status();             \
    __VA_OPT__(kiln_s_.add_context(__VA_ARGS__);)                      \
    return kiln_s_;                                                    \
  }                                                                    \
  lhs = std::move(tmp).value()

// KILN_ASSIGN_OR_RETURN(auto x, make_x(), "while making x"): unwraps an Expected.
#define KILN_ASSIGN_OR_RETURN(lhs, expr, ...) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_expected_, __LINE__), lhs, expr __VA_OPT__(, ) __VA_ARGS__)

#define KILN_CHECK(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::kiln::check_failed(__FILE__, __LINE__, #cond, ::kiln::str_format("" __VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define KILN_DCHECK(cond, ...) \
  do {                         \
  } while (0)
#else
#define KILN_DCHECK(cond, ...) KILN_CHECK(cond, __VA_ARGS__)
#endif
