// The C API of include/kiln/comm.h: communicator creation (in one process, from a root
// info, from a launcher's environment), the collectives and point-to-point operations, and
// groups. Each operation validates its arguments here (an error code and message at once)
// and becomes ONE host-engine task on the resolved stream; the task runs the algorithm on
// the stream's thread, and its failure becomes the stream's error and the communicator's
// async error.
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <vector>

#include "comm/algorithms.h"
#include "comm/communicator.h"
#include "comm/reduce_ops.h"
#include "comm/transport.h"
#include "kiln/comm.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "runtime/memory.h"

namespace kiln::comm {
namespace {

using rt::fail;
using rt::not_initialized;
using Body = std::function<Status(const AlgoContext&)>;

rt::HandleSet<Communicator>& live_comms() {
  static auto* comms = new rt::HandleSet<Communicator>();  // never destroyed: no exit-order issue
  return *comms;
}

kilnError check_comm(kilnComm comm, const char* api, Communicator** out) {
  if (comm == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: comm is NULL", api);
  if (!live_comms().contains(comm)) {
    return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE,
                "%s: comm %p is not a live communicator (destroyed, or not a communicator)", api,
                comm);
  }
  *out = static_cast<Communicator*>(comm);
  return KILN_SUCCESS;
}

kilnError check_dtype(const char* api, int dtype, const char* what) {
  if (comm_dtype_size(dtype) == 0) {
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: %s %d is not a kilnCommDataType (KILN_COMM_INT8 .. KILN_COMM_BF16, 0..11)",
                api, what, dtype);
  }
  return KILN_SUCCESS;
}

kilnError check_reducer(const char* api, int dtype, int op, const Reducer** out) {
  if (kilnError e = check_dtype(api, dtype, "dataType")) return e;
  *out = reducer_for(dtype, op);
  if (*out == nullptr) {
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: op %d is not a kilnReduceOp (KILN_REDUCE_SUM, _PROD, _MAX, _MIN: 0..3)", api,
                op);
  }
  return KILN_SUCCESS;
}

// count * elem * blocks in bytes, or an error when that overflows.
kilnError byte_count(const char* api, uint64_t count, size_t elem, uint64_t blocks,
                     const char* what, size_t* bytes) {
  const uint64_t limit = std::numeric_limits<size_t>::max() / 2;
  if (count > limit / elem / blocks) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %s %llu elements is too large", api, what,
                static_cast<unsigned long long>(count));
  }
  *bytes = static_cast<size_t>(count * elem * blocks);
  return KILN_SUCCESS;
}

// A buffer the operation reads or writes: not NULL when there are bytes to move, and when it
// is device memory, memory of the communicator's device covering the whole range.
kilnError check_buffer(const char* api, const Communicator& c, const void* p, size_t bytes,
                       const char* what) {
  if (bytes == 0) return KILN_SUCCESS;
  if (p == nullptr) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL with %zu bytes to transfer", api, what,
                bytes);
  }
  const rt::MemoryRegistry& registry = rt::MemoryRegistry::get();
  if (std::optional<rt::Allocation> a = registry.find(p, bytes)) {
    if (a->kind == rt::MemoryKind::kDevice && a->device != c.device()) {
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: %s %p is memory of cpu:%d, but the communicator (rank %d) is on cpu:%d",
                  api, what, p, a->device, c.rank(), c.device());
    }
    return KILN_SUCCESS;
  }
  if (std::optional<rt::Allocation> a = registry.find_overlapping(p, bytes)) {
    return fail(KILN_ERROR_INVALID_MEMORY,
                "%s: %s [%p, +%zu bytes) runs past the allocation at %p of %zu bytes", api, what,
                p, bytes, a->base, a->size);
  }
  return KILN_SUCCESS;  // host memory the caller keeps alive
}

// The stream an operation goes to: NULL is the current context's default stream; it must
// be a stream of the communicator's device.
kilnError get_stream(const char* api, const Communicator& c, kilnrtStream stream,
                     rt::Stream** out) {
  Expected<rt::Stream*> s = rt::resolve_stream(stream, api);
  if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  if ((*s)->device().id() != c.device()) {
    return fail(KILN_ERROR_RT_STREAM_CONTEXT,
                "%s: %s is a stream of cpu:%d, but the communicator (rank %d of %d) is on cpu:%d",
                api, (*s)->name().c_str(), (*s)->device().id(), c.rank(), c.size(), c.device());
  }
  *out = *s;
  return KILN_SUCCESS;
}

// ---- Submission and groups -----------------------------------------------------------------

// What every operation resolved at the call: the communicator and the stream (for a NULL
// stream handle, also the context whose default stream it is).
struct OpSetup {
  Communicator* comm = nullptr;
  rt::Stream* stream = nullptr;
  rt::Context* context = nullptr;
  uint64_t context_serial = 0;
};

// An operation posted between kilnGroupStart and kilnGroupEnd.
struct PendingOp {
  OpSetup where;
  std::shared_ptr<void> token;  // keeps kilnCommDestroy waiting until it ran
  const char* op;               // names the operation (a literal)
  Body body;                    // a collective; empty for a send or receive
  bool is_send = false;
  SendOp send{};
  RecvOp recv{};
};

struct GroupState {
  int depth = 0;
  std::vector<PendingOp> ops;
};
thread_local GroupState t_group;

// Enqueues one operation as one task on `stream`.
template <typename Fn>
kilnError launch(const char* api, const char* op, Communicator* c, rt::Stream* stream,
                 std::shared_ptr<void> token, Fn&& fn) {
  // Caught here rather than by the entry guard: kilnGroupEnd launches the rest of its group
  // after one launch fails.
  try {
    stream->submit(
        rt::Engine::kHost,
        [c, op, token = std::move(token), fn = std::forward<Fn>(fn)]() {
          return c->run(op, fn);
        },
        op, /*caller_may_run=*/true);
  } catch (const std::bad_alloc&) {
    return fail(KILN_ERROR_BAD_ALLOC, "%s: out of host memory while enqueueing the operation",
                api);
  }
  return KILN_SUCCESS;
}

// A collective: enqueued now, or collected by the thread's open group.
template <typename Fn>
kilnError submit(const char* api, const char* op, const OpSetup& where, Fn&& fn) {
  std::shared_ptr<void> token = where.comm->begin_operation();
  if (t_group.depth > 0) {
    t_group.ops.push_back(PendingOp{where, std::move(token), op, Body(std::forward<Fn>(fn))});
    return KILN_SUCCESS;
  }
  return launch(api, op, where.comm, where.stream, std::move(token), std::forward<Fn>(fn));
}

// Launches a closed group: collectives one task each on their streams; the sends and
// receives of one communicator on one stream together as one task doing one exchange (so a
// thread may post both halves of a pairing, or a rank's sends and receives to many peers).
kilnError launch_group(std::vector<PendingOp>& ops) {
  static const char* const kApi = "kilnGroupEnd";
  kilnError first = KILN_SUCCESS;
  rt::RuntimeState* state = rt::runtime_state();
  std::vector<bool> done(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (done[i]) continue;
    PendingOp& p = ops[i];
    kilnError e = KILN_SUCCESS;
    const bool stream_alive =
        state != nullptr &&
        (p.where.context != nullptr
             ? state->contexts.contains(p.where.context) &&
                   p.where.context->serial() == p.where.context_serial
             : state->streams.contains(p.where.stream));
    if (!stream_alive || !live_comms().contains(p.where.comm)) {
      e = fail(KILN_ERROR_INVALID_RESOURCE_HANDLE,
               "%s: the stream or communicator of a grouped %s was destroyed before the group "
               "ended",
               kApi, p.op);
    } else if (p.body) {
      e = launch(kApi, p.op, p.where.comm, p.where.stream, std::move(p.token), std::move(p.body));
    } else {
      std::vector<SendOp> sends;
      std::vector<RecvOp> recvs;
      std::vector<std::shared_ptr<void>> tokens;
      for (size_t j = i; j < ops.size(); ++j) {
        PendingOp& q = ops[j];
        if (done[j] || q.body || q.where.comm != p.where.comm || q.where.stream != p.where.stream) {
          continue;
        }
        if (q.is_send) {
          sends.push_back(q.send);
        } else {
          recvs.push_back(q.recv);
        }
        tokens.push_back(std::move(q.token));
        done[j] = true;
      }
      e = launch(kApi, "SendRecv", p.where.comm, p.where.stream, tokens.front(),
                 [sends = std::move(sends), recvs = std::move(recvs)](const AlgoContext& ctx) {
                   return group_exchange(ctx, sends, recvs);
                 });
    }
    done[i] = true;
    if (e != KILN_SUCCESS && first == KILN_SUCCESS) first = e;
  }
  ops.clear();
  return first;
}

// Argument checks shared by every collective: runtime, comm, stream.
kilnError setup(const char* api, kilnComm comm, kilnrtStream stream, OpSetup* out) {
  if (rt::runtime_state() == nullptr) return not_initialized(api);
  if (kilnError e = check_comm(comm, api, &out->comm)) return e;
  if (kilnError e = get_stream(api, *out->comm, stream, &out->stream)) return e;
  if (stream == nullptr) {
    // A default stream is not a registered handle; it lives as long as its context.
    out->context = rt::current_context();
    out->context_serial = out->context != nullptr ? out->context->serial() : 0;
  }
  return KILN_SUCCESS;
}

kilnError check_root(const char* api, const Communicator& c, uint32_t root, const char* what) {
  if (root >= static_cast<uint32_t>(c.size())) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %s %u is not a rank of the communicator (size %d)",
                api, what, root, c.size());
  }
  return KILN_SUCCESS;
}

// Creates the communicator objects for transports and registers their handles.
kilnError adopt(const char* api, std::unique_ptr<Transport> transport, int device,
                const CommSettings& settings, kilnComm* out) {
  auto* c = new Communicator(std::move(transport), device, settings);
  live_comms().add(c);
  *out = c;
  return KILN_SUCCESS;
}

// The device of the calling thread's current context; device 0 when there is none.
int current_device() {
  rt::Context* context = rt::current_context();
  return context != nullptr ? context->device().id() : 0;
}

bool force_tcp_from_environment() {
  const char* env = std::getenv("KILN_COMM_TRANSPORT");
  return env != nullptr && std::strcmp(env, "tcp") == 0;
}

kilnError check_transport_env(const char* api) {
  const char* env = std::getenv("KILN_COMM_TRANSPORT");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "tcp") == 0 ||
      std::strcmp(env, "auto") == 0) {
    return KILN_SUCCESS;
  }
  return fail(KILN_ERROR_INVALID_PARAM,
              "%s: KILN_COMM_TRANSPORT='%s' is not 'auto' (shared memory on one host, TCP "
              "between hosts) or 'tcp'",
              api, env);
}

kilnError join_failure(const char* api, const Status& status) {
  kilnError code = status.code() == StatusCode::kInvalidArgument ? KILN_ERROR_INVALID_PARAM
                   : status.code() == StatusCode::kDeadlineExceeded ? KILN_ERROR_COMM_TIMEOUT
                                                                   : KILN_ERROR_COMM_CONNECT;
  return fail(code, "%s: %s", api, status.to_string().c_str());
}

// Joins a multi-process world with the calling thread's device.
kilnError join(const char* api, const JoinOptions& options, const CommSettings& settings,
               kilnComm* comm) {
  int device;
  {
    std::shared_lock guard(rt::runtime_lock());
    if (rt::runtime_state() == nullptr) return not_initialized(api);
    device = current_device();
  }
  // Not under the runtime lock: joining waits for the other processes.
  Expected<std::unique_ptr<Transport>> transport =
      join_world(options, Clock::now() + settings.timeout);
  if (!transport.ok()) return join_failure(api, transport.status());
  return adopt(api, std::move(*transport), device, settings, comm);
}

}  // namespace
}  // namespace kiln::comm

using kiln::Status;
using kiln::comm::AlgoContext;
using kiln::comm::Communicator;
using kiln::comm::OpSetup;
using kiln::comm::Reducer;
using kiln::rt::api_entry;
using kiln::rt::ApiNeeds;
using kiln::rt::fail;
using kiln::rt::RuntimeState;

// ---- Communicators ---------------------------------------------------------------------------

kilnError kilnCommGetRootInfo(kilnRootInfo* rootInfo) {
  static const char* const kApi = "kilnCommGetRootInfo";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    if (rootInfo == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: rootInfo is NULL", kApi);
    kiln::Expected<kiln::comm::RootInfo> root = kiln::comm::start_root("");
    if (!root.ok()) return kiln::comm::join_failure(kApi, root.status());
    Status st = kiln::comm::encode_root_info(
        *root, std::span<char>(rootInfo->internal, KILN_ROOT_INFO_BYTES));
    if (!st.ok()) return fail(KILN_ERROR_INTERNAL_ERROR, "%s: %s", kApi, st.to_string().c_str());
    return KILN_SUCCESS;
  });
}

kilnError kilnCommInitRootInfo(uint32_t nRanks, const kilnRootInfo* rootInfo, uint32_t rank,
                               kilnComm* comm) {
  static const char* const kApi = "kilnCommInitRootInfo";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    if (rootInfo == nullptr || comm == nullptr) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", kApi,
                  rootInfo == nullptr ? "rootInfo" : "comm");
    }
    if (nRanks == 0 || nRanks > (1u << 20)) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: nRanks %u is not in 1..%u", kApi, nRanks,
                  1u << 20);
    }
    if (rank >= nRanks) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: rank %u is not below nRanks %u", kApi, rank,
                  nRanks);
    }
    if (kilnError e = kiln::comm::check_transport_env(kApi)) return e;
    kiln::Expected<kiln::comm::CommSettings> settings =
        kiln::comm::comm_settings_from_environment();
    if (!settings.ok()) return fail(settings.status(), KILN_ERROR_INVALID_PARAM);
    kiln::Expected<kiln::comm::RootInfo> root = kiln::comm::decode_root_info(
        std::span<const char>(rootInfo->internal, KILN_ROOT_INFO_BYTES));
    if (!root.ok()) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: rootInfo: %s", kApi,
                  root.status().to_string().c_str());
    }
    kiln::comm::JoinOptions options;
    options.rank = static_cast<int>(rank);
    options.size = static_cast<int>(nRanks);
    options.root = *root;
    options.force_tcp = kiln::comm::force_tcp_from_environment();
    return kiln::comm::join(kApi, options, *settings, comm);
  });
}

kilnError kilnCommInitFromEnv(kilnComm* comm) {
  static const char* const kApi = "kilnCommInitFromEnv";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    if (comm == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: comm is NULL", kApi);
    if (kilnError e = kiln::comm::check_transport_env(kApi)) return e;
    kiln::Expected<kiln::comm::CommSettings> settings =
        kiln::comm::comm_settings_from_environment();
    if (!settings.ok()) return fail(settings.status(), KILN_ERROR_INVALID_PARAM);
    kiln::Expected<kiln::comm::LaunchEnv> env = kiln::comm::launch_env_from_environment();
    if (!env.ok()) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s", kApi, env.status().to_string().c_str());
    }
    // On rank 0, launch_env_from_environment has started the bootstrap listener at the
    // address (and with the id) every rank derived from the environment.
    kiln::comm::JoinOptions options;
    options.rank = env->rank;
    options.size = env->size;
    options.root = env->root;
    options.force_tcp = env->force_tcp || kiln::comm::force_tcp_from_environment();
    return kiln::comm::join(kApi, options, *settings, comm);
  });
}

kilnError kilnCommInitAll(uint32_t nDevices, int32_t* devices, kilnComm* comms) {
  static const char* const kApi = "kilnCommInitAll";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (devices == nullptr || comms == nullptr) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", kApi,
                  devices == nullptr ? "devices" : "comms");
    }
    if (nDevices == 0 || nDevices > 4096) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: nDevices %u is not in 1..4096", kApi, nDevices);
    }
    for (uint32_t i = 0; i < nDevices; ++i) {
      if (state->devices->device(devices[i]) == nullptr) {
        return fail(KILN_ERROR_INVALID_DEVICE, "%s: devices[%u] = %d is not a device (%d devices)",
                    kApi, i, devices[i], state->devices->count());
      }
    }
    kiln::Expected<kiln::comm::CommSettings> settings =
        kiln::comm::comm_settings_from_environment();
    if (!settings.ok()) return fail(settings.status(), KILN_ERROR_INVALID_PARAM);
    std::vector<std::unique_ptr<kiln::comm::Transport>> world;
    { world = kiln::comm::make_in_process_world(static_cast<int>(nDevices)); }
    if (world.size() != nDevices) {
      return fail(KILN_ERROR_BAD_ALLOC, "%s: could not create the links of %u ranks", kApi,
                  nDevices);
    }
    for (uint32_t i = 0; i < nDevices; ++i) {
      if (kilnError e =
              kiln::comm::adopt(kApi, std::move(world[i]), devices[i], *settings, &comms[i])) {
        for (uint32_t j = 0; j < i; ++j) {
          kiln::comm::live_comms().remove(static_cast<Communicator*>(comms[j]));
          delete static_cast<Communicator*>(comms[j]);
          comms[j] = nullptr;
        }
        return e;
      }
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnCommDestroy(kilnComm comm) {
  static const char* const kApi = "kilnCommDestroy";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    Communicator* c = nullptr;
    if (kilnError e = kiln::comm::check_comm(comm, kApi, &c)) return e;
    kiln::rt::Stream* current = kiln::rt::Stream::current();
    if (current != nullptr) {
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: called from a task of %s; destroying a communicator waits for its queued "
                  "operations, which may be queued behind that task",
                  kApi, current->name().c_str());
    }
    for (const kiln::comm::PendingOp& op : kiln::comm::t_group.ops) {
      if (op.where.comm == c) {
        return fail(KILN_ERROR_INVALID_PARAM,
                    "%s: the communicator has a %s waiting in this thread's open group; call "
                    "kilnGroupEnd first",
                    kApi, op.op);
      }
    }
    if (!kiln::comm::live_comms().remove(c)) {
      return fail(KILN_ERROR_INVALID_RESOURCE_HANDLE, "%s: comm %p was destroyed concurrently",
                  kApi, comm);
    }
    delete c;  // waits for the queued operations
    return KILN_SUCCESS;
  });
}

kilnError kilnCommAbort(kilnComm comm) {
  return api_entry("kilnCommAbort", ApiNeeds::kNothing, [&] {
    Communicator* c = nullptr;
    if (kilnError e = kiln::comm::check_comm(comm, "kilnCommAbort", &c)) return e;
    c->abort();
    return KILN_SUCCESS;
  });
}

kilnError kilnCommGetRankId(kilnComm comm, uint32_t* rank) {
  static const char* const kApi = "kilnCommGetRankId";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    Communicator* c = nullptr;
    if (kilnError e = kiln::comm::check_comm(comm, kApi, &c)) return e;
    if (rank == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: rank is NULL", kApi);
    *rank = static_cast<uint32_t>(c->rank());
    return KILN_SUCCESS;
  });
}

kilnError kilnCommGetRankSize(kilnComm comm, uint32_t* rankSize) {
  static const char* const kApi = "kilnCommGetRankSize";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    Communicator* c = nullptr;
    if (kilnError e = kiln::comm::check_comm(comm, kApi, &c)) return e;
    if (rankSize == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: rankSize is NULL", kApi);
    *rankSize = static_cast<uint32_t>(c->size());
    return KILN_SUCCESS;
  });
}

kilnError kilnCommGetAsyncError(kilnComm comm, kilnError* asyncError) {
  static const char* const kApi = "kilnCommGetAsyncError";
  return api_entry(kApi, ApiNeeds::kNothing, [&] {
    Communicator* c = nullptr;
    if (kilnError e = kiln::comm::check_comm(comm, kApi, &c)) return e;
    if (asyncError == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: asyncError is NULL", kApi);
    *asyncError = c->async_error();
    return KILN_SUCCESS;
  });
}

// ---- Collectives -----------------------------------------------------------------------------

kilnError kilnAllReduce(void* sendBuf, void* recvBuf, uint64_t count, kilnCommDataType dataType,
                        kilnReduceOp op, kilnComm comm, kilnrtStream stream) {
  static const char* const kApi = "kilnAllReduce";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    const Reducer* reducer = nullptr;
    if (kilnError e = kiln::comm::check_reducer(kApi, dataType, op, &reducer)) return e;
    size_t bytes = 0;
    if (kilnError e = kiln::comm::byte_count(kApi, count, reducer->elem_size, 1, "count", &bytes))
      return e;
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, sendBuf, bytes, "sendBuf")) return e;
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, recvBuf, bytes, "recvBuf")) return e;
    if (count == 0) return KILN_SUCCESS;
    return kiln::comm::submit(kApi, "AllReduce", s, [=](const AlgoContext& ctx) {
      return kiln::comm::all_reduce(ctx, sendBuf, recvBuf, count, *reducer);
    });
  });
}

kilnError kilnBroadcast(void* buf, uint64_t count, kilnCommDataType dataType, uint32_t root,
                        kilnComm comm, kilnrtStream stream) {
  static const char* const kApi = "kilnBroadcast";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    if (kilnError e = kiln::comm::check_dtype(kApi, dataType, "dataType")) return e;
    if (kilnError e = kiln::comm::check_root(kApi, *s.comm, root, "root")) return e;
    size_t bytes = 0;
    if (kilnError e = kiln::comm::byte_count(kApi, count, kiln::comm::comm_dtype_size(dataType), 1,
                                             "count", &bytes)) {
      return e;
    }
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, buf, bytes, "buf")) return e;
    if (count == 0) return KILN_SUCCESS;
    return kiln::comm::submit(kApi, "Broadcast", s, [=](const AlgoContext& ctx) {
      return kiln::comm::broadcast(ctx, buf, bytes, static_cast<int>(root));
    });
  });
}

kilnError kilnReduce(void* sendBuf, void* recvBuf, uint64_t count, kilnCommDataType dataType,
                     kilnReduceOp op, uint32_t root, kilnComm comm, kilnrtStream stream) {
  static const char* const kApi = "kilnReduce";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    const Reducer* reducer = nullptr;
    if (kilnError e = kiln::comm::check_reducer(kApi, dataType, op, &reducer)) return e;
    if (kilnError e = kiln::comm::check_root(kApi, *s.comm, root, "root")) return e;
    size_t bytes = 0;
    if (kilnError e = kiln::comm::byte_count(kApi, count, reducer->elem_size, 1, "count", &bytes))
      return e;
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, sendBuf, bytes, "sendBuf")) return e;
    if (static_cast<uint32_t>(s.comm->rank()) == root) {
      if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, recvBuf, bytes, "recvBuf"))
        return e;
    }
    if (count == 0) return KILN_SUCCESS;
    return kiln::comm::submit(kApi, "Reduce", s, [=](const AlgoContext& ctx) {
      return kiln::comm::reduce(ctx, sendBuf, recvBuf, count, *reducer, static_cast<int>(root));
    });
  });
}

kilnError kilnAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount,
                        kilnCommDataType dataType, kilnComm comm, kilnrtStream stream) {
  static const char* const kApi = "kilnAllGather";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    if (kilnError e = kiln::comm::check_dtype(kApi, dataType, "dataType")) return e;
    const size_t elem = kiln::comm::comm_dtype_size(dataType);
    size_t bytes = 0, total = 0;
    if (kilnError e = kiln::comm::byte_count(
            kApi, sendCount, elem, static_cast<uint64_t>(s.comm->size()), "sendCount", &total)) {
      return e;
    }
    bytes = total / static_cast<size_t>(s.comm->size());
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, sendBuf, bytes, "sendBuf")) return e;
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, recvBuf, total, "recvBuf")) return e;
    if (sendCount == 0) return KILN_SUCCESS;
    return kiln::comm::submit(kApi, "AllGather", s, [=](const AlgoContext& ctx) {
      return kiln::comm::all_gather(ctx, sendBuf, recvBuf, bytes);
    });
  });
}

kilnError kilnReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount,
                            kilnCommDataType dataType, kilnReduceOp op, kilnComm comm,
                            kilnrtStream stream) {
  static const char* const kApi = "kilnReduceScatter";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    const Reducer* reducer = nullptr;
    if (kilnError e = kiln::comm::check_reducer(kApi, dataType, op, &reducer)) return e;
    size_t total = 0;
    if (kilnError e =
            kiln::comm::byte_count(kApi, recvCount, reducer->elem_size,
                                   static_cast<uint64_t>(s.comm->size()), "recvCount", &total)) {
      return e;
    }
    const size_t bytes = total / static_cast<size_t>(s.comm->size());
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, sendBuf, total, "sendBuf")) return e;
    if (kilnError e = kiln::comm::check_buffer(kApi, *s.comm, recvBuf, bytes, "recvBuf")) return e;
    if (recvCount == 0) return KILN_SUCCESS;
    return kiln::comm::submit(kApi, "ReduceScatter", s, [=](const AlgoContext& ctx) {
      return kiln::comm::reduce_scatter(ctx, sendBuf, recvBuf, recvCount, *reducer);
    });
  });
}

namespace kiln::comm {
namespace {

// Byte counts and offsets of an AlltoAll(V), per rank: send bytes, send offsets, receive
// bytes, receive offsets.
struct AllToAllLayout {
  std::vector<uint64_t> v;  // 4 * n
};

kilnError all_to_all_common(const char* api, const OpSetup& s, const void* sendBuf,
                            const uint64_t* send_counts, const uint64_t* sdispls,
                            kilnCommDataType sendType, const void* recvBuf,
                            const uint64_t* recv_counts, const uint64_t* rdispls,
                            kilnCommDataType recvType) {
  if (kilnError e = kiln::comm::check_dtype(api, sendType, "sendType")) return e;
  if (kilnError e = kiln::comm::check_dtype(api, recvType, "recvType")) return e;
  if (sendType != recvType) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: sendType %s differs from recvType %s", api,
                kiln::comm::comm_dtype_name(sendType), kiln::comm::comm_dtype_name(recvType));
  }
  const int n = s.comm->size();
  const size_t elem = kiln::comm::comm_dtype_size(sendType);
  const uint64_t limit = std::numeric_limits<size_t>::max() / 4 / elem;
  auto layout = std::make_shared<AllToAllLayout>();
  layout->v.resize(4 * static_cast<size_t>(n));
  uint64_t* sb = layout->v.data();
  uint64_t* so = sb + n;
  uint64_t* rb = so + n;
  uint64_t* ro = rb + n;
  size_t send_extent = 0, recv_extent = 0, moved = 0;
  for (int r = 0; r < n; ++r) {
    if (send_counts[r] > limit || sdispls[r] > limit || recv_counts[r] > limit ||
        rdispls[r] > limit) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: a count or displacement for rank %d is too large",
                  api, r);
    }
    sb[r] = send_counts[r] * elem;
    so[r] = sdispls[r] * elem;
    rb[r] = recv_counts[r] * elem;
    ro[r] = rdispls[r] * elem;
    if (sb[r] > 0 && so[r] + sb[r] > send_extent) send_extent = so[r] + sb[r];
    if (rb[r] > 0 && ro[r] + rb[r] > recv_extent) recv_extent = ro[r] + rb[r];
    moved += sb[r] + rb[r];
  }
  const int me = s.comm->rank();
  if (sb[me] != rb[me]) {
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: rank %d sends itself %llu elements but expects %llu from itself", api, me,
                static_cast<unsigned long long>(send_counts[me]),
                static_cast<unsigned long long>(recv_counts[me]));
  }
  if (kilnError e = kiln::comm::check_buffer(api, *s.comm, sendBuf, send_extent, "sendBuf"))
    return e;
  if (kilnError e = kiln::comm::check_buffer(api, *s.comm, recvBuf, recv_extent, "recvBuf"))
    return e;
  if (moved == 0) return KILN_SUCCESS;
  void* recv = const_cast<void*>(recvBuf);
  return kiln::comm::submit(api, "AlltoAll", s, [=](const AlgoContext& ctx) {
    const uint64_t* v = layout->v.data();
    return kiln::comm::all_to_all_v(ctx, sendBuf, v, v + n, recv, v + 2 * n, v + 3 * n);
  });
}

}  // namespace
}  // namespace kiln::comm

kilnError kilnAlltoAll(const void* sendBuf, uint64_t sendCount, kilnCommDataType sendType,
                       const void* recvBuf, uint64_t recvCount, kilnCommDataType recvType,
                       kilnComm comm, kilnrtStream stream) {
  static const char* const kApi = "kilnAlltoAll";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    if (sendCount != recvCount) {
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: sendCount %llu differs from recvCount %llu (every block has one size)", kApi,
                  static_cast<unsigned long long>(sendCount),
                  static_cast<unsigned long long>(recvCount));
    }
    const size_t n = static_cast<size_t>(s.comm->size());
    const uint64_t limit = std::numeric_limits<uint32_t>::max();
    if (sendCount > limit * 1024 / n) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: sendCount %llu is too large", kApi,
                  static_cast<unsigned long long>(sendCount));
    }
    std::vector<uint64_t> counts(n, sendCount), displs(n);
    for (size_t r = 0; r < n; ++r) displs[r] = r * sendCount;
    return kiln::comm::all_to_all_common(kApi, s, sendBuf, counts.data(), displs.data(), sendType,
                                         recvBuf, counts.data(), displs.data(), recvType);
  });
}

kilnError kilnAlltoAllV(const void* sendBuf, const void* sendCounts, const void* sdispls,
                        kilnCommDataType sendType, const void* recvBuf, const void* recvCounts,
                        const void* rdispls, kilnCommDataType recvType, kilnComm comm,
                        kilnrtStream stream) {
  static const char* const kApi = "kilnAlltoAllV";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    if (sendCounts == nullptr || sdispls == nullptr || recvCounts == nullptr ||
        rdispls == nullptr) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", kApi,
                  sendCounts == nullptr   ? "sendCounts"
                  : sdispls == nullptr    ? "sdispls"
                  : recvCounts == nullptr ? "recvCounts"
                                          : "rdispls");
    }
    return kiln::comm::all_to_all_common(kApi, s, sendBuf, static_cast<const uint64_t*>(sendCounts),
                                         static_cast<const uint64_t*>(sdispls), sendType, recvBuf,
                                         static_cast<const uint64_t*>(recvCounts),
                                         static_cast<const uint64_t*>(rdispls), recvType);
  });
}

namespace kiln::comm {
namespace {

kilnError point_to_point(const char* api, bool is_send, void* buf, uint64_t count,
                         kilnCommDataType dataType, uint32_t peer, kilnComm comm,
                         kilnrtStream stream) {
  std::shared_lock guard(kiln::rt::runtime_lock());
  OpSetup s;
  if (kilnError e = kiln::comm::setup(api, comm, stream, &s)) return e;
  if (kilnError e = kiln::comm::check_dtype(api, dataType, "dataType")) return e;
  if (kilnError e = kiln::comm::check_root(api, *s.comm, peer, is_send ? "destRank" : "srcRank")) {
    return e;
  }
  size_t bytes = 0;
  if (kilnError e = kiln::comm::byte_count(api, count, kiln::comm::comm_dtype_size(dataType), 1,
                                           "count", &bytes)) {
    return e;
  }
  if (kilnError e =
          kiln::comm::check_buffer(api, *s.comm, buf, bytes, is_send ? "sendBuf" : "recvBuf")) {
    return e;
  }
  const bool grouped = kiln::comm::t_group.depth > 0;
  if (static_cast<int>(peer) == s.comm->rank() && !grouped) {
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: %s %u is this rank; a rank sends to itself only inside kilnGroupStart/End "
                "together with the matching %s",
                api, is_send ? "destRank" : "srcRank", peer, is_send ? "kilnRecv" : "kilnSend");
  }
  if (count == 0) return KILN_SUCCESS;
  const int p = static_cast<int>(peer);
  if (grouped) {
    kiln::comm::PendingOp op{s, s.comm->begin_operation(), is_send ? "Send" : "Recv", {}};
    op.is_send = is_send;
    op.send = kiln::comm::SendOp{p, buf, bytes};
    op.recv = kiln::comm::RecvOp{p, buf, bytes, nullptr};
    kiln::comm::t_group.ops.push_back(std::move(op));
    return KILN_SUCCESS;
  }
  if (is_send) {
    return kiln::comm::submit(api, "Send", s, [=](const AlgoContext& ctx) {
      kiln::comm::SendOp op{p, buf, bytes};
      return kiln::comm::group_exchange(ctx, {&op, 1}, {});
    });
  }
  return kiln::comm::submit(api, "Recv", s, [=](const AlgoContext& ctx) {
    kiln::comm::RecvOp op{p, buf, bytes, nullptr};
    return kiln::comm::group_exchange(ctx, {}, {&op, 1});
  });
}

}  // namespace
}  // namespace kiln::comm

kilnError kilnSend(void* sendBuf, uint64_t count, kilnCommDataType dataType, uint32_t destRank,
                   kilnComm comm, kilnrtStream stream) {
  return api_entry("kilnSend", ApiNeeds::kNothing, [&] {
    return kiln::comm::point_to_point("kilnSend", true, sendBuf, count, dataType, destRank, comm,
                                      stream);
  });
}

kilnError kilnRecv(void* recvBuf, uint64_t count, kilnCommDataType dataType, uint32_t srcRank,
                   kilnComm comm, kilnrtStream stream) {
  return api_entry("kilnRecv", ApiNeeds::kNothing, [&] {
    return kiln::comm::point_to_point("kilnRecv", false, recvBuf, count, dataType, srcRank, comm,
                                      stream);
  });
}

kilnError kilnBarrier(kilnComm comm, kilnrtStream stream) {
  static const char* const kApi = "kilnBarrier";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    OpSetup s;
    if (kilnError e = kiln::comm::setup(kApi, comm, stream, &s)) return e;
    return kiln::comm::submit(kApi, "Barrier", s,
                              [](const AlgoContext& ctx) { return kiln::comm::barrier(ctx); });
  });
}

kilnError kilnGroupStart(void) {
  return api_entry("kilnGroupStart", ApiNeeds::kNothing, [&] {
    ++kiln::comm::t_group.depth;
    return KILN_SUCCESS;
  });
}

kilnError kilnGroupEnd(void) {
  return api_entry("kilnGroupEnd", ApiNeeds::kNothing, [&] {
    kiln::comm::GroupState& group = kiln::comm::t_group;
    if (group.depth == 0) {
      return fail(KILN_ERROR_INVALID_PARAM,
                  "kilnGroupEnd: no kilnGroupStart is open on this thread");
    }
    if (--group.depth > 0) return KILN_SUCCESS;
    // The group closes with or without kilnInit; without it launch_group fails each operation.
    std::shared_lock guard(kiln::rt::runtime_lock());
    return kiln::comm::launch_group(group.ops);
  });
}
