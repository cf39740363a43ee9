// The collective algorithms, written against Transport::exchange only: ring (chunked and
// pipelined), recursive halving-doubling, one-shot, binomial tree, pipelined chain broadcast,
// pairwise exchange, dissemination barrier, and hierarchical (per host, then across hosts).
// The entry points at the bottom choose one by message size, rank count and topology
// unless KILN_COMM_ALGO forced one; the family functions are exposed for tests and
// benchmarks. Every algorithm gives every rank bit-identical results: reductions happen
// once per element and the results are then copied, so floating-point order is the same
// on all ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "comm/transport.h"
#include "core/status.h"

namespace kiln::comm {

enum class Algo { kAuto, kRing, kHalvingDoubling, kTree, kPairwise, kHierarchical, kOneShot };

// KILN_COMM_ALGO's names: "ring", "halving_doubling", "tree", "pairwise", "hierarchical",
// "oneshot"; "" and "auto" are kAuto. False for anything else.
bool algo_from_name(std::string_view name, Algo* out);
const char* algo_name(Algo algo);

// Buffers an algorithm needs besides the caller's (partial sums, staging), kept by the
// communicator between operations so a steady run of operations allocates nothing.
// Slots are independent buffers; an algorithm uses them only while it runs.
class Scratch {
 public:
  static constexpr int kSlots = 3;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  // At least `bytes` bytes, 64-byte aligned; null when memory ran out.
  void* get(int slot, size_t bytes);

 private:
  void* buf_[kSlots] = {};
  size_t cap_[kSlots] = {};
};

// The ranks an algorithm runs among: all of the transport's, or a subset (the ranks of one
// host, the host leaders). Algorithms name peers by index in the group.
class Group {
 public:
  explicit Group(Transport& transport);
  // `ranks` are transport ranks and include the transport's own rank.
  Group(Transport& transport, std::vector<int> ranks);
  Transport& transport() const { return *transport_; }
  int size() const { return size_; }
  int me() const { return me_; }
  int rank_of(int index) const { return ranks_.empty() ? index : ranks_[index]; }
  // Distinct hosts (PeerInfo::host_id) among the group's ranks, counted once here.
  int host_count() const { return hosts_; }

 private:
  void count_hosts();

  Transport* transport_;
  std::vector<int> ranks_;  // empty: every rank, index == rank
  int size_ = 1;
  int me_ = 0;
  int hosts_ = 1;
};

// What one operation runs with.
struct AlgoContext {
  const Group* group;
  Deadline deadline;
  Scratch* scratch;
  Algo algo = Algo::kAuto;  // forced algorithm (kAuto: chosen per operation)
};

// One exchange within the group: peers (and RecvOp::forward) are group indices, ops of 0
// bytes are dropped.
Status group_exchange(const AlgoContext& ctx, std::span<const SendOp> sends,
                      std::span<const RecvOp> recvs);

// Bytes per piece of the ReduceScatter ring and the Broadcast chain (KILN_COMM_CHUNK_BYTES, default 512 KiB,
// rounded to a multiple of 64), read once.
size_t pipeline_chunk_bytes();

// ---- Families (buffers may alias where the entry points below allow it) ---------------

// AllReduce. recv holds the result; send == recv is in-place.
Status ring_all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                       const Reducer& reducer);
// Recursive doubling (whole vector per step) below `doubling_max_bytes`, recursive halving
// reduce-scatter + doubling all-gather above; non-power-of-two sizes fold the extra ranks
// in first and hand them the result at the end.
Status halving_doubling_all_reduce(const AlgoContext& ctx, const void* send, void* recv,
                                   size_t count, const Reducer& reducer);
// Every rank sends its input to every other and reduces all n in rank order (one round).
Status oneshot_all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                          const Reducer& reducer);
// Binomial-tree reduce to index 0, then binomial-tree broadcast.
Status tree_all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                       const Reducer& reducer);
// Reduce within each host (PeerInfo::host_id) to its first rank, AllReduce among those
// leaders, broadcast within each host.
Status hierarchical_all_reduce(const AlgoContext& ctx, const void* send, void* recv,
                               size_t count, const Reducer& reducer);

// Broadcast of `bytes` from group index `root`.
Status tree_broadcast(const AlgoContext& ctx, void* buf, size_t bytes, int root);
Status ring_broadcast(const AlgoContext& ctx, void* buf, size_t bytes, int root);

// Reduce to `root`; recv is written on root only.
Status tree_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                   const Reducer& reducer, int root);
// Ring reduce-scatter, then every rank sends its reduced block to the root.
Status ring_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                   const Reducer& reducer, int root);

// recv holds size * bytes_per_rank bytes, index r's at r * bytes_per_rank.
Status ring_all_gather(const AlgoContext& ctx, const void* send, void* recv,
                       size_t bytes_per_rank);
// send holds size * recv_count elements; index r gets the reduction of block r.
Status ring_reduce_scatter(const AlgoContext& ctx, const void* send, void* recv,
                           size_t recv_count, const Reducer& reducer);
// Byte counts and offsets per group index. send == recv is allowed (staged).
Status pairwise_all_to_all_v(const AlgoContext& ctx, const void* send,
                             const uint64_t* send_bytes, const uint64_t* send_offsets,
                             void* recv, const uint64_t* recv_bytes,
                             const uint64_t* recv_offsets);
Status dissemination_barrier(const AlgoContext& ctx);

// ---- Entry points: choose the algorithm ------------------------------------------------

// The algorithm all_reduce() runs for this size (the forced one when applicable).
Algo choose_all_reduce(const AlgoContext& ctx, size_t bytes);
Algo choose_broadcast(const AlgoContext& ctx, size_t bytes);
Algo choose_reduce(const AlgoContext& ctx, size_t bytes);

Status all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                  const Reducer& reducer);
Status broadcast(const AlgoContext& ctx, void* buf, size_t bytes, int root);
Status reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
              const Reducer& reducer, int root);
Status all_gather(const AlgoContext& ctx, const void* send, void* recv, size_t bytes_per_rank);
Status reduce_scatter(const AlgoContext& ctx, const void* send, void* recv, size_t recv_count,
                      const Reducer& reducer);
Status all_to_all_v(const AlgoContext& ctx, const void* send, const uint64_t* send_bytes,
                    const uint64_t* send_offsets, void* recv, const uint64_t* recv_bytes,
                    const uint64_t* recv_offsets);
Status barrier(const AlgoContext& ctx);

// ---- Helpers shared by the family files --------------------------------------------------

// `count` elements split into `n` blocks, the first count % n one element longer.
struct Blocks {
  size_t count;
  size_t elem;
  int n;
  size_t offset(int b) const {  // bytes
    size_t q = count / n, r = count % n, ub = static_cast<size_t>(b);
    return (ub * q + (ub < r ? ub : r)) * elem;
  }
  size_t bytes(int b) const {
    return (count / n + (static_cast<size_t>(b) < count % n ? 1 : 0)) * elem;
  }
};

// Piece k of `pieces` of a range of `bytes` (a multiple of `elem`), split on elements.
inline void piece_of(size_t bytes, size_t elem, size_t k, size_t pieces, size_t* offset,
                     size_t* length) {
  size_t elems = bytes / elem;
  size_t begin = elems * k / pieces, end = elems * (k + 1) / pieces;
  *offset = begin * elem;
  *length = (end - begin) * elem;
}

// Pieces a pipeline splits `bytes` into (at least 1).
inline size_t pipeline_pieces(size_t bytes) {
  size_t chunk = pipeline_chunk_bytes();
  return bytes <= chunk ? 1 : (bytes + chunk - 1) / chunk;
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace kiln::comm
