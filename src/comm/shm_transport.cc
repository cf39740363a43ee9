// Shared-memory links between processes of one host: one POSIX shared-memory segment per
// pair of ranks holding a ring buffer per direction. The lower rank creates the segment,
// the higher maps it and unlinks the name at once, so nothing is left behind when either
// process dies later.
//
// With KILN_COMM_SHM_SINGLE_COPY=1, sends of at least kDirectMinBytes skip the ring: the
// receiver reads them out of the sender's buffer with process_vm_readv (one copy instead of
// two), where the kernel lets it (same user, ptrace scope; probed at the join). Off by
// default: on the 2-core VM Kiln is measured on, process_vm_readv moved 3.0 GB/s at 16 MiB
// and 11 GB/s at 1 MiB against memcpy's 5.6 and 20, and a 2-rank AllReduce of 1-64 MiB was
// 5-25% slower with it (4 ranks: 1 MiB ~5% faster, 16 MiB ~10% slower).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "comm/bootstrap.h"

namespace kiln::comm {
namespace {

constexpr uint64_t kShmMagic = 0x4b494c4e53484d33ull;  // "KILNSHM3" (with direct slots)
constexpr size_t kHeaderBytes = 8192;  // header page + the two rings' control blocks
constexpr size_t kControlOffset = 4096;
constexpr size_t kMaxCapacity = 4u << 20;
constexpr size_t kMinCapacity = 64u << 10;
static_assert(kControlOffset + 2 * sizeof(RingControl) <= kHeaderBytes);

// A word each process publishes the address of, for its peers to try process_vm_readv on.
const volatile uint64_t kProbeWord = kShmMagic;

enum : uint32_t { kProbeUnknown = 0, kProbeYes = 1, kProbeNo = 2 };
constexpr uint64_t kProbeOff = ~uint64_t{0};  // published by a side with single copy off

// What one side of a pair (0: the lower rank) tells the other at the join.
struct SegmentSide {
  std::atomic<uint64_t> probe_addr{0};     // &kProbeWord in this side's process, or kProbeOff
  std::atomic<uint32_t> can_read_peer{0};  // kProbe*: whether this side reads the other's memory
};

struct SegmentHeader {
  std::atomic<uint64_t> magic{0};  // kShmMagic ^ nonce, stored last by the creator
  uint64_t capacity = 0;
  int64_t creator_pid = 0;
  std::atomic<uint32_t> attached{0};  // set by the other rank once it mapped the segment
  SegmentSide sides[2];
  DirectSlot direct[2];  // single-copy sends, indexed like the rings (0: lower -> higher)
};
static_assert(sizeof(SegmentHeader) <= kControlOffset);

// The mapping; the creator also unlinks the name if the peer never did.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  std::string unlink_name;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
    if (!unlink_name.empty()) shm_unlink(unlink_name.c_str());
  }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(addr); }
  RingControl* control(int i) const {
    return reinterpret_cast<RingControl*>(static_cast<char*>(addr) + kControlOffset) + i;
  }
  char* data(int i, size_t capacity) const {
    return static_cast<char*>(addr) + kHeaderBytes + static_cast<size_t>(i) * capacity;
  }
};

std::string segment_name(const WorldTable& t, int lo, int hi) {
  return str_format("/kiln-comm-%016llx-%016llx-%d-%d",
                    static_cast<unsigned long long>(t.unique_id),
                    static_cast<unsigned long long>(t.nonce), lo, hi);
}

size_t ring_capacity(size_t local_peers) {
  size_t cap = kMaxCapacity;
  if (const char* v = std::getenv("KILN_COMM_SHM_BUFFER")) {
    char* end = nullptr;
    unsigned long long b = std::strtoull(v, &end, 10);
    if (end != v && b >= kMinCapacity) {
      cap = kMinCapacity;
      while (cap * 2 <= b && cap * 2 <= (256u << 20)) cap *= 2;
    }
  }
  // Keep a rank's rings within ~256 MiB however many local peers it has.
  while (cap > kMinCapacity && local_peers * 2 * cap > (256u << 20)) cap /= 2;
  return cap;
}

Expected<std::shared_ptr<Mapping>> create_segment(const std::string& name, size_t capacity,
                                                  uint64_t nonce) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    shm_unlink(name.c_str());  // a stale segment of a dead world with the same name
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) {
    return unavailable("cannot create shared memory %s: %s", name.c_str(), std::strerror(errno));
  }
  auto map = std::make_shared<Mapping>();
  map->unlink_name = name;
  // Reserve the pages now (posix_fallocate) so a full /dev/shm is an error here rather
  // than a SIGBUS on first touch; halve the rings while it does not fit.
  int err = 0;
  for (;;) {
    size_t size = kHeaderBytes + 2 * capacity;
    const off_t bytes = static_cast<off_t>(size);
    err = ftruncate(fd, bytes) == 0 ? posix_fallocate(fd, 0, bytes) : errno;
    if (err == 0) {
      map->size = size;
      break;
    }
    if (capacity <= kMinCapacity) break;
    capacity /= 2;
  }
  if (err != 0) {
    close(fd);
    return resource_exhausted("cannot size shared memory %s: %s (is /dev/shm full?)", name.c_str(),
                              std::strerror(err));
  }
  map->addr = mmap(nullptr, map->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (map->addr == MAP_FAILED) {
    map->addr = nullptr;
    return unavailable("cannot map shared memory %s: %s", name.c_str(), std::strerror(errno));
  }
  SegmentHeader* h = new (map->addr) SegmentHeader();
  h->capacity = capacity;
  h->creator_pid = static_cast<int64_t>(getpid());
  new (map->control(0)) RingControl();
  new (map->control(1)) RingControl();
  h->magic.store(kShmMagic ^ nonce, std::memory_order_release);
  return map;
}

Expected<std::shared_ptr<Mapping>> open_segment(const std::string& name, uint64_t nonce,
                                                const PeerInfo& creator,
                                                Clock::time_point deadline) {
  for (;;) {
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= kHeaderBytes) {
        void* head = mmap(nullptr, kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (head != MAP_FAILED) {
          auto* h = static_cast<SegmentHeader*>(head);
          uint64_t magic = h->magic.load(std::memory_order_acquire);
          size_t capacity = static_cast<size_t>(h->capacity);
          munmap(head, kHeaderBytes);
          size_t size = kHeaderBytes + 2 * capacity;
          if (magic == (kShmMagic ^ nonce) && fstat(fd, &st) == 0 &&
              static_cast<size_t>(st.st_size) >= size && capacity >= kMinCapacity &&
              (capacity & (capacity - 1)) == 0) {
            auto map = std::make_shared<Mapping>();
            map->size = size;
            map->addr =
                mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
            close(fd);
            if (map->addr == MAP_FAILED) {
              map->addr = nullptr;
              return unavailable("cannot map shared memory %s: %s", name.c_str(),
                                 std::strerror(errno));
            }
            shm_unlink(name.c_str());  // both sides have it: the name is no longer needed
            map->header()->attached.store(1, std::memory_order_release);
            return map;
          }
        }
      }
      close(fd);
    } else if (errno != ENOENT) {
      return unavailable("cannot open shared memory %s: %s", name.c_str(), std::strerror(errno));
    }
    if (process_exited(creator.pid)) {
      shm_unlink(name.c_str());
      return unavailable("%s exited before setting up its shared memory",
                         describe_peer(creator).c_str());
    }
    if (Clock::now() >= deadline) {
      return deadline_exceeded("%s did not set up its shared memory %s in time",
                               describe_peer(creator).c_str(), name.c_str());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

// Touches every page of a ring once, writing the one this rank writes (its send ring) and
// reading the one it reads. The mappings are MAP_POPULATE'd, but under a hypervisor with
// shadow page tables each process's first touch of a page still costs an exit: on the 2-core
// VM Kiln is measured on, the first pass through a 4 MiB ring ran at ~0.25 GB/s (a 64 KiB
// AllReduce between two processes took 270 us until about 100 of them had gone through the
// ring, 20 us after). Paid here once, at the join, instead of by the first operations.
void touch_pages(char* data, size_t bytes, bool write) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  volatile char* p = data;
  for (size_t off = 0; off < bytes; off += page) {
    if (write)
      p[off] = 0;
    else
      (void)p[off];
  }
}

// Waits until `flag` is no longer `unset`, failing if the peer exits or the deadline passes.
template <typename T>
Status wait_for_peer(const std::atomic<T>& flag, T unset, const PeerInfo& peer,
                     Clock::time_point deadline, const char* what) {
  while (flag.load(std::memory_order_acquire) == unset) {
    if (process_exited(peer.pid)) {
      return unavailable("%s exited before it could %s", describe_peer(peer).c_str(), what);
    }
    if (Clock::now() >= deadline) {
      return deadline_exceeded("%s did not %s in time", describe_peer(peer).c_str(), what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ok_status();
}

bool single_copy_enabled() {
  const char* v = std::getenv("KILN_COMM_SHM_SINGLE_COPY");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Whether this process may read process `pid`'s memory: reads the probe word at `addr`.
bool can_read_memory_of(int64_t pid, uint64_t addr) {
  uint64_t word = 0;
  iovec local{&word, sizeof word};
  iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), sizeof word};
  return process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof word) &&
         word == kShmMagic;
}

}  // namespace

Status make_shm_links(const WorldTable& table, int rank, const std::vector<int>& peers,
                      Clock::time_point deadline, std::vector<std::unique_ptr<Link>>* links) {
  const size_t capacity = ring_capacity(peers.size());
  // Create every segment this rank owns first, then open the peers', so no rank waits on
  // one that is itself waiting.
  std::vector<std::shared_ptr<Mapping>> maps(table.peers.size());
  for (int p : peers) {
    if (p < rank) continue;
    KILN_ASSIGN_OR_RETURN(maps[static_cast<size_t>(p)],
                          create_segment(segment_name(table, rank, p), capacity, table.nonce));
  }
  for (int p : peers) {
    if (p > rank) continue;
    KILN_ASSIGN_OR_RETURN(maps[static_cast<size_t>(p)],
                          open_segment(segment_name(table, p, rank), table.nonce,
                                       table.peers[static_cast<size_t>(p)], deadline));
  }
  // Joined means linked both ways: wait until every peer mapped this rank's segments, so
  // a rank that finishes early and leaves cannot take a segment away from a slow joiner.
  for (int p : peers) {
    if (p < rank) continue;
    const auto& map = maps[static_cast<size_t>(p)];
    KILN_RETURN_IF_ERROR(wait_for_peer(map->header()->attached, 0u,
                                       table.peers[static_cast<size_t>(p)], deadline,
                                       "map its shared memory"));
    map->unlink_name.clear();  // the peer unlinked it
  }
  // Single copy: each side publishes where its probe word is (or that it wants none), tries
  // to read the peer's, and says whether it could; a direction goes by address only where
  // both sides want it and the reader can read the sender's memory.
  const bool single_copy = single_copy_enabled();
  const uint64_t probe_addr = single_copy ? reinterpret_cast<uintptr_t>(&kProbeWord) : kProbeOff;
  for (int p : peers) {
    maps[static_cast<size_t>(p)]->header()->sides[rank < p ? 0 : 1].probe_addr.store(
        probe_addr, std::memory_order_release);
  }
  for (int p : peers) {
    SegmentHeader* h = maps[static_cast<size_t>(p)]->header();
    const PeerInfo& peer = table.peers[static_cast<size_t>(p)];
    const std::atomic<uint64_t>& peer_probe = h->sides[rank < p ? 1 : 0].probe_addr;
    KILN_RETURN_IF_ERROR(wait_for_peer(peer_probe, uint64_t{0}, peer, deadline,
                                       "finish the join"));
    const uint64_t addr = peer_probe.load(std::memory_order_acquire);
    const bool readable = single_copy && addr != kProbeOff && can_read_memory_of(peer.pid, addr);
    const int side = rank < p ? 0 : 1;
    h->sides[side].can_read_peer.store(readable ? kProbeYes : kProbeNo,
                                       std::memory_order_release);
  }
  for (int p : peers) {
    const auto& map = maps[static_cast<size_t>(p)];
    SegmentHeader* h = map->header();
    size_t cap = static_cast<size_t>(h->capacity);
    // Ring 0 carries lower -> higher rank, ring 1 higher -> lower.
    int out = rank < p ? 0 : 1;
    int in = 1 - out;
    const PeerInfo& peer = table.peers[static_cast<size_t>(p)];
    KILN_RETURN_IF_ERROR(wait_for_peer(h->sides[in].can_read_peer, uint32_t{kProbeUnknown},
                                       peer, deadline, "finish the join"));
    const bool we_read_peer = h->sides[out].can_read_peer.load() == kProbeYes;
    const bool peer_reads_us = h->sides[in].can_read_peer.load() == kProbeYes;
    touch_pages(map->data(out, cap), cap, /*write=*/true);
    touch_pages(map->data(in, cap), cap, /*write=*/false);
    (*links)[static_cast<size_t>(p)] = std::make_unique<RingLink>(
        RingLink::End{map->control(out), map->data(out, cap)},
        RingLink::End{map->control(in), map->data(in, cap)}, cap, peer, peer.pid, map);
    if (we_read_peer || peer_reads_us) {
      static_cast<RingLink*>((*links)[static_cast<size_t>(p)].get())
          ->enable_direct(peer_reads_us ? &h->direct[out] : nullptr,
                          we_read_peer ? &h->direct[in] : nullptr, peer.pid);
    }
  }
  return ok_status();
}

}  // namespace kiln::comm
