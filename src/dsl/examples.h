// Three operators written in the DSL, ports of Kiln's hand-written CPU kernels: LayerNorm
// and Softmax over the last axis, and GELU(x + bias).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/schedule.h"
#include "dsl/tensor.h"

namespace kiln::dsl {

struct Example {
  std::string name;
  std::vector<Tensor> args;  // inputs, then the output
  Tensor output;
  // The schedule written by hand for this operator (on top of which auto_schedule fills in
  // the stages it leaves alone).
  void (*tuned_schedule)(Schedule& s, const Example& e) = nullptr;
};

// Y[r, c] = (X[r, c] - mean[r]) / sqrt(var[r] + eps) * gamma[c] + beta[c]; args X, gamma, beta, Y.
Example layernorm_example(Expr rows, Expr cols, float eps = 1e-5f);
// Y[r, c] = exp(X[r, c] - max[r]) / sum_k exp(X[r, k] - max[r]); args X, Y.
Example softmax_example(Expr rows, Expr cols);
// Y[r, c] = gelu(X[r, c] + B[c]) with the erf form of GELU; args X, B, Y.
Example gelu_bias_add_example(Expr rows, Expr cols);

// By name: layernorm, softmax, gelu_bias_add. Not found for another name.
Expected<Example> make_example(const std::string& name, Expr rows, Expr cols);

}  // namespace kiln::dsl
