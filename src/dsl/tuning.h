// Schedule tuning of the DSL's example operators (docs/dsl.md, "Tuning"): a small space of
// schedule knobs over the row-wise operators, searched at random by measurement, and a JSON
// tuning database keeping the best knobs per (op, shape, target).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/examples.h"
#include "dsl/schedule.h"

namespace kiln::dsl {

// One point of the search space (every example's output is [rows, cols]).
struct ScheduleKnobs {
  bool fuse_rows = false;      // every other stage computed inside the output's row loop
  bool keep = true;            // element-wise intermediates in buffers (false: inlined, recomputed)
  int64_t row_split = 0;       // > 1: the output's row loop split by this, the outer loop parallel
  int64_t col_split = 0;       // > 1: the output's column loop split by this, the inner loop vectorized
  int64_t lanes = 0;           // > 1: every reduction accumulates in this many partials (Stage::reduce_lanes)
  int64_t vec = 0;             // > 0: vector loops use vectors of this many elements (Stage::vectorize's width)
  // > 1 (with fuse_rows, without keep): a tile of this many rows per iteration of the output's
  // parallel loop; each reduction accumulates the tile's rows in a local buffer (cache_write,
  // computed at that loop), so the rows' reductions run back to back and their latency chains overlap.
  int64_t row_tile = 0;
  bool operator==(const ScheduleKnobs& o) const {
    return fuse_rows == o.fuse_rows && keep == o.keep && row_split == o.row_split && col_split == o.col_split &&
           lanes == o.lanes && vec == o.vec && row_tile == o.row_tile;
  }
};

// "fuse_rows=1 keep=1 row_split=0 col_split=64 lanes=64 vec=0" (and " row_tile=N" when N > 0).
std::string knobs_text(const ScheduleKnobs& k);

// Applies `k` to a fresh schedule of `e` (auto_schedule fills in nothing: every stage is set).
void apply_knobs(Schedule& s, const Example& e, const ScheduleKnobs& k);

// The knobs that reproduce the example's hand schedule (examples.cc), where the search starts.
ScheduleKnobs hand_knobs(const std::string& op);

// The point whose schedule is the default one (auto_schedule's loops: element-wise stages inlined,
// a parallel region per reduction, the output's rows parallel and its columns vectorized): what
// kiln tune records when no point beats the default. `stages` as for knob_space.
ScheduleKnobs default_knobs(bool stages = true);

// Every point of the space, in a fixed order (fuse_rows x keep x row_split {0,2,4,8} x
// col_split {0,16,32,64,128} x lanes {0,32,64,128} x vec {0,8} x row_tile {0,2,4}; row_split
// only without fuse_rows, row_tile only with fuse_rows and without keep): 480 points. `stages` false (an operator with one compute, e.g. an element-wise
// chain): only row_split, col_split and vec, the knobs that change its loops (40 points).
std::vector<ScheduleKnobs> knob_space(bool stages = true);

// The points of `space` one knob away from `k` (one knob set to another of its values; a row
// tile set or changed together with keep, which a tile requires off), in the space's order: the
// moves of the search's local phase.
std::vector<ScheduleKnobs> knob_neighbours(const ScheduleKnobs& k, const std::vector<ScheduleKnobs>& space);

// The key of a database entry: the target is the CPU's ISA features the kernels are built for.
std::string tuning_target();

struct TuningEntry {
  std::string op;
  int64_t rows = 0, cols = 0;
  std::string target;
  ScheduleKnobs knobs;
  double us = 0;          // the best candidate's median time
  double default_us = 0;  // auto_schedule's, measured in the same run
  int trials = 0;
  uint64_t seed = 0;
};

// Reads a database (a missing file is an empty one). Errors: unreadable or malformed JSON,
// fields of the wrong type (naming the entry).
Expected<std::vector<TuningEntry>> read_tuning_db(const std::string& path);
// Writes `entries` (replacing the file atomically).
Status write_tuning_db(const std::string& path, const std::vector<TuningEntry>& entries);
// The entry for (op, rows, cols, target), or null.
const TuningEntry* find_tuning_entry(const std::vector<TuningEntry>& db, const std::string& op, int64_t rows,
                                     int64_t cols, const std::string& target);

}  // namespace kiln::dsl
