// The collectives' entry points: pick an algorithm by message size, rank count and
// topology (or take the one KILN_COMM_ALGO forced, where it applies), then run it.
//
// Choices: AllReduce over several hosts with several ranks on a host is hierarchical;
// otherwise one-shot up to kOneShotMaxBytes among up to kOneShotMaxRanks ranks (one round),
// halving-doubling up to kHalvingDoublingMaxBytes (few steps; latency-bound sizes) and the
// pipelined ring above (bandwidth-optimal, every link busy). Broadcast and
// Reduce use binomial trees up to kTreeMaxBytes and the chain / ring above. AllGather and
// ReduceScatter use the ring, AlltoAll pairwise exchange.
#include <cstring>

#include "comm/algorithms.h"

namespace kiln::comm {
namespace {

constexpr size_t kHalvingDoublingMaxBytes = 512 << 10;
// One-shot up to this size and rank count: one round of n-1 messages per rank.
constexpr size_t kOneShotMaxBytes = 1 << 10;
constexpr int kOneShotMaxRanks = 8;
constexpr size_t kTreeMaxBytes = 64 << 10;

// Several hosts, and at least one with more than one rank: the case hierarchical helps.
bool multi_host(const Group& group) {
  const int hosts = group.host_count();
  return hosts > 1 && hosts < group.size();
}

}  // namespace

Algo choose_all_reduce(const AlgoContext& ctx, size_t bytes) {
  switch (ctx.algo) {
    case Algo::kRing:
    case Algo::kHalvingDoubling:
    case Algo::kTree:
    case Algo::kHierarchical:
    case Algo::kOneShot:
      return ctx.algo;
    default:
      break;
  }
  if (ctx.group->size() > 2 && multi_host(*ctx.group)) return Algo::kHierarchical;
  if (bytes <= kOneShotMaxBytes && ctx.group->size() <= kOneShotMaxRanks) return Algo::kOneShot;
  return bytes <= kHalvingDoublingMaxBytes ? Algo::kHalvingDoubling : Algo::kRing;
}

Algo choose_broadcast(const AlgoContext& ctx, size_t bytes) {
  if (ctx.algo == Algo::kRing || ctx.algo == Algo::kTree) return ctx.algo;
  return bytes <= kTreeMaxBytes || ctx.group->size() <= 2 ? Algo::kTree : Algo::kRing;
}

Algo choose_reduce(const AlgoContext& ctx, size_t bytes) {
  if (ctx.algo == Algo::kRing || ctx.algo == Algo::kTree) return ctx.algo;
  return bytes <= kTreeMaxBytes || ctx.group->size() <= 2 ? Algo::kTree : Algo::kRing;
}

Status all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                  const Reducer& reducer) {
  const size_t bytes = count * reducer.elem_size;
  if (ctx.group->size() == 1 || bytes == 0) {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
    return Status();
  }
  switch (choose_all_reduce(ctx, bytes)) {
    case Algo::kRing: return ring_all_reduce(ctx, send, recv, count, reducer);
    case Algo::kTree: return tree_all_reduce(ctx, send, recv, count, reducer);
    case Algo::kHierarchical: return hierarchical_all_reduce(ctx, send, recv, count, reducer);
    case Algo::kOneShot: return oneshot_all_reduce(ctx, send, recv, count, reducer);
    default: return halving_doubling_all_reduce(ctx, send, recv, count, reducer);
  }
}

Status broadcast(const AlgoContext& ctx, void* buf, size_t bytes, int root) {
  if (choose_broadcast(ctx, bytes) == Algo::kRing) return ring_broadcast(ctx, buf, bytes, root);
  return tree_broadcast(ctx, buf, bytes, root);
}

Status reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
              const Reducer& reducer, int root) {
  if (choose_reduce(ctx, count * reducer.elem_size) == Algo::kRing) {
    return ring_reduce(ctx, send, recv, count, reducer, root);
  }
  return tree_reduce(ctx, send, recv, count, reducer, root);
}

Status all_gather(const AlgoContext& ctx, const void* send, void* recv, size_t bytes_per_rank) {
  return ring_all_gather(ctx, send, recv, bytes_per_rank);
}

Status reduce_scatter(const AlgoContext& ctx, const void* send, void* recv, size_t recv_count,
                      const Reducer& reducer) {
  return ring_reduce_scatter(ctx, send, recv, recv_count, reducer);
}

Status all_to_all_v(const AlgoContext& ctx, const void* send, const uint64_t* send_bytes,
                    const uint64_t* send_offsets, void* recv, const uint64_t* recv_bytes,
                    const uint64_t* recv_offsets) {
  return pairwise_all_to_all_v(ctx, send, send_bytes, send_offsets, recv, recv_bytes,
                               recv_offsets);
}

Status barrier(const AlgoContext& ctx) { return dissemination_barrier(ctx); }

}  // namespace kiln::comm
