// Describing one executed node for the profile: shapes, dtypes, formats, FLOPs, bytes;
// and the peak rate "% of peak" is measured against.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "ir/graph.h"
#include "profiler/profiler.h"
#include "profiler/records.h"

namespace kiln::profiler {
namespace {

const Tensor* tensor_of(const RuntimeValue* v) {
  return v != nullptr && v->is_tensor() && v->tensor().defined() ? &v->tensor() : nullptr;
}

double product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  double p = 1;
  for (size_t i = from; i < to && i < dims.size(); ++i) p *= static_cast<double>(dims[i]);
  return p;
}

// Multiply-adds count two FLOPs each; bias, residual and activation terms are left out
// (they are a rounding error next to the products).
double op_flops(const std::string& op_type, const std::vector<const Tensor*>& in,
                const std::vector<const Tensor*>& out) {
  auto input = [&](size_t i) { return i < in.size() ? in[i] : nullptr; };
  const Tensor* y = out.empty() ? nullptr : out[0];
  if (y == nullptr) return -1;
  const double y_elems = static_cast<double>(y->num_elements());
  if (op_type == "Conv" || op_type == "FusedConv") {
    // Each output element: (C_in / group) * prod(kernel) products; W is [C_out, C_in/g, k...].
    const Tensor* w = input(1);
    if (w == nullptr || w->rank() < 2) return -1;
    return 2 * y_elems * product(w->dims(), 1, w->dims().size());
  }
  if (op_type == "ConvTranspose") {
    // Each input element feeds (C_out / group) * prod(kernel) outputs; W is [C_in, C_out/g, k...].
    const Tensor* x = input(0);
    const Tensor* w = input(1);
    if (x == nullptr || w == nullptr || w->rank() < 2) return -1;
    return 2 * static_cast<double>(x->num_elements()) * product(w->dims(), 1, w->dims().size());
  }
  if (op_type == "MatMul" || op_type == "FusedMatMul") {
    const Tensor* a = input(0);
    if (a == nullptr || a->rank() < 1) return -1;
    return 2 * y_elems * static_cast<double>(a->dims().back());  // K
  }
  if (op_type == "Gemm" || op_type == "FusedGemm") {
    // A is [M, K] or [K, M] (transA): K = |A| / M with M = Y's rows.
    const Tensor* a = input(0);
    if (a == nullptr || y->rank() != 2 || y->dim(0) == 0) return -1;
    double k = static_cast<double>(a->num_elements()) / static_cast<double>(y->dim(0));
    return 2 * y_elems * k;
  }
  if (op_type == "Attention") {
    // Q [..., Sq, D], V [..., Sk, Dv], Y [..., Sq, Dv]: Q Kt is Sq*Sk*D products per batch,
    // the product with V Sq*Sk*Dv.
    const Tensor* q = input(0);
    const Tensor* v = input(2);
    if (q == nullptr || v == nullptr || q->rank() < 2 || v->rank() < 2 || y->rank() < 2) return -1;
    double sq = static_cast<double>(q->dims()[q->dims().size() - 2]);
    double d = static_cast<double>(q->dims().back());
    double sk = static_cast<double>(v->dims()[v->dims().size() - 2]);
    double dv = static_cast<double>(v->dims().back());
    if (sq == 0 || dv == 0) return 0;
    double batch = y_elems / (sq * dv);
    return 2 * batch * sq * sk * (d + dv);
  }
  return -1;
}

std::string shape_text(const Tensor& t) {
  if (t.rank() == 0) return "scalar";
  std::string s;
  for (int i = 0; i < t.rank(); ++i) {
    if (i) s += 'x';
    s += std::to_string(t.dim(i));
  }
  return s;
}

// Appends one entry per value: "-" for an omitted input, "seq"/"none" for non-tensors.
void describe(const std::vector<const RuntimeValue*>& values, std::string* shapes,
              std::string* dtypes, std::string* formats, double* bytes) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) {
      *shapes += ';';
      *dtypes += ';';
      *formats += ';';
    }
    const RuntimeValue* v = values[i];
    if (const Tensor* t = tensor_of(v)) {
      *shapes += shape_text(*t);
      *dtypes += dtype_name(t->dtype());
      // The reference executor keeps every tensor plain; 4-d ones are NCHW images.
      *formats += t->rank() == 4 ? "NCHW" : "ND";
      *bytes += static_cast<double>(t->size_bytes());
    } else {
      const char* what = v == nullptr ? "-" : v->is_sequence() ? "seq" : "none";
      *shapes += what;
      *dtypes += what;
      *formats += what;
    }
  }
}

}  // namespace

void record_op(const ir::Node& node, const std::string& model,
               const std::vector<const RuntimeValue*>& inputs,
               const std::vector<RuntimeValue>& outputs, int64_t start_ns) {
  static const std::string kReference = "reference";
  record_op(node, model, kReference, inputs, outputs, start_ns);
}

void record_op(const ir::Node& node, const std::string& model, const std::string& implementation,
               const std::vector<const RuntimeValue*>& inputs,
               const std::vector<RuntimeValue>& outputs, int64_t start_ns) {
  auto d = std::make_shared<OpDetail>();
  d->model = model;
  d->op_type = node.op_type();
  d->implementation = implementation;
  std::vector<const RuntimeValue*> outs;
  outs.reserve(outputs.size());
  for (const RuntimeValue& v : outputs) outs.push_back(&v);
  double bytes = 0;
  describe(inputs, &d->input_shapes, &d->input_dtypes, &d->input_formats, &bytes);
  describe(outs, &d->output_shapes, &d->output_dtypes, &d->output_formats, &bytes);
  d->bytes = bytes;
  std::vector<const Tensor*> in_t, out_t;
  for (const RuntimeValue* v : inputs) in_t.push_back(tensor_of(v));
  for (const RuntimeValue* v : outs) out_t.push_back(tensor_of(v));
  d->flops = op_flops(d->op_type, in_t, out_t);
  record_op_detail(node.name().empty() ? node.label() : node.name(), std::move(d), start_ns);
}

double peak_gflops_per_core() {
  static const double peak = [] {
    if (const char* env = std::getenv("KILN_PEAK_GFLOPS_PER_CORE")) {
      double v = std::atof(env);
      if (v > 0) return v;
    }
    // fp32 FLOP per cycle with FMA: 2 x lanes x 2 FMA units.
    double per_cycle = 16;
#if defined(__x86_64__)
    if (cpu_features().avx512f) {
      per_cycle = 64;
    } else if (cpu_features().avx2 && cpu_features().fma) {
      per_cycle = 32;
    }
#endif
    double ghz = 0;
    std::ifstream max_freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    double khz = 0;
    if (max_freq >> khz && khz > 0) ghz = khz / 1e6;
    if (ghz <= 0) {
      std::ifstream cpuinfo("/proc/cpuinfo");
      std::string line;
      while (std::getline(cpuinfo, line)) {
        if (line.rfind("cpu MHz", 0) != 0) continue;
        size_t colon = line.find(':');
        if (colon != std::string::npos) ghz = std::max(ghz, std::atof(line.c_str() + colon + 1) / 1e3);
      }
    }
    if (ghz <= 0) ghz = 3.0;
    return per_cycle * ghz;
  }();
  return peak;
}

}  // namespace kiln::profiler
