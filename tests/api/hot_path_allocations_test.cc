// Counts heap allocations of steady-state model executions (kilnmdlExecute) with an allocator
// hook: this binary interposes malloc and its relatives (operator new goes through malloc), so
// every allocation of Kiln, libstdc++, oneDNN and libgomp on any thread is seen. Each counted
// allocation keeps its call stack; the first few stacks are printed on failure, symbolized.
//
// oneDNN is counted too. The binary also interposes dnnl_primitive_execute, oneDNN's only entry
// point for running a primitive (its C++ API's execute calls it), to know while a primitive
// runs, which one (its implementation's name) and with how many arguments. An allocation is
//   - Kiln's (in the graph's node loop, GraphExecutor::execute, or in the API call around it)
//     when no oneDNN primitive is running and no frame is in libdnnl: must be none;
//   - oneDNN's outside a primitive execution (a primitive, memory object or reorder made per
//     run): must be none;
//   - oneDNN's argument map: dnnl_primitive_execute copies the argument array it is given into
//     an std::unordered_map<int, memory_arg_t> (its exec_args_t) before anything else, one
//     node per argument the primitive uses and one bucket array per call, on every call; no
//     API of oneDNN (2.6 or later) executes a primitive without it. Told apart by the call
//     site in dnnl_primitive_execute these allocations return to, which the test calibrates
//     (MapCalibration below); at most one allocation per argument passed plus one per call;
//   - oneDNN's implementation's: what a primitive's own execute allocates (on ResNet-50 with
//     oneDNN 2.6 on AVX-512: the Winograd and direct jit convolutions' parallel_nd lambdas,
//     which std::function keeps on the heap when they capture more than 16 bytes, and small
//     per-call vectors of the 1x1 convolutions' post-op arguments; PP-OCRv4 det's gemm-based
//     deconvolution mallocs its GEMM packing buffers per call). Printed per implementation;
//     not Kiln's to remove: oneDNN has no way to hand it that memory (a user scratchpad holds
//     only what a primitive books in its scratchpad registry).
//
// The model: a small ResNet (stem conv + BN + ReLU, max pool, a bottleneck block with a
// projection shortcut and the residual Add, global average pool, a 1x1 conv classifier) built
// here with random weights, compiled as `kiln compile` does but in plain layout; or, when
// KILN_ALLOC_TEST_MODEL names a .kiln file, that model with random inputs (tests/e2e runs it on
// ResNet-50 and MobileNetV2, and prints what it counts).
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kiln/kiln.h"
#include "runtime/model_runtime.h"
#include "../process_temp_dir.h"

// ---- The hooks -------------------------------------------------------------------------------

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
  size_t size = 0;
  const char* primitive = nullptr;  // the implementation running when it was made, if any
};

std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_count{0};
Recorded g_recorded[kMaxKept];
thread_local bool t_in_hook = false;

// Set by the dnnl_primitive_execute hook while a primitive runs (executions are serialised in
// this test: one stream): its implementation's name, read by allocations on any thread (the
// OpenMP workers of a parallel region included).
std::atomic<const char*> g_running{nullptr};
std::atomic<uint64_t> g_executes{0};
std::atomic<uint64_t> g_execute_args{0};

void note_allocation(size_t size) {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_hook) return;
  t_in_hook = true;
  uint64_t i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxKept) {
    g_recorded[i].depth = backtrace(g_recorded[i].frames, kMaxStack);
    g_recorded[i].size = size;
    g_recorded[i].primitive = g_running.load(std::memory_order_relaxed);
  }
  t_in_hook = false;
}

}  // namespace

extern "C" {
void* malloc(size_t size) {
  note_allocation(size);
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  note_allocation(n * size);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  note_allocation(size);
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) {
  note_allocation(size);
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) {
  note_allocation(size);
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  note_allocation(size);
  void* p = __libc_memalign(alignment, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }

// Kiln's kernels (linked into this binary) call this one; it forwards to libdnnl's.
dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                                     const dnnl_exec_arg_t* args) {
  using Execute = dnnl_status_t (*)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t*);
  static const Execute real = reinterpret_cast<Execute>(dlsym(RTLD_NEXT, "dnnl_primitive_execute"));
  const char* impl = "?";
  const_dnnl_primitive_desc_t pd = nullptr;
  if (dnnl_primitive_get_primitive_desc(primitive, &pd) == dnnl_success)
    (void)dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  if (g_counting.load(std::memory_order_relaxed)) {
    g_executes.fetch_add(1, std::memory_order_relaxed);
    g_execute_args.fetch_add(static_cast<uint64_t>(nargs), std::memory_order_relaxed);
  }
  g_running.store(impl);
  dnnl_status_t status = real(primitive, stream, nargs, args);
  g_running.store(nullptr);
  return status;
}
}

namespace {

namespace fs = std::filesystem;

bool frame_in(void* frame, const char* library) {
  Dl_info info;
  return dladdr(frame, &info) && info.dli_fname && std::strstr(info.dli_fname, library);
}

bool frame_is(void* frame, const char* symbol_part) {
  Dl_info info;
  return dladdr(frame, &info) && info.dli_sname && std::strstr(info.dli_sname, symbol_part);
}

// The return address in libdnnl's dnnl_primitive_execute on a stack, or null.
void* execute_site(const Recorded& r) {
  for (int f = 0; f < r.depth; ++f) {
    Dl_info info;
    if (dladdr(r.frames[f], &info) && info.dli_fname && std::strstr(info.dli_fname, "libdnnl") &&
        info.dli_sname && std::strcmp(info.dli_sname, "dnnl_primitive_execute") == 0)
      return r.frames[f];
  }
  return nullptr;
}

// The call sites in dnnl_primitive_execute under which it builds its argument map, found by
// MapCalibration. Read by stop_counting().
std::set<void*> g_map_sites;

// Allocations between start() and stop(), by whose they are (see the top of the file).
struct Count {
  uint64_t total = 0;
  uint64_t kiln_node_loop = 0;     // Kiln's, in GraphExecutor::execute
  uint64_t kiln_api = 0;           // Kiln's, around it
  uint64_t onednn_outside = 0;     // oneDNN's, no primitive running
  uint64_t onednn_arg_map = 0;     // dnnl_primitive_execute's argument map
  uint64_t onednn_impl = 0;        // the primitive's own
  uint64_t executes = 0, execute_args = 0;
  std::map<std::string, uint64_t> impl_by_name;  // onednn_impl by implementation
  std::map<size_t, uint64_t> impl_by_size;        // onednn_impl by size in bytes
  std::string kiln_stacks;                        // the first of Kiln's and oneDNN's outside, symbolized
  int stacks_shown = 0;
  uint64_t kiln() const { return kiln_node_loop + kiln_api; }
};

void start_counting() {
  g_count.store(0);
  g_executes.store(0);
  g_execute_args.store(0);
  g_counting.store(true);
}

void add_stack(Count& c, uint64_t i, const Recorded& r, const char* what) {
  if (c.stacks_shown++ >= (std::getenv("KILN_ALLOC_TEST_STACKS") ? 200 : 6)) return;
  char** names = backtrace_symbols(r.frames, r.depth);
  c.kiln_stacks += "allocation " + std::to_string(i) + " (" + what + ", " + std::to_string(r.size) + " bytes):\n";
  for (int f = 1; f < r.depth && names; ++f) c.kiln_stacks += std::string("  ") + names[f] + "\n";
  std::free(names);
}

Count stop_counting() {
  g_counting.store(false);
  Count c;
  c.total = g_count.load();
  c.executes = g_executes.load();
  c.execute_args = g_execute_args.load();
  for (uint64_t i = 0; i < std::min<uint64_t>(c.total, kMaxKept); ++i) {
    const Recorded& r = g_recorded[i];
    bool onednn = false;
    for (int f = 0; f < r.depth && !onednn; ++f) onednn = frame_in(r.frames[f], "libdnnl");
    if (r.primitive) {
      // A primitive was running: its argument map, or its implementation (the OpenMP workers of
      // its parallel regions included).
      void* site = execute_site(r);
      if (site && g_map_sites.count(site)) {
        ++c.onednn_arg_map;
      } else {
        ++c.onednn_impl;
        ++c.impl_by_name[r.primitive];
        ++c.impl_by_size[r.size];
      }
      continue;
    }
    if (onednn) {
      ++c.onednn_outside;
      add_stack(c, i, r, "oneDNN, no primitive running");
      continue;
    }
    bool node_loop = false;
    for (int f = 0; f < r.depth && !node_loop; ++f) node_loop = frame_is(r.frames[f], "GraphExecutor7execute");
    ++(node_loop ? c.kiln_node_loop : c.kiln_api);
    add_stack(c, i, r, node_loop ? "Kiln, node loop" : "Kiln, API call");
  }
  // Past the kept stacks nothing is attributed: those count as Kiln's.
  if (c.total > kMaxKept) c.kiln_api += c.total - kMaxKept;
  return c;
}

// Finds the call site in dnnl_primitive_execute under which the argument map is built: an
// eltwise primitive executed with its source but no destination fails in the argument check
// (cvt_primitive_args) after inserting the source into the map, before anything runs, so all it
// allocates is the map's (one node and one bucket array). Returns the allocations it counted.
uint64_t calibrate_map_sites() {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  dnnl::memory::desc md({1, 16}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  dnnl::eltwise_forward relu(dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, md), eng));
  dnnl::memory src(md, eng);
  dnnl_exec_arg_t only_src{DNNL_ARG_SRC, src.get()};
  // Warm: whatever a first call sets up once is not counted.
  (void)dnnl_primitive_execute(relu.get(), strm.get(), 1, &only_src);
  start_counting();
  dnnl_status_t st = dnnl_primitive_execute(relu.get(), strm.get(), 1, &only_src);
  g_counting.store(false);
  EXPECT_EQ(st, dnnl_invalid_arguments) << "the calibration call was expected to fail its argument check";
  uint64_t n = g_count.load();
  for (uint64_t i = 0; i < std::min<uint64_t>(n, kMaxKept); ++i)
    if (void* site = execute_site(g_recorded[i])) g_map_sites.insert(site);
  return n;
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
    // backtrace() loads its unwinder on first use: not inside a counted window.
    void* frames[4];
    (void)backtrace(frames, 4);
    map_calibration_count_ = calibrate_map_sites();
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS);
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  }
  static void TearDownTestSuite() {
    kilnrtResetDevice(0);
    kilnFinalize();
  }
  static inline uint64_t map_calibration_count_ = 0;
};

// The calibration holds: executing a primitive with one argument and failing the argument check
// allocates exactly the argument map's node and bucket array, all under one call site of
// dnnl_primitive_execute. If this fails the attribution below is not to be trusted.
TEST_F(HotPathAllocationsTest, OneDnnArgumentMapIsOneNodePerArgumentAndOneBucketArray) {
  EXPECT_EQ(map_calibration_count_, 2u);
  EXPECT_EQ(g_map_sites.size(), 1u);
}

// The first execution already runs on the .kiln's arena plan: every activation is a tensor in
// the plan's block (none from the context's arena), the block is the plan's arena, and what the
// first execution allocates is printed (the block and one tensor per planned value, the kernels'
// first-use state, oneDNN's own).
TEST_F(HotPathAllocationsTest, TheFirstExecutionRunsOnThePlannedArena) {
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
  std::printf("%s: first kilnmdlExecute: %llu allocations, %llu Kiln's (%llu in the node loop), %llu oneDNN's "
              "(%llu outside primitive executions); %llu outputs placed by the arena plan of %zu bytes "
              "(kilnmdlQuerySize: %zu), %llu activation blocks from the arena\n",
              path.c_str(), static_cast<unsigned long long>(c.total), static_cast<unsigned long long>(c.kiln()),
              static_cast<unsigned long long>(c.kiln_node_loop),
              static_cast<unsigned long long>(c.total - c.kiln()), static_cast<unsigned long long>(c.onednn_outside),
              static_cast<unsigned long long>(stats.planned_outputs), stats.planned_bytes, work,
              static_cast<unsigned long long>(stats.arenas.fresh_blocks));
  EXPECT_EQ(stats.planned_bytes, work);
  EXPECT_GT(stats.planned_outputs, 0u);
  if (!std::getenv("KILN_ALLOC_TEST_MODEL")) EXPECT_EQ(stats.arenas.fresh_blocks, 0u);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

// Once the first executions have sized the execution state, an execution allocates nothing of
// Kiln's and nothing of oneDNN's outside its primitives' executions; inside them only oneDNN's
// argument map (bounded by the arguments passed) and what the implementations allocate
// themselves, printed per implementation (see the top of the file).
TEST_F(HotPathAllocationsTest, SteadyStateExecutionsAllocateNothingOutsideOneDnnExecute) {
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
  std::printf("%s: %zu nodes, %.1f oneDNN primitive executions (%.1f arguments) per kilnmdlExecute; "
              "allocations per kilnmdlExecute: %.1f, of which Kiln's %.1f (node loop %.1f, API call %.1f), "
              "oneDNN's outside primitive executions %.1f, oneDNN's argument maps %.1f, oneDNN's "
              "implementations' own %.1f\n",
              path.c_str(), steps, per_run(c.executes), per_run(c.execute_args), per_run(c.total),
              per_run(c.kiln()), per_run(c.kiln_node_loop), per_run(c.kiln_api), per_run(c.onednn_outside),
              per_run(c.onednn_arg_map), per_run(c.onednn_impl));
  for (const auto& [name, n] : c.impl_by_name) std::printf("  oneDNN implementation %s: %.1f\n", name.c_str(), per_run(n));
  std::string sizes;
  for (const auto& [size, n] : c.impl_by_size) sizes += " " + std::to_string(size) + " B x " + std::to_string(n);
  if (!sizes.empty()) std::printf("  their sizes over %d runs:%s\n", kRuns, sizes.c_str());
  EXPECT_EQ(c.kiln(), 0u) << c.kiln_stacks;
  EXPECT_EQ(c.onednn_outside, 0u) << c.kiln_stacks;
  EXPECT_LE(c.onednn_arg_map, c.execute_args + c.executes);
  EXPECT_GT(c.executes, 0u);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

}  // namespace
