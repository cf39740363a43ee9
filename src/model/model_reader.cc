// Loads a .kiln file: maps it, validates header, checksum and metadata, rebuilds the graph.
//
// Validation runs in layers, each trusting only what the previous one proved:
//   1. header: size, magic, version, flags, section bounds (no overflow, no overlap);
//   2. XXH3-64 checksum of the header fields and everything after the header;
//   3. flatbuffers::Verifier: every offset inside the metadata buffer, bounded depth/tables;
//   4. semantic checks while rebuilding the ir::Graph: enums, indices, initializer ranges
//      and sizes, unique producers, subgraph depth; then ir::verify on the result.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <unordered_set>

#include "core/cpu_features.h"
#include "core/huge_pages.h"
#include "core/logging.h"
#include "model/kiln_model.h"
#include "model/kiln_model_generated.h"
#include "model/arena_plan_reader.h"
#include "model/model_format.h"

#if defined(__x86_64__) || defined(__i386__)
#endif

namespace kiln::model {

uint64_t combine_checksum(const void* header_fields_56_bytes, uint64_t body_digest) {
  return XXH3_64bits_withSeed(header_fields_56_bytes, offsetof(FileHeader, checksum), body_digest);
}

uint64_t file_checksum(const uint8_t* file, size_t size) {
  if (size < kHeaderSize) return XXH3_64bits(nullptr, 0);
  uint64_t body = XXH3_64bits(file + kHeaderSize, size - kHeaderSize);
  return combine_checksum(file, body);
}

bool looks_like_kiln(const void* data, size_t size) {
  return data && size >= sizeof(kMagic) && std::memcmp(data, kMagic, sizeof(kMagic)) == 0;
}

namespace {

namespace fbs = flatbuffers;
using ull = unsigned long long;

std::string str(const fbs::String* s) { return s ? s->str() : std::string(); }

// Rebuilds ir::Graphs from verified metadata, checking every field before it is used.
class GraphParser {
 public:
  GraphParser(const uint8_t* weights, uint64_t weight_size, std::shared_ptr<const void> owner,
              uint64_t payload_budget)
      : weights_(weights),
        weight_size_(weight_size),
        owner_(std::move(owner)),
        budget_(payload_budget) {}

  Status graph(const fb::Graph& fg, ir::Graph& out, int depth,
               std::vector<const ir::Graph*>& scopes);

  // Also used for the bucket tables of the Model (see charge()).
  // Charges `bytes` of vector/string payload. A verified buffer can still point many
  // tables at one large vector; without this bound a small file could make the loader
  // copy gigabytes. An honest writer stores each payload once, so the sum of payload
  // bytes never exceeds the metadata size.
  Status charge(uint64_t bytes) {
    if (bytes > budget_)
      return data_loss(
          "vectors and strings add up to more than the metadata section holds "
          "(shared or overlapping data)");
    budget_ -= bytes;
    return ok_status();
  }
  // Every vector passes through here before its elements are read. FlatBuffers 2.0.8's
  // verifier aligns only a vector's length word, so a hostile file can place 8-byte
  // elements off their alignment; reading them would be undefined behaviour.
  template <typename T>
  Status charge_vector(const fbs::Vector<T>* v) {
    if (!v) return ok_status();
    if (v->size() != 0 && reinterpret_cast<uintptr_t>(v->Data()) % alignof(T) != 0)
      return data_loss("vector of %zu-byte elements is misaligned", sizeof(T));
    return charge(4 + uint64_t{v->size()} * sizeof(T));
  }
  Status charge_string(const fbs::String* s) {
    return s ? charge(5 + uint64_t{s->size()}) : ok_status();
  }
  Status charge_strings(const fbs::Vector<fbs::Offset<fbs::String>>* v) {
    if (!v) return ok_status();
    KILN_RETURN_IF_ERROR(charge_vector(v));
    for (const fbs::String* s : *v) KILN_RETURN_IF_ERROR(charge_string(s));
    return ok_status();
  }
  Expected<std::string> string(const fbs::String* s) {
    KILN_RETURN_IF_ERROR(charge_string(s));
    return str(s);
  }
  Expected<std::vector<std::string>> strings(const fbs::Vector<fbs::Offset<fbs::String>>* v) {
    KILN_RETURN_IF_ERROR(charge_strings(v));
    std::vector<std::string> out;
    if (v) {
      out.reserve(v->size());
      for (const fbs::String* s : *v) out.push_back(str(s));
    }
    return out;
  }


 private:
  Expected<Tensor> tensor(const fb::TensorData& ft);
  Expected<ir::Attribute> attribute(const fb::Attr& fa, int depth,
                                    std::vector<const ir::Graph*>& scopes);
  Expected<std::shared_ptr<ir::Graph>> subgraph(const fb::Graph* fg, int depth,
                                                std::vector<const ir::Graph*>& scopes);

  const uint8_t* weights_;
  uint64_t weight_size_;
  std::shared_ptr<const void> owner_;
  uint64_t budget_;
};

Expected<Tensor> GraphParser::tensor(const fb::TensorData& ft) {
  int32_t dt = ft.dtype();
  if (!dtype_is_valid(dt) || dt == static_cast<int32_t>(DataType::kUndefined))
    return data_loss("tensor dtype %d is not a valid data type", dt);
  DataType dtype = static_cast<DataType>(dt);
  std::vector<int64_t> dims;
  uint64_t count = 1;
  if (const auto* fd = ft.dims()) {
    KILN_RETURN_IF_ERROR(charge_vector(fd));
    dims.reserve(fd->size());
    for (uint32_t k = 0; k < fd->size(); ++k) {
      int64_t d = fd->Get(k);
      if (d < 0) return data_loss("tensor dim %u is negative (%lld)", k, static_cast<long long>(d));
      // Element counts stay far below 2^62 so that bytes = count * bits / 8 cannot overflow.
      if (d != 0 && count > (uint64_t{1} << 56) / static_cast<uint64_t>(d))
        return data_loss("tensor of shape %s has too many elements", dims_to_string(dims).c_str());
      count *= static_cast<uint64_t>(d);
      dims.push_back(d);
    }
  }
  if (dtype == DataType::kString) {
    const auto* fs = ft.strings();
    uint64_t have = fs ? fs->size() : 0;
    if (have != count)
      return data_loss("string tensor %s holds %llu strings, expected %llu",
                       dims_to_string(dims).c_str(), static_cast<ull>(have),
                       static_cast<ull>(count));
    KILN_RETURN_IF_ERROR(charge_strings(fs));
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(dtype, dims));
    for (uint64_t k = 0; k < count; ++k)
      t.data<std::string>()[k] = str(fs->Get(static_cast<uint32_t>(k)));
    return t;
  }
  uint64_t expected = (count * static_cast<uint64_t>(dtype_bits(dtype)) + 7) / 8;
  uint64_t offset = ft.offset(), size = ft.size();
  if (size != expected)
    return data_loss("tensor %s%s is %llu bytes in the file, expected %llu", dtype_name(dtype),
                     dims_to_string(dims).c_str(), static_cast<ull>(size),
                     static_cast<ull>(expected));
  if (offset > weight_size_ || size > weight_size_ - offset)
    return data_loss("tensor data [%llu, +%llu) lies outside the weight section (%llu bytes)",
                     static_cast<ull>(offset), static_cast<ull>(size),
                     static_cast<ull>(weight_size_));
  if (offset % kWeightAlignment != 0)
    return data_loss("tensor data at weight offset %llu is not %llu-byte aligned",
                     static_cast<ull>(offset), static_cast<ull>(kWeightAlignment));
  // The mapping is read-only: kernels never write constants, and a stray write faults
  // instead of silently changing the model.
  void* data = const_cast<uint8_t*>(weights_ + offset);
  return Tensor::view(dtype, std::move(dims), data, owner_);
}

Expected<std::shared_ptr<ir::Graph>> GraphParser::subgraph(const fb::Graph* fg, int depth,
                                                           std::vector<const ir::Graph*>& scopes) {
  if (!fg) return data_loss("graph attribute has no graph");
  KILN_ASSIGN_OR_RETURN(std::string name, string(fg->name()));
  auto g = std::make_shared<ir::Graph>(std::move(name));
  KILN_RETURN_IF_ERROR(graph(*fg, *g, depth + 1, scopes), "in subgraph '%s'", g->name().c_str());
  return g;
}

Expected<ir::Attribute> GraphParser::attribute(const fb::Attr& fa, int depth,
                                               std::vector<const ir::Graph*>& scopes) {
  int32_t kind = fa.kind();
  if (kind < 1 || kind > ir::kMaxAttrKind) return data_loss("attribute kind %d is not valid", kind);
  ir::Attribute a;
  a.kind = static_cast<ir::AttrKind>(kind);
  switch (a.kind) {
    case ir::AttrKind::kFloat:
      a.f = fa.f();
      break;
    case ir::AttrKind::kInt:
      a.i = fa.i();
      break;
    case ir::AttrKind::kString: {
      KILN_ASSIGN_OR_RETURN(a.s, string(fa.s()));
      break;
    }
    case ir::AttrKind::kFloats:
      if (const auto* v = fa.floats()) {
        KILN_RETURN_IF_ERROR(charge_vector(v));
        a.floats.assign(v->begin(), v->end());
      }
      break;
    case ir::AttrKind::kInts:
      if (const auto* v = fa.ints()) {
        KILN_RETURN_IF_ERROR(charge_vector(v));
        a.ints.assign(v->begin(), v->end());
      }
      break;
    case ir::AttrKind::kStrings: {
      KILN_ASSIGN_OR_RETURN(a.strings, strings(fa.strings()));
      break;
    }
    case ir::AttrKind::kTensor: {
      if (!fa.t()) return data_loss("tensor attribute has no tensor");
      KILN_ASSIGN_OR_RETURN(a.t, tensor(*fa.t()));
      break;
    }
    case ir::AttrKind::kTensors:
      if (const auto* v = fa.tensors()) {
        KILN_RETURN_IF_ERROR(charge_vector(v));
        for (uint32_t k = 0; k < v->size(); ++k) {
          KILN_ASSIGN_OR_RETURN(Tensor t, tensor(*v->Get(k)), "tensor %u", k);
          a.tensors.push_back(std::move(t));
        }
      }
      break;
    case ir::AttrKind::kGraph: {
      KILN_ASSIGN_OR_RETURN(a.g, subgraph(fa.g(), depth, scopes));
      break;
    }
    case ir::AttrKind::kGraphs:
      if (const auto* v = fa.graphs()) {
        KILN_RETURN_IF_ERROR(charge_vector(v));
        for (uint32_t k = 0; k < v->size(); ++k) {
          KILN_ASSIGN_OR_RETURN(auto g, subgraph(v->Get(k), depth, scopes), "graph %u", k);
          a.graphs.push_back(std::move(g));
        }
      }
      break;
  }
  return a;
}

Status GraphParser::graph(const fb::Graph& fg, ir::Graph& out, int depth,
                          std::vector<const ir::Graph*>& scopes) {
  if (depth > kMaxSubgraphDepth)
    return data_loss("subgraphs nest deeper than %d levels", kMaxSubgraphDepth);
  const char* gname = out.name().c_str();

  // Values.
  const auto* fvalues = fg.values();
  const uint32_t num_values = fvalues ? fvalues->size() : 0;
  if (num_values > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
    return data_loss("graph '%s' has too many values", gname);
  KILN_RETURN_IF_ERROR(charge_vector(fvalues));
  std::vector<ir::Value*> values(num_values);
  for (uint32_t k = 0; k < num_values; ++k) {
    const fb::ValueDef& fv = *fvalues->Get(k);
    KILN_ASSIGN_OR_RETURN(std::string name, string(fv.name()));
    auto added = out.add_value(name);
    if (!added.ok())
      return data_loss("graph '%s' value %u: name '%s' is defined twice", gname, k, name.c_str());
    ir::Value* v = *added;
    values[k] = v;
    int32_t dt = fv.dtype();
    if (!dtype_is_valid(dt))
      return data_loss("graph '%s' value %u ('%s'): dtype %d is not a valid data type", gname, k,
                       name.c_str(), dt);
    v->type().dtype = static_cast<DataType>(dt);
    // Files written before sequences and optionals existed lack the field: it reads as 0, a tensor.
    int32_t kind = fv.kind();
    if (kind < 0 || kind > ir::kMaxTypeKind)
      return data_loss("graph '%s' value %u ('%s'): type kind %d is not valid", gname, k, name.c_str(), kind);
    v->type().kind = static_cast<ir::TypeKind>(kind);
    const auto* fdims = fv.dims();
    if (fv.has_rank()) {
      KILN_RETURN_IF_ERROR(charge_vector(fdims));
      std::vector<Dim> dims;
      if (fdims) {
        dims.reserve(fdims->size());
        for (uint32_t d = 0; d < fdims->size(); ++d) {
          const fb::Dim& fd = *fdims->Get(d);
          Dim dim;
          dim.value = fd.value();
          KILN_ASSIGN_OR_RETURN(dim.symbol, string(fd.symbol()));
          if (dim.value < -1 || (dim.value >= 0 && !dim.symbol.empty()))
            return data_loss(
                "graph '%s' value %u ('%s') dim %u is invalid (value %lld, symbol '%s')", gname, k,
                name.c_str(), d, static_cast<long long>(dim.value), dim.symbol.c_str());
          dims.push_back(std::move(dim));
        }
      }
      v->type().shape = Shape(std::move(dims));
    } else if (fdims && fdims->size() != 0) {
      return data_loss("graph '%s' value %u ('%s') has unknown rank but %u dims", gname, k,
                       name.c_str(), fdims->size());
    }
    if (fv.outer_scope()) {
      bool found = false;
      for (const ir::Graph* s : scopes)
        if (s->find_value(name)) found = true;
      if (!found)
        return data_loss(
            "graph '%s' value %u ('%s') is marked outer-scope but no enclosing "
            "graph defines it",
            gname, k, name.c_str());
      v->set_outer_scope(true);
    }
    if (const fb::TensorData* init = fv.initializer()) {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor(*init), "graph '%s' value %u ('%s') initializer",
                            gname, k, name.c_str());
      v->set_initializer(std::move(t));
    }
  }

  // Graph inputs and outputs.
  auto value_at = [&](int32_t idx) -> ir::Value* {
    return idx >= 0 && static_cast<uint32_t>(idx) < num_values ? values[static_cast<size_t>(idx)]
                                                               : nullptr;
  };
  std::vector<char> is_input(num_values, 0);
  if (const auto* fin = fg.inputs()) {
    KILN_RETURN_IF_ERROR(charge_vector(fin));
    for (uint32_t k = 0; k < fin->size(); ++k) {
      ir::Value* v = value_at(fin->Get(k));
      if (!v)
        return data_loss("graph '%s' input %u refers to value %d of %u", gname, k, fin->Get(k),
                         num_values);
      is_input[static_cast<size_t>(fin->Get(k))] = 1;
      out.inputs().push_back(v);
    }
  }
  if (const auto* fout = fg.outputs()) {
    KILN_RETURN_IF_ERROR(charge_vector(fout));
    for (uint32_t k = 0; k < fout->size(); ++k) {
      ir::Value* v = value_at(fout->Get(k));
      if (!v)
        return data_loss("graph '%s' output %u refers to value %d of %u", gname, k, fout->Get(k),
                         num_values);
      out.outputs().push_back(v);
    }
  }

  // Nodes, in execution order.
  scopes.push_back(&out);
  std::vector<int64_t> produced_by(num_values, -1);
  const auto* fnodes = fg.nodes();
  KILN_RETURN_IF_ERROR(charge_vector(fnodes));
  const uint32_t num_nodes = fnodes ? fnodes->size() : 0;
  for (uint32_t k = 0; k < num_nodes; ++k) {
    const fb::Node& fn = *fnodes->Get(k);
    KILN_ASSIGN_OR_RETURN(std::string name, string(fn.name()));
    KILN_ASSIGN_OR_RETURN(std::string op_type, string(fn.op_type()));
    KILN_ASSIGN_OR_RETURN(std::string domain, string(fn.domain()));
    if (fn.opset() < 0)
      return data_loss("graph '%s' node %u ('%s') has opset %lld", gname, k, name.c_str(),
                       static_cast<long long>(fn.opset()));
    std::vector<ir::Value*> ins, outs;
    if (const auto* fi = fn.inputs()) {
      KILN_RETURN_IF_ERROR(charge_vector(fi));
      for (uint32_t j = 0; j < fi->size(); ++j) {
        int32_t idx = fi->Get(j);
        ir::Value* v = value_at(idx);
        if (!v && idx != -1)
          return data_loss("graph '%s' node %u ('%s') input %u refers to value %d of %u", gname, k,
                           name.c_str(), j, idx, num_values);
        ins.push_back(v);
      }
    }
    if (const auto* fo = fn.outputs()) {
      KILN_RETURN_IF_ERROR(charge_vector(fo));
      for (uint32_t j = 0; j < fo->size(); ++j) {
        int32_t idx = fo->Get(j);
        ir::Value* v = value_at(idx);
        if (!v && idx != -1)
          return data_loss("graph '%s' node %u ('%s') output %u refers to value %d of %u", gname, k,
                           name.c_str(), j, idx, num_values);
        if (v) {
          auto& p = produced_by[static_cast<size_t>(idx)];
          if (p >= 0)
            return data_loss(
                "graph '%s' node %u ('%s') output %u: value %d ('%s') is already "
                "produced by node %lld",
                gname, k, name.c_str(), j, idx, v->name().c_str(), static_cast<long long>(p));
          if (is_input[static_cast<size_t>(idx)] || v->is_outer_scope() || v->has_initializer())
            return data_loss(
                "graph '%s' node %u ('%s') output %u: value %d ('%s') is a graph "
                "input, initializer or outer-scope value",
                gname, k, name.c_str(), j, idx, v->name().c_str());
          p = k;
        }
        outs.push_back(v);
      }
    }
    ir::AttributeMap attrs;
    if (const auto* fa = fn.attrs()) {
      KILN_RETURN_IF_ERROR(charge_vector(fa));
      for (uint32_t j = 0; j < fa->size(); ++j) {
        KILN_ASSIGN_OR_RETURN(std::string aname, string(fa->Get(j)->name()));
        KILN_ASSIGN_OR_RETURN(ir::Attribute a, attribute(*fa->Get(j), depth, scopes),
                              "graph '%s' node %u ('%s') attribute %u ('%s')", gname, k,
                              name.c_str(), j, aname.c_str());
        if (!attrs.emplace(aname, std::move(a)).second)
          return data_loss("graph '%s' node %u ('%s') has attribute '%s' twice", gname, k,
                           name.c_str(), aname.c_str());
      }
    }
    ir::Node* node = out.add_node(std::move(name), std::move(op_type), std::move(domain),
                                  fn.opset(), std::move(ins), std::move(outs));
    node->attrs() = std::move(attrs);
  }
  scopes.pop_back();

  // Opset imports and metadata.
  if (const auto* fo = fg.opset_imports()) {
    KILN_RETURN_IF_ERROR(charge_vector(fo));
    for (uint32_t k = 0; k < fo->size(); ++k) {
      KILN_ASSIGN_OR_RETURN(std::string domain, string(fo->Get(k)->domain()));
      int64_t version = fo->Get(k)->version();
      if (version < 0)
        return data_loss("graph '%s' opset import %u ('%s') has version %lld", gname, k,
                         domain.c_str(), static_cast<long long>(version));
      if (!out.opset_imports().emplace(domain, version).second)
        return data_loss("graph '%s' imports domain '%s' twice", gname, domain.c_str());
    }
  }
  if (const auto* fm = fg.metadata()) {
    KILN_RETURN_IF_ERROR(charge_vector(fm));
    for (uint32_t k = 0; k < fm->size(); ++k) {
      KILN_ASSIGN_OR_RETURN(std::string key, string(fm->Get(k)->key()));
      KILN_ASSIGN_OR_RETURN(std::string value, string(fm->Get(k)->value()));
      if (!out.metadata().emplace(key, std::move(value)).second)
        return data_loss("graph '%s' metadata key '%s' appears twice", gname, key.c_str());
    }
  }
  return ok_status();
}

// The graph of a variant or the dynamic graph must take and give what the main graph does
// (the runtime binds the caller's buffers once for all of them).
Status same_interface(const ir::Graph& main, const ir::Graph& g, const char* what) {
  auto check = [&](const std::vector<ir::Value*>& a, const std::vector<ir::Value*>& b,
                   const char* kind) -> Status {
    if (a.size() != b.size())
      return data_loss("%s has %zu %ss, the main graph %zu", what, b.size(), kind, a.size());
    for (size_t k = 0; k < a.size(); ++k) {
      const ir::TensorType& ta = a[k]->type();
      const ir::TensorType& tb = b[k]->type();
      if (a[k]->name() != b[k]->name() || ta.dtype != tb.dtype || ta.kind != tb.kind ||
          ta.shape.has_rank() != tb.shape.has_rank() ||
          (ta.shape.has_rank() && ta.shape.rank() != tb.shape.rank()) ||
          a[k]->has_initializer() != b[k]->has_initializer())
        return data_loss("%s %s %zu is '%s' %s, the main graph's is '%s' %s", what, kind, k,
                         b[k]->name().c_str(), tb.to_string().c_str(), a[k]->name().c_str(),
                         ta.to_string().c_str());
    }
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(check(main.inputs(), g.inputs(), "input"));
  return check(main.outputs(), g.outputs(), "output");
}

const ir::Value* find_input(const ir::Graph& g, const std::string& name) {
  for (const ir::Value* v : g.inputs())
    if (v->name() == name && !v->has_initializer()) return v;
  return nullptr;
}

// Reads the bucket fields of the Model table into `m` (whose main graph is parsed), with
// the same care as the main graph: every variant graph is rebuilt and verified, and every
// shape must name an input of its graph, with that input's static dims.
Status parse_buckets(const fb::Model& fm, GraphParser& parser, LoadedModel& m) {
  const int32_t kind = fm.bucket_kind();
  if (kind < 0 || kind > kMaxBucketKind) return data_loss("bucket kind %d is not valid", kind);
  m.bucket_kind = static_cast<BucketKind>(kind);
  const auto* fvariants = fm.variants();
  const auto* fpads = fm.pad_values();
  if (m.bucket_kind == BucketKind::kNone) {
    if ((fvariants && fvariants->size() != 0) || (fpads && fpads->size() != 0) || fm.dynamic_graph())
      return data_loss("the model has no bucket kind but holds variants, pad values or a dynamic graph");
    m.variants.push_back({{}, m.graph});
    return ok_status();
  }
  if (!fvariants || fvariants->size() == 0)
    return data_loss("bucket kind '%s' but no variants", bucket_kind_name(m.bucket_kind));
  KILN_RETURN_IF_ERROR(parser.charge_vector(fvariants));
  for (uint32_t k = 0; k < fvariants->size(); ++k) {
    const fb::Variant& fv = *fvariants->Get(k);
    LoadedVariant v;
    if (k == 0) {
      if (fv.graph()) return data_loss("variant 0 has its own graph (it must be the model's graph)");
      v.graph = m.graph;
    } else {
      if (!fv.graph()) return data_loss("variant %u has no graph", k);
      KILN_ASSIGN_OR_RETURN(std::string gname, parser.string(fv.graph()->name()));
      auto g = std::make_shared<ir::Graph>(std::move(gname));
      std::vector<const ir::Graph*> scopes;
      KILN_RETURN_IF_ERROR(parser.graph(*fv.graph(), *g, 0, scopes), "variant %u", k);
      KILN_RETURN_IF_ERROR(ir::verify(*g), "variant %u fails verification", k);
      KILN_RETURN_IF_ERROR(same_interface(*m.graph, *g, str_format("variant %u", k).c_str()));
      v.graph = std::move(g);
    }
    const auto* fshapes = fv.shapes();
    if (!fshapes || fshapes->size() == 0) return data_loss("variant %u has no input shapes", k);
    KILN_RETURN_IF_ERROR(parser.charge_vector(fshapes));
    for (uint32_t j = 0; j < fshapes->size(); ++j) {
      const fb::InputShape& fs = *fshapes->Get(j);
      KILN_ASSIGN_OR_RETURN(std::string name, parser.string(fs.name()));
      std::vector<int64_t> dims;
      if (const auto* fd = fs.dims()) {
        KILN_RETURN_IF_ERROR(parser.charge_vector(fd));
        dims.assign(fd->begin(), fd->end());
      }
      const ir::Value* in = find_input(*v.graph, name);
      if (!in) return data_loss("variant %u shape %u names '%s', which is not an input", k, j, name.c_str());
      const Shape& declared = in->shape();
      bool match = declared.has_rank() && declared.rank() == static_cast<int>(dims.size());
      for (size_t d = 0; match && d < dims.size(); ++d)
        if (dims[d] < 0 || !declared[static_cast<int>(d)].is_static() ||
            declared[static_cast<int>(d)].value != dims[d])
          match = false;
      if (!match)
        return data_loss("variant %u gives input '%s' shape %s, its graph declares %s", k, name.c_str(),
                         dims_to_string(dims).c_str(), declared.to_string().c_str());
      if (!v.shapes.emplace(name, std::move(dims)).second)
        return data_loss("variant %u gives input '%s' twice", k, name.c_str());
    }
    if (k > 0 && v.shapes.size() != m.variants[0].shapes.size())
      return data_loss("variant %u gives %zu input shapes, variant 0 gives %zu", k, v.shapes.size(),
                       m.variants[0].shapes.size());
    for (const auto& [name, dims] : v.shapes)
      if (k > 0 && !m.variants[0].shapes.count(name))
        return data_loss("variant %u gives input '%s' a shape, variant 0 does not", k, name.c_str());
    m.variants.push_back(std::move(v));
  }
  if (fpads) {
    KILN_RETURN_IF_ERROR(parser.charge_vector(fpads));
    for (uint32_t j = 0; j < fpads->size(); ++j) {
      KILN_ASSIGN_OR_RETURN(std::string name, parser.string(fpads->Get(j)->name()));
      if (!find_input(*m.graph, name))
        return data_loss("pad value %u names '%s', which is not an input", j, name.c_str());
      if (!m.pad_values.emplace(name, fpads->Get(j)->value()).second)
        return data_loss("pad value for input '%s' appears twice", name.c_str());
    }
  }
  if (const fb::Graph* fd = fm.dynamic_graph()) {
    KILN_ASSIGN_OR_RETURN(std::string gname, parser.string(fd->name()));
    auto g = std::make_shared<ir::Graph>(std::move(gname));
    std::vector<const ir::Graph*> scopes;
    KILN_RETURN_IF_ERROR(parser.graph(*fd, *g, 0, scopes), "dynamic graph");
    KILN_RETURN_IF_ERROR(ir::verify(*g), "dynamic graph fails verification");
    KILN_RETURN_IF_ERROR(same_interface(*m.graph, *g, "the dynamic graph"));
    m.dynamic_graph = std::move(g);
  }
  return ok_status();
}

// A one-line error naming the file and the section at fault. Whatever the inner check
// called it, a model that fails validation is a damaged file (data loss), unless the
// loader ran out of memory.
Status at(const std::string& file, const char* section, const Status& s) {
  StatusCode code = s.code() == StatusCode::kResourceExhausted ? s.code() : StatusCode::kDataLoss;
  return Status(code, file + ": " + section + ": " + s.to_string());
}

// `body_digest`: the XXH3-64 of everything after the header, when the caller computed it
// while reading (load_model's cold tail is never read through `base`); null: computed here.
Expected<LoadedModel> parse(const uint8_t* base, size_t size, std::shared_ptr<const void> owner,
                            const std::string& file, const uint64_t* body_digest = nullptr) {
  const char* f = file.c_str();
  // 1. Header.
  if (size < kHeaderSize)
    return data_loss("%s: truncated: file is %zu bytes, smaller than the %zu-byte header", f, size,
                     kHeaderSize);
  if (!looks_like_kiln(base, size))
    return invalid_argument("%s: not a .kiln model (bad magic at offset 0)", f);
  FileHeader h;
  std::memcpy(&h, base, sizeof(h));
  if (h.format_version != kFormatVersion)
    return unsupported("%s: format version %u is not supported (this build reads version %u)", f,
                       h.format_version, kFormatVersion);
  if (h.flags != 0) return unsupported("%s: header has unknown flags 0x%x (offset 12)", f, h.flags);
  if (h.file_size > size)
    return data_loss("%s: truncated: file is %zu bytes, header says %llu", f, size,
                     static_cast<ull>(h.file_size));
  if (h.file_size < size)
    return data_loss("%s: file is %zu bytes, header says %llu (trailing bytes)", f, size,
                     static_cast<ull>(h.file_size));
  if (h.metadata_offset != kHeaderSize)
    return data_loss("%s: metadata section at offset %llu, expected %zu", f,
                     static_cast<ull>(h.metadata_offset), kHeaderSize);
  if (h.metadata_size == 0 || h.metadata_size > size - h.metadata_offset)
    return data_loss("%s: metadata section [%llu, +%llu) lies outside the file (%zu bytes)", f,
                     static_cast<ull>(h.metadata_offset), static_cast<ull>(h.metadata_size), size);
  if (h.weight_offset % kWeightSectionAlignment != 0)
    return data_loss("%s: weight section offset %llu is not %llu-byte aligned", f,
                     static_cast<ull>(h.weight_offset), static_cast<ull>(kWeightSectionAlignment));
  const uint64_t metadata_end = h.metadata_offset + h.metadata_size;  // <= size: no overflow
  if (h.weight_offset < metadata_end)
    return data_loss("%s: weight section at offset %llu overlaps the metadata section [%llu, %llu)",
                     f, static_cast<ull>(h.weight_offset), static_cast<ull>(h.metadata_offset),
                     static_cast<ull>(metadata_end));
  // The weight section starts at the first page boundary after the metadata: anything
  // else means a size field was damaged.
  if (h.weight_offset - metadata_end >= kWeightSectionAlignment)
    return data_loss(
        "%s: weight section at offset %llu does not follow the metadata section "
        "ending at %llu",
        f, static_cast<ull>(h.weight_offset), static_cast<ull>(metadata_end));
  if (h.weight_offset > size || h.weight_size != size - h.weight_offset)
    return data_loss(
        "%s: weight section [%llu, +%llu) does not end at the end of the file (%zu bytes)", f,
        static_cast<ull>(h.weight_offset), static_cast<ull>(h.weight_size), size);

  // 2. Checksum.
  const uint64_t checksum = body_digest ? combine_checksum(base, *body_digest) : file_checksum(base, size);
  if (checksum != h.checksum) return data_loss("%s: checksum mismatch (file is corrupted)", f);

  // 3. FlatBuffers structure. Every table takes at least 4 bytes, so a buffer with more
  // table visits than size/4 shares tables (a DAG that could blow up verification time).
  const uint8_t* meta = base + h.metadata_offset;
  const size_t meta_size = static_cast<size_t>(h.metadata_size);
  if (meta_size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return data_loss("%s: metadata section is %zu bytes, larger than FlatBuffers allows", f,
                     meta_size);
  // Depth: a subgraph level is Graph -> Node -> Attr -> Graph; leave room for the tables
  // under a graph so that kMaxSubgraphDepth, checked below, is the limit users meet.
  flatbuffers::Verifier verifier(meta, meta_size,
                                 static_cast<flatbuffers::uoffset_t>(3 * kMaxSubgraphDepth + 16),
                                 static_cast<flatbuffers::uoffset_t>(meta_size / 4 + 16));
  if (!fb::VerifyModelBuffer(verifier))
    return data_loss(
        "%s: metadata section at offset %llu is not a valid model description "
        "(FlatBuffers verification failed)",
        f, static_cast<ull>(h.metadata_offset));
  const fb::Model* fm = fb::GetModel(meta);

  // 4. Semantics, while rebuilding the graph.
  LoadedModel m;
  m.file_size = size;
  m.weight_bytes = static_cast<size_t>(h.weight_size);
  m.info.format_version = h.format_version;
  m.info.checksum = h.checksum;
  m.info.kiln_version = str(fm->kiln_version());
  m.info.source_hash = str(fm->source_hash());
  m.info.source_name = str(fm->source_name());
  m.info.producer = str(fm->producer());
  m.info.target_arch = str(fm->target_arch());
  if (const auto* feats = fm->target_features())
    for (const fbs::String* s : *feats) m.info.target_features.push_back(str(s));
  if (!fm->graph()) return data_loss("%s: metadata: the model has no graph", f);

  const uint64_t cold = fm->cold_weights_offset();
  if (cold != 0 && (cold % kWeightSectionAlignment != 0 || cold >= h.weight_size))
    return data_loss("%s: metadata: the weights' cold tail at %llu is not a page boundary inside the %llu-byte weight section",
                     f, static_cast<ull>(cold), static_cast<ull>(h.weight_size));
  m.cold_weight_bytes = cold ? static_cast<size_t>(h.weight_size - cold) : 0;
  GraphParser parser(base + h.weight_offset, h.weight_size, std::move(owner), h.metadata_size);
  auto graph = std::make_shared<ir::Graph>(str(fm->graph()->name()));
  std::vector<const ir::Graph*> scopes;
  Status s = parser.graph(*fm->graph(), *graph, 0, scopes);
  if (!s.ok()) return at(file, "metadata", s);
  s = ir::verify(*graph);
  if (!s.ok()) return at(file, "metadata: graph fails verification", s);
  m.graph = std::move(graph);
  s = parse_buckets(*fm, parser, m);
  if (!s.ok()) return at(file, "metadata: shape buckets", s);
  s = parse_arena_plan(*fm, m);
  if (!s.ok()) return at(file, "metadata: arena plan", s);
  return m;
}

// A page-aligned buffer for a model of `size` bytes, so that the weight section (and so each
// tensor) is aligned as in a mapping, and a part of it can be replaced by a mapping of the
// file (the cold tail); null if it cannot be had.
// Large buffers start on a 2 MiB boundary and are advised for transparent huge pages: the
// first touch of fresh memory is a page fault per page, and on a VM those faults were the
// largest part of a load (ResNet-50: 27% of `kiln run --loops 1` in the kernel's fault path).
std::shared_ptr<void> model_buffer(size_t size) {
  const size_t bytes = (std::max<size_t>(size, 1) + kWeightSectionAlignment - 1) / kWeightSectionAlignment *
                       kWeightSectionAlignment;
  const bool huge = bytes >= kHugePageBytes;
  const size_t reserve = huge ? bytes + kHugePageBytes : bytes;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto base = reinterpret_cast<uintptr_t>(raw);
  if (huge) {
    base = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    ::madvise(reinterpret_cast<void*>(base), bytes, MADV_HUGEPAGE);  // a hint: failure leaves small pages
  }
  return std::shared_ptr<void>(reinterpret_cast<void*>(base), [raw, reserve](void*) { ::munmap(raw, reserve); });
}

// Reads [from, to) of `fd` into `buf + from`. Errors as load_model's.
Status read_range(int fd, char* buf, size_t from, size_t to, const std::string& path) {
  size_t done = from;
  while (done < to) {
    const ssize_t n = ::pread(fd, buf + done, to - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0)  // the file shrank since fstat
      return data_loss("%s: truncated while reading: %zu of %zu bytes", path.c_str(), done, to);
    if (n < 0) return unavailable("cannot read '%s': %s", path.c_str(), std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

// Where the cold tail of the file in `buf` starts (a file offset), when its header and
// metadata, read into `buf`, are sound enough to say; 0 otherwise (then everything is read,
// and parse() names what is wrong).
size_t cold_tail_start(const uint8_t* buf, size_t size) {
  FileHeader h;
  std::memcpy(&h, buf, sizeof(h));
  if (!looks_like_kiln(buf, size) || h.file_size != size || h.metadata_offset != kHeaderSize ||
      h.metadata_size == 0 || h.metadata_size > size - kHeaderSize || h.metadata_size >= FLATBUFFERS_MAX_BUFFER_SIZE ||
      h.weight_offset % kWeightSectionAlignment != 0 || h.weight_offset > size ||
      h.weight_offset < kHeaderSize + h.metadata_size || h.weight_size != size - h.weight_offset)
    return 0;
  flatbuffers::Verifier verifier(buf + kHeaderSize, static_cast<size_t>(h.metadata_size),
                                 static_cast<flatbuffers::uoffset_t>(3 * kMaxSubgraphDepth + 16),
                                 static_cast<flatbuffers::uoffset_t>(h.metadata_size / 4 + 16));
  if (!fb::VerifyModelBuffer(verifier)) return 0;
  const uint64_t cold = fb::GetModel(buf + kHeaderSize)->cold_weights_offset();
  if (cold == 0 || cold % kWeightSectionAlignment != 0 || cold >= h.weight_size) return 0;
  return static_cast<size_t>(h.weight_offset + cold);
}

// XXH3-64 of the file's bytes [from, to), read in chunks (not through a mapping, so that the
// pages do not join the process's memory). Errors as load_model's.
Status digest_range(int fd, size_t from, size_t to, XXH3_state_t* state, const std::string& path) {
  constexpr size_t kChunk = size_t{1} << 20;
  std::unique_ptr<char[]> chunk(new (std::nothrow) char[kChunk]);
  if (!chunk) return resource_exhausted("%s: cannot allocate a %zu-byte read buffer", path.c_str(), kChunk);
  for (size_t at = from; at < to;) {
    const ssize_t n = ::pread(fd, chunk.get(), std::min(kChunk, to - at), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return data_loss("%s: truncated while reading: %zu of %zu bytes", path.c_str(), at, to);
    if (n < 0) return unavailable("cannot read '%s': %s", path.c_str(), std::strerror(errno));
    XXH3_64bits_update(state, chunk.get(), static_cast<size_t>(n));
    at += static_cast<size_t>(n);
  }
  return ok_status();
}

}  // namespace

LoadMode load_mode_from_env() {
  const char* v = std::getenv("KILN_MODEL_LOAD");
  if (!v || !*v || std::strcmp(v, "read") == 0) return LoadMode::kRead;
  if (std::strcmp(v, "read-all") == 0) return LoadMode::kReadAll;
  if (std::strcmp(v, "map") == 0) return LoadMode::kMap;
  KILN_LOG(kWarning, "KILN_MODEL_LOAD=%s: not read, read-all or map; reading the model", v);
  return LoadMode::kRead;
}

Expected<LoadedModel> load_model(const std::string& path) { return load_model(path, load_mode_from_env()); }

Expected<LoadedModel> load_model(const std::string& path, LoadMode mode) {
  // O_NONBLOCK: opening a FIFO named like a model must not wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    Status s(err == ENOENT ? StatusCode::kNotFound : StatusCode::kUnavailable,
             str_format("cannot open '%s': %s", path.c_str(), std::strerror(err)));
    return s;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return unavailable("cannot stat '%s': %s", path.c_str(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("%s: not a regular file", path.c_str());
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderSize) {
    ::close(fd);
    return data_loss("%s: truncated: file is %zu bytes, smaller than the %zu-byte header",
                     path.c_str(), size, kHeaderSize);
  }
  if (mode == LoadMode::kMap) {
    // MAP_POPULATE: the checksum reads every page right away; faulting them in one call is
    // several times cheaper than one fault per page.
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file open
    if (base == MAP_FAILED)
      return unavailable("cannot map '%s': %s", path.c_str(), std::strerror(err));
    std::shared_ptr<const void> owner(
        base, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
    return parse(static_cast<const uint8_t*>(base), size, std::move(owner), path);
  }
  std::shared_ptr<void> owner = model_buffer(size);
  if (!owner) {
    ::close(fd);
    return resource_exhausted("%s: cannot allocate %zu bytes for the model", path.c_str(), size);
  }
  char* buf = static_cast<char*>(owner.get());
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf);
  // The header and the metadata first: they say where the cold tail starts.
  FileHeader h{};
  Status read = read_range(fd, buf, 0, kHeaderSize, path);
  std::memcpy(&h, buf, sizeof(h));
  size_t cold_start = 0;
  if (read.ok() && mode == LoadMode::kRead && h.weight_offset <= size && h.weight_offset > kHeaderSize) {
    read = read_range(fd, buf, kHeaderSize, static_cast<size_t>(h.weight_offset), path);
    if (read.ok()) cold_start = cold_tail_start(bytes, size);
  }
  if (!read.ok() || cold_start == 0) {
    if (read.ok()) read = read_range(fd, buf, 0, size, path);
    ::close(fd);
    if (!read.ok()) return read;
    return parse(bytes, size, std::move(owner), path);
  }
  // The hot part is read; the cold tail is mapped over the buffer's end (both page-aligned)
  // and checksummed by reading it in chunks, so that its pages stay out of this process.
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) {
    ::close(fd);
    return resource_exhausted("%s: cannot allocate the checksum state", path.c_str());
  }
  read = read_range(fd, buf, static_cast<size_t>(h.weight_offset), cold_start, path);
  if (read.ok()) {
    XXH3_64bits_update(state.get(), buf + kHeaderSize, cold_start - kHeaderSize);
    read = digest_range(fd, cold_start, size, state.get(), path);
  }
  if (read.ok() && ::mmap(buf + cold_start, size - cold_start, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd,
                          static_cast<off_t>(cold_start)) == MAP_FAILED)
    read = unavailable("cannot map '%s': %s", path.c_str(), std::strerror(errno));
  ::close(fd);  // the mapping keeps the file open
  if (!read.ok()) return read;
  const uint64_t body = XXH3_64bits_digest(state.get());
  auto m = parse(bytes, size, std::move(owner), path, &body);
  if (m.ok()) m->cold_tail_mapped = true;
  return m;
}

Expected<LoadedModel> load_model_from_memory(const void* data, size_t size) {
  if (!data && size) return invalid_argument("<memory>: null data");
  std::shared_ptr<void> owner = model_buffer(size);
  if (!owner) return resource_exhausted("<memory>: cannot allocate %zu bytes for the model", size);
  if (size) std::memcpy(owner.get(), data, size);
  const uint8_t* base = static_cast<const uint8_t*>(owner.get());
  return parse(base, size, std::move(owner), "<memory>");
}

std::vector<std::string> host_cpu_features() { return cpu_features().names; }

}  // namespace kiln::model
