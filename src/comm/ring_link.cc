// Links: the byte streams between two ranks. Link's defaults for small messages, RingLink
// (a pair of shared-memory rings, with direct reads of the peer's buffer for large messages
// on one host, process_vm_readv) and the loopback link of a rank to itself.
#include <sched.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "comm/link.h"

namespace kiln::comm {
namespace {

constexpr size_t kLoopbackCapacity = 256 << 10;

}  // namespace

Status Link::try_send_small(const char*, size_t, bool*) {
  return internal_error("this link has no mailbox for small messages");
}

Status Link::try_recv_small(char*, size_t, bool*) {
  return internal_error("this link has no mailbox for small messages");
}

Status Link::recv_piece(char* dst, size_t n, size_t* got) {
  const char* p = nullptr;
  size_t len = 0;
  *got = 0;
  KILN_RETURN_IF_ERROR(peek(&p, &len));
  if (len == 0) return ok_status();
  len = std::min({len, n, kPiece});
  copy_bytes(dst, p, len);
  consume(len);
  *got = len;
  return ok_status();
}

Status Link::try_recv(char* dst, size_t n, size_t* got) {
  *got = 0;
  while (*got < n) {
    size_t k = 0;
    KILN_RETURN_IF_ERROR(recv_piece(dst + *got, n - *got, &k));
    if (k == 0) break;
    *got += k;
  }
  return ok_status();
}

RingLink::RingLink(End send, End recv, size_t capacity, PeerInfo peer, int64_t peer_pid,
                   std::shared_ptr<void> keep_alive)
    : send_(send),
      recv_(recv),
      capacity_(capacity),
      mask_(capacity - 1),
      peer_(std::move(peer)),
      peer_pid_(peer_pid),
      keep_alive_(std::move(keep_alive)) {
  send_head_ = send_.control->head.load(std::memory_order_relaxed);
  send_tail_seen_ = send_.control->tail.load(std::memory_order_acquire);
  recv_tail_ = recv_.control->tail.load(std::memory_order_relaxed);
  recv_head_seen_ = recv_.control->head.load(std::memory_order_acquire);
}

RingLink::~RingLink() { close(); }

void RingLink::close(int culprit) {
  if (closed_) return;
  closed_ = true;
  send_.control->producer_culprit.store(culprit, std::memory_order_relaxed);
  recv_.control->consumer_culprit.store(culprit, std::memory_order_relaxed);
  send_.control->producer_closed.store(1, std::memory_order_release);
  recv_.control->consumer_closed.store(1, std::memory_order_release);
}

void RingLink::publish_collectives(uint64_t started) {
  send_.control->producer_collectives.store(started, std::memory_order_release);
}

int64_t RingLink::peer_collectives() const {
  return static_cast<int64_t>(recv_.control->producer_collectives.load(std::memory_order_acquire));
}

int RingLink::reported_culprit() {
  if (recv_.control->producer_closed.load(std::memory_order_acquire) != 0) {
    return recv_.control->producer_culprit.load(std::memory_order_relaxed);
  }
  if (send_.control->consumer_closed.load(std::memory_order_acquire) != 0) {
    return send_.control->consumer_culprit.load(std::memory_order_relaxed);
  }
  return -1;
}

Status RingLink::peer_gone(const char* what) const {
  return unavailable("%s %s", describe_peer(peer_).c_str(), what);
}

void RingLink::enable_direct(DirectSlot* send_direct, DirectSlot* recv_direct,
                             int64_t remote_pid) {
  send_direct_ = send_direct;
  recv_direct_ = recv_direct;
  direct_remote_pid_ = remote_pid;
  // Both slots are new (posted 0): the peer may post its first send before this runs.
  direct_posted_ = 0;
  direct_handled_ = 0;
}

void RingLink::cancel_sends() {
  if (!direct_active_) return;
  send_direct_->revoked.store(1, std::memory_order_seq_cst);
  direct_active_ = false;
  // A receiver in another process checks `revoked` after each read and drops what it read
  // (reading a buffer the sender has reused or freed harms only the receiver's copy, and
  // waiting here on a process that may be stopped mid-read could hang). One in this process
  // holds `reading` only while it copies one piece: wait that out.
  if (direct_remote_pid_ > 0) return;
  while (send_direct_->reading.load(std::memory_order_seq_cst) != 0) sched_yield();
}

Status RingLink::try_send(const char* p, size_t n, size_t* sent) {
  *sent = 0;
  if (send_direct_ != nullptr) {
    if (direct_active_) {
      uint64_t taken = send_direct_->taken.load(std::memory_order_acquire);
      *sent = static_cast<size_t>(taken - direct_reported_);
      direct_reported_ = taken;
      if (taken == direct_len_) {
        direct_active_ = false;
      } else if (*sent == 0 &&
                 send_.control->consumer_closed.load(std::memory_order_acquire) != 0) {
        return peer_gone("closed its connection");
      }
      return ok_status();
    }
    if (n >= kDirectMinBytes) {
      // Everything before these bytes is in the ring; the receiver takes the ring up to
      // `at`, then reads from p. The next bytes of the stream wait until it has all of them.
      DirectSlot* d = send_direct_;
      d->at = send_head_;
      d->data = p;
      d->len = n;
      d->taken.store(0, std::memory_order_relaxed);
      d->revoked.store(0, std::memory_order_relaxed);
      d->posted.store(++direct_posted_, std::memory_order_release);
      direct_active_ = true;
      direct_len_ = n;
      direct_reported_ = 0;
      return ok_status();
    }
  }
  size_t free = capacity_ - static_cast<size_t>(send_head_ - send_tail_seen_);
  if (free < n && free < capacity_) {
    send_tail_seen_ = send_.control->tail.load(std::memory_order_acquire);
    free = capacity_ - static_cast<size_t>(send_head_ - send_tail_seen_);
  }
  if (free == 0) {
    if (send_.control->consumer_closed.load(std::memory_order_acquire) != 0) {
      return peer_gone("closed its connection");
    }
    return ok_status();
  }
  size_t left = std::min(n, free);
  while (left > 0) {
    size_t off = static_cast<size_t>(send_head_) & mask_;
    size_t piece = std::min({left, kPiece, capacity_ - off});
    copy_bytes(send_.data + off, p + *sent, piece);
    send_head_ += piece;
    send_.control->head.store(send_head_, std::memory_order_release);
    *sent += piece;
    left -= piece;
  }
  return ok_status();
}

bool RingLink::direct_next() {
  if (recv_direct_ == nullptr || recv_head_seen_ != recv_tail_ ||
      recv_direct_->posted.load(std::memory_order_acquire) <= direct_handled_) {
    return false;
  }
  // The sender wrote the ring up to the descriptor's position before posting it: the head
  // read after the descriptor shows every byte that precedes the direct ones.
  recv_head_seen_ = recv_.control->head.load(std::memory_order_acquire);
  return recv_head_seen_ == recv_tail_;
}

void RingLink::advance_direct(size_t n) {
  DirectSlot* d = recv_direct_;
  direct_off_ += n;
  const uint64_t len = d->len;
  bool done = direct_off_ == len;
  if (done) {
    ++direct_handled_;
    direct_off_ = 0;
  }
  d->taken.store(done ? len : direct_off_, std::memory_order_release);
}

Status RingLink::read_remote_direct(char* dst, size_t n, size_t* got) {
  DirectSlot* d = recv_direct_;
  n = std::min(n, static_cast<size_t>(d->len - direct_off_));
  iovec local{dst, n};
  iovec remote{const_cast<char*>(d->data) + direct_off_, n};
  ssize_t k = process_vm_readv(static_cast<pid_t>(direct_remote_pid_), &local, 1, &remote, 1, 0);
  int err = errno;
  // After the read: bytes the sender took back while they were read are not delivered.
  if (d->revoked.load(std::memory_order_seq_cst) != 0) {
    return peer_gone("gave up on a transfer to this rank");
  }
  if (k <= 0) {
    if (process_exited(direct_remote_pid_)) return peer_gone("exited");
    return unavailable("cannot read the send buffer of %s (cross-memory attach): %s",
                       describe_peer(peer_).c_str(), std::strerror(err));
  }
  *got = static_cast<size_t>(k);
  advance_direct(*got);
  return ok_status();
}

Status RingLink::peek(const char** p, size_t* len) {
  if (stage_pos_ < stage_len_) {  // a direct send's bytes read before
    *p = stage_.get() + stage_pos_;
    *len = stage_len_ - stage_pos_;
    in_stage_ = true;
    return ok_status();
  }
  size_t avail = static_cast<size_t>(recv_head_seen_ - recv_tail_);
  if (avail == 0) {
    if (direct_next()) {
      DirectSlot* d = recv_direct_;
      if (direct_remote_pid_ > 0) {
        if (stage_ == nullptr) {
          stage_.reset(static_cast<char*>(std::aligned_alloc(64, kPiece)));
          if (stage_ == nullptr) return resource_exhausted("no memory for a staging buffer");
        }
        size_t got = 0;
        KILN_RETURN_IF_ERROR(read_remote_direct(stage_.get(), kPiece, &got));
        stage_pos_ = 0;
        stage_len_ = got;
        *p = stage_.get();
        *len = got;
        in_stage_ = true;
        return ok_status();
      }
      // Dekker with cancel_sends(): announce the read, then make sure the buffer is still
      // lent; the sender waits for `reading` to drop before it takes the buffer back.
      d->reading.store(1, std::memory_order_seq_cst);
      if (d->revoked.load(std::memory_order_seq_cst) != 0) {
        d->reading.store(0, std::memory_order_release);
        return peer_gone("gave up on a transfer to this rank");
      }
      *p = d->data + direct_off_;
      *len = static_cast<size_t>(d->len - direct_off_);
      in_direct_ = true;
      return ok_status();
    }
    recv_head_seen_ = recv_.control->head.load(std::memory_order_acquire);
    avail = static_cast<size_t>(recv_head_seen_ - recv_tail_);
    if (avail == 0 && recv_.control->producer_closed.load(std::memory_order_acquire) != 0) {
      // Bytes written before the close are still delivered; only an empty ring fails.
      recv_head_seen_ = recv_.control->head.load(std::memory_order_acquire);
      avail = static_cast<size_t>(recv_head_seen_ - recv_tail_);
      if (avail == 0) return peer_gone("closed its connection");
    }
  }
  size_t off = static_cast<size_t>(recv_tail_) & mask_;
  *p = recv_.data + off;
  *len = std::min(avail, capacity_ - off);
  return ok_status();
}

void RingLink::consume(size_t n) {
  if (in_stage_) {
    in_stage_ = false;
    stage_pos_ += n;
    return;
  }
  if (in_direct_) {
    in_direct_ = false;
    advance_direct(n);
    recv_direct_->reading.store(0, std::memory_order_release);
    return;
  }
  recv_tail_ += n;
  recv_.control->tail.store(recv_tail_, std::memory_order_release);
}

Status RingLink::try_recv(char* dst, size_t n, size_t* got) {
  if (direct_remote_pid_ == 0) return Link::try_recv(dst, n, got);
  // A direct send of another process is read straight into the destination: one copy.
  *got = 0;
  while (*got < n) {
    size_t k = 0;
    if (stage_pos_ == stage_len_ && direct_next()) {
      KILN_RETURN_IF_ERROR(read_remote_direct(dst + *got, n - *got, &k));
    } else {
      KILN_RETURN_IF_ERROR(recv_piece(dst + *got, n - *got, &k));
      if (k == 0) break;
    }
    *got += k;
  }
  return ok_status();
}

Status RingLink::check_peer() {
  if (peer_pid_ > 0 && process_exited(peer_pid_)) return peer_gone("exited");
  if (send_.control->consumer_closed.load(std::memory_order_acquire) != 0 &&
      (send_head_ != send_.control->tail.load(std::memory_order_acquire) ||
       mail_sent_ != send_.control->mail_taken.load(std::memory_order_acquire))) {
    return peer_gone("closed its connection");
  }
  return ok_status();
}

Status RingLink::try_send_small(const char* p, size_t n, bool* sent) {
  *sent = false;
  if (n > kSmallMessageBytes) {
    return internal_error("a small message of %zu bytes (at most %zu)", n, kSmallMessageBytes);
  }
  RingControl* c = send_.control;
  if (mail_sent_ - mail_taken_seen_ >= RingControl::kMailSlots) {
    mail_taken_seen_ = c->mail_taken.load(std::memory_order_acquire);
    if (mail_sent_ - mail_taken_seen_ >= RingControl::kMailSlots) {
      if (c->consumer_closed.load(std::memory_order_acquire) != 0) {
        return peer_gone("closed its connection");
      }
      return ok_status();
    }
  }
  // The consumer is done with this slot (mail_taken above): payload first, then seq.
  RingControl::MailSlot& slot = c->mail[mail_sent_ % RingControl::kMailSlots];
  slot.len = static_cast<uint32_t>(n);
  std::memcpy(slot.payload, p, n);
  slot.seq.store(++mail_sent_, std::memory_order_release);
  *sent = true;
  return ok_status();
}

Status RingLink::try_recv_small(char* dst, size_t n, bool* got) {
  *got = false;
  RingControl* c = recv_.control;
  RingControl::MailSlot& slot = c->mail[mail_received_ % RingControl::kMailSlots];
  if (slot.seq.load(std::memory_order_acquire) != mail_received_ + 1) {
    // Messages posted before a close are still delivered; only a missing one fails.
    if (c->producer_closed.load(std::memory_order_acquire) != 0 &&
        slot.seq.load(std::memory_order_acquire) != mail_received_ + 1) {
      return peer_gone("closed its connection");
    }
    return ok_status();
  }
  if (slot.len != n) {
    return internal_error("%s sent a small message of %u bytes where this rank expects %zu",
                          describe_peer(peer_).c_str(), slot.len, n);
  }
  std::memcpy(dst, slot.payload, n);
  c->mail_taken.store(++mail_received_, std::memory_order_release);
  *got = true;
  return ok_status();
}

namespace {

struct HeapRing {
  RingControl control;
  char* data = nullptr;
  ~HeapRing() { std::free(data); }
};

}  // namespace

std::unique_ptr<Link> make_loopback_link(const PeerInfo& self) {
  auto ring = std::make_shared<HeapRing>();
  ring->data = static_cast<char*>(std::aligned_alloc(64, kLoopbackCapacity));
  RingLink::End end{&ring->control, ring->data};
  return std::make_unique<RingLink>(end, end, kLoopbackCapacity, self, 0, ring);
}

}  // namespace kiln::comm
