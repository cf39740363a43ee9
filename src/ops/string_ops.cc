// String ops: StringNormalizer, StringSplit, StringConcat and RegexFullMatch (RE2 syntax,
// matched by RE2 so that no pattern or input can make matching take exponential time).
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <locale>
#include <stdexcept>
#include <utility>
#include <string>
#include <unordered_set>
#include <vector>

#include "ops/op_util.h"

namespace kiln::ops {
namespace {

Status check_string(const ir::Node& node, DataType t, const char* what) {
  if (t != DataType::kString && t != DataType::kUndefined)
    return invalid_argument("node %s: %s must be a string tensor, got %s", node.label().c_str(),
                            what, dtype_name(t));
  return ok_status();
}

// Unicode case mapping, as ONNX's reference (Python's str.lower/upper, one code point to one)
// and ONNX Runtime (towlower/towupper in a UTF-8 locale) do: the UTF-8 text is decoded, each
// code point mapped by the C.UTF-8 locale's wide ctype, and encoded again. Bytes that are
// not valid UTF-8 pass through unchanged. Without that locale, ASCII only.
const std::ctype<wchar_t>* utf8_ctype() {
  static const std::ctype<wchar_t>* facet = []() -> const std::ctype<wchar_t>* {
    try {
      static const std::locale utf8("C.UTF-8");
      return &std::use_facet<std::ctype<wchar_t>>(utf8);
    } catch (const std::runtime_error&) {
      return nullptr;
    }
  }();
  return facet;
}

// The code point starting at s[i] and its length in bytes; length 0 for an invalid sequence.
std::pair<char32_t, size_t> decode_utf8(const std::string& s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b = byte(i);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return {0, 0};
  char32_t c = n == 1 ? b : b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {0, 0};
    c = (c << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return {0, 0};  // overlong, surrogate
  return {c, n};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string change_case(const std::string& s, bool upper) {
  const std::ctype<wchar_t>* ctype = utf8_ctype();
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    if (n == 0) {  // not UTF-8: the byte as it is
      out += s[i++];
      continue;
    }
    if (ctype) {
      wchar_t w = static_cast<wchar_t>(c);
      c = static_cast<char32_t>(upper ? ctype->toupper(w) : ctype->tolower(w));
    } else if (c < 0x80) {
      c = static_cast<char32_t>(upper ? std::toupper(static_cast<int>(c)) : std::tolower(static_cast<int>(c)));
    }
    append_utf8(out, c);
    i += n;
  }
  return out;
}
std::string to_lower(const std::string& s) { return change_case(s, false); }
std::string to_upper(const std::string& s) { return change_case(s, true); }

// ---- StringNormalizer ----------------------------------------------------------------

Status string_normalizer_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_string(node, x.dtype(), "input"));
  if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
    return invalid_argument("node %s: input must be [C] or [1, C], got %s", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  const std::string action = node.attr_string("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    return invalid_argument("node %s: case_change_action '%s' is not NONE, LOWER or UPPER",
                            node.label().c_str(), action.c_str());
  const bool case_sensitive = node.attr_int("is_case_sensitive", 0) != 0;
  std::unordered_set<std::string> stopwords;
  if (const ir::Attribute* a = node.attr("stopwords"))
    for (const std::string& w : a->strings) stopwords.insert(case_sensitive ? w : to_lower(w));
  std::vector<std::string> kept;
  const std::string* in = x.data<std::string>();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (stopwords.count(case_sensitive ? in[i] : to_lower(in[i]))) continue;
    kept.push_back(action == "LOWER"   ? to_lower(in[i])
                   : action == "UPPER" ? to_upper(in[i])
                                       : in[i]);
  }
  // Everything filtered out: ONNX returns one empty string rather than an empty tensor.
  if (kept.empty()) kept.emplace_back();
  const int64_t c = static_cast<int64_t>(kept.size());
  KILN_ASSIGN_OR_RETURN(
      Tensor * y,
      ctx.allocate_output(0, DataType::kString,
                          x.rank() == 1 ? std::vector<int64_t>{c} : std::vector<int64_t>{1, c}));
  std::move(kept.begin(), kept.end(), y->data<std::string>());
  return ok_status();
}

Status infer_string_normalizer(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_string(ctx.node(), ctx.input_type(0).dtype, "input"));
  const Shape& s = ctx.input_type(0).shape;
  Shape out = s.has_rank() ? unknown_dims(s.rank()) : Shape();
  if (s.has_rank() && s.rank() == 2) out[0] = 1;
  ctx.set_output(0, DataType::kString, out);
  return ok_status();
}

// ---- StringSplit ---------------------------------------------------------------------

// Python's str.split(): with no delimiter, runs of whitespace separate and leading and
// trailing whitespace yields no empty pieces; maxsplit < 0 means no limit.
std::vector<std::string> split(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> out;
  if (delim.empty()) {
    auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    size_t i = 0, n = s.size();
    while (true) {
      while (i < n && is_space(s[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(s.substr(i));  // the rest, trailing whitespace included, as Python keeps it
        break;
      }
      size_t j = i;
      while (j < n && !is_space(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    size_t pos = s.find(delim, start);
    if (pos == std::string::npos) break;
    out.push_back(s.substr(start, pos - start));
    start = pos + delim.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Status string_split_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_string(node, x.dtype(), "input"));
  const std::string delim = node.attr_string("delimiter", "");
  const int64_t maxsplit = node.has_attr("maxsplit") ? node.attr_int("maxsplit", -1) : -1;
  if (node.has_attr("maxsplit") && maxsplit < 0)
    return invalid_argument("node %s: maxsplit %lld is negative", node.label().c_str(),
                            (long long)maxsplit);
  std::vector<std::vector<std::string>> pieces(static_cast<size_t>(x.num_elements()));
  int64_t widest = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    pieces[static_cast<size_t>(i)] = split(x.data<std::string>()[i], delim, maxsplit);
    widest = std::max(widest, static_cast<int64_t>(pieces[static_cast<size_t>(i)].size()));
  }
  std::vector<int64_t> dims = x.dims();
  dims.push_back(widest);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kString, dims));
  KILN_ASSIGN_OR_RETURN(Tensor * z, ctx.allocate_output(1, DataType::kInt64, x.dims()));
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    auto& p = pieces[static_cast<size_t>(i)];
    z->data<int64_t>()[i] = static_cast<int64_t>(p.size());
    std::move(p.begin(), p.end(), y->data<std::string>() + i * widest);
  }
  return ok_status();
}

Status infer_string_split(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_string(ctx.node(), ctx.input_type(0).dtype, "input"));
  const Shape& s = ctx.input_type(0).shape;
  Shape out = s;
  if (out.has_rank()) out.dims().push_back(Dim());
  ctx.set_output(0, DataType::kString, out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, DataType::kInt64, s);
  return ok_status();
}

// ---- StringConcat --------------------------------------------------------------------

Status string_concat_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  KILN_RETURN_IF_ERROR(check_string(node, a.dtype(), "X"));
  KILN_RETURN_IF_ERROR(check_string(node, b.dtype(), "Y"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, broadcast_dims(node, a.dims(), b.dims()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kString, dims));
  const std::vector<int64_t> strides[2] = {broadcast_strides(a.dims(), dims),
                                           broadcast_strides(b.dims(), dims)};
  const std::string* pa = a.data<std::string>();
  const std::string* pb = b.data<std::string>();
  std::string* py = y->data<std::string>();
  for_each_broadcast(dims, strides,
                     [&](int64_t o, const int64_t* off) { py[o] = pa[off[0]] + pb[off[1]]; });
  return ok_status();
}

Status infer_string_concat(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return ok_status();
  KILN_RETURN_IF_ERROR(check_string(ctx.node(), ctx.input_type(0).dtype, "X"));
  KILN_RETURN_IF_ERROR(check_string(ctx.node(), ctx.input_type(1).dtype, "Y"));
  KILN_ASSIGN_OR_RETURN(
      Shape s, broadcast_shapes(ctx.node(), ctx.input_type(0).shape, ctx.input_type(1).shape));
  ctx.set_output(0, DataType::kString, s);
  return ok_status();
}

// ---- RegexFullMatch ------------------------------------------------------------------

Expected<std::unique_ptr<RE2>> compile_pattern(const ir::Node& node) {
  const ir::Attribute* a = node.attr("pattern");
  if (!a)
    return invalid_argument("node %s is missing required attribute 'pattern'",
                            node.label().c_str());
  RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<RE2>(a->s, options);
  if (!re->ok())
    return invalid_argument("node %s: pattern '%s' is not a valid RE2 expression: %s",
                            node.label().c_str(), a->s.c_str(), re->error().c_str());
  return re;
}

Status regex_full_match_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_string(node, x.dtype(), "input"));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RE2> re, compile_pattern(node));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kBool, x.dims()));
  for (int64_t i = 0; i < x.num_elements(); ++i)
    y->data<bool>()[i] = RE2::FullMatch(x.data<std::string>()[i], *re);
  return ok_status();
}

Status infer_regex_full_match(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RE2> re, compile_pattern(ctx.node()));
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_string(ctx.node(), ctx.input_type(0).dtype, "input"));
  ctx.set_output(0, DataType::kBool, ctx.input_type(0).shape);
  return ok_status();
}

KILN_REGISTER_OP(OpSchema("StringNormalizer")
                     .since(10)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("case_change_action", ir::AttrKind::kString)
                     .attr("is_case_sensitive", ir::AttrKind::kInt)
                     .attr("locale", ir::AttrKind::kString)
                     .attr("stopwords", ir::AttrKind::kStrings)
                     .infer(infer_string_normalizer)
                     .kernel(string_normalizer_kernel));
KILN_REGISTER_OP(OpSchema("StringSplit")
                     .since(20)
                     .inputs(1, 1)
                     .outputs(2, 2)
                     .attr("delimiter", ir::AttrKind::kString)
                     .attr("maxsplit", ir::AttrKind::kInt)
                     .infer(infer_string_split)
                     .kernel(string_split_kernel));
KILN_REGISTER_OP(OpSchema("StringConcat")
                     .since(20)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .infer(infer_string_concat)
                     .kernel(string_concat_kernel));
KILN_REGISTER_OP(OpSchema("RegexFullMatch")
                     .since(20)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("pattern", ir::AttrKind::kString)
                     .infer(infer_regex_full_match)
                     .kernel(regex_full_match_kernel));

}  // namespace
}  // namespace kiln::ops
