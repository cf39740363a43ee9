// The default schedule.
#include "dsl/auto_schedule.h"

namespace kiln::dsl {

void auto_schedule(Schedule& s) {
  for (Stage& st : s.stages()) {
    if (!st.trace().empty()) continue;  // scheduled by hand
    const bool reduction = !st.reduce_axes().empty();
    if (!reduction && !s.is_output(st.tensor().get())) {
      st.compute_inline();
      continue;
    }
    std::vector<Axis> spatial = st.axes();
    if (spatial.empty()) continue;
    if (!reduction && spatial.size() == 1) {
      auto [outer, inner] = st.split(spatial[0], 256);
      st.parallel(outer);
      st.vectorize(inner);
      continue;
    }
    // The loops to fuse into the parallel one: all data-parallel loops under a reduction,
    // all but the innermost otherwise (it is vectorized).
    size_t n = reduction ? spatial.size() : spatial.size() - 1;
    Axis outer = spatial[0];
    for (size_t d = 1; d < n; ++d) outer = st.fuse(outer, spatial[d]);
    st.parallel(outer);
    if (!reduction) st.vectorize(spatial.back());
  }
}

}  // namespace kiln::dsl
