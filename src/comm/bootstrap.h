// Internals of the multi-process transports: the table the bootstrap hands every rank,
// the shared-memory and TCP link builders, and the small blocking-socket helpers the
// bootstrap and the TCP links share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/link.h"
#include "comm/transport.h"
#include "core/status.h"

namespace kiln::comm {

// What the root tells every rank once all have joined.
struct WorldTable {
  uint64_t unique_id = 0;
  std::string key;     // the world's key (world_key), this rank's own: never sent
  uint64_t nonce = 0;  // new per world: names of shared-memory segments, TCP link hellos
  bool force_tcp = false;
  std::vector<PeerInfo> peers;         // by rank
  std::vector<std::string> data_addrs;  // by rank: "ip:port" of its TCP link listener
};

// start_root with a given unique id (launchers derive it from the job, so every rank knows
// it without a root info blob). `rendezvous_file`, if not empty, is removed when the
// listener ends (the file through which the launch handed its address to the other ranks).
// `secret`: the job's secret (world_key); empty: KILN_COMM_SECRET.
Expected<RootInfo> start_root_with_id(const std::string& bind, uint64_t unique_id,
                                      const std::string& rendezvous_file = "",
                                      const std::string& secret = "");
// Stops the listener of `unique_id` in this process, if it still runs (rank 0 gave up).
void stop_root(uint64_t unique_id);
uint64_t random_id();

// Links to `peers` (ranks of this host) through one shared-memory segment per pair.
Status make_shm_links(const WorldTable& table, int rank, const std::vector<int>& peers,
                      Clock::time_point deadline, std::vector<std::unique_ptr<Link>>* links);
// Links to `peers` through one TCP connection per pair; `listen_fd` is this rank's data
// listener (its address is table.data_addrs[rank]). The higher rank connects.
Status make_tcp_links(const WorldTable& table, int rank, int listen_fd,
                      const std::vector<int>& peers, Clock::time_point deadline,
                      std::vector<std::unique_ptr<Link>>* links);
// The status channel of rank `rank`, with TCP links to `peers`, once make_tcp_links is done
// with `listen_fd`: the channel takes the listener over (closing it on every path) and
// answers its connections from then on, so the address the bootstrap gave the peers serves
// both.
Expected<std::unique_ptr<StatusChannel>> start_tcp_status_channel(const WorldTable& table,
                                                                  int rank, int listen_fd,
                                                                  const std::vector<int>& peers);

// ---- Authentication --------------------------------------------------------------------------
// No byte a peer sends is trusted before it proved that it knows the world's key, by
// HMAC-SHA256 challenge-response (docs/comm.md "Authentication"): the root listener
// challenges each hello and signs the world table it sends to each rank; a rank's TCP
// listener challenges each link hello.

constexpr size_t kAuthNonceBytes = 16;
constexpr size_t kAuthMacBytes = 32;
// The world's key: `secret` when not empty, else KILN_COMM_SECRET when set and not empty,
// else one derived from the unique id (which then only keeps apart jobs and strangers who do
// not know the root info).
std::string world_key(const std::string& secret, uint64_t unique_id);
// kAuthNonceBytes fresh random bytes.
std::string auth_nonce();
// HMAC-SHA256(key, label || 0 || nonce || message): kAuthMacBytes bytes.
std::string auth_mac(const std::string& key, std::string_view label, std::string_view nonce,
                     std::string_view message);
// Whether `got` is `want` (constant time in the bytes compared; sizes must match).
bool auth_mac_matches(const std::string& got, const std::string& want);

// ---- Sockets ------------------------------------------------------------------------------

// "host:port" or "[v6addr]:port" -> (host, port).
Expected<std::pair<std::string, int>> split_host_port(const std::string& addr);
// A listening TCP socket on host:port ("" or "*" host: every interface; port 0: ephemeral).
// *port gets the bound port.
Expected<int> tcp_listen(const std::string& host, int port, int* bound_port);
// Connects to "host:port", retrying refused connections until `deadline`.
Expected<int> tcp_connect(const std::string& addr, Clock::time_point deadline);
// The local IP address of a connected socket (the interface that reaches its peer).
std::string socket_local_ip(int fd);
// "ip:port" of a connected socket's peer ("?" when unknown), for messages.
std::string socket_peer_addr(int fd);
// An address of this host other hosts can likely reach (default-route interface, else the
// first non-loopback IPv4 address, else 127.0.0.1).
std::string reachable_host_ip();
// Length-prefixed frames over a blocking or non-blocking socket, waiting until `deadline`.
Status send_frame(int fd, const std::string& payload, Clock::time_point deadline);
// deadline_exceeded when nothing came in time; unavailable when the peer closed.
Expected<std::string> recv_frame(int fd, Clock::time_point deadline, size_t max_bytes);
void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);

// ---- What a peer sends, decoded ---------------------------------------------------------------
// Pure functions of the bytes a peer sent (no sockets, no state): the socket code above and
// the comm_wire fuzz target (fuzz/comm_wire.cc) call the same ones. Each returns
// invalid_argument for bytes that are not a well-formed message; the checks that need the
// receiver's state (a duplicated rank, a world size that differs from an earlier hello's)
// stay with the receiver.

// A rank's hello to the root listener: the payload of the first frame it sends.
// The root answers a hello with a challenge (RootFrame::kChallenge); the rank proves it knows
// the key with a HelloAuth frame, and the root's world table to it then carries a MAC over
// the rank's nonce and the table.
struct Hello {
  int rank = 0;
  int size = 0;
  uint64_t unique_id = 0;
  bool force_tcp = false;
  PeerInfo info;
  std::string data_addr;
};
std::string encode_hello(const Hello& h);
Expected<Hello> decode_hello(const std::string& frame);

// How the root listener cuts a client's first frame out of the bytes received so far
// (`buf`: a 4-byte little-endian length, then the payload): kNeedMore until it is whole,
// kTooBig when the length is beyond any hello (the client is rejected), else kFrame with
// the payload in *frame.
enum class HelloCut { kNeedMore, kTooBig, kFrame };
HelloCut cut_hello_frame(const std::string& buf, std::string* frame);

// A rank's answer to the root's challenge: the MAC of the challenge and its hello frame
// (label "kiln bootstrap hello"), and its own nonce, which the root signs the table with.
struct HelloAuth {
  std::string mac;    // kAuthMacBytes
  std::string nonce;  // kAuthNonceBytes
};
std::string encode_hello_auth(const HelloAuth& a);
Expected<HelloAuth> decode_hello_auth(const std::string& frame);

// A frame from the root listener to a joining rank of a world of `size` ranks.
struct RootFrame {
  enum class Kind { kProgress, kTimedOut, kError, kTable, kChallenge };
  Kind kind = Kind::kProgress;
  std::vector<uint8_t> joined;  // kProgress: one flag per rank; empty when malformed (ignored)
  std::string why;              // kTimedOut, kError: the root's message
  WorldTable table;             // kTable
  std::string mac;              // kTable: the MAC over the rank's nonce and the frame before it
  std::string challenge;        // kChallenge: kAuthNonceBytes
};
// Errors: a frame of no known type, a malformed or truncated table or challenge. The table's
// MAC is the caller's to check (the frame's first size - kAuthMacBytes bytes are signed).
Expected<RootFrame> decode_root_frame(const std::string& frame, uint64_t unique_id, int size);

// The hello a rank sends first on a TCP data link to a lower rank (make_tcp_links): the
// sender's rank when the frame is of the world (`unique_id`, `nonce`), else an error. The
// caller checks the rank against its peers.
// The lower rank then sends a challenge (kAuthNonceBytes) and the higher rank answers with
// auth_mac(key, "kiln link hello", challenge, the hello frame) before the link is used.
Expected<uint32_t> decode_link_hello(const std::string& frame, uint64_t unique_id, uint64_t nonce);
std::string encode_link_hello(uint64_t unique_id, uint64_t nonce, uint32_t rank);

// The status channel's exchange (tcp_status_channel.cc), every message a frame (a 4-byte
// length, then the payload) and authenticated both ways like the links' hellos:
// 1. the answering rank sends a challenge: kAuthNonceBytes fresh random bytes;
// 2. the asking rank sends its query: the world's nonce, its rank, a challenge of its own,
//    and auth_mac(key, "kiln status query", the answerer's challenge, the query before the
//    MAC), so a stranger (or a replay of an earlier query) learns nothing;
// 3. the answerer sends the count of collectives it started with auth_mac(key, "kiln status
//    answer", the asker's challenge, the answer before the MAC), so an answer from anyone
//    but a rank of this world (a stranger on a reused port, a forger) is refused.
constexpr size_t kStatusChallengeBytes = 4 + 4 + 1 + kAuthNonceBytes;
constexpr size_t kStatusQueryBytes = 4 + 4 + 1 + 8 + 4 + kAuthNonceBytes + kAuthMacBytes;
constexpr size_t kStatusAnswerBytes = 4 + 4 + 1 + 8 + 8 + kAuthMacBytes;
struct StatusQuery {
  uint32_t rank = 0;
  std::string challenge;  // the asker's: kAuthNonceBytes
};
std::string encode_status_challenge(const std::string& challenge);
// The answerer's challenge from the whole frame received (length prefix included).
Expected<std::string> decode_status_challenge(const char* p, size_t n);
std::string encode_status_query(const std::string& key, uint64_t nonce,
                                const std::string& answerer_challenge, const StatusQuery& q);
// A query of the world (`key`, `nonce`) made for `answerer_challenge`, else an error naming
// what is wrong (malformed, another world, not signed with the key).
Expected<StatusQuery> decode_status_query(const char* p, size_t n, const std::string& key,
                                          uint64_t nonce, const std::string& answerer_challenge);
std::string encode_status_answer(const std::string& key, uint64_t nonce,
                                 const std::string& asker_challenge, uint64_t started);
// The count of collectives the peer started when the frame is a whole answer of the world
// made for `asker_challenge`, else an error.
Expected<uint64_t> decode_status_answer(const char* p, size_t n, const std::string& key,
                                        uint64_t nonce, const std::string& asker_challenge);

// Bounds-checked little helpers for the wire format.
class WireWriter {
 public:
  void u8(uint8_t v) { bytes(&v, 1); }
  void u32(uint32_t v) { bytes(&v, 4); }
  void u64(uint64_t v) { bytes(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  const std::string& data() const { return out_; }

 private:
  std::string out_;
};

class WireReader {
 public:
  WireReader(const char* p, size_t n) : p_(p), n_(n) {}
  bool u8(uint8_t* v) { return bytes(v, 1); }
  bool u32(uint32_t* v) { return bytes(v, 4); }
  bool u64(uint64_t* v) { return bytes(v, 8); }
  bool str(std::string* s, size_t max_len) {
    uint32_t len = 0;
    if (!u32(&len) || len > max_len || len > n_ - pos_) return false;
    s->assign(p_ + pos_, len);
    pos_ += len;
    return true;
  }
  bool bytes(void* v, size_t n) {
    if (n > n_ - pos_) return false;
    __builtin_memcpy(v, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return n_ - pos_; }

 private:
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

}  // namespace kiln::comm
