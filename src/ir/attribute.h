// Node attributes: the ONNX attribute kinds (scalars, strings, tensors, subgraphs and
// lists of each).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::ir {

class Graph;

enum class AttrKind : int32_t {
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kTensors = 9,
  kGraphs = 10,
};
inline constexpr int32_t kMaxAttrKind = 10;
const char* attr_kind_name(AttrKind k);

struct Attribute {
  AttrKind kind = AttrKind::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;

  static Attribute from_float(float v) { Attribute a; a.kind = AttrKind::kFloat; a.f = v; return a; }
  static Attribute from_int(int64_t v) { Attribute a; a.kind = AttrKind::kInt; a.i = v; return a; }
  static Attribute from_string(std::string v) { Attribute a; a.kind = AttrKind::kString; a.s = std::move(v); return a; }
  static Attribute from_ints(std::vector<int64_t> v) { Attribute a; a.kind = AttrKind::kInts; a.ints = std::move(v); return a; }
  static Attribute from_floats(std::vector<float> v) { Attribute a; a.kind = AttrKind::kFloats; a.floats = std::move(v); return a; }
  static Attribute from_tensor(Tensor v) { Attribute a; a.kind = AttrKind::kTensor; a.t = std::move(v); return a; }
  static Attribute from_graph(std::shared_ptr<Graph> v) { Attribute a; a.kind = AttrKind::kGraph; a.g = std::move(v); return a; }

  // Short readable form for the text dump: 1, 0.5, "same", [1,1], tensor float32[64], <graph body>.
  std::string to_string() const;
};

using AttributeMap = std::map<std::string, Attribute>;

// Attributes `kiln compile` adds to a node whose fast kernel packs constant weights
// (kernels/prepacked_weights.h), one entry per packed weight: the packed bytes (tensors,
// uint8), what they were packed as (tensors, uint8) and the node input packed (ints).
inline constexpr const char* kPrepackedAttr = "kiln_prepacked";
inline constexpr const char* kPrepackedKeyAttr = "kiln_prepacked_key";
inline constexpr const char* kPrepackedInputAttr = "kiln_prepacked_input";

}  // namespace kiln::ir
