// Fast kernel for kiln FusedElementwise (float32): the body graph is compiled once, at
// prepare, into a straight-line program over tile-sized registers, then run tile by tile
// (kTile elements, so every register of a tile stays in L1) with one tight loop per
// instruction, which the compiler vectorises. The reference kernel runs the body through the
// subgraph executor, one tensor per op; the program costs a few nanoseconds per op and tile
// instead, which is what a long chain of small ops (the benchmark's 1000 Adds on [1, 64])
// is made of. Lone ONNX Add/Sub/Mul/Div/Relu/Sigmoid/Tanh/HardSigmoid nodes run as a program of
// one instruction. Custom ops (kiln DslElementwise, docs/dsl.md) are an instruction that calls
// their DSL-generated kernel on the tile (kernels/cpu/dsl_elementwise.h), alone or in a chain.
//
// Taken: float32 inputs, output and body constants; each input has the output's shape, one
// element, or broadcasts along one contiguous run of the output's dims (a bias [C] over
// [N, C], a channel vector [C, 1, 1] over [N, C, H, W]); body constants of one element; the ops in kOps below with the reference kernels' formulas (so
// results agree to the rounding of the same float32 expressions). Anything else runs on the
// reference kernel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dsl_elementwise.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

constexpr int64_t kTile = 1024;
static_assert(kTile == kDslTileElements, "custom ops' DSL kernels are tuned at the tile's extent");

enum class Op : uint8_t {
  kAdd, kSub, kMul, kDiv, kMax, kMin,  // binary
  kRelu, kLeakyRelu, kHardSigmoid, kClip, kSigmoid, kTanh, kExp, kSqrt, kNeg, kAbs, kReciprocal, kErf,
  kDsl,  // a custom op: a = the index of its DslCall, b = -1
};

constexpr int kMaxDslArgs = 8;

struct OpInfo {
  Op op;
  int arity;
};

const std::unordered_map<std::string, OpInfo>& op_table() {
  static const std::unordered_map<std::string, OpInfo> table = {
      {"Add", {Op::kAdd, 2}},           {"Sub", {Op::kSub, 2}},       {"Mul", {Op::kMul, 2}},
      {"Div", {Op::kDiv, 2}},           {"Max", {Op::kMax, 2}},       {"Min", {Op::kMin, 2}},
      {"Relu", {Op::kRelu, 1}},         {"LeakyRelu", {Op::kLeakyRelu, 1}},
      {"HardSigmoid", {Op::kHardSigmoid, 1}}, {"Clip", {Op::kClip, 1}}, {"Sigmoid", {Op::kSigmoid, 1}},
      {"Tanh", {Op::kTanh, 1}},         {"Exp", {Op::kExp, 1}},       {"Sqrt", {Op::kSqrt, 1}},
      {"Neg", {Op::kNeg, 1}},           {"Abs", {Op::kAbs, 1}},       {"Reciprocal", {Op::kReciprocal, 1}},
      {"Erf", {Op::kErf, 1}},
  };
  return table;
}

// Registers: [0, num_inputs) the node's inputs, then the body's constants, then temporaries
// (reused once their value is dead). The output register is the node's output itself.
struct Instr {
  Op op;
  int dst, a, b;  // b = -1 for unary ops
  float p0 = 0, p1 = 0;
};

// How an input maps onto the output's elements. kFull: element o is input element o.
// kScalar: one value. kBlock: the input's non-1 dims are one contiguous run of the output's
// dims (a row [C] over [N, C], a channel vector [C, 1, 1] over [N, C, H, W]): output element
// o reads input element (o / inner) % size.
enum class InputKind : uint8_t { kFull, kScalar, kBlock };

// A custom op's DSL kernel over a tile: args are registers, fn is built at prepare.
struct DslCall {
  ops::CustomExpr expr;
  int64_t split = 0;  // the node's dsl_split: its tuned schedule, 0 the default
  std::vector<int> args;
  dsl::EntryFn fn = nullptr;
  std::shared_ptr<dsl::Kernel> keep;
};

bool is_dsl_node(const ir::Node& n) { return n.domain() == ops::kKilnDomain && n.op_type() == "DslElementwise"; }

Expected<ops::CustomExpr> dsl_node_expr(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(ops::CustomExpr e, ops::parse_custom_expr(n.attr_string("compute", "")), "node %s",
                        n.label().c_str());
  if (n.num_inputs() < 1 || n.num_inputs() > kMaxDslArgs || ops::custom_expr_inputs(e) > n.num_inputs())
    return unsupported("node %s: %d inputs", n.label().c_str(), n.num_inputs());
  return e;
}

struct Program {
  std::vector<Instr> code;
  std::vector<DslCall> calls;
  std::vector<InputKind> input_kinds;
  std::vector<int64_t> input_sizes;  // elements of each input
  std::vector<int64_t> input_inner;  // kBlock: output elements per input element step
  std::vector<float> constants;      // one value per constant register
  int num_temps = 0;
  int output_reg = -1;
  std::vector<int64_t> output_dims;
  int64_t elements = 0;
  int first_const() const { return static_cast<int>(input_kinds.size()); }
  int first_temp() const { return first_const() + static_cast<int>(constants.size()); }
};

// The one value of a single-element float32 constant, from a body initializer or a Constant
// node's value / value_float.
bool scalar_of(const ir::Value* v, float* out) {
  if (v->has_initializer()) {
    const Tensor& t = *v->initializer();
    if (t.dtype() != DataType::kFloat32 || t.num_elements() != 1) return false;
    *out = t.data<float>()[0];
    return true;
  }
  const ir::Node* p = v->producer();
  if (!p || p->op_type() != "Constant") return false;
  if (const ir::Attribute* a = p->attr("value"); a && a->kind == ir::AttrKind::kTensor) {
    if (a->t.dtype() != DataType::kFloat32 || a->t.num_elements() != 1) return false;
    *out = a->t.data<float>()[0];
    return true;
  }
  if (const ir::Attribute* a = p->attr("value_float"); a && a->kind == ir::AttrKind::kFloat) {
    *out = a->f;
    return true;
  }
  return false;
}

// Clip's bounds: attributes before opset 11, constant inputs from 11 (absent: unbounded).
bool clip_bounds(const ir::Node& n, float* lo, float* hi) {
  *lo = -std::numeric_limits<float>::infinity();
  *hi = std::numeric_limits<float>::infinity();
  if (n.opset() < 11) {
    *lo = n.attr_float("min", -std::numeric_limits<float>::max());
    *hi = n.attr_float("max", std::numeric_limits<float>::max());
    return true;
  }
  if (n.num_inputs() > 1 && n.input(1) && !scalar_of(n.input(1), lo)) return false;
  if (n.num_inputs() > 2 && n.input(2) && !scalar_of(n.input(2), hi)) return false;
  return true;
}

// Sets the output dims and how each node input maps onto them (InputKind).
Status classify_inputs(const ir::Node& node, Program& p) {
  const std::string label = node.label();
  const ir::Value* y = node.output(0);
  KILN_RETURN_IF_ERROR(require_static_tensor("the output", y, {DataType::kFloat32}));
  p.output_dims = y->shape().static_dims();
  p.elements = num_elements(p.output_dims);
  const std::vector<int64_t>& out = p.output_dims;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const ir::Value* in = node.input(i);
    KILN_RETURN_IF_ERROR(require_static_tensor(str_format("input %zu", i).c_str(), in, {DataType::kFloat32}));
    const std::vector<int64_t> d = in->shape().static_dims();
    const int64_t n = num_elements(d);
    if (d.size() > out.size()) return unsupported("node %s: an input of higher rank than the output", label.c_str());
    // Align right; find the run of dims that are not 1.
    const size_t off = out.size() - d.size();
    int first = -1, last = -1;
    for (size_t k = 0; k < d.size(); ++k)
      if (d[k] != 1) {
        if (d[k] != out[off + k]) return unsupported("node %s: input %s does not broadcast to %s", label.c_str(),
                                                     dims_to_string(d).c_str(), dims_to_string(out).c_str());
        if (first < 0) first = static_cast<int>(k);
        last = static_cast<int>(k);
      }
    for (int k = first; k >= 0 && k <= last; ++k)
      if (d[static_cast<size_t>(k)] == 1 && out[off + static_cast<size_t>(k)] != 1)
        return unsupported("node %s: input %s broadcasts along inner dims the fast kernel does not take",
                           label.c_str(), dims_to_string(d).c_str());
    int64_t inner = 1;
    for (size_t k = off + static_cast<size_t>(last < 0 ? 0 : last + 1); last >= 0 && k < out.size(); ++k) inner *= out[k];
    if (n == p.elements) {
      p.input_kinds.push_back(InputKind::kFull);
    } else if (n == 1) {
      p.input_kinds.push_back(InputKind::kScalar);
    } else {
      p.input_kinds.push_back(InputKind::kBlock);
    }
    p.input_sizes.push_back(n);
    p.input_inner.push_back(inner);
  }
  return ok_status();
}

Expected<Program> compile_body(const ir::Node& node) {
  const std::string label = node.label();
  const ir::Attribute* ba = node.attr("body");
  if (!ba || ba->kind != ir::AttrKind::kGraph || !ba->g) return unsupported("node %s: no body", label.c_str());
  const ir::Graph& body = *ba->g;
  if (body.inputs().size() != node.inputs().size() || body.outputs().size() != 1)
    return unsupported("node %s: body does not match the node", label.c_str());
  Program p;
  KILN_RETURN_IF_ERROR(classify_inputs(node, p));
  // Registers of body values: inputs, then constants as they are met.
  std::unordered_map<const ir::Value*, int> reg;
  for (size_t i = 0; i < body.inputs().size(); ++i) reg[body.inputs()[i]] = static_cast<int>(i);
  std::vector<std::pair<const ir::Value*, float>> consts;
  // The constant index of a scalar body constant, or -1.
  auto constant_index = [&](const ir::Value* v) -> int {
    for (size_t k = 0; k < consts.size(); ++k)
      if (consts[k].first == v) return static_cast<int>(k);
    float c;
    if (!scalar_of(v, &c)) return -1;
    consts.emplace_back(v, c);
    return static_cast<int>(consts.size() - 1);
  };
  // Last use of each body value, for temporary reuse.
  std::unordered_map<const ir::Value*, size_t> last_use;
  const auto& nodes = body.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* v : nodes[i]->inputs())
      if (v) last_use[v] = i;
  const ir::Value* body_out = body.outputs()[0];
  struct Pending {
    Instr in;
    const ir::Value* out;
    int a_const = -1, b_const = -1;  // constant indices to patch
    std::vector<int> dsl_args, dsl_consts;  // kDsl: operands as a, b above, and constants
  };
  std::vector<Pending> code;
  std::vector<int> free_temps;
  int temps = 0;
  std::unordered_map<const ir::Value*, int> temp_of;
  // A free temporary register, else a new one.
  auto take_temp = [&]() {
    if (free_temps.empty()) return temps++;
    const int t = free_temps.back();
    free_temps.pop_back();
    return t;
  };
  // Frees the temporary of `v` when body node `i` is its last reader.
  auto release_if_dying = [&](const ir::Value* v, size_t i) {
    auto t = temp_of.find(v);
    if (t != temp_of.end() && last_use[v] == i && v != body_out) {
      free_temps.push_back(t->second);
      temp_of.erase(t);
    }
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    if (n.op_type() == "Constant") continue;  // read through scalar_of where used
    if (is_dsl_node(n)) {
      // A custom op: its operands as registers, temporaries or constants; its result in a
      // temporary of its own (the DSL kernel's buffers are restrict), then dying operands freed.
      KILN_ASSIGN_OR_RETURN(ops::CustomExpr e, dsl_node_expr(n));
      Pending pd;
      pd.in.op = Op::kDsl;
      pd.in.a = static_cast<int>(p.calls.size());
      pd.in.b = -1;
      pd.out = n.output(0);
      for (const ir::Value* v : n.inputs()) {
        int raw = 0, c = -1;
        if (auto r = reg.find(v); r != reg.end()) {
          raw = r->second;
        } else if (auto t = temp_of.find(v); t != temp_of.end()) {
          raw = -1000 - t->second;
        } else {
          c = constant_index(v);
          if (c == -1) return unsupported("node %s: body value %s is neither computed nor a scalar", label.c_str(),
                                          v ? v->name().c_str() : "(omitted)");
        }
        pd.dsl_args.push_back(raw);
        pd.dsl_consts.push_back(c);
      }
      const int t = take_temp();
      for (const ir::Value* v : n.inputs()) release_if_dying(v, i);
      temp_of[pd.out] = t;
      pd.in.dst = -1000 - t;
      DslCall call;
      call.expr = std::move(e);
      call.split = n.attr_int("dsl_split", 0);
      p.calls.push_back(std::move(call));
      code.push_back(pd);
      continue;
    }
    auto it = op_table().find(n.op_type());
    if (!n.domain().empty() || it == op_table().end() || n.num_outputs() != 1)
      return unsupported("node %s: body op %s is not taken by the fast kernel", label.c_str(), n.op_type().c_str());
    const OpInfo info = it->second;
    const int operands = info.arity;
    if (n.num_inputs() < operands || (info.arity == 2 && n.num_inputs() != 2))
      return unsupported("node %s: body op %s with %d inputs", label.c_str(), n.op_type().c_str(), n.num_inputs());
    Pending pd;
    pd.in.op = info.op;
    pd.out = n.output(0);
    int* slots[2] = {&pd.in.a, &pd.in.b};
    int* const_slots[2] = {&pd.a_const, &pd.b_const};
    pd.in.b = -1;
    for (int k = 0; k < operands; ++k) {
      const ir::Value* v = n.input(k);
      if (!v) return unsupported("node %s: body op %s misses an input", label.c_str(), n.op_type().c_str());
      if (auto r = reg.find(v); r != reg.end()) {
        *slots[k] = r->second;
      } else if (auto t = temp_of.find(v); t != temp_of.end()) {
        *slots[k] = -1000 - t->second;  // temp, patched below
      } else {
        const int c = constant_index(v);
        if (c == -1) return unsupported("node %s: body value %s is neither computed nor a scalar", label.c_str(),
                                        v->name().c_str());
        *const_slots[k] = c;
        *slots[k] = 0;
      }
    }
    if (info.op == Op::kLeakyRelu) pd.in.p0 = n.attr_float("alpha", 0.01f);
    if (info.op == Op::kHardSigmoid) {
      pd.in.p0 = n.attr_float("alpha", 0.2f);
      pd.in.p1 = n.attr_float("beta", 0.5f);
    }
    if (info.op == Op::kClip && !clip_bounds(n, &pd.in.p0, &pd.in.p1))
      return unsupported("node %s: Clip with bounds that are not constants", label.c_str());
    // Operands whose value dies here free their temporaries before the result takes one.
    for (int k = 0; k < operands; ++k) release_if_dying(n.input(k), i);
    const int t = take_temp();
    temp_of[pd.out] = t;
    pd.in.dst = -1000 - t;
    code.push_back(pd);
  }
  auto out_temp = temp_of.find(body_out);
  if (out_temp == temp_of.end()) return unsupported("node %s: the body output is not computed", label.c_str());
  for (const auto& [v, c] : consts) p.constants.push_back(c);
  p.num_temps = temps;
  auto patch = [&](int r) { return r <= -1000 ? p.first_temp() + (-1000 - r) : r; };
  for (Pending& pd : code) {
    Instr in = pd.in;
    in.dst = patch(in.dst);
    if (in.op == Op::kDsl) {
      DslCall& call = p.calls[static_cast<size_t>(in.a)];
      for (size_t k = 0; k < pd.dsl_args.size(); ++k)
        call.args.push_back(pd.dsl_consts[k] >= 0 ? p.first_const() + pd.dsl_consts[k] : patch(pd.dsl_args[k]));
      p.code.push_back(in);
      continue;
    }
    in.a = pd.a_const >= 0 ? p.first_const() + pd.a_const : patch(in.a);
    if (in.b != -1 || pd.b_const >= 0) in.b = pd.b_const >= 0 ? p.first_const() + pd.b_const : patch(in.b);
    p.code.push_back(in);
  }
  p.output_reg = p.first_temp() + out_temp->second;
  return p;
}

// A single ONNX elementwise node as a one-instruction program (ops whose parameters are
// attributes; Clip from opset 11 reads its bounds from inputs a caller may feed, so it is left
// to the reference).
Expected<Program> compile_single(const ir::Node& node) {
  const std::string label = node.label();
  if (is_dsl_node(node)) {
    KILN_ASSIGN_OR_RETURN(ops::CustomExpr e, dsl_node_expr(node));
    Program p;
    KILN_RETURN_IF_ERROR(classify_inputs(node, p));
    DslCall call;
    call.expr = std::move(e);
    call.split = node.attr_int("dsl_split", 0);
    for (int k = 0; k < node.num_inputs(); ++k) call.args.push_back(k);
    p.calls.push_back(std::move(call));
    Instr in;
    in.op = Op::kDsl;
    in.a = 0;
    in.b = -1;
    p.num_temps = 1;
    in.dst = p.first_temp();
    p.output_reg = in.dst;
    p.code.push_back(in);
    return p;
  }
  auto it = op_table().find(node.op_type());
  if (node.domain() != ops::kOnnxDomain || it == op_table().end() || node.num_outputs() != 1 ||
      node.num_inputs() != it->second.arity || (it->second.op == Op::kClip && node.opset() >= 11))
    return unsupported("node %s: not an elementwise op the fast kernel takes", label.c_str());
  Program p;
  KILN_RETURN_IF_ERROR(classify_inputs(node, p));
  Instr in;
  in.op = it->second.op;
  in.a = 0;
  in.b = it->second.arity == 2 ? 1 : -1;
  if (in.op == Op::kLeakyRelu) in.p0 = node.attr_float("alpha", 0.01f);
  if (in.op == Op::kHardSigmoid) {
    in.p0 = node.attr_float("alpha", 0.2f);
    in.p1 = node.attr_float("beta", 0.5f);
  }
  if (in.op == Op::kClip) {
    in.p0 = node.attr_float("min", -std::numeric_limits<float>::max());
    in.p1 = node.attr_float("max", std::numeric_limits<float>::max());
  }
  p.num_temps = 1;
  in.dst = p.first_temp();
  p.output_reg = in.dst;
  p.code.push_back(in);
  return p;
}

// The reference kernels' formulas, in float32.
inline float apply1(Op op, float x, float p0, float p1) {
  switch (op) {
    case Op::kRelu: return x > 0.f ? x : 0.f;
    case Op::kLeakyRelu: return x >= 0.f ? x : p0 * x;
    case Op::kHardSigmoid: return std::max(0.f, std::min(1.f, p0 * x + p1));
    case Op::kClip: return std::min(std::max(x, p0), p1);
    case Op::kSigmoid: return x >= 0 ? 1.f / (1.f + std::exp(-x)) : std::exp(x) / (1.f + std::exp(x));
    case Op::kTanh: return std::tanh(x);
    case Op::kExp: return std::exp(x);
    case Op::kSqrt: return std::sqrt(x);
    case Op::kNeg: return -x;
    case Op::kAbs: return std::fabs(x);
    case Op::kReciprocal: return 1.f / x;
    case Op::kErf: return std::erf(x);
    default: return x;
  }
}

inline float max_nan(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? (std::isnan(a) ? a : b) : std::max(a, b); }
inline float min_nan(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? (std::isnan(a) ? a : b) : std::min(a, b); }

// One instruction over n elements. The common ops get their own loops, which vectorise.
// d may be a or b (a dying operand's register holds the result).
void run_instr(const Instr& in, float* d, const float* a, const float* b, int64_t n) {
  switch (in.op) {
    case Op::kAdd: for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; return;
    case Op::kSub: for (int64_t i = 0; i < n; ++i) d[i] = a[i] - b[i]; return;
    case Op::kMul: for (int64_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; return;
    case Op::kDiv: for (int64_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; return;
    case Op::kMax: for (int64_t i = 0; i < n; ++i) d[i] = max_nan(a[i], b[i]); return;
    case Op::kMin: for (int64_t i = 0; i < n; ++i) d[i] = min_nan(a[i], b[i]); return;
    case Op::kRelu: for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.f ? a[i] : 0.f; return;
    case Op::kNeg: for (int64_t i = 0; i < n; ++i) d[i] = -a[i]; return;
    default: {
      const float p0 = in.p0, p1 = in.p1;
      for (int64_t i = 0; i < n; ++i) d[i] = apply1(in.op, a[i], p0, p1);
    }
  }
}

class FusedElementwiseKernel final : public Kernel {
 public:
  Status run(ops::KernelContext& ctx) const override {
    const Program& p = program;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      if (!t || t->dtype() != DataType::kFloat32 || t->num_elements() != p.input_sizes[static_cast<size_t>(i)] ||
          (p.input_kinds[static_cast<size_t>(i)] == InputKind::kFull && t->dims() != ctx.node().input(i)->shape().static_dims()))
        return (*reference)(ctx);
    }
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, p.output_dims, TensorInit::kUninitialized));
    float* out = y->data<float>();
    const int64_t tiles = (p.elements + kTile - 1) / kTile;
    // Enough work per task to pay for waking a thread: ~64K elements of a short program.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (kTile * std::max<size_t>(1, p.code.size())));
    parallel_for(0, tiles, grain, [&](int64_t t0, int64_t t1) { run_tiles(ctx, out, t0, t1); });
    return ok_status();
  }
  std::string implementation() const override { return program.calls.empty() ? "kiln:tiled" : "kiln:tiled+dsl"; }

  void run_tiles(const ops::KernelContext& ctx, float* out, int64_t t0, int64_t t1) const {
    const Program& p = program;
    const int inputs = p.first_const();
    const int regs = p.first_temp() + p.num_temps;
    // Per-thread registers (broadcast inputs and constants, temporaries) and their pointers:
    // allocated the first time a thread needs them, reused after.
    struct Registers {
      std::vector<float> scratch;
      std::vector<const float*> src;
      std::vector<float*> dst;
    };
    thread_local Registers r;
    const size_t need = static_cast<size_t>(regs) * kTile;
    if (r.scratch.size() < need) r.scratch.resize(need);
    if (r.src.size() < static_cast<size_t>(regs)) {
      r.src.resize(static_cast<size_t>(regs));
      r.dst.resize(static_cast<size_t>(regs));
    }
    const float** src = r.src.data();
    float** dst = r.dst.data();
    for (int k = 0; k < regs; ++k) dst[k] = r.scratch.data() + static_cast<size_t>(k) * kTile;
    for (size_t c = 0; c < p.constants.size(); ++c) {
      float* buf = dst[static_cast<size_t>(inputs) + c];
      std::fill(buf, buf + kTile, p.constants[c]);
      src[static_cast<size_t>(inputs) + c] = buf;
    }
    for (int i = 0; i < inputs; ++i)
      if (p.input_kinds[static_cast<size_t>(i)] == InputKind::kScalar) {
        float* buf = dst[static_cast<size_t>(i)];
        std::fill(buf, buf + kTile, ctx.input(i)->data<float>()[0]);
        src[static_cast<size_t>(i)] = buf;
      }
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * kTile;
      const int64_t n = std::min(kTile, p.elements - start);
      for (int i = 0; i < inputs; ++i) {
        const float* data = ctx.input(i)->data<float>();
        switch (p.input_kinds[static_cast<size_t>(i)]) {
          case InputKind::kFull: src[static_cast<size_t>(i)] = data + start; break;
          case InputKind::kScalar: break;
          case InputKind::kBlock: {
            const int64_t size = p.input_sizes[static_cast<size_t>(i)];
            const int64_t inner = p.input_inner[static_cast<size_t>(i)];
            float* buf = dst[static_cast<size_t>(i)];
            if (inner == 1) {  // a row: consecutive input elements, wrapping
              for (int64_t j = 0, k = start % size; j < n; ++j, k = k + 1 == size ? 0 : k + 1) buf[j] = data[k];
              src[static_cast<size_t>(i)] = buf;
              break;
            }
            int64_t k = (start / inner) % size, left = inner - start % inner;
            for (int64_t j = 0; j < n;) {
              const int64_t run = std::min(left, n - j);
              std::fill(buf + j, buf + j + run, data[k]);
              j += run;
              left = inner;
              k = k + 1 == size ? 0 : k + 1;
            }
            src[static_cast<size_t>(i)] = buf;
          }
        }
      }
      for (const Instr& in : p.code) {
        float* d = in.dst == p.output_reg ? out + start : dst[static_cast<size_t>(in.dst)];
        if (in.op == Op::kDsl) {
          const DslCall& c = p.calls[static_cast<size_t>(in.a)];
          float* bufs[kMaxDslArgs + 1];
          for (size_t k = 0; k < c.args.size(); ++k) bufs[k] = const_cast<float*>(src[static_cast<size_t>(c.args[k])]);
          bufs[c.args.size()] = d;
          const int64_t dims[1] = {n};
          c.fn(bufs, dims);
          src[static_cast<size_t>(in.dst)] = d;
          continue;
        }
        run_instr(in, d, src[static_cast<size_t>(in.a)], in.b >= 0 ? src[static_cast<size_t>(in.b)] : nullptr, n);
        src[static_cast<size_t>(in.dst)] = d;
      }
    }
  }

  const ops::KernelFn* reference = nullptr;
  Program program;
};

Expected<Program> compile_node(const ir::Node& node) {
  return node.domain() == ops::kKilnDomain && !is_dsl_node(node) ? compile_body(node) : compile_single(node);
}

Expected<std::unique_ptr<Kernel>> prepare_fused_elementwise(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(Program p, compile_node(node));
  // Custom ops: their DSL kernels, built (or taken from the disk cache) here, at load.
  for (DslCall& c : p.calls) {
    KILN_ASSIGN_OR_RETURN(DslTileKernel k, dsl_tile_kernel(c.expr, static_cast<int>(c.args.size()), c.split), "node %s",
                          node.label().c_str());
    c.fn = k.fn;
    c.keep = std::move(k.kernel);
  }
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  auto k = std::make_unique<FusedElementwiseKernel>();
  k->program = std::move(p);
  k->reference = &schema->kernel_fn();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

#define KILN_REGISTER_ELEMENTWISE_KERNEL(domain_name, op)                                  \
  KILN_REGISTER_KERNEL((KernelFactory{.domain = domain_name,                               \
                                      .op_type = op,                                       \
                                      .device = DeviceKind::kCpu,                          \
                                      .priority = 100,                                     \
                                      .name = "kiln",                                      \
                                      .applicable = [](const ir::Node& n) { return compile_node(n).status(); }, \
                                      .prepare = prepare_fused_elementwise}))

KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kKilnDomain, "FusedElementwise");
// A custom op the fusion left alone: its DSL kernel as a program of one instruction.
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kKilnDomain, "DslElementwise");
// The same program, one instruction long, for elementwise ops the fusion left alone.
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Add");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Sub");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Mul");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Div");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Relu");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Sigmoid");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "Tanh");
KILN_REGISTER_ELEMENTWISE_KERNEL(ops::kOnnxDomain, "HardSigmoid");

}  // namespace kiln::kernels
