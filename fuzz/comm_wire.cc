// Fuzz target: the collective wire protocol as a peer sends it (comm/bootstrap.h, "What a
// peer sends, decoded"): a rank's hello to the root listener and how the listener cuts it
// from the stream, the root's frames to a joining rank (progress, error, timed out, world
// table, challenge), a rank's answer to the challenge, the hello on a TCP data link, the status
// channel's challenge, query and answer, and the root info blob.
// The first byte picks the message, the second the world size a joining rank expects; the
// rest is the peer's bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "comm/bootstrap.h"

namespace {

constexpr uint64_t kUniqueId = 0x1122334455667788ull;  // the seeds' communicator
constexpr uint64_t kNonce = 0x99aabbccddeeff00ull;     // the seeds' world
const std::string kKey = "secret:the seeds' key";       // the status seeds' MACs

void check(bool ok) {
  if (!ok) std::abort();  // a decoded message broke a promise its decoder makes
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::comm;
  if (size < 2 || size > (1u << 16)) return -1;
  const int world = 1 + data[1] % 16;
  const std::string bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (data[0] % 7) {
    case 0: {  // a hello to the root: decoded, encoded again (no longer), decoded the same
      kiln::Expected<Hello> h = decode_hello(bytes);
      if (!h.ok()) break;
      std::string again = encode_hello(*h);
      check(again.size() <= bytes.size());
      kiln::Expected<Hello> h2 = decode_hello(again);
      check(h2.ok() && h2->rank == h->rank && h2->size == h->size &&
            h2->unique_id == h->unique_id && h2->force_tcp == h->force_tcp &&
            h2->info.host == h->info.host && h2->info.host_id == h->info.host_id &&
            h2->info.pid == h->info.pid && h2->data_addr == h->data_addr);
      break;
    }
    case 1: {  // the root listener's stream from a client: frames cut and decoded in turn
      std::string buf = bytes;
      for (int i = 0; i < 64; ++i) {
        std::string frame;
        HelloCut cut = cut_hello_frame(buf, &frame);
        if (cut != HelloCut::kFrame) break;
        check(frame.size() + 4 <= buf.size());
        (void)decode_hello(frame);
        buf.erase(0, frame.size() + 4);
      }
      break;
    }
    case 2: {  // a frame from the root to a rank of a world of `world` ranks
      kiln::Expected<RootFrame> f = decode_root_frame(bytes, kUniqueId, world);
      if (!f.ok()) break;
      if (f->kind == RootFrame::Kind::kProgress) {
        check(f->joined.empty() || f->joined.size() == static_cast<size_t>(world));
      } else if (f->kind == RootFrame::Kind::kTable) {
        check(f->table.peers.size() == static_cast<size_t>(world) &&
              f->table.data_addrs.size() == f->table.peers.size());
        for (size_t r = 0; r < f->table.peers.size(); ++r)
          check(f->table.peers[r].rank == static_cast<int>(r));
        check(f->mac.size() == kAuthMacBytes && bytes.size() >= kAuthMacBytes &&
              bytes.compare(bytes.size() - kAuthMacBytes, kAuthMacBytes, f->mac) == 0);
      } else if (f->kind == RootFrame::Kind::kChallenge) {
        check(f->challenge.size() == kAuthNonceBytes);
      }
      break;
    }
    case 3: {  // the hello on a TCP data link
      kiln::Expected<uint32_t> rank = decode_link_hello(bytes, kUniqueId, kNonce);
      if (rank.ok()) check(encode_link_hello(kUniqueId, kNonce, *rank) == bytes.substr(0, 24));
      break;
    }
    case 4: {  // the status channel: a challenge, a query, an answer (each signed with kKey)
      const std::string challenge(kiln::comm::kAuthNonceBytes, 'c');
      (void)decode_status_challenge(bytes.data(), bytes.size());
      kiln::Expected<StatusQuery> q =
          decode_status_query(bytes.data(), bytes.size(), kKey, kNonce, challenge);
      if (q.ok()) check(encode_status_query(kKey, kNonce, challenge, *q) == bytes);
      kiln::Expected<uint64_t> started =
          decode_status_answer(bytes.data(), bytes.size(), kKey, kNonce, challenge);
      if (started.ok()) check(encode_status_answer(kKey, kNonce, challenge, *started) == bytes);
      break;
    }
    case 5: {  // the root info blob (kilnCommInitRank's, handed from rank 0 to the others)
      kiln::Expected<RootInfo> info = decode_root_info(std::span<const char>(bytes));
      if (info.ok()) check(!info->addr.empty());
      break;
    }
    case 6: {  // a rank's answer to the root's challenge: decoded, encoded back to the bytes
      kiln::Expected<HelloAuth> a = decode_hello_auth(bytes);
      if (a.ok()) check(a->mac.size() == kAuthMacBytes && a->nonce.size() == kAuthNonceBytes &&
                        encode_hello_auth(*a) == bytes);
      break;
    }
  }
  return 0;
}
