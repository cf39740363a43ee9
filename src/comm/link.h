// The progress engine under every transport: a Link is one rank's non-blocking byte stream
// to one peer (a ring buffer in process or shared memory, or a TCP socket), and
// LinkTransport drives the sends and receives of an exchange over its links until done,
// checking the deadline, aborts and the peers' liveness while it waits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "core/status.h"

namespace kiln::comm {

// core/status.h has no "cancelled" code: an aborted communicator's errors use
// failed_precondition with a message ending in "communicator aborted"; is_cancelled tells
// them apart from other failed preconditions.
Status cancelled_error(const char* op);
bool is_cancelled(const Status& status);

// KILN_COMM_TIMEOUT in seconds (default 30), for messages and launch-time waits.
double comm_timeout_seconds();

// This process as a PeerInfo: host name, host id (equal for processes that share a host's
// memory and network: boot id, network and pid namespaces), pid.
PeerInfo local_peer_info(int rank);

// memcpy for the bulk copies of the transports. glibc's memcpy uses `rep movsb` for large
// copies, which on some x86 CPUs (AMD Zen here) runs >10x slower when the destination sits
// 1..63 bytes past the source modulo 4 KiB, exactly the case of a malloc'ed buffer (page
// offset 16) and a page-aligned ring. There this is a plain vector loop without that cliff;
// on other CPUs it is memcpy.
void copy_bytes(void* dst, const void* src, size_t n);

// Bytes copied or reduced before the counters are published, so the other side starts on
// a large message while the rest is still being copied (pipelining inside one transfer).
inline constexpr size_t kPiece = 64 << 10;

// "rank R (host H, pid P)", the way errors name a peer.
std::string describe_peer(const PeerInfo& peer);

// One rank's byte streams to and from one peer. Never blocks. Errors name the peer (the
// engine adds the operation).
class Link {
 public:
  virtual ~Link() = default;
  // Queues up to n bytes of p; *sent says how many were taken (0: no room now).
  virtual Status try_send(const char* p, size_t n, size_t* sent) = 0;
  // The contiguous bytes at the front of the incoming stream (*len 0: none yet). They stay
  // until consume().
  virtual Status peek(const char** p, size_t* len) = 0;
  virtual void consume(size_t n) = 0;
  // Receives up to n bytes into dst; *got says how many. Default: peek, copy, consume.
  virtual Status try_recv(char* dst, size_t n, size_t* got);
  // Called every few milliseconds while an exchange waits on this link: is the peer alive?
  virtual Status check_peer() { return ok_status(); }
  // A descriptor to poll() while idle (POLLIN: data, POLLOUT: room), or -1.
  virtual int poll_fd() const { return -1; }
  // Tells the peer this side is gone (abort, destruction, failure): its waits end promptly.
  // `culprit` >= 0: the rank this side failed because of, which the peer then names.
  virtual void close(int culprit = -1) {}
  // After an error of this link: the rank the peer said it failed because of, or -1.
  virtual int reported_culprit() { return -1; }
  // The second half of a close that left the peer time to read the culprit (TCP).
  virtual void finish_close() {}
  // The exchange failed: take back any send buffer the peer may still read from, waiting
  // until it no longer does (the caller frees or reuses the buffers when it returns).
  virtual void cancel_sends() {}
  // How many collectives this side has started (Transport::enter_collective), published for
  // the peer; and the peer's count, or -1 where the link cannot see it (TCP: the byte stream
  // carries payload only; LinkTransport asks the peer's StatusChannel instead).
  virtual void publish_collectives(uint64_t started) {}
  virtual int64_t peer_collectives() const { return -1; }
  // A mailbox for small messages beside the byte stream (SendOp::small); both ends of a link
  // have one or neither. Without one, small ops go through the byte stream.
  virtual bool has_mailbox() const { return false; }
  // Posts one message of n <= kSmallMessageBytes bytes; *sent false: no free slot now.
  virtual Status try_send_small(const char* p, size_t n, bool* sent);
  // Takes the next message, which must be n bytes, into dst; *got false: none yet.
  virtual Status try_recv_small(char* dst, size_t n, bool* got);

 protected:
  // One peek, copy and consume of at most n bytes into dst (*got 0: nothing there yet).
  Status recv_piece(char* dst, size_t n, size_t* got);
};

// A rank's side channel for what its TCP links cannot carry in band: it tells any peer that
// asks how many collectives this rank has started (answered from a thread of its own, so the
// answer comes while this rank's stream is blocked in something else), and asks its peers
// for theirs when an operation of this rank times out.
class StatusChannel {
 public:
  virtual ~StatusChannel() = default;
  // This rank's count (LinkTransport::enter_collective). Any thread.
  virtual void publish_collectives(uint64_t started) = 0;
  // Asks every rank of `ranks` at once; counts[i] gets ranks[i]'s count, or -1 when it did not
  // answer (dead, stopped, unreachable, no longer serving). Returns within a fraction of a
  // second whatever the peers do. counts.size() == ranks.size().
  virtual void query_collectives(std::span<const int> ranks, std::span<int64_t> counts) = 0;
  // Stops answering: joins the serving thread and closes its sockets (peers that ask later
  // get no answer). Thread-safe, idempotent, returns promptly; the destructor calls it.
  virtual void stop() = 0;
};

// A large send handed over by address: the receiver copies or reduces straight out of the
// sender's buffer (one copy instead of two through a ring). A receiver in the sender's
// process reads by pointer; one in another process of the host reads with
// process_vm_readv (cross-memory attach), into its destination or, for a reduction, into a
// piece-sized staging buffer. The slot then lives in the pair's shared-memory segment and
// `data` is an address of the sender's process.
struct DirectSlot {
  alignas(64) std::atomic<uint64_t> posted{0};  // descriptors posted so far (sender)
  uint64_t at = 0;                              // ring position the bytes follow
  const char* data = nullptr;
  uint64_t len = 0;
  alignas(64) std::atomic<uint64_t> taken{0};  // bytes of the current one the receiver is done with
  std::atomic<uint32_t> reading{0};            // the receiver is inside the sender's buffer
  alignas(64) std::atomic<uint32_t> revoked{0};  // the sender took the buffer back (failure)
};

// The two counters of one direction's single-producer single-consumer ring, each on its own
// cache line so the producer's and consumer's writes don't bounce one line, plus the flags
// each side sets when it goes away. Lives in process memory or a shared-memory segment.
struct RingControl {
  alignas(64) std::atomic<uint64_t> head{0};  // bytes ever written (producer)
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes ever read (consumer)
  // Read by the consumer on every look at an empty ring, written only when a side goes away:
  // the line stays in both sides' caches.
  alignas(64) std::atomic<uint32_t> producer_closed{0};
  std::atomic<uint32_t> consumer_closed{0};
  std::atomic<int32_t> producer_culprit{-1};  // see Link::close
  std::atomic<int32_t> consumer_culprit{-1};
  // Written by the producer at every collective, read by the consumer only when a wait times
  // out: on a line of its own, or each collective would take the line above from the
  // consumer's cache (one more cross-core miss per peer per operation).
  alignas(64) std::atomic<uint64_t> producer_collectives{0};  // see Link::publish_collectives
  char pad_[56];
  // The mailbox (Link::has_mailbox): message m (from 1) goes to mail[(m - 1) % kMailSlots],
  // its payload and length first, then seq = m. The consumer counts the messages it took in
  // mail_taken, on a line of its own that the producer reads only when it has filled every
  // slot since it last looked.
  static constexpr size_t kMailSlots = 8;
  struct MailSlot {
    alignas(64) std::atomic<uint64_t> seq{0};
    uint32_t len = 0;
    char payload[kSmallMessageBytes];
  };
  MailSlot mail[kMailSlots];
  alignas(64) std::atomic<uint64_t> mail_taken{0};
  char mail_pad_[56];
};
static_assert(sizeof(RingControl::MailSlot) == 64);
static_assert(sizeof(RingControl) == 256 + 64 * RingControl::kMailSlots + 64);

// A link over two rings (ours to send, the peer's to receive); capacity a power of two.
// peer_pid > 0: check_peer() sees whether that process still runs (shared memory);
// 0: the peer is in this process.
class RingLink : public Link {
 public:
  struct End {
    RingControl* control;
    char* data;
  };
  RingLink(End send, End recv, size_t capacity, PeerInfo peer, int64_t peer_pid,
           std::shared_ptr<void> keep_alive);
  ~RingLink() override;
  // Sends of at least kDirectMinBytes go by address through `send_direct` (ours; null: the
  // peer cannot read our memory), and the peer's through `recv_direct` (null: it sends none).
  // `remote_pid` 0: the peer is in this process (by pointer); > 0: the peer is that process
  // (cross-memory attach, see DirectSlot). The slots must be new (nothing posted yet).
  void enable_direct(DirectSlot* send_direct, DirectSlot* recv_direct, int64_t remote_pid = 0);
  Status try_send(const char* p, size_t n, size_t* sent) override;
  Status peek(const char** p, size_t* len) override;
  void consume(size_t n) override;
  Status try_recv(char* dst, size_t n, size_t* got) override;
  Status check_peer() override;
  void close(int culprit = -1) override;
  int reported_culprit() override;
  void cancel_sends() override;
  void publish_collectives(uint64_t started) override;
  int64_t peer_collectives() const override;
  bool has_mailbox() const override { return true; }
  Status try_send_small(const char* p, size_t n, bool* sent) override;
  Status try_recv_small(char* dst, size_t n, bool* got) override;

  static constexpr size_t kDirectMinBytes = 64 << 10;

 private:
  Status peer_gone(const char* what) const;
  // Whether the next bytes of the incoming stream are a direct send's (the ring holds none
  // and a descriptor is posted).
  bool direct_next();
  // Reads up to n bytes of the posted direct send from the peer process into dst (*got says
  // how many) and marks them taken.
  Status read_remote_direct(char* dst, size_t n, size_t* got);
  // The receiver is done with n more bytes of the posted direct send.
  void advance_direct(size_t n);

  End send_;
  End recv_;
  size_t capacity_;
  size_t mask_;
  PeerInfo peer_;
  int64_t peer_pid_;
  std::shared_ptr<void> keep_alive_;  // the memory the rings live in
  uint64_t send_head_ = 0;            // our copy of send_.control->head
  uint64_t send_tail_seen_ = 0;       // last tail of the consumer we read
  uint64_t recv_tail_ = 0;            // our copy of recv_.control->tail
  uint64_t recv_head_seen_ = 0;       // last head of the producer we read
  uint64_t mail_sent_ = 0;            // small messages posted (producer)
  uint64_t mail_taken_seen_ = 0;      // last mail_taken of the consumer we read
  uint64_t mail_received_ = 0;        // small messages taken (consumer)
  bool closed_ = false;
  // Direct sends (see DirectSlot).
  DirectSlot* send_direct_ = nullptr;
  DirectSlot* recv_direct_ = nullptr;
  uint64_t direct_posted_ = 0;    // sender: descriptors posted
  bool direct_active_ = false;    // sender: one is outstanding
  uint64_t direct_len_ = 0;       // sender: its length
  uint64_t direct_reported_ = 0;  // sender: bytes already reported as sent
  uint64_t direct_handled_ = 0;   // receiver: descriptors finished
  uint64_t direct_off_ = 0;       // receiver: bytes of the current one consumed
  bool in_direct_ = false;        // receiver: the last peek pointed into the sender's buffer
  int64_t direct_remote_pid_ = 0;  // the peer's process when it is not this one
  // Receiver, peer in another process: a direct send's bytes read for a peek (reductions).
  std::unique_ptr<char, void (*)(void*)> stage_{nullptr, std::free};
  size_t stage_pos_ = 0;
  size_t stage_len_ = 0;
  bool in_stage_ = false;  // the last peek pointed into stage_
};

// Whether process `pid` has exited (gone, or a zombie nobody reaped yet).
bool process_exited(int64_t pid);
// Whether process `pid` is stopped (SIGSTOP, a debugger).
bool process_stopped(int64_t pid);

// A Transport over one Link per peer (links[rank()] loops back to this rank). `status`, if
// any, tells the counts of the peers whose links cannot (Link::peer_collectives() < 0).
class LinkTransport : public Transport {
 public:
  LinkTransport(int rank, std::vector<PeerInfo> peers, std::vector<std::unique_ptr<Link>> links,
                std::unique_ptr<StatusChannel> status = nullptr);
  ~LinkTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }
  const std::vector<PeerInfo>& peers() const override { return peers_; }
  Status exchange(std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                  const Deadline& deadline) override;
  void enter_collective() override;
  void abort() override;

 private:
  // Records the first error; closes the links telling the peers `culprit` (the rank at fault).
  Status fail(Status status, int culprit = -1);
  // A link's error (from peer `peer`) with the operation's name, naming the rank at fault.
  Status peer_error(const char* op, int peer, const Status& status);
  // A peer of this host that exited or is stopped (the likely cause of a wait), or -1.
  int find_dead_or_stopped_peer(std::string* what) const;
  // The rank some peer said it gave up because of (Link::reported_culprit), or -1.
  int reported_culprit_of_any_peer() const;
  // A peer that has started fewer collectives than this rank (the one furthest behind,
  // lowest rank first), with its count; -1 when none is seen behind. Asks the status channel
  // for the peers the links cannot see (a fraction of a second at most).
  int find_peer_behind(int64_t* started);
  Status check_ops(std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                   const Deadline& deadline) const;

  int rank_;
  std::vector<PeerInfo> peers_;
  std::vector<std::unique_ptr<Link>> links_;
  int spin_polls_ = 256;  // polls spent spinning before timing the wait
  std::chrono::microseconds spin_time_{50};  // then spinning until this long, then yielding
  std::atomic<bool> aborted_{false};
  std::atomic<bool> broken_{false};
  std::mutex mu_;  // guards error_ and closing links
  Status error_;   // the first failure; later exchanges return it
  int error_culprit_ = -1;  // the rank error_ blames
  uint64_t collectives_started_ = 0;  // enter_collective() calls (the running thread's)
  std::unique_ptr<StatusChannel> status_;  // null: every link sees its peer's count
};

// A ring link whose rings live in this process's heap: the loopback link of every
// transport, and the links of make_in_process_world.
std::unique_ptr<Link> make_loopback_link(const PeerInfo& self);

}  // namespace kiln::comm
