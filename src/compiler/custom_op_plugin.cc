// Loading custom-op plugins and registering their definitions (custom_op_plugin.h).
#include "compiler/custom_op_plugin.h"

#include <dlfcn.h>

#include <cctype>
#include <cstddef>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>

#include "ops/op_util.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

constexpr int kMaxInputs = 8;
constexpr int kMaxAttrs = 64;

std::vector<std::unique_ptr<CustomOpDefinition>>& definitions() {
  static std::vector<std::unique_ptr<CustomOpDefinition>> defs;
  return defs;
}

// What the host table's callbacks reach through host_data.
struct HostState {
  kilnCustomOpHost host{};
  std::string path;
  std::string plugin_error;      // set_error
  std::string register_error;    // the first refused register_op
  std::vector<std::string> registered;
};

bool identifier(const char* s) {
  if (!s || !*s || !(std::isalpha(static_cast<unsigned char>(*s)) || *s == '_')) return false;
  for (; *s; ++s)
    if (!(std::isalnum(static_cast<unsigned char>(*s)) || *s == '_')) return false;
  return true;
}

bool domain_name(const char* s) {
  if (!s) return false;
  for (; *s; ++s)
    if (!(std::isalnum(static_cast<unsigned char>(*s)) || *s == '_' || *s == '.' || *s == '-')) return false;
  return true;
}

std::string op_label(const CustomOpDefinition& d) { return (d.domain.empty() ? "ai.onnx" : d.domain) + "::" + d.op_type; }

Status infer_custom(const CustomOpDefinition& def, ops::InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label =
      node.label() + " (custom op " + op_label(def) + " from plugin " + def.plugin + ")";
  KILN_ASSIGN_OR_RETURN(std::vector<float> attrs, custom_op_attr_values(def, node));
  Shape expected = Shape(std::vector<Dim>());
  bool ranked = true;
  std::vector<int32_t> ranks;
  std::vector<std::vector<int64_t>> dims;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return invalid_argument("node %s: input %d is omitted", label.c_str(), i);
    const ir::TensorType& t = ctx.input_type(i);
    if (t.dtype != DataType::kFloat32 && t.dtype != DataType::kUndefined)
      return invalid_argument("node %s: input %d is %s; custom element-wise ops take float32", label.c_str(), i,
                              dtype_name(t.dtype));
    std::vector<int64_t> d;
    if (!t.shape.has_rank() || t.shape.rank() > KILN_CUSTOM_OP_MAX_RANK) {
      ranked = false;
      ranks.push_back(-1);
    } else {
      for (const Dim& x : t.shape.dims()) d.push_back(x.is_static() ? x.value : -1);
      ranks.push_back(t.shape.rank());
      KILN_ASSIGN_OR_RETURN(expected, ops::broadcast_shapes(node, expected, t.shape));
    }
    dims.push_back(std::move(d));
  }
  Shape out = ranked ? expected : Shape::unknown_rank();
  if (def.infer) {
    std::vector<const int64_t*> dim_ptrs;
    for (const auto& d : dims) dim_ptrs.push_back(d.data());
    kilnCustomOpShapes s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.num_inputs = ctx.num_inputs();
    s.input_ranks = ranks.data();
    s.input_dims = dim_ptrs.data();
    s.num_attrs = static_cast<int32_t>(attrs.size());
    s.attrs = attrs.data();
    s.output_rank = -1;
    int32_t rc = 0;
    try {
      rc = def.infer(&s);
    } catch (const std::exception& e) {
      return invalid_argument("node %s: the plugin's shape inference threw an exception: %s", label.c_str(), e.what());
    } catch (...) {
      return invalid_argument("node %s: the plugin's shape inference threw an exception (not a std::exception)",
                              label.c_str());
    }
    s.error[sizeof s.error - 1] = '\0';
    if (rc != 0)
      return invalid_argument("node %s: the plugin's shape inference refused the node: %s", label.c_str(),
                              s.error[0] ? s.error : "(no message)");
    if (s.output_rank < 0 || s.output_rank > KILN_CUSTOM_OP_MAX_RANK)
      return invalid_argument("node %s: the plugin's shape inference returned rank %d (expected 0 to %d)",
                              label.c_str(), s.output_rank, KILN_CUSTOM_OP_MAX_RANK);
    std::vector<Dim> got_dims;
    for (int i = 0; i < s.output_rank; ++i) {
      if (s.output_dims[i] < -1)
        return invalid_argument("node %s: the plugin's shape inference returned extent %lld for dim %d",
                                label.c_str(), static_cast<long long>(s.output_dims[i]), i);
      got_dims.push_back(s.output_dims[i] >= 0 ? Dim(s.output_dims[i]) : Dim());
    }
    Shape got(std::move(got_dims));
    if (ranked) {
      // The compute is element-wise: output element i reads every input at i (broadcast), so
      // the output can only be the broadcast of the inputs.
      bool agrees = got.rank() == expected.rank();
      for (int i = 0; agrees && i < got.rank(); ++i)
        if (got[i].is_static() && expected[i].is_static() && got[i].value != expected[i].value) agrees = false;
      if (!agrees)
        return invalid_argument(
            "node %s: the plugin's shape inference returned %s, but the op's compute is element-wise, so its output "
            "is the broadcast of its inputs, %s",
            label.c_str(), got.to_string().c_str(), expected.to_string().c_str());
    } else {
      out = std::move(got);
    }
  }
  ctx.set_output(0, DataType::kFloat32, std::move(out));
  return ok_status();
}

Status run_custom(const CustomOpDefinition& def, ops::KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::vector<float> attrs, custom_op_attr_values(def, ctx.node()));
  std::map<std::string, double> values;
  for (size_t i = 0; i < attrs.size(); ++i) values[def.attr_names[i]] = attrs[i];
  return ops::run_custom_elementwise(ctx, ops::bind_custom_expr(def.expr, values));
}

// Checks and copies one definition the plugin registers.
Status add_definition(HostState& st, const kilnCustomOpDef* d) {
  if (!d) return invalid_argument("register_op was given a null definition");
  if (d->struct_size < offsetof(kilnCustomOpDef, infer) + sizeof(d->infer))
    return invalid_argument("register_op: struct_size %u is smaller than this ABI's kilnCustomOpDef (%zu)",
                            d->struct_size, offsetof(kilnCustomOpDef, infer) + sizeof(d->infer));
  if (!domain_name(d->domain)) return invalid_argument("register_op: domain is null or not a domain name");
  if (!identifier(d->op_type)) return invalid_argument("register_op: op_type is null or not an identifier");
  auto def = std::make_unique<CustomOpDefinition>();
  def->domain = d->domain;
  def->op_type = d->op_type;
  def->plugin = st.path;
  const std::string label = op_label(*def);
  if (def->domain == "ai.onnx") def->domain.clear();
  if (d->num_inputs < 1 || d->num_inputs > kMaxInputs)
    return invalid_argument("op %s: num_inputs %d (1 to %d)", label.c_str(), d->num_inputs, kMaxInputs);
  def->num_inputs = d->num_inputs;
  if (d->num_attrs < 0 || d->num_attrs > kMaxAttrs || (d->num_attrs > 0 && (!d->attr_names || !d->attr_defaults)))
    return invalid_argument("op %s: num_attrs %d with %s names and defaults", label.c_str(), d->num_attrs,
                            d->attr_names && d->attr_defaults ? "its" : "missing");
  for (int i = 0; i < d->num_attrs; ++i) {
    const char* name = d->attr_names[i];
    if (!identifier(name)) return invalid_argument("op %s: attribute %d's name is not an identifier", label.c_str(), i);
    def->attr_names.push_back(name);
    def->attr_defaults.push_back(d->attr_defaults[i]);
  }
  if (!d->compute) return invalid_argument("op %s: no compute expression", label.c_str());
  def->compute = d->compute;
  KILN_ASSIGN_OR_RETURN(def->expr, ops::parse_custom_expr(def->compute), "op %s", label.c_str());
  for (const std::string& a : def->attr_names)
    if (a.size() >= 2 && a[0] == 'x' && std::isdigit(static_cast<unsigned char>(a[1])))
      return invalid_argument("op %s: attribute '%s' would read as an input", label.c_str(), a.c_str());
  KILN_RETURN_IF_ERROR(ops::check_custom_expr_attrs(def->expr, def->attr_names), "op %s", label.c_str());
  if (ops::custom_expr_inputs(def->expr) > def->num_inputs)
    return invalid_argument("op %s: its compute reads x%d, but the op has %d inputs", label.c_str(),
                            ops::custom_expr_inputs(def->expr) - 1, def->num_inputs);
  def->infer = d->infer;
  if (find_custom_op(def->domain, def->op_type))
    return invalid_argument("op %s is already defined (by plugin %s)", label.c_str(),
                            find_custom_op(def->domain, def->op_type)->plugin.c_str());
  if (ops::OpRegistry::instance().knows(def->domain, def->op_type))
    return invalid_argument("op %s is one of Kiln's own ops; a plugin may only define ops Kiln lacks", label.c_str());

  const CustomOpDefinition* p = def.get();
  ops::OpSchema schema(def->op_type, def->domain);
  schema.since(1, std::numeric_limits<int32_t>::max())
      .inputs(def->num_inputs, def->num_inputs)
      .outputs(1, 1)
      .infer([p](ops::InferContext& ctx) { return infer_custom(*p, ctx); })
      .kernel([p](ops::KernelContext& ctx) { return run_custom(*p, ctx); })
      .doc("custom op from plugin " + def->plugin + ": " + def->compute);
  ops::OpRegistry::instance().add(std::move(schema));
  st.registered.push_back(label);
  definitions().push_back(std::move(def));
  return ok_status();
}

int32_t host_register_op(kilnCustomOpHost* host, const kilnCustomOpDef* def) {
  if (!host || !host->host_data) return 1;
  HostState& st = *static_cast<HostState*>(host->host_data);
  try {
    Status s = add_definition(st, def);
    if (s.ok()) return 0;
    if (st.register_error.empty()) st.register_error = s.to_string();
  } catch (const std::exception& e) {
    if (st.register_error.empty()) st.register_error = std::string("register_op: ") + e.what();
  }
  return 1;
}

void host_set_error(kilnCustomOpHost* host, const char* message) {
  if (!host || !host->host_data) return;
  static_cast<HostState*>(host->host_data)->plugin_error = message ? message : "";
}

}  // namespace

Expected<std::vector<float>> custom_op_attr_values(const CustomOpDefinition& def, const ir::Node& node) {
  std::vector<float> values = def.attr_defaults;
  for (size_t i = 0; i < def.attr_names.size(); ++i) {
    const ir::Attribute* a = node.attr(def.attr_names[i]);
    if (!a) continue;
    if (a->kind == ir::AttrKind::kFloat)
      values[i] = a->f;
    else if (a->kind == ir::AttrKind::kInt)
      values[i] = static_cast<float>(a->i);
    else
      return invalid_argument("node %s: attribute '%s' of custom op %s must be a float or an int, got %s",
                              node.label().c_str(), def.attr_names[i].c_str(), op_label(def).c_str(),
                              ir::attr_kind_name(a->kind));
  }
  return values;
}

Expected<std::vector<std::string>> load_custom_op_plugin(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return not_found("custom-op plugin %s: no such file", path.c_str());
  // A path without a slash would be searched for in the library path; name the file itself.
  std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return invalid_argument("custom-op plugin %s is not a loadable shared library: %s", path.c_str(),
                            why ? why : "dlopen failed");
  }
  // The library stays loaded: its shape inference runs for every node of its ops.
  auto entry = reinterpret_cast<kilnCustomOpsEntryFn>(dlsym(handle, KILN_CUSTOM_OPS_ENTRY));
  if (!entry)
    return invalid_argument("custom-op plugin %s does not export %s (include/kiln/custom_op.h; declare it extern \"C\")",
                            path.c_str(), KILN_CUSTOM_OPS_ENTRY);
  auto st = std::make_unique<HostState>();  // kept: a plugin may hold on to the host pointer
  st->path = path;
  st->host.struct_size = sizeof(kilnCustomOpHost);
  st->host.abi_version = KILN_CUSTOM_OP_ABI_VERSION;
  st->host.register_op = host_register_op;
  st->host.set_error = host_set_error;
  st->host.host_data = st.get();
  int32_t rc = 0;
  try {
    rc = entry(&st->host);
  } catch (const std::exception& e) {
    return invalid_argument("custom-op plugin %s: its %s threw an exception: %s", path.c_str(), KILN_CUSTOM_OPS_ENTRY,
                            e.what());
  } catch (...) {
    return invalid_argument("custom-op plugin %s: its %s threw an exception (not a std::exception)", path.c_str(),
                            KILN_CUSTOM_OPS_ENTRY);
  }
  if (!st->register_error.empty())
    return invalid_argument("custom-op plugin %s: a definition was refused: %s", path.c_str(),
                            st->register_error.c_str());
  if (rc != 0)
    return invalid_argument("custom-op plugin %s refused to load (%s returned %d): %s", path.c_str(),
                            KILN_CUSTOM_OPS_ENTRY, rc, st->plugin_error.empty() ? "(no message)" : st->plugin_error.c_str());
  if (st->registered.empty())
    return invalid_argument("custom-op plugin %s registered no op", path.c_str());
  std::vector<std::string> ops = st->registered;
  static std::vector<std::unique_ptr<HostState>> kept;
  kept.push_back(std::move(st));
  return ops;
}

Expected<std::vector<std::string>> register_custom_op_definitions(const std::string& source,
                                                                  const std::vector<kilnCustomOpDef>& defs) {
  HostState st;
  st.path = source;
  for (const kilnCustomOpDef& d : defs) {
    if (d.infer) return invalid_argument("custom ops of %s: a definition without a library has no shape function",
                                         source.c_str());
    KILN_RETURN_IF_ERROR(add_definition(st, &d), "custom ops of %s: a definition was refused", source.c_str());
  }
  if (st.registered.empty()) return invalid_argument("custom ops of %s: no op defined", source.c_str());
  return st.registered;
}

const CustomOpDefinition* find_custom_op(const std::string& domain, const std::string& op_type) {
  const std::string d = domain == "ai.onnx" ? std::string() : domain;
  for (const auto& def : definitions())
    if (def->domain == d && def->op_type == op_type) return def.get();
  return nullptr;
}

}  // namespace kiln::compiler
