// Schedule knobs for the row-wise example operators and the JSON tuning database.
#include "dsl/tuning.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/cpu_features.h"

namespace kiln::dsl {

std::string knobs_text(const ScheduleKnobs& k) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "fuse_rows=%d keep=%d row_split=%lld col_split=%lld lanes=%lld vec=%lld",
                k.fuse_rows ? 1 : 0, k.keep ? 1 : 0, static_cast<long long>(k.row_split),
                static_cast<long long>(k.col_split), static_cast<long long>(k.lanes), static_cast<long long>(k.vec));
  if (k.row_tile > 0) return buf + std::string(" row_tile=") + std::to_string(k.row_tile);
  return buf;
}

void apply_knobs(Schedule& s, const Example& e, const ScheduleKnobs& k) {
  Stage& o = s[e.output];
  const Axis row = o.axes()[0];
  const Axis col = o.axes().size() == 2 ? o.axes()[1] : Axis();
  // A vector loop: the target's widest vectors, or `vec` elements.
  auto vectorize = [&](Stage& st, const Axis& a) {
    if (k.vec > 0)
      st.vectorize(a, k.vec);
    else
      st.vectorize(a);
  };
  // The output's column loop: vectorized whole, or split with the inner part vectorized.
  auto schedule_cols = [&](Stage& st, const Axis& c) {
    if (!c) return;
    if (k.col_split > 1) {
      auto [outer, inner] = st.split(c, k.col_split);
      vectorize(st, inner);
    } else {
      vectorize(st, c);
    }
  };
  if (k.fuse_rows && k.row_tile > 1) {
    // Row tiles: the reductions' caches computed at the tile loop, everything else inlined.
    std::vector<Tensor> reductions;
    for (const Stage& st : s.stages())
      if (!st.reduce_axes().empty() && st.tensor() != e.output.node()) reductions.push_back(Tensor(st.tensor()));
    for (const Tensor& t : reductions) s.cache_write(t);  // before any other primitive; adds stages
    Stage& out = s[e.output];
    auto [tile, in_tile] = out.split(out.axes()[0], k.row_tile);
    out.parallel(tile);
    schedule_cols(out, col);
    for (Stage& st : s.stages()) {
      if (&st == &out) continue;
      if (!st.is_cache()) {
        st.compute_inline();
        continue;
      }
      if (k.lanes > 1) st.reduce_lanes(k.lanes);
      st.compute_at(out, tile);
    }
    return;
  }
  // fuse_rows: one parallel region, each row's reductions and intermediates inside the output's
  // row loop; else a parallel region per stage, rows across threads.
  for (Stage& st : s.stages()) {
    if (st.tensor() == e.output.node()) continue;
    const bool reduction = !st.reduce_axes().empty();
    if (reduction && k.lanes > 1) st.reduce_lanes(k.lanes);
    if (!reduction && !k.keep) {
      st.compute_inline();
      continue;
    }
    if (k.fuse_rows)
      st.compute_at(o, row);
    else
      st.parallel(st.axes()[0]);
    if (!reduction && st.axes().size() == 2) vectorize(st, st.axes()[1]);
  }
  if (k.fuse_rows || k.row_split <= 1) {
    o.parallel(row);
  } else {
    auto [outer, inner] = o.split(row, k.row_split);
    o.parallel(outer);
  }
  schedule_cols(o, col);
}

ScheduleKnobs hand_knobs(const std::string& op) {
  // LayerNorm: every stage in the row loop, reductions in 64 lanes; Softmax and GELU-bias-add: a region per stage with
  // the element-wise intermediates kept.
  return ScheduleKnobs{op == "layernorm", true, 0, 0, op == "layernorm" ? 64 : 0, 0};
}

ScheduleKnobs default_knobs(bool stages) {
  // keep=0 inlines the element-wise stages as auto_schedule does; an operator of one compute has
  // only keep=1 points in the space (keep changes nothing there).
  return ScheduleKnobs{false, !stages, 0, 0, 0, 0, 0};
}

namespace {

// The values of each knob (the space is their product, less row_split with fuse_rows).
const std::vector<int64_t> kRowSplits = {0, 2, 4, 8}, kColSplits = {0, 16, 32, 64, 128}, kLanes = {0, 32, 64, 128},
                           kVecs = {0, 8}, kRowTiles = {0, 2, 4};

}  // namespace

std::vector<ScheduleKnobs> knob_space(bool stages) {
  std::vector<ScheduleKnobs> out;
  for (bool fuse : {false, true})
    for (bool keep : {true, false})
      for (int64_t rs : kRowSplits) {
        if (fuse && rs != 0) continue;
        for (int64_t cs : kColSplits)
          for (int64_t lanes : kLanes)
            for (int64_t vec : kVecs)
              for (int64_t tile : kRowTiles) {
                if (!stages && (fuse || !keep || lanes != 0 || tile != 0)) continue;  // no other stage: no effect
                if (tile != 0 && (!fuse || keep)) continue;
                out.push_back(ScheduleKnobs{fuse, keep, rs, cs, lanes, vec, tile});
              }
      }
  return out;
}

std::vector<ScheduleKnobs> knob_neighbours(const ScheduleKnobs& k, const std::vector<ScheduleKnobs>& space) {
  std::vector<ScheduleKnobs> out;
  for (const ScheduleKnobs& p : space) {
    const int differ = (p.fuse_rows != k.fuse_rows) + (p.keep != k.keep) + (p.row_split != k.row_split) +
                       (p.col_split != k.col_split) + (p.lanes != k.lanes) + (p.vec != k.vec) +
                       (p.row_tile != k.row_tile);
    // A row tile exists only without keep, so from a fused point with keep (LayerNorm's hand
    // schedule) no single move reaches one: setting row_tile and clearing keep is one move too.
    const bool tile_move = differ == 2 && p.keep != k.keep && p.row_tile != k.row_tile;
    if (differ == 1 || tile_move) out.push_back(p);
  }
  return out;
}

std::string tuning_target() {
  std::string s;
  for (const char* name : {"avx2", "fma", "avx512f", "avx512bw"})
    if (cpu_features().has(name)) s += (s.empty() ? "" : " ") + std::string(name);
  return s.empty() ? "baseline" : s;
}

namespace {

using nlohmann::json;

Expected<TuningEntry> entry_from_json(const json& j, size_t index) {
  TuningEntry e;
  try {
    e.op = j.at("op").get<std::string>();
    e.rows = j.at("shape").at(0).get<int64_t>();
    e.cols = j.at("shape").at(1).get<int64_t>();
    e.target = j.at("target").get<std::string>();
    const json& k = j.at("knobs");
    e.knobs.fuse_rows = k.at("fuse_rows").get<bool>();
    e.knobs.keep = k.at("keep").get<bool>();
    e.knobs.row_split = k.at("row_split").get<int64_t>();
    e.knobs.col_split = k.at("col_split").get<int64_t>();
    e.knobs.lanes = k.value("lanes", int64_t{0});  // absent in databases before the knob
    e.knobs.vec = k.value("vec", int64_t{0});      // likewise
    e.knobs.row_tile = k.value("row_tile", int64_t{0});  // likewise
    e.us = j.value("us", 0.0);
    e.default_us = j.value("default_us", 0.0);
    e.trials = j.value("trials", 0);
    e.seed = j.value("seed", uint64_t{0});
  } catch (const json::exception& ex) {
    return invalid_argument("tuning database entry %zu: %s", index, ex.what());
  }
  if (e.rows < 1 || e.cols < 1 || e.knobs.row_split < 0 || e.knobs.col_split < 0 || e.knobs.row_split > 1 << 20 ||
      e.knobs.col_split > 1 << 20 || e.knobs.lanes < 0 || e.knobs.lanes > 1024 || e.knobs.vec < 0 || e.knobs.vec > 64 ||
      e.knobs.row_tile < 0 || e.knobs.row_tile > 1024)
    return invalid_argument("tuning database entry %zu (%s): a shape or split out of range", index, e.op.c_str());
  return e;
}

}  // namespace

Expected<std::vector<TuningEntry>> read_tuning_db(const std::string& path) {
  std::vector<TuningEntry> out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  std::ifstream in(path);
  if (!in) return unavailable("cannot read tuning database %s", path.c_str());
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("entries") || !j["entries"].is_array())
    return invalid_argument("tuning database %s: not JSON of the form {\"version\": 1, \"entries\": [...]}",
                            path.c_str());
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    KILN_ASSIGN_OR_RETURN(TuningEntry e, entry_from_json(j["entries"][i], i), "in %s", path.c_str());
    out.push_back(std::move(e));
  }
  return out;
}

Status write_tuning_db(const std::string& path, const std::vector<TuningEntry>& entries) {
  json list = json::array();
  for (const TuningEntry& e : entries)
    list.push_back({{"op", e.op},
                    {"shape", {e.rows, e.cols}},
                    {"target", e.target},
                    {"knobs",
                     {{"fuse_rows", e.knobs.fuse_rows},
                      {"keep", e.knobs.keep},
                      {"row_split", e.knobs.row_split},
                      {"col_split", e.knobs.col_split},
                      {"lanes", e.knobs.lanes},
                      {"vec", e.knobs.vec},
                      {"row_tile", e.knobs.row_tile}}},
                    {"us", e.us},
                    {"default_us", e.default_us},
                    {"trials", e.trials},
                    {"seed", e.seed}});
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << json{{"version", 1}, {"entries", list}}.dump(2) << "\n";
    if (!out) return unavailable("cannot write %s", tmp.c_str());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return unavailable("cannot write tuning database %s: %s", path.c_str(), ec.message().c_str());
  return ok_status();
}

const TuningEntry* find_tuning_entry(const std::vector<TuningEntry>& db, const std::string& op, int64_t rows,
                                     int64_t cols, const std::string& target) {
  for (const TuningEntry& e : db)
    if (e.op == op && e.rows == rows && e.cols == cols && e.target == target) return &e;
  return nullptr;
}

}  // namespace kiln::dsl
