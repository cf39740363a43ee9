// Writes an ir::Graph as a .kiln file: header, FlatBuffers metadata, aligned weight section.
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "model/kiln_model.h"
#include "model/kiln_model_generated.h"
#include "model/model_format.h"

namespace kiln::model {
namespace {

namespace fbs = flatbuffers;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A tensor's bytes waiting to be written at `offset` of the weight section.
struct PendingWeight {
  const uint8_t* data;
  uint64_t offset;
  uint64_t size;
  bool cold;
};

// The weight section holds first the tensors a prepared model reads (hot), then, from
// `cold_base` (page-aligned), those no kernel reads once the model is prepared: the originals
// of weights stored pre-packed (ir::kPrepackedInputAttr), which a load maps instead of reading
// (model_reader.cc). A file is laid out twice: the first pass learns the hot part's size (and
// which contents some hot tensor has), the second places the cold tail after it.
struct WeightLayout {
  std::unordered_set<const void*> cold;       // data of initializers that may go to the tail
  std::unordered_set<uint64_t> hot_contents;  // XXH3 of hot tensors' bytes: stored hot, once
  uint64_t cold_base = 0;
};

// Collects into `cold` the data of the initializers of `g` a prepared model does not read
// (ir::prepacked_only_initializers), and into `hot` every other initializer's (so that a
// tensor shared with a use that reads it stays hot).
void classify_weights(const ir::Graph& g, std::unordered_set<const void*>& cold, std::unordered_set<const void*>& hot) {
  const std::vector<const ir::Value*> unread = ir::prepacked_only_initializers(g);
  const std::unordered_set<const ir::Value*> unread_set(unread.begin(), unread.end());
  for (const auto& v : g.values())
    if (v->has_initializer() && v->initializer()->raw_data())
      (unread_set.count(v.get()) ? cold : hot).insert(v->initializer()->raw_data());
}

// Serialises graphs into a FlatBufferBuilder and lays out the weight section as it goes.
class MetadataBuilder {
 public:
  explicit MetadataBuilder(const WeightLayout& layout) : layout_(layout) {
    // Every scalar is stored even when it equals its default, so that a stored file can
    // be patched in place (the corruption tests rely on it) and reads are uniform.
    fbb_.ForceDefaults(true);
  }

  fbs::FlatBufferBuilder& fbb() { return fbb_; }
  const std::vector<PendingWeight>& weights() const { return weights_; }
  uint64_t weight_size() const { return cold_cursor_ > 0 ? layout_.cold_base + cold_cursor_ : hot_cursor_; }
  uint64_t hot_size() const { return hot_cursor_; }
  bool has_cold() const { return cold_cursor_ > 0; }
  const std::unordered_set<uint64_t>& hot_contents() const { return hot_contents_; }

  Expected<fbs::Offset<fb::TensorData>> tensor(const Tensor& t) {
    if (!t.defined()) return invalid_argument("tensor has no data type");
    auto dims = fbb_.CreateVector(t.dims());
    if (t.dtype() == DataType::kString) {
      std::vector<fbs::Offset<fbs::String>> items;
      items.reserve(static_cast<size_t>(t.num_elements()));
      const std::string* s = t.data<std::string>();
      for (int64_t i = 0; i < t.num_elements(); ++i) items.push_back(fbb_.CreateString(s[i]));
      auto strings = fbb_.CreateVector(items);
      return fb::CreateTensorData(fbb_, static_cast<int32_t>(t.dtype()), dims, 0, 0, strings);
    }
    uint64_t size = t.size_bytes();
    if (size > 0 && !t.raw_data())
      return invalid_argument("tensor %s has no data", t.description().c_str());
    const auto* data = static_cast<const uint8_t*>(t.raw_data());
    // Tensors that share storage (one constant feeding several values) are stored once,
    // and so are tensors with equal bytes (the same weight in each shape bucket's graph,
    // compiled separately): a hash finds candidates, memcmp confirms.
    uint64_t offset;
    auto key = std::make_pair(data, size);
    auto it = dedup_.find(key);
    if (size > 0 && it != dedup_.end()) {
      offset = it->second;
    } else {
      const uint64_t hash = size > 0 ? XXH3_64bits(data, size) : 0;
      const bool cold = size > 0 && layout_.cold.count(data) && !layout_.hot_contents.count(hash);
      if (size > 0 && !cold) hot_contents_.insert(hash);
      std::optional<uint64_t> same = find_equal(data, size, hash, /*cold=*/false);  // a hot copy serves both
      if (!same && cold) same = find_equal(data, size, hash, /*cold=*/true);
      if (same) {
        offset = *same;
        dedup_.emplace(key, offset);
      } else {
        uint64_t& cursor = cold ? cold_cursor_ : hot_cursor_;
        const uint64_t at = align_up(cursor, kWeightAlignment);
        cursor = at + size;
        offset = cold ? layout_.cold_base + at : at;
        if (size > 0) {
          by_content_[hash].push_back(weights_.size());
          weights_.push_back({data, offset, size, cold});
          dedup_.emplace(key, offset);
        }
      }
    }
    return fb::CreateTensorData(fbb_, static_cast<int32_t>(t.dtype()), dims, offset, size);
  }

  // The offset of stored bytes equal to [data, +size) (whose XXH3 is `hash`) in the hot part
  // or the cold tail, if any.
  std::optional<uint64_t> find_equal(const uint8_t* data, uint64_t size, uint64_t hash, bool cold) const {
    if (size == 0) return std::nullopt;
    auto it = by_content_.find(hash);
    if (it == by_content_.end()) return std::nullopt;
    for (size_t k : it->second) {
      const PendingWeight& w = weights_[k];
      if (w.cold == cold && w.size == size && std::memcmp(w.data, data, size) == 0) return w.offset;
    }
    return std::nullopt;
  }

  Expected<fbs::Offset<fb::Graph>> graph(const ir::Graph& g) {
    if (g.values().size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      return invalid_argument("graph '%s' has too many values", g.name().c_str());
    std::unordered_map<const ir::Value*, int32_t> index;
    index.reserve(g.values().size());
    std::vector<fbs::Offset<fb::ValueDef>> values;
    values.reserve(g.values().size());
    for (const auto& v : g.values()) {
      index[v.get()] = static_cast<int32_t>(values.size());
      std::vector<fbs::Offset<fb::Dim>> dims;
      for (const Dim& d : v->shape().dims()) {
        auto sym = d.symbol.empty() ? fbs::Offset<fbs::String>() : fbb_.CreateString(d.symbol);
        dims.push_back(fb::CreateDim(fbb_, d.value, sym));
      }
      auto dims_vec = fbb_.CreateVector(dims);
      fbs::Offset<fb::TensorData> init;
      if (v->has_initializer()) {
        KILN_ASSIGN_OR_RETURN(init, tensor(*v->initializer()), "initializer '%s'",
                              v->name().c_str());
      }
      auto name = fbb_.CreateString(v->name());
      values.push_back(fb::CreateValueDef(fbb_, name, static_cast<int32_t>(v->dtype()), dims_vec,
                                          v->shape().has_rank(), v->is_outer_scope(), init,
                                          static_cast<int32_t>(v->type().kind)));
    }
    auto value_index = [&](const ir::Value* v) -> int32_t {
      auto it = index.find(v);
      return it == index.end() ? -2 : it->second;
    };
    std::vector<int32_t> inputs, outputs;
    for (const ir::Value* v : g.inputs()) {
      int32_t i = value_index(v);
      if (i < 0)
        return invalid_argument("graph '%s' input is not one of its values", g.name().c_str());
      inputs.push_back(i);
    }
    for (const ir::Value* v : g.outputs()) {
      int32_t i = value_index(v);
      if (i < 0)
        return invalid_argument("graph '%s' output is not one of its values", g.name().c_str());
      outputs.push_back(i);
    }

    std::vector<fbs::Offset<fb::Node>> nodes;
    nodes.reserve(g.nodes().size());
    for (const auto& n : g.nodes()) {
      std::vector<int32_t> ins, outs;
      for (size_t k = 0; k < n->inputs().size(); ++k) {
        const ir::Value* v = n->inputs()[k];
        int32_t i = v ? value_index(v) : -1;
        if (i == -2)
          return invalid_argument("graph '%s' node %s input %zu '%s' is not a value of this graph",
                                  g.name().c_str(), n->label().c_str(), k, v->name().c_str());
        ins.push_back(i);
      }
      for (size_t k = 0; k < n->outputs().size(); ++k) {
        const ir::Value* v = n->outputs()[k];
        int32_t i = v ? value_index(v) : -1;
        if (i == -2)
          return invalid_argument("graph '%s' node %s output %zu '%s' is not a value of this graph",
                                  g.name().c_str(), n->label().c_str(), k, v->name().c_str());
        outs.push_back(i);
      }
      std::vector<fbs::Offset<fb::Attr>> attrs;
      for (const auto& [name, a] : n->attrs()) {
        KILN_ASSIGN_OR_RETURN(auto off, attribute(name, a), "attribute '%s' of node %s",
                              name.c_str(), n->label().c_str());
        attrs.push_back(off);
      }
      auto name = fbb_.CreateString(n->name());
      auto op_type = fbb_.CreateString(n->op_type());
      auto domain = fbb_.CreateString(n->domain());
      auto ins_vec = fbb_.CreateVector(ins);
      auto outs_vec = fbb_.CreateVector(outs);
      auto attrs_vec = fbb_.CreateVector(attrs);
      nodes.push_back(
          fb::CreateNode(fbb_, name, op_type, domain, n->opset(), ins_vec, outs_vec, attrs_vec));
    }

    std::vector<fbs::Offset<fb::OpsetImport>> opsets;
    for (const auto& [domain, version] : g.opset_imports())
      opsets.push_back(fb::CreateOpsetImport(fbb_, fbb_.CreateString(domain), version));
    std::vector<fbs::Offset<fb::KeyValue>> metadata;
    for (const auto& [key, value] : g.metadata())
      metadata.push_back(
          fb::CreateKeyValue(fbb_, fbb_.CreateString(key), fbb_.CreateString(value)));

    auto name = fbb_.CreateString(g.name());
    auto values_vec = fbb_.CreateVector(values);
    auto inputs_vec = fbb_.CreateVector(inputs);
    auto outputs_vec = fbb_.CreateVector(outputs);
    auto nodes_vec = fbb_.CreateVector(nodes);
    auto opsets_vec = fbb_.CreateVector(opsets);
    auto metadata_vec = fbb_.CreateVector(metadata);
    return fb::CreateGraph(fbb_, name, values_vec, inputs_vec, outputs_vec, nodes_vec, opsets_vec,
                           metadata_vec);
  }

 private:
  Expected<fbs::Offset<fb::Attr>> attribute(const std::string& attr_name, const ir::Attribute& a) {
    fbs::Offset<fbs::String> s;
    fbs::Offset<fbs::Vector<int64_t>> ints;
    fbs::Offset<fbs::Vector<float>> floats;
    fbs::Offset<fbs::Vector<fbs::Offset<fbs::String>>> strings;
    fbs::Offset<fb::TensorData> t;
    fbs::Offset<fbs::Vector<fbs::Offset<fb::TensorData>>> tensors;
    fbs::Offset<fb::Graph> g;
    fbs::Offset<fbs::Vector<fbs::Offset<fb::Graph>>> graphs;
    float f = 0;
    int64_t i = 0;
    switch (a.kind) {
      case ir::AttrKind::kFloat:
        f = a.f;
        break;
      case ir::AttrKind::kInt:
        i = a.i;
        break;
      case ir::AttrKind::kString:
        s = fbb_.CreateString(a.s);
        break;
      case ir::AttrKind::kFloats:
        floats = fbb_.CreateVector(a.floats);
        break;
      case ir::AttrKind::kInts:
        ints = fbb_.CreateVector(a.ints);
        break;
      case ir::AttrKind::kStrings:
        strings = fbb_.CreateVectorOfStrings(a.strings);
        break;
      case ir::AttrKind::kTensor: {
        KILN_ASSIGN_OR_RETURN(t, tensor(a.t));
        break;
      }
      case ir::AttrKind::kTensors: {
        std::vector<fbs::Offset<fb::TensorData>> items;
        for (size_t k = 0; k < a.tensors.size(); ++k) {
          KILN_ASSIGN_OR_RETURN(auto off, tensor(a.tensors[k]), "tensor %zu", k);
          items.push_back(off);
        }
        tensors = fbb_.CreateVector(items);
        break;
      }
      case ir::AttrKind::kGraph: {
        if (!a.g) return invalid_argument("graph attribute has no graph");
        KILN_ASSIGN_OR_RETURN(g, graph(*a.g));
        break;
      }
      case ir::AttrKind::kGraphs: {
        std::vector<fbs::Offset<fb::Graph>> items;
        for (size_t k = 0; k < a.graphs.size(); ++k) {
          if (!a.graphs[k]) return invalid_argument("graph %zu is null", k);
          KILN_ASSIGN_OR_RETURN(auto off, graph(*a.graphs[k]), "graph %zu", k);
          items.push_back(off);
        }
        graphs = fbb_.CreateVector(items);
        break;
      }
      default:
        return invalid_argument("unknown attribute kind %d", static_cast<int>(a.kind));
    }
    auto name = fbb_.CreateString(attr_name);
    return fb::CreateAttr(fbb_, name, static_cast<int32_t>(a.kind), f, i, s, ints, floats, strings,
                          t, tensors, g, graphs);
  }

  fbs::FlatBufferBuilder fbb_{1 << 16};
  std::vector<PendingWeight> weights_;
  std::map<std::pair<const uint8_t*, uint64_t>, uint64_t> dedup_;
  std::unordered_map<uint64_t, std::vector<size_t>> by_content_;  // XXH3 -> weights_ indices
  const WeightLayout& layout_;
  std::unordered_set<uint64_t> hot_contents_;
  uint64_t hot_cursor_ = 0, cold_cursor_ = 0;  // the hot part's and the cold tail's ends
};

// Writes to a file descriptor, hashing what it writes (except the header).
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    state_ = XXH3_createState();
    if (state_) XXH3_64bits_reset(state_);
  }
  ~FileWriter() {
    if (state_) XXH3_freeState(state_);
  }
  bool has_state() const { return state_ != nullptr; }

  Status write(const void* data, size_t size) {
    if (size) XXH3_64bits_update(state_, data, size);
    return write_raw(data, size, offset_);
  }
  Status pad_to(uint64_t offset) {
    static const uint8_t kZeros[4096] = {};
    while (offset_ < offset) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(kZeros), offset - offset_));
      KILN_RETURN_IF_ERROR(write(kZeros, n));
    }
    return ok_status();
  }
  uint64_t offset() const { return offset_; }
  uint64_t digest() const { return XXH3_64bits_digest(state_); }

  Status write_at(const void* data, size_t size, uint64_t at) {
    uint64_t pos = at;
    return write_raw(data, size, pos);
  }

 private:
  Status write_raw(const void* data, size_t size, uint64_t& pos) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      size_t chunk = std::min<size_t>(size, size_t{1} << 30);
      ssize_t n = ::pwrite(fd_, p, chunk, static_cast<off_t>(pos));
      if (n < 0) {
        if (errno == EINTR) continue;
        return unavailable("cannot write '%s' at offset %llu: %s", path_.c_str(),
                           static_cast<unsigned long long>(pos), std::strerror(errno));
      }
      if (n == 0)
        return unavailable("cannot write '%s' at offset %llu: no progress", path_.c_str(),
                           static_cast<unsigned long long>(pos));
      p += n;
      size -= static_cast<size_t>(n);
      pos += static_cast<uint64_t>(n);
    }
    return ok_status();
  }

  int fd_;
  std::string path_;
  XXH3_state_t* state_ = nullptr;
  uint64_t offset_ = kHeaderSize;  // the header is written last, once the checksum is known
};

Status write_file(const std::string& tmp, const uint8_t* metadata, size_t metadata_size,
                  const MetadataBuilder& mb) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return unavailable("cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
  Status status = [&]() -> Status {
    FileWriter w(fd, tmp);
    if (!w.has_state()) return resource_exhausted("cannot allocate the checksum state");
    FileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.format_version = kFormatVersion;
    h.flags = 0;
    h.metadata_offset = kHeaderSize;
    h.metadata_size = metadata_size;
    h.weight_offset = align_up(kHeaderSize + metadata_size, kWeightSectionAlignment);
    h.weight_size = mb.weight_size();
    h.file_size = h.weight_offset + h.weight_size;
    KILN_RETURN_IF_ERROR(w.write(metadata, metadata_size));
    KILN_RETURN_IF_ERROR(w.pad_to(h.weight_offset));
    for (bool cold : {false, true})  // each part's offsets grow in the order they were given
      for (const PendingWeight& pw : mb.weights()) {
        if (pw.cold != cold) continue;
        KILN_RETURN_IF_ERROR(w.pad_to(h.weight_offset + pw.offset));
        KILN_RETURN_IF_ERROR(w.write(pw.data, pw.size));
      }
    KILN_RETURN_IF_ERROR(w.pad_to(h.file_size));
    h.checksum = combine_checksum(&h, w.digest());
    KILN_RETURN_IF_ERROR(w.write_at(&h, sizeof(h), 0));
    // On the disk before the rename makes it the file: a crash or power loss after the rename
    // leaves the whole new file or the old one, never a renamed file of missing blocks.
    if (::fsync(fd) != 0) return unavailable("cannot flush '%s' to disk: %s", tmp.c_str(), std::strerror(errno));
    return ok_status();
  }();
  if (::close(fd) != 0 && status.ok())
    status = unavailable("cannot close '%s': %s", tmp.c_str(), std::strerror(errno));
  return status;
}

// Finishes the metadata with `root` and writes the file through a temporary.
Status finish_and_write(MetadataBuilder& mb, fbs::Offset<fb::Model> root, const std::string& path) {
  auto& fbb = mb.fbb();
  fb::FinishModelBuffer(fbb, root);
  const std::string tmp = path + ".tmp";
  Status status = write_file(tmp, fbb.GetBufferPointer(), fbb.GetSize(), mb);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    status = unavailable("cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(),
                         std::strerror(errno));
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

// The Model table's fields before the graph.
struct InfoOffsets {
  fbs::Offset<fbs::String> kiln_version, source_hash, source_name, producer, target_arch;
  fbs::Offset<fbs::Vector<fbs::Offset<fbs::String>>> features;
};
InfoOffsets info_offsets(fbs::FlatBufferBuilder& fbb, const ModelInfo& info) {
  return {fbb.CreateString(info.kiln_version), fbb.CreateString(info.source_hash),
          fbb.CreateString(info.source_name),  fbb.CreateString(info.producer),
          fbb.CreateString(info.target_arch),  fbb.CreateVectorOfStrings(info.target_features)};
}

}  // namespace

const char* bucket_kind_name(BucketKind kind) {
  switch (kind) {
    case BucketKind::kNone:
      return "none";
    case BucketKind::kBatch:
      return "batch";
    case BucketKind::kDims:
      return "dims";
  }
  return "unknown";
}

namespace {

// The metadata of a model, built into `mb`; `cold_offset` is the weight section's cold tail.
using BuildModel = std::function<Expected<fbs::Offset<fb::Model>>(MetadataBuilder& mb, uint64_t cold_offset)>;

// Lays out the weight section of a model of `graphs` (WeightLayout: first which contents some
// hot tensor has, then the hot part's size, then the file) and writes it.
Status write_laid_out(const std::vector<const ir::Graph*>& graphs, const BuildModel& build, const std::string& path) {
  WeightLayout layout;
  std::unordered_set<const void*> hot;
  for (const ir::Graph* g : graphs) classify_weights(*g, layout.cold, hot);
  for (const void* p : hot) layout.cold.erase(p);
  if (!layout.cold.empty()) {
    MetadataBuilder contents(layout);
    KILN_RETURN_IF_ERROR(build(contents, 0).status());
    layout.hot_contents = contents.hot_contents();
    MetadataBuilder sizes(layout);
    KILN_RETURN_IF_ERROR(build(sizes, 0).status());
    if (sizes.has_cold() && sizes.hot_size() > 0)
      layout.cold_base = align_up(sizes.hot_size(), kWeightSectionAlignment);
    else
      layout.cold.clear();  // nothing cold, or nothing hot to put before it
  }
  MetadataBuilder mb(layout);
  KILN_ASSIGN_OR_RETURN(auto root, build(mb, layout.cold_base));
  return finish_and_write(mb, root, path);
}

}  // namespace

Status write_model(const ir::Graph& graph, const ModelInfo& info, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::optional<ArenaPlan> plan, plan_arena(graph), "while planning the arena of model '%s'",
                        path.c_str());
  return write_model(graph, info, path, plan);
}

Status write_model(const ir::Graph& graph, const ModelInfo& info, const std::string& path,
                   const std::optional<ArenaPlan>& plan) {
  std::unordered_map<const ir::Value*, uint32_t> index;
  for (const auto& v : graph.values()) index.emplace(v.get(), static_cast<uint32_t>(index.size()));
  std::vector<fb::PlannedValue> planned;
  std::vector<fb::PlannedWorkspace> workspaces;
  if (plan) {
    for (const PlannedValue& pv : plan->values) {
      auto it = index.find(pv.value);
      if (it == index.end())
        return invalid_argument("while writing model '%s': a planned value is not a value of the graph", path.c_str());
      planned.emplace_back(it->second, pv.offset, pv.size);
    }
    std::unordered_map<const ir::Node*, uint32_t> step;
    for (const auto& n : graph.nodes()) step.emplace(n.get(), static_cast<uint32_t>(step.size()));
    for (const PlannedWorkspace& pw : plan->workspaces) {
      auto it = step.find(pw.node);
      if (it == step.end())
        return invalid_argument("while writing model '%s': a planned workspace's node is not a node of the graph",
                                path.c_str());
      workspaces.emplace_back(it->second, pw.offset, pw.size);
    }
  }
  return write_laid_out(
      {&graph},
      [&](MetadataBuilder& mb, uint64_t cold_offset) -> Expected<fbs::Offset<fb::Model>> {
        auto& fbb = mb.fbb();
        KILN_ASSIGN_OR_RETURN(auto graph_off, mb.graph(graph), "while writing model '%s'", path.c_str());
        fbs::Offset<fb::ArenaPlan> arena;
        if (plan)
          // Version 1 when there is no workspace: such a file stays readable by builds before 2.
          arena = fb::CreateArenaPlan(fbb, workspaces.empty() ? kArenaPlanVersionWithoutWorkspaces : kArenaPlanVersion,
                                      plan->arena_bytes, fbb.CreateVectorOfStructs(planned),
                                      workspaces.empty() ? 0 : fbb.CreateVectorOfStructs(workspaces));
        InfoOffsets io = info_offsets(fbb, info);
        return fb::CreateModel(fbb, io.kiln_version, io.source_hash, io.source_name, io.producer, io.target_arch,
                               io.features, graph_off, 0, 0, 0, 0, cold_offset, arena);
      },
      path);
}

Status write_model(const BucketedModel& model, const ModelInfo& info, const std::string& path) {
  if (model.variants.empty())
    return invalid_argument("while writing model '%s': no shape buckets", path.c_str());
  if (model.kind == BucketKind::kNone || static_cast<int32_t>(model.kind) > kMaxBucketKind)
    return invalid_argument("while writing model '%s': bucket kind %d is not valid", path.c_str(),
                            static_cast<int>(model.kind));
  std::vector<const ir::Graph*> graphs;
  for (const ModelVariant& v : model.variants)
    if (v.graph) graphs.push_back(v.graph.get());
  if (model.dynamic_graph) graphs.push_back(model.dynamic_graph.get());
  auto build = [&](MetadataBuilder& mb, uint64_t cold_offset) -> Expected<fbs::Offset<fb::Model>> {
    auto& fbb = mb.fbb();
    std::vector<fbs::Offset<fb::Variant>> variants;
    fbs::Offset<fb::Graph> main_graph;
    for (size_t k = 0; k < model.variants.size(); ++k) {
      const ModelVariant& v = model.variants[k];
      if (!v.graph) return invalid_argument("while writing model '%s': variant %zu has no graph", path.c_str(), k);
      fbs::Offset<fb::Graph> g;
      KILN_ASSIGN_OR_RETURN(g, mb.graph(*v.graph), "while writing model '%s' variant %zu", path.c_str(), k);
      if (k == 0) {
        main_graph = g;
        g = fbs::Offset<fb::Graph>();  // variant 0's graph is Model.graph
      }
      std::vector<fbs::Offset<fb::InputShape>> shapes;
      for (const auto& [name, dims] : v.shapes)
        shapes.push_back(fb::CreateInputShape(fbb, fbb.CreateString(name), fbb.CreateVector(dims)));
      auto shapes_vec = fbb.CreateVector(shapes);
      variants.push_back(fb::CreateVariant(fbb, shapes_vec, g));
    }
    fbs::Offset<fb::Graph> dynamic_graph;
    if (model.dynamic_graph) {
      KILN_ASSIGN_OR_RETURN(dynamic_graph, mb.graph(*model.dynamic_graph),
                            "while writing model '%s' dynamic graph", path.c_str());
    }
    std::vector<fbs::Offset<fb::PadValue>> pads;
    for (const auto& [name, value] : model.pad_values)
      pads.push_back(fb::CreatePadValue(fbb, fbb.CreateString(name), value));
    auto variants_vec = fbb.CreateVector(variants);
    auto pads_vec = fbb.CreateVector(pads);
    InfoOffsets io = info_offsets(fbb, info);
    return fb::CreateModel(fbb, io.kiln_version, io.source_hash, io.source_name, io.producer,
                           io.target_arch, io.features, main_graph,
                           static_cast<int32_t>(model.kind), variants_vec, pads_vec,
                           dynamic_graph, cold_offset);
  };
  return write_laid_out(graphs, build, path);
}

}  // namespace kiln::model
