// Custom-op plugins for tests/tools/custom_ops_test.py and bench/custom_op: one source, the
// variant chosen with -DVARIANT=... when the test builds it (include/kiln/custom_op.h).
//   good:         my.ops::PSwish (x * sigmoid(beta x), shape inference as its input),
//                 my.ops::Mish (x * tanh(softplus(x))), my.ops::GatedAdd (x + alpha sigmoid(g),
//                 broadcast, no shape inference); the variants below change PSwish only
//   throw_entry:  the entry point throws
//   throw_infer:  PSwish whose shape inference throws
//   wrong_shape:  PSwish whose shape inference adds one to the last dim
//   bad_compute:  a compute with an unknown function
//   refuse:       the entry point refuses with a message
#include <stdexcept>
#include <string>

#include "kiln/custom_op.h"

#define VARIANT_good 1
#define VARIANT_throw_entry 2
#define VARIANT_throw_infer 3
#define VARIANT_wrong_shape 4
#define VARIANT_bad_compute 5
#define VARIANT_refuse 6
#define CAT(a, b) a##b
#define SELECT(v) CAT(VARIANT_, v)
#define THIS SELECT(VARIANT)

namespace {

int32_t same_as_input(kilnCustomOpShapes* s) {
  if (s->input_ranks[0] < 0) {
    std::snprintf(s->error, sizeof s->error, "PSwish needs an input of known rank");
    return 1;
  }
  s->output_rank = s->input_ranks[0];
  for (int i = 0; i < s->output_rank; ++i) s->output_dims[i] = s->input_dims[0][i];
#if THIS == VARIANT_wrong_shape
  if (s->output_rank > 0 && s->output_dims[s->output_rank - 1] >= 0) s->output_dims[s->output_rank - 1] += 1;
#endif
#if THIS == VARIANT_throw_infer
  throw std::runtime_error("shape inference failed on purpose");
#endif
  return 0;
}

int32_t add(kilnCustomOpHost* host, const char* op, int inputs, const char* const* names, const float* defaults,
            int num_attrs, const std::string& compute, kilnCustomOpInferFn infer) {
  kilnCustomOpDef d{};
  d.struct_size = sizeof d;
  d.domain = "my.ops";
  d.op_type = op;
  d.num_inputs = inputs;
  d.num_attrs = num_attrs;
  d.attr_names = names;
  d.attr_defaults = defaults;
  d.compute = compute.c_str();
  d.infer = infer;
  return host->register_op(host, &d);
}

}  // namespace

extern "C" int32_t kiln_custom_ops_register(kilnCustomOpHost* host) {
  using namespace kiln::custom_op;
  if (host->abi_version != KILN_CUSTOM_OP_ABI_VERSION) return 1;
#if THIS == VARIANT_throw_entry
  throw std::runtime_error("the plugin failed on purpose");
#elif THIS == VARIANT_refuse
  host->set_error(host, "this plugin needs a licence file");
  return 1;
#else
  const Expr x = input(0);
  static const char* const beta_name[] = {"beta"};
  static const float beta_default[] = {1.0f};
#if THIS == VARIANT_bad_compute
  const std::string pswish = "(mul x0 (frobnicate x0))";
#else
  const std::string pswish = (x * sigmoid(attr("beta") * x)).text();
#endif
  if (add(host, "PSwish", 1, beta_name, beta_default, 1, pswish, same_as_input) != 0) return 1;
  if (add(host, "Mish", 1, nullptr, nullptr, 0, (x * tanh(softplus(x))).text(), nullptr) != 0) return 1;
  static const char* const alpha_name[] = {"alpha"};
  static const float alpha_default[] = {0.5f};
  if (add(host, "GatedAdd", 2, alpha_name, alpha_default, 1, (x + attr("alpha") * sigmoid(input(1))).text(),
          nullptr) != 0)
    return 1;
  return 0;
#endif
}
