/*
 * Kiln custom-operator plugins (docs/dsl.md, "Custom ops in models").
 *
 * A plugin is a shared library that `kiln compile --custom-ops PLUGIN.so` loads with dlopen.
 * It exports one C function, KILN_CUSTOM_OPS_ENTRY, which Kiln calls once with a host table;
 * the plugin registers through it one definition per ONNX op it serves (an op in its own
 * domain, or one Kiln lacks). A definition is:
 *   - the op's name, domain, input count and float attributes with their defaults;
 *   - its compute: one element-wise expression in the DSL's text form (below), from which
 *     Kiln's DSL generates, compiles and caches the kernel, and which the graph compiler
 *     may fuse into neighbouring element-wise programs and convolution/matmul epilogues;
 *   - optionally its shape inference, a function Kiln calls per node at compile time.
 *
 * What the compiled .kiln keeps is the compute expression (attributes substituted), not the
 * plugin: `kiln run` on it needs no plugin, and never runs plugin code.
 *
 * Trust: a plugin is native code run inside the compiler with the user's rights, as any
 * program is. Kiln catches the C++ exceptions it throws and the errors it returns and
 * reports them, but cannot contain a plugin that crashes, corrupts memory or never
 * returns. Load only plugins you would run as programs.
 *
 * The compute expression: an S-expression over
 *   x0, x1, ...            the op's inputs, at the output element's index (NumPy broadcast);
 *   NAME                   a float attribute declared in the definition;
 *   numbers                float constants (1.5, -2, 1e-3);
 *   (neg a) (exp a) (log a) (sqrt a) (tanh a) (erf a) (abs a) (relu a) (sigmoid a)
 *   (softplus a)           sigmoid = 1 / (1 + exp(-a)); softplus = max(a, 0) + log(1 + exp(-|a|));
 *   (add a b) (sub a b) (mul a b) (div a b) (min a b) (max a b);
 *   (select (lt a b) t e)  and le, gt, ge, eq, ne: comparisons appear only as select's condition.
 * Inputs and output are float32.
 *
 * This header is C (the ABI) with an optional header-only C++ helper to build expressions;
 * nothing in it needs linking against Kiln.
 */
#ifndef KILN_CUSTOM_OP_H_
#define KILN_CUSTOM_OP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; a host refuses a plugin built for another. */
#define KILN_CUSTOM_OP_ABI_VERSION 1
/* The highest rank shape inference sees or returns. */
#define KILN_CUSTOM_OP_MAX_RANK 8
/* The symbol a plugin exports: int32_t kiln_custom_ops_register(kilnCustomOpHost* host).
 * Returns 0, or non-zero after host->set_error(host, "why") to refuse loading. */
#define KILN_CUSTOM_OPS_ENTRY "kiln_custom_ops_register"

/* Shape inference of one node: inputs filled by Kiln, the output set by the plugin. */
typedef struct kilnCustomOpShapes {
  uint32_t struct_size;                /* sizeof(kilnCustomOpShapes) of the host */
  int32_t num_inputs;
  const int32_t* input_ranks;          /* per input; -1 when the rank is unknown */
  const int64_t* const* input_dims;    /* per input, input_ranks[i] extents; -1 unknown */
  int32_t num_attrs;
  const float* attrs;                  /* the node's attribute values, in definition order */
  int32_t output_rank;                 /* set by the plugin (0..KILN_CUSTOM_OP_MAX_RANK) */
  int64_t output_dims[KILN_CUSTOM_OP_MAX_RANK]; /* set by the plugin; -1 unknown */
  char error[256];                     /* a message, when the function returns non-zero */
} kilnCustomOpShapes;

/* Returns 0 with the output set, or non-zero with `error` set (the node is refused). */
typedef int32_t (*kilnCustomOpInferFn)(kilnCustomOpShapes* shapes);

typedef struct kilnCustomOpDef {
  uint32_t struct_size;           /* sizeof(kilnCustomOpDef) of the plugin */
  const char* domain;             /* ONNX domain, e.g. "my.ops" ("" is ai.onnx) */
  const char* op_type;            /* ONNX op type, e.g. "PSwish" */
  int32_t num_inputs;             /* 1 .. 8 */
  int32_t num_attrs;
  const char* const* attr_names;  /* num_attrs identifiers (float or int ONNX attributes) */
  const float* attr_defaults;     /* used when a node does not set the attribute */
  const char* compute;            /* the element-wise expression (see above) */
  kilnCustomOpInferFn infer;      /* null: the output is the NumPy broadcast of the inputs */
} kilnCustomOpDef;

/* What Kiln hands the plugin's entry point. Strings and arrays are copied by register_op;
 * the plugin keeps ownership of what it passes. Not thread-safe: call from the entry only. */
typedef struct kilnCustomOpHost {
  uint32_t struct_size;
  uint32_t abi_version;  /* KILN_CUSTOM_OP_ABI_VERSION of the host */
  /* Registers one op; returns 0, or non-zero (bad definition, op already defined) with the
   * reason kept for the error Kiln reports. */
  int32_t (*register_op)(struct kilnCustomOpHost* host, const kilnCustomOpDef* def);
  /* Records why the plugin refuses to load (its entry then returns non-zero). */
  void (*set_error)(struct kilnCustomOpHost* host, const char* message);
  void* host_data;       /* Kiln's; the plugin leaves it alone */
} kilnCustomOpHost;

typedef int32_t (*kilnCustomOpsEntryFn)(kilnCustomOpHost* host);

#ifdef __cplusplus
}  /* extern "C" */

#include <cstdio>
#include <string>

/* Header-only C++ helper: builds compute expressions with operators, e.g.
 *   using namespace kiln::custom_op;
 *   Expr x = input(0);
 *   std::string compute = (x * sigmoid(attr("beta") * x)).text();  // "(mul x0 (sigmoid ...))" */
namespace kiln::custom_op {

class Expr {
 public:
  explicit Expr(std::string text) : text_(std::move(text)) {}
  Expr(double v) : text_(number(v)) {}  // NOLINT: a constant
  const std::string& text() const { return text_; }

 private:
  static std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  std::string text_;
};

inline Expr input(int i) { return Expr("x" + std::to_string(i)); }
inline Expr attr(const char* name) { return Expr(name); }
inline Expr call(const char* f, const Expr& a) { return Expr(std::string("(") + f + " " + a.text() + ")"); }
inline Expr call(const char* f, const Expr& a, const Expr& b) {
  return Expr(std::string("(") + f + " " + a.text() + " " + b.text() + ")");
}
inline Expr operator+(const Expr& a, const Expr& b) { return call("add", a, b); }
inline Expr operator-(const Expr& a, const Expr& b) { return call("sub", a, b); }
inline Expr operator*(const Expr& a, const Expr& b) { return call("mul", a, b); }
inline Expr operator/(const Expr& a, const Expr& b) { return call("div", a, b); }
inline Expr operator-(const Expr& a) { return call("neg", a); }
inline Expr exp(const Expr& a) { return call("exp", a); }
inline Expr log(const Expr& a) { return call("log", a); }
inline Expr sqrt(const Expr& a) { return call("sqrt", a); }
inline Expr tanh(const Expr& a) { return call("tanh", a); }
inline Expr erf(const Expr& a) { return call("erf", a); }
inline Expr abs(const Expr& a) { return call("abs", a); }
inline Expr relu(const Expr& a) { return call("relu", a); }
inline Expr sigmoid(const Expr& a) { return call("sigmoid", a); }
inline Expr softplus(const Expr& a) { return call("softplus", a); }
inline Expr min(const Expr& a, const Expr& b) { return call("min", a, b); }
inline Expr max(const Expr& a, const Expr& b) { return call("max", a, b); }
/* select(lt(a, b), t, e): t where a < b, else e. */
inline Expr lt(const Expr& a, const Expr& b) { return call("lt", a, b); }
inline Expr le(const Expr& a, const Expr& b) { return call("le", a, b); }
inline Expr gt(const Expr& a, const Expr& b) { return call("gt", a, b); }
inline Expr ge(const Expr& a, const Expr& b) { return call("ge", a, b); }
inline Expr select(const Expr& cond, const Expr& t, const Expr& e) {
  return Expr("(select " + cond.text() + " " + t.text() + " " + e.text() + ")");
}

}  // namespace kiln::custom_op
#endif  /* __cplusplus */

#endif  /* KILN_CUSTOM_OP_H_ */
