// Reading a .kiln's arena plan (arena_plan.h) from its FlatBuffers metadata: the loader's part
// that knows the plan's versions and checks each entry against the graph it rebuilt.
#pragma once

#include "core/status.h"
#include "model/kiln_model.h"
#include "model/kiln_model_generated.h"

namespace kiln::model {

// The arena plan of the main graph (arena_plan.h), when the file has one: the version (2, or 1
// without workspaces), every value and node index, then check_arena_plan (ranges inside the
// arena, no two live values or workspaces overlapping).
Status parse_arena_plan(const fb::Model& fm, LoadedModel& m);

}  // namespace kiln::model
