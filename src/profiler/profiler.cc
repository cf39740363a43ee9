// The recorder (per-thread chunked buffers, the track registry) and profiling sessions.
#include "profiler/profiler.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "profiler/records.h"
#include "profiler/report.h"

namespace kiln::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

// Records per chunk: a chunk is allocated by its writer thread when the previous one is
// full, so the hot path is a store into a slot and a release store of the count.
constexpr size_t kChunkRecords = 256;

struct Chunk {
  std::array<Record, kChunkRecords> records;
  std::atomic<Chunk*> next{nullptr};
};

// One thread's records. Only the owner thread writes (tail, tail_used); readers take
// `published` (acquire) and read the records before it. Readers hold the registry lock,
// and free chunks that are fully consumed and no longer the writer's tail.
struct ThreadBuffer {
  Chunk* head = nullptr;         // oldest chunk still held (reader side, under the lock)
  uint64_t head_index = 0;       // index of head's first record
  Chunk* tail = nullptr;         // writer side
  size_t tail_used = 0;          // writer side
  std::atomic<uint64_t> published{0};
  uint64_t consumed = 0;         // reader side, under the lock
  int host_track = -1;
};

struct TrackKey {
  const void* owner;
  int sub;
  bool operator<(const TrackKey& o) const {
    return owner != o.owner ? owner < o.owner : sub < o.sub;
  }
};

// Never destroyed: stream threads and the atexit writer may use it during process exit.
struct Registry {
  std::mutex mutex;
  std::vector<ThreadBuffer*> buffers;
  std::vector<Track> tracks;
  std::map<TrackKey, int> track_ids;
  std::map<const void*, int> stream_ordinals;
  int host_threads = 0;
  int64_t origin_ns = 0;
  bool origin_set = false;
  // Session.
  std::mutex session_mutex;
  bool has_session = false;
  bool env_session = false;
  std::string dir;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

thread_local ThreadBuffer* t_buffer = nullptr;
thread_local int t_track = -1;

ThreadBuffer& thread_buffer() {
  if (KILN_UNLIKELY(t_buffer == nullptr)) {
    auto* b = new ThreadBuffer();
    b->head = b->tail = new Chunk();
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    int n = ++r.host_threads;
    Track t;
    t.pid = 0;
    t.tid = n;
    t.process_name = "host";
    t.thread_name = "host thread " + std::to_string(n);
    t.cores = static_cast<int>(std::thread::hardware_concurrency());
    b->host_track = static_cast<int>(r.tracks.size());
    r.tracks.push_back(std::move(t));
    r.buffers.push_back(b);
    t_buffer = b;
  }
  return *t_buffer;
}

// Appends a record to the calling thread's buffer: no lock.
Record& begin_record(RecordKind kind) {
  ThreadBuffer& b = thread_buffer();
  if (b.tail_used == kChunkRecords) {
    Chunk* c = new Chunk();
    b.tail->next.store(c, std::memory_order_release);
    b.tail = c;
    b.tail_used = 0;
  }
  Record& rec = b.tail->records[b.tail_used];
  rec = Record();
  rec.kind = kind;
  rec.track = t_track >= 0 ? t_track : b.host_track;
  return rec;
}

void publish() {
  ThreadBuffer& b = *t_buffer;
  ++b.tail_used;
  b.published.store(b.published.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void write_env_at_exit() {
  Status s = flush_env_session();
  if (!s.ok()) std::fprintf(stderr, "kiln profiler: %s\n", s.to_string().c_str());
}

Status write_dir(const std::string& dir, bool consume) {
  Profile p = collect(consume);
  return write_profile(p, dir);
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* engine_name(EngineKind engine) {
  switch (engine) {
    case EngineKind::kCompute: return "compute";
    case EngineKind::kCopy: return "copy";
    case EngineKind::kHost: return "host";
  }
  return "?";
}

int stream_track(const void* stream, int device_id, const std::string& device_name, int cores,
                 EngineKind engine) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  TrackKey key{stream, static_cast<int>(engine)};
  auto it = r.track_ids.find(key);
  if (it != r.track_ids.end()) return it->second;
  auto [ord, inserted] = r.stream_ordinals.emplace(stream, 0);
  if (inserted) ord->second = static_cast<int>(r.stream_ordinals.size());
  Track t;
  t.pid = 1 + device_id;
  t.tid = ord->second * 3 + static_cast<int>(engine);
  t.process_name = device_name;
  t.thread_name = "stream " + std::to_string(ord->second) + " " + engine_name(engine);
  t.cores = cores;
  int id = static_cast<int>(r.tracks.size());
  r.tracks.push_back(std::move(t));
  r.track_ids[key] = id;
  return id;
}

void set_thread_track(int track) { t_track = track; }

void record_api(const char* name, int64_t start_ns) {
  int64_t end = now_ns();
  Record& r = begin_record(RecordKind::kApi);
  r.start_ns = start_ns;
  r.dur_ns = end - start_ns;
  r.name = name;
  publish();
}

void record_task(const char* label, int64_t start_ns) {
  int64_t end = now_ns();
  Record& r = begin_record(RecordKind::kTask);
  r.start_ns = start_ns;
  r.dur_ns = end - start_ns;
  r.name = label;
  publish();
}

void record_copy(const char* direction, size_t bytes, int64_t start_ns) {
  int64_t end = now_ns();
  Record& r = begin_record(RecordKind::kCopy);
  r.start_ns = start_ns;
  r.dur_ns = end - start_ns;
  r.name = direction;
  r.bytes = bytes;
  publish();
}

void record_compile_phases(const std::vector<std::pair<std::string, double>>& phases,
                           int64_t start_ns) {
  // The whole compile encloses its passes (import and writing take the rest).
  Record& whole = begin_record(RecordKind::kCompile);
  whole.start_ns = start_ns;
  whole.dur_ns = now_ns() - start_ns;
  whole.name = "compile";
  publish();
  int64_t t = start_ns;
  for (const auto& [name, ms] : phases) {
    Record& r = begin_record(RecordKind::kCompile);
    r.start_ns = t;
    r.dur_ns = static_cast<int64_t>(ms * 1e6);
    r.name = name;
    t += r.dur_ns;
    publish();
  }
}

uint64_t flow_id(const void* event, uint64_t generation) {
  // splitmix64 of the pair: ids stay distinct across events and generations.
  uint64_t x = reinterpret_cast<uintptr_t>(event) * 0x9e3779b97f4a7c15ull + generation;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x >> 11;  // 53 bits: exact in a JSON number
}

void record_flow_start(uint64_t id) {
  Record& r = begin_record(RecordKind::kFlowStart);
  r.start_ns = now_ns();
  r.flow = id;
  publish();
}

void record_flow_end(uint64_t id) {
  Record& r = begin_record(RecordKind::kFlowEnd);
  r.start_ns = now_ns();
  r.flow = id;
  publish();
}

// Defined here rather than in op_record.cc so that it shares begin_record/publish.
void record_op_detail(std::string node_name, std::shared_ptr<const OpDetail> detail,
                      int64_t start_ns) {
  int64_t end = now_ns();
  Record& r = begin_record(RecordKind::kOp);
  r.start_ns = start_ns;
  r.dur_ns = end - start_ns;
  r.name = std::move(node_name);
  r.op = std::move(detail);
  publish();
}

Profile collect(bool consume) {
  Registry& r = registry();
  Profile p;
  std::lock_guard lock(r.mutex);
  p.tracks = r.tracks;
  p.origin_ns = r.origin_ns;
  p.peak_gflops_per_core = peak_gflops_per_core();
  for (ThreadBuffer* b : r.buffers) {
    uint64_t end = b->published.load(std::memory_order_acquire);
    Chunk* c = b->head;
    uint64_t index = b->head_index;
    for (uint64_t i = b->consumed; i < end; ++i) {
      while (i >= index + kChunkRecords) {
        c = c->next.load(std::memory_order_acquire);
        index += kChunkRecords;
      }
      p.records.push_back(c->records[i - index]);
    }
    if (consume) {
      b->consumed = end;
      // Chunks wholly consumed that the writer has moved past are freed.
      while (b->consumed >= b->head_index + kChunkRecords) {
        Chunk* next = b->head->next.load(std::memory_order_acquire);
        if (next == nullptr) break;
        delete b->head;
        b->head = next;
        b->head_index += kChunkRecords;
      }
    }
  }
  return p;
}

// ---- Sessions ----------------------------------------------------------------------------

namespace {

Status make_dir(const std::string& dir) {
  if (dir.empty()) return invalid_argument("profiling: the output directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    return invalid_argument("profiling: cannot create the output directory '%s'%s%s", dir.c_str(),
                            ec ? ": " : "", ec ? ec.message().c_str() : "");
  return ok_status();
}

void set_origin() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.origin_set) {
    r.origin_ns = now_ns();
    r.origin_set = true;
  }
}

}  // namespace

Status init_session(const std::string& dir) {
  if (!kCompiledIn) return unsupported("this Kiln was built without the profiler (-DKILN_PROFILER=OFF)");
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  if (r.has_session)
    return failed_precondition("profiling is already set up (output '%s'%s); finalize it first",
                               r.dir.c_str(), r.env_session ? ", from KILN_PROFILE" : "");
  KILN_RETURN_IF_ERROR(make_dir(dir));
  collect(/*consume=*/true);  // records from before this session are not its own
  set_origin();
  r.has_session = true;
  r.env_session = false;
  r.dir = dir;
  return ok_status();
}

Status start_session() {
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  if (!r.has_session) return failed_precondition("profiling is not initialized (call kilnprofInit)");
  detail::g_enabled.store(true, std::memory_order_relaxed);
  return ok_status();
}

Status stop_session() {
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  if (!r.has_session) return failed_precondition("profiling is not initialized (call kilnprofInit)");
  detail::g_enabled.store(false, std::memory_order_relaxed);
  return ok_status();
}

Status finalize_session() {
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  if (!r.has_session) return failed_precondition("profiling is not initialized (call kilnprofInit)");
  if (r.env_session)
    return failed_precondition("the profiling session comes from KILN_PROFILE; it ends at exit");
  detail::g_enabled.store(false, std::memory_order_relaxed);
  Status s = write_dir(r.dir, /*consume=*/true);
  r.has_session = false;
  r.dir.clear();
  return s;
}

bool has_session() {
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  return r.has_session;
}

std::string session_dir() {
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  return r.dir;
}

void start_env_session() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("KILN_PROFILE");
    if (env == nullptr || *env == '\0') return;
    if (!kCompiledIn) {
      std::fprintf(stderr, "kiln profiler: KILN_PROFILE is set, but this Kiln was built without the profiler\n");
      return;
    }
    Registry& r = registry();
    std::lock_guard lock(r.session_mutex);
    if (r.has_session) return;
    Status s = make_dir(env);
    if (!s.ok()) {
      std::fprintf(stderr, "kiln profiler: KILN_PROFILE: %s\n", s.to_string().c_str());
      return;
    }
    set_origin();
    r.has_session = true;
    r.env_session = true;
    r.dir = env;
    detail::g_enabled.store(true, std::memory_order_relaxed);
    std::atexit(write_env_at_exit);
  });
}

Status flush_env_session() {
  Registry& r = registry();
  std::lock_guard lock(r.session_mutex);
  if (!r.has_session || !r.env_session) return ok_status();
  return write_dir(r.dir, /*consume=*/false);
}

}  // namespace kiln::profiler
