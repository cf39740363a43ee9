// Ring algorithms: AllReduce as reduce-scatter + all-gather, ReduceScatter, AllGather,
// Reduce (reduce-scatter, then a gather at the root) and the chained broadcast. Each ring
// step is split into pieces, one exchange per piece, so a rank forwards the first piece of
// a block it just reduced while the rest of the step is still arriving: the next step's
// send overlaps the current step's receive-reduce, and a piece is still in cache when it
// is forwarded.
#include <cstring>

#include "comm/algorithms.h"

namespace kiln::comm {
namespace {

// The reduce-scatter phase over `acc` (count elements in n blocks): step s sends block
// me-s-1 and receives block me-s-2, reducing it into acc; after n-1 steps block `me` of
// acc is the full reduction. `send` is the input; when it differs from acc, each piece is
// copied into acc right before the partial sum is reduced into it, and block me-1 goes out
// from `send` directly (acc's copy of it is never needed).
Status ring_rs_phase(const AlgoContext& ctx, const char* send, char* acc, const Blocks& bl,
                     const Reducer& reducer) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const int next = mod(me + 1, n), prev = mod(me - 1, n);
  const size_t pieces = pipeline_pieces(bl.bytes(0));
  const bool in_place = send == acc;
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(me - s - 1, n), rb = mod(me - s - 2, n);
    const char* src_block = (s == 0 ? send : acc) + bl.offset(sb);
    char* dst_block = acc + bl.offset(rb);
    for (size_t k = 0; k < pieces; ++k) {
      size_t soff, slen, roff, rlen;
      piece_of(bl.bytes(sb), bl.elem, k, pieces, &soff, &slen);
      piece_of(bl.bytes(rb), bl.elem, k, pieces, &roff, &rlen);
      if (!in_place && rlen > 0) std::memcpy(dst_block + roff, send + bl.offset(rb) + roff, rlen);
      SendOp so{next, src_block + soff, slen};
      RecvOp ro{prev, dst_block + roff, rlen, &reducer};
      if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
    }
  }
  return Status();
}

// The all-gather phase over `buf` whose block `me` is complete: step s sends block me-s and
// receives block me-s-1.
Status ring_ag_phase(const AlgoContext& ctx, char* buf, const Blocks& bl) {
  const int n = ctx.group->size(), me = ctx.group->me();
  const int next = mod(me + 1, n), prev = mod(me - 1, n);
  const size_t pieces = pipeline_pieces(bl.bytes(0));
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(me - s, n), rb = mod(me - s - 1, n);
    for (size_t k = 0; k < pieces; ++k) {
      size_t soff, slen, roff, rlen;
      piece_of(bl.bytes(sb), bl.elem, k, pieces, &soff, &slen);
      piece_of(bl.bytes(rb), bl.elem, k, pieces, &roff, &rlen);
      SendOp so{next, buf + bl.offset(sb) + soff, slen};
      RecvOp ro{prev, buf + bl.offset(rb) + roff, rlen, nullptr};
      if (Status st = group_exchange(ctx, {&so, 1}, {&ro, 1}); !st.ok()) return st;
    }
  }
  return Status();
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
  if (Status st = ring_rs_phase(ctx, in, out, bl, reducer); !st.ok()) return st;
  return ring_ag_phase(ctx, out, bl);
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
  return ring_ag_phase(ctx, out, bl);
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
      if (dst != dst_input && len > 0) std::memcpy(dst + off, dst_input + off, len);
      SendOp so{next, src + off, len};
      RecvOp ro{prev, dst + off, len, &reducer};
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
  if (Status st = ring_rs_phase(ctx, in, acc, bl, reducer); !st.ok()) return st;
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
