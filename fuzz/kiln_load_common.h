// Shared by the .kiln loading targets: load from memory, then inspect what loaded (the
// text dump `kiln inspect --graph` prints, the verifier, every initializer's bytes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ir/graph.h"
#include "model/kiln_model.h"

namespace kiln::fuzz {

inline void load_and_inspect(const uint8_t* data, size_t size) {
  auto loaded = model::load_model_from_memory(data, size);
  if (!loaded.ok()) return;
  for (const model::LoadedVariant& v : loaded->variants) {
    if (!v.graph) continue;
    (void)ir::verify(*v.graph);
    volatile size_t sink = ir::to_text(*v.graph).size();
    (void)sink;
  }
}

}  // namespace kiln::fuzz
