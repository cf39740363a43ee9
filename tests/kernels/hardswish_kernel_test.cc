// The SIMD kernel of kiln HardSwish (src/kernels/cpu/hardswish.cc) against its reference kernel
// (ops/fused_norm_act.cc, the formula of ops/fused_activation.cc): bit-exact for ONNX's
// parameters (a division by 6) and for others (alpha * x + beta as the reference compiles), over values that
// hit both clamps, zero, signed zero, infinities and NaN, at sizes around the vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

Tensor values(int64_t n, uint32_t seed) {
  Tensor t = Tensor::make(DataType::kFloat32, {n});
  uint32_t s = seed * 2654435761u + 3u;
  const float specials[] = {0.0f, -0.0f, 3.0f, -3.0f, 2.9999998f, -3.0000002f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e30f};
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = (i % 13 == 0) ? specials[(i / 13) % 11]
                                       : static_cast<float>(static_cast<double>(s >> 8) / (1u << 24) * 16.0 - 8.0);
  }
  return t;
}

void check(float alpha, float beta, bool set_attrs) {
  ir::Graph g;
  ir::Value* x = g.get_or_add_value("x");
  ir::Value* y = g.get_or_add_value("y");
  for (int64_t n : {1, 7, 16, 17, 33, 1000, 100003}) {
    SCOPED_TRACE(n);
    x->type() = ir::TensorType{DataType::kFloat32, Shape::from_static({n})};
    ir::Node* node = g.add_node("hs" + std::to_string(n), "HardSwish", ops::kKilnDomain, ops::kKilnOpset, {x}, {y});
    if (set_attrs) {
      node->attrs()["alpha"] = ir::Attribute::from_float(alpha);
      node->attrs()["beta"] = ir::Attribute::from_float(beta);
    }
    ASSERT_TRUE(ops::infer_node(*node).ok());
    std::unique_ptr<Kernel> k = select_kernel(*node);
    ASSERT_TRUE(k);
    EXPECT_EQ(k->implementation().rfind("simd:", 0), 0u) << k->implementation();
    const Tensor in = values(n, static_cast<uint32_t>(n));
    auto run = [&](const Kernel* kernel) {
      RuntimeValue v(in);
      std::vector<RuntimeValue> out(1);
      ops::KernelContext ctx(*node, {&v}, &out);
      Status s = kernel ? kernel->run(ctx) : (*ops::schema_for(*node))->kernel_fn()(ctx);
      EXPECT_TRUE(s.ok()) << s.to_string();
      return out[0].tensor();
    };
    const Tensor want = run(nullptr);
    const Tensor got = run(k.get());
    ASSERT_EQ(got.dims(), want.dims());
    for (int64_t i = 0; i < n; ++i) {
      const float a = got.data<float>()[i], b = want.data<float>()[i];
      if (std::isnan(a) && std::isnan(b)) continue;
      uint32_t ua, ub;
      std::memcpy(&ua, &a, 4);
      std::memcpy(&ub, &b, 4);
      ASSERT_EQ(ua, ub) << "x = " << in.data<float>()[i] << ": got " << a << ", want " << b;
    }
  }
}

TEST(HardSwishKernelTest, OnnxParametersBitExact) { check(1.0f / 6.0f, 0.5f, false); }

TEST(HardSwishKernelTest, OtherParametersBitExact) { check(0.2f, 0.4f, true); }

}  // namespace
}  // namespace kiln::kernels
