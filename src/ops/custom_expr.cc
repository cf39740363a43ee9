// Custom-op compute expressions: parser, checks, printer, binding, evaluation, activation match.
#include "ops/custom_expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln::ops {
namespace {

constexpr int kMaxInputs = 8;
constexpr size_t kMaxDepth = 64;

struct FnSpec {
  const char* name;
  int arity;
  bool boolean;  // a comparison: only select's condition
};

const FnSpec kFns[] = {
    {"neg", 1, false},     {"exp", 1, false},  {"log", 1, false},  {"sqrt", 1, false}, {"tanh", 1, false},
    {"erf", 1, false},     {"abs", 1, false},  {"relu", 1, false}, {"sigmoid", 1, false},
    {"softplus", 1, false}, {"add", 2, false}, {"sub", 2, false},  {"mul", 2, false},  {"div", 2, false},
    {"min", 2, false},     {"max", 2, false},  {"lt", 2, true},    {"le", 2, true},    {"gt", 2, true},
    {"ge", 2, true},       {"eq", 2, true},    {"ne", 2, true},    {"select", 3, false},
};

const FnSpec* find_fn(const std::string& name) {
  for (const FnSpec& f : kFns)
    if (name == f.name) return &f;
  return nullptr;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Expected<CustomExpr> parse_all() {
    KILN_ASSIGN_OR_RETURN(CustomExpr e, parse(0, false));
    skip_space();
    if (pos_ != s_.size()) return error("unexpected text after the expression");
    return e;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("compute expression, offset %zu: %s (in \"%.*s\")", pos_, what.c_str(),
                            static_cast<int>(std::min<size_t>(s_.size(), 200)), s_.data());
  }

  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }

  std::string atom() {
    size_t start = pos_;
    while (pos_ < s_.size() && !std::isspace(static_cast<unsigned char>(s_[pos_])) && s_[pos_] != '(' &&
           s_[pos_] != ')')
      ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // `want_bool`: this operand is select's condition (a comparison), else a float value.
  Expected<CustomExpr> parse(size_t depth, bool want_bool) {
    if (depth > kMaxDepth) return error("nested deeper than 64");
    skip_space();
    if (pos_ >= s_.size()) return error("the expression ends early");
    CustomExpr e;
    if (s_[pos_] == '(') {
      ++pos_;
      skip_space();
      const size_t name_at = pos_;
      e.kind = CustomExpr::Kind::kCall;
      e.name = atom();
      const FnSpec* f = find_fn(e.name);
      if (!f) {
        pos_ = name_at;
        return error("unknown function '" + e.name + "'");
      }
      if (f->boolean != want_bool) {
        pos_ = name_at;
        return error(f->boolean ? "a comparison ('" + e.name + "') stands only as select's condition"
                                : "select's condition must be a comparison (lt le gt ge eq ne), got '" + e.name + "'");
      }
      for (int i = 0; i < f->arity; ++i) {
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == ')')
          return error("'" + e.name + "' takes " + std::to_string(f->arity) + " operand(s), got " + std::to_string(i));
        KILN_ASSIGN_OR_RETURN(CustomExpr a, parse(depth + 1, e.name == "select" && i == 0));
        e.args.push_back(std::move(a));
      }
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ')')
        return error("'" + e.name + "' takes " + std::to_string(f->arity) + " operand(s); expected ')'");
      ++pos_;
      return e;
    }
    if (s_[pos_] == ')') return error("unexpected ')'");
    if (want_bool) return error("select's condition must be a comparison, as (lt a b)");
    const size_t at = pos_;
    std::string a = atom();
    const unsigned char c0 = static_cast<unsigned char>(a[0]);
    if (std::isdigit(c0) || a[0] == '-' || a[0] == '+' || a[0] == '.') {
      char* end = nullptr;
      e.kind = CustomExpr::Kind::kConst;
      e.value = std::strtod(a.c_str(), &end);
      if (end != a.c_str() + a.size() || !std::isfinite(e.value)) {
        pos_ = at;
        return error("'" + a + "' is not a finite number");
      }
      return e;
    }
    if (!(std::isalpha(c0) || a[0] == '_')) {
      pos_ = at;
      return error("unexpected '" + a + "'");
    }
    for (char c : a)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
        pos_ = at;
        return error("'" + a + "' is not an identifier");
      }
    if (a.size() >= 2 && a[0] == 'x' && std::all_of(a.begin() + 1, a.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      if (a.size() > 3 || std::atoi(a.c_str() + 1) >= kMaxInputs) {
        pos_ = at;
        return error("input '" + a + "': at most 8 inputs, x0 to x7");
      }
      e.kind = CustomExpr::Kind::kInput;
      e.input = std::atoi(a.c_str() + 1);
      return e;
    }
    if (find_fn(a)) {
      pos_ = at;
      return error("'" + a + "' is a function: write (" + a + " ...)");
    }
    e.kind = CustomExpr::Kind::kAttr;
    e.name = a;
    return e;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

float sigmoid(float x) { return x >= 0 ? 1.f / (1.f + std::exp(-x)) : std::exp(x) / (1.f + std::exp(x)); }

bool is_input0(const CustomExpr& e) { return e.kind == CustomExpr::Kind::kInput && e.input == 0; }
bool is_call(const CustomExpr& e, const char* f) { return e.kind == CustomExpr::Kind::kCall && e.name == f; }
bool is_const(const CustomExpr& e, double* v) {
  if (e.kind != CustomExpr::Kind::kConst) return false;
  *v = e.value;
  return true;
}

// c * x0 or x0 * c (c a constant), or x0 itself (c = 1).
bool scaled_input0(const CustomExpr& e, double* c) {
  if (is_input0(e)) {
    *c = 1;
    return true;
  }
  if (!is_call(e, "mul")) return false;
  if (is_input0(e.args[0]) && is_const(e.args[1], c)) return true;
  return is_input0(e.args[1]) && is_const(e.args[0], c);
}

}  // namespace

Expected<CustomExpr> parse_custom_expr(std::string_view text) { return Parser(text).parse_all(); }

int custom_expr_inputs(const CustomExpr& e) {
  int n = e.kind == CustomExpr::Kind::kInput ? e.input + 1 : 0;
  for (const CustomExpr& a : e.args) n = std::max(n, custom_expr_inputs(a));
  return n;
}

Status check_custom_expr_attrs(const CustomExpr& e, const std::vector<std::string>& attrs) {
  if (e.kind == CustomExpr::Kind::kAttr && std::find(attrs.begin(), attrs.end(), e.name) == attrs.end())
    return invalid_argument("compute expression reads '%s', which is neither an input (x0, x1, ...) nor a declared "
                            "attribute",
                            e.name.c_str());
  for (const CustomExpr& a : e.args) KILN_RETURN_IF_ERROR(check_custom_expr_attrs(a, attrs));
  return ok_status();
}

CustomExpr bind_custom_expr(const CustomExpr& e, const std::map<std::string, double>& values) {
  if (e.kind == CustomExpr::Kind::kAttr) {
    CustomExpr c;
    c.kind = CustomExpr::Kind::kConst;
    c.value = values.at(e.name);
    return c;
  }
  CustomExpr out = e;
  for (CustomExpr& a : out.args) a = bind_custom_expr(a, values);
  return out;
}

std::string custom_expr_text(const CustomExpr& e) {
  switch (e.kind) {
    case CustomExpr::Kind::kInput: return "x" + std::to_string(e.input);
    case CustomExpr::Kind::kAttr: return e.name;
    case CustomExpr::Kind::kConst: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", e.value);
      return buf;
    }
    case CustomExpr::Kind::kCall: {
      std::string s = "(" + e.name;
      for (const CustomExpr& a : e.args) s += " " + custom_expr_text(a);
      return s + ")";
    }
  }
  return "";
}

float eval_custom_expr(const CustomExpr& e, const float* x) {
  switch (e.kind) {
    case CustomExpr::Kind::kInput: return x[e.input];
    case CustomExpr::Kind::kConst: return static_cast<float>(e.value);
    case CustomExpr::Kind::kAttr: return 0.f;  // unbound: callers bind first
    case CustomExpr::Kind::kCall: break;
  }
  const std::string& f = e.name;
  if (f == "select") return eval_custom_expr(e.args[0], x) != 0.f ? eval_custom_expr(e.args[1], x) : eval_custom_expr(e.args[2], x);
  const float a = eval_custom_expr(e.args[0], x);
  if (e.args.size() == 1) {
    if (f == "neg") return -a;
    if (f == "exp") return std::exp(a);
    if (f == "log") return std::log(a);
    if (f == "sqrt") return std::sqrt(a);
    if (f == "tanh") return std::tanh(a);
    if (f == "erf") return std::erf(a);
    if (f == "abs") return std::fabs(a);
    if (f == "relu") return a > 0.f ? a : 0.f;
    if (f == "sigmoid") return sigmoid(a);
    if (f == "softplus") return std::max(a, 0.f) + std::log(1.f + std::exp(-std::fabs(a)));
    return 0.f;
  }
  const float b = eval_custom_expr(e.args[1], x);
  if (f == "add") return a + b;
  if (f == "sub") return a - b;
  if (f == "mul") return a * b;
  if (f == "div") return a / b;
  if (f == "min") return std::min(a, b);
  if (f == "max") return std::max(a, b);
  if (f == "lt") return a < b ? 1.f : 0.f;
  if (f == "le") return a <= b ? 1.f : 0.f;
  if (f == "gt") return a > b ? 1.f : 0.f;
  if (f == "ge") return a >= b ? 1.f : 0.f;
  if (f == "eq") return a == b ? 1.f : 0.f;
  if (f == "ne") return a != b ? 1.f : 0.f;
  return 0.f;
}

bool custom_expr_activation(const CustomExpr& e, std::string* name, std::vector<float>* params) {
  params->clear();
  if (e.kind != CustomExpr::Kind::kCall) return false;
  if (e.args.size() == 1 && is_input0(e.args[0])) {
    if (e.name == "relu") *name = "Relu";
    else if (e.name == "sigmoid") *name = "Sigmoid";
    else if (e.name == "tanh") *name = "Tanh";
    else return false;
    return true;
  }
  // Swish: x0 * sigmoid(beta * x0), in either operand order (beta = 1 is Silu).
  if (e.name == "mul") {
    for (int k = 0; k < 2; ++k) {
      const CustomExpr& x = e.args[static_cast<size_t>(k)];
      const CustomExpr& s = e.args[static_cast<size_t>(1 - k)];
      double beta = 0;
      if (is_input0(x) && is_call(s, "sigmoid") && scaled_input0(s.args[0], &beta)) {
        *name = "Swish";
        params->push_back(static_cast<float>(beta));
        return true;
      }
    }
  }
  return false;
}

}  // namespace kiln::ops
