// The collectives through the C API (include/kiln/comm.h) on in-process worlds
// (kilnCommInitAll over CPU devices, one stream per rank): every collective x data type x
// reduce op x rank count (2, 3, 4, 8) x forced algorithm, counts 0, 1 and not divisible by
// the rank count, in-place and out-of-place, checked against a serial computation done
// here; argument errors; abort, timeout and the async error. Also the algorithms directly
// on worlds that pretend to span several hosts (hierarchical AllReduce).
//
// Inputs are chosen so every partial result is exact in its type (integers wrap, which is
// exact modular arithmetic; floats are multiples of 0.5 in [-8, 8] for sum/max/min, and
// +-2^k for prod, so sums of 8 stay within 7 significant bits and products are powers of
// two): the result is then independent of the order the algorithm combines in, and the
// comparison is exact, also for fp16 and bf16.
#include <gtest/gtest.h>
#include <pthread.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduce_ops.h"
#include "comm/transport.h"
#include "core/dtype.h"
#include "kiln/comm.h"
#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

constexpr int kMaxRanks = 8;

std::string last_error() { return kilnGetRecentErrMsg(); }

// ---- Types, inputs and the serial reference ------------------------------------------------

struct TypeInfo {
  kilnCommDataType type;
  const char* name;
  size_t size;
  bool is_float;
  bool is_signed;
};

const TypeInfo kTypes[] = {
    {KILN_COMM_INT8, "int8", 1, false, true},      {KILN_COMM_INT16, "int16", 2, false, true},
    {KILN_COMM_INT32, "int32", 4, false, true},    {KILN_COMM_INT64, "int64", 8, false, true},
    {KILN_COMM_UINT8, "uint8", 1, false, false},   {KILN_COMM_UINT16, "uint16", 2, false, false},
    {KILN_COMM_UINT32, "uint32", 4, false, false}, {KILN_COMM_UINT64, "uint64", 8, false, false},
    {KILN_COMM_FP16, "fp16", 2, true, true},       {KILN_COMM_BF16, "bf16", 2, true, true},
    {KILN_COMM_FP32, "fp32", 4, true, true},       {KILN_COMM_FP64, "fp64", 8, true, true},
};
const kilnReduceOp kOps[] = {KILN_REDUCE_SUM, KILN_REDUCE_PROD, KILN_REDUCE_MAX, KILN_REDUCE_MIN};
const char* op_name(kilnReduceOp op) {
  static const char* const names[] = {"sum", "prod", "max", "min"};
  return names[op];
}

// Element i of rank r's input for `op`.
double float_input(kilnReduceOp op, int r, size_t i) {
  if (op == KILN_REDUCE_PROD) {
    static const double factors[] = {-2, -1, -0.5, 0.5, 1, 2};
    return factors[(r * 5 + i * 3) % 6];
  }
  return (static_cast<double>((r * 7 + i * 13) % 33) - 16) * 0.5;
}
int64_t int_input(const TypeInfo& t, kilnReduceOp op, int r, size_t i) {
  if (op == KILN_REDUCE_PROD) return static_cast<int64_t>((r + i) % 5) - 2;
  int64_t v = static_cast<int64_t>((r * 37 + i * 11) % 199) - 99;
  if (t.size == 8) v *= int64_t{1000003} * 1000003;  // exercise the high bits
  return v;
}

// The value of `v` in a type of `size` bytes: wrapped, then sign- or zero-extended.
int64_t wrap(const TypeInfo& t, uint64_t v) {
  if (t.size == 8) return static_cast<int64_t>(v);
  const int bits = static_cast<int>(t.size * 8);
  uint64_t low = v & ((uint64_t{1} << bits) - 1);
  if (t.is_signed && (low >> (bits - 1)) != 0) low |= ~((uint64_t{1} << bits) - 1);
  return static_cast<int64_t>(low);
}

void put_float(const TypeInfo& t, uint8_t* base, size_t i, double v) {
  switch (t.type) {
    case KILN_COMM_FP16: {
      uint16_t h = kiln::float_to_fp16(static_cast<float>(v));
      std::memcpy(base + 2 * i, &h, 2);
      break;
    }
    case KILN_COMM_BF16: {
      uint16_t h = kiln::float_to_bf16(static_cast<float>(v));
      std::memcpy(base + 2 * i, &h, 2);
      break;
    }
    case KILN_COMM_FP32: {
      float f = static_cast<float>(v);
      std::memcpy(base + 4 * i, &f, 4);
      break;
    }
    default:
      std::memcpy(base + 8 * i, &v, 8);
  }
}
void put_int(const TypeInfo& t, uint8_t* base, size_t i, int64_t v) {
  std::memcpy(base + t.size * i, &v, t.size);  // little-endian: the low bytes
}

Bytes make_input(const TypeInfo& t, kilnReduceOp op, int r, size_t count) {
  Bytes b(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    if (t.is_float) {
      put_float(t, b.data(), i, float_input(op, r, i));
    } else {
      put_int(t, b.data(), i, int_input(t, op, r, i));
    }
  }
  return b;
}

// The reduction over ranks 0..n-1 of elements [first, first + len), computed serially.
Bytes reference(const TypeInfo& t, kilnReduceOp op, int n, size_t first, size_t len) {
  Bytes out(len * t.size);
  for (size_t k = 0; k < len; ++k) {
    const size_t i = first + k;
    if (t.is_float) {
      double acc = float_input(op, 0, i);
      for (int r = 1; r < n; ++r) {
        double x = float_input(op, r, i);
        acc = op == KILN_REDUCE_SUM ? acc + x
              : op == KILN_REDUCE_PROD ? acc * x
              : op == KILN_REDUCE_MAX ? std::max(acc, x)
                                      : std::min(acc, x);
      }
      put_float(t, out.data(), k, acc);
    } else {
      int64_t acc = wrap(t, static_cast<uint64_t>(int_input(t, op, 0, i)));
      for (int r = 1; r < n; ++r) {
        int64_t x = wrap(t, static_cast<uint64_t>(int_input(t, op, r, i)));
        uint64_t ua = static_cast<uint64_t>(acc), ux = static_cast<uint64_t>(x);
        if (op == KILN_REDUCE_SUM) {
          acc = wrap(t, ua + ux);
        } else if (op == KILN_REDUCE_PROD) {
          acc = wrap(t, ua * ux);
        } else {
          // Unsigned types compare their zero-extended values (uint64 as unsigned).
          bool x_greater = t.is_signed ? x > acc : ux > ua;
          if ((op == KILN_REDUCE_MAX) == x_greater) acc = x;
        }
      }
      put_int(t, out.data(), k, acc);
    }
  }
  return out;
}

// Index of the first differing element, or -1.
int64_t first_difference(const uint8_t* a, const uint8_t* b, size_t count, size_t elem) {
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * elem, b + i * elem, elem) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

// ---- Worlds -------------------------------------------------------------------------------------

// One kilnInit with 8 CPU devices (they share this machine's cores) for the whole suite, a
// stream per device, and communicators per (rank count, KILN_COMM_ALGO) made on first use.
class CollectivesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("KILN_DEVICES", "cpu:8", 1);
    ::setenv("KILN_COMM_TIMEOUT", "10", 1);
    // Small pipeline pieces, so the test's small counts still run multi-piece pipelines.
    ::setenv("KILN_COMM_CHUNK_BYTES", "1024", 1);
    kilnError e = kilnInit(nullptr);
    ::unsetenv("KILN_DEVICES");
    ASSERT_EQ(e, KILN_SUCCESS) << last_error();
    for (int d = 0; d < kMaxRanks; ++d) {
      ASSERT_EQ(kilnrtSetDevice(d), KILN_SUCCESS) << last_error();
      ASSERT_EQ(kilnrtCreateStream(&streams_[d]), KILN_SUCCESS) << last_error();
    }
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  }
  static void TearDownTestSuite() {
    for (auto& [key, comms] : worlds_) {
      for (kilnComm c : comms) EXPECT_EQ(kilnCommDestroy(c), KILN_SUCCESS) << last_error();
    }
    worlds_.clear();
    EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  }

  static std::vector<kilnComm> make_comms(int n, const char* algo) {
    std::vector<int32_t> devices(n);
    for (int i = 0; i < n; ++i) devices[i] = i;
    std::vector<kilnComm> comms(n, nullptr);
    ::setenv("KILN_COMM_ALGO", algo, 1);
    kilnError e = kilnCommInitAll(static_cast<uint32_t>(n), devices.data(), comms.data());
    ::unsetenv("KILN_COMM_ALGO");
    EXPECT_EQ(e, KILN_SUCCESS) << last_error();
    return comms;
  }

  // The cached world of n ranks with KILN_COMM_ALGO=algo ("" for automatic choice).
  static const std::vector<kilnComm>& world(int n, const std::string& algo) {
    auto key = std::make_pair(n, algo);
    auto it = worlds_.find(key);
    if (it == worlds_.end()) it = worlds_.emplace(key, make_comms(n, algo.c_str())).first;
    return it->second;
  }

  static kilnrtStream stream(int rank) { return streams_[rank]; }

  // Waits for every rank's stream; a failure names the rank and the message.
  static void sync(int n) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(kilnrtSynchronizeStream(streams_[r]), KILN_SUCCESS)
          << "rank " << r << ": " << last_error();
    }
  }

  static kilnrtStream streams_[kMaxRanks];
  static std::map<std::pair<int, std::string>, std::vector<kilnComm>> worlds_;
};

kilnrtStream CollectivesTest::streams_[kMaxRanks];
std::map<std::pair<int, std::string>, std::vector<kilnComm>> CollectivesTest::worlds_;

const int kRankCounts[] = {2, 3, 4, 8};
// Counts: empty, one element, fewer than the ranks or not divisible by them, and
// several pipeline pieces per block.
const size_t kCounts[] = {0, 1, 7, 1003};

// ---- AllReduce -------------------------------------------------------------------------------

TEST_F(CollectivesTest, AllReduceEveryTypeOpRankCountAndAlgorithm) {
  const char* algos[] = {"", "ring", "halving_doubling", "oneshot", "tree", "hierarchical"};
  for (int n : kRankCounts) {
    for (const char* algo : algos) {
      const std::vector<kilnComm>& comms = world(n, algo);
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          // Every (type, op) of this configuration at once, then one synchronisation.
          struct Case {
            const TypeInfo* t;
            kilnReduceOp op;
            std::vector<Bytes> send, recv;
          };
          std::vector<Case> cases;
          for (const TypeInfo& t : kTypes) {
            for (kilnReduceOp op : kOps) {
              Case c{&t, op, {}, {}};
              for (int r = 0; r < n; ++r) {
                c.send.push_back(make_input(t, op, r, count));
                c.recv.push_back(Bytes(count * t.size, 0xAB));
              }
              cases.push_back(std::move(c));
            }
          }
          ASSERT_EQ(kilnGroupStart(), KILN_SUCCESS);
          for (Case& c : cases) {
            for (int r = 0; r < n; ++r) {
              void* send = c.send[r].data();
              void* recv = in_place ? send : c.recv[r].data();
              ASSERT_EQ(kilnAllReduce(send, recv, count, c.t->type, c.op, comms[r], stream(r)),
                        KILN_SUCCESS)
                  << last_error();
            }
          }
          ASSERT_EQ(kilnGroupEnd(), KILN_SUCCESS) << last_error();
          sync(n);
          for (Case& c : cases) {
            Bytes want = reference(*c.t, c.op, n, 0, count);
            for (int r = 0; r < n; ++r) {
              const Bytes& got = in_place ? c.send[r] : c.recv[r];
              int64_t at = first_difference(got.data(), want.data(), count, c.t->size);
              ASSERT_EQ(at, -1) << "AllReduce " << c.t->name << " " << op_name(c.op) << " n=" << n
                                << " algo='" << algo << "' count=" << count
                                << (in_place ? " in-place" : "") << ": rank " << r
                                << " differs at element " << at;
            }
          }
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AllReduceLargeCountsUseEveryPipelinePath) {
  // Large enough that automatic choice takes the ring (over 512 KiB) for 8-byte types.
  const size_t count = 70001;
  const TypeInfo* types[] = {&kTypes[3], &kTypes[9], &kTypes[10], &kTypes[11]};
  for (int n : {3, 4}) {
    for (const char* algo : {"", "halving_doubling"}) {
      const std::vector<kilnComm>& comms = world(n, algo);
      for (const TypeInfo* t : types) {
        std::vector<Bytes> send, recv;
        for (int r = 0; r < n; ++r) {
          send.push_back(make_input(*t, KILN_REDUCE_SUM, r, count));
          recv.push_back(Bytes(count * t->size));
        }
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(kilnAllReduce(send[r].data(), recv[r].data(), count, t->type, KILN_REDUCE_SUM,
                                  comms[r], stream(r)),
                    KILN_SUCCESS)
              << last_error();
        }
        sync(n);
        Bytes want = reference(*t, KILN_REDUCE_SUM, n, 0, count);
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(first_difference(recv[r].data(), want.data(), count, t->size), -1)
              << t->name << " n=" << n << " algo='" << algo << "' rank " << r;
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AllReduceOfArbitraryFloatsIsBitIdenticalOnEveryRank) {
  // Rounding makes the result depend on the order of combination, but every rank must get
  // the same bits, and the sum is within n * eps * sum|x| of the exact one.
  const size_t count = 4099;
  for (const char* algo : {"", "ring", "halving_doubling", "oneshot", "tree"}) {
    const int n = 4;
    const std::vector<kilnComm>& comms = world(n, algo);
    std::vector<std::vector<float>> data(n, std::vector<float>(count));
    uint32_t seed = 12345;
    for (auto& v : data) {
      for (float& x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = static_cast<float>(seed >> 8) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
      }
    }
    std::vector<std::vector<float>> expect_abs(1, std::vector<float>(count));
    std::vector<double> exact(count, 0), magnitude(count, 0);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < n; ++r) {
        exact[i] += data[r][i];
        magnitude[i] += std::fabs(data[r][i]);
      }
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(kilnAllReduce(data[r].data(), data[r].data(), count, KILN_COMM_FP32,
                              KILN_REDUCE_SUM, comms[r], stream(r)),
                KILN_SUCCESS);
    }
    sync(n);
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), count * 4), 0)
          << "algo '" << algo << "': rank " << r << " differs from rank 0";
    }
    const double eps = std::ldexp(1.0, -24);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NEAR(data[0][i], exact[i], n * eps * magnitude[i]) << "element " << i;
    }
    // max of +0 and -0 depends on the operand order; every rank still gets the same bits.
    for (int n3 : {3, 4}) {
      const std::vector<kilnComm>& c3 = world(n3, algo);
      std::vector<std::vector<float>> zeros(n3, std::vector<float>(64));
      for (int r = 0; r < n3; ++r) {
        for (size_t i = 0; i < 64; ++i) zeros[r][i] = ((r + i) % 3 == 0) ? -0.0f : 0.0f;
      }
      for (int r = 0; r < n3; ++r) {
        ASSERT_EQ(kilnAllReduce(zeros[r].data(), zeros[r].data(), 64, KILN_COMM_FP32,
                                KILN_REDUCE_MAX, c3[r], stream(r)),
                  KILN_SUCCESS);
      }
      sync(n3);
      for (int r = 1; r < n3; ++r) {
        ASSERT_EQ(std::memcmp(zeros[r].data(), zeros[0].data(), 64 * 4), 0)
            << "algo '" << algo << "' n=" << n3 << ": rank " << r << " differs from rank 0";
      }
    }
  }
}

// ---- Broadcast, Reduce -------------------------------------------------------------------------

TEST_F(CollectivesTest, BroadcastEveryTypeRootRankCountAndAlgorithm) {
  for (int n : kRankCounts) {
    for (const char* algo : {"", "tree", "ring"}) {
      const std::vector<kilnComm>& comms = world(n, algo);
      for (int root : {0, n / 2, n - 1}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{3001}}) {
          std::vector<std::vector<Bytes>> bufs;
          for (const TypeInfo& t : kTypes) {
            std::vector<Bytes> per_rank;
            for (int r = 0; r < n; ++r) {
              per_rank.push_back(r == root ? make_input(t, KILN_REDUCE_SUM, root, count)
                                           : Bytes(count * t.size, 0xCD));
            }
            bufs.push_back(std::move(per_rank));
          }
          for (size_t k = 0; k < std::size(kTypes); ++k) {
            for (int r = 0; r < n; ++r) {
              ASSERT_EQ(kilnBroadcast(bufs[k][r].data(), count, kTypes[k].type,
                                      static_cast<uint32_t>(root), comms[r], stream(r)),
                        KILN_SUCCESS)
                  << last_error();
            }
          }
          sync(n);
          for (size_t k = 0; k < std::size(kTypes); ++k) {
            Bytes want = make_input(kTypes[k], KILN_REDUCE_SUM, root, count);
            for (int r = 0; r < n; ++r) {
              ASSERT_EQ(bufs[k][r], want) << "Broadcast " << kTypes[k].name << " n=" << n
                                          << " algo='" << algo << "' root=" << root
                                          << " count=" << count << ": rank " << r;
            }
          }
        }
      }
    }
  }
}

TEST_F(CollectivesTest, ReduceEveryTypeOpRootRankCountAndAlgorithm) {
  for (int n : kRankCounts) {
    for (const char* algo : {"", "tree", "ring"}) {
      const std::vector<kilnComm>& comms = world(n, algo);
      for (int root : {0, n - 1}) {
        for (size_t count : kCounts) {
          for (bool in_place : {false, true}) {
            struct Case {
              const TypeInfo* t;
              kilnReduceOp op;
              std::vector<Bytes> send;
              Bytes recv;
            };
            std::vector<Case> cases;
            for (const TypeInfo& t : kTypes) {
              for (kilnReduceOp op : kOps) {
                Case c{&t, op, {}, Bytes(count * t.size, 0xEF)};
                for (int r = 0; r < n; ++r) c.send.push_back(make_input(t, op, r, count));
                cases.push_back(std::move(c));
              }
            }
            for (Case& c : cases) {
              for (int r = 0; r < n; ++r) {
                void* send = c.send[r].data();
                // recvBuf matters on the root only; the others pass NULL.
                void* recv = r != root ? nullptr : in_place ? send : c.recv.data();
                ASSERT_EQ(kilnReduce(send, recv, count, c.t->type, c.op,
                                     static_cast<uint32_t>(root), comms[r], stream(r)),
                          KILN_SUCCESS)
                    << last_error();
              }
            }
            sync(n);
            for (Case& c : cases) {
              Bytes want = reference(*c.t, c.op, n, 0, count);
              const Bytes& got = in_place ? c.send[root] : c.recv;
              int64_t at = first_difference(got.data(), want.data(), count, c.t->size);
              ASSERT_EQ(at, -1) << "Reduce " << c.t->name << " " << op_name(c.op) << " n=" << n
                                << " algo='" << algo << "' root=" << root << " count=" << count
                                << (in_place ? " in-place" : "") << " differs at element " << at;
              // The other ranks' inputs are left alone.
              for (int r = 0; r < n; ++r) {
                if (r != root || !in_place) {
                  ASSERT_EQ(c.send[r], make_input(*c.t, c.op, r, count)) << "rank " << r;
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---- AllGather, ReduceScatter, AlltoAll ---------------------------------------------------------

TEST_F(CollectivesTest, AllGatherEveryRankCountInPlaceAndOut) {
  const TypeInfo* types[] = {&kTypes[0], &kTypes[8], &kTypes[11]};
  for (int n : kRankCounts) {
    const std::vector<kilnComm>& comms = world(n, "");
    for (const TypeInfo* t : types) {
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          std::vector<Bytes> send, recv;
          for (int r = 0; r < n; ++r) {
            send.push_back(make_input(*t, KILN_REDUCE_SUM, r, count));
            recv.push_back(Bytes(n * count * t->size, 0x11));
            if (in_place) {
              std::memcpy(recv[r].data() + r * count * t->size, send[r].data(), send[r].size());
            }
          }
          for (int r = 0; r < n; ++r) {
            void* s = in_place ? recv[r].data() + r * count * t->size : send[r].data();
            ASSERT_EQ(kilnAllGather(s, recv[r].data(), count, t->type, comms[r], stream(r)),
                      KILN_SUCCESS)
                << last_error();
          }
          sync(n);
          Bytes want;
          for (int r = 0; r < n; ++r) want.insert(want.end(), send[r].begin(), send[r].end());
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ(recv[r], want) << "AllGather " << t->name << " n=" << n << " count=" << count
                                     << (in_place ? " in-place" : "") << ": rank " << r;
          }
        }
      }
    }
  }
}

TEST_F(CollectivesTest, ReduceScatterEveryTypeOpRankCount) {
  for (int n : kRankCounts) {
    const std::vector<kilnComm>& comms = world(n, "");
    for (size_t count : kCounts) {
      for (bool in_place : {false, true}) {
        struct Case {
          const TypeInfo* t;
          kilnReduceOp op;
          std::vector<Bytes> send, recv;
        };
        std::vector<Case> cases;
        for (const TypeInfo& t : kTypes) {
          for (kilnReduceOp op : kOps) {
            Case c{&t, op, {}, {}};
            for (int r = 0; r < n; ++r) {
              c.send.push_back(make_input(t, op, r, n * count));
              c.recv.push_back(Bytes(count * t.size, 0x22));
            }
            cases.push_back(std::move(c));
          }
        }
        for (Case& c : cases) {
          for (int r = 0; r < n; ++r) {
            void* recv = in_place ? c.send[r].data() + r * count * c.t->size : c.recv[r].data();
            ASSERT_EQ(kilnReduceScatter(c.send[r].data(), recv, count, c.t->type, c.op, comms[r],
                                        stream(r)),
                      KILN_SUCCESS)
                << last_error();
          }
        }
        sync(n);
        for (Case& c : cases) {
          for (int r = 0; r < n; ++r) {
            Bytes want = reference(*c.t, c.op, n, r * count, count);
            const uint8_t* got =
                in_place ? c.send[r].data() + r * count * c.t->size : c.recv[r].data();
            int64_t at = first_difference(got, want.data(), count, c.t->size);
            ASSERT_EQ(at, -1) << "ReduceScatter " << c.t->name << " " << op_name(c.op)
                              << " n=" << n << " count=" << count
                              << (in_place ? " in-place" : "") << ": rank " << r
                              << " differs at element " << at;
          }
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AlltoAllEveryRankCount) {
  for (int n : kRankCounts) {
    const std::vector<kilnComm>& comms = world(n, "pairwise");
    for (size_t count : kCounts) {
      for (bool in_place : {false, true}) {
        // Element j of the block rank r sends to rank s: r * 1000000 + s * 10000 + j.
        std::vector<std::vector<int32_t>> send(n), recv(n);
        for (int r = 0; r < n; ++r) {
          for (int s = 0; s < n; ++s) {
            for (size_t j = 0; j < count; ++j) send[r].push_back(r * 1000000 + s * 10000 + j);
          }
          recv[r].assign(n * count, -1);
        }
        for (int r = 0; r < n; ++r) {
          void* out = in_place ? send[r].data() : recv[r].data();
          ASSERT_EQ(kilnAlltoAll(send[r].data(), count, KILN_COMM_INT32, out, count,
                                 KILN_COMM_INT32, comms[r], stream(r)),
                    KILN_SUCCESS)
              << last_error();
        }
        sync(n);
        for (int r = 0; r < n; ++r) {
          const std::vector<int32_t>& got = in_place ? send[r] : recv[r];
          for (int s = 0; s < n; ++s) {
            for (size_t j = 0; j < count; ++j) {
              ASSERT_EQ(got[s * count + j], static_cast<int32_t>(s * 1000000 + r * 10000 + j))
                  << "AlltoAll n=" << n << " count=" << count << (in_place ? " in-place" : "")
                  << ": rank " << r << " block " << s << " element " << j;
            }
          }
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AlltoAllVWithUnevenAndEmptyBlocks) {
  for (int n : kRankCounts) {
    const std::vector<kilnComm>& comms = world(n, "");
    auto amount = [](int from, int to) { return static_cast<uint64_t>((from + 2 * to) % 4); };
    std::vector<std::vector<uint64_t>> sc(n), sd(n), rc(n), rd(n);
    std::vector<std::vector<double>> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      uint64_t so = 0, ro = 0;
      for (int s = 0; s < n; ++s) {
        // Gaps of one element between blocks, to check displacements are honoured.
        sc[r].push_back(amount(r, s));
        sd[r].push_back(so);
        so += amount(r, s) + 1;
        rc[r].push_back(amount(s, r));
        rd[r].push_back(ro);
        ro += amount(s, r) + 1;
      }
      send[r].assign(so, -1);
      for (int s = 0; s < n; ++s) {
        for (uint64_t j = 0; j < sc[r][s]; ++j) send[r][sd[r][s] + j] = r * 100 + s + j * 0.25;
      }
      recv[r].assign(ro, -7);
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(kilnAlltoAllV(send[r].data(), sc[r].data(), sd[r].data(), KILN_COMM_FP64,
                              recv[r].data(), rc[r].data(), rd[r].data(), KILN_COMM_FP64, comms[r],
                              stream(r)),
                KILN_SUCCESS)
          << last_error();
    }
    sync(n);
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < n; ++s) {
        for (uint64_t j = 0; j < rc[r][s]; ++j) {
          ASSERT_EQ(recv[r][rd[r][s] + j], s * 100 + r + j * 0.25)
              << "n=" << n << " rank " << r << " from " << s << " element " << j;
        }
        ASSERT_EQ(recv[r][rd[r][s] + rc[r][s]], -7) << "gap overwritten";
      }
    }
  }
}

// ---- Send/Recv, groups, Barrier ----------------------------------------------------------------

TEST_F(CollectivesTest, GroupedSendRecvShiftsARing) {
  for (int n : kRankCounts) {
    const std::vector<kilnComm>& comms = world(n, "");
    for (size_t count : {size_t{1}, size_t{5000}}) {
      std::vector<std::vector<int64_t>> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r].resize(count);
        for (size_t j = 0; j < count; ++j) send[r][j] = r * 100000 + j;
        recv[r].assign(count, -1);
      }
      // One thread posts every rank's Send and Recv: without the group the first Send could
      // wait for a Recv that was not posted yet.
      ASSERT_EQ(kilnGroupStart(), KILN_SUCCESS);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(
            kilnSend(send[r].data(), count, KILN_COMM_INT64, (r + 1) % n, comms[r], stream(r)),
            KILN_SUCCESS)
            << last_error();
        ASSERT_EQ(kilnRecv(recv[r].data(), count, KILN_COMM_INT64, (r + n - 1) % n, comms[r],
                           stream(r)),
                  KILN_SUCCESS)
            << last_error();
      }
      ASSERT_EQ(kilnGroupEnd(), KILN_SUCCESS) << last_error();
      sync(n);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(recv[r], send[(r + n - 1) % n]) << "n=" << n << " rank " << r;
      }
    }
  }
}

TEST_F(CollectivesTest, SendRecvOutsideGroupsAndToSelfInAGroup) {
  const std::vector<kilnComm>& comms = world(2, "");
  std::vector<uint16_t> a(777), b(777, 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(i * 3);
  ASSERT_EQ(kilnRecv(b.data(), b.size(), KILN_COMM_UINT16, 0, comms[1], stream(1)), KILN_SUCCESS);
  ASSERT_EQ(kilnSend(a.data(), a.size(), KILN_COMM_UINT16, 1, comms[0], stream(0)), KILN_SUCCESS);
  sync(2);
  EXPECT_EQ(a, b);
  // A rank to itself, both halves in one group.
  std::vector<uint16_t> c(100, 0);
  ASSERT_EQ(kilnGroupStart(), KILN_SUCCESS);
  ASSERT_EQ(kilnSend(a.data(), 100, KILN_COMM_UINT16, 1, comms[1], stream(1)), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnRecv(c.data(), 100, KILN_COMM_UINT16, 1, comms[1], stream(1)), KILN_SUCCESS)
      << last_error();
  // Destroying would wait for the group's operations, which only kilnGroupEnd launches.
  EXPECT_EQ(kilnCommDestroy(comms[1]), KILN_ERROR_INVALID_PARAM);
  EXPECT_NE(last_error().find("kilnGroupEnd first"), std::string::npos) << last_error();
  ASSERT_EQ(kilnGroupEnd(), KILN_SUCCESS) << last_error();
  sync(2);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
}

TEST_F(CollectivesTest, NullStreamIsTheDefaultStreamAlsoInGroups) {
  // One rank on device 0, the thread's current device: NULL is its default stream.
  const std::vector<kilnComm>& comms = world(1, "");
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  std::vector<int32_t> a = {1, 2, 3}, b(3, 0), c(3, 0);
  ASSERT_EQ(kilnGroupStart(), KILN_SUCCESS);
  ASSERT_EQ(
      kilnAllReduce(a.data(), b.data(), 3, KILN_COMM_INT32, KILN_REDUCE_SUM, comms[0], nullptr),
      KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnSend(a.data(), 3, KILN_COMM_INT32, 0, comms[0], nullptr), KILN_SUCCESS);
  ASSERT_EQ(kilnRecv(c.data(), 3, KILN_COMM_INT32, 0, comms[0], nullptr), KILN_SUCCESS);
  ASSERT_EQ(kilnGroupEnd(), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(nullptr), KILN_SUCCESS) << last_error();
  EXPECT_EQ(b, a);
  EXPECT_EQ(c, a);
}

// A gate a stream callback waits at (bounded: a broken barrier fails instead of hanging).
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lock(mutex);
      open = true;
    }
    cv.notify_all();
  }
  static void callback(void* gate) { static_cast<Gate*>(gate)->wait(); }
};

TEST_F(CollectivesTest, BarrierHoldsEveryRankUntilTheLastArrives) {
  for (int n : kRankCounts) {
    const std::vector<kilnComm>& comms = world(n, "");
    Gate gate;
    // The last rank reaches the barrier only when the gate opens.
    ASSERT_EQ(kilnrtLaunchCallback(&Gate::callback, &gate, KILN_CALLBACK_BLOCK, stream(n - 1)),
              KILN_SUCCESS);
    for (int r = 0; r < n; ++r) ASSERT_EQ(kilnBarrier(comms[r], stream(r)), KILN_SUCCESS);
    for (int r = 0; r < n - 1; ++r) {
      EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(stream(r), 50), KILN_ERROR_RT_TIMEOUT)
          << "n=" << n << ": rank " << r << " left the barrier early";
    }
    gate.release();
    sync(n);
  }
}

// ---- Errors -------------------------------------------------------------------------------------

TEST_F(CollectivesTest, BadArgumentsAreErrorCodesWithMessages) {
  const std::vector<kilnComm>& comms = world(2, "");
  kilnComm c = comms[0];
  kilnrtStream s = stream(0);
  float buf[4] = {};
  auto expect = [](kilnError got, kilnError want, const char* fragment) {
    EXPECT_EQ(got, want) << last_error();
    EXPECT_NE(last_error().find(fragment), std::string::npos) << last_error();
  };
  expect(kilnAllReduce(buf, buf, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, nullptr, s),
         KILN_ERROR_INVALID_PARAM, "comm is NULL");
  int not_a_comm = 0;
  expect(kilnAllReduce(buf, buf, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, &not_a_comm, s),
         KILN_ERROR_INVALID_RESOURCE_HANDLE, "not a live communicator");
  expect(kilnAllReduce(nullptr, buf, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s),
         KILN_ERROR_INVALID_PARAM, "sendBuf is NULL");
  expect(kilnAllReduce(buf, nullptr, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s),
         KILN_ERROR_INVALID_PARAM, "recvBuf is NULL");
  expect(kilnAllReduce(buf, buf, 4, static_cast<kilnCommDataType>(12), KILN_REDUCE_SUM, c, s),
         KILN_ERROR_INVALID_PARAM, "not a kilnCommDataType");
  expect(kilnAllReduce(buf, buf, 4, static_cast<kilnCommDataType>(-1), KILN_REDUCE_SUM, c, s),
         KILN_ERROR_INVALID_PARAM, "not a kilnCommDataType");
  expect(kilnAllReduce(buf, buf, 4, KILN_COMM_FP32, static_cast<kilnReduceOp>(4), c, s),
         KILN_ERROR_INVALID_PARAM, "not a kilnReduceOp");
  expect(kilnBroadcast(buf, 4, KILN_COMM_FP32, 2, c, s), KILN_ERROR_INVALID_PARAM,
         "root 2 is not a rank");
  expect(kilnReduce(buf, buf, 4, KILN_COMM_FP32, KILN_REDUCE_MAX, 5, c, s),
         KILN_ERROR_INVALID_PARAM, "root 5");
  expect(kilnSend(buf, 4, KILN_COMM_FP32, 7, c, s), KILN_ERROR_INVALID_PARAM, "destRank 7");
  expect(kilnRecv(buf, 4, KILN_COMM_FP32, 0, c, s), KILN_ERROR_INVALID_PARAM, "is this rank");
  expect(kilnAlltoAll(buf, 2, KILN_COMM_FP32, buf, 2, KILN_COMM_INT32, c, s),
         KILN_ERROR_INVALID_PARAM, "differs from recvType");
  expect(kilnAlltoAll(buf, 2, KILN_COMM_FP32, buf, 1, KILN_COMM_FP32, c, s),
         KILN_ERROR_INVALID_PARAM, "differs from recvCount");
  expect(kilnAlltoAllV(buf, nullptr, buf, KILN_COMM_FP32, buf, buf, buf, KILN_COMM_FP32, c, s),
         KILN_ERROR_INVALID_PARAM, "sendCounts is NULL");
  expect(kilnAllReduce(buf, buf, ~uint64_t{0} / 2, KILN_COMM_FP64, KILN_REDUCE_SUM, c, s),
         KILN_ERROR_INVALID_PARAM, "too large");
  // A stream of another device than the communicator's.
  expect(kilnAllReduce(buf, buf, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, c, stream(1)),
         KILN_ERROR_RT_STREAM_CONTEXT, "is on cpu:0");
  // Device memory of another device.
  ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS);
  void* dev1 = nullptr;
  ASSERT_EQ(kilnrtMalloc(&dev1, 64, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  expect(kilnAllReduce(dev1, dev1, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s),
         KILN_ERROR_INVALID_MEMORY, "memory of cpu:1");
  expect(kilnAllReduce(buf, dev1, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, comms[1], stream(1)),
         KILN_SUCCESS, "");
  // (rank 1's half alone; finish it with rank 0's.)
  float out[4];
  ASSERT_EQ(kilnAllReduce(buf, out, 4, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s), KILN_SUCCESS);
  expect(kilnAllReduce(dev1, dev1, 17, KILN_COMM_FP32, KILN_REDUCE_SUM, comms[1], stream(1)),
         KILN_ERROR_INVALID_MEMORY, "runs past");
  sync(2);
  ASSERT_EQ(kilnrtFree(dev1), KILN_SUCCESS);
  // NULL buffers are fine when there is nothing to move.
  expect(kilnAllReduce(nullptr, nullptr, 0, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s), KILN_SUCCESS,
         "");
  // Queries and groups.
  expect(kilnCommGetRankId(c, nullptr), KILN_ERROR_INVALID_PARAM, "rank is NULL");
  expect(kilnGroupEnd(), KILN_ERROR_INVALID_PARAM, "no kilnGroupStart");
  int32_t bad_devices[2] = {0, 99};
  kilnComm out_comms[2];
  expect(kilnCommInitAll(2, bad_devices, out_comms), KILN_ERROR_INVALID_DEVICE, "devices[1] = 99");
  ::setenv("KILN_COMM_ALGO", "fastest", 1);
  int32_t devices[2] = {0, 1};
  expect(kilnCommInitAll(2, devices, out_comms), KILN_ERROR_INVALID_PARAM, "KILN_COMM_ALGO");
  ::unsetenv("KILN_COMM_ALGO");
  kilnRootInfo garbage;
  std::memset(&garbage, 0x5A, sizeof(garbage));
  kilnComm joined;
  expect(kilnCommInitRootInfo(2, &garbage, 0, &joined), KILN_ERROR_INVALID_PARAM, "rootInfo");
  expect(kilnCommInitRootInfo(2, &garbage, 2, &joined), KILN_ERROR_INVALID_PARAM,
         "rank 2 is not below nRanks 2");
  uint32_t rank = 9, size = 9;
  EXPECT_EQ(kilnCommGetRankId(comms[1], &rank), KILN_SUCCESS);
  EXPECT_EQ(kilnCommGetRankSize(comms[1], &size), KILN_SUCCESS);
  EXPECT_EQ(rank, 1u);
  EXPECT_EQ(size, 2u);
}

TEST_F(CollectivesTest, AbortUnblocksAWaitingRankAndFailsLaterOperations) {
  std::vector<kilnComm> comms = make_comms(2, "");
  float buf[16] = {};
  // Rank 0 waits for rank 1, which never comes.
  ASSERT_EQ(kilnAllReduce(buf, buf, 16, KILN_COMM_FP32, KILN_REDUCE_SUM, comms[0], stream(0)),
            KILN_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = Clock::now();
  ASSERT_EQ(kilnCommAbort(comms[0]), KILN_SUCCESS);
  EXPECT_EQ(kilnrtSynchronizeStream(stream(0)), KILN_ERROR_RT_TASK_FAILED);
  EXPECT_NE(last_error().find("aborted"), std::string::npos) << last_error();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  kilnError async = KILN_SUCCESS;
  ASSERT_EQ(kilnCommGetAsyncError(comms[0], &async), KILN_SUCCESS);
  EXPECT_EQ(async, KILN_ERROR_COMM_ABORTED);
  // Later operations fail at once.
  ASSERT_EQ(kilnBarrier(comms[0], stream(0)), KILN_SUCCESS);
  EXPECT_EQ(kilnrtSynchronizeStream(stream(0)), KILN_ERROR_RT_TASK_FAILED);
  // The other rank is unaffected until it talks to the aborted one.
  ASSERT_EQ(kilnCommGetAsyncError(comms[1], &async), KILN_SUCCESS);
  EXPECT_EQ(async, KILN_SUCCESS);
  EXPECT_EQ(kilnCommDestroy(comms[0]), KILN_SUCCESS);
  EXPECT_EQ(kilnCommDestroy(comms[1]), KILN_SUCCESS);
  EXPECT_EQ(kilnCommDestroy(comms[1]), KILN_ERROR_INVALID_RESOURCE_HANDLE);
}

TEST_F(CollectivesTest, SilentRankTimesOutNamingTheOperationAndTheRank) {
  ::setenv("KILN_COMM_TIMEOUT", "0.5", 1);
  std::vector<kilnComm> comms = make_comms(3, "");
  int64_t buf[8] = {};
  // Ranks 0 and 1 broadcast from 2, which never posts.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(kilnBroadcast(buf, 8, KILN_COMM_INT64, 2, comms[r], stream(r)), KILN_SUCCESS);
  }
  auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(kilnrtSynchronizeStream(stream(r)), KILN_ERROR_RT_TASK_FAILED);
    std::string message = last_error();
    EXPECT_NE(message.find("Broadcast"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 2"), std::string::npos) << message;
    kilnError async = KILN_SUCCESS;
    ASSERT_EQ(kilnCommGetAsyncError(comms[r], &async), KILN_SUCCESS);
    EXPECT_EQ(async, KILN_ERROR_COMM_TIMEOUT);
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
  ::setenv("KILN_COMM_TIMEOUT", "10", 1);
  for (kilnComm c : comms) EXPECT_EQ(kilnCommDestroy(c), KILN_SUCCESS);
}

// Ring AllReduce with rank 3 never starting it (hung elsewhere): rank 0 waits on rank 3,
// rank 1 on rank 0, rank 2 on rank 1, but each sees that rank 3 started fewer collectives
// and names it, not the neighbour it waited on.
TEST_F(CollectivesTest, RankThatNeverStartsTheCollectiveIsNamedByEveryRank) {
  ::setenv("KILN_COMM_TIMEOUT", "0.5", 1);
  std::vector<kilnComm> comms = make_comms(4, "ring");
  const size_t count = 4096;
  std::vector<std::vector<int32_t>> data(4, std::vector<int32_t>(count, 1));
  for (int r = 0; r < 4; ++r) {  // one AllReduce everyone runs
    ASSERT_EQ(kilnAllReduce(data[r].data(), data[r].data(), count, KILN_COMM_INT32,
                            KILN_REDUCE_SUM, comms[r], stream(r)),
              KILN_SUCCESS);
  }
  for (int r = 0; r < 4; ++r) ASSERT_EQ(kilnrtSynchronizeStream(stream(r)), KILN_SUCCESS);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(kilnAllReduce(data[r].data(), data[r].data(), count, KILN_COMM_INT32,
                            KILN_REDUCE_SUM, comms[r], stream(r)),
              KILN_SUCCESS);
  }
  // The first rank to time out finds rank 3 behind; the others may hear it from that rank
  // as it gives up ("rank 1 gave up on it"): every message names rank 3.
  int saw_behind = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(kilnrtSynchronizeStream(stream(r)), KILN_ERROR_RT_TASK_FAILED);
    std::string message = last_error();
    EXPECT_NE(message.find("AllReduce: rank 3"), std::string::npos) << message;
    saw_behind += message.find("has not started this operation") != std::string::npos;
  }
  EXPECT_GE(saw_behind, 1);
  ::setenv("KILN_COMM_TIMEOUT", "10", 1);
  for (kilnComm c : comms) EXPECT_EQ(kilnCommDestroy(c), KILN_SUCCESS);
}

TEST_F(CollectivesTest, DestroyWaitsForQueuedOperations) {
  std::vector<kilnComm> comms = make_comms(4, "");
  const size_t count = 20000;
  std::vector<std::vector<int32_t>> data(4, std::vector<int32_t>(count));
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < count; ++i) data[r][i] = r + static_cast<int32_t>(i);
  }
  Gate gate;
  // Rank 3's operations queue behind a gate, so the destroys below must wait for them.
  ASSERT_EQ(kilnrtLaunchCallback(&Gate::callback, &gate, KILN_CALLBACK_BLOCK, stream(3)),
            KILN_SUCCESS);
  for (int k = 0; k < 3; ++k) {
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(kilnAllReduce(data[r].data(), data[r].data(), count, KILN_COMM_INT32,
                              KILN_REDUCE_MAX, comms[r], stream(r)),
                KILN_SUCCESS);
    }
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate.release();
  });
  for (kilnComm c : comms) EXPECT_EQ(kilnCommDestroy(c), KILN_SUCCESS) << last_error();
  opener.join();
  sync(4);
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < count; i += 997) ASSERT_EQ(data[r][i], 3 + static_cast<int32_t>(i));
  }
}

TEST_F(CollectivesTest, RootInfoJoinsAWorldFromSeveralThreads) {
  // The multi-process path (bootstrap through rank 0's listener, shared-memory links) with
  // the ranks as threads of this process.
  kilnRootInfo info;
  ASSERT_EQ(kilnCommGetRootInfo(&info), KILN_SUCCESS) << last_error();
  const int n = 3;
  std::vector<kilnComm> comms(n, nullptr);
  std::vector<kilnError> codes(n, KILN_SUCCESS);
  std::vector<std::string> messages(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      kilnrtSetDevice(r);  // the communicator takes the thread's device
      codes[r] = kilnCommInitRootInfo(n, &info, static_cast<uint32_t>(r), &comms[r]);
      if (codes[r] != KILN_SUCCESS) messages[r] = last_error();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(codes[r], KILN_SUCCESS) << "rank " << r << ": " << messages[r];
  const TypeInfo& t = kTypes[10];
  const size_t count = 1001;
  std::vector<Bytes> data(n);
  for (int r = 0; r < n; ++r) {
    data[r] = make_input(t, KILN_REDUCE_SUM, r, count);
    uint32_t rank = 99;
    ASSERT_EQ(kilnCommGetRankId(comms[r], &rank), KILN_SUCCESS);
    ASSERT_EQ(rank, static_cast<uint32_t>(r));
    // The communicator is on device r: a stream of device r is accepted.
    ASSERT_EQ(kilnAllReduce(data[r].data(), data[r].data(), count, t.type, KILN_REDUCE_SUM,
                            comms[r], stream(r)),
              KILN_SUCCESS)
        << last_error();
  }
  sync(n);
  Bytes want = reference(t, KILN_REDUCE_SUM, n, 0, count);
  for (int r = 0; r < n; ++r) EXPECT_EQ(data[r], want) << "rank " << r;
  for (kilnComm c : comms) EXPECT_EQ(kilnCommDestroy(c), KILN_SUCCESS) << last_error();
}

// ---- Algorithms directly: several "hosts" ------------------------------------------------------

// A transport that reports made-up hosts, so one process exercises the hierarchical paths.
class FakeHostsTransport : public kiln::comm::Transport {
 public:
  FakeHostsTransport(std::unique_ptr<kiln::comm::Transport> inner, const std::vector<int>& host_of)
      : inner_(std::move(inner)), peers_(inner_->peers()) {
    for (size_t r = 0; r < peers_.size(); ++r) {
      peers_[r].host_id = 1000 + host_of[r];
      peers_[r].host = "host" + std::to_string(host_of[r]);
    }
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<kiln::comm::PeerInfo>& peers() const override { return peers_; }
  kiln::Status exchange(std::span<const kiln::comm::SendOp> sends,
                        std::span<const kiln::comm::RecvOp> recvs,
                        const kiln::comm::Deadline& deadline) override {
    return inner_->exchange(sends, recvs, deadline);
  }
  void abort() override { inner_->abort(); }

 private:
  std::unique_ptr<kiln::comm::Transport> inner_;
  std::vector<kiln::comm::PeerInfo> peers_;
};

// Runs fn(rank, ctx) on a thread per rank of an in-process world with the given hosts.
template <typename Fn>
void run_world(const std::vector<int>& host_of, Fn fn) {
  const int n = static_cast<int>(host_of.size());
  auto world = kiln::comm::make_in_process_world(n);
  ASSERT_EQ(world.size(), static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      FakeHostsTransport t(std::move(world[r]), host_of);
      kiln::comm::Group group(t);
      kiln::comm::Scratch scratch;
      kiln::comm::AlgoContext ctx{
          &group, kiln::comm::Deadline{Clock::now() + std::chrono::seconds(10), "AllReduce"},
          &scratch, kiln::comm::Algo::kAuto};
      fn(r, ctx);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(HierarchicalAllReduce, ChosenAndCorrectForRanksSpreadOverHosts) {
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 0, 1, 1}, {0, 1, 1, 2, 2, 2, 2, 0}};
  for (const std::vector<int>& hosts : layouts) {
    const int n = static_cast<int>(hosts.size());
    // 300001 elements: the ring (with forwarding between group indices that are not
    // transport ranks) for the leaders' AllReduce and the hosts' Reduce.
    for (size_t count : {size_t{1}, size_t{7}, size_t{20000}, size_t{300001}}) {
      for (const TypeInfo* t : {&kTypes[2], &kTypes[9]}) {
        for (kilnReduceOp op : {KILN_REDUCE_SUM, KILN_REDUCE_MIN}) {
          std::vector<Bytes> send(n), recv(n);
          for (int r = 0; r < n; ++r) {
            send[r] = make_input(*t, op, r, count);
            recv[r].assign(count * t->size, 0);
          }
          const kiln::comm::Reducer* reducer = kiln::comm::reducer_for(t->type, op);
          std::vector<kiln::comm::Algo> chosen(n);
          std::vector<std::string> errors(n);
          run_world(hosts, [&](int r, kiln::comm::AlgoContext& ctx) {
            chosen[r] = kiln::comm::choose_all_reduce(ctx, count * t->size);
            kiln::Status st =
                kiln::comm::all_reduce(ctx, send[r].data(), recv[r].data(), count, *reducer);
            if (!st.ok()) errors[r] = st.to_string();
          });
          Bytes want = reference(*t, op, n, 0, count);
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ(errors[r], "") << "rank " << r;
            EXPECT_EQ(chosen[r], kiln::comm::Algo::kHierarchical);
            ASSERT_EQ(first_difference(recv[r].data(), want.data(), count, t->size), -1)
                << t->name << " " << op_name(op) << " n=" << n << " count=" << count << " rank "
                << r;
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, Fp16AndBf16RoundToNearestEven) {
  // 2048 + 1 is a tie in fp16 (spacing 2 at 2048): rounds to even 2048; 2050 + 1 -> 2052.
  const kiln::comm::Reducer* sum = kiln::comm::reducer_for(KILN_COMM_FP16, KILN_REDUCE_SUM);
  ASSERT_NE(sum, nullptr);
  std::vector<uint16_t> acc(19), in(19);
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] = kiln::float_to_fp16(i % 2 ? 2050.0f : 2048.0f);
    in[i] = kiln::float_to_fp16(1.0f);
  }
  sum->apply(acc.data(), in.data(), acc.size() * 2);  // 16 vector lanes and a scalar tail
  for (size_t i = 0; i < acc.size(); ++i) {
    EXPECT_EQ(kiln::fp16_to_float(acc[i]), i % 2 ? 2052.0f : 2048.0f) << "element " << i;
  }
  // bf16: spacing 2 at 256: 256 + 1 -> 256, 258 + 1 -> 260.
  const kiln::comm::Reducer* bsum = kiln::comm::reducer_for(KILN_COMM_BF16, KILN_REDUCE_SUM);
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] = kiln::float_to_bf16(i % 2 ? 258.0f : 256.0f);
    in[i] = kiln::float_to_bf16(1.0f);
  }
  bsum->apply(acc.data(), in.data(), acc.size() * 2);
  for (size_t i = 0; i < acc.size(); ++i) {
    EXPECT_EQ(kiln::bf16_to_float(acc[i]), i % 2 ? 260.0f : 256.0f) << "element " << i;
  }
  EXPECT_EQ(kiln::comm::reducer_for(KILN_COMM_FP32, 4), nullptr);
  EXPECT_EQ(kiln::comm::reducer_for(12, KILN_REDUCE_SUM), nullptr);
}

}  // namespace
