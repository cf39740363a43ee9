// Ring algorithms: AllReduce as reduce-scatter + all-gather, ReduceScatter, AllGather,
// Reduce (reduce-scatter, then a gather at the root) and the chained broadcast.
//
// AllReduce, AllGather and Reduce's reduce-scatter run as one exchange: a rank sends its
// first block, and every block it receives after that is forwarded to the next rank as it
// lands (RecvOp::forward), 64 KiB at a time while the piece is still in cache: receive,
// reduce and send in one pass over the data, with no step boundaries where the ring would
// drain. An out-of-place reduction reduces the received partial sum with its own input
// straight into the output (RecvOp::operand), so the input is never copied first.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"

namespace kiln::comm {
namespace {

// The reduce-scatter receives over `acc` (count elements in n blocks), in the order they
// arrive from the previous rank: step s brings block me-s-2 and reduces it with this rank's
// input `send` into acc (in place when send is acc), forwarding it to the next rank; after
// n-1 steps block `me` of acc is the full reduction, forwarded too when `forward_last`.
// The first block sent, me-1, goes out of `send` (see ring_first_send).
void ring_rs_recvs(const AlgoContext& ctx, const char* send, char* acc, const Blocks& bl,
                   const Reducer& reducer, bool forward_last, std::vector<RecvOp>* recvs) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const int next = mod(me + 1, n), prev = mod(me - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int rb = mod(me - s - 2, n);
    RecvOp r{prev, acc + bl.offset(rb), bl.bytes(rb), &reducer};
    if (send != acc) r.operand = send + bl.offset(rb);
    r.forward = s < n - 2 || forward_last ? next : -1;
    recvs->push_back(r);
  }
}

// The all-gather receives over `buf`, whose block `me` is complete (and sent first): step s
// brings block me-s-1 from the previous rank, forwarded to the next but for the last.
void ring_ag_recvs(const AlgoContext& ctx, char* buf, const Blocks& bl,
                   std::vector<RecvOp>* recvs) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const int next = mod(me + 1, n), prev = mod(me - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int rb = mod(me - s - 1, n);
    RecvOp r{prev, buf + bl.offset(rb), bl.bytes(rb), nullptr};
    r.forward = s < n - 2 ? next : -1;
    recvs->push_back(r);
  }
}

// The reduce-scatter's first send: this rank's input block me-1, to the next rank.
SendOp ring_first_send(const AlgoContext& ctx, const char* send, const Blocks& bl) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const int first = mod(me - 1, n);
  return SendOp{mod(me + 1, n), send + bl.offset(first), bl.bytes(first)};
}

}  // namespace

Status ring_all_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                       const Reducer& reducer) {
  const int n = ctx.group->size();
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (n == 1 || count == 0) {
    if (in != out && count > 0) std::memcpy(out, in, count * reducer.elem_size);
    return Status();
  }
  Blocks bl{count, reducer.elem_size, n};
  const SendOp first = ring_first_send(ctx, in, bl);
  std::vector<RecvOp> recvs;
  recvs.reserve(2 * static_cast<size_t>(n - 1));
  ring_rs_recvs(ctx, in, out, bl, reducer, /*forward_last=*/true, &recvs);
  ring_ag_recvs(ctx, out, bl, &recvs);
  return group_exchange(ctx, {&first, 1}, recvs);
}

Status ring_all_gather(const AlgoContext& ctx, const void* send, void* recv,
                       size_t bytes_per_rank) {
  const int n = ctx.group->size(), me = ctx.group->me();
  char* out = static_cast<char*>(recv);
  if (bytes_per_rank == 0) return Status();
  char* mine = out + static_cast<size_t>(me) * bytes_per_rank;
  if (send != mine) std::memmove(mine, send, bytes_per_rank);
  if (n == 1) return Status();
  // Byte blocks: elem 1, every block bytes_per_rank long.
  Blocks bl{bytes_per_rank * n, 1, n};
  const SendOp first{mod(me + 1, n), mine, bytes_per_rank};
  std::vector<RecvOp> recvs;
  recvs.reserve(static_cast<size_t>(n - 1));
  ring_ag_recvs(ctx, out, bl, &recvs);
  return group_exchange(ctx, {&first, 1}, recvs);
}

Status ring_reduce_scatter(const AlgoContext& ctx, const void* send, void* recv,
                           size_t recv_count, const Reducer& reducer) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const size_t block = recv_count * reducer.elem_size;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (block == 0) return Status();
  const char* my_input = in + static_cast<size_t>(me) * block;
  if (n == 1) {
    if (out != my_input) std::memmove(out, my_input, block);
    return Status();
  }
  // Partial sums travel through two alternating scratch blocks: the block received at step
  // s is forwarded (piece by piece) at step s+1 while step s+1's block arrives in the other
  // one. The last block received is this rank's and is reduced straight into recv.
  char* slot[2] = {static_cast<char*>(ctx.scratch->get(0, block)),
                   static_cast<char*>(ctx.scratch->get(1, block))};
  if (slot[0] == nullptr || slot[1] == nullptr) {
    return resource_exhausted("%s: out of memory for 2 x %zu bytes of partial sums",
                              ctx.deadline.op, block);
  }
  const int next = mod(me + 1, n), prev = mod(me - 1, n);
  const size_t pieces = pipeline_pieces(block);
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(me - s - 1, n), rb = mod(me - s - 2, n);
    const char* src = s == 0 ? in + static_cast<size_t>(sb) * block : slot[(s - 1) % 2];
    char* dst = s == n - 2 ? out : slot[s % 2];
    const char* dst_input = in + static_cast<size_t>(rb) * block;
    for (size_t k = 0; k < pieces; ++k) {
      size_t off, len;
      piece_of(block, reducer.elem_size, k, pieces, &off, &len);
      SendOp so{next, src + off, len};
      RecvOp ro{prev, dst + off, len, &reducer};
      ro.operand = dst_input + off;  // dst = this rank's input (op) the partial sum
      if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
    }
  }
  return Status();
}

Status ring_reduce(const AlgoContext& ctx, const void* send, void* recv, size_t count,
                   const Reducer& reducer, int root) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const size_t bytes = count * reducer.elem_size;
  const char* in = static_cast<const char*>(send);
  if (bytes == 0) return Status();
  if (n == 1) {
    if (recv != send) std::memmove(recv, send, bytes);
    return Status();
  }
  // The root reduces into its recv buffer; the others into scratch.
  char* acc =
      me == root ? static_cast<char*>(recv) : static_cast<char*>(ctx.scratch->get(0, bytes));
  if (acc == nullptr) {
    return resource_exhausted("%s: out of memory for %zu bytes of partial sums", ctx.deadline.op,
                              bytes);
  }
  Blocks bl{count, reducer.elem_size, n};
  const SendOp first = ring_first_send(ctx, in, bl);
  std::vector<RecvOp> rs;
  rs.reserve(static_cast<size_t>(n - 1));
  ring_rs_recvs(ctx, in, acc, bl, reducer, /*forward_last=*/false, &rs);
  if (Status st = group_exchange(ctx, {&first, 1}, rs); !st.ok()) return st;
  // Rank b holds block b reduced: gather the blocks at the root.
  if (me == root) {
    std::vector<RecvOp> recvs;
    recvs.reserve(n - 1);
    for (int b = 0; b < n; ++b) {
      if (b != root) recvs.push_back({b, acc + bl.offset(b), bl.bytes(b), nullptr});
    }
    return group_exchange(ctx, {}, recvs);
  }
  SendOp so{root, acc + bl.offset(me), bl.bytes(me)};
  return group_exchange(ctx, {&so, 1}, {});
}

Status ring_broadcast(const AlgoContext& ctx, void* buf, size_t bytes, int root) {
  const int n = ctx.group->size(), me = ctx.group->me();
  if (n == 1 || bytes == 0) return Status();
  // A chain root -> root+1 -> ... -> root+n-1; a rank forwards piece k-1 while piece k
  // arrives, so every link carries data at once after the first n-1 pieces.
  const int pos = mod(me - root, n);
  const int next = mod(me + 1, n), prev = mod(me - 1, n);
  const bool last = pos == n - 1;
  char* data = static_cast<char*>(buf);
  // Smaller pieces than the ring's: the chain's fill time grows with the piece size.
  size_t chunk = pipeline_chunk_bytes() / 2;
  if (chunk < 64) chunk = 64;
  const size_t pieces = bytes <= chunk ? 1 : (bytes + chunk - 1) / chunk;
  for (size_t k = 0; k <= pieces; ++k) {
    SendOp so{next, nullptr, 0};
    RecvOp ro{prev, nullptr, 0, nullptr};
    if (pos == 0) {
      if (k == pieces) break;
      size_t off, len;
      piece_of(bytes, 1, k, pieces, &off, &len);
      so = {next, data + off, len};
    } else {
      if (k < pieces) {
        size_t off, len;
        piece_of(bytes, 1, k, pieces, &off, &len);
        ro = {prev, data + off, len, nullptr};
      }
      if (k > 0 && !last) {
        size_t off, len;
        piece_of(bytes, 1, k - 1, pieces, &off, &len);
        so = {next, data + off, len};
      }
    }
    if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
  }
  return Status();
}

}  // namespace kiln::comm
