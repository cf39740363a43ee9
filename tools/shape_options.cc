// Parsing --input-shape, --dynamic-dims and --dynamic-batch-size in Kiln's and ATC's forms.
#include "tools/shape_options.h"

#include <cstdlib>

namespace kiln::tools {
namespace {

// The non-empty pieces of `text` between `sep`s.
std::vector<std::string> split_items(const std::string& text, char sep) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(sep, pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) items.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return items;
}

// One dim: an integer >= 0, or -1 for a dim left open.
Expected<int64_t> parse_dim(const std::string& d, const std::string& item, const char* option) {
  char* end = nullptr;
  long long v = std::strtoll(d.c_str(), &end, 10);
  if (d.empty() || *end != '\0' || v < -1)
    return invalid_argument("%s '%s': dimension '%s' is not an integer >= 0 (or -1 for a dim left open, as ATC)",
                            option, item.c_str(), d.c_str());
  return static_cast<int64_t>(v);
}

size_t open_dims(const std::vector<int64_t>& dims) {
  size_t n = 0;
  for (int64_t d : dims) n += d < 0;
  return n;
}

// ATC's --dynamic_dims: each gear gives the values of the -1 dims of --input-shape in order.
Expected<std::vector<compiler::InputShapes>> atc_gears(const std::string& spec, const OrderedShapes& shapes) {
  size_t wanted = 0;
  for (const auto& [name, dims] : shapes) wanted += open_dims(dims);
  if (wanted == 0)
    return invalid_argument("--dynamic-dims '%s' in ATC's form gives values for the -1 dims of --input-shape, "
                            "but --input-shape has none (e.g. --input-shape x:1,3,48,-1 --dynamic-dims "
                            "\"320;640\"), or give full shapes: \"x:1,3,48,320;x:1,3,48,640\"",
                            spec.c_str());
  std::vector<compiler::InputShapes> gears;
  for (const std::string& gear : split_items(spec, ';')) {
    std::vector<std::string> values = split_items(gear, ',');
    if (values.size() != wanted || gear.find(",,") != std::string::npos)
      return invalid_argument("--dynamic-dims gear '%s' gives %zu values; --input-shape has %zu dims of -1 to fill",
                              gear.c_str(), values.size(), wanted);
    compiler::InputShapes bucket;
    size_t next = 0;
    for (const auto& [name, dims] : shapes) {
      if (open_dims(dims) == 0) continue;
      std::vector<int64_t> filled = dims;
      for (int64_t& d : filled) {
        if (d >= 0) continue;
        KILN_ASSIGN_OR_RETURN(d, parse_dim(values[next++], gear, "--dynamic-dims"));
        if (d < 1) return invalid_argument("--dynamic-dims gear '%s': a gear's dims must be >= 1", gear.c_str());
      }
      bucket[name] = filled;
    }
    gears.push_back(std::move(bucket));
  }
  if (gears.empty()) return invalid_argument("--dynamic-dims '%s' gives no gears", spec.c_str());
  return gears;
}

}  // namespace

Expected<OrderedShapes> parse_shape_list(const std::string& spec, const char* option) {
  OrderedShapes out;
  for (const std::string& item : split_items(spec, ';')) {
    // The name ends at the last ':' (a name may hold ':', e.g. "input:0").
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return invalid_argument("%s item '%s' is not NAME:D1,D2,... (e.g. x:1,3,224,224)", option, item.c_str());
    std::string name = item.substr(0, colon), rest = item.substr(colon + 1);
    std::vector<int64_t> dims;
    if (!rest.empty()) {
      // Every piece between commas is a dim, empty ones included (an error).
      size_t pos = 0;
      for (;;) {
        size_t comma = rest.find(',', pos);
        std::string d = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        KILN_ASSIGN_OR_RETURN(int64_t v, parse_dim(d, item, option));
        dims.push_back(v);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    }
    for (const auto& [have, unused] : out)
      if (have == name) return invalid_argument("%s names input '%s' twice", option, name.c_str());
    out.emplace_back(name, std::move(dims));
  }
  return out;
}

compiler::InputShapes to_input_shapes(const OrderedShapes& shapes) {
  compiler::InputShapes out;
  for (const auto& [name, dims] : shapes) out[name] = dims;
  return out;
}

Status apply_shape_options(const std::string& input_shape, const std::string& dynamic_dims,
                           const std::string& dynamic_batch, compiler::CompileOptions& options) {
  KILN_ASSIGN_OR_RETURN(OrderedShapes shapes, parse_shape_list(input_shape));
  if (!dynamic_batch.empty() && !dynamic_dims.empty())
    return invalid_argument("give --dynamic-batch-size or --dynamic-dims, not both");
  if (!dynamic_batch.empty()) {
    KILN_ASSIGN_OR_RETURN(options.dynamic_batch, compiler::parse_dynamic_batch(dynamic_batch));
    // ATC marks the batch axis with -1 ("x:-1,3,224,224"); no other dim may stay open.
    for (const auto& [name, dims] : shapes)
      for (size_t i = 1; i < dims.size(); ++i)
        if (dims[i] < 0)
          return invalid_argument("--input-shape gives input '%s' -1 at axis %zu: with --dynamic-batch-size only "
                                  "axis 0 (the batch) may be -1",
                                  name.c_str(), i);
  } else if (!dynamic_dims.empty()) {
    if (dynamic_dims.find(':') != std::string::npos) {
      KILN_ASSIGN_OR_RETURN(options.dynamic_dims, compiler::parse_dynamic_dims(dynamic_dims));
    } else {
      KILN_ASSIGN_OR_RETURN(options.dynamic_dims, atc_gears(dynamic_dims, shapes));
      // The inputs the gears bind are bucketed, not fixed.
      std::erase_if(shapes, [](const auto& item) { return open_dims(item.second) > 0; });
    }
  }
  options.input_shapes = to_input_shapes(shapes);
  return ok_status();
}

Expected<compiler::InputShapes> parse_run_shapes(const std::string& spec) {
  KILN_ASSIGN_OR_RETURN(OrderedShapes shapes, parse_shape_list(spec));
  for (const auto& [name, dims] : shapes)
    if (open_dims(dims) > 0)
      return invalid_argument("--input-shape gives input '%s' a dim of -1: a run needs every size (e.g. "
                              "x:1,3,48,320); leave the input out of --input-shape to take its shape from "
                              "--input NAME=FILE.npy",
                              name.c_str());
  return to_input_shapes(shapes);
}

}  // namespace kiln::tools
