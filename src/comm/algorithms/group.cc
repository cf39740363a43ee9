// What every algorithm family shares: groups of ranks, scratch buffers, the exchange
// within a group, algorithm names and the pipeline chunk size.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "comm/algorithms.h"

namespace kiln::comm {

bool algo_from_name(std::string_view name, Algo* out) {
  static constexpr struct {
    const char* name;
    Algo algo;
  } kNames[] = {{"", Algo::kAuto},
                {"auto", Algo::kAuto},
                {"ring", Algo::kRing},
                {"halving_doubling", Algo::kHalvingDoubling},
                {"tree", Algo::kTree},
                {"pairwise", Algo::kPairwise},
                {"hierarchical", Algo::kHierarchical},
                {"oneshot", Algo::kOneShot}};
  for (const auto& entry : kNames) {
    if (name == entry.name) {
      *out = entry.algo;
      return true;
    }
  }
  return false;
}

const char* algo_name(Algo algo) {
  switch (algo) {
    case Algo::kAuto: return "auto";
    case Algo::kRing: return "ring";
    case Algo::kHalvingDoubling: return "halving_doubling";
    case Algo::kTree: return "tree";
    case Algo::kPairwise: return "pairwise";
    case Algo::kHierarchical: return "hierarchical";
    case Algo::kOneShot: return "oneshot";
  }
  return "?";
}

Scratch::~Scratch() {
  for (void* p : buf_) ::operator delete[](p, std::align_val_t(64));
}

void* Scratch::get(int slot, size_t bytes) {
  if (bytes <= cap_[slot]) return buf_[slot];
  ::operator delete[](buf_[slot], std::align_val_t(64));
  // Grow geometrically so a slowly growing size does not reallocate every time.
  size_t cap = bytes < 2 * cap_[slot] ? 2 * cap_[slot] : bytes;
  cap = (cap + 63) & ~size_t{63};
  buf_[slot] = ::operator new[](cap, std::align_val_t(64), std::nothrow);
  cap_[slot] = buf_[slot] ? cap : 0;
  return buf_[slot];
}

Group::Group(Transport& transport)
    : transport_(&transport), size_(transport.size()), me_(transport.rank()) {
  count_hosts();
}

Group::Group(Transport& transport, std::vector<int> ranks)
    : transport_(&transport), ranks_(std::move(ranks)), size_(static_cast<int>(ranks_.size())) {
  me_ = 0;
  for (int i = 0; i < size_; ++i) {
    if (ranks_[i] == transport.rank()) me_ = i;
  }
  count_hosts();
}

void Group::count_hosts() {
  const std::vector<PeerInfo>& peers = transport_->peers();
  std::vector<uint64_t> ids;
  for (int i = 0; i < size_; ++i) {
    const size_t rank = static_cast<size_t>(rank_of(i));
    if (rank < peers.size()) ids.push_back(peers[rank].host_id);
  }
  std::sort(ids.begin(), ids.end());
  hosts_ = std::max<int>(1, static_cast<int>(std::unique(ids.begin(), ids.end()) - ids.begin()));
}

Status group_exchange(const AlgoContext& ctx, std::span<const SendOp> sends,
                      std::span<const RecvOp> recvs) {
  // Small exchanges (every algorithm step but a root's gather) map peers on the stack.
  constexpr size_t kLocal = 16;
  SendOp local_sends[kLocal];
  RecvOp local_recvs[kLocal];
  std::vector<SendOp> many_sends;
  std::vector<RecvOp> many_recvs;
  SendOp* s = local_sends;
  RecvOp* r = local_recvs;
  if (sends.size() > kLocal) {
    many_sends.resize(sends.size());
    s = many_sends.data();
  }
  if (recvs.size() > kLocal) {
    many_recvs.resize(recvs.size());
    r = many_recvs.data();
  }
  size_t ns = 0, nr = 0;
  const Group& g = *ctx.group;
  for (const SendOp& op : sends) {
    if (op.bytes == 0) continue;
    s[ns] = op;
    s[ns++].peer = g.rank_of(op.peer);
  }
  for (const RecvOp& op : recvs) {
    if (op.bytes == 0) continue;
    r[nr] = op;
    r[nr].peer = g.rank_of(op.peer);
    if (op.forward >= 0) r[nr].forward = g.rank_of(op.forward);
    ++nr;
  }
  if (ns == 0 && nr == 0) return Status();
  return g.transport().exchange(std::span<const SendOp>(s, ns), std::span<const RecvOp>(r, nr),
                                ctx.deadline);
}

size_t pipeline_chunk_bytes() {
  static const size_t chunk = [] {
    size_t value = size_t{512} << 10;
    if (const char* env = std::getenv("KILN_COMM_CHUNK_BYTES")) {
      char* end = nullptr;
      unsigned long long v = std::strtoull(env, &end, 10);
      if (end != env && *end == '\0' && v >= 64) value = static_cast<size_t>(v) & ~size_t{63};
    }
    return value;
  }();
  return chunk;
}

}  // namespace kiln::comm
