// The boundary between the collective algorithms and the ways bytes travel between ranks.
// A Transport is one rank's view of its peers: per ordered pair of ranks a FIFO byte
// stream (shared memory on one host, TCP between hosts, memory in one process), driven by
// exchange(), which progresses a step's sends and receives together so that a ring step
// (send to the next rank while receiving from the previous one) never deadlocks on full
// buffers. The algorithms (algorithms.h) know nothing of the medium.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::comm {

using Clock = std::chrono::steady_clock;

// Combines received bytes into an accumulator: acc[i] = acc[i] (op) in[i] for the
// elements of one data type; apply_to writes out[i] = x[i] (op) in[i] to a third buffer
// (out must not overlap x or in). `bytes` is a multiple of elem_size.
struct Reducer {
  size_t elem_size = 1;
  void (*apply)(void* acc, const void* in, size_t bytes) = nullptr;
  void (*apply_to)(void* out, const void* x, const void* in, size_t bytes) = nullptr;
};

// The most bytes of a `small` send or receive (see SendOp).
constexpr size_t kSmallMessageBytes = 48;

// Sends `bytes` bytes of `data` to the peer.
//
// `small`: the op is one whole message of at most kSmallMessageBytes that the peer receives
// with a RecvOp marked small of the same size (both sides decide alike, by the size). Links
// with a mailbox beside their byte stream (ring links: shared memory, in process) carry it
// there, one cache line written and read per message instead of the ring's data and counter
// lines: where ranks outnumber cores each cross-core miss is paid in a rank's time slice, and
// an 8-byte AllReduce is made of little else. Other links send it in the byte stream. Small
// messages keep their order among themselves; a receive marked small takes the next small
// message of that peer, whatever its byte stream holds.
struct SendOp {
  int peer;
  const void* data;
  size_t bytes;
  bool small = false;
};

// Receives the next `bytes` bytes the peer sent into `data`; with a reducer, combines them
// into `data` instead of overwriting it (the transport hands the reducer whole elements,
// straight from its buffers where it can: one pass over the data, no staging copy).
//
// `operand` (with a reducer): data = operand (op) received, so an out-of-place reduction
// needs no copy of its input first; null or equal to data: data (op)= received.
//
// `forward` >= 0: the bytes written to `data` are also sent on to that peer, piece by piece
// as they land (while still in cache), the way a ring passes a block on: a receive-reduce-
// send in one pass. In that peer's stream the forwarded bytes follow every SendOp of the
// exchange to it and the bytes forwarded by earlier RecvOps.
//
// `small`: see SendOp; a small receive is a plain copy (no reducer, operand or forward).
struct RecvOp {
  int peer;
  void* data;
  size_t bytes;
  const Reducer* reduce = nullptr;
  const void* operand = nullptr;
  int forward = -1;
  bool small = false;
};

// Where an exchange gives up, and what to call the operation in the error.
struct Deadline {
  Clock::time_point at;
  const char* op = "";  // "AllReduce", "Broadcast", ... names the operation in errors
};

// What the bootstrap learned about each rank.
struct PeerInfo {
  int rank = 0;
  std::string host;      // host name, for messages
  uint64_t host_id = 0;  // equal for ranks on the same host (topology)
  int64_t pid = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's info, indexed by rank.
  virtual const std::vector<PeerInfo>& peers() const = 0;

  // Progresses every send and receive until all are complete. Several ops may name the
  // same peer (they run in the order given). Message boundaries are not kept: a receive of
  // n bytes takes the next n bytes of the peer's stream. Errors (Status codes):
  //   deadline_exceeded "<op>: rank R (host H) did not answer within T s ..."
  //   unavailable       "<op>: rank R (host H, pid P) exited / closed its connection ..."
  //   cancelled         "<op>: communicator aborted"
  // After an error the transport is broken: later exchanges fail at once with the same
  // error (the byte streams are out of step).
  virtual Status exchange(std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                          const Deadline& deadline) = 0;

  // Called by a rank as it starts running a collective (on the thread that runs it): a rank
  // that times out waiting can then name a rank that never started the collective it waits
  // in (one hung elsewhere) rather than the rank it waited on.
  virtual void enter_collective() {}

  // Makes every exchange in progress, and every later one, fail with `cancelled` promptly.
  // Thread-safe; callable from any thread while an exchange runs.
  virtual void abort() = 0;
};

// Ranks 0..n-1 of one process (kilnCommInitAll): transports[i] is rank i's. Exchanges of
// different ranks run on different threads; bytes go through memory of the process.
std::vector<std::unique_ptr<Transport>> make_in_process_world(int n);

// What kilnRootInfo carries: where rank 0's bootstrap listener is, and an id that keeps
// concurrent worlds (and stale shared-memory names) apart.
struct RootInfo {
  std::string addr;  // "host:port"
  uint64_t unique_id = 0;
};
// Rank 0's side of the bootstrap, in the process that will be rank 0: starts its listener
// (kept until that world has joined). `bind` is "host:port", or "" for any interface and an
// ephemeral port (the address then names this host's address other hosts can reach).
Expected<RootInfo> start_root(const std::string& bind);
// The fixed-size blob of kilnRootInfo (KILN_ROOT_INFO_BYTES); decoding rejects garbage
// (magic, version, lengths) with invalid_argument.
Status encode_root_info(const RootInfo& info, std::span<char> blob);
Expected<RootInfo> decode_root_info(std::span<const char> blob);

// A process launched by `mpirun` (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) or by another
// launcher (KILN_RANK, KILN_WORLD_SIZE, KILN_ROOT_ADDR). failed_precondition naming the
// missing variables when neither is set.
struct LaunchEnv {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  RootInfo root;  // agreed by every rank of the launch
  bool force_tcp = false;
};
Expected<LaunchEnv> launch_env_from_environment();

// How a rank of a multi-process world joins: bootstrap through rank 0's listener, then a
// link per peer: shared memory when the peer is on the same host (unless `force_tcp`),
// TCP otherwise. Blocks until every rank has joined or `deadline` passes.
struct JoinOptions {
  int rank = 0;
  int size = 1;
  RootInfo root;           // rank 0 must have called start_root() for it in this process
  bool force_tcp = false;  // KILN_COMM_TRANSPORT=tcp
  // The job's secret every connection of the world proves it knows (bootstrap.h,
  // "Authentication"); empty: KILN_COMM_SECRET, else a key derived from root.unique_id.
  std::string secret;
};
Expected<std::unique_ptr<Transport>> join_world(const JoinOptions& options, Clock::time_point deadline);

}  // namespace kiln::comm
