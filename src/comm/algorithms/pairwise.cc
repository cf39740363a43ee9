// Pairwise-exchange AlltoAll(V): at step s = 1..n-1 every rank sends its block for
// me + s and receives the block of me - s, so each step is a permutation and every link
// carries one message at a time; the rank's own block is a local copy.
#include <cstring>

#include "comm/algorithms.h"

namespace kiln::comm {

Status pairwise_all_to_all_v(const AlgoContext& ctx, const void* send,
                             const uint64_t* send_bytes, const uint64_t* send_offsets,
                             void* recv, const uint64_t* recv_bytes,
                             const uint64_t* recv_offsets) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (send == recv) {
    // In place: blocks received early would overwrite blocks not yet sent, so stage the
    // input.
    size_t extent = 0;
    for (int r = 0; r < n; ++r) {
      if (send_bytes[r] > 0 && send_offsets[r] + send_bytes[r] > extent) {
        extent = send_offsets[r] + send_bytes[r];
      }
    }
    char* staged = static_cast<char*>(ctx.scratch->get(0, extent));
    if (extent > 0 && staged == nullptr) {
      return resource_exhausted("%s: out of memory for %zu bytes of staged input",
                                ctx.deadline.op, extent);
    }
    if (extent > 0) std::memcpy(staged, in, extent);
    in = staged;
  }
  const size_t own = send_bytes[me] < recv_bytes[me] ? send_bytes[me] : recv_bytes[me];
  if (own > 0) std::memmove(out + recv_offsets[me], in + send_offsets[me], own);
  for (int s = 1; s < n; ++s) {
    const int to = mod(me + s, n), from = mod(me - s, n);
    SendOp so{to, in + send_offsets[to], send_bytes[to]};
    RecvOp ro{from, out + recv_offsets[from], recv_bytes[from], nullptr};
    if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
  }
  return Status();
}

}  // namespace kiln::comm
