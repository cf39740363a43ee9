// The bootstrap: rank 0's root listener (a thread that collects every rank's hello and
// sends back the table of all ranks), the kilnRootInfo blob, and join_world, which joins
// through the root and then links every pair (shared memory on one host, TCP otherwise).
#include "comm/bootstrap.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "comm/hmac_sha256.h"
#include "core/logging.h"

namespace kiln::comm {
namespace {

constexpr uint32_t kRootInfoMagic = 0x4b524f4f;  // "KROO"
constexpr uint32_t kRootInfoVersion = 1;
constexpr uint32_t kHelloMagic = 0x4b4c4e42;  // "KLNB"
constexpr uint32_t kProtocolVersion = 2;  // 2: the authenticated handshake
constexpr size_t kMaxAddr = 1024;
constexpr size_t kMaxHost = 256;
constexpr size_t kMaxRanks = 1 << 16;
constexpr size_t kRootInfoHeader = 4 + 4 + 8 + 4;
// Root -> rank: kProgress, kTable, kError, kTimedOut, kChallenge; rank -> root: the hello
// (no type byte, it starts with kHelloMagic), then kHelloAuth.
enum FrameType : uint8_t { kProgress = 1, kTable = 2, kError = 3, kTimedOut = 4, kChallenge = 5, kHelloAuth = 6 };
constexpr std::string_view kHelloLabel = "kiln bootstrap hello";
constexpr std::string_view kTableLabel = "kiln bootstrap table";

uint64_t fnv(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 10) return s + str_format(" and %zu more", ranks.size() - 8);
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

// ---- Authentication --------------------------------------------------------------------------

std::string world_key(const std::string& secret, uint64_t unique_id) {
  if (!secret.empty()) return "secret:" + secret;
  const char* env = std::getenv("KILN_COMM_SECRET");
  if (env != nullptr && *env != '\0') return std::string("secret:") + env;
  std::string key = "unique id:";
  key.append(reinterpret_cast<const char*>(&unique_id), sizeof(unique_id));
  return key;
}

std::string auth_nonce() {
  std::string n(kAuthNonceBytes, '\0');
  // The kernel's generator (what OpenSSL's seeds from), so that no nonce needs libcrypto.
  if (getrandom(n.data(), n.size(), 0) != static_cast<ssize_t>(n.size())) {
    // No entropy source: fall back to std::random_device.
    std::random_device rd;
    for (char& c : n) c = static_cast<char>(rd());
  }
  return n;
}

std::string auth_mac(const std::string& key, std::string_view label, std::string_view nonce,
                     std::string_view message) {
  std::string data;
  data.reserve(label.size() + 1 + nonce.size() + message.size());
  data.append(label);
  data.push_back('\0');
  data.append(nonce);
  data.append(message);
  std::string mac(kAuthMacBytes, '\0');
  // Without libcrypto (the handshake entries returned its error before) no MAC is made: an
  // empty one, which auth_mac_matches never accepts.
  if (!hmac_sha256(key, data, reinterpret_cast<unsigned char*>(mac.data()))) return {};
  return mac;
}

bool auth_mac_matches(const std::string& got, const std::string& want) {
  if (got.size() != want.size() || want.empty()) return false;
  // Constant time: every byte is compared, whatever the first difference.
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(got[i] ^ want[i]);
  return diff == 0;
}

std::string encode_hello_auth(const HelloAuth& a) {
  WireWriter w;
  w.u8(kHelloAuth);
  w.bytes(a.mac.data(), a.mac.size());
  w.bytes(a.nonce.data(), a.nonce.size());
  return w.data();
}

Expected<HelloAuth> decode_hello_auth(const std::string& frame) {
  if (frame.size() != 1 + kAuthMacBytes + kAuthNonceBytes || static_cast<uint8_t>(frame[0]) != kHelloAuth) {
    return invalid_argument("not an answer to the root's challenge (%zu bytes)", frame.size());
  }
  return HelloAuth{frame.substr(1, kAuthMacBytes), frame.substr(1 + kAuthMacBytes)};
}

// ---- Root listener --------------------------------------------------------------------------

std::string encode_hello(const Hello& h) {
  WireWriter w;
  w.u32(kHelloMagic);
  w.u32(kProtocolVersion);
  w.u64(h.unique_id);
  w.u32(static_cast<uint32_t>(h.rank));
  w.u32(static_cast<uint32_t>(h.size));
  w.u8(h.force_tcp ? 1 : 0);
  w.str(h.info.host);
  w.u64(h.info.host_id);
  w.u64(static_cast<uint64_t>(h.info.pid));
  w.str(h.data_addr);
  return w.data();
}

Expected<Hello> decode_hello(const std::string& s) {
  WireReader r(s.data(), s.size());
  Hello h;
  uint32_t magic = 0, version = 0, rank = 0, size = 0;
  uint8_t tcp = 0;
  uint64_t pid = 0;
  if (!r.u32(&magic) || magic != kHelloMagic) return invalid_argument("not a Kiln bootstrap hello");
  if (!r.u32(&version) || version != kProtocolVersion) {
    return invalid_argument("bootstrap protocol version %u (expected %u)", version,
                            kProtocolVersion);
  }
  if (!r.u64(&h.unique_id) || !r.u32(&rank) || !r.u32(&size) || !r.u8(&tcp) ||
      !r.str(&h.info.host, kMaxHost) || !r.u64(&h.info.host_id) || !r.u64(&pid) ||
      !r.str(&h.data_addr, kMaxAddr)) {
    return invalid_argument("truncated bootstrap hello");
  }
  h.rank = static_cast<int>(rank);
  h.size = static_cast<int>(size);
  h.force_tcp = tcp != 0;
  h.info.rank = h.rank;
  h.info.pid = static_cast<int64_t>(pid);
  return h;
}

HelloCut cut_hello_frame(const std::string& buf, std::string* frame) {
  if (buf.size() < 4) return HelloCut::kNeedMore;
  uint32_t len = 0;
  std::memcpy(&len, buf.data(), 4);
  if (len > 4 * kMaxAddr) return HelloCut::kTooBig;
  if (buf.size() < 4 + size_t{len}) return HelloCut::kNeedMore;
  *frame = buf.substr(4, len);
  return HelloCut::kFrame;
}

namespace {

class RootServer {
 public:
  RootServer(int listen_fd, uint64_t unique_id, std::string rendezvous_file, std::string key)
      : listen_fd_(listen_fd),
        unique_id_(unique_id),
        rendezvous_file_(std::move(rendezvous_file)),
        key_(std::move(key)) {}
  ~RootServer() { ::close(listen_fd_); }
  void stop() { stop_.store(true); }
  void run();

 private:
  struct Client {
    int fd = -1;
    std::string peer;  // "ip:port", for the log
    std::string buf;
    bool joined = false;
    Hello hello;
    std::string hello_frame;   // what the hello's MAC covers
    std::string challenge;     // sent in answer to the hello; empty: no hello yet
    std::string nonce;         // the rank's, which the table's MAC answers
  };
  void on_frame(Client& c, const std::string& frame);
  void on_hello_auth(Client& c, const std::string& frame);
  void reject(Client& c, const std::string& why);
  void send_progress();
  void send_table();

  int listen_fd_;
  uint64_t unique_id_;
  std::string rendezvous_file_;
  std::string key_;
  std::atomic<bool> stop_{false};
  std::vector<Client> clients_;
  int size_ = 0;              // from the first hello
  std::vector<int> joined_;   // client index by rank, -1: not yet
  bool progress_dirty_ = false;
  bool done_ = false;
  bool accept_failed_ = false;  // warned once
};

void RootServer::reject(Client& c, const std::string& why) {
  KILN_LOG(kWarning, "comm: rank 0's bootstrap listener refused the connection from %s: %s",
           c.peer.c_str(), why.c_str());
  WireWriter w;
  w.u8(kError);
  w.str(why);
  send_frame(c.fd, w.data(), Clock::now() + std::chrono::milliseconds(500)).ignore_error();
  ::close(c.fd);
  c.fd = -1;
}

void RootServer::on_frame(Client& c, const std::string& frame) {
  if (c.joined) return;  // nothing more is expected from a rank that joined
  if (!c.challenge.empty()) return on_hello_auth(c, frame);
  Expected<Hello> h = decode_hello(frame);
  if (!h.ok()) return reject(c, h.status().message());
  if (h->unique_id != unique_id_) {
    return reject(c, "this root listener belongs to another communicator (root info mismatch)");
  }
  // Nothing of the hello counts before the client proved it knows the key.
  c.hello = std::move(h).value();
  c.hello_frame = frame;
  c.challenge = auth_nonce();
  WireWriter w;
  w.u8(kChallenge);
  w.bytes(c.challenge.data(), c.challenge.size());
  if (!send_frame(c.fd, w.data(), Clock::now() + std::chrono::milliseconds(500)).ok()) {
    ::close(c.fd);
    c.fd = -1;
  }
}

void RootServer::on_hello_auth(Client& c, const std::string& frame) {
  Expected<HelloAuth> a = decode_hello_auth(frame);
  if (!a.ok()) return reject(c, a.status().message());
  if (!auth_mac_matches(a->mac, auth_mac(key_, kHelloLabel, c.challenge, c.hello_frame))) {
    return reject(c, str_format("authentication failed: the hello of rank %d (host %s, pid %lld) "
                                "is not signed with this job's key (KILN_COMM_SECRET differs, or "
                                "not a rank of this job)",
                                c.hello.rank, c.hello.info.host.c_str(),
                                static_cast<long long>(c.hello.info.pid)));
  }
  c.nonce = a->nonce;
  const Hello* h = &c.hello;
  if (h->size <= 0 || static_cast<size_t>(h->size) > kMaxRanks) {
    return reject(c, str_format("world size %d is out of range", h->size));
  }
  if (size_ == 0) {
    size_ = h->size;
    joined_.assign(static_cast<size_t>(size_), -1);
  }
  if (h->size != size_) {
    return reject(c, str_format("rank %d (host %s, pid %lld) says the world has %d ranks, but an "
                                "earlier rank said %d",
                                h->rank, h->info.host.c_str(), static_cast<long long>(h->info.pid),
                                h->size, size_));
  }
  if (h->rank < 0 || h->rank >= size_) {
    return reject(c, str_format("rank %d is out of range for a world of %d ranks", h->rank, size_));
  }
  int& slot = joined_[static_cast<size_t>(h->rank)];
  if (slot >= 0) {
    const Hello& first = clients_[static_cast<size_t>(slot)].hello;
    return reject(c, str_format("rank %d joined twice (pid %lld on host %s, then pid %lld on host "
                                "%s)",
                                h->rank, static_cast<long long>(first.info.pid),
                                first.info.host.c_str(), static_cast<long long>(h->info.pid),
                                h->info.host.c_str()));
  }
  slot = static_cast<int>(&c - clients_.data());
  c.joined = true;
  progress_dirty_ = true;
}

void RootServer::send_progress() {
  WireWriter w;
  w.u8(kProgress);
  w.u32(static_cast<uint32_t>(size_));
  for (int slot : joined_) w.u8(slot >= 0 ? 1 : 0);
  for (Client& c : clients_) {
    if (c.fd >= 0 && c.joined) {
      send_frame(c.fd, w.data(), Clock::now() + std::chrono::milliseconds(200)).ignore_error();
    }
  }
}

void RootServer::send_table() {
  WireWriter w;  // the same table for every rank, each signed for its nonce
  w.u8(kTable);
  w.u64(random_id());  // the world's nonce
  bool tcp = false;
  for (int slot : joined_) tcp = tcp || clients_[static_cast<size_t>(slot)].hello.force_tcp;
  w.u8(tcp ? 1 : 0);
  w.u32(static_cast<uint32_t>(size_));
  for (int slot : joined_) {
    const Hello& h = clients_[static_cast<size_t>(slot)].hello;
    w.str(h.info.host);
    w.u64(h.info.host_id);
    w.u64(static_cast<uint64_t>(h.info.pid));
    w.str(h.data_addr);
  }
  auto deadline = Clock::now() + std::chrono::seconds(10);
  for (int slot : joined_) {
    Client& c = clients_[static_cast<size_t>(slot)];
    if (c.fd >= 0) send_frame(c.fd, w.data() + auth_mac(key_, kTableLabel, c.nonce, w.data()), deadline).ignore_error();
  }
}

void RootServer::run() {
  auto last_progress = Clock::now();
  while (!stop_.load() && !done_) {
    std::vector<pollfd> fds;
    fds.push_back(pollfd{listen_fd_, POLLIN, 0});
    for (Client& c : clients_) fds.push_back(pollfd{c.fd, POLLIN, 0});  // fd -1 is ignored
    int r = ::poll(fds.data(), fds.size(), 50);
    if (r < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        Client c;
        c.fd = fd;
        c.peer = socket_peer_addr(fd);
        clients_.push_back(std::move(c));
      } else if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the connection stays in the backlog; retry without spinning.
        if (!accept_failed_) {
          KILN_LOG(kWarning, "comm: rank 0's bootstrap listener cannot accept connections: %s",
                   std::strerror(errno));
        }
        accept_failed_ = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      Client& c = clients_[i - 1];
      if (c.fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        c.buf.append(buf, static_cast<size_t>(n));
        std::string frame;
        HelloCut cut = HelloCut::kFrame;
        while (c.fd >= 0 && (cut = cut_hello_frame(c.buf, &frame)) == HelloCut::kFrame) {
          c.buf.erase(0, 4 + frame.size());
          on_frame(c, frame);
        }
        if (cut == HelloCut::kTooBig) reject(c, "oversized bootstrap hello");
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        // A rank that joined and left still counts as joined (it may have given up at its
        // deadline; if it died, linking to it fails naming it). The table is not sent to it.
        ::close(c.fd);
        c.fd = -1;
      }
    }
    if (size_ > 0 && std::all_of(joined_.begin(), joined_.end(), [](int s) { return s >= 0; })) {
      send_table();
      done_ = true;
    } else if (progress_dirty_ && Clock::now() - last_progress > std::chrono::milliseconds(20)) {
      send_progress();
      progress_dirty_ = false;
      last_progress = Clock::now();
    }
  }
  if (!done_ && size_ > 0) {
    // Rank 0 gave up: tell the others which ranks never came, as their own deadline would.
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (joined_[static_cast<size_t>(r)] < 0) missing.push_back(r);
    }
    WireWriter w;
    w.u8(kTimedOut);
    w.str(str_format("rank(s) %s of %d never joined (rank 0 gave up waiting for them)",
                     rank_list(missing).c_str(), size_));
    for (Client& c : clients_) {
      if (c.fd >= 0 && c.joined) {
        send_frame(c.fd, w.data(), Clock::now() + std::chrono::milliseconds(200)).ignore_error();
      }
    }
  }
  for (Client& c : clients_) {
    if (c.fd >= 0) ::close(c.fd);
  }
  if (!rendezvous_file_.empty()) ::unlink(rendezvous_file_.c_str());
}

// Roots of this process by unique id. Never destroyed: detached threads may outlive main.
std::mutex& roots_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<uint64_t, std::shared_ptr<RootServer>>& roots() {
  static auto* m = new std::map<uint64_t, std::shared_ptr<RootServer>>;
  return *m;
}

Expected<WorldTable> decode_table(const std::string& frame, uint64_t unique_id, int size) {
  WireReader r(frame.data(), frame.size());
  uint8_t type = 0, tcp = 0;
  uint32_t n = 0;
  WorldTable t;
  t.unique_id = unique_id;
  if (!r.u8(&type) || type != kTable || !r.u64(&t.nonce) || !r.u8(&tcp) || !r.u32(&n) ||
      static_cast<int>(n) != size) {
    return invalid_argument("malformed world table from the root");
  }
  t.force_tcp = tcp != 0;
  for (uint32_t i = 0; i < n; ++i) {
    PeerInfo p;
    uint64_t pid = 0;
    std::string addr;
    if (!r.str(&p.host, kMaxHost) || !r.u64(&p.host_id) || !r.u64(&pid) ||
        !r.str(&addr, kMaxAddr)) {
      return invalid_argument("truncated world table from the root");
    }
    p.rank = static_cast<int>(i);
    p.pid = static_cast<int64_t>(pid);
    t.peers.push_back(std::move(p));
    t.data_addrs.push_back(std::move(addr));
  }
  if (r.remaining() != kAuthMacBytes) {
    return invalid_argument("world table from the root without its authentication code");
  }
  return t;
}

bool env_force_tcp() {
  const char* v = std::getenv("KILN_COMM_TRANSPORT");
  return v != nullptr && std::strcmp(v, "tcp") == 0;
}

}  // namespace

Expected<RootFrame> decode_root_frame(const std::string& frame, uint64_t unique_id, int size) {
  RootFrame out;
  uint8_t type = frame.empty() ? 0 : static_cast<uint8_t>(frame[0]);
  WireReader r(frame.data() + (frame.empty() ? 0 : 1), frame.empty() ? 0 : frame.size() - 1);
  if (type == kProgress) {
    out.kind = RootFrame::Kind::kProgress;
    uint32_t n = 0;
    if (r.u32(&n) && static_cast<int>(n) == size && r.remaining() >= n) {
      out.joined.resize(n);
      r.bytes(out.joined.data(), n);
    }
    return out;
  }
  if (type == kTimedOut || type == kError) {
    out.kind = type == kTimedOut ? RootFrame::Kind::kTimedOut : RootFrame::Kind::kError;
    r.str(&out.why, 4096);
    return out;
  }
  if (type == kChallenge) {
    out.kind = RootFrame::Kind::kChallenge;
    if (r.remaining() != kAuthNonceBytes) return invalid_argument("malformed challenge from the root");
    out.challenge = frame.substr(1);
    return out;
  }
  out.kind = RootFrame::Kind::kTable;
  KILN_ASSIGN_OR_RETURN(out.table, decode_table(frame, unique_id, size));
  out.mac = frame.substr(frame.size() - kAuthMacBytes);
  return out;
}

uint64_t random_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  v ^= static_cast<uint64_t>(Clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
  v ^= static_cast<uint64_t>(getpid()) << 17;
  return v == 0 ? 1 : v;
}

Expected<RootInfo> start_root_with_id(const std::string& bind, uint64_t unique_id,
                                      const std::string& rendezvous_file,
                                      const std::string& secret) {
  KILN_RETURN_IF_ERROR(load_hmac_sha256(), "starting the root listener");
  std::string host;
  int port = 0;
  if (!bind.empty()) {
    KILN_ASSIGN_OR_RETURN(auto hp, split_host_port(bind), "root address");
    host = hp.first;
    port = hp.second;
  }
  int bound = 0;
  KILN_ASSIGN_OR_RETURN(int fd, tcp_listen(host, port, &bound), "starting the root listener");
  RootInfo info;
  info.unique_id = unique_id;
  bool any = host.empty() || host == "*" || host == "0.0.0.0" || host == "::";
  info.addr = (any ? reachable_host_ip() : host.find(':') != std::string::npos ? "[" + host + "]"
                                                                               : host) +
              ":" + std::to_string(bound);
  auto server = std::make_shared<RootServer>(fd, unique_id, rendezvous_file, world_key(secret, unique_id));
  {
    std::lock_guard<std::mutex> lock(roots_mu());
    roots()[unique_id] = server;
  }
  std::thread([server, unique_id] {
    server->run();
    std::lock_guard<std::mutex> lock(roots_mu());
    auto it = roots().find(unique_id);
    if (it != roots().end() && it->second == server) roots().erase(it);
  }).detach();
  return info;
}

Expected<RootInfo> start_root(const std::string& bind) {
  return start_root_with_id(bind, random_id());
}

void stop_root(uint64_t unique_id) {
  std::lock_guard<std::mutex> lock(roots_mu());
  auto it = roots().find(unique_id);
  if (it != roots().end()) it->second->stop();
}

Status encode_root_info(const RootInfo& info, std::span<char> blob) {
  if (info.addr.empty() || info.addr.size() > kMaxAddr) {
    return invalid_argument("root address '%s' is empty or too long", info.addr.c_str());
  }
  size_t need = kRootInfoHeader + info.addr.size() + 8;
  if (blob.size() < need) {
    return invalid_argument("root info needs %zu bytes, the buffer has %zu", need, blob.size());
  }
  std::memset(blob.data(), 0, blob.size());
  WireWriter w;
  w.u32(kRootInfoMagic);
  w.u32(kRootInfoVersion);
  w.u64(info.unique_id);
  w.str(info.addr);
  uint64_t sum = fnv(w.data().data(), w.data().size());
  w.u64(sum);
  std::memcpy(blob.data(), w.data().data(), w.data().size());
  return ok_status();
}

Expected<RootInfo> decode_root_info(std::span<const char> blob) {
  WireReader r(blob.data(), blob.size());
  uint32_t magic = 0, version = 0;
  RootInfo info;
  if (!r.u32(&magic) || magic != kRootInfoMagic) {
    return invalid_argument("root info is not from kilnCommGetRootInfo (bad magic)");
  }
  if (!r.u32(&version) || version != kRootInfoVersion) {
    return invalid_argument("root info version %u is not supported (expected %u)", version,
                            kRootInfoVersion);
  }
  if (!r.u64(&info.unique_id) || !r.str(&info.addr, kMaxAddr) || info.addr.empty()) {
    return invalid_argument("root info is truncated or its address length is out of range");
  }
  size_t body = blob.size() - r.remaining();
  uint64_t sum = 0;
  if (!r.u64(&sum) || sum != fnv(blob.data(), body)) {
    return invalid_argument("root info is corrupt (checksum mismatch)");
  }
  for (char c : info.addr) {
    if (c < 0x21 || c > 0x7e) return invalid_argument("root info address has unprintable bytes");
  }
  KILN_RETURN_IF_ERROR(split_host_port(info.addr).status(), "root info");
  return info;
}

Expected<std::unique_ptr<Transport>> join_world(const JoinOptions& options,
                                                Clock::time_point deadline) {
  const auto join_start = Clock::now();
  const int rank = options.rank;
  const int size = options.size;
  if (size <= 0 || static_cast<size_t>(size) > kMaxRanks || rank < 0 || rank >= size) {
    return invalid_argument("join: rank %d is out of range for a world of %d ranks", rank, size);
  }
  KILN_RETURN_IF_ERROR(load_hmac_sha256(), "joining the world");
  struct StopRootOnFailure {
    uint64_t id;
    bool active;
    ~StopRootOnFailure() {
      if (active) stop_root(id);
    }
  } stop_guard{options.root.unique_id, rank == 0};

  // This rank's data listener first, so its address goes into the hello.
  int data_port = 0;
  KILN_ASSIGN_OR_RETURN(int listen_fd, tcp_listen("", 0, &data_port), "join: rank %d", rank);
  struct FdCloser {
    int fd;
    ~FdCloser() {
      if (fd >= 0) ::close(fd);
    }
  } listen_closer{listen_fd};

  Expected<int> root_fd = tcp_connect(options.root.addr, deadline);
  if (!root_fd.ok()) {
    return Status(root_fd.status().code(),
                  str_format("join: rank %d could not reach rank 0's bootstrap listener at %s: %s",
                             rank, options.root.addr.c_str(),
                             root_fd.status().message().c_str()));
  }
  FdCloser root_closer{*root_fd};

  Hello hello;
  hello.rank = rank;
  hello.size = size;
  hello.unique_id = options.root.unique_id;
  hello.force_tcp = options.force_tcp || env_force_tcp();
  hello.info = local_peer_info(rank);
  hello.data_addr = socket_local_ip(*root_fd) + ":" + std::to_string(data_port);
  const std::string hello_frame = encode_hello(hello);
  KILN_RETURN_IF_ERROR(send_frame(*root_fd, hello_frame, deadline),
                       "join: rank %d greeting the root at %s", rank, options.root.addr.c_str());
  const std::string key = world_key(options.secret, options.root.unique_id);
  const std::string nonce = auth_nonce();
  bool answered = false;  // the root's challenge

  std::vector<uint8_t> joined(static_cast<size_t>(size), 0);
  joined[static_cast<size_t>(rank)] = 1;
  WorldTable table;
  for (;;) {
    Expected<std::string> frame = recv_frame(*root_fd, deadline, 64u << 20);
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kDeadlineExceeded) {
        std::vector<int> missing;
        for (int r = 0; r < size; ++r) {
          if (!joined[static_cast<size_t>(r)]) missing.push_back(r);
        }
        double waited = std::chrono::duration<double>(Clock::now() - join_start).count();
        return deadline_exceeded("join: rank(s) %s of %d never joined within %.1f s (root %s)",
                                 missing.empty() ? "?" : rank_list(missing).c_str(), size, waited,
                                 options.root.addr.c_str());
      }
      return unavailable("join: rank %d lost rank 0's bootstrap listener at %s: %s", rank,
                         options.root.addr.c_str(), frame.status().message().c_str());
    }
    KILN_ASSIGN_OR_RETURN(RootFrame f, decode_root_frame(*frame, options.root.unique_id, size),
                          "join");
    if (f.kind == RootFrame::Kind::kProgress) {
      if (!f.joined.empty()) joined = std::move(f.joined);
      continue;
    }
    if (f.kind == RootFrame::Kind::kTimedOut) {
      return deadline_exceeded("join: %s (root %s)", f.why.c_str(), options.root.addr.c_str());
    }
    if (f.kind == RootFrame::Kind::kError) {
      return failed_precondition("join: rank %d rejected by the root at %s: %s", rank,
                                 options.root.addr.c_str(), f.why.c_str());
    }
    if (f.kind == RootFrame::Kind::kChallenge) {
      if (answered) {
        return failed_precondition("join: rank %d: the root at %s challenged it twice (not a Kiln "
                                   "root listener of this protocol)", rank, options.root.addr.c_str());
      }
      answered = true;
      HelloAuth a{auth_mac(key, kHelloLabel, f.challenge, hello_frame), nonce};
      KILN_RETURN_IF_ERROR(send_frame(*root_fd, encode_hello_auth(a), deadline),
                           "join: rank %d answering the root's challenge at %s", rank,
                           options.root.addr.c_str());
      continue;
    }
    const std::string signed_part = frame->substr(0, frame->size() - kAuthMacBytes);
    if (!answered || !auth_mac_matches(f.mac, auth_mac(key, kTableLabel, nonce, signed_part))) {
      return failed_precondition(
          "join: rank %d: the world table from %s is not signed with this job's key (not rank 0's "
          "listener of this job, or KILN_COMM_SECRET differs)", rank, options.root.addr.c_str());
    }
    table = std::move(f.table);
    table.key = key;
    break;
  }
  // Everyone joined; rank 0's root is done.

  std::vector<int> shm_peers, tcp_peers;
  const uint64_t my_host = table.peers[static_cast<size_t>(rank)].host_id;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    bool same_host = table.peers[static_cast<size_t>(p)].host_id == my_host;
    (same_host && !table.force_tcp ? shm_peers : tcp_peers).push_back(p);
  }
  std::vector<std::unique_ptr<Link>> links(static_cast<size_t>(size));
  links[static_cast<size_t>(rank)] = make_loopback_link(table.peers[static_cast<size_t>(rank)]);
  KILN_RETURN_IF_ERROR(make_shm_links(table, rank, shm_peers, deadline, &links),
                       "join: rank %d linking to the ranks of its host", rank);
  KILN_RETURN_IF_ERROR(make_tcp_links(table, rank, listen_fd, tcp_peers, deadline, &links),
                       "join: rank %d linking to the ranks of other hosts", rank);
  // TCP streams carry payload only: how far this rank got goes through a side channel.
  std::unique_ptr<StatusChannel> status;
  if (!tcp_peers.empty()) {
    listen_closer.fd = -1;  // the channel owns the listener now
    KILN_ASSIGN_OR_RETURN(status, start_tcp_status_channel(table, rank, listen_fd, tcp_peers),
                          "join: rank %d", rank);
  }
  stop_guard.active = false;
  return std::unique_ptr<Transport>(std::make_unique<LinkTransport>(
      rank, std::move(table.peers), std::move(links), std::move(status)));
}

}  // namespace kiln::comm
