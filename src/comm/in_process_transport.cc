// make_in_process_world: ranks that are threads of one process, linked by ring buffers in
// the process's memory (one per ordered pair of ranks) for small messages, and by direct
// copies out of the sender's buffer for large ones.
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/link.h"
#include "comm/transport.h"

namespace kiln::comm {
namespace {

// The rings of a whole world; every rank's links keep it alive.
struct InProcessRings {
  struct Ring {
    RingControl control;
    DirectSlot direct;
    char* data = nullptr;
  };
  explicit InProcessRings(int n, size_t capacity) : n(n), rings(static_cast<size_t>(n) * n) {
    for (Ring& r : rings) r.data = static_cast<char*>(std::aligned_alloc(64, capacity));
  }
  ~InProcessRings() {
    for (Ring& r : rings) std::free(r.data);
  }
  Ring& ring(int from, int to) { return rings[static_cast<size_t>(from) * n + to]; }

  int n;
  std::vector<Ring> rings;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_in_process_world(int n) {
  std::vector<std::unique_ptr<Transport>> world;
  if (n <= 0) return world;
  // Large enough for a pipelined ring step per pair; smaller for big worlds (n*(n-1) rings).
  const size_t capacity = n <= 4 ? (4u << 20) : n <= 16 ? (1u << 20) : (256u << 10);
  auto rings = std::make_shared<InProcessRings>(n, capacity);
  std::vector<PeerInfo> peers;
  for (int r = 0; r < n; ++r) peers.push_back(local_peer_info(r));
  for (int r = 0; r < n; ++r) {
    std::vector<std::unique_ptr<Link>> links(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p == r) {
        links[static_cast<size_t>(p)] = make_loopback_link(peers[static_cast<size_t>(r)]);
        continue;
      }
      InProcessRings::Ring& out = rings->ring(r, p);
      InProcessRings::Ring& in = rings->ring(p, r);
      auto link = std::make_unique<RingLink>(RingLink::End{&out.control, out.data},
                                             RingLink::End{&in.control, in.data}, capacity,
                                             peers[static_cast<size_t>(p)], 0, rings);
      // Large sends go by address: the receiver copies (or reduces) straight from the
      // sender's buffer, one copy instead of two.
      link->enable_direct(&out.direct, &in.direct);
      links[static_cast<size_t>(p)] = std::move(link);
    }
    world.push_back(std::make_unique<LinkTransport>(r, peers, std::move(links)));
  }
  return world;
}

}  // namespace kiln::comm
