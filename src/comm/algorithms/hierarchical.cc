// Hierarchical AllReduce for ranks on several hosts: reduce within each host to its first
// rank (the host's leader), AllReduce among the leaders, broadcast within each host. Only
// one rank per host uses the slower links between hosts, and those carry the message once
// per host instead of once per rank. Hosts are told apart by PeerInfo::host_id.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace kiln::comm {

Status hierarchical_all_reduce(const AlgoContext& ctx, const void* send, void* recv,
                               size_t count, const Reducer& reducer) {
  const Group& group = *ctx.group;
  const int n = group.size(), me = group.me();
  const size_t bytes = count * reducer.elem_size;
  if (n == 1 || bytes == 0) {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
    return Status();
  }
  const std::vector<PeerInfo>& peers = group.transport().peers();
  const uint64_t my_host = peers[group.rank_of(me)].host_id;
  std::vector<int> local, leaders;  // transport ranks
  for (int i = 0; i < n; ++i) {
    const int rank = group.rank_of(i);
    if (peers[rank].host_id == my_host) local.push_back(rank);
    bool first_of_host = true;
    for (int j = 0; j < i && first_of_host; ++j) {
      first_of_host = peers[group.rank_of(j)].host_id != peers[rank].host_id;
    }
    if (first_of_host) leaders.push_back(rank);
  }
  const bool leader = local.front() == group.rank_of(me);
  // The sub-steps choose their own algorithms (a forced one applies to the whole).
  Group local_group(group.transport(), local);
  AlgoContext local_ctx{&local_group, ctx.deadline, ctx.scratch, Algo::kAuto};
  if (Status st = reduce(local_ctx, send, recv, count, reducer, 0); !st.ok()) return st;
  if (leader && leaders.size() > 1) {
    Group leader_group(group.transport(), leaders);
    AlgoContext leader_ctx{&leader_group, ctx.deadline, ctx.scratch, Algo::kAuto};
    if (Status st = all_reduce(leader_ctx, recv, recv, count, reducer); !st.ok()) return st;
  }
  return broadcast(local_ctx, recv, bytes, 0);
}

}  // namespace kiln::comm
