// ModelTable: the ids of the loaded models behind the kilnmdl* C API, and the C error code of
// a failed load.
#include "runtime/model_runtime.h"

namespace kiln::rt {

// ---- ModelTable ----------------------------------------------------------------------------

ModelTable& ModelTable::get() {
  static ModelTable* table = new ModelTable();  // never destroyed: used until process exit
  return *table;
}

uint32_t ModelTable::add(std::shared_ptr<Model> model) {
  std::lock_guard lock(mutex_);
  uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;  // 0 is never an id
  model->set_id(id);
  models_[id] = std::move(model);
  return id;
}

std::shared_ptr<Model> ModelTable::find(uint32_t id, std::shared_ptr<ExecutionToken>* token) const {
  std::lock_guard lock(mutex_);
  auto it = models_.find(id);
  if (it == models_.end()) return nullptr;
  if (token) *token = it->second->begin_execution();
  return it->second;
}

std::shared_ptr<Model> ModelTable::find(uint32_t id, std::optional<ExecutionToken>* token) const {
  std::lock_guard lock(mutex_);
  auto it = models_.find(id);
  if (it == models_.end()) return nullptr;
  token->emplace(it->second);
  return it->second;
}

std::shared_ptr<Model> ModelTable::remove(uint32_t id) {
  std::lock_guard lock(mutex_);
  auto it = models_.find(id);
  if (it == models_.end()) return nullptr;
  std::shared_ptr<Model> m = std::move(it->second);
  models_.erase(it);
  return m;
}

std::vector<std::shared_ptr<Model>> ModelTable::remove_all() {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Model>> all;
  for (auto& [id, m] : models_) all.push_back(std::move(m));
  models_.clear();
  return all;
}

size_t ModelTable::size() const {
  std::lock_guard lock(mutex_);
  return models_.size();
}

kilnError load_error_code(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound:
    case StatusCode::kUnavailable:
      return KILN_ERROR_READ_MODEL_FAILURE;
    case StatusCode::kInvalidArgument:
      return KILN_ERROR_INVALID_FILE;
    case StatusCode::kDataLoss:
      return KILN_ERROR_PARSE_MODEL;
    case StatusCode::kUnsupported:
      return KILN_ERROR_FEATURE_UNSUPPORTED;
    case StatusCode::kResourceExhausted:
      return KILN_ERROR_BAD_ALLOC;
    default:
      return KILN_ERROR_FAILURE;
  }
}

}  // namespace kiln::rt
