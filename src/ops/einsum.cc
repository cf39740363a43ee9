// Einsum (opset 12): any equation in Einstein notation, explicit ("ij,jk->ik") or implicit
// ("ij,jk"), with an ellipsis for broadcast leading dims, repeated labels within an operand
// (diagonals) and summed-out labels. The reference kernel contracts the operands
// pairwise (each operand first reduced alone, then contracted left to right), so the cost is
// that of the pairwise products; float16/bfloat16 run through float32, floats accumulate
// in double.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ops/elementwise_common.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// A parsed equation bound to operand dims. Labels are numbered: the ellipsis dims first
// (0 .. num_ellipsis-1, outermost first), then the letters.
struct EinsumPlan {
  std::vector<int64_t> label_size;                // per label
  std::vector<std::vector<int64_t>> op_strides;   // per operand, per label (0 when absent/broadcast)
  std::vector<std::vector<bool>> op_has;          // per operand, per label: indexed (not broadcast)
  std::vector<int> out_labels;                    // output axes
  std::vector<int64_t> out_dims;
};

// One operand's term split into letters, with the ellipsis position (-1 if none).
struct Term {
  std::string letters;
  int ellipsis_at = -1;
};

Expected<Term> parse_term(const ir::Node& node, const std::string& s) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (t.ellipsis_at >= 0 || s.compare(i, 3, "...") != 0)
        return invalid_argument("node %s: bad ellipsis in einsum term '%s'", node.label().c_str(), s.c_str());
      t.ellipsis_at = static_cast<int>(t.letters.size());
      i += 2;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t.letters += c;
    } else {
      return invalid_argument("node %s: bad character '%c' in einsum term '%s'", node.label().c_str(), c, s.c_str());
    }
  }
  return t;
}

Expected<EinsumPlan> plan_einsum(const ir::Node& node, const std::vector<std::vector<int64_t>>& dims) {
  std::string eq;
  for (char c : node.attr_string("equation", "")) if (c != ' ' && c != '\t') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  std::vector<Term> terms;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    KILN_ASSIGN_OR_RETURN(Term t, parse_term(node, lhs.substr(start, comma == std::string::npos ? std::string::npos
                                                                                                  : comma - start)));
    terms.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != dims.size())
    return invalid_argument("node %s: equation '%s' has %zu operands, the node has %zu inputs", node.label().c_str(),
                            eq.c_str(), terms.size(), dims.size());
  // Ellipsis extent of each operand, and the broadcast ellipsis dims.
  int num_ell = 0;
  std::vector<int> op_ell(terms.size(), 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    const int rank = static_cast<int>(dims[k].size()), letters = static_cast<int>(terms[k].letters.size());
    if (terms[k].ellipsis_at < 0 ? rank != letters : rank < letters)
      return invalid_argument("node %s: einsum term %zu has %d labels for input %zu of rank %d",
                              node.label().c_str(), k, letters, k, rank);
    op_ell[k] = terms[k].ellipsis_at < 0 ? 0 : rank - letters;
    num_ell = std::max(num_ell, op_ell[k]);
  }
  std::map<char, int> letter_id;
  std::vector<int> letter_count;
  EinsumPlan p;
  p.label_size.assign(static_cast<size_t>(num_ell), 1);
  for (const Term& t : terms)
    for (char c : t.letters)
      if (!letter_id.count(c)) {
        letter_id[c] = num_ell + static_cast<int>(letter_count.size());
        letter_count.push_back(0);
        p.label_size.push_back(-1);
      }
  const size_t num_labels = p.label_size.size();
  // Axis labels per operand.
  std::vector<std::vector<int>> axis_labels(terms.size());
  for (size_t k = 0; k < terms.size(); ++k) {
    const Term& t = terms[k];
    for (int i = 0; i < static_cast<int>(t.letters.size()); ++i) {
      if (i == t.ellipsis_at)
        for (int e = 0; e < op_ell[k]; ++e) axis_labels[k].push_back(num_ell - op_ell[k] + e);
      axis_labels[k].push_back(letter_id[t.letters[static_cast<size_t>(i)]]);
      ++letter_count[static_cast<size_t>(letter_id[t.letters[static_cast<size_t>(i)]] - num_ell)];
    }
    if (t.ellipsis_at == static_cast<int>(t.letters.size()))
      for (int e = 0; e < op_ell[k]; ++e) axis_labels[k].push_back(num_ell - op_ell[k] + e);
  }
  // Sizes: letters must agree; ellipsis dims broadcast (1 stretches).
  for (size_t k = 0; k < terms.size(); ++k)
    for (size_t a = 0; a < axis_labels[k].size(); ++a) {
      const int l = axis_labels[k][a];
      const int64_t n = dims[k][a];
      int64_t& size = p.label_size[static_cast<size_t>(l)];
      if (l < num_ell) {
        if (n != 1 && size != 1 && n != size)
          return invalid_argument("node %s: ellipsis dims of the inputs do not broadcast", node.label().c_str());
        if (n != 1) size = n;
      } else if (size < 0) {
        size = n;
      } else if (size != n) {
        return invalid_argument("node %s: einsum label has sizes %lld and %lld", node.label().c_str(),
                                (long long)size, (long long)n);
      }
    }
  p.op_strides.assign(terms.size(), std::vector<int64_t>(num_labels, 0));
  p.op_has.assign(terms.size(), std::vector<bool>(num_labels, false));
  for (size_t k = 0; k < terms.size(); ++k) {
    const std::vector<int64_t> strides = contiguous_strides(dims[k]);
    for (size_t a = 0; a < axis_labels[k].size(); ++a) {
      const int l = axis_labels[k][a];
      if (dims[k][a] == 1 && p.label_size[static_cast<size_t>(l)] != 1) continue;  // broadcast
      p.op_strides[k][static_cast<size_t>(l)] += strides[a];
      p.op_has[k][static_cast<size_t>(l)] = true;
    }
  }
  // Output labels.
  std::vector<bool> in_out(num_labels, false);
  if (arrow == std::string::npos) {
    for (int e = 0; e < num_ell; ++e) p.out_labels.push_back(e);
    for (const auto& [c, id] : letter_id)  // std::map: sorted by character
      if (letter_count[static_cast<size_t>(id - num_ell)] == 1) p.out_labels.push_back(id);
  } else {
    KILN_ASSIGN_OR_RETURN(Term out, parse_term(node, eq.substr(arrow + 2)));
    for (int i = 0; i <= static_cast<int>(out.letters.size()); ++i) {
      if (i == out.ellipsis_at)
        for (int e = 0; e < num_ell; ++e) p.out_labels.push_back(e);
      if (i == static_cast<int>(out.letters.size())) break;
      const char c = out.letters[static_cast<size_t>(i)];
      if (!letter_id.count(c))
        return invalid_argument("node %s: output label '%c' appears in no input", node.label().c_str(), c);
      p.out_labels.push_back(letter_id[c]);
    }
  }
  for (int l : p.out_labels) {
    if (in_out[static_cast<size_t>(l)])
      return invalid_argument("node %s: output repeats a label", node.label().c_str());
    in_out[static_cast<size_t>(l)] = true;
    p.out_dims.push_back(p.label_size[static_cast<size_t>(l)]);
  }
  return p;
}

Status infer_einsum(InferContext& ctx) {
  std::vector<std::vector<int64_t>> dims;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || !ctx.input_type(i).shape.is_static()) {
      ctx.set_output(0, ctx.input_type(0).dtype, Shape::unknown_rank());
      return ok_status();
    }
    dims.push_back(ctx.input_type(i).shape.static_dims());
  }
  KILN_ASSIGN_OR_RETURN(EinsumPlan p, plan_einsum(ctx.node(), dims));
  ctx.set_output(0, ctx.input_type(0).dtype, Shape::from_static(p.out_dims));
  return ok_status();
}

// out[out_labels] = sum over sum_labels of prod_k src_k, where operand k is addressed by
// its per-label strides (0 for labels it lacks). Walks every label combination once.
template <typename Acc>
std::vector<Acc> contract(const std::vector<const Acc*>& src, const std::vector<std::vector<int64_t>>& strides,
                          const std::vector<int>& out_labels, const std::vector<int>& sum_labels,
                          const std::vector<int64_t>& label_size) {
  const size_t n_ops = src.size();
  int64_t out_count = 1, sum_count = 1;
  for (int l : out_labels) out_count *= label_size[static_cast<size_t>(l)];
  for (int l : sum_labels) sum_count *= label_size[static_cast<size_t>(l)];
  std::vector<Acc> out(static_cast<size_t>(out_count), Acc(0));
  if (out_count == 0 || sum_count == 0) return out;
  // Steps the odometer over `labels`, moving the operand offsets along.
  auto step = [&](const std::vector<int>& labels, std::vector<int64_t>& idx, std::vector<int64_t>& off) {
    for (int d = static_cast<int>(labels.size()) - 1; d >= 0; --d) {
      const size_t l = static_cast<size_t>(labels[static_cast<size_t>(d)]);
      if (++idx[static_cast<size_t>(d)] < label_size[l]) {
        for (size_t k = 0; k < n_ops; ++k) off[k] += strides[k][l];
        return;
      }
      for (size_t k = 0; k < n_ops; ++k) off[k] -= strides[k][l] * (label_size[l] - 1);
      idx[static_cast<size_t>(d)] = 0;
    }
  };
  std::vector<int64_t> out_idx(out_labels.size(), 0), base(n_ops, 0);
  std::vector<int64_t> sum_idx(sum_labels.size(), 0), off(n_ops, 0);
  for (int64_t o = 0; o < out_count; ++o) {
    Acc acc = 0;
    off = base;
    for (int64_t s = 0; s < sum_count; ++s) {
      Acc prod = 1;
      for (size_t k = 0; k < n_ops; ++k) prod = static_cast<Acc>(prod * src[k][off[k]]);
      acc = static_cast<Acc>(acc + prod);
      step(sum_labels, sum_idx, off);
    }
    out[static_cast<size_t>(o)] = acc;
    step(out_labels, out_idx, base);
  }
  return out;
}

// An operand during evaluation: contiguous values over `labels` (ascending label ids).
template <typename Acc>
struct EinsumTerm {
  std::vector<Acc> values;
  std::vector<int> labels;
};

// Strides over every label of a contiguous term (0 for labels it lacks).
template <typename Acc>
std::vector<int64_t> term_strides(const EinsumTerm<Acc>& t, const std::vector<int64_t>& label_size) {
  std::vector<int64_t> strides(label_size.size(), 0);
  int64_t s = 1;
  for (size_t i = t.labels.size(); i-- > 0;) {
    strides[static_cast<size_t>(t.labels[i])] = s;
    s *= label_size[static_cast<size_t>(t.labels[i])];
  }
  return strides;
}

// Evaluates the plan: each operand first takes its diagonals and sums out the labels no
// one else needs, then operands contract left to right keeping only the labels still
// needed, and the result is laid out in output order. Costs stay those of the pairwise
// products rather than of all labels at once.
template <typename Acc>
std::vector<Acc> evaluate_einsum(const EinsumPlan& p, const std::vector<std::vector<Acc>>& inputs) {
  const size_t n_ops = inputs.size(), num_labels = p.label_size.size();
  std::vector<bool> in_out(num_labels, false);
  for (int l : p.out_labels) in_out[static_cast<size_t>(l)] = true;
  // needed_from[k][l]: label l is in the output or indexed by an operand >= k.
  std::vector<std::vector<bool>> needed_from(n_ops + 1, in_out);
  for (size_t k = n_ops; k-- > 0;)
    for (size_t l = 0; l < num_labels; ++l) needed_from[k][l] = needed_from[k + 1][l] || p.op_has[k][l];
  auto needed_elsewhere = [&](size_t k, size_t l) {
    if (in_out[l]) return true;
    for (size_t j = 0; j < n_ops; ++j)
      if (j != k && p.op_has[j][l]) return true;
    return false;
  };
  std::vector<EinsumTerm<Acc>> terms(n_ops);
  for (size_t k = 0; k < n_ops; ++k) {
    std::vector<int> keep, sum;
    for (size_t l = 0; l < num_labels; ++l)
      if (p.op_has[k][l]) (needed_elsewhere(k, l) ? keep : sum).push_back(static_cast<int>(l));
    terms[k].labels = keep;
    terms[k].values = contract<Acc>({inputs[k].data()}, {p.op_strides[k]}, keep, sum, p.label_size);
  }
  EinsumTerm<Acc> cur = std::move(terms[0]);
  for (size_t k = 1; k < n_ops; ++k) {
    std::vector<int> keep, sum;
    for (size_t l = 0; l < num_labels; ++l) {
      const bool present = std::count(cur.labels.begin(), cur.labels.end(), static_cast<int>(l)) > 0 ||
                           std::count(terms[k].labels.begin(), terms[k].labels.end(), static_cast<int>(l)) > 0;
      if (present) (needed_from[k + 1][l] ? keep : sum).push_back(static_cast<int>(l));
    }
    EinsumTerm<Acc> next;
    next.labels = keep;
    next.values = contract<Acc>({cur.values.data(), terms[k].values.data()},
                                {term_strides(cur, p.label_size), term_strides(terms[k], p.label_size)}, keep, sum,
                                p.label_size);
    cur = std::move(next);
  }
  // Output order (every output label is in cur; the rest were summed away).
  return contract<Acc>({cur.values.data()}, {term_strides(cur, p.label_size)}, p.out_labels, {}, p.label_size);
}

Status einsum_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  std::vector<std::vector<int64_t>> dims;
  const Tensor* first = ctx.input(0);
  if (!first) return invalid_argument("node %s: needs at least one input", node.label().c_str());
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    if (!t) return invalid_argument("node %s: input %d is missing", node.label().c_str(), i);
    if (t->dtype() != first->dtype())
      return invalid_argument("node %s: input %d has dtype %s, input 0 has %s", node.label().c_str(), i,
                              dtype_name(t->dtype()), dtype_name(first->dtype()));
    dims.push_back(t->dims());
  }
  KILN_RETURN_IF_ERROR(check_dtype(node, first->dtype(), kTypeFloat | kTypeInts));
  KILN_ASSIGN_OR_RETURN(EinsumPlan p, plan_einsum(node, dims));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, first->dtype(), p.out_dims));
  if (y->num_elements() == 0) return ok_status();
  dispatch_types<kTypeFloat | kTypeInts>(first->dtype(), [&]<typename T>() {
    // Integers wrap modulo 2^64 (then to T) rather than overflow.
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
    std::vector<std::vector<Acc>> inputs(dims.size());
    for (size_t k = 0; k < dims.size(); ++k) {
      const Tensor* t = ctx.input(static_cast<int>(k));
      inputs[k].resize(static_cast<size_t>(t->num_elements()));
      for (int64_t i = 0; i < t->num_elements(); ++i) inputs[k][static_cast<size_t>(i)] = static_cast<Acc>(t->data<T>()[i]);
    }
    const std::vector<Acc> out = evaluate_einsum<Acc>(p, inputs);
    for (size_t i = 0; i < out.size(); ++i) y->data<T>()[i] = static_cast<T>(out[i]);
  });
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Einsum")
                     .since(12)
                     .inputs(1, -1)
                     .outputs(1, 1)
                     .required_attr("equation", AttrKind::kString)
                     .infer(infer_einsum)
                     .kernel(with_half_as_float(einsum_kernel)));

}  // namespace kiln::ops
