// Shared by the oneDNN kernels (conv, matmul): the CPU engine, a per-thread stream, a
// per-thread workspace for scratchpads and layout buffers, dims helpers, and the mapping of
// the fused ops' activation (docs/fused-ops.md) to oneDNN 2.6 eltwise post-ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/status.h"
#include "kernels/kernel_registry.h"
#include "ops/fused_activation.h"
#include "ops/spatial_util.h"

namespace kiln::kernels::onednn {

// The process's CPU engine (created on first use, never destroyed).
const dnnl::engine& cpu_engine();

// An in-order stream on cpu_engine() for the calling thread. Kernels execute on it and
// wait; a stream per thread keeps concurrent runs of one model independent.
dnnl::stream& thread_stream();

// A 64-byte aligned buffer of at least `bytes` owned by the calling thread, reused by every
// kernel run on that thread (it grows, never shrinks). Kernels take their primitives'
// scratchpads (dnnl::scratchpad_mode::user) and layout buffers from it, so a run allocates
// only when a thread first needs more than before. Valid until the next call on the thread;
// a kernel calls it once per run. Null when the allocation fails.
void* thread_workspace(size_t bytes);

// The desc of `bytes` untyped bytes (a scratchpad), made without the std::vector the C++
// constructor takes: for run().
dnnl::memory::desc bytes_desc(size_t bytes);

// Rounds up to a multiple of 64 (to lay several buffers out in one workspace).
inline size_t align64(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

inline dnnl::memory::dims to_dims(const std::vector<int64_t>& v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

// The plain (row-major) format tag for a tensor of `rank` 1..6: a, ab, abc, ... This is
// ncw / nchw / ncdhw for activations and oiw / oihw / oidhw (goiw ... with groups) for
// weights.
dnnl::memory::format_tag plain_tag(int rank);

// A convolution's window as oneDNN takes it: strides, dilations as gaps (ONNX's minus 1), and
// the padding before and after, per spatial dim.
struct ConvWindow {
  dnnl::memory::dims strides, dilations, pad_l, pad_r;
};
ConvWindow conv_window(const ops::WindowGeometry& geo);

// Weights dims [M, C/g, k...] as oneDNN's convolutions take them: as they are for one group,
// else [g, M/g, C/g, k...] (goihw ...).
dnnl::memory::dims grouped_weight_dims(const std::vector<int64_t>& w_dims, int64_t group);

// Whether oneDNN's int8 (u8/s8 x s8) kernels sum byte products exactly in int32 here: with
// VNNI (AVX512-VNNI or AVX-VNNI) they do; without it they add pairs of products in saturating
// int16 first (vpmaddubsw), so kernels that promise integer results equal to the reference
// (MatMulInteger, ConvInteger) refuse such CPUs.
bool int8_sums_exact();

// Whether `act` can run as oneDNN eltwise post-ops. Not mapped: HardSwish with other
// parameters than ONNX's (1/6, 0.5) (oneDNN 2.6's hardswish has them fixed), and Clip with
// lo > hi (clip_v2's order of comparisons differs from ONNX's there), and HardSigmoid with a
// post-affine shift (two linear post-ops, which oneDNN 2.6 gets wrong).
bool activation_supported(const ops::FusedActivation& act);

// Appends the eltwise post-ops computing `act` to `po` (nothing for kNone):
//   Relu -> eltwise_relu; LeakyRelu -> eltwise_relu(alpha); Clip -> eltwise_clip_v2(lo, hi);
//   HardSigmoid -> eltwise_linear(alpha, beta) then eltwise_clip_v2(0, 1) (2.6 has no
//   hardsigmoid); HardSwish -> eltwise_hardswish; Sigmoid -> eltwise_logistic;
//   Tanh -> eltwise_tanh; Silu -> eltwise_swish(1); Gelu -> eltwise_gelu_erf;
//   GeluTanh -> eltwise_gelu_tanh. A post-affine: its scale as the last of those post-ops'
//   output scale, its shift as eltwise_linear(1, shift).
// Fails (leaving `po` unchanged) when !activation_supported(act).
// NaN: eltwise_relu maps it to 0 as the reference Relu does; eltwise_clip_v2 (max then min)
// gives a bound where ONNX Clip keeps the NaN. Kernels accept that deviation: a NaN reaches
// the activation only from non-finite inputs, and mapping Clip (Relu6 in MobileNets) matters.
Status append_activation(const ops::FusedActivation& act, dnnl::post_ops& po);

// While alive, the calling thread's OpenMP thread count is kiln::num_threads(). oneDNN fixes a
// primitive's parallel decomposition (and thread count) when it creates it, so kernels create
// their primitives under this scope: they then run with the count Kiln's parallel_for uses.
class CreationThreadsScope {
 public:
  CreationThreadsScope();
  ~CreationThreadsScope();
  CreationThreadsScope(const CreationThreadsScope&) = delete;
  CreationThreadsScope& operator=(const CreationThreadsScope&) = delete;

 private:
  int saved_;
};

// Runs what it encloses with one OpenMP thread. Weight packing at prepare uses it: the thread
// that loads a model is often not the one that runs it (a stream's thread), and a parallel
// region would give the loading thread an OpenMP team of its own. libgomp counts the idle
// threads of every team against the cores, and with more of them than cores it stops
// spinning between parallel regions (a futex wake-up per kernel: measured on MobileNetV2 at 2
// threads, ~110 context switches per run and slower than 1 thread).
class SingleThreadScope {
 public:
  SingleThreadScope();
  ~SingleThreadScope();
  SingleThreadScope(const SingleThreadScope&) = delete;
  SingleThreadScope& operator=(const SingleThreadScope&) = delete;

 private:
  int saved_;
};

// The memory objects of a kernel's runs, made once per thread and re-pointed at each run's
// buffers (dnnl_memory_set_data_handle, which zero-pads a blocked layout's tail exactly as
// creating the memory does): a memory made per run is three allocations (the C++ handle's
// shared state, oneDNN's object and its storage). Each thread has its own set per kernel, so
// concurrent runs of one kernel never share a memory; a member of the kernel, made at prepare.
class RunMemories {
 public:
  static constexpr int kMaxMemories = 16;
  RunMemories();
  ~RunMemories();
  RunMemories(const RunMemories&) = delete;
  RunMemories& operator=(const RunMemories&) = delete;
  // Memory `index` (< kMaxMemories) of this thread, laid out as `md` (the same desc for an
  // index at every call), pointing at `data`. Valid until the next run of the kernel on this
  // thread. Throws dnnl::error.
  const dnnl::memory& get(int index, const dnnl::memory::desc& md, const void* data) const;

 private:
  uint32_t id_;          // index into each thread's table; reused after the kernel goes
  uint64_t generation_;  // tells this kernel's entries from those of an earlier holder of id_
};

// A one-element int32 memory holding `v`: a runtime zero point (DNNL_RUNTIME_S32_VAL at
// creation) of the int8 kernels. Throws dnnl::error.
dnnl::memory s32_scalar(int32_t v);

// A reorder from `from` to `to` with a user scratchpad; `scratch` becomes the larger of
// itself and the reorder's scratchpad size. Throws dnnl::error, as primitive creation does.
dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to, size_t& scratch);

// New memory oneDNN owns, laid out as `packed`, holding `data` (laid out as `user`): weights
// packed once, at prepare, on one thread (SingleThreadScope). Throws dnnl::error.
dnnl::memory pack(const dnnl::memory::desc& user, const void* data, const dnnl::memory::desc& packed);

// Constant weights packed as `packed`, shared by every kernel that packs the same data the same
// way: the prepared kernels of one node at several input shapes (kernels/shape_specialized_
// kernel.h) reuse one copy instead of one per shape. The buffer (64-byte aligned, `packed`'s
// size) lives while some holder keeps the returned pointer. `data` must stay valid, at the same
// address and unchanged, for as long as the caller holds the result (a kernel keeps the
// initializer it packed alive): the cache is keyed by address, and an entry dies with its last
// holder, before the address can be reused. Throws dnnl::error.
// Weights `kiln compile` packed into the model (kernels/prepacked_weights.h) are used where they
// lie instead, when the node being prepared has them for `data` in exactly the `packed` layout.
std::shared_ptr<void> pack_shared(const dnnl::memory::desc& user, const void* data, const dnnl::memory::desc& packed);
// pack_shared without looking in the model: packs here (or finds this process's copy).
std::shared_ptr<void> pack_shared_here(const dnnl::memory::desc& user, const void* data,
                                       const dnnl::memory::desc& packed);

class Args;

// How a primitive that picks its own source and destination layouts (format "any") runs on
// Kiln's tensors: the source reordered into the thread workspace before the primitive, the
// destination out of it after, each only when the layouts differ. The workspace holds one
// scratchpad (the primitive's and the reorders', which run one after another), then the
// primitive's source, then its destination.
struct LayoutBridge {
  dnnl::memory::desc user_src, user_dst;  // the tensors' layouts: set these, then plan()
  dnnl::memory::desc src, dst;            // the primitive's
  bool reorder_src = false, reorder_dst = false;
  dnnl::reorder src_reorder, dst_reorder;
  dnnl::reorder dst_in_reorder;  // user_dst into dst (a residual the primitive adds to), if asked
  size_t scratch_bytes = 0, src_offset = 0, dst_offset = 0, workspace_bytes = 0;

  // Creates the reorders and lays out the workspace for a primitive with these source and
  // destination layouts and scratchpad size; `dst_in`: also a reorder of a user_dst-laid-out
  // tensor into dst. Throws dnnl::error.
  void plan(const dnnl::memory::desc& primitive_src, const dnnl::memory::desc& primitive_dst,
            size_t primitive_scratch_bytes, bool dst_in = false);

  // The memories of one run on workspace `ws` (workspace_bytes long) with source x and
  // destination y in the user layouts.
  struct Bound {
    dnnl::memory scratch, x_user, y_user, src, dst;
  };
  Bound bind(char* ws, const void* x, void* y) const;
  RunMemories memories;  // bind's, indices 0..4

  // One run of primitive `p` from x to y (user layouts) on workspace `ws`: X reordered in,
  // `p` executed with SRC, DST, SCRATCHPAD and `extra` (weights, bias, zero points ...), Y
  // reordered out, then the stream waited for. Throws dnnl::error.
  void run(const dnnl::primitive& p, const Args& extra, char* ws, const void* x, void* y,
           dnnl::stream& s) const;
};

// The arguments of one primitive execution, kept on the stack and executed through the C API:
// the C++ API's execute takes an std::unordered_map and copies it into a vector, allocations
// on every run that Kiln's kernels do without. The memories must outlive execute().
class Args {
 public:
  Args() = default;
  Args(std::initializer_list<std::pair<int, const dnnl::memory*>> args) {
    for (const auto& [arg, mem] : args) add(arg, *mem);
  }
  Args& add(int arg, const dnnl::memory& mem);
  // Every argument of `other` too.
  Args& add(const Args& other);
  // Executes `p` on `s` with these arguments. Throws dnnl::error, as the C++ API does.
  void execute(const dnnl::primitive& p, dnnl::stream& s) const;

 private:
  static constexpr int kMaxArgs = 16;
  dnnl_exec_arg_t args_[kMaxArgs];
  int count_ = 0;
};

// prepare() of a oneDNN kernel: KernelT(plan_fn(node)'s plan, the op's reference kernel)
// (prepare_with_reference), then KernelT::init(node) makes its primitives and packs its weights;
// an error of either means "not this kernel".
template <typename KernelT, typename PlanFn>
Expected<std::unique_ptr<Kernel>> prepare_planned(const ir::Node& node, PlanFn plan_fn) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, prepare_with_reference<KernelT>(node, plan_fn));
  KILN_RETURN_IF_ERROR(static_cast<KernelT&>(*kernel).init(node));
  return kernel;
}

// "onednn:" + the implementation oneDNN picked, e.g. "onednn:jit:avx512_core".
std::string implementation_name(const dnnl::primitive_desc_base& pd);

// implementation_name(pd), or why it is no fast kernel when it is oneDNN's reference
// implementation ("node N: oneDNN offers only onednn:ref:any"): the node then runs on Kiln's
// reference kernel, which the compile report names.
Expected<std::string> fast_implementation(const ir::Node& node, const dnnl::primitive_desc_base& pd);

}  // namespace kiln::kernels::onednn
