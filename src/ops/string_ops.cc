// String ops: StringNormalizer, StringSplit, StringConcat and RegexFullMatch (RE2 syntax,
// matched by RE2 so that no pattern or input can make matching take exponential time).
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
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

// ASCII case mapping: multi-byte UTF-8 sequences pass through unchanged (their bytes are
// all >= 0x80, which toupper/tolower in the C locale leave alone).
std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string to_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

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
