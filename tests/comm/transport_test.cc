// Transport tests: byte streams, ordering, reduction across element boundaries, deadlines
// and aborts of the in-process world; shared-memory and TCP worlds of forked processes
// (intact streams up to 16 MiB, killed and stalled peers); root info and bootstrap errors.
#include <gtest/gtest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/link.h"
#include "comm/transport.h"
#include "kiln/comm.h"

namespace kiln::comm {
namespace {

using std::chrono::milliseconds;



void add_i32(void* acc, const void* in, size_t bytes) {
  for (size_t i = 0; i < bytes / 4; ++i) {
    uint32_t a, b;  // wrapping int32 addition
    std::memcpy(&a, static_cast<char*>(acc) + 4 * i, 4);
    std::memcpy(&b, static_cast<const char*>(in) + 4 * i, 4);
    a += b;
    std::memcpy(static_cast<char*>(acc) + 4 * i, &a, 4);
  }
}
void add_i32_to(void* out, const void* x, const void* in, size_t bytes) {
  for (size_t i = 0; i < bytes / 4; ++i) {
    uint32_t a, b;
    std::memcpy(&a, static_cast<const char*>(x) + 4 * i, 4);
    std::memcpy(&b, static_cast<const char*>(in) + 4 * i, 4);
    a += b;
    std::memcpy(static_cast<char*>(out) + 4 * i, &a, 4);
  }
}
const Reducer kSumI32{4, add_i32, add_i32_to};
const Reducer kSumI32InPlaceOnly{4, add_i32};

void add_f64(void* acc, const void* in, size_t bytes) {
  for (size_t i = 0; i < bytes / 8; ++i) {
    double a, b;
    std::memcpy(&a, static_cast<char*>(acc) + 8 * i, 8);
    std::memcpy(&b, static_cast<const char*>(in) + 8 * i, 8);
    a += b;
    std::memcpy(static_cast<char*>(acc) + 8 * i, &a, 8);
  }
}
const Reducer kSumF64{8, add_f64};

Deadline in(milliseconds ms, const char* op = "Test") { return Deadline{Clock::now() + ms, op}; }

// A byte pattern that differs per (sender, receiver, position).
std::vector<char> pattern(size_t n, int from, int to, int salt = 0) {
  std::vector<char> v(n);
  uint32_t x = static_cast<uint32_t>(from * 7919 + to * 104729 + salt * 31 + 1);
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<char>(x >> 24);
  }
  return v;
}

// ---- In-process world -----------------------------------------------------------------------

TEST(InProcessTransport, RanksAndPeers) {
  auto world = make_in_process_world(3);
  ASSERT_EQ(world.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(world[r]->rank(), r);
    EXPECT_EQ(world[r]->size(), 3);
    ASSERT_EQ(world[r]->peers().size(), 3u);
    EXPECT_EQ(world[r]->peers()[2].rank, 2);
    EXPECT_EQ(world[r]->peers()[0].host_id, world[r]->peers()[1].host_id);
  }
}

TEST(InProcessTransport, StreamKeepsOrderAcrossOpsOfDifferentSplits) {
  auto world = make_in_process_world(2);
  // Rank 0 sends 0, 5, 1 MiB + 3 and 9 MiB bytes; rank 1 receives them in other pieces, and
  // several ops name the same peer in one exchange.
  std::vector<size_t> sizes = {0, 5, (1u << 20) + 3, 9u << 20};
  std::vector<char> all;
  std::vector<std::vector<char>> parts;
  for (size_t i = 0; i < sizes.size(); ++i) {
    parts.push_back(pattern(sizes[i], 0, 1, static_cast<int>(i)));
    all.insert(all.end(), parts.back().begin(), parts.back().end());
  }
  std::vector<char> got(all.size(), 0);
  Status s0, s1;
  std::thread t0([&] {
    std::vector<SendOp> sends;
    for (auto& p : parts) sends.push_back(SendOp{1, p.data(), p.size()});
    s0 = world[0]->exchange(sends, {}, in(milliseconds(20000)));
  });
  std::thread t1([&] {
    std::vector<RecvOp> recvs;
    size_t off = 0;
    for (size_t piece : {size_t{1}, size_t{7}, size_t{3} << 20, all.size() - (3u << 20) - 8}) {
      recvs.push_back(RecvOp{0, got.data() + off, piece});
      off += piece;
    }
    s1 = world[1]->exchange({}, recvs, in(milliseconds(20000)));
  });
  t0.join();
  t1.join();
  ASSERT_TRUE(s0.ok()) << s0.to_string();
  ASSERT_TRUE(s1.ok()) << s1.to_string();
  EXPECT_TRUE(got == all);
}

// Small messages go through the ring links' mailboxes beside the byte stream: interleaved
// with stream ops to the same peer, more of them in one exchange than the mailbox has slots
// (the sender waits for the receiver to take them), each arrives whole and in order, and the
// stream's bytes are intact around them. Over shared memory and TCP (no mailbox: the small
// ops travel in the byte stream) as well as in process.
void exchange_small_between_stream_ops(Transport& t, int peer, Status* st) {
  const int me = t.rank();
  constexpr int kSmall = 3 * static_cast<int>(RingControl::kMailSlots);
  std::vector<std::vector<char>> out, got;
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  out.reserve(kSmall + 2);
  got.reserve(kSmall + 2);
  for (int i = 0; i < kSmall + 2; ++i) {
    // A stream op first and last (100 KiB + 1, 3 bytes), small ones of 0..48 bytes between.
    const bool small = i > 0 && i <= kSmall;
    const size_t n = i == 0 ? (100u << 10) + 1 : !small ? 3 : static_cast<size_t>(i) % 49;
    out.push_back(pattern(n, me, peer, i));
    got.emplace_back(n, 0);
    sends.push_back(SendOp{peer, out.back().data(), n, small});
    RecvOp r{peer, got.back().data(), n};
    r.small = small;
    recvs.push_back(r);
  }
  *st = t.exchange(sends, recvs, in(milliseconds(20000)));
  for (int i = 0; i < kSmall + 2 && st->ok(); ++i) {
    if (got[static_cast<size_t>(i)] != pattern(got[static_cast<size_t>(i)].size(), peer, me, i))
      *st = data_loss("rank %d: op %d from rank %d arrived wrong", me, i, peer);
  }
}

TEST(InProcessTransport, SmallMessagesArriveWholeAndInOrderBesideTheStream) {
  auto world = make_in_process_world(2);
  Status st[2];
  std::thread t0([&] { exchange_small_between_stream_ops(*world[0], 1, &st[0]); });
  std::thread t1([&] { exchange_small_between_stream_ops(*world[1], 0, &st[1]); });
  t0.join();
  t1.join();
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(InProcessTransport, SmallMessageOfTheWrongSizeIsAnErrorNotCorruption) {
  auto world = make_in_process_world(2);
  char out[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[64] = {};
  // Too large for a mailbox, or reduced: rejected before anything moves.
  SendOp big{0, got, kSmallMessageBytes + 1, /*small=*/true};
  EXPECT_EQ(world[1]->exchange({&big, 1}, {}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  int32_t acc[2] = {};
  RecvOp reduced{1, acc, 8, &kSumI32};
  reduced.small = true;
  EXPECT_EQ(world[0]->exchange({}, {&reduced, 1}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  // Sizes that disagree (a bug, or ranks out of step) fail the receive.
  SendOp s{1, out, 8, /*small=*/true};
  ASSERT_TRUE(world[0]->exchange({&s, 1}, {}, in(milliseconds(1000))).ok());
  RecvOp r{0, got, 4};
  r.small = true;
  Status st = world[1]->exchange({}, {&r, 1}, in(milliseconds(1000), "Recv"));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("8 bytes where this rank expects 4"), std::string::npos)
      << st.to_string();
}

TEST(InProcessTransport, SmallMessageFromAClosedPeerFailsNamingIt) {
  auto world = make_in_process_world(2);
  char out[8] = {9}, got[8] = {};
  SendOp s{0, out, 8, /*small=*/true};
  ASSERT_TRUE(world[1]->exchange({&s, 1}, {}, in(milliseconds(1000))).ok());
  world[1].reset();
  RecvOp r{1, got, 8};
  r.small = true;
  ASSERT_TRUE(world[0]->exchange({}, {&r, 1}, in(milliseconds(1000))).ok());  // posted before
  EXPECT_EQ(got[0], 9);
  Status st = world[0]->exchange({}, {&r, 1}, in(milliseconds(5000), "AllReduce"));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_NE(st.message().find("AllReduce: rank 1"), std::string::npos) << st.message();
}

TEST(InProcessTransport, RingStepLargerThanBuffersDoesNotDeadlock) {
  const int n = 4;
  auto world = make_in_process_world(n);
  const size_t bytes = 16u << 20;
  std::vector<std::vector<char>> out(n), got(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    out[r] = pattern(bytes, r, (r + 1) % n);
    got[r].assign(bytes, 0);
  }
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      SendOp s{(r + 1) % n, out[r].data(), bytes};
      RecvOp v{(r + n - 1) % n, got[r].data(), bytes};
      st[r] = world[r]->exchange({&s, 1}, {&v, 1}, in(milliseconds(20000)));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_TRUE(got[r] == out[(r + n - 1) % n]) << "rank " << r;
  }
}

TEST(InProcessTransport, LoopbackToSelf) {
  auto world = make_in_process_world(1);
  std::vector<char> a = pattern(1u << 20, 0, 0), b(a.size());
  SendOp s{0, a.data(), a.size()};
  RecvOp r{0, b.data(), b.size()};
  Status st = world[0]->exchange({&s, 1}, {&r, 1}, in(milliseconds(5000)));
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(a == b);
}

// Elements straddle the ring's wrap-around and earlier odd-sized messages: the reducer must
// still see whole elements, and the result must match a plain sum. Small messages go through
// the ring (wrapping it several times at odd offsets), large ones by address.
TEST(InProcessTransport, ReduceHandlesElementsStraddlingBufferBoundaries) {
  auto world = make_in_process_world(2);
  const size_t count = 3u << 20;  // 12 MiB of int32
  const size_t small = 15000;     // 60000-byte messages: under the direct-send size
  std::vector<int32_t> a(count), acc(count), expect(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<int32_t>(i * 2654435761u);
    acc[i] = static_cast<int32_t>(i * 40503u + 7);
    expect[i] = static_cast<int32_t>(static_cast<uint32_t>(a[i]) + static_cast<uint32_t>(acc[i]));
  }
  char odd[3] = {1, 2, 3};
  char odd_got[3] = {};
  std::vector<SendOp> sends = {{1, odd, 3}};
  std::vector<RecvOp> recvs = {{0, odd_got, 3}};
  const size_t split = 2u << 20;  // elements [0, split) in small messages, the rest in one
  for (size_t off = 0; off < split; off += small) {
    size_t k = std::min(small, split - off);
    sends.push_back(SendOp{1, a.data() + off, k * 4});
    recvs.push_back(RecvOp{0, acc.data() + off, k * 4, &kSumI32});
  }
  sends.push_back(SendOp{1, a.data() + split, (count - split) * 4});
  recvs.push_back(RecvOp{0, acc.data() + split, (count - split) * 4, &kSumI32});
  Status s0, s1;
  std::thread t0([&] { s0 = world[0]->exchange(sends, {}, in(milliseconds(20000))); });
  std::thread t1([&] { s1 = world[1]->exchange({}, recvs, in(milliseconds(20000))); });
  t0.join();
  t1.join();
  ASSERT_TRUE(s0.ok()) << s0.to_string();
  ASSERT_TRUE(s1.ok()) << s1.to_string();
  EXPECT_EQ(std::memcmp(odd, odd_got, 3), 0);
  EXPECT_TRUE(acc == expect);
}

TEST(InProcessTransport, ReduceOfDoublesThroughLoopback) {
  // The loopback ring is small (256 KiB), so 8-byte elements wrap at a 1-byte offset.
  auto world = make_in_process_world(1);
  const size_t count = 100003;
  std::vector<double> a(count), acc(count, 0.5);
  for (size_t i = 0; i < count; ++i) a[i] = static_cast<double>(i) * 0.25;
  char one = 9, one_got = 0;
  SendOp sends[] = {{0, &one, 1}, {0, a.data(), count * 8}};
  RecvOp recvs[] = {{0, &one_got, 1}, {0, acc.data(), count * 8, &kSumF64}};
  Status st = world[0]->exchange(sends, recvs, in(milliseconds(10000)));
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(one_got, 9);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(acc[i], static_cast<double>(i) * 0.25 + 0.5) << i;
}

// A large in-process send goes by address; when the sender gives up half way, it takes
// its buffer back (and may free it) and the receiver gets an error, never stale memory.
// The way a ring passes blocks on: a chain 0 -> 1 -> 2 -> 3 of forwarding receives. Rank 1
// sends a header of its own to rank 2 first, then reduces what rank 0 sends with an operand
// into a third buffer and forwards the sums; rank 2 sends a trailer of its own to rank 3
// and forwards the header and the sums, but not the last message. 12 MiB of sums: more
// than the rings hold, in by-address sends and in ring pieces whose elements straddle the
// ring's end (after odd-sized messages).
TEST(InProcessTransport, ForwardingReceivesPassDataDownAChainInStreamOrder) {
  auto world = make_in_process_world(4);
  const size_t count = (3u << 20) + 5;
  std::vector<int32_t> a(count), operand(count), sums(count, 0), expect(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<int32_t>(i * 2654435761u);
    operand[i] = static_cast<int32_t>(i * 40503u + 7);
    expect[i] = static_cast<int32_t>(static_cast<uint32_t>(a[i]) + static_cast<uint32_t>(operand[i]));
  }
  const std::vector<int32_t> operand_before = operand;
  std::vector<char> header = pattern(1001, 1, 2), trailer = pattern(3, 2, 3);
  std::vector<char> last = pattern(70001, 0, 1);
  std::vector<char> last_at1(last.size()), header_at2(header.size()), last_at2(last.size());
  std::vector<int32_t> sums_at2(count), sums_at3(count);
  std::vector<char> header_at3(header.size()), trailer_at3(trailer.size());
  const size_t sum_bytes = count * 4;
  Status st[4];
  std::thread t0([&] {
    SendOp sends[] = {{1, a.data(), sum_bytes}, {1, last.data(), last.size()}};
    st[0] = world[0]->exchange(sends, {}, in(milliseconds(20000)));
  });
  std::thread t1([&] {
    SendOp send{2, header.data(), header.size()};
    RecvOp recvs[2] = {{0, sums.data(), sum_bytes, &kSumI32}, {0, last_at1.data(), last.size()}};
    recvs[0].operand = operand.data();
    recvs[0].forward = 2;
    recvs[1].forward = 2;
    st[1] = world[1]->exchange({&send, 1}, recvs, in(milliseconds(20000)));
  });
  std::thread t2([&] {
    SendOp send{3, trailer.data(), trailer.size()};
    RecvOp recvs[3] = {{1, header_at2.data(), header.size()},
                       {1, sums_at2.data(), sum_bytes},
                       {1, last_at2.data(), last.size()}};
    recvs[0].forward = 3;
    recvs[1].forward = 3;
    st[2] = world[2]->exchange({&send, 1}, recvs, in(milliseconds(20000)));
  });
  RecvOp recvs3[3] = {{2, trailer_at3.data(), trailer.size()},
                      {2, header_at3.data(), header.size()},
                      {2, sums_at3.data(), sum_bytes}};
  st[3] = world[3]->exchange({}, recvs3, in(milliseconds(20000)));
  t0.join();
  t1.join();
  t2.join();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  EXPECT_TRUE(sums == expect);
  EXPECT_TRUE(operand == operand_before);  // the operand is read, never written
  EXPECT_TRUE(last_at1 == last);
  EXPECT_TRUE(header_at2 == header);
  EXPECT_TRUE(sums_at2 == expect);
  EXPECT_TRUE(last_at2 == last);
  EXPECT_TRUE(trailer_at3 == trailer);
  EXPECT_TRUE(header_at3 == header);
  EXPECT_TRUE(sums_at3 == expect);
  // Rank 2 did not forward `last`: rank 3's stream from rank 2 is empty.
  char extra = 0;
  RecvOp none{2, &extra, 1};
  Status more = world[3]->exchange({}, {&none, 1}, in(milliseconds(100)));
  EXPECT_EQ(more.code(), StatusCode::kDeadlineExceeded) << more.to_string();
}

// A rank that never takes the bytes forwarded to it is the one the deadline names, even
// though everything the forwarding rank had to receive arrived.
TEST(InProcessTransport, ForwardThatIsNeverTakenTimesOutNamingItsTarget) {
  auto world = make_in_process_world(3);
  std::vector<char> big = pattern(16u << 20, 0, 1), got(big.size());
  Status s0;
  std::thread t0([&] {
    SendOp s{1, big.data(), big.size()};
    s0 = world[0]->exchange({&s, 1}, {}, in(milliseconds(20000)));
  });
  RecvOp r{0, got.data(), got.size()};
  r.forward = 2;
  Status s1 = world[1]->exchange({}, {&r, 1}, in(milliseconds(400), "AllGather"));
  t0.join();
  ASSERT_TRUE(s0.ok()) << s0.to_string();
  EXPECT_TRUE(got == big);
  ASSERT_EQ(s1.code(), StatusCode::kDeadlineExceeded) << s1.to_string();
  EXPECT_NE(s1.message().find("AllGather: rank 2"), std::string::npos) << s1.message();
  EXPECT_NE(s1.message().find("forwarded"), std::string::npos) << s1.message();
}

TEST(InProcessTransport, SenderGivingUpOnDirectSendRevokesItsBuffer) {
  auto world = make_in_process_world(2);
  auto big = std::make_unique<std::vector<char>>(pattern(8u << 20, 0, 1));
  std::vector<char> half(4u << 20);
  Status s0, s1;
  std::thread t1([&] {
    RecvOp r{0, half.data(), half.size()};
    s1 = world[1]->exchange({}, {&r, 1}, in(milliseconds(5000)));
  });
  SendOp s{1, big->data(), big->size()};
  s0 = world[0]->exchange({&s, 1}, {}, in(milliseconds(300), "Send"));
  t1.join();
  ASSERT_TRUE(s1.ok()) << s1.to_string();
  EXPECT_TRUE(std::equal(half.begin(), half.end(), big->begin()));
  ASSERT_EQ(s0.code(), StatusCode::kDeadlineExceeded) << s0.to_string();
  EXPECT_NE(s0.message().find("rank 1"), std::string::npos) << s0.message();
  big.reset();  // the sender's buffer is gone
  RecvOp r{0, half.data(), half.size()};
  Status again = world[1]->exchange({}, {&r, 1}, in(milliseconds(2000), "Recv"));
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again.to_string();
  EXPECT_NE(again.message().find("rank 0"), std::string::npos) << again.message();
}

TEST(InProcessTransport, DeadlineNamesOperationAndSilentRank) {
  auto world = make_in_process_world(3);
  char buf[16];
  RecvOp r{2, buf, sizeof(buf)};
  auto start = Clock::now();
  Status st = world[0]->exchange({}, {&r, 1}, in(milliseconds(200), "AllReduce"));
  auto took = Clock::now() - start;
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_NE(st.message().find("AllReduce"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(2000));
  // The transport is broken from now on: the next exchange fails at once with the same error.
  char c = 0;
  SendOp s{1, &c, 1};
  Status again = world[0]->exchange({&s, 1}, {}, in(milliseconds(5000), "Broadcast"));
  EXPECT_EQ(again.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(again.message(), st.message());
}

// Rank 1 gives up on silent rank 2; rank 0, waiting on rank 1, learns at once and names
// rank 2 (the rank at fault), not rank 1.
TEST(InProcessTransport, FailureNamesTheRankAtFaultDownTheChain) {
  auto world = make_in_process_world(3);
  char a[8] = {}, b[8] = {};
  Status s0;
  auto start = Clock::now();
  std::thread t0([&] {
    RecvOp r{1, a, sizeof(a)};
    s0 = world[0]->exchange({}, {&r, 1}, in(milliseconds(10000), "AllReduce"));
  });
  RecvOp r{2, b, sizeof(b)};
  Status s1 = world[1]->exchange({}, {&r, 1}, in(milliseconds(200), "AllReduce"));
  t0.join();
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  ASSERT_EQ(s1.code(), StatusCode::kDeadlineExceeded) << s1.to_string();
  EXPECT_NE(s1.message().find("rank 2"), std::string::npos) << s1.message();
  ASSERT_EQ(s0.code(), StatusCode::kUnavailable) << s0.to_string();
  EXPECT_NE(s0.message().find("AllReduce: rank 2"), std::string::npos) << s0.message();
  EXPECT_NE(s0.message().find("rank 1"), std::string::npos) << s0.message();
}

TEST(InProcessTransport, SendIntoFullBufferTimesOutNamingReceiver) {
  auto world = make_in_process_world(2);
  std::vector<char> big(16u << 20);
  SendOp s{1, big.data(), big.size()};
  Status st = world[0]->exchange({&s, 1}, {}, in(milliseconds(200), "Send"));
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_NE(st.message().find("Send: rank 1"), std::string::npos) << st.message();
}

TEST(InProcessTransport, AbortFromAnotherThreadCancelsPromptly) {
  auto world = make_in_process_world(2);
  char buf[8];
  RecvOp r{1, buf, sizeof(buf)};
  Status st;
  auto start = Clock::now();
  std::thread waiter(
      [&] { st = world[0]->exchange({}, {&r, 1}, in(milliseconds(20000), "Barrier")); });
  std::this_thread::sleep_for(milliseconds(100));
  world[0]->abort();
  waiter.join();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_TRUE(is_cancelled(st)) << st.to_string();
  EXPECT_NE(st.message().find("Barrier"), std::string::npos);
  // Later exchanges fail at once too.
  Status later = world[0]->exchange({}, {&r, 1}, in(milliseconds(20000), "AllReduce"));
  EXPECT_TRUE(is_cancelled(later)) << later.to_string();
  // The peer waiting on the aborted rank learns it is gone instead of timing out.
  start = Clock::now();
  RecvOp r1{0, buf, sizeof(buf)};
  Status peer = world[1]->exchange({}, {&r1, 1}, in(milliseconds(20000), "AllReduce"));
  EXPECT_EQ(peer.code(), StatusCode::kUnavailable) << peer.to_string();
  EXPECT_NE(peer.message().find("rank 0"), std::string::npos) << peer.message();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST(InProcessTransport, DataSentBeforePeerClosedIsStillDelivered) {
  auto world = make_in_process_world(2);
  char msg[5] = {'h', 'e', 'l', 'l', 'o'};
  SendOp s{0, msg, 5};
  ASSERT_TRUE(world[1]->exchange({&s, 1}, {}, in(milliseconds(1000))).ok());
  world[1].reset();
  char got[5] = {};
  RecvOp r{1, got, 5};
  ASSERT_TRUE(world[0]->exchange({}, {&r, 1}, in(milliseconds(1000))).ok());
  EXPECT_EQ(std::memcmp(msg, got, 5), 0);
  Status st = world[0]->exchange({}, {&r, 1}, in(milliseconds(5000), "Recv"));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_NE(st.message().find("Recv: rank 1"), std::string::npos) << st.message();
}

TEST(InProcessTransport, BadOpsAreInvalidArguments) {
  auto world = make_in_process_world(2);
  char c[6];
  SendOp bad_peer{5, c, 1};
  EXPECT_EQ(world[0]->exchange({&bad_peer, 1}, {}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  RecvOp bad_reduce{1, c, 6, &kSumI32};  // not a whole number of elements
  EXPECT_EQ(world[0]->exchange({}, {&bad_reduce, 1}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  int32_t x[2] = {}, y[2] = {};
  RecvOp no_apply_to{1, x, 8, &kSumI32InPlaceOnly};
  no_apply_to.operand = y;  // a third buffer needs Reducer::apply_to
  EXPECT_EQ(world[0]->exchange({}, {&no_apply_to, 1}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  RecvOp operand_without_reducer{1, x, 8};
  operand_without_reducer.operand = y;
  EXPECT_EQ(world[0]->exchange({}, {&operand_without_reducer, 1}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  RecvOp forward_out_of_range{1, x, 8};
  forward_out_of_range.forward = 2;
  EXPECT_EQ(world[0]->exchange({}, {&forward_out_of_range, 1}, in(milliseconds(100))).code(),
            StatusCode::kInvalidArgument);
  // Bad arguments do not break the transport.
  SendOp ok_send{0, c, 1};
  RecvOp ok_recv{0, c + 1, 1};
  EXPECT_TRUE(world[0]->exchange({&ok_send, 1}, {&ok_recv, 1}, in(milliseconds(1000))).ok());
}

TEST(InProcessTransport, EightRanksAllToAllOnFewCores) {
  const int n = 8;
  auto world = make_in_process_world(n);
  const size_t bytes = 300001;
  std::vector<Status> st(n);
  std::vector<std::vector<std::vector<char>>> got(n, std::vector<std::vector<char>>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::vector<char>> out(n);
      std::vector<SendOp> sends;
      std::vector<RecvOp> recvs;
      for (int p = 0; p < n; ++p) {
        out[p] = pattern(bytes, r, p);
        got[r][p].assign(bytes, 0);
        sends.push_back(SendOp{p, out[p].data(), bytes});
        recvs.push_back(RecvOp{p, got[r][p].data(), bytes});
      }
      for (int iter = 0; iter < 3 && st[r].ok(); ++iter) {
        st[r] = world[r]->exchange(sends, recvs, in(milliseconds(20000), "AlltoAll"));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    for (int p = 0; p < n; ++p) EXPECT_TRUE(got[r][p] == pattern(bytes, p, r)) << r << " " << p;
  }
}


// ---- Root info ----------------------------------------------------------------------------

TEST(RootInfo, RoundTripsAndRejectsGarbage) {
  RootInfo info{"10.1.2.3:29500", 0x1234abcd5678ef90ull};
  std::vector<char> blob(4108);
  ASSERT_TRUE(encode_root_info(info, blob).ok());
  Expected<RootInfo> back = decode_root_info(blob);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->addr, info.addr);
  EXPECT_EQ(back->unique_id, info.unique_id);

  std::vector<char> zeros(4108, 0);
  EXPECT_EQ(decode_root_info(zeros).status().code(), StatusCode::kInvalidArgument);
  std::vector<char> noise = pattern(4108, 3, 4);
  EXPECT_EQ(decode_root_info(noise).status().code(), StatusCode::kInvalidArgument);
  for (size_t i : {0u, 5u, 9u, 17u, 20u, 25u}) {  // every field, including the lengths
    std::vector<char> bad = blob;
    bad[i] ^= 0x40;
    EXPECT_EQ(decode_root_info(bad).status().code(), StatusCode::kInvalidArgument) << i;
  }
  std::vector<char> huge_len = blob;
  huge_len[16] = huge_len[17] = huge_len[18] = huge_len[19] = '\xff';
  EXPECT_EQ(decode_root_info(huge_len).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_root_info(std::span<const char>(blob.data(), 10)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_root_info(std::span<const char>(blob.data(), 0)).status().code(),
            StatusCode::kInvalidArgument);
  std::vector<char> small(8);
  EXPECT_FALSE(encode_root_info(info, small).ok());
}

// ---- Bootstrap errors (threads of this process joining through a local root) -----------------

TEST(Bootstrap, JoinDeadlineNamesMissingRanks) {
  Expected<RootInfo> root = start_root("127.0.0.1:0");
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  std::vector<Status> st(2);
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      JoinOptions o{r, 4, *root, false};
      auto t = join_world(o, Clock::now() + milliseconds(600));
      st[r / 2] = t.status();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  for (const Status& s : st) {
    ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
    EXPECT_NE(s.message().find("rank(s) 1, 3 of 4 never joined"), std::string::npos)
        << s.message();
  }
}

TEST(Bootstrap, DuplicateRankAndSizeMismatchAreRejected) {
  Expected<RootInfo> root = start_root("127.0.0.1:0");
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  JoinOptions first{1, 3, *root, false};
  Status first_status;
  std::thread t(
      [&] { first_status = join_world(first, Clock::now() + milliseconds(1500)).status(); });
  std::this_thread::sleep_for(milliseconds(200));
  JoinOptions dup{1, 3, *root, false};
  Status s = join_world(dup, Clock::now() + milliseconds(1500)).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 joined twice"), std::string::npos) << s.message();
  JoinOptions mismatch{2, 5, *root, false};
  s = join_world(mismatch, Clock::now() + milliseconds(1500)).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("5 ranks"), std::string::npos) << s.message();
  t.join();
  EXPECT_EQ(first_status.code(), StatusCode::kDeadlineExceeded);
}

TEST(Bootstrap, UnreachableRootIsNamed) {
  // A port nobody listens on: bind one, close it.
  int port = 0;
  Expected<int> fd = tcp_listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(fd.ok());
  ::close(*fd);
  RootInfo root{"127.0.0.1:" + std::to_string(port), 42};
  JoinOptions o{1, 2, root, false};
  Status s = join_world(o, Clock::now() + milliseconds(300)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(root.addr), std::string::npos) << s.message();
}

// Ranks 0..n-1 joined by threads of this process through a local root, each running
// body(rank, its transport) on its thread once joined; st[r] gets the join's error or the
// body's result. The transports stay in `world` for the caller.
void join_threads(int n, bool tcp, std::vector<std::unique_ptr<Transport>>* world,
                  std::vector<Status>* st,
                  const std::function<Status(int, Transport&)>& body) {
  Expected<RootInfo> root = start_root("");
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  world->clear();
  world->resize(n);
  st->assign(n, ok_status());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      JoinOptions o{r, n, *root, tcp};
      auto t = join_world(o, Clock::now() + milliseconds(5000));
      if (!t.ok()) {
        (*st)[r] = t.status();
        return;
      }
      (*world)[r] = std::move(t).value();
      (*st)[r] = body(r, *(*world)[r]);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Bootstrap, ThreadsJoinAndExchangeThroughSharedMemoryAndTcp) {
  for (bool tcp : {false, true}) {
    const int n = 3;
    std::vector<std::unique_ptr<Transport>> world;
    std::vector<Status> st;
    join_threads(n, tcp, &world, &st, [&](int r, Transport& t) {
      std::vector<char> out = pattern(1u << 20, r, (r + 1) % n), got(1u << 20);
      SendOp s{(r + 1) % n, out.data(), out.size()};
      RecvOp v{(r + n - 1) % n, got.data(), got.size()};
      Status status = t.exchange({&s, 1}, {&v, 1}, in(milliseconds(5000)));
      if (status.ok() && got != pattern(1u << 20, (r + n - 1) % n, r)) {
        status = data_loss("rank %d got wrong bytes", r);
      }
      return status;
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << (tcp ? "tcp: " : "shm: ") << st[r].to_string();
      EXPECT_EQ(world[r]->peers()[(r + 1) % n].pid, static_cast<int64_t>(getpid()));
    }
  }
}

TEST(Bootstrap, SmallMessagesBesideTheStreamOverSharedMemoryAndTcp) {
  for (bool tcp : {false, true}) {
    std::vector<std::unique_ptr<Transport>> world;
    std::vector<Status> st;
    join_threads(2, tcp, &world, &st, [&](int r, Transport& t) {
      Status status;
      exchange_small_between_stream_ops(t, 1 - r, &status);
      return status;
    });
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(st[r].ok()) << (tcp ? "tcp: " : "shm: ") << st[r].to_string();
  }
}

// Over TCP no link shows how far its peer got; the status channels do. Rank 2 never starts
// the second collective (hung elsewhere, alive): rank 0 waits on rank 1, which waits on rank
// 2, and rank 0, timing out first, must name rank 2, not the rank it waited on.
TEST(Bootstrap, TcpRankThatNeverStartsTheCollectiveIsNamedByTheRanksWaitingOnOthers) {
  const int n = 3;
  std::vector<std::unique_ptr<Transport>> world;
  std::vector<Status> st;
  std::atomic<int> joined{0};
  join_threads(n, true, &world, &st, [&](int r, Transport& t) {
    t.enter_collective();  // the first collective, which every rank started
    ++joined;
    for (int i = 0; i < 5000 && joined.load() < n; ++i) std::this_thread::sleep_for(milliseconds(1));
    if (r == 2) return ok_status();
    t.enter_collective();
    char byte = 0;
    RecvOp v{r + 1, &byte, 1};
    return t.exchange({}, {&v, 1}, in(milliseconds(r == 0 ? 300 : 1500), "AllReduce"));
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(st[r].code(), StatusCode::kDeadlineExceeded) << r << ": " << st[r].to_string();
    EXPECT_NE(st[r].message().find("AllReduce: rank 2 "), std::string::npos) << st[r].message();
    EXPECT_NE(st[r].message().find("it has not started this operation (it started 1 "),
              std::string::npos)
        << st[r].message();
  }
  // Abort and destruction stop the channels (join their threads; a hang here fails the test
  // by its timeout).
  world[2]->abort();
  world.clear();
}

// ---- Worlds of forked processes -------------------------------------------------------------

struct ChildResult {
  int rank = 0;
  int exit_code = -1;  // -signal when killed
  std::string message;  // what the child's body returned ("" on success)
  double seconds = 0;   // when the child reported, from the start of the world
};

// Forks n processes running child(rank) and reports what each returned ("" on success) and
// how it ended. Children get alarm() as a backstop; the parent kills whatever outlives
// `limit_s`. `pipes` (2 per rank) are passed to the children for their own hand-offs.
using ChildFn = std::function<std::string(int, const std::vector<int>&)>;
std::vector<ChildResult> run_processes(int n, const ChildFn& child, int limit_s = 15) {
  std::vector<int> aux_pipes(2 * n), result_pipes(2 * n);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(pipe(&aux_pipes[2 * r]), 0);
    EXPECT_EQ(pipe(&result_pipes[2 * r]), 0);
  }
  auto start = Clock::now();
  std::vector<pid_t> pids(n);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(static_cast<unsigned>(limit_s + 5));
      std::string msg = child(r, aux_pipes);
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      std::string line = std::to_string(secs) + " " + msg;
      ssize_t w = write(result_pipes[2 * r + 1], line.data(), line.size());
      (void)w;
      _exit(msg.empty() ? 0 : 1);
    }
    pids[r] = pid;
  }
  std::vector<ChildResult> results(n);
  for (int r = 0; r < n; ++r) {
    close(aux_pipes[2 * r]);
    close(aux_pipes[2 * r + 1]);
    close(result_pipes[2 * r + 1]);
  }
  int left = n;
  bool killed = false;
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] != pid) continue;
        results[r].rank = r;
        results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        --left;
      }
      continue;
    }
    if (!killed && Clock::now() - start > std::chrono::seconds(limit_s)) {
      for (pid_t p : pids) kill(p, SIGKILL);
      killed = true;
      ADD_FAILURE() << "a child outlived " << limit_s << " s";
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    std::string all;
    ssize_t k;
    while ((k = read(result_pipes[2 * r], buf, sizeof(buf))) > 0) all.append(buf, k);
    close(result_pipes[2 * r]);
    size_t sp = all.find(' ');
    if (sp != std::string::npos) {
      results[r].seconds = std::atof(all.substr(0, sp).c_str());
      results[r].message = all.substr(sp + 1);
    }
  }
  return results;
}

// n processes: rank 0 starts the root and hands the root info blob to the others through
// pipes, every rank joins, then runs body(rank, transport).
// The unique id of the world the calling rank process joined (run_world sets it before the
// body runs; each rank is a process of its own).
uint64_t joined_world_id = 0;

std::vector<ChildResult> run_world(int n, bool force_tcp,
                                   const std::function<std::string(int, Transport&)>& body,
                                   int limit_s = 15, bool single_copy = false) {
  return run_processes(
      n,
      [&](int r, const std::vector<int>& pipes) -> std::string {
        setenv("KILN_COMM_SHM_SINGLE_COPY", single_copy ? "1" : "0", 1);
        kilnRootInfo blob;
        if (r == 0) {
          Expected<RootInfo> root = start_root("127.0.0.1:0");
          if (!root.ok()) return root.status().to_string();
          Status s = encode_root_info(*root, std::span<char>(blob.internal, sizeof(blob.internal)));
          if (!s.ok()) return s.to_string();
          for (int p = 1; p < n; ++p) {
            ssize_t w = write(pipes[2 * p + 1], blob.internal, sizeof(blob.internal));
            (void)w;
          }
        } else {
          size_t got = 0;
          while (got < sizeof(blob.internal)) {
            ssize_t k = read(pipes[2 * r], blob.internal + got, sizeof(blob.internal) - got);
            if (k <= 0) return "no root info";
            got += static_cast<size_t>(k);
          }
        }
        Expected<RootInfo> root =
            decode_root_info(std::span<const char>(blob.internal, sizeof(blob.internal)));
        if (!root.ok()) return root.status().to_string();
        joined_world_id = root->unique_id;
        JoinOptions o{r, n, *root, force_tcp};
        auto t = join_world(o, Clock::now() + std::chrono::seconds(10));
        if (!t.ok()) return "join: " + t.status().to_string();
        return body(r, **t);
      },
      limit_s);
}

std::string stream_body(int rank, Transport& t) {
  // Every pair swaps messages of sizes 0 .. 16 MiB both ways at once, the reducing receive
  // of one of them crossing element boundaries.
  const int n = t.size();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{65537},
                       (size_t{1} << 20) + 5, size_t{16} << 20}) {
    std::vector<std::vector<char>> out(n), got(n);
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      out[p] = pattern(bytes, rank, p, static_cast<int>(bytes % 1000));
      got[p].assign(bytes, 0);
      sends.push_back(SendOp{p, out[p].data(), bytes});
      recvs.push_back(RecvOp{p, got[p].data(), bytes});
    }
    Status s = t.exchange(sends, recvs, in(milliseconds(10000), "Stream"));
    if (!s.ok()) return s.to_string();
    for (int p = 0; p < n; ++p) {
      if (p != rank && got[p] != pattern(bytes, p, rank, static_cast<int>(bytes % 1000))) {
        return str_format("rank %d: %zu bytes from rank %d differ", rank, bytes, p);
      }
    }
  }
  // A reduction after an odd-sized message: elements straddle the ring's wrap.
  const size_t count = (3u << 20) / 2 + 1;
  std::vector<int32_t> acc(count, rank), mine(count, 10 * rank + 1);
  char odd = 5, odd_got = 0;
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  SendOp sends[] = {{next, &odd, 1}, {next, mine.data(), count * 4}};
  RecvOp recvs[] = {{prev, &odd_got, 1}, {prev, acc.data(), count * 4, &kSumI32}};
  Status s = t.exchange(sends, recvs, in(milliseconds(10000), "Reduce"));
  if (!s.ok()) return s.to_string();
  for (size_t i = 0; i < count; ++i) {
    if (acc[i] != rank + 10 * prev + 1) {
      return str_format("rank %d: reduced element %zu wrong", rank, i);
    }
  }
  return "";
}

TEST(ProcessTransport, SharedMemoryStreamsIntactUpTo16MiB) {
  auto results = run_world(3, false, [](int rank, Transport& t) {
    for (int p = 0; p < t.size(); ++p) {
      if (t.peers()[p].host_id != t.peers()[rank].host_id) return std::string("host ids differ");
    }
    return stream_body(rank, t);
  });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
}

TEST(ProcessTransport, ForcedTcpStreamsIntactUpTo16MiB) {
  auto results = run_world(3, true, stream_body);
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
}

// Whether this process may read process `pid`'s memory with process_vm_readv (the single
// copy path needs it; a hardened kernel or container may refuse).
const volatile uint64_t kCrossMemoryWord = 0x6b696c6e;
bool can_read_memory_of(pid_t pid) {
  uint64_t word = 0;
  iovec local{&word, sizeof word};
  iovec remote{const_cast<uint64_t*>(&kCrossMemoryWord), sizeof word};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof word &&
         word == kCrossMemoryWord;
}

TEST(ProcessTransport, SharedMemoryStreamsIntactWithSingleCopy) {
  auto results = run_world(
      3, false,
      [](int rank, Transport& t) -> std::string {
        if (!can_read_memory_of(static_cast<pid_t>(t.peers()[(rank + 1) % 3].pid))) {
          return "skip";
        }
        return stream_body(rank, t);
      },
      15, /*single_copy=*/true);
  for (const auto& r : results) {
    if (r.message == "skip") GTEST_SKIP() << "process_vm_readv is not allowed here";
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
  }
}

// The sender gives up half-way through a single-copy send and frees its buffer: the
// receiver keeps what it read before, then fails naming the sender; it never delivers
// bytes read after the sender took the buffer back.
TEST(ProcessTransport, SenderGivingUpOnASingleCopySendFailsTheReceiverNamingIt) {
  auto results = run_world(
      2, false,
      [](int rank, Transport& t) -> std::string {
        if (!can_read_memory_of(static_cast<pid_t>(t.peers()[1 - rank].pid))) return "skip";
        const size_t half = 4u << 20;
        if (rank == 0) {
          auto big = std::make_unique<std::vector<char>>(pattern(2 * half, 0, 1));
          SendOp s{1, big->data(), big->size()};
          Status st = t.exchange({&s, 1}, {}, in(milliseconds(400), "Send"));
          if (st.code() != StatusCode::kDeadlineExceeded) return "send: " + st.to_string();
          std::fill(big->begin(), big->end(), 0);  // reused, then freed
          big.reset();
          std::this_thread::sleep_for(milliseconds(1500));
          return "";
        }
        std::vector<char> got(half);
        RecvOp r{0, got.data(), got.size()};
        Status st = t.exchange({}, {&r, 1}, in(milliseconds(5000), "Recv"));
        if (!st.ok()) return "first half: " + st.to_string();
        std::vector<char> want = pattern(2 * half, 0, 1);
        if (!std::equal(got.begin(), got.end(), want.begin())) return "first half differs";
        std::this_thread::sleep_for(milliseconds(800));
        st = t.exchange({}, {&r, 1}, in(milliseconds(2000), "Recv"));
        if (st.code() != StatusCode::kUnavailable ||
            st.message().find("Recv: rank 0") == std::string::npos ||
            st.message().find("gave up") == std::string::npos) {
          return "second half: " + st.to_string();
        }
        return "";
      },
      15, /*single_copy=*/true);
  for (const auto& r : results) {
    if (r.message == "skip") GTEST_SKIP() << "process_vm_readv is not allowed here";
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
  }
}

// Rank 1 dies by SIGKILL in the middle of an exchange; the others must fail promptly with
// `unavailable` naming it rather than wait for their 10 s deadline.
void killed_peer_test(bool tcp) {
  auto results = run_world(3, tcp, [](int rank, Transport& t) -> std::string {
    const size_t bytes = 64u << 20;
    std::vector<char> out(bytes, static_cast<char>(rank)), got(bytes);
    int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    if (rank == 1) {
      std::thread([] {
        std::this_thread::sleep_for(milliseconds(30));
        raise(SIGKILL);
      }).detach();
    }
    auto start = Clock::now();
    for (int i = 0; i < 1000; ++i) {
      SendOp s{next, out.data(), bytes};
      RecvOp v{prev, got.data(), bytes};
      Status st = t.exchange({&s, 1}, {&v, 1}, in(milliseconds(10000), "AllReduce"));
      if (!st.ok()) {
        double secs = std::chrono::duration<double>(Clock::now() - start).count();
        return str_format("%s|%.3f", st.message().c_str(), secs);
      }
    }
    return "no error";
  });
  EXPECT_EQ(results[1].exit_code, -SIGKILL);
  for (int r : {0, 2}) {
    const std::string& m = results[r].message;
    std::printf("[ %s   ] rank %d: %s s\n", tcp ? "tcp" : "shm", r, m.c_str());
    // Rank 2 receives from rank 1 and so sees it die; rank 0 sees rank 1 or (once rank 2
    // gave up) rank 2 leave.
    EXPECT_NE(m.find("AllReduce: rank"), std::string::npos) << m;
    if (r == 2) {
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
      EXPECT_NE(m.find("exited") != std::string::npos ||
                    m.find("closed its connection") != std::string::npos,
                false)
          << m;
    }
    double secs = std::atof(m.substr(m.rfind('|') + 1).c_str());
    EXPECT_LT(secs, 2.0) << m;
  }
}

TEST(ProcessTransport, KilledPeerIsNamedPromptlyOverSharedMemory) { killed_peer_test(false); }
TEST(ProcessTransport, KilledPeerIsNamedPromptlyOverTcp) { killed_peer_test(true); }

TEST(ProcessTransport, StalledPeerGivesDeadlineNamingIt) {
  auto results = run_world(3, false, [](int rank, Transport& t) -> std::string {
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(1500));
      return "";
    }
    char a[64] = {}, b[64] = {};
    SendOp s{2, a, sizeof(a)};
    RecvOp v{2, b, sizeof(b)};
    Status st = t.exchange({&s, 1}, {&v, 1}, in(milliseconds(500), "Broadcast"));
    return st.code() == StatusCode::kDeadlineExceeded ? "deadline|" + st.message()
                                                      : "other|" + st.to_string();
  });
  for (int r : {0, 1}) {
    const std::string& m = results[r].message;
    EXPECT_EQ(m.rfind("deadline|", 0), 0u) << m;
    EXPECT_NE(m.find("Broadcast: rank 2"), std::string::npos) << m;
  }
}

// One round trip of 8 bytes and a 16 MiB stream between two processes, printed for the
// record; the bounds are loose (shared, oversubscribed machines) and catch only breakage.
TEST(ProcessTransport, SharedMemoryLatencyAndBandwidth) {
  auto results = run_world(2, false, [](int rank, Transport& t) -> std::string {
    const int peer = 1 - rank;
    uint64_t x = 0;
    const int iters = 20000;
    auto round_trips = [&](int k) -> Status {
      for (int i = 0; i < k; ++i) {
        SendOp s{peer, &x, 8};
        RecvOp v{peer, &x, 8};
        if (rank == 0) {
          KILN_RETURN_IF_ERROR(t.exchange({&s, 1}, {}, in(milliseconds(5000))));
          KILN_RETURN_IF_ERROR(t.exchange({}, {&v, 1}, in(milliseconds(5000))));
        } else {
          KILN_RETURN_IF_ERROR(t.exchange({}, {&v, 1}, in(milliseconds(5000))));
          KILN_RETURN_IF_ERROR(t.exchange({&s, 1}, {}, in(milliseconds(5000))));
        }
      }
      return ok_status();
    };
    Status st = round_trips(1000);
    auto t0 = Clock::now();
    if (st.ok()) st = round_trips(iters);
    double rtt_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    if (!st.ok()) return st.to_string();
    const size_t bytes = 16u << 20;
    std::vector<char> a(bytes, 1), b(bytes);
    SendOp s{peer, a.data(), bytes};
    RecvOp v{peer, b.data(), bytes};
    st = t.exchange({&s, 1}, {&v, 1}, in(milliseconds(10000)));  // warm up
    auto t1 = Clock::now();
    const int reps = 10;
    for (int i = 0; i < reps && st.ok(); ++i) {
      st = t.exchange({&s, 1}, {&v, 1}, in(milliseconds(10000)));
    }
    double secs = std::chrono::duration<double>(Clock::now() - t1).count();
    if (!st.ok()) return st.to_string();
    if (rank == 0) {
      std::printf("[ shm      ] 8-byte round trip %.3f us; 16 MiB exchange both ways %.2f GB/s per "
                  "direction\n",
                  rtt_us, reps * bytes / secs / 1e9);
      std::fflush(stdout);
    }
    // Only a sanity bound: the machine may be shared and oversubscribed.
    return rtt_us < 20000 ? "" : str_format("round trip %.1f us", rtt_us);
  });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
}

// Eight processes on a machine with fewer cores: waiting ranks must yield to working ones.
TEST(ProcessTransport, EightRanksRingOverSharedMemory) {
  auto results = run_world(8, false, [](int rank, Transport& t) -> std::string {
    const int n = t.size();
    const size_t bytes = (1u << 20) + 3;
    std::vector<char> out = pattern(bytes, rank, 0), got(bytes);
    for (int step = 1; step < n; ++step) {
      SendOp s{(rank + step) % n, out.data(), bytes};
      RecvOp v{(rank + n - step) % n, got.data(), bytes};
      Status st = t.exchange({&s, 1}, {&v, 1}, in(milliseconds(10000), "AllGather"));
      if (!st.ok()) return st.to_string();
      if (got != pattern(bytes, (rank + n - step) % n, 0)) return "wrong bytes";
    }
    return "";
  });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
}

// Shared-memory segments named after the world `world_id` (shm_transport.cc's names): only
// this world's, so that comm tests running beside this one do not count.
int count_kiln_segments(uint64_t world_id) {
  const std::string prefix = str_format("kiln-comm-%016llx-", static_cast<unsigned long long>(world_id));
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(d);
  }
  return n;
}

TEST(ProcessTransport, NoSharedMemoryNamesOutliveTheJoin) {
  auto results = run_world(3, false, [](int rank, Transport& t) -> std::string {
    // Two all-to-all rounds: when this rank finishes the second, every rank has finished
    // the first, so every pair has mapped its segment, and every name must be unlinked.
    const int n = t.size();
    for (int round = 0; round < 2; ++round) {
      std::vector<char> out(n), got(n);
      std::vector<SendOp> sends;
      std::vector<RecvOp> recvs;
      for (int p = 0; p < n; ++p) {
        sends.push_back(SendOp{p, &out[p], 1});
        recvs.push_back(RecvOp{p, &got[p], 1});
      }
      Status st = t.exchange(sends, recvs, in(milliseconds(10000), "Barrier"));
      if (!st.ok()) return st.to_string();
    }
    int left = count_kiln_segments(joined_world_id);
    // Stay until everyone has counted (a third round), so no rank exits under the others.
    std::vector<char> out(n), got(n);
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    for (int p = 0; p < n; ++p) {
      sends.push_back(SendOp{p, &out[p], 1});
      recvs.push_back(RecvOp{p, &got[p], 1});
    }
    Status st = t.exchange(sends, recvs, in(milliseconds(10000), "Barrier"));
    if (!st.ok()) return st.to_string();
    return left == 0 ? "" : str_format("%d segments still named after the join", left);
  });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
}

// ---- Launch environments ------------------------------------------------------------------

void clear_launch_env() {
  for (const char* v : {"KILN_RANK", "KILN_WORLD_SIZE", "KILN_ROOT_ADDR", "KILN_LOCAL_RANK",
                        "KILN_JOB_ID", "KILN_COMM_TRANSPORT", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE",
                        "OMPI_MCA_orte_ess_jobid"}) {
    unsetenv(v);
  }
}

// A ring exchange over whatever world the launch environment describes.
std::string join_from_env_and_exchange(int expect_rank, int expect_size) {
  Expected<LaunchEnv> env = launch_env_from_environment();
  if (!env.ok()) return "launch env: " + env.status().to_string();
  if (env->rank != expect_rank || env->size != expect_size) {
    return str_format("launch env says rank %d of %d", env->rank, env->size);
  }
  JoinOptions o{env->rank, env->size, env->root, env->force_tcp};
  auto t = join_world(o, Clock::now() + std::chrono::seconds(10));
  if (!t.ok()) return "join: " + t.status().to_string();
  const int n = env->size, r = env->rank;
  std::vector<char> out = pattern(4099, r, 1), got(4099);
  SendOp s{(r + 1) % n, out.data(), out.size()};
  RecvOp v{(r + n - 1) % n, got.data(), got.size()};
  Status st = (*t)->exchange({&s, 1}, {&v, 1}, in(milliseconds(10000)));
  if (!st.ok()) return st.to_string();
  return got == pattern(4099, (r + n - 1) % n, 1) ? "" : "wrong bytes";
}

TEST(LaunchEnv, MissingVariablesAreNamed) {
  auto results = run_processes(1, [](int, const std::vector<int>&) -> std::string {
    clear_launch_env();
    Expected<LaunchEnv> env = launch_env_from_environment();
    if (env.status().code() != StatusCode::kFailedPrecondition) {
      return "expected failed_precondition";
    }
    const Status status = env.status();
    const std::string& m = status.message();
    if (m.find("KILN_RANK") == std::string::npos || m.find("mpirun") == std::string::npos) return m;
    setenv("KILN_RANK", "0", 1);
    setenv("KILN_WORLD_SIZE", "2", 1);
    env = launch_env_from_environment();
    if (env.ok() || env.status().message().find("KILN_ROOT_ADDR") == std::string::npos) {
      return "no KILN_ROOT_ADDR: " + env.status().to_string();
    }
    setenv("KILN_RANK", "2", 1);
    setenv("KILN_ROOT_ADDR", "127.0.0.1:1", 1);
    env = launch_env_from_environment();
    if (env.status().code() != StatusCode::kInvalidArgument) return "rank 2 of 2 accepted";
    setenv("KILN_RANK", "x", 1);
    env = launch_env_from_environment();
    if (env.status().code() != StatusCode::kInvalidArgument) return "rank 'x' accepted";
    // mpirun across hosts without KILN_ROOT_ADDR.
    clear_launch_env();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    setenv("OMPI_MCA_ess_base_jobid", "12345", 1);
    env = launch_env_from_environment();
    if (env.status().code() != StatusCode::kFailedPrecondition ||
        env.status().message().find("KILN_ROOT_ADDR") == std::string::npos) {
      return "several hosts: " + env.status().to_string();
    }
    return "";
  });
  EXPECT_EQ(results[0].exit_code, 0) << results[0].message;
}

TEST(LaunchEnv, KilnVariablesWithRootAddress) {
  int port = 0;
  Expected<int> fd = tcp_listen("127.0.0.1", 0, &port);  // find a free port
  ASSERT_TRUE(fd.ok());
  ::close(*fd);
  auto results = run_processes(3, [port](int r, const std::vector<int>&) -> std::string {
    clear_launch_env();
    setenv("KILN_RANK", std::to_string(r).c_str(), 1);
    setenv("KILN_WORLD_SIZE", "3", 1);
    setenv("KILN_ROOT_ADDR", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
    if (r == 2) setenv("KILN_COMM_TRANSPORT", "tcp", 1);  // one rank asking is enough
    return join_from_env_and_exchange(r, 3);
  });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
}

// What `mpirun -np 3 prog` gives each rank on one host: rank 0 publishes its root listener
// through a rendezvous file named after the job id, which is gone once all joined.
TEST(LaunchEnv, MpirunOnOneHostFindsRankZero) {
  std::string job =
      "kilntest" + std::to_string(getpid()) + "x" + std::to_string(random_id() % 100000);
  auto results = run_processes(3, [&job](int r, const std::vector<int>&) -> std::string {
    clear_launch_env();
    setenv("OMPI_COMM_WORLD_RANK", std::to_string(r).c_str(), 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r).c_str(), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
    setenv("OMPI_MCA_ess_base_jobid", job.c_str(), 1);
    if (r == 0) std::this_thread::sleep_for(milliseconds(100));  // the others wait for it
    return join_from_env_and_exchange(r, 3);
  });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.message;
  std::this_thread::sleep_for(milliseconds(100));
  std::string file = "/tmp/kiln-comm-" + job + "-" + std::to_string(getuid()) + ".root";
  EXPECT_NE(access(file.c_str(), F_OK), 0) << file;
}

}  // namespace
}  // namespace kiln::comm
