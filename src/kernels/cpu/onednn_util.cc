// oneDNN helpers shared by the CPU kernels: engine, per-thread stream and workspace,
// activation post-ops.
#include "kernels/cpu/onednn_util.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "core/huge_pages.h"
#include "core/parallel.h"
#include "kernels/cpu/lent_workspace.h"
#include "kernels/cpu/weak_cache.h"
#include "kernels/kernel_registry.h"
#include "kernels/prepacked_weights.h"

namespace kiln::kernels::onednn {
namespace {

using Kind = ops::FusedActivationKind;
using Alg = dnnl::algorithm;

}  // namespace

const dnnl::engine& cpu_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  return *engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

void* thread_workspace(size_t bytes) {
  // Grown by half again at least, and on huge pages (core/huge_pages.h): at new input shapes
  // (open dims) the workspace holds blocked copies of whole activations, and growing it step
  // by step faulted fresh memory in at each step.
  struct Block {
    void* data = nullptr;
    size_t capacity = 0;
    ~Block() { free_huge_page_block(data, capacity); }
  };
  // A part of the model's arena the runtime lends this run (lent_workspace.h), when it is large
  // enough: the node's planned workspace, or the activations' free space, instead of memory of
  // its own.
  if (const WorkspaceLender& lender = t_workspace_lender; lender.lend) {
    const LentWorkspace lent = lender.lend(lender.owner, lender.step, bytes);
    if (lent.data && bytes <= lent.bytes) {
      (lent.planned ? workspace_counts().planned : workspace_counts().free_range).fetch_add(1, std::memory_order_relaxed);
      return lent.data;
    }
  }
  workspace_counts().own_block.fetch_add(1, std::memory_order_relaxed);
  thread_local Block block;
  if (bytes <= block.capacity) return block.data;
  const size_t want = align64(std::max(bytes, block.capacity + block.capacity / 2));
  void* p = allocate_huge_page_block(want);
  if (!p) return nullptr;
  free_huge_page_block(block.data, block.capacity);
  block.data = p;
  block.capacity = want;
  return p;
}

dnnl::memory::format_tag plain_tag(int rank) {
  using Tag = dnnl::memory::format_tag;
  switch (rank) {
    case 1: return Tag::a;
    case 2: return Tag::ab;
    case 3: return Tag::abc;
    case 4: return Tag::abcd;
    case 5: return Tag::abcde;
    case 6: return Tag::abcdef;
    default: return Tag::undef;
  }
}

bool activation_supported(const ops::FusedActivation& act) {
  // A post-affine shift is a linear post-op; oneDNN 2.6 misapplies a second one (see
  // append_activation), and HardSigmoid already is one.
  if (act.post_shift != 0.0f && act.kind == Kind::kHardSigmoid) return false;
  switch (act.kind) {
    case Kind::kHardSwish:
      // oneDNN 2.6: d = s * min(max(s + 3, 0), 6) / 6, ONNX's default parameters only.
      return act.p0 == 1.0f / 6.0f && act.p1 == 0.5f;
    case Kind::kClip:
      return act.p0 <= act.p1;
    default:
      return true;
  }
}

Status append_activation(const ops::FusedActivation& act, dnnl::post_ops& po) {
  if (!activation_supported(act))
    return unsupported("activation (kind %d, params %g, %g) has no oneDNN 2.6 post-op", static_cast<int>(act.kind),
                       act.p0, act.p1);
  struct Step {
    Alg alg;
    float alpha, beta;
  };
  std::vector<Step> steps;
  switch (act.kind) {
    case Kind::kNone: break;
    case Kind::kRelu: steps.push_back({Alg::eltwise_relu, 0.0f, 0.0f}); break;
    case Kind::kLeakyRelu: steps.push_back({Alg::eltwise_relu, act.p0, 0.0f}); break;
    case Kind::kClip: steps.push_back({Alg::eltwise_clip_v2, act.p0, act.p1}); break;
    case Kind::kHardSigmoid:
      steps.push_back({Alg::eltwise_linear, act.p0, act.p1});
      steps.push_back({Alg::eltwise_clip_v2, 0.0f, 1.0f});
      break;
    case Kind::kHardSwish: steps.push_back({Alg::eltwise_hardswish, 0.0f, 0.0f}); break;
    case Kind::kSigmoid: steps.push_back({Alg::eltwise_logistic, 0.0f, 0.0f}); break;
    case Kind::kTanh: steps.push_back({Alg::eltwise_tanh, 0.0f, 0.0f}); break;
    case Kind::kSilu: steps.push_back({Alg::eltwise_swish, act.p0, 0.0f}); break;
    case Kind::kGelu: steps.push_back({Alg::eltwise_gelu_erf, 0.0f, 0.0f}); break;
    case Kind::kGeluTanh: steps.push_back({Alg::eltwise_gelu_tanh, 0.0f, 0.0f}); break;
  }
  // The post-affine rounds twice, as the unfused Mul and Add: the scale as the last eltwise
  // post-op's output scale (d = scale * act(s)), the shift as a linear post-op 1 * d + t. Not
  // one linear post-op s * d + t (one rounding), and not two linear post-ops: oneDNN 2.6's
  // JIT kernels then apply the first one's alpha to both (tests/kernels/conv_kernel_test.cc).
  if (act.has_post_affine() && steps.empty())
    return unsupported("a post-affine without an activation");
  for (size_t i = 0; i < steps.size(); ++i) {
    const float scale = i + 1 == steps.size() ? act.post_scale : 1.0f;
    po.append_eltwise(scale, steps[i].alg, steps[i].alpha, steps[i].beta);
  }
  if (act.post_shift != 0.0f) po.append_eltwise(1.0f, Alg::eltwise_linear, 1.0f, act.post_shift);
  return ok_status();
}

CreationThreadsScope::CreationThreadsScope() : saved_(omp_get_max_threads()) {
  omp_set_num_threads(num_threads());
}

CreationThreadsScope::~CreationThreadsScope() { omp_set_num_threads(saved_); }

SingleThreadScope::SingleThreadScope() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }

SingleThreadScope::~SingleThreadScope() { omp_set_num_threads(saved_); }

ConvWindow conv_window(const ops::WindowGeometry& geo) {
  ConvWindow w;
  for (int d = 0; d < geo.rank(); ++d) {
    w.strides.push_back(geo.strides[static_cast<size_t>(d)]);
    w.dilations.push_back(geo.dilations[static_cast<size_t>(d)] - 1);  // oneDNN counts the gaps
    w.pad_l.push_back(geo.pad_begin(d));
    w.pad_r.push_back(geo.pad_end(d));
  }
  return w;
}

dnnl::memory::dims grouped_weight_dims(const std::vector<int64_t>& w_dims, int64_t group) {
  dnnl::memory::dims dims = to_dims(w_dims);
  if (group > 1) {
    dims[0] /= group;
    dims.insert(dims.begin(), group);
  }
  return dims;
}

bool int8_sums_exact() {
  static const bool exact = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16 ||
           isa == dnnl::cpu_isa::avx512_core_amx || isa == dnnl::cpu_isa::avx2_vnni;
  }();
  return exact;
}

std::string implementation_name(const dnnl::primitive_desc_base& pd) {
  const char* info = nullptr;
  if (dnnl_primitive_desc_query(pd.get(), dnnl_query_impl_info_str, 0, &info) != dnnl_success || !info)
    return "onednn";
  return std::string("onednn:") + info;
}

dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to, size_t& scratch) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, attr);
  scratch = std::max(scratch, pd.scratchpad_desc().get_size());
  return dnnl::reorder(pd);
}

dnnl::memory pack(const dnnl::memory::desc& user, const void* data, const dnnl::memory::desc& packed) {
  // Before the reorder is created: a primitive keeps the thread count it was created with.
  SingleThreadScope one_thread;
  const dnnl::engine& eng = cpu_engine();
  dnnl::memory from(user, eng, const_cast<void*>(data));
  dnnl::memory to(packed, eng);
  size_t scratch_bytes = 0;
  dnnl::reorder r = make_reorder(user, packed, scratch_bytes);
  std::vector<uint8_t> scratch(scratch_bytes);
  dnnl::memory scratch_mem(dnnl::memory::desc({static_cast<dnnl::memory::dim>(scratch_bytes)}, dnnl::memory::data_type::u8,
                                              dnnl::memory::format_tag::a),
                           eng, scratch.data());
  dnnl::stream& s = thread_stream();
  Args{{DNNL_ARG_FROM, &from}, {DNNL_ARG_TO, &to}, {DNNL_ARG_SCRATCHPAD, &scratch_mem}}.execute(r, s);
  s.wait();
  return to;
}

namespace {

// What a packing is, exactly (kernels/prepacked_weights.h): oneDNN's version and the source
// and packed memory descriptors as they are (plain structs in oneDNN 2.x).
std::string packing_key(const dnnl::memory::desc& user, const dnnl::memory::desc& packed) {
  const dnnl_version_t* v = dnnl_version();
  std::string key = "onednn " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                    std::to_string(v->patch) + " " + std::to_string(sizeof(dnnl_memory_desc_t)) + ":";
  key.append(reinterpret_cast<const char*>(&user.data), sizeof(dnnl_memory_desc_t));
  key.append(reinterpret_cast<const char*>(&packed.data), sizeof(dnnl_memory_desc_t));
  return key;
}

}  // namespace

std::shared_ptr<void> pack_shared(const dnnl::memory::desc& user, const void* data, const dnnl::memory::desc& packed) {
  // Packed by `kiln compile` into the model: used where it lies.
  const std::string key = packing_key(user, packed);
  if (std::shared_ptr<void> stored = find_prepacked(data, key, packed.get_size())) return stored;
  std::shared_ptr<void> made = pack_shared_here(user, data, packed);
  record_pack(data, key, made, packed.get_size());
  return made;
}

std::shared_ptr<void> pack_shared_here(const dnnl::memory::desc& user, const void* data,
                                       const dnnl::memory::desc& packed) {
  struct Key {
    const void* data;
    dnnl::memory::desc user, packed;
    bool operator==(const Key& o) const { return data == o.data && user == o.user && packed == o.packed; }
  };
  static auto* cache = new WeakCache<Key, void>;  // never destroyed: kernels may outlive statics
  return cache->get_or_make({data, user, packed}, [&]() -> std::shared_ptr<void> {
    const size_t bytes = std::max<size_t>(align64(packed.get_size()), 64);
    std::shared_ptr<void> buffer(std::aligned_alloc(64, bytes), [](void* p) { std::free(p); });
    if (!buffer) throw dnnl::error(dnnl_out_of_memory, "packing weights: out of memory");
    SingleThreadScope one_thread;  // before the reorder is created: see pack()
    const dnnl::engine& eng = cpu_engine();
    dnnl::memory from(user, eng, const_cast<void*>(data));
    dnnl::memory to(packed, eng, buffer.get());
    dnnl::stream& s = thread_stream();
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
    return buffer;
  });
}

namespace {

struct RunMemoryIds {
  std::mutex mutex;
  std::vector<uint32_t> free;
  uint32_t next = 0;
  uint64_t generation = 0;
};

RunMemoryIds& run_memory_ids() {
  static auto* ids = new RunMemoryIds;  // never destroyed: kernels may outlive static destruction
  return *ids;
}

struct RunMemoryEntry {
  uint64_t generation = 0;
  dnnl::memory memories[RunMemories::kMaxMemories];
  bool made[RunMemories::kMaxMemories] = {};
};

// Per thread, per kernel id; entries are held by pointer so that a table that grows never
// moves the memories a run is using.
thread_local std::vector<std::unique_ptr<RunMemoryEntry>> t_run_memories;

}  // namespace

dnnl::memory::desc bytes_desc(size_t bytes) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {static_cast<dnnl_dim_t>(bytes)};
  dnnl::error::wrap_c_api(dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a), "could not make a bytes desc");
  return dnnl::memory::desc(md);
}

RunMemories::RunMemories() {
  RunMemoryIds& ids = run_memory_ids();
  std::lock_guard lock(ids.mutex);
  if (!ids.free.empty()) {
    id_ = ids.free.back();
    ids.free.pop_back();
  } else {
    id_ = ids.next++;
  }
  generation_ = ++ids.generation;
}

RunMemories::~RunMemories() {
  RunMemoryIds& ids = run_memory_ids();
  std::lock_guard lock(ids.mutex);
  ids.free.push_back(id_);
}

const dnnl::memory& RunMemories::get(int index, const dnnl::memory::desc& md, const void* data) const {
  KILN_CHECK(index >= 0 && index < kMaxMemories, "run memory %d of at most %d", index, kMaxMemories);
  auto& table = t_run_memories;
  if (id_ >= table.size()) table.resize(id_ + 1);
  std::unique_ptr<RunMemoryEntry>& entry = table[id_];
  if (!entry || entry->generation != generation_) {
    entry = std::make_unique<RunMemoryEntry>();
    entry->generation = generation_;
  }
  dnnl::memory& m = entry->memories[index];
  if (!entry->made[index]) {
    m = dnnl::memory(md, cpu_engine(), const_cast<void*>(data));
    entry->made[index] = true;
  } else if (m.get_data_handle() != data) {
    m.set_data_handle(const_cast<void*>(data));
  }
  return m;
}

Args& Args::add(int arg, const dnnl::memory& mem) {
  KILN_CHECK(count_ < kMaxArgs, "a oneDNN execution with more than %d arguments", kMaxArgs);
  args_[count_++] = {arg, mem.get()};
  return *this;
}

dnnl::memory s32_scalar(int32_t v) {
  dnnl::memory m(dnnl::memory::desc({1}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::a), cpu_engine());
  *static_cast<int32_t*>(m.get_data_handle()) = v;
  return m;
}

Args& Args::add(const Args& other) {
  for (int i = 0; i < other.count_; ++i) {
    KILN_CHECK(count_ < kMaxArgs, "a oneDNN execution with more than %d arguments", kMaxArgs);
    args_[count_++] = other.args_[i];
  }
  return *this;
}

void Args::execute(const dnnl::primitive& p, dnnl::stream& s) const {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), s.get(), count_, args_), "could not execute a primitive");
}

void LayoutBridge::plan(const dnnl::memory::desc& primitive_src, const dnnl::memory::desc& primitive_dst,
                        size_t primitive_scratch_bytes, bool dst_in) {
  src = primitive_src;
  dst = primitive_dst;
  scratch_bytes = primitive_scratch_bytes;
  reorder_src = src != user_src;
  reorder_dst = dst != user_dst;
  if (reorder_src) src_reorder = make_reorder(user_src, src, scratch_bytes);
  if (reorder_dst) {
    dst_reorder = make_reorder(dst, user_dst, scratch_bytes);
    if (dst_in) dst_in_reorder = make_reorder(user_dst, dst, scratch_bytes);
  }
  src_offset = align64(scratch_bytes);
  dst_offset = src_offset + (reorder_src ? align64(src.get_size()) : 0);
  workspace_bytes = dst_offset + (reorder_dst ? align64(dst.get_size()) : 0);
  note_workspace_need(workspace_bytes);  // what run() asks thread_workspace for
}

LayoutBridge::Bound LayoutBridge::bind(char* ws, const void* x, void* y) const {
  // An empty scratchpad (zero bytes) is a valid argument for primitives that need none.
  const dnnl::memory& scratch = memories.get(0, bytes_desc(scratch_bytes), scratch_bytes > 0 ? ws : nullptr);
  const dnnl::memory& x_user = memories.get(1, user_src, x);
  const dnnl::memory& y_user = memories.get(2, user_dst, y);
  const dnnl::memory& src_mem = reorder_src ? memories.get(3, src, ws + src_offset) : x_user;
  const dnnl::memory& dst_mem = reorder_dst ? memories.get(4, dst, ws + dst_offset) : y_user;
  return {scratch, x_user, y_user, src_mem, dst_mem};
}

void LayoutBridge::run(const dnnl::primitive& p, const Args& extra, char* ws, const void* x, void* y,
                       dnnl::stream& s) const {
  const Bound m = bind(ws, x, y);
  if (reorder_src)
    Args{{DNNL_ARG_FROM, &m.x_user}, {DNNL_ARG_TO, &m.src}, {DNNL_ARG_SCRATCHPAD, &m.scratch}}.execute(src_reorder, s);
  Args args{{DNNL_ARG_SRC, &m.src}, {DNNL_ARG_DST, &m.dst}, {DNNL_ARG_SCRATCHPAD, &m.scratch}};
  args.add(extra).execute(p, s);
  if (reorder_dst)
    Args{{DNNL_ARG_FROM, &m.dst}, {DNNL_ARG_TO, &m.y_user}, {DNNL_ARG_SCRATCHPAD, &m.scratch}}.execute(dst_reorder, s);
  s.wait();
}

Expected<std::string> fast_implementation(const ir::Node& node, const dnnl::primitive_desc_base& pd) {
  std::string name = implementation_name(pd);
  if (name.rfind("onednn:ref", 0) == 0)
    return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), name.c_str());
  return name;
}

}  // namespace kiln::kernels::onednn

namespace kiln::kernels {

Bf16Support cpu_bf16_support() {
  // oneDNN's view: it enables AMX itself (the kernel's permission request) and honours
  // ONEDNN_MAX_CPU_ISA.
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  Bf16Support s;
  s.amx = isa == dnnl::cpu_isa::avx512_core_amx;
  s.avx512 = s.amx || isa == dnnl::cpu_isa::avx512_core_bf16;
  return s;
}

}  // namespace kiln::kernels
