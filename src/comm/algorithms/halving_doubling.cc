// Recursive halving-doubling AllReduce (Rabenseifner / Thakur et al.). With p the largest
// power of two <= n and r = n - p, ranks 0..2r-1 first fold in pairs (the even one sends
// its vector to the odd one, which reduces it and takes part; the even one waits), so p
// ranks remain. Small vectors then use recursive doubling (log p steps exchanging the whole
// vector); larger ones recursive halving (a reduce-scatter: each step halves the range a
// rank keeps, reducing the partner's half of it) followed by recursive doubling of the
// pieces (an all-gather). Finally the odd ranks of the folded pairs send the result back.
#include <cstring>

#include "comm/algorithms.h"

namespace kiln::comm {
namespace {

// Up to this size the whole vector is exchanged at each step (fewer, smaller messages).
constexpr size_t kDoublingMaxBytes = 16 << 10;

}  // namespace

Status halving_doubling_all_reduce(const AlgoContext& ctx, const void* send, void* recv,
                                   size_t count, const Reducer& reducer) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const size_t elem = reducer.elem_size, bytes = count * elem;
  const char* in = static_cast<const char*>(send);
  char* acc = static_cast<char*>(recv);
  if (n == 1 || bytes == 0) {
    if (in != acc && bytes > 0) std::memcpy(acc, in, bytes);
    return Status();
  }
  // Out of place, the first partial result reduced into recv is combined with the input
  // on the way (RecvOp::operand), and what is sent before that goes out from the input.
  bool copied = in == acc;
  auto ensure_copied = [&] {
    if (!copied) std::memcpy(acc, in, bytes);
    copied = true;
  };

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int r = n - p;
  // Index among the p participating ranks (-1: folded away), and back.
  int vrank;
  if (me < 2 * r) {
    if (me % 2 == 0) {
      SendOp so{me + 1, in, bytes};
      if (Status st = group_exchange(ctx, {&so, 1}, {}); !st.ok()) return st;
      vrank = -1;
    } else {
      RecvOp ro{me - 1, acc, bytes, &reducer};
      ro.operand = in;  // acc = the input (op) the partner's, no copy first
      copied = true;
      if (Status st = group_exchange(ctx, {}, {&ro, 1}); !st.ok()) return st;
      vrank = me / 2;
    }
  } else {
    vrank = me - r;
  }
  auto real = [r](int v) { return v < r ? 2 * v + 1 : v + r; };

  if (vrank >= 0) {
    if (bytes <= kDoublingMaxBytes || count < static_cast<size_t>(p)) {
      ensure_copied();
      char* tmp = static_cast<char*>(ctx.scratch->get(0, bytes));
      if (tmp == nullptr) {
        return resource_exhausted("%s: out of memory for %zu bytes", ctx.deadline.op, bytes);
      }
      for (int d = 1; d < p; d *= 2) {
        const int partner_v = vrank ^ d;
        const int partner = real(partner_v);
        SendOp so{partner, acc, bytes};
        RecvOp ro{partner, tmp, bytes, nullptr};
        if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
        // Both partners combine (lower rank's values) op (higher rank's values), so they
        // get the same bits even where an op is not bitwise commutative (max of +0 and -0,
        // NaN payloads).
        if (vrank < partner_v) {
          reducer.apply(acc, tmp, bytes);
        } else {
          reducer.apply(tmp, acc, bytes);
          std::memcpy(acc, tmp, bytes);
        }
      }
    } else {
      // Ranges (in elements) kept after each halving step, for the doubling back.
      size_t lo[32], hi[32];
      size_t cur_lo = 0, cur_hi = count;
      int steps = 0;
      for (int d = p / 2; d >= 1; d /= 2, ++steps) {
        const int partner = real(vrank ^ d);
        const size_t mid = cur_lo + (cur_hi - cur_lo) / 2;
        size_t keep_lo, keep_hi, give_lo, give_hi;
        if ((vrank & d) == 0) {
          keep_lo = cur_lo, keep_hi = mid, give_lo = mid, give_hi = cur_hi;
        } else {
          keep_lo = mid, keep_hi = cur_hi, give_lo = cur_lo, give_hi = mid;
        }
        // The first step gives away half the input untouched: send it from the input, and
        // reduce the kept half of the input with the partner's straight into acc.
        const char* give_src = copied ? acc : in;
        SendOp so{partner, give_src + give_lo * elem, (give_hi - give_lo) * elem};
        RecvOp ro{partner, acc + keep_lo * elem, (keep_hi - keep_lo) * elem, &reducer};
        if (!copied) ro.operand = in + keep_lo * elem;
        copied = true;
        if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
        lo[steps] = cur_lo = keep_lo;
        hi[steps] = cur_hi = keep_hi;
      }
      // Doubling: at each level send what this rank holds, receive the sibling range.
      int d = 1;
      for (int i = steps - 1; i >= 0; --i, d *= 2) {
        const int partner = real(vrank ^ d);
        const size_t parent_lo = i == 0 ? 0 : lo[i - 1];
        const size_t parent_hi = i == 0 ? count : hi[i - 1];
        const bool kept_lower = (vrank & d) == 0;
        const size_t other_lo = kept_lower ? hi[i] : parent_lo;
        const size_t other_hi = kept_lower ? parent_hi : lo[i];
        SendOp so{partner, acc + lo[i] * elem, (hi[i] - lo[i]) * elem};
        RecvOp ro{partner, acc + other_lo * elem, (other_hi - other_lo) * elem, nullptr};
        if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
      }
    }
  }

  if (me < 2 * r) {
    if (me % 2 == 0) {
      RecvOp ro{me + 1, acc, bytes, nullptr};
      return group_exchange(ctx, {}, {&ro, 1});
    }
    SendOp so{me - 1, acc, bytes};
    return group_exchange(ctx, {&so, 1}, {});
  }
  return Status();
}

}  // namespace kiln::comm
