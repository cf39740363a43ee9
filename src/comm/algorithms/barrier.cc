// Dissemination barrier (Hensgen, Finkel and Manber): in round k every rank signals
// me + 2^k and waits for me - 2^k; after ceil(log2 n) rounds each rank has heard,
// directly or through others, from every rank.
#include "comm/algorithms.h"

namespace kiln::comm {

Status dissemination_barrier(const AlgoContext& ctx) {
  const int n = ctx.group->size(), me = ctx.group->me();
  for (int d = 1; d < n; d *= 2) {
    const char token = 1;
    char got = 0;
    // A whole one-byte message each way: a small message (one mailbox line on ring links).
    SendOp so{mod(me + d, n), &token, 1, /*small=*/true};
    RecvOp ro{mod(me - d, n), &got, 1};
    ro.small = true;
    if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
  }
  return Status();
}

}  // namespace kiln::comm
