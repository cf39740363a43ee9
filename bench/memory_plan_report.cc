// Prints the memory plan of ONNX models compiled as `kiln compile` does: planned arena, naive
// sum of intermediates, lower bound, and their ratios (issue 5 wants arena <= 1.10 x bound).
//
//   memory_plan_report [--notes] [--no-inplace] [--input-shape x:1,3,640,640] MODEL.onnx ...
//
// An --input-shape applies to the models after it, until the next one. --notes also prints the
// planner's notes (values planned at run time, in-place count); --no-inplace plans without
// in-place reuse.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s [--input-shape SPEC] MODEL.onnx ...\n", argv[0]);
    return 2;
  }
  compiler::CompileOptions options;
  int failures = 0;
  bool notes = false;
  compiler::PlanOptions plan_options;
  std::printf("%-44s %6s %11s %11s %11s %8s %8s %7s  %s\n", "model", "nodes", "arena MiB",
              "naive MiB", "bound MiB", "a/bound", "a/naive", "inplace", "strategy");
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-inplace") == 0) {
      plan_options.allow_inplace = false;
      continue;
    }
    if (std::strcmp(argv[i], "--notes") == 0) {
      notes = true;
      continue;
    }
    if (std::strcmp(argv[i], "--input-shape") == 0) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "--input-shape needs a value\n");
        return 2;
      }
      auto shapes = compiler::parse_input_shapes(argv[++i]);
      if (!shapes.ok()) {
        std::fprintf(stderr, "%s\n", shapes.status().to_string().c_str());
        return 2;
      }
      options.input_shapes = *shapes;
      continue;
    }
    auto compiled = compiler::compile_onnx_file(argv[i], options);
    if (!compiled.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i], compiled.status().to_string().c_str());
      ++failures;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = compiler::plan_memory(*compiled->graph, plan_options);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!plan.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i], plan.status().to_string().c_str());
      ++failures;
      continue;
    }
    const double bound = plan->lower_bound_bytes ? static_cast<double>(plan->lower_bound_bytes) : 1;
    const double naive = plan->naive_bytes ? static_cast<double>(plan->naive_bytes) : 1;
    std::printf("%-44s %6zu %11.3f %11.3f %11.3f %8.4f %8.4f %7d  %s (%.1f ms)\n", argv[i],
                compiled->graph->nodes().size(), mib(plan->arena_bytes), mib(plan->naive_bytes),
                mib(plan->lower_bound_bytes), plan->arena_bytes / bound,
                plan->arena_bytes / naive, plan->inplace_count, plan->strategy.c_str(), ms);
    std::printf("    bytes: arena %zu naive %zu lower bound %zu weights %zu; %zu slots, "
                "%d dynamic\n",
                plan->arena_bytes, plan->naive_bytes, plan->lower_bound_bytes, plan->weights_bytes,
                plan->slots.size(), plan->dynamic_values);
    if (notes)
      for (const std::string& note : plan->notes) std::printf("    note: %s\n", note.c_str());
  }
  return failures ? 1 : 0;
}
