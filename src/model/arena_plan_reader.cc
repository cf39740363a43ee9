// See arena_plan_reader.h.
#include "model/arena_plan_reader.h"

#include "model/arena_plan.h"

namespace kiln::model {
namespace {
using ull = unsigned long long;
}  // namespace

Status parse_arena_plan(const fb::Model& fm, LoadedModel& m) {
  const fb::ArenaPlan* fp = fm.arena_plan();
  if (!fp) return ok_status();
  if (fp->version() != kArenaPlanVersion && fp->version() != kArenaPlanVersionWithoutWorkspaces)
    return unsupported("version %u is not supported (this build reads versions %u and %u)", fp->version(),
                       kArenaPlanVersionWithoutWorkspaces, kArenaPlanVersion);
  if (fp->version() == kArenaPlanVersionWithoutWorkspaces && fp->workspaces())
    return data_loss("a version %u plan carries workspaces", fp->version());
  if (m.bucket_kind != BucketKind::kNone) return data_loss("a model with shape buckets carries an arena plan");
  const auto& values = m.graph->values();
  const auto* fvalues = fp->values();
  if (!fvalues || fvalues->size() == 0) return data_loss("the plan places no value");
  if (fvalues->size() > values.size())
    return data_loss("the plan places %u values, the graph has %zu", fvalues->size(), values.size());
  if (fp->arena_bytes() > std::numeric_limits<size_t>::max() / 2)
    return data_loss("the arena of %llu bytes is too large", static_cast<ull>(fp->arena_bytes()));
  ArenaPlan plan;
  plan.arena_bytes = static_cast<size_t>(fp->arena_bytes());
  for (uint32_t k = 0; k < fvalues->size(); ++k) {
    const fb::PlannedValue& pv = *fvalues->Get(k);
    if (pv.value() >= values.size())
      return data_loss("planned value %u: value index %u is out of range (%zu values)", k, pv.value(), values.size());
    if (pv.offset() > plan.arena_bytes || pv.size() > plan.arena_bytes)
      return data_loss("planned value %u ('%s') at [%llu, +%llu) lies outside the %zu-byte arena", k,
                       values[pv.value()]->name().c_str(), static_cast<ull>(pv.offset()),
                       static_cast<ull>(pv.size()), plan.arena_bytes);
    plan.values.push_back({values[pv.value()].get(), static_cast<size_t>(pv.offset()), static_cast<size_t>(pv.size())});
  }
  const auto& nodes = m.graph->nodes();
  if (const auto* fws = fp->workspaces()) {
    if (fws->size() > nodes.size())
      return data_loss("the plan has %u workspaces, the graph %zu nodes", fws->size(), nodes.size());
    for (uint32_t k = 0; k < fws->size(); ++k) {
      const fb::PlannedWorkspace& pw = *fws->Get(k);
      if (pw.node() >= nodes.size())
        return data_loss("planned workspace %u: node index %u is out of range (%zu nodes)", k, pw.node(), nodes.size());
      if (pw.offset() > plan.arena_bytes || pw.size() > plan.arena_bytes)
        return data_loss("planned workspace %u (node %s) at [%llu, +%llu) lies outside the %zu-byte arena", k,
                         nodes[pw.node()]->label().c_str(), static_cast<ull>(pw.offset()), static_cast<ull>(pw.size()),
                         plan.arena_bytes);
      plan.workspaces.push_back(
          {nodes[pw.node()].get(), static_cast<size_t>(pw.offset()), static_cast<size_t>(pw.size())});
    }
  }
  KILN_RETURN_IF_ERROR(check_arena_plan(*m.graph, plan));
  m.arena_plan = std::move(plan);
  return ok_status();
}

}  // namespace kiln::model
