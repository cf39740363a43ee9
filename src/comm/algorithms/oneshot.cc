// One-shot AllReduce, for the smallest messages: every rank sends its whole input to every
// other rank and reduces the n inputs itself, in rank order. One round of messages instead
// of halving-doubling's log2 n rounds; each rank moves (n-1) x the data, which is nothing
// at a few hundred bytes. Where ranks outnumber cores (4 processes on 2 cores), a round
// is a context switch per core, so the one round is what the latency is made of.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace kiln::comm {

Status oneshot_all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                          const Reducer& reducer) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const size_t bytes = count * reducer.elem_size;
  if (n == 1 || bytes == 0) {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
    return Status();
  }
  // Every rank's input, this rank's own included, so the reduction below reads the n
  // inputs in the same order on every rank (bit-identical results) and an in-place call
  // may overwrite its input.
  char* inputs = static_cast<char*>(ctx.scratch->get(0, bytes * static_cast<size_t>(n)));
  if (inputs == nullptr) {
    return resource_exhausted("%s: out of memory for %d x %zu bytes", ctx.deadline.op, n, bytes);
  }
  auto input_of = [&](int r) { return inputs + static_cast<size_t>(r) * bytes; };
  // Kept per thread: at a few bytes, two allocations are a good part of the operation.
  static thread_local std::vector<SendOp> sends;
  static thread_local std::vector<RecvOp> recvs;
  sends.clear();
  recvs.clear();
  // Peers in the order me+1, me+2, ...: each rank's first message goes to a different one.
  // The smallest inputs go as small messages (SendOp::small): one cache line per peer.
  const bool small = bytes <= kSmallMessageBytes;
  for (int k = 1; k < n; ++k) {
    const int to = mod(me + k, n), from = mod(me - k, n);
    sends.push_back(SendOp{to, send, bytes, small});
    RecvOp r{from, input_of(from), bytes};
    r.small = small;
    recvs.push_back(r);
  }
  std::memcpy(input_of(me), send, bytes);
  if (Status st = group_exchange(ctx, sends, recvs); !st.ok()) return st;
  reducer.apply_to(recv, input_of(0), input_of(1), bytes);
  for (int r = 2; r < n; ++r) reducer.apply(recv, input_of(r), bytes);
  return Status();
}

}  // namespace kiln::comm
