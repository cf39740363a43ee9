// Shared-memory links between processes of one host: one POSIX shared-memory segment per
// pair of ranks holding a ring buffer per direction. The lower rank creates the segment,
// the higher maps it and unlinks the name at once, so nothing is left behind when either
// process dies later.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "comm/bootstrap.h"

namespace kiln::comm {
namespace {

constexpr uint64_t kShmMagic = 0x4b494c4e53484d32ull;  // "KILNSHM2" (RingControl with a mailbox)
constexpr size_t kHeaderBytes = 8192;  // header page + the two rings' control blocks
constexpr size_t kControlOffset = 4096;
constexpr size_t kMaxCapacity = 4u << 20;
constexpr size_t kMinCapacity = 64u << 10;
static_assert(kControlOffset + 2 * sizeof(RingControl) <= kHeaderBytes);

struct SegmentHeader {
  std::atomic<uint64_t> magic;  // kShmMagic ^ nonce, stored last by the creator
  uint64_t capacity;
  int64_t creator_pid;
  std::atomic<uint32_t> attached;  // set by the other rank once it mapped the segment
};

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
  SegmentHeader* h = map->header();
  h->capacity = capacity;
  h->creator_pid = static_cast<int64_t>(getpid());
  h->attached.store(0, std::memory_order_relaxed);
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
    const PeerInfo& peer = table.peers[static_cast<size_t>(p)];
    while (map->header()->attached.load(std::memory_order_acquire) == 0) {
      if (process_exited(peer.pid)) {
        return unavailable("%s exited before mapping its shared memory",
                           describe_peer(peer).c_str());
      }
      if (Clock::now() >= deadline) {
        return deadline_exceeded("%s did not map its shared memory in time",
                                 describe_peer(peer).c_str());
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    map->unlink_name.clear();  // the peer unlinked it
  }
  for (int p : peers) {
    const auto& map = maps[static_cast<size_t>(p)];
    size_t cap = static_cast<size_t>(map->header()->capacity);
    // Ring 0 carries lower -> higher rank, ring 1 higher -> lower.
    int out = rank < p ? 0 : 1;
    int in = 1 - out;
    const PeerInfo& peer = table.peers[static_cast<size_t>(p)];
    touch_pages(map->data(out, cap), cap, /*write=*/true);
    touch_pages(map->data(in, cap), cap, /*write=*/false);
    (*links)[static_cast<size_t>(p)] = std::make_unique<RingLink>(
        RingLink::End{map->control(out), map->data(out, cap)},
        RingLink::End{map->control(in), map->data(in, cap)}, cap, peer, peer.pid, map);
  }
  return ok_status();
}

}  // namespace kiln::comm
