// Binomial trees, for small messages (log2 n steps of latency): Broadcast, Reduce, and
// AllReduce as a reduce to index 0 followed by a broadcast. Positions are taken relative to
// the root (v = index - root mod n); v's parent is v with its lowest set bit cleared, its
// children v + 2^k for the 2^k below that bit.
#include <cstring>

#include "comm/algorithms.h"

namespace kiln::comm {

Status tree_broadcast(const AlgoContext& ctx, void* buf, size_t bytes, int root) {
  const int n = ctx.group->size(), me = ctx.group->me();
  if (n == 1 || bytes == 0) return Status();
  const int v = mod(me - root, n);
  auto real = [&](int pos) { return mod(pos + root, n); };
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      RecvOp ro{real(v - mask), buf, bytes, nullptr};
      if (Status st = group_exchange(ctx, {}, {&ro, 1}); !st.ok()) return st;
      break;
    }
    mask <<= 1;
  }
  // Children, farthest first (they have the largest subtrees), all in one exchange.
  SendOp sends[32];
  int count = 0;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) sends[count++] = {real(v + mask), buf, bytes};
  }
  return group_exchange(ctx, {sends, static_cast<size_t>(count)}, {});
}

Status tree_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                   const Reducer& reducer, int root) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const size_t bytes = count * reducer.elem_size;
  if (bytes == 0) return Status();
  if (n == 1) {
    if (recv != send) std::memmove(recv, send, bytes);
    return Status();
  }
  const int v = mod(me - root, n);
  auto real = [&](int pos) { return mod(pos + root, n); };
  // A leaf (v odd, or v's first child past n) sends its input as it is; an inner node
  // accumulates its children's partial results in recv (root) or scratch.
  const bool has_children = (v & 1) == 0 && v + 1 < n;
  const char* partial = static_cast<const char*>(send);
  if (has_children) {
    char* acc =
        me == root ? static_cast<char*>(recv) : static_cast<char*>(ctx.scratch->get(0, bytes));
    if (acc == nullptr) {
      return resource_exhausted("%s: out of memory for %zu bytes of partial sums",
                                ctx.deadline.op, bytes);
    }
    if (acc != send) std::memcpy(acc, send, bytes);
    partial = acc;
  }
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      SendOp so{real(v - mask), partial, bytes};
      return group_exchange(ctx, {&so, 1}, {});
    }
    if (v + mask < n) {
      RecvOp ro{real(v + mask), const_cast<char*>(partial), bytes, &reducer};
      if (Status st = group_exchange(ctx, {}, {&ro, 1}); !st.ok()) return st;
    }
  }
  return Status();  // the root
}

Status tree_all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                       const Reducer& reducer) {
  if (Status st = tree_reduce(ctx, send, recv, count, reducer, 0); !st.ok()) return st;
  return tree_broadcast(ctx, recv, count * reducer.elem_size, 0);
}

}  // namespace kiln::comm
