// The model repository's layout and config.json (model_config.h).
#include "serve/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_brief.h"

namespace kiln::serve {
namespace fs = std::filesystem;

namespace {

using nlohmann::json;

Expected<int64_t> int_field(const json& j, const char* name, int64_t lo, int64_t hi) {
  if (!j.is_number_integer())
    return invalid_argument("config.json: '%s' must be an integer (got %s)", name, json_brief(j).c_str());
  int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    return invalid_argument("config.json: '%s' is %lld, expected %lld..%lld", name, static_cast<long long>(v),
                            static_cast<long long>(lo), static_cast<long long>(hi));
  return v;
}

Expected<ModelConfig> parse_config_json(const json& j) {
  ModelConfig c;
  if (!j.is_object()) return invalid_argument("config.json must hold a JSON object");
  bool has_llm = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "max_batch_size") {
      KILN_ASSIGN_OR_RETURN(int64_t v, int_field(value, "max_batch_size", 0, 1 << 16));
      c.max_batch_size = static_cast<int>(v);
    } else if (key == "dynamic_batching") {
      // Triton's spelling: {"max_queue_delay_microseconds": N}.
      if (!value.is_object()) return invalid_argument("config.json: 'dynamic_batching' must be an object");
      for (const auto& [k, v] : value.items()) {
        if (k != "max_queue_delay_microseconds")
          return invalid_argument("config.json: unknown field 'dynamic_batching.%s' (known: "
                                  "max_queue_delay_microseconds)", k.c_str());
        KILN_ASSIGN_OR_RETURN(c.max_queue_delay_us, int_field(v, "max_queue_delay_microseconds", 0, 10'000'000));
      }
    } else if (key == "instance_count") {
      KILN_ASSIGN_OR_RETURN(int64_t v, int_field(value, "instance_count", 1, 64));
      c.instance_count = static_cast<int>(v);
    } else if (key == "max_queue_size") {
      KILN_ASSIGN_OR_RETURN(int64_t v, int_field(value, "max_queue_size", 1, 1 << 20));
      c.max_queue_size = static_cast<int>(v);
    } else if (key == "precision") {
      if (!value.is_string() || (value != "fp32" && value != "bf16" && value != "mixed"))
        return invalid_argument("config.json: 'precision' is %s, expected \"fp32\", \"bf16\" or \"mixed\"",
                                json_brief(value).c_str());
      c.precision = value.get<std::string>();
    } else if (key == "batch_buckets") {
      if (!value.is_array() || value.empty())
        return invalid_argument("config.json: 'batch_buckets' must be a non-empty array of batch sizes");
      for (const json& b : value) {
        KILN_ASSIGN_OR_RETURN(int64_t v, int_field(b, "batch_buckets", 1, 1 << 16));
        c.batch_buckets.push_back(v);
      }
    } else if (key == "backend") {
      if (!value.is_string() || (value != "kiln" && value != "llm"))
        return invalid_argument("config.json: 'backend' is %s, expected \"kiln\" or \"llm\"", json_brief(value).c_str());
      c.backend = value.get<std::string>();
    } else if (key == "llm") {
      if (!value.is_object()) return invalid_argument("config.json: 'llm' must be an object");
      for (const auto& [k, v] : value.items()) {
        if (k == "max_batch") {
          KILN_ASSIGN_OR_RETURN(c.llm.max_batch, int_field(v, "llm.max_batch", 1, 4096));
        } else if (k == "kv_cache_mib") {
          KILN_ASSIGN_OR_RETURN(c.llm.kv_cache_mib, int_field(v, "llm.kv_cache_mib", 1, 1 << 20));
        } else if (k == "block_size") {
          KILN_ASSIGN_OR_RETURN(c.llm.block_size, int_field(v, "llm.block_size", 1, 4096));
        } else if (k == "max_step_tokens") {
          // At least max_batch unless 0: the engine checks that, with the model, at load.
          KILN_ASSIGN_OR_RETURN(c.llm.max_step_tokens, int_field(v, "llm.max_step_tokens", 0, 1 << 20));
        } else if (k == "kv_dtype") {
          if (!v.is_string() || (v != "fp32" && v != "bf16"))
            return invalid_argument("config.json: 'llm.kv_dtype' is %s, expected \"fp32\" or \"bf16\"",
                                    json_brief(v).c_str());
          c.llm.kv_dtype = v.get<std::string>();
        } else if (k == "tokenizer") {
          if (!v.is_string() || v.get<std::string>().empty())
            return invalid_argument("config.json: 'llm.tokenizer' is %s, expected the path of a SentencePiece model "
                                    "(relative to the version directory)", json_brief(v).c_str());
          c.llm.tokenizer = v.get<std::string>();
        } else {
          return invalid_argument("config.json: unknown field 'llm.%s' (known: max_batch, kv_cache_mib, block_size, "
                                  "max_step_tokens, kv_dtype, tokenizer)",
                                  k.c_str());
        }
      }
      has_llm = true;
    } else {
      return invalid_argument("config.json: unknown field '%s' (known: backend, max_batch_size, dynamic_batching, "
                              "instance_count, max_queue_size, precision, batch_buckets, llm)", key.c_str());
    }
  }
  if (c.backend == "llm") {
    for (const char* field : {"max_batch_size", "dynamic_batching", "instance_count", "precision", "batch_buckets"})
      if (j.contains(field))
        return invalid_argument("config.json: '%s' does not apply to backend \"llm\" (its options are in 'llm')",
                                field);
  } else if (has_llm) {
    return invalid_argument("config.json: 'llm' needs \"backend\": \"llm\"");
  }
  if (!c.batch_buckets.empty()) {
    if (c.max_batch_size == 0)
      return invalid_argument("config.json: 'batch_buckets' needs 'max_batch_size' > 0 (dim 0 is then the batch)");
    int64_t largest = *std::max_element(c.batch_buckets.begin(), c.batch_buckets.end());
    if (largest < c.max_batch_size)
      return invalid_argument("config.json: the largest of 'batch_buckets' (%lld) is below 'max_batch_size' (%d)",
                              static_cast<long long>(largest), c.max_batch_size);
  }
  if (c.max_queue_delay_us > 0 && c.max_batch_size == 0)
    return invalid_argument("config.json: 'dynamic_batching' needs 'max_batch_size' > 0");
  return c;
}

}  // namespace

Expected<ModelConfig> parse_model_config(const std::string& json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("config.json is not valid JSON");
  return parse_config_json(j);
}

bool valid_model_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'; });
}

Expected<std::vector<std::string>> list_repository(const std::string& repository) {
  std::error_code ec;
  if (!fs::is_directory(repository, ec))
    return not_found("model repository '%s' is not a directory", repository.c_str());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(repository, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && valid_model_name(name)) names.push_back(name);
  }
  if (ec) return unavailable("cannot list the model repository '%s': %s", repository.c_str(), ec.message().c_str());
  std::sort(names.begin(), names.end());
  return names;
}

Expected<ModelFiles> find_model(const std::string& repository, const std::string& name) {
  if (!valid_model_name(name)) return not_found("'%s' is not a model name", name.c_str());
  fs::path dir = fs::path(repository) / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("the repository has no model '%s'", name.c_str());
  ModelFiles files;
  files.name = name;
  fs::path config = dir / "config.json";
  if (fs::exists(config, ec)) {
    std::ifstream in(config);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return unavailable("cannot read %s", config.string().c_str());
    KILN_ASSIGN_OR_RETURN(files.config, parse_model_config(text.str()), "model '%s'", name.c_str());
  }
  const bool decoder = files.config.backend == "llm";
  // The highest numeric version with a model file (backend llm: a decoder's config.json).
  int64_t best = -1;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string v = entry.path().filename().string();
    if (!entry.is_directory() || v.empty() || v.size() > 18 ||
        !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    if (decoder) {
      if (fs::is_regular_file(entry.path() / "config.json", ec) && std::stoll(v) > best) {
        best = std::stoll(v);
        files.version = v;
        files.model_path = entry.path().string();
      }
      continue;
    }
    for (const char* file : {"model.kiln", "model.onnx"}) {
      fs::path p = entry.path() / file;
      if (fs::is_regular_file(p, ec) && std::stoll(v) > best) {
        best = std::stoll(v);
        files.version = v;
        files.model_path = p.string();
        files.onnx = std::string(file) == "model.onnx";
        break;
      }
    }
  }
  if (best < 0)
    return invalid_argument(decoder ? "model '%s' (backend llm) has no version directory holding a decoder's config.json"
                                    : "model '%s' has no version directory holding model.kiln or model.onnx",
                            name.c_str());
  if (decoder) return files;
  if (!files.onnx && (files.config.precision != "fp32" || !files.config.batch_buckets.empty()))
    return invalid_argument("model '%s': 'precision' and 'batch_buckets' apply to model.onnx only (a .kiln file "
                            "was compiled with its own)", name.c_str());
  return files;
}

}  // namespace kiln::serve
