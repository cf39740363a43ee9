// Hostile and broken peers at the bootstrap and the TCP links (docs/comm.md "Authentication"):
// strangers sending garbage, absurd lengths, other versions or other jobs' hellos, peers that
// stall mid-frame or do not know the job's key, a forged root: each is refused with an error
// naming the cause, within a bounded time, and the world of the real ranks still forms. The
// status channel after the join answers only ranks of its world, and only its world's
// answers are believed.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/link.h"
#include "comm/transport.h"

namespace kiln::comm {
namespace {

using std::chrono::milliseconds;

constexpr char kSecret[] = "the job's secret";

Clock::time_point in_ms(int ms) { return Clock::now() + milliseconds(ms); }

// Prints how long a case took to its outcome (docs/comm.md quotes these lines).
void report(const char* what, Clock::time_point since, Clock::time_point until = Clock::now()) {
  std::printf("[ hostile  ] %-58s %7.1f ms\n", what,
              std::chrono::duration<double, std::milli>(until - since).count());
}

// A connection to `addr` (a stranger's socket): blocking, reads give up after 3 s.
int connect_to(const std::string& addr) {
  Expected<int> fd = tcp_connect(addr, in_ms(2000));
  EXPECT_TRUE(fd.ok()) << fd.status().to_string();
  if (!fd.ok()) return -1;
  set_nonblocking(*fd, false);
  timeval tv{3, 0};
  ::setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return *fd;
}

void send_raw(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// The root's answer to a stranger: the error frame's text ("" when the root answered
// something else, or closed without a word).
std::string root_error(int fd) {
  Expected<std::string> frame = recv_frame(fd, in_ms(2000), 1 << 16);
  if (!frame.ok()) return "no frame: " + frame.status().to_string();
  Expected<RootFrame> f = decode_root_frame(*frame, 0, 1);
  if (!f.ok() || f->kind != RootFrame::Kind::kError) return "not an error frame";
  return f->why;
}

Hello hello_of(uint64_t unique_id, int rank, int size) {
  Hello h;
  h.rank = rank;
  h.size = size;
  h.unique_id = unique_id;
  h.info = local_peer_info(rank);
  h.info.host = "stranger";
  h.data_addr = "127.0.0.1:9";
  return h;
}

// Joins `n` ranks through `root` in threads; st[r] gets each join's status, world[r] its
// transport.
void join_ranks(const RootInfo& root, int n, bool tcp, const std::vector<std::string>& secrets, int deadline_ms,
                std::vector<Status>* st, std::vector<std::unique_ptr<Transport>>* world) {
  st->assign(n, ok_status());
  world->clear();
  world->resize(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      JoinOptions o{r, n, root, tcp, secrets[static_cast<size_t>(r)]};
      Expected<std::unique_ptr<Transport>> t = join_world(o, in_ms(deadline_ms));
      if (t.ok()) (*world)[r] = std::move(t).value();
      (*st)[r] = t.status();
    });
  }
  for (auto& t : threads) t.join();
}

// One byte each way between ranks 0 and 1, through their links.
Status exchange_once(std::vector<std::unique_ptr<Transport>>& world) {
  std::vector<Status> st(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      char out = static_cast<char>('a' + r), in = 0;
      SendOp s{1 - r, &out, 1};
      RecvOp v{1 - r, &in, 1};
      st[r] = world[r]->exchange({&s, 1}, {&v, 1}, Deadline{in_ms(3000), "Test"});
      if (st[r].ok() && in != static_cast<char>('a' + 1 - r)) st[r] = data_loss("rank %d got %d", r, in);
    });
  }
  for (auto& t : threads) t.join();
  return st[0].ok() ? st[1] : st[0];
}

TEST(HostilePeers, StrangersAtTheRootAreRefusedAndTheWorldStillJoins) {
  const uint64_t id = random_id();
  Expected<RootInfo> root = start_root_with_id("127.0.0.1:0", id, "", kSecret);
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  const auto start = Clock::now();

  // Not a frame at all (an HTTP client): its first 4 bytes read as an absurd length.
  auto t = Clock::now();
  int http = connect_to(root->addr);
  send_raw(http, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(root_error(http).find("oversized bootstrap hello"), std::string::npos);
  report("root: not a frame (HTTP): refused", t);

  t = Clock::now();
  int garbage = connect_to(root->addr);
  ASSERT_TRUE(send_frame(garbage, std::string(40, '\x5a'), in_ms(1000)).ok());
  EXPECT_NE(root_error(garbage).find("not a Kiln bootstrap hello"), std::string::npos);
  report("root: a frame of garbage: refused", t);

  t = Clock::now();
  int version = connect_to(root->addr);
  std::string v9 = encode_hello(hello_of(id, 1, 2));
  v9[4] = 9;  // the protocol version follows the magic
  ASSERT_TRUE(send_frame(version, v9, in_ms(1000)).ok());
  EXPECT_NE(root_error(version).find("bootstrap protocol version 9 (expected 2)"), std::string::npos);
  report("root: protocol version 9: refused", t);

  t = Clock::now();
  int other_job = connect_to(root->addr);
  ASSERT_TRUE(send_frame(other_job, encode_hello(hello_of(id ^ 1, 1, 2)), in_ms(1000)).ok());
  EXPECT_NE(root_error(other_job).find("another communicator"), std::string::npos);
  report("root: a hello of another job: refused", t);

  // A well-formed hello of this job claiming rank 1, answered with a key that is not the job's:
  // refused, and rank 1's place stays free for the real rank 1.
  t = Clock::now();
  int impostor = connect_to(root->addr);
  const std::string hello = encode_hello(hello_of(id, 1, 2));
  ASSERT_TRUE(send_frame(impostor, hello, in_ms(1000)).ok());
  Expected<std::string> challenge = recv_frame(impostor, in_ms(2000), 1024);
  ASSERT_TRUE(challenge.ok()) << challenge.status().to_string();
  Expected<RootFrame> c = decode_root_frame(*challenge, id, 2);
  ASSERT_TRUE(c.ok() && c->kind == RootFrame::Kind::kChallenge);
  HelloAuth wrong{auth_mac(world_key("a guess", id), "kiln bootstrap hello", c->challenge, hello),
                  std::string(kAuthNonceBytes, 'n')};
  ASSERT_TRUE(send_frame(impostor, encode_hello_auth(wrong), in_ms(1000)).ok());
  std::string why = root_error(impostor);
  EXPECT_NE(why.find("authentication failed: the hello of rank 1 (host stranger"), std::string::npos) << why;
  report("root: rank 1's hello signed with a wrong key: refused", t);

  // Half a hello, then nothing: the root serves the others meanwhile.
  int staller = connect_to(root->addr);
  send_raw(staller, std::string("\x40\x00\x00\x00KLNB", 8));

  std::vector<Status> st;
  std::vector<std::unique_ptr<Transport>> world;
  t = Clock::now();
  join_ranks(*root, 2, /*tcp=*/true, {kSecret, kSecret}, 5000, &st, &world);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  EXPECT_TRUE(exchange_once(world).ok());
  report("root: then the real ranks 0, 1 (one stalls mid-frame): joined", t);
  EXPECT_LT(Clock::now() - start, milliseconds(8000));
  for (int fd : {http, garbage, version, other_job, impostor, staller}) ::close(fd);
}

TEST(HostilePeers, RankWithAnotherSecretIsRefusedAndTheOthersNameItWithinTheDeadline) {
  const uint64_t id = random_id();
  Expected<RootInfo> root = start_root_with_id("127.0.0.1:0", id, "", kSecret);
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  const auto start = Clock::now();
  std::vector<Status> st;
  std::vector<std::unique_ptr<Transport>> world;
  std::vector<Clock::duration> took(2);
  {
    st.assign(2, ok_status());
    world.resize(2);
    std::vector<std::thread> threads;
    const std::vector<std::string> secrets = {kSecret, "another secret"};
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto t = join_world(JoinOptions{r, 2, *root, false, secrets[static_cast<size_t>(r)]}, in_ms(800));
        took[r] = Clock::now() - start;
        st[r] = t.status();
      });
    }
    for (auto& t : threads) t.join();
  }
  std::printf("[ hostile  ] %-58s %7.1f ms\n", "rank 1 with another secret: refused by the root",
              std::chrono::duration<double, std::milli>(took[1]).count());
  std::printf("[ hostile  ] %-58s %7.1f ms\n", "rank 0 then names rank 1 missing (deadline 800 ms)",
              std::chrono::duration<double, std::milli>(took[0]).count());
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  EXPECT_EQ(st[1].code(), StatusCode::kFailedPrecondition) << st[1].to_string();
  EXPECT_NE(st[1].message().find("rejected by the root"), std::string::npos) << st[1].message();
  EXPECT_NE(st[1].message().find("authentication failed"), std::string::npos) << st[1].message();
  EXPECT_EQ(st[0].code(), StatusCode::kDeadlineExceeded) << st[0].to_string();
  EXPECT_NE(st[0].message().find("rank(s) 1 of 2 never joined"), std::string::npos) << st[0].message();
}

// A listener posing as rank 0's: it challenges the hello like the real one but cannot sign
// the world table with the job's key, or sends a table without challenging at all.
TEST(HostilePeers, ForgedRootIsRefusedByTheJoiningRank) {
  for (bool challenge_first : {true, false}) {
    int port = 0;
    Expected<int> listen_fd = tcp_listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(listen_fd.ok());
    const uint64_t id = random_id();
    std::thread fake([&] {
      int fd = ::accept(*listen_fd, nullptr, nullptr);
      if (fd < 0) return;
      set_nonblocking(fd, true);
      recv_frame(fd, in_ms(3000), 4096).status().ignore_error();  // the rank's hello
      if (challenge_first) {
        send_frame(fd, std::string(1, '\x05') + std::string(kAuthNonceBytes, 'c'), in_ms(1000)).ignore_error();
        recv_frame(fd, in_ms(3000), 4096).status().ignore_error();
      }
      WireWriter w;  // a world of one: this rank, at a data address of the forger's choosing
      w.u8(2);
      w.u64(7);
      w.u8(1);
      w.u32(1);
      w.str("forged");
      w.u64(1);
      w.u64(1);
      w.str("127.0.0.1:9");
      send_frame(fd, w.data() + std::string(kAuthMacBytes, 'm'), in_ms(1000)).ignore_error();
      std::this_thread::sleep_for(milliseconds(200));
      ::close(fd);
    });
    const auto start = Clock::now();
    JoinOptions o{0, 1, RootInfo{"127.0.0.1:" + std::to_string(port), id}, false, kSecret};
    Status s = join_world(o, in_ms(3000)).status();
    const auto refused = Clock::now();
    fake.join();
    ::close(*listen_fd);
    EXPECT_LT(Clock::now() - start, milliseconds(3000));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
    EXPECT_NE(s.message().find("is not signed with this job's key"), std::string::npos) << s.message();
    report(challenge_first ? "forged root, table with a wrong MAC: refused by the rank"
                           : "forged root, table before any challenge: refused", start, refused);
  }
}

// Strangers at a rank's TCP link listener while the links form: garbage, a hello of another
// world, a rank that is not a peer, and one that knows the world's ids (seen on the wire) but
// not its key. Each is refused and closed; the real rank 1 still links.
TEST(HostilePeers, StrangersAtATcpLinkListenerAreRefusedAndTheLinksStillForm) {
  WorldTable table;
  table.unique_id = random_id();
  table.nonce = random_id();
  table.key = world_key(kSecret, table.unique_id);
  std::vector<int> listen_fds(2);
  for (int r = 0; r < 2; ++r) {
    int port = 0;
    Expected<int> fd = tcp_listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(fd.ok());
    listen_fds[r] = *fd;
    PeerInfo p = local_peer_info(r);
    p.host_id += static_cast<uint64_t>(r);  // two "hosts": TCP between them
    table.peers.push_back(p);
    table.data_addrs.push_back("127.0.0.1:" + std::to_string(port));
  }
  const std::string addr0 = table.data_addrs[0];
  std::vector<int> strangers;
  auto stranger = [&](const std::string& bytes) {
    int fd = connect_to(addr0);
    send_raw(fd, bytes);
    strangers.push_back(fd);
  };
  auto framed = [](const std::string& payload) {
    std::string f(4, '\0');
    uint32_t n = static_cast<uint32_t>(payload.size());
    std::memcpy(f.data(), &n, 4);
    return f + payload;
  };
  stranger("GET / HTTP/1.1\r\n\r\n");  // an absurd frame length
  stranger(framed(encode_link_hello(table.unique_id, table.nonce ^ 1, 1)));  // another world
  stranger(framed(encode_link_hello(table.unique_id, table.nonce, 7)));      // no such peer
  // Rank 1's hello, then an answer to the challenge computed without the key.
  stranger(framed(encode_link_hello(table.unique_id, table.nonce, 1)) + framed(std::string(kAuthMacBytes, 'x')));

  const auto start = Clock::now();
  std::vector<std::vector<std::unique_ptr<Link>>> links(2);
  std::vector<Status> st(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    links[r].resize(2);
    threads.emplace_back([&, r] {
      st[r] = make_tcp_links(table, r, listen_fds[r], {1 - r}, in_ms(5000), &links[r]);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  report("link: 4 strangers refused, then rank 1 linked", start);
  // The link carries bytes from rank 1 to rank 0.
  size_t sent = 0;
  ASSERT_TRUE(links[1][0]->try_send("ok", 2, &sent).ok());
  EXPECT_EQ(sent, 2u);
  std::string got;
  for (int i = 0; i < 200 && got.size() < 2; ++i) {
    char buf[2];
    size_t n = 0;
    ASSERT_TRUE(links[0][1]->try_recv(buf, 2 - got.size(), &n).ok());
    got.append(buf, n);
    if (n == 0) std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(got, "ok");
  // Every stranger was closed (after at most a challenge).
  for (int fd : strangers) {
    char buf[64];
    ssize_t n = 0;
    for (int i = 0; i < 4 && (n = ::recv(fd, buf, sizeof(buf), 0)) > 0; ++i) {
    }
    // Closed: end of stream, or a reset when it closed with the stranger's bytes unread.
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "a stranger's connection is still open";
    ::close(fd);
  }
  for (int fd : listen_fds) ::close(fd);
}

// Reads exactly n bytes from a blocking socket ("" when it closed or failed first).
std::string read_exactly(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) return "";
    got += static_cast<size_t>(r);
  }
  return out;
}

// True when the peer closed `fd` without sending anything more.
bool closed_without_a_word(int fd) {
  char buf[64];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Two ranks' status channels on 127.0.0.1 (rank 0 has started `started0` collectives).
struct StatusWorld {
  WorldTable table;
  std::vector<std::unique_ptr<StatusChannel>> channels;
};

void start_status_world(StatusWorld* w, uint64_t started0) {
  w->table.unique_id = random_id();
  w->table.nonce = random_id();
  w->table.key = world_key(kSecret, w->table.unique_id);
  std::vector<int> fds;
  for (int r = 0; r < 2; ++r) {
    int port = 0;
    Expected<int> fd = tcp_listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(fd.ok());
    fds.push_back(*fd);
    w->table.peers.push_back(local_peer_info(r));
    w->table.data_addrs.push_back("127.0.0.1:" + std::to_string(port));
  }
  for (int r = 0; r < 2; ++r) {
    Expected<std::unique_ptr<StatusChannel>> c =
        start_tcp_status_channel(w->table, r, fds[static_cast<size_t>(r)], {1 - r});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    w->channels.push_back(std::move(c).value());
  }
  w->channels[0]->publish_collectives(started0);
}

int64_t ask_rank0(StatusChannel& asker) {
  const int ranks[1] = {0};
  int64_t counts[1] = {-2};
  asker.query_collectives(ranks, counts);
  return counts[0];
}

TEST(HostilePeers, StatusChannelAnswersOnlyRanksOfItsWorld) {
  StatusWorld w;
  ASSERT_NO_FATAL_FAILURE(start_status_world(&w, 7));
  const std::string addr0 = w.table.data_addrs[0];
  auto challenged = [&](int fd) {
    Expected<std::string> c = decode_status_challenge(read_exactly(fd, kStatusChallengeBytes).data(),
                                                      kStatusChallengeBytes);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : std::string(kAuthNonceBytes, '\0');
  };
  const StatusQuery stranger_query{1, std::string(kAuthNonceBytes, 's')};
  struct Case {
    const char* what;
    std::function<std::string(const std::string& challenge)> bytes;
  };
  const std::string other_key = world_key("another secret", w.table.unique_id);
  const std::string some_challenge(kAuthNonceBytes, 'r');
  const Case cases[] = {
      {"an HTTP request", [](const std::string&) { return std::string("GET / HTTP/1.1\r\n\r\n"); }},
      {"a query signed with another key",
       [&](const std::string& c) { return encode_status_query(other_key, w.table.nonce, c, stranger_query); }},
      {"a query signed for another challenge (a replay)",
       [&](const std::string&) {
         return encode_status_query(w.table.key, w.table.nonce, some_challenge, stranger_query);
       }},
      {"a query of another world",
       [&](const std::string& c) { return encode_status_query(w.table.key, w.table.nonce ^ 1, c, stranger_query); }},
      {"half a query, then its end",
       [&](const std::string& c) {
         return encode_status_query(w.table.key, w.table.nonce, c, stranger_query).substr(0, 30);
       }},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    int fd = connect_to(addr0);
    ASSERT_GE(fd, 0);
    send_raw(fd, c.bytes(challenged(fd)));
    if (std::string(c.what).rfind("half", 0) == 0) ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(closed_without_a_word(fd)) << c.what << ": answered";
    ::close(fd);
    report((std::string("status: ") + c.what + ": closed, no answer").c_str(), start);
  }
  // Strangers that hold their connections open without asking (more than the channel
  // serves at once): they cost it a slot each, and must not keep a rank's query unheard.
  std::vector<int> silent;
  for (int i = 0; i < 40; ++i) silent.push_back(connect_to(addr0));
  // A stranger sending a well-formed start of a query, then a byte every 50 ms: closed at the
  // channel's budget (500 ms), not kept while the bytes trickle in.
  {
    const auto start = Clock::now();
    int fd = connect_to(addr0);
    ASSERT_GE(fd, 0);
    const std::string q = encode_status_query(w.table.key, w.table.nonce, challenged(fd), stranger_query);
    send_raw(fd, q.substr(0, 8));
    bool closed = false;
    for (size_t i = 8; i + 1 < q.size() && !closed; ++i) {
      std::this_thread::sleep_for(milliseconds(50));
      closed = ::send(fd, &q[i], 1, MSG_NOSIGNAL) < 0;
      char b;
      ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT);
      closed = closed || n == 0 || (n < 0 && errno == ECONNRESET);
    }
    const auto took = Clock::now() - start;
    EXPECT_TRUE(closed) << "a query trickling in byte by byte was kept open";
    EXPECT_LT(took, milliseconds(1500));
    ::close(fd);
    report("status: a query trickling in byte by byte: closed", start);
  }
  // Rank 1 asks while they are connected: answered at once.
  auto start = Clock::now();
  EXPECT_EQ(ask_rank0(*w.channels[1]), 7);
  EXPECT_LT(Clock::now() - start, milliseconds(250));
  report("status: rank 1's query, 40 silent strangers connected", start);
  // A query of the world made by hand (the test knows the key) is answered, and the answer
  // is signed for the asker's challenge: the harness above can tell an answer from none.
  int fd = connect_to(addr0);
  const std::string theirs = challenged(fd);
  send_raw(fd, encode_status_query(w.table.key, w.table.nonce, theirs, stranger_query));
  Expected<uint64_t> started = decode_status_answer(read_exactly(fd, kStatusAnswerBytes).data(),
                                                    kStatusAnswerBytes, w.table.key,
                                                    w.table.nonce, stranger_query.challenge);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  EXPECT_EQ(*started, 7u);
  ::close(fd);
  for (int s : silent) ::close(s);
  // Stopped: a later query gets no answer, promptly.
  w.channels[0]->stop();
  start = Clock::now();
  EXPECT_EQ(ask_rank0(*w.channels[1]), -1);
  EXPECT_LT(Clock::now() - start, milliseconds(400));
}

// A forged rank 0 (a stranger listening where rank 1 asks): its challenge is taken, but an
// answer not signed with the key for rank 1's own challenge is refused.
TEST(HostilePeers, StatusAnswerFromAForgerIsRefused) {
  for (bool knows_key : {false, true}) {
    WorldTable table;
    table.unique_id = random_id();
    table.nonce = random_id();
    table.key = world_key(kSecret, table.unique_id);
    int port0 = 0, port1 = 0;
    Expected<int> forger = tcp_listen("127.0.0.1", 0, &port0);
    Expected<int> fd1 = tcp_listen("127.0.0.1", 0, &port1);
    ASSERT_TRUE(forger.ok() && fd1.ok());
    for (int r = 0; r < 2; ++r) table.peers.push_back(local_peer_info(r));
    table.data_addrs = {"127.0.0.1:" + std::to_string(port0), "127.0.0.1:" + std::to_string(port1)};
    std::thread forge([&] {
      int fd = ::accept(*forger, nullptr, nullptr);
      if (fd < 0) return;
      timeval tv{3, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      const std::string mine(kAuthNonceBytes, 'f');
      send_raw(fd, encode_status_challenge(mine));
      // The query's challenge is in the clear: the forger signs its answer for it.
      std::string q = read_exactly(fd, kStatusQueryBytes);
      Expected<StatusQuery> query =
          decode_status_query(q.data(), q.size(), table.key, table.nonce, mine);
      EXPECT_TRUE(query.ok()) << query.status().to_string();
      if (query.ok()) {
        const std::string key = knows_key ? table.key : world_key("forged", table.unique_id);
        send_raw(fd, encode_status_answer(key, table.nonce, query->challenge, 99));
      }
      ::close(fd);
    });
    Expected<std::unique_ptr<StatusChannel>> asker = start_tcp_status_channel(table, 1, *fd1, {0});
    ASSERT_TRUE(asker.ok());
    EXPECT_EQ(ask_rank0(**asker), knows_key ? 99 : -1) << (knows_key ? "the key's answer" : "a forgery");
    forge.join();
    ::close(*forger);
  }
}

}  // namespace
}  // namespace kiln::comm
