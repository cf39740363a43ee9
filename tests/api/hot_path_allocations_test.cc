// Counts heap allocations of steady-state model executions (kilnmdlExecute) with an allocator
// hook: this binary interposes malloc and its relatives (operator new goes through malloc), so
// every allocation of Kiln, libstdc++, oneDNN and libgomp on any thread is seen. Each counted
// allocation keeps its call stack, and is attributed to oneDNN when a frame of that stack is in
// libdnnl, to Kiln otherwise; the first few stacks are printed on failure, symbolized.
//
// The model: a small ResNet (stem conv + BN + ReLU, max pool, a bottleneck block with a
// projection shortcut and the residual Add, global average pool, a 1x1 conv classifier) built
// here with random weights, compiled as `kiln compile` does but in plain layout; or, when
// KILN_ALLOC_TEST_MODEL names a .kiln file, that model with random inputs (tests/e2e runs it on
// ResNet-50, and prints what it counts).
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kiln/kiln.h"
#include "runtime/model_runtime.h"
#include "../process_temp_dir.h"

// ---- The hook --------------------------------------------------------------------------------

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
}

namespace {

constexpr int kMaxStack = 24;
constexpr int kMaxKept = 16384;

struct Recorded {
  int depth = 0;
  void* frames[kMaxStack];
};

std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_count{0};
Recorded g_recorded[kMaxKept];
thread_local bool t_in_hook = false;

void note_allocation() {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_hook) return;
  t_in_hook = true;
  uint64_t i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxKept) g_recorded[i].depth = backtrace(g_recorded[i].frames, kMaxStack);
  t_in_hook = false;
}

}  // namespace

extern "C" {
void* malloc(size_t size) {
  note_allocation();
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  note_allocation();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  note_allocation();
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) {
  note_allocation();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) {
  note_allocation();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  note_allocation();
  void* p = __libc_memalign(alignment, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }
}

namespace {

namespace fs = std::filesystem;

// Allocations between start() and stop(), split by where they come from: inside oneDNN (a
// frame in libdnnl), in the graph's node loop outside oneDNN (a frame in
// GraphExecutor::execute: Kiln's hot path), or in the API call around it.
struct Count {
  uint64_t total = 0;
  uint64_t in_onednn = 0;
  uint64_t in_node_loop = 0;
  std::string node_loop_stacks;  // the first of those, symbolized
  // oneDNN's by the oneDNN function Kiln called (the outermost frame in libdnnl).
  std::map<std::string, uint64_t> onednn_entries;
};

bool frame_in(void* frame, const char* library) {
  Dl_info info;
  return dladdr(frame, &info) && info.dli_fname && std::strstr(info.dli_fname, library);
}

bool frame_is(void* frame, const char* symbol_part) {
  Dl_info info;
  return dladdr(frame, &info) && info.dli_sname && std::strstr(info.dli_sname, symbol_part);
}

void start_counting() {
  g_count.store(0);
  g_counting.store(true);
}

Count stop_counting() {
  g_counting.store(false);
  Count c;
  c.total = g_count.load();
  int shown = 0;
  for (uint64_t i = 0; i < std::min<uint64_t>(c.total, kMaxKept); ++i) {
    const Recorded& r = g_recorded[i];
    bool onednn = false;
    for (int f = 0; f < r.depth && !onednn; ++f) onednn = frame_in(r.frames[f], "libdnnl");
    if (onednn) {
      ++c.in_onednn;
      std::string entry = "?";
      for (int f = 0; f < r.depth; ++f) {
        Dl_info info;
        if (frame_in(r.frames[f], "libdnnl") && dladdr(r.frames[f], &info) && info.dli_sname) entry = info.dli_sname;
      }
      ++c.onednn_entries[entry];
      continue;
    }
    bool node_loop = false;
    for (int f = 0; f < r.depth && !node_loop; ++f) node_loop = frame_is(r.frames[f], "GraphExecutor7execute");
    if (!node_loop) continue;
    ++c.in_node_loop;
    if (shown++ >= (std::getenv("KILN_ALLOC_TEST_STACKS") ? 200 : 6)) continue;
    char** names = backtrace_symbols(r.frames, r.depth);
    c.node_loop_stacks += "allocation " + std::to_string(i) + ":\n";
    for (int f = 1; f < r.depth && names; ++f) c.node_loop_stacks += std::string("  ") + names[f] + "\n";
    std::free(names);
  }
  // Past the kept stacks nothing is attributed: those count as the node loop's.
  if (c.total > kMaxKept) c.in_node_loop += c.total - kMaxKept;
  return c;
}

// ---- The model -------------------------------------------------------------------------------

class ResNetBuilder {
 public:
  ResNetBuilder() {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(17);
    graph_ = model_.mutable_graph();
    graph_->set_name("small_resnet");
  }

  std::string conv_bn(const std::string& x, int c_in, int c_out, int k, int stride, bool relu) {
    std::string name = "c" + std::to_string(n_++);
    add_weight(name + ".w", {c_out, c_in, k, k}, 1.0f / std::sqrt(float(c_in * k * k)));
    auto* conv = node("Conv", {x, name + ".w"}, name);
    add_ints(conv, "kernel_shape", {k, k});
    add_ints(conv, "strides", {stride, stride});
    add_ints(conv, "pads", {k / 2, k / 2, k / 2, k / 2});
    add_weight(name + ".scale", {c_out}, 0.2f, 1.0f);
    add_weight(name + ".bias", {c_out}, 0.1f);
    add_weight(name + ".mean", {c_out}, 0.1f);
    add_weight(name + ".var", {c_out}, 0.1f, 1.0f);
    node("BatchNormalization", {name, name + ".scale", name + ".bias", name + ".mean", name + ".var"},
         name + ".bn");
    if (!relu) return name + ".bn";
    node("Relu", {name + ".bn"}, name + ".relu");
    return name + ".relu";
  }

  std::string build_bytes() {
    auto* in = graph_->add_input();
    in->set_name("x");
    set_type(in, {1, 3, 64, 64});
    std::string h = conv_bn("x", 3, 16, 3, 2, true);
    auto* pool = node("MaxPool", {h}, "pool");
    add_ints(pool, "kernel_shape", {3, 3});
    add_ints(pool, "strides", {2, 2});
    add_ints(pool, "pads", {1, 1, 1, 1});
    std::string a = conv_bn("pool", 16, 16, 1, 1, true);
    a = conv_bn(a, 16, 16, 3, 1, true);
    a = conv_bn(a, 16, 64, 1, 1, false);
    std::string shortcut = conv_bn("pool", 16, 64, 1, 1, false);
    node("Add", {a, shortcut}, "residual");
    node("Relu", {"residual"}, "block");
    node("GlobalAveragePool", {"block"}, "gap");
    // The classifier as a 1x1 convolution (SqueezeNet's head): a Flatten would make its output
    // as a view, whose dims are a new vector per run (see the test below).
    add_weight("fc.w", {10, 64, 1, 1}, 0.125f);
    add_weight("fc.b", {10}, 0.1f);
    node("Conv", {"gap", "fc.w", "fc.b"}, "logits");
    auto* out = graph_->add_output();
    out->set_name("logits");
    set_type(out, {1, 10, 1, 1});
    return model_.SerializeAsString();
  }

 private:
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output) {
    auto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(output);
    return n;
  }
  static void add_ints(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& values) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  static void set_type(onnx::ValueInfoProto* v, const std::vector<int64_t>& dims) {
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void add_weight(const std::string& name, const std::vector<int64_t>& dims, float spread, float center = 0.0f) {
    auto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) t->add_float_data(center + spread * u(rng_));
  }

  onnx::ModelProto model_;
  onnx::GraphProto* graph_ = nullptr;
  std::mt19937 rng_{7};
  int n_ = 0;
};

std::string temp_path(const std::string& name) {
  static const kiln::test_support::ProcessTempDir dir("kiln_alloc_test");
  return dir.path() + "/" + name;
}

// The model to count: KILN_ALLOC_TEST_MODEL, or the small ResNet compiled here.
std::string model_path() {
  if (const char* p = std::getenv("KILN_ALLOC_TEST_MODEL")) return p;
  std::string bytes = ResNetBuilder().build_bytes();
  // In plain NCHW throughout: with channel-blocked activations the graph output would need a
  // layout conversion, a reference kernel that makes its output outside the execution state.
  kiln::compiler::CompileOptions options;
  options.passes.disabled.insert("layout_assignment");
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), "small_resnet", options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  if (!compiled.ok()) return "";
  std::string path = temp_path("small_resnet.kiln");
  kiln::Status st = kiln::compiler::write_compiled_model(*compiled, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

// Device buffers for every input (random values) and output of a loaded model, as datasets.
class Io {
 public:
  explicit Io(uint32_t id) {
    kilnmdlDesc* desc = kilnmdlCreateDesc();
    EXPECT_EQ(kilnmdlGetDesc(desc, id), KILN_SUCCESS);
    inputs_ = kilnmdlCreateDataset();
    outputs_ = kilnmdlCreateDataset();
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < kilnmdlGetNumInputs(desc); ++i) {
      size_t bytes = kilnmdlGetInputSizeByIndex(desc, i);
      std::vector<float> host(bytes / sizeof(float) + 1);
      for (float& v : host) v = u(rng);
      void* dev = device_buffer(bytes);
      EXPECT_EQ(kilnrtMemcpy(dev, bytes, host.data(), bytes, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS);
      kilnmdlAddDatasetBuffer(inputs_, kilnCreateDataBuffer(dev, bytes));
    }
    for (size_t i = 0; i < kilnmdlGetNumOutputs(desc); ++i) {
      size_t bytes = kilnmdlGetOutputSizeByIndex(desc, i);
      outputs_bytes_.push_back(bytes);
      output_buffers_.push_back(device_buffer(bytes));
      kilnmdlAddDatasetBuffer(outputs_, kilnCreateDataBuffer(output_buffers_.back(), bytes));
    }
    kilnmdlDestroyDesc(desc);
  }
  ~Io() {
    for (kilnmdlDataset* d : {inputs_, outputs_}) {
      for (size_t i = 0; i < kilnmdlGetDatasetNumBuffers(d); ++i)
        kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(d, i));
      kilnmdlDestroyDataset(d);
    }
    for (void* p : device_) kilnrtFree(p);
  }
  const kilnmdlDataset* inputs() const { return inputs_; }
  kilnmdlDataset* outputs() { return outputs_; }
  // The output bytes, copied to the host.
  std::vector<std::vector<uint8_t>> output_values() const {
    std::vector<std::vector<uint8_t>> v;
    for (size_t i = 0; i < output_buffers_.size(); ++i) {
      std::vector<uint8_t>& b = v.emplace_back(outputs_bytes_[i]);
      EXPECT_EQ(kilnrtMemcpy(b.data(), b.size(), output_buffers_[i], b.size(), KILN_MEMCPY_DEVICE_TO_HOST),
                KILN_SUCCESS);
    }
    return v;
  }

 private:
  void* device_buffer(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(kilnrtMalloc(&p, bytes, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS);
    device_.push_back(p);
    return p;
  }
  kilnmdlDataset* inputs_ = nullptr;
  kilnmdlDataset* outputs_ = nullptr;
  std::vector<void*> device_;
  std::vector<void*> output_buffers_;
  std::vector<size_t> outputs_bytes_;
};

class HotPathAllocationsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS);
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  }
  static void TearDownTestSuite() {
    kilnrtResetDevice(0);
    kilnFinalize();
  }
};

// The first execution already runs on the .kiln's arena plan: every activation is a tensor in
// the plan's block (none from the context's arena), the block is the plan's arena, and what the
// first execution allocates is printed (the block and one tensor per planned value, the kernels'
// first-use state, oneDNN's own).
TEST_F(HotPathAllocationsTest, TheFirstExecutionRunsOnThePlannedArena) {
  void* frames[4];
  (void)backtrace(frames, 4);
  std::string path = model_path();
  ASSERT_FALSE(path.empty());
  size_t work = 0, weight = 0;
  ASSERT_EQ(kilnmdlQuerySize(path.c_str(), &work, &weight), KILN_SUCCESS) << kilnGetRecentErrMsg();
  uint32_t id = 0;
  ASSERT_EQ(kilnmdlLoadFromFile(path.c_str(), &id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  auto model = kiln::rt::ModelTable::get().find(id);
  ASSERT_NE(model, nullptr);
  Io io(id);
  start_counting();
  kilnError first = kilnmdlExecute(id, io.inputs(), io.outputs());
  Count c = stop_counting();
  ASSERT_EQ(first, KILN_SUCCESS) << kilnGetRecentErrMsg();
  kiln::rt::Model::Stats stats = model->stats();
  std::printf("%s: first kilnmdlExecute: %llu allocations, %llu inside oneDNN, %llu in the node loop outside "
              "oneDNN; %llu outputs placed by the arena plan of %zu bytes (kilnmdlQuerySize: %zu), %llu "
              "activation blocks from the arena\n",
              path.c_str(), static_cast<unsigned long long>(c.total), static_cast<unsigned long long>(c.in_onednn),
              static_cast<unsigned long long>(c.in_node_loop), static_cast<unsigned long long>(stats.planned_outputs),
              stats.planned_bytes, work, static_cast<unsigned long long>(stats.arenas.fresh_blocks));
  EXPECT_EQ(stats.planned_bytes, work);
  EXPECT_GT(stats.planned_outputs, 0u);
  if (!std::getenv("KILN_ALLOC_TEST_MODEL")) EXPECT_EQ(stats.arenas.fresh_blocks, 0u);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

// The graph's execution allocates nothing once the first executions have sized the execution
// state; what remains per kilnmdlExecute is printed, split into oneDNN's (its primitive
// execution: argument maps, memory objects) and the rest, which must be nothing per node.
TEST_F(HotPathAllocationsTest, SteadyStateExecutionsAllocateNothingPerNode) {
  // backtrace() loads its unwinder on first use: not inside the counted window.
  void* frames[4];
  (void)backtrace(frames, 4);
  std::string path = model_path();
  ASSERT_FALSE(path.empty());
  uint32_t id = 0;
  ASSERT_EQ(kilnmdlLoadFromFile(path.c_str(), &id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  auto model = kiln::rt::ModelTable::get().find(id);
  ASSERT_NE(model, nullptr);
  size_t steps = model->executor_steps();
  Io io(id);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(kilnmdlExecute(id, io.inputs(), io.outputs()), KILN_SUCCESS) << kilnGetRecentErrMsg();
  const auto warm_outputs = io.output_values();

  constexpr int kRuns = 10;
  start_counting();
  for (int i = 0; i < kRuns; ++i) {
    if (kilnmdlExecute(id, io.inputs(), io.outputs()) != KILN_SUCCESS) break;
  }
  Count c = stop_counting();
  EXPECT_EQ(io.output_values(), warm_outputs) << "recycled storage changed the results";
  kiln::rt::Model::Stats stats = model->stats();
  EXPECT_GT(stats.recycled_outputs, 0u);
  auto per_run = [&](uint64_t n) { return double(n) / kRuns; };
  std::printf("%s: %zu nodes; allocations per kilnmdlExecute: %.1f, of which %.1f inside oneDNN, %.1f in the "
              "node loop outside oneDNN, %.1f in the API call around it\n",
              path.c_str(), steps, per_run(c.total), per_run(c.in_onednn), per_run(c.in_node_loop),
              per_run(c.total - c.in_onednn - c.in_node_loop));
  for (const auto& [entry, n] : c.onednn_entries) std::printf("  inside oneDNN, under %s: %.1f\n", entry.c_str(), per_run(n));
  // Known to allocate per run, and so reported, not failed, on a model given by
  // KILN_ALLOC_TEST_MODEL (ResNet-50 in tests/e2e): reference kernels that make their output
  // themselves, as views (Flatten, Reshape: a new dims vector) or conversions (TransData between
  // channel-blocked and plain layouts), instead of through KernelContext::allocate_output.
  if (std::getenv("KILN_ALLOC_TEST_MODEL")) {
    if (c.in_node_loop > 0) std::printf("node-loop allocations outside oneDNN, first stacks:\n%s", c.node_loop_stacks.c_str());
  } else {
    EXPECT_EQ(c.in_node_loop, 0u) << c.node_loop_stacks;
  }
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

}  // namespace
