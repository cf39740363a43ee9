// Devices, contexts, streams, events and host callbacks through the C API, checked against
// what the semantics require: order within a stream, submission returning before the
// work runs, synchronize waiting, events ordering streams of one and of two devices,
// callbacks in order (on the stream's thread or a subscribed report thread), the error
// state of a stream, timeouts, and every misuse returning its error code.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "kiln/kiln.h"
#include "capi/api_internal.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string last_error() { return kilnGetRecentErrMsg(); }

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A gate a stream task waits at until the test opens it. The wait is bounded (10 s) so a
// broken runtime fails the test instead of hanging it; `timed_out` tells.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  std::atomic<bool> entered{false};
  std::atomic<bool> passed{false};
  std::atomic<bool> timed_out{false};

  void wait() {
    entered = true;
    std::unique_lock lock(mutex);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return open; })) timed_out = true;
    passed = true;
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

// Appends a number to a shared log (callbacks of one stream run one at a time, but
// callbacks of different streams or report threads may not).
struct Log {
  std::mutex mutex;
  std::vector<int> values;
  std::vector<pthread_t> threads;
  void add(int v) {
    std::lock_guard lock(mutex);
    values.push_back(v);
    threads.push_back(pthread_self());
  }
  std::vector<int> snapshot() {
    std::lock_guard lock(mutex);
    return values;
  }
};

struct LogEntry {
  Log* log;
  int value;
  static void callback(void* p) {
    auto* e = static_cast<LogEntry*>(p);
    e->log->add(e->value);
  }
};

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// The Stream object behind a handle, for tasks the C API cannot express (failing tasks,
// compute-engine tasks).
kiln::rt::Stream* internal_stream(kilnrtStream handle) {
  std::shared_lock lock(kiln::rt::runtime_lock());
  auto s = kiln::rt::resolve_stream(handle, "test");
  return s.ok() ? *s : nullptr;
}

std::string temp_file(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("kiln_stream_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

// Each test initializes and finalizes the runtime itself.
class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("KILN_DEVICES");
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  }
  void TearDown() override {
    if (!finalized_) {
      EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
    }
  }
  kilnrtStream make_stream() {
    kilnrtStream s = nullptr;
    EXPECT_EQ(kilnrtCreateStream(&s), KILN_SUCCESS) << last_error();
    return s;
  }
  kilnrtEvent make_event() {
    kilnrtEvent e = nullptr;
    EXPECT_EQ(kilnrtCreateEvent(&e), KILN_SUCCESS) << last_error();
    return e;
  }
  bool finalized_ = false;
};

// Two logical devices from KILN_DEVICES.
class TwoDeviceTest : public StreamTest {
 protected:
  void SetUp() override {
    ::setenv("KILN_DEVICES", "cpu:2", 1);
    kilnError e = kilnInit(nullptr);
    ::unsetenv("KILN_DEVICES");
    ASSERT_EQ(e, KILN_SUCCESS) << last_error();
  }
};

// ---- Order, asynchrony, synchronize --------------------------------------------------------

TEST_F(StreamTest, CallbacksRunInSubmissionOrder) {
  kilnrtStream s = make_stream();
  Log log;
  constexpr int kN = 2000;
  std::vector<LogEntry> entries(kN);
  for (int i = 0; i < kN; ++i) {
    entries[i] = {&log, i};
    kilnrtCallbackBlockType type = i % 3 == 0 ? KILN_CALLBACK_BLOCK : KILN_CALLBACK_NO_BLOCK;
    ASSERT_EQ(kilnrtLaunchCallback(LogEntry::callback, &entries[i], type, s), KILN_SUCCESS)
        << last_error();
  }
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(log.snapshot(), iota(kN));
  // Without a subscribed thread, callbacks run on the stream's own thread, not ours.
  for (pthread_t t : log.threads) EXPECT_FALSE(pthread_equal(t, pthread_self()));
  EXPECT_EQ(kilnrtDestroyStream(s), KILN_SUCCESS) << last_error();
}

TEST_F(StreamTest, OrderHoldsAcrossEnginesOfOneStream) {
  kilnrtStream s = make_stream();
  kiln::rt::Stream* stream = internal_stream(s);
  ASSERT_NE(stream, nullptr);
  std::vector<int> order;  // touched only by the stream's tasks, one at a time
  const kiln::rt::Engine engines[] = {kiln::rt::Engine::kCompute, kiln::rt::Engine::kCopy,
                                      kiln::rt::Engine::kHost};
  constexpr int kN = 3000;
  for (int i = 0; i < kN; ++i) {
    stream->submit(engines[i % 3], [&order, i] {
      order.push_back(i);
      return kiln::Status();
    });
  }
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(order, iota(kN));
}

TEST_F(StreamTest, SubmissionReturnsBeforeTheWorkRuns) {
  kilnrtStream s = make_stream();
  Gate gate;
  ASSERT_EQ(kilnrtLaunchCallback(Gate::callback, &gate, KILN_CALLBACK_BLOCK, s), KILN_SUCCESS);
  // Had the launch run the callback itself, it would have returned only after the gate's
  // 10 s timeout.
  EXPECT_FALSE(gate.passed.load());
  kilnrtStreamStatus status;
  ASSERT_EQ(kilnrtStreamQuery(s, &status), KILN_SUCCESS) << last_error();
  EXPECT_EQ(status, KILN_STREAM_STATUS_NOT_READY);
  gate.release();
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_TRUE(gate.passed.load());
  EXPECT_FALSE(gate.timed_out.load());
  ASSERT_EQ(kilnrtStreamQuery(s, &status), KILN_SUCCESS);
  EXPECT_EQ(status, KILN_STREAM_STATUS_COMPLETE);
}

TEST_F(StreamTest, SynchronizeWaitsForAllSubmittedWork) {
  kilnrtStream s = make_stream();
  std::atomic<int> done{0};
  auto slow = [](void* p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    static_cast<std::atomic<int>*>(p)->fetch_add(1);
  };
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(kilnrtLaunchCallback(slow, &done, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  }
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(done.load(), 5);
  // The default stream (NULL) and the device too.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(kilnrtLaunchCallback(slow, &done, KILN_CALLBACK_NO_BLOCK, nullptr), KILN_SUCCESS);
  }
  ASSERT_EQ(kilnrtLaunchCallback(slow, &done, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeDevice(), KILN_SUCCESS) << last_error();
  EXPECT_EQ(done.load(), 9);
}

// Many threads synchronizing the same stream and device while another keeps submitting:
// each must be woken when its own point is reached (a lost wake-up shows as a timeout).
TEST_F(StreamTest, ConcurrentSynchronizersAllReturn) {
  kilnrtStream s = make_stream();
  kilnrtStream other = make_stream();
  kilnrtContext context = nullptr;
  ASSERT_EQ(kilnrtGetCurrentContext(&context), KILN_SUCCESS);
  std::atomic<bool> stop{false};
  std::atomic<long> ran{0};
  auto tick = [](void* p) { static_cast<std::atomic<long>*>(p)->fetch_add(1); };
  std::thread producer([&] {
    while (!stop) {
      for (int i = 0; i < 64; ++i) {
        kilnrtLaunchCallback(tick, &ran, KILN_CALLBACK_NO_BLOCK, s);
        kilnrtLaunchCallback(tick, &ran, KILN_CALLBACK_NO_BLOCK, other);
      }
      std::this_thread::yield();
    }
  });
  std::atomic<int> failures{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < 4; ++w) {
    waiters.emplace_back([&, w] {
      if (kilnrtSetCurrentContext(context) != KILN_SUCCESS) ++failures;
      for (int i = 0; i < 200; ++i) {
        for (int k = 0; k < 16; ++k) kilnrtLaunchCallback(tick, &ran, KILN_CALLBACK_NO_BLOCK, s);
        kilnError e = w % 2 ? kilnrtSynchronizeDeviceWithTimeout(20000)
                            : kilnrtSynchronizeStreamWithTimeout(s, 20000);
        if (e != KILN_SUCCESS) ++failures;
      }
    });
  }
  for (auto& t : waiters) t.join();
  stop = true;
  producer.join();
  EXPECT_EQ(failures.load(), 0) << last_error();
  ASSERT_EQ(kilnrtSynchronizeDevice(), KILN_SUCCESS);
  EXPECT_GT(ran.load(), 0);
}

TEST_F(StreamTest, DestroyStreamWaitsForItsWork) {
  kilnrtStream s = make_stream();
  std::atomic<int> done{0};
  auto slow = [](void* p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    static_cast<std::atomic<int>*>(p)->fetch_add(1);
  };
  ASSERT_EQ(kilnrtLaunchCallback(slow, &done, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtDestroyStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(done.load(), 1);
}

// ---- Events ---------------------------------------------------------------------------------

// Stream B must not run its task before stream A passed the event, however long A takes.
void check_event_orders_streams(kilnrtStream a, kilnrtStream b, kilnrtEvent event) {
  Gate gate;
  int value = 0;  // written on A, read on B: the event is the only ordering
  int seen = -1;
  struct Access {
    int* value;
    int* seen;
  } access{&value, &seen};
  ASSERT_EQ(kilnrtLaunchCallback(Gate::callback, &gate, KILN_CALLBACK_NO_BLOCK, a), KILN_SUCCESS);
  ASSERT_EQ(kilnrtLaunchCallback([](void* p) { *static_cast<Access*>(p)->value = 42; }, &access,
                                 KILN_CALLBACK_NO_BLOCK, a),
            KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(event, a), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtStreamWaitEvent(b, event), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtLaunchCallback(
                [](void* p) { *static_cast<Access*>(p)->seen = *static_cast<Access*>(p)->value; },
                &access, KILN_CALLBACK_NO_BLOCK, b),
            KILN_SUCCESS);
  // B is held back by the event while A sits at the gate.
  EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(b, 50), KILN_ERROR_RT_TIMEOUT);
  kilnrtEventStatus status;
  ASSERT_EQ(kilnrtQueryEvent(event, &status), KILN_SUCCESS);
  EXPECT_EQ(status, KILN_EVENT_STATUS_NOT_READY);
  gate.release();
  ASSERT_EQ(kilnrtSynchronizeStream(b), KILN_SUCCESS) << last_error();
  EXPECT_EQ(seen, 42);
  ASSERT_EQ(kilnrtQueryEvent(event, &status), KILN_SUCCESS);
  EXPECT_EQ(status, KILN_EVENT_STATUS_COMPLETE);
  ASSERT_EQ(kilnrtSynchronizeStream(a), KILN_SUCCESS) << last_error();
  EXPECT_FALSE(gate.timed_out.load());
}

TEST_F(StreamTest, EventOrdersStreamsOfOneDevice) {
  kilnrtStream a = make_stream();
  kilnrtStream b = make_stream();
  kilnrtEvent e = make_event();
  check_event_orders_streams(a, b, e);
  // The event is reusable: a second record orders a second pair of tasks.
  check_event_orders_streams(a, b, e);
  EXPECT_EQ(kilnrtDestroyEvent(e), KILN_SUCCESS);
}

TEST_F(TwoDeviceTest, EventOrdersStreamsOfTwoDevices) {
  uint32_t count = 0;
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  ASSERT_EQ(count, 2u);
  kilnrtContext c0, c1;
  ASSERT_EQ(kilnrtCreateContext(&c0, 0), KILN_SUCCESS) << last_error();
  kilnrtStream a = make_stream();
  ASSERT_EQ(kilnrtCreateContext(&c1, 1), KILN_SUCCESS) << last_error();
  kilnrtStream b = make_stream();
  int32_t device = -1;
  ASSERT_EQ(kilnrtGetDevice(&device), KILN_SUCCESS);
  EXPECT_EQ(device, 1);
  ASSERT_EQ(internal_stream(a)->device().id(), 0);
  ASSERT_EQ(internal_stream(b)->device().id(), 1);
  kilnrtEvent e = make_event();
  check_event_orders_streams(a, b, e);  // device 0 -> device 1
  check_event_orders_streams(b, a, e);  // and back
  EXPECT_EQ(kilnrtDestroyContext(c1), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtDestroyContext(c0), KILN_SUCCESS) << last_error();
}

TEST_F(StreamTest, WaitingOnANeverRecordedEventIsANoOp) {
  kilnrtStream s = make_stream();
  kilnrtEvent e = make_event();
  std::atomic<int> ran{0};
  ASSERT_EQ(kilnrtStreamWaitEvent(s, e), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtLaunchCallback([](void* p) { static_cast<std::atomic<int>*>(p)->store(1); },
                                 &ran, KILN_CALLBACK_NO_BLOCK, s),
            KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeStreamWithTimeout(s, 5000), KILN_SUCCESS) << last_error();
  EXPECT_EQ(ran.load(), 1);
  kilnrtEventStatus status;
  ASSERT_EQ(kilnrtQueryEvent(e, &status), KILN_SUCCESS);
  EXPECT_EQ(status, KILN_EVENT_STATUS_COMPLETE);
  EXPECT_EQ(kilnrtSynchronizeEvent(e), KILN_SUCCESS);
}

TEST_F(StreamTest, ElapsedTimeCoversTheWorkBetweenRecords) {
  kilnrtStream s = make_stream();
  kilnrtEvent start = make_event();
  kilnrtEvent end = nullptr;
  ASSERT_EQ(kilnrtCreateEventWithFlag(&end, 1), KILN_SUCCESS) << last_error();
  float ms = -1;
  EXPECT_EQ(kilnrtEventElapsedTime(&ms, start, end), KILN_ERROR_RT_EVENT_NOT_RECORDED);
  ASSERT_EQ(kilnrtRecordEvent(start, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtLaunchCallback(
                [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(25)); }, nullptr,
                KILN_CALLBACK_NO_BLOCK, s),
            KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(end, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeEvent(end), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtEventElapsedTime(&ms, start, end), KILN_SUCCESS) << last_error();
  EXPECT_GE(ms, 25.0f);
  EXPECT_LT(ms, 10000.0f);
  // A reset event reads as never recorded again.
  ASSERT_EQ(kilnrtResetEvent(end, s), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS);
  EXPECT_EQ(kilnrtEventElapsedTime(&ms, start, end), KILN_ERROR_RT_EVENT_NOT_RECORDED);
  kilnrtEventStatus status;
  ASSERT_EQ(kilnrtQueryEvent(end, &status), KILN_SUCCESS);
  EXPECT_EQ(status, KILN_EVENT_STATUS_COMPLETE);
}

TEST_F(StreamTest, ElapsedTimeOfAPendingRecordIsNotRecorded) {
  kilnrtStream s = make_stream();
  kilnrtEvent start = make_event();
  kilnrtEvent end = make_event();
  Gate gate;
  ASSERT_EQ(kilnrtRecordEvent(start, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtLaunchCallback(Gate::callback, &gate, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(end, s), KILN_SUCCESS);
  float ms = 0;
  EXPECT_EQ(kilnrtEventElapsedTime(&ms, start, end), KILN_ERROR_RT_EVENT_NOT_RECORDED);
  EXPECT_EQ(kilnrtSynchronizeEventWithTimeout(end, 30), KILN_ERROR_RT_TIMEOUT);
  gate.release();
  ASSERT_EQ(kilnrtSynchronizeEvent(end), KILN_SUCCESS);
  EXPECT_EQ(kilnrtEventElapsedTime(&ms, start, end), KILN_SUCCESS) << last_error();
}

TEST_F(StreamTest, DestroyingAnEventWithQueuedWaitsIsSafe) {
  kilnrtStream a = make_stream();
  kilnrtStream b = make_stream();
  kilnrtEvent e = make_event();
  Gate gate;
  std::atomic<int> after{0};
  ASSERT_EQ(kilnrtLaunchCallback(Gate::callback, &gate, KILN_CALLBACK_NO_BLOCK, a), KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(e, a), KILN_SUCCESS);
  ASSERT_EQ(kilnrtStreamWaitEvent(b, e), KILN_SUCCESS);
  ASSERT_EQ(kilnrtLaunchCallback([](void* p) { static_cast<std::atomic<int>*>(p)->store(1); },
                                 &after, KILN_CALLBACK_NO_BLOCK, b),
            KILN_SUCCESS);
  // Destroying returns at once; the queued record and wait still order the streams.
  ASSERT_EQ(kilnrtDestroyEvent(e), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtRecordEvent(e, a), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(after.load(), 0);
  gate.release();
  ASSERT_EQ(kilnrtSynchronizeStream(b), KILN_SUCCESS) << last_error();
  EXPECT_EQ(after.load(), 1);
}

// ---- Callbacks on report threads --------------------------------------------------------------

TEST_F(StreamTest, SubscribedThreadRunsCallbacksInOrder) {
  kilnrtStream s = make_stream();
  const uint64_t me = static_cast<uint64_t>(pthread_self());
  // Nothing subscribed yet.
  EXPECT_EQ(kilnrtProcessReport(10), KILN_ERROR_INVALID_PARAM);
  ASSERT_EQ(kilnrtSubscribeReport(me, s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtSubscribeReport(me, s), KILN_ERROR_INVALID_PARAM);  // twice
  // Subscribed, nothing queued: times out.
  auto t0 = Clock::now();
  EXPECT_EQ(kilnrtProcessReport(20), KILN_ERROR_RT_TIMEOUT);
  EXPECT_GE(ms_since(t0), 19.0);

  Log log;
  constexpr int kN = 50;
  std::vector<LogEntry> entries(kN);
  for (int i = 0; i < kN; ++i) {
    entries[i] = {&log, i};
    kilnrtCallbackBlockType type = i % 2 ? KILN_CALLBACK_BLOCK : KILN_CALLBACK_NO_BLOCK;
    ASSERT_EQ(kilnrtLaunchCallback(LogEntry::callback, &entries[i], type, s), KILN_SUCCESS);
  }
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (log.snapshot().size() < static_cast<size_t>(kN) && Clock::now() < deadline) {
    kilnError e = kilnrtProcessReport(100);
    ASSERT_TRUE(e == KILN_SUCCESS || e == KILN_ERROR_RT_TIMEOUT) << e << " " << last_error();
  }
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(log.snapshot(), iota(kN));
  for (pthread_t t : log.threads) EXPECT_TRUE(pthread_equal(t, pthread_self()));

  ASSERT_EQ(kilnrtUnSubscribeReport(me, s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtUnSubscribeReport(me, s), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtProcessReport(10), KILN_ERROR_INVALID_PARAM);
  // Unsubscribed: the stream's thread runs them again.
  Log after;
  LogEntry entry{&after, 7};
  ASSERT_EQ(kilnrtLaunchCallback(LogEntry::callback, &entry, KILN_CALLBACK_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS);
  ASSERT_EQ(after.snapshot(), std::vector<int>{7});
  EXPECT_FALSE(pthread_equal(after.threads[0], pthread_self()));
}

TEST_F(StreamTest, BlockingCallbackHoldsTheStreamUntilProcessed) {
  kilnrtStream s = make_stream();
  const uint64_t me = static_cast<uint64_t>(pthread_self());
  ASSERT_EQ(kilnrtSubscribeReport(me, s), KILN_SUCCESS) << last_error();
  kilnrtEvent after_block = make_event();
  kilnrtEvent after_no_block = make_event();
  std::atomic<int> ran{0};
  auto count = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };

  // NO_BLOCK: the stream goes on without waiting for the report thread.
  ASSERT_EQ(kilnrtLaunchCallback(count, &ran, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(after_no_block, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeEventWithTimeout(after_no_block, 5000), KILN_SUCCESS) << last_error();
  EXPECT_EQ(ran.load(), 0);

  // BLOCK: the stream waits for the callback, so the event after it does not complete.
  ASSERT_EQ(kilnrtLaunchCallback(count, &ran, KILN_CALLBACK_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(after_block, s), KILN_SUCCESS);
  EXPECT_EQ(kilnrtSynchronizeEventWithTimeout(after_block, 50), KILN_ERROR_RT_TIMEOUT);
  EXPECT_EQ(ran.load(), 0);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (ran.load() < 2 && Clock::now() < deadline) kilnrtProcessReport(100);
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(kilnrtSynchronizeEventWithTimeout(after_block, 5000), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtUnSubscribeReport(me, s), KILN_SUCCESS);
}

TEST_F(StreamTest, AnotherThreadCanServeReports) {
  kilnrtStream s = make_stream();
  std::atomic<bool> stop{false};
  std::atomic<bool> subscribed{false};
  pthread_t reporter_id{};
  std::thread reporter([&] {
    reporter_id = pthread_self();
    EXPECT_EQ(kilnrtSubscribeReport(static_cast<uint64_t>(pthread_self()), s), KILN_SUCCESS)
        << last_error();
    subscribed = true;
    while (!stop) kilnrtProcessReport(20);
  });
  while (!subscribed) std::this_thread::yield();
  Log log;
  std::vector<LogEntry> entries(20);
  for (int i = 0; i < 20; ++i) {
    entries[i] = {&log, i};
    ASSERT_EQ(kilnrtLaunchCallback(LogEntry::callback, &entries[i], KILN_CALLBACK_BLOCK, s),
              KILN_SUCCESS);
  }
  // With BLOCK callbacks, synchronize returns only after each ran on the reporter.
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(log.snapshot(), iota(20));
  stop = true;
  reporter.join();
  for (pthread_t t : log.threads) EXPECT_TRUE(pthread_equal(t, reporter_id));
}

TEST_F(StreamTest, FinalizeRunsCallbacksNobodyProcessed) {
  kilnrtStream s = make_stream();
  ASSERT_EQ(kilnrtSubscribeReport(static_cast<uint64_t>(pthread_self()), s), KILN_SUCCESS);
  std::atomic<int> ran{0};
  auto count = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };
  ASSERT_EQ(kilnrtLaunchCallback(count, &ran, KILN_CALLBACK_BLOCK, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtLaunchCallback(count, &ran, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  // The stream waits for the blocking callback; kilnFinalize must not.
  finalized_ = true;
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  EXPECT_EQ(ran.load(), 2);
}

TEST_F(StreamTest, FinalizeWaitsForWorkAndRunsHooks) {
  static std::atomic<int> hook_runs{0};
  static std::once_flag once;
  std::call_once(once, [] { kiln::rt::add_finalize_hook([] { hook_runs.fetch_add(1); }); });
  int before = hook_runs.load();
  kilnrtStream s = make_stream();
  std::atomic<int> done{0};
  ASSERT_EQ(kilnrtLaunchCallback(
                [](void* p) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(30));
                  static_cast<std::atomic<int>*>(p)->store(1);
                },
                &done, KILN_CALLBACK_NO_BLOCK, s),
            KILN_SUCCESS);
  finalized_ = true;
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(hook_runs.load(), before + 1);
  // Everything is gone, and a new session starts clean.
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_ERROR_UNINITIALIZE);
  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
  int32_t device;
  EXPECT_EQ(kilnrtGetDevice(&device), KILN_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  finalized_ = false;
}

// ---- Error state and timeouts ---------------------------------------------------------------

TEST_F(StreamTest, FailedTaskPutsTheStreamInErrorStateUntilSynchronize) {
  kilnrtStream s = make_stream();
  kiln::rt::Stream* stream = internal_stream(s);
  ASSERT_NE(stream, nullptr);
  kilnrtEvent e = make_event();
  std::atomic<int> ran_before{0}, ran_after{0}, ran_next{0};
  stream->submit(kiln::rt::Engine::kHost, [&] {
    ran_before = 1;
    return kiln::Status();
  });
  stream->submit(kiln::rt::Engine::kCompute,
                 [] { return kiln::invalid_argument("tensor 'x' has 3 dims, expected 4"); });
  stream->submit(kiln::rt::Engine::kCopy, [&] {
    ran_after = 1;
    return kiln::Status();
  });
  std::atomic<int> callback_ran{0};
  ASSERT_EQ(kilnrtLaunchCallback([](void* p) { static_cast<std::atomic<int>*>(p)->store(1); },
                                 &callback_ran, KILN_CALLBACK_NO_BLOCK, s),
            KILN_SUCCESS);
  // Event records still complete, so nobody waiting on them hangs.
  ASSERT_EQ(kilnrtRecordEvent(e, s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeEventWithTimeout(e, 5000), KILN_SUCCESS) << last_error();

  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_ERROR_RT_TASK_FAILED);
  std::string message = last_error();
  EXPECT_NE(message.find("tensor 'x' has 3 dims, expected 4"), std::string::npos) << message;
  EXPECT_NE(message.find("stream"), std::string::npos) << message;
  EXPECT_EQ(ran_before.load(), 1);
  EXPECT_EQ(ran_after.load(), 0);
  EXPECT_EQ(callback_ran.load(), 0);

  // Reported once; the stream works again.
  stream->submit(kiln::rt::Engine::kHost, [&] {
    ran_next = 1;
    return kiln::Status();
  });
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(ran_next.load(), 1);
}

// Tasks submitted `caller_may_run` (collectives) may run on a thread synchronizing the
// stream instead of the stream's own: either way they run in stream order, one at a time,
// with Stream::current() the stream, and their failure is the stream's.
TEST_F(StreamTest, TasksTheCallerMayRunKeepStreamOrder) {
  kilnrtStream s = make_stream();
  kiln::rt::Stream* stream = internal_stream(s);
  ASSERT_NE(stream, nullptr);
  // A blocked ordinary task first: the caller may not run the next one before it ends.
  Gate gate;
  Log log;
  std::atomic<int> overlapping{0}, inside{0};
  auto logged = [&](int v) {
    return [&, v] {
      if (inside.fetch_add(1) != 0) overlapping = 1;
      if (kiln::rt::Stream::current() != stream) overlapping = 2;
      log.add(v);
      inside.fetch_sub(1);
      return kiln::Status();
    };
  };
  stream->submit(kiln::rt::Engine::kHost, [&] {
    gate.wait();
    log.add(0);
    return kiln::Status();
  });
  stream->submit(kiln::rt::Engine::kHost, logged(1), nullptr, /*caller_may_run=*/true);
  stream->submit(kiln::rt::Engine::kHost, logged(2));
  stream->submit(kiln::rt::Engine::kHost, logged(3), nullptr, /*caller_may_run=*/true);
  std::thread opener([&] {
    while (!gate.entered) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.release();
  });
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  opener.join();
  EXPECT_FALSE(gate.timed_out.load());
  EXPECT_EQ(log.snapshot(), iota(4));
  // Submit-and-synchronize, the way collectives are used: every task in order, never two at once.
  for (int i = 4; i < 200; ++i) {
    stream->submit(kiln::rt::Engine::kHost, logged(i), nullptr, /*caller_may_run=*/true);
    if (i % 3 == 0) stream->submit(kiln::rt::Engine::kHost, logged(++i));
    ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  }
  EXPECT_EQ(log.snapshot(), iota(200));
  EXPECT_EQ(overlapping.load(), 0);
  // A failing one is reported by synchronize like any task, once.
  stream->submit(kiln::rt::Engine::kHost, [] { return kiln::internal_error("collective failed"); }, nullptr, true);
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_ERROR_RT_TASK_FAILED);
  EXPECT_NE(last_error().find("collective failed"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
}

// A task the caller may run is queued without waking a polling stream thread (the next
// synchronize runs it); one that nobody synchronizes must still run, on the stream's thread,
// and soon. And a thread driving several streams (the ranks of several devices) that waits
// for one of them must not leave the others' tasks waiting: here stream A's task needs
// stream B's to have run, as a collective needs its peers.
TEST_F(StreamTest, TasksTheCallerMayRunButNobodySynchronizesStillRun) {
  kilnrtStream s = make_stream();
  kiln::rt::Stream* stream = internal_stream(s);
  ASSERT_NE(stream, nullptr);
  for (int i = 0; i < 3; ++i) {  // the stream in use: its thread polls while it sleeps
    stream->submit(kiln::rt::Engine::kHost, [] { return kiln::Status(); }, nullptr, true);
    ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // asleep by now
  std::atomic<bool> ran{false};
  pthread_t ran_on{};
  auto start = std::chrono::steady_clock::now();
  stream->submit(kiln::rt::Engine::kHost, [&] {
    ran_on = pthread_self();
    ran = true;
    return kiln::Status();
  }, nullptr, /*caller_may_run=*/true);
  while (!ran && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(ran.load()) << "a task nobody synchronized did not run within 5 s";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  EXPECT_FALSE(pthread_equal(ran_on, pthread_self()));
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();

  kilnrtStream s2 = make_stream();
  kiln::rt::Stream* other = internal_stream(s2);
  ASSERT_NE(other, nullptr);
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> b_ran{false}, a_timed_out{false};
    stream->submit(kiln::rt::Engine::kHost, [&] {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!b_ran) {
        if (std::chrono::steady_clock::now() > until) {
          a_timed_out = true;
          break;
        }
        std::this_thread::yield();
      }
      return kiln::Status();
    }, nullptr, true);
    other->submit(kiln::rt::Engine::kHost, [&] {
      b_ran = true;
      return kiln::Status();
    }, nullptr, true);
    ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSynchronizeStream(s2), KILN_SUCCESS) << last_error();
    ASSERT_FALSE(a_timed_out.load()) << "round " << round;
  }
}

// A synchronize with a timeout must return by it, so it runs no task itself (a collective
// may wait for its peers far longer).
TEST_F(StreamTest, SynchronizeWithATimeoutRunsNoTaskOnTheCaller) {
  kilnrtStream s = make_stream();
  kiln::rt::Stream* stream = internal_stream(s);
  ASSERT_NE(stream, nullptr);
  Log log;
  for (int i = 0; i < 50; ++i) {
    stream->submit(kiln::rt::Engine::kHost, [&log, i] {
      log.add(i);
      return kiln::Status();
    }, nullptr, /*caller_may_run=*/true);
    ASSERT_EQ(kilnrtSynchronizeStreamWithTimeout(s, 5000), KILN_SUCCESS) << last_error();
  }
  EXPECT_EQ(log.snapshot(), iota(50));
  std::lock_guard lock(log.mutex);
  for (pthread_t t : log.threads) EXPECT_FALSE(pthread_equal(t, pthread_self()));
}

TEST_F(StreamTest, SynchronizeDeviceReportsAStreamError) {
  kilnrtStream s = make_stream();
  internal_stream(s)->submit(kiln::rt::Engine::kHost, [] { return kiln::internal_error("boom"); });
  EXPECT_EQ(kilnrtSynchronizeDevice(), KILN_ERROR_RT_TASK_FAILED);
  EXPECT_NE(last_error().find("boom"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
}

TEST_F(StreamTest, SynchronizeWithTimeoutReturnsQuickly) {
  kilnrtStream s = make_stream();
  Gate gate;
  ASSERT_EQ(kilnrtLaunchCallback(Gate::callback, &gate, KILN_CALLBACK_NO_BLOCK, s), KILN_SUCCESS);
  auto t0 = Clock::now();
  EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(s, 30), KILN_ERROR_RT_TIMEOUT);
  double waited = ms_since(t0);
  EXPECT_GE(waited, 29.0);
  EXPECT_LT(waited, 3000.0);
  EXPECT_NE(last_error().find("pending"), std::string::npos) << last_error();
  t0 = Clock::now();
  EXPECT_EQ(kilnrtSynchronizeDeviceWithTimeout(30), KILN_ERROR_RT_TIMEOUT);
  EXPECT_LT(ms_since(t0), 3000.0);
  EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(s, 0), KILN_ERROR_RT_TIMEOUT);
  gate.release();
  EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(s, -1), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtSynchronizeDeviceWithTimeout(5000), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(s, -2), KILN_ERROR_INVALID_PARAM);
}

TEST_F(StreamTest, WaitingForAStreamFromItsOwnCallbackFailsInsteadOfHanging) {
  kilnrtStream s = make_stream();
  struct Probe {
    kilnrtStream stream;
    std::atomic<kilnError> sync{KILN_SUCCESS};
    std::atomic<kilnError> sync_device{KILN_SUCCESS};
    std::atomic<kilnError> destroy{KILN_SUCCESS};
    std::atomic<kilnError> finalize{KILN_SUCCESS};
    std::string message;
  } probe;
  probe.stream = s;
  ASSERT_EQ(kilnrtLaunchCallback(
                [](void* p) {
                  auto* probe = static_cast<Probe*>(p);
                  // A stream thread has no current context of its own.
                  kilnrtSetDevice(0);
                  probe->sync = kilnrtSynchronizeStream(probe->stream);
                  probe->message = kilnGetRecentErrMsg();
                  probe->sync_device = kilnrtSynchronizeDevice();
                  probe->destroy = kilnrtDestroyStream(probe->stream);
                  probe->finalize = kilnFinalize();
                  kilnrtResetDevice(0);
                },
                &probe, KILN_CALLBACK_NO_BLOCK, s),
            KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeStreamWithTimeout(s, 10000), KILN_SUCCESS) << last_error();
  EXPECT_EQ(probe.sync.load(), KILN_ERROR_INVALID_PARAM);
  EXPECT_NE(probe.message.find("wait for itself"), std::string::npos) << probe.message;
  EXPECT_EQ(probe.sync_device.load(), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(probe.destroy.load(), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(probe.finalize.load(), KILN_ERROR_INVALID_PARAM);
}

// ---- Devices and contexts ------------------------------------------------------------------------

TEST_F(StreamTest, ContextsAreCurrentPerThread) {
  kilnrtContext current = nullptr;
  ASSERT_EQ(kilnrtGetCurrentContext(&current), KILN_SUCCESS);
  ASSERT_NE(current, nullptr);
  kilnrtContext mine = nullptr;
  ASSERT_EQ(kilnrtCreateContext(&mine, 0), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtGetCurrentContext(&current), KILN_SUCCESS);
  EXPECT_EQ(current, mine);

  std::thread other([&] {
    kilnrtContext c = reinterpret_cast<kilnrtContext>(1);
    EXPECT_EQ(kilnrtGetCurrentContext(&c), KILN_ERROR_RT_CONTEXT_NULL);
    EXPECT_EQ(c, nullptr);
    int32_t device;
    EXPECT_EQ(kilnrtGetDevice(&device), KILN_ERROR_RT_CONTEXT_NULL);
    kilnrtStream s;
    EXPECT_EQ(kilnrtCreateStream(&s), KILN_ERROR_RT_CONTEXT_NULL);
    EXPECT_EQ(kilnrtSynchronizeStream(nullptr), KILN_ERROR_RT_CONTEXT_NULL);
    EXPECT_EQ(kilnrtLaunchCallback([](void*) {}, nullptr, KILN_CALLBACK_BLOCK, nullptr),
              KILN_ERROR_RT_CONTEXT_NULL);
    EXPECT_EQ(kilnrtSynchronizeDevice(), KILN_ERROR_RT_CONTEXT_NULL);
    ASSERT_EQ(kilnrtSetCurrentContext(mine), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtGetDevice(&device), KILN_SUCCESS);
    EXPECT_EQ(device, 0);
  });
  other.join();

  ASSERT_EQ(kilnrtDestroyContext(mine), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtGetCurrentContext(&current), KILN_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(kilnrtSetCurrentContext(mine), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtDestroyContext(mine), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  // The default context of device 0 is still there; SetDevice makes it current again.
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  ASSERT_EQ(kilnrtGetCurrentContext(&current), KILN_SUCCESS);
  EXPECT_EQ(kilnrtDestroyContext(current), KILN_ERROR_INVALID_PARAM);  // default context
  ASSERT_EQ(kilnrtResetDevice(0), KILN_SUCCESS);
}

TEST_F(StreamTest, ResetDeviceReleasesTheDefaultContextOnTheLastMatch) {
  // SetUp called kilnrtSetDevice(0) once.
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  std::atomic<int> done{0};
  ASSERT_EQ(kilnrtLaunchCallback(
                [](void* p) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(20));
                  static_cast<std::atomic<int>*>(p)->store(1);
                },
                &done, KILN_CALLBACK_NO_BLOCK, nullptr),
            KILN_SUCCESS);
  ASSERT_EQ(kilnrtResetDevice(0), KILN_SUCCESS) << last_error();
  int32_t device = -1;
  EXPECT_EQ(kilnrtGetDevice(&device), KILN_SUCCESS);
  ASSERT_EQ(kilnrtResetDevice(0), KILN_SUCCESS) << last_error();
  EXPECT_EQ(done.load(), 1);  // the default stream's work finished first
  EXPECT_EQ(kilnrtGetDevice(&device), KILN_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(kilnrtResetDevice(0), KILN_ERROR_INVALID_DEVICE);
}

TEST_F(TwoDeviceTest, DevicesSplitTheCoresAndComputeTasksRunOnThem) {
  std::shared_lock lock(kiln::rt::runtime_lock());
  kiln::rt::RuntimeState* state = kiln::rt::runtime_state();
  ASSERT_NE(state, nullptr);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int n_allowed = CPU_COUNT(&allowed);
  kiln::rt::Device* d0 = state->devices->device(0);
  kiln::rt::Device* d1 = state->devices->device(1);
  ASSERT_NE(d0, nullptr);
  ASSERT_NE(d1, nullptr);
  EXPECT_EQ(state->devices->device(2), nullptr);
  EXPECT_GE(d0->num_threads(), 1);
  EXPECT_GE(d1->num_threads(), 1);
  std::set<int> all;
  for (int c : d0->cores()) all.insert(c);
  for (int c : d1->cores()) {
    if (n_allowed >= 2) {
      EXPECT_EQ(all.count(c), 0u) << "core " << c << " on both devices";
    }
    all.insert(c);
  }
  for (int c : all) EXPECT_TRUE(CPU_ISSET(c, &allowed)) << c;
  if (n_allowed >= 2) {
    EXPECT_EQ(static_cast<int>(all.size()), n_allowed);
    EXPECT_LE(std::abs(d0->num_threads() - d1->num_threads()), 1);
  }
  lock.unlock();

  ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS);
  kilnrtStream s = make_stream();
  std::vector<int> task_cores;
  int task_threads = 0;
  internal_stream(s)->submit(kiln::rt::Engine::kCompute, [&] {
    task_threads = kiln::num_threads();
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof(set), &set);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) task_cores.push_back(c);
    }
    return kiln::Status();
  });
  ASSERT_EQ(kilnrtSynchronizeStream(s), KILN_SUCCESS) << last_error();
  EXPECT_EQ(task_cores, d1->cores());
  EXPECT_GE(task_threads, 1);
  EXPECT_LE(task_threads, d1->num_threads());
  ASSERT_EQ(kilnrtResetDevice(1), KILN_SUCCESS);
}

TEST(ComputeScopeTest, SetsAndRestoresThreadCountAndAffinity) {
  cpu_set_t before;
  CPU_ZERO(&before);
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int first_core = -1;
  for (int c = 0; c < CPU_SETSIZE && first_core < 0; ++c) {
    if (CPU_ISSET(c, &before)) first_core = c;
  }
  int threads_before = kiln::num_threads();
  {
    kiln::rt::Device device(0, {first_core}, size_t{1} << 20);
    kiln::rt::ComputeScope scope(device);
    EXPECT_EQ(kiln::num_threads(), 1);
    cpu_set_t inside;
    CPU_ZERO(&inside);
    ASSERT_EQ(sched_getaffinity(0, sizeof(inside), &inside), 0);
    EXPECT_EQ(CPU_COUNT(&inside), 1);
    EXPECT_TRUE(CPU_ISSET(first_core, &inside));
  }
  EXPECT_EQ(kiln::num_threads(), threads_before);
  cpu_set_t after;
  CPU_ZERO(&after);
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

// ---- Configuration ---------------------------------------------------------------------------------

TEST(InitTest, DeviceCountFromEnvironmentAndConfigFile) {
  ::setenv("KILN_DEVICES", "cpu:3", 1);
  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
  ::unsetenv("KILN_DEVICES");
  uint32_t count = 0;
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  EXPECT_EQ(count, 3u);
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS);

  std::string path = temp_file("count.json", R"({"devices": {"kind": "cpu", "count": 2, "memory_mb": 64}})");
  ASSERT_EQ(kilnInit(path.c_str()), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  EXPECT_EQ(count, 2u);
  {
    std::shared_lock lock(kiln::rt::runtime_lock());
    EXPECT_EQ(kiln::rt::runtime_state()->devices->device(1)->memory_limit(), size_t{64} << 20);
  }
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS);
  std::filesystem::remove(path);

  path = temp_file("string.json", R"({"devices": "cpu:4", "dump": {"path": "x"}})");
  ASSERT_EQ(kilnInit(path.c_str()), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  EXPECT_EQ(count, 4u);
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS);
  std::filesystem::remove(path);

  // An empty config (as AscendCL samples pass) leaves the choice to KILN_DEVICES.
  path = temp_file("empty.json", "{}");
  ::setenv("KILN_DEVICES", "cpu:2", 1);
  ASSERT_EQ(kilnInit(path.c_str()), KILN_SUCCESS) << last_error();
  ::unsetenv("KILN_DEVICES");
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  EXPECT_EQ(count, 2u);
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS);
  std::filesystem::remove(path);

  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS);
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  EXPECT_EQ(count, 1u);
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS);
}

TEST(InitTest, BadDeviceSpecsAreErrors) {
  for (const char* spec : {"gpu:2", "cpu:0", "cpu:-1", "cpu:x", "cpu:", "cpu:2x", "cpu:100000"}) {
    ::setenv("KILN_DEVICES", spec, 1);
    EXPECT_EQ(kilnInit(nullptr), KILN_ERROR_INVALID_PARAM) << spec;
    EXPECT_NE(last_error().find("KILN_DEVICES"), std::string::npos) << last_error();
    EXPECT_NE(last_error().find(spec), std::string::npos) << last_error();
    uint32_t count;
    EXPECT_EQ(kilnrtGetDeviceCount(&count), KILN_ERROR_UNINITIALIZE);
  }
  ::unsetenv("KILN_DEVICES");

  EXPECT_EQ(kilnInit("/nonexistent/kiln.json"), KILN_ERROR_INVALID_FILE);
  std::string path = temp_file("bad.json", "{\"devices\": ");
  EXPECT_EQ(kilnInit(path.c_str()), KILN_ERROR_PARSE_FILE);
  std::filesystem::remove(path);
  for (const char* text :
       {R"({"devices": {"kind": "gpu", "count": 2}})", R"({"devices": {"count": 0}})",
        R"({"devices": {"count": "2"}})", R"({"devices": {"count": 2, "memroy_mb": 5}})",
        R"({"devices": {"memory_mb": -4}})", R"({"devices": 2})", R"({"devices": "tpu"})",
        R"([1, 2])"}) {
    path = temp_file("values.json", text);
    EXPECT_EQ(kilnInit(path.c_str()), KILN_ERROR_INVALID_PARAM) << text;
    EXPECT_NE(last_error().find("config"), std::string::npos) << last_error();
    std::filesystem::remove(path);
  }
  uint32_t count;
  EXPECT_EQ(kilnrtGetDeviceCount(&count), KILN_ERROR_UNINITIALIZE);
}

TEST(InitTest, ParseDeviceSpec) {
  auto c = kiln::rt::parse_device_spec("cpu");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->count, 1);
  c = kiln::rt::parse_device_spec(" cpu:8 ");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->count, 8);
  EXPECT_FALSE(kiln::rt::parse_device_spec("").ok());
  EXPECT_FALSE(kiln::rt::parse_device_spec("cpu:1:2").ok());
}

// A value nested a million deep is named by its type in the error, not dumped (a stack
// overflow); fuzz/regressions/kiln_init_config/deep_kind.json is a shallower one.
TEST(InitTest, DeeplyNestedConfigValueIsAnError) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  auto c = kiln::rt::parse_device_config(R"({"devices": {"kind": )" + deep + "}}", "deep.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().to_string().find("devices.kind is (array nested too deep)"), std::string::npos)
      << c.status().to_string();
}

// ---- Misuse ---------------------------------------------------------------------------------------

TEST(MisuseTest, CallsBeforeInitAreUninitialized) {
  kilnrtStream s;
  kilnrtEvent e;
  kilnrtContext c;
  int32_t device;
  uint32_t count;
  EXPECT_EQ(kilnrtSetDevice(0), KILN_ERROR_UNINITIALIZE);
  EXPECT_NE(std::string(kilnGetRecentErrMsg()).find("kilnInit"), std::string::npos);
  EXPECT_EQ(kilnrtGetDevice(&device), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtGetDeviceCount(&count), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtResetDevice(0), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtCreateContext(&c, 0), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtCreateStream(&s), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtSynchronizeStream(nullptr), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtSynchronizeDevice(), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtCreateEvent(&e), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtLaunchCallback([](void*) {}, nullptr, KILN_CALLBACK_BLOCK, nullptr),
            KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtProcessReport(0), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnFinalize(), KILN_ERROR_UNINITIALIZE);
  // Pure queries need no runtime.
  int32_t major = -1, minor = -1, patch = -1;
  EXPECT_EQ(kilnrtGetVersion(&major, &minor, &patch), KILN_SUCCESS);
  EXPECT_EQ(major, KILN_VERSION_MAJOR);
  EXPECT_EQ(minor, KILN_VERSION_MINOR);
  EXPECT_EQ(patch, KILN_VERSION_PATCH);
  kilnrtRunMode mode = KILN_DEVICE;
  EXPECT_EQ(kilnrtGetRunMode(&mode), KILN_SUCCESS);
  EXPECT_EQ(mode, KILN_HOST);
}

TEST_F(StreamTest, InitTwiceIsRepeatInitialize) {
  EXPECT_EQ(kilnInit(nullptr), KILN_ERROR_REPEAT_INITIALIZE);
  EXPECT_NE(last_error().find("already"), std::string::npos) << last_error();
  // The running session is unharmed.
  uint32_t count = 0;
  EXPECT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  EXPECT_EQ(count, 1u);
}

TEST_F(StreamTest, NullParametersAreInvalidParam) {
  kilnrtStream s = make_stream();
  kilnrtEvent e = make_event();
  int32_t v;
  EXPECT_EQ(kilnrtCreateStream(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtCreateEvent(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtCreateEventWithFlag(nullptr, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtCreateContext(nullptr, 0), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetDevice(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetDeviceCount(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetCurrentContext(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtSetCurrentContext(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtDestroyContext(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtDestroyStream(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtDestroyEvent(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtStreamQuery(s, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtQueryEvent(e, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtQueryEvent(nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtRecordEvent(nullptr, s), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtStreamWaitEvent(s, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtSynchronizeEvent(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtEventElapsedTime(nullptr, e, e), KILN_ERROR_INVALID_PARAM);
  float ms;
  EXPECT_EQ(kilnrtEventElapsedTime(&ms, nullptr, e), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtLaunchCallback(nullptr, nullptr, KILN_CALLBACK_BLOCK, s), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtLaunchCallback([](void*) {}, nullptr, static_cast<kilnrtCallbackBlockType>(5), s),
            KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetVersion(nullptr, &v, &v), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetRunMode(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtCreateEventWithFlag(&e, 0x10), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtSynchronizeEventWithTimeout(e, -5), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtSynchronizeDeviceWithTimeout(-3), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtProcessReport(-9), KILN_ERROR_INVALID_PARAM);
  EXPECT_FALSE(last_error().empty());
}

TEST_F(StreamTest, DestroyedAndForeignHandlesAreInvalidResourceHandle) {
  kilnrtStream s = make_stream();
  kilnrtEvent e = make_event();
  // Made before the others are destroyed: handles are addresses, and a later object may
  // reuse a destroyed one's.
  kilnrtEvent live = make_event();
  kilnrtStream s2 = make_stream();
  ASSERT_EQ(kilnrtDestroyStream(s), KILN_SUCCESS);
  ASSERT_EQ(kilnrtDestroyEvent(e), KILN_SUCCESS);
  kilnrtStreamStatus ss;
  kilnrtEventStatus es;
  EXPECT_EQ(kilnrtSynchronizeStream(s), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_NE(last_error().find("not a live stream"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtSynchronizeStreamWithTimeout(s, 10), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtDestroyStream(s), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtStreamQuery(s, &ss), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtLaunchCallback([](void*) {}, nullptr, KILN_CALLBACK_BLOCK, s),
            KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtSubscribeReport(1, s), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtDestroyEvent(e), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtQueryEvent(e, &es), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtRecordEvent(e, nullptr), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtSynchronizeEvent(e), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtStreamWaitEvent(s, live), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtStreamWaitEvent(nullptr, e), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  // A pointer that never was a handle.
  int not_a_handle = 0;
  EXPECT_EQ(kilnrtSynchronizeStream(&not_a_handle), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtQueryEvent(&not_a_handle, &es), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtSetCurrentContext(&not_a_handle), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  // A stream handle is not an event, nor the other way round.
  EXPECT_EQ(kilnrtQueryEvent(s2, &es), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnrtSynchronizeStream(live), KILN_ERROR_INVALID_RESOURCE_HANDLE);
}

TEST_F(StreamTest, BadDeviceIdsAreInvalidDevice) {
  kilnrtContext c = nullptr;
  for (int32_t id : {-1, 1, 99}) {
    EXPECT_EQ(kilnrtSetDevice(id), KILN_ERROR_INVALID_DEVICE) << id;
    EXPECT_NE(last_error().find(std::to_string(id)), std::string::npos) << last_error();
    EXPECT_EQ(kilnrtResetDevice(id), KILN_ERROR_INVALID_DEVICE) << id;
    EXPECT_EQ(kilnrtCreateContext(&c, id), KILN_ERROR_INVALID_DEVICE) << id;
    EXPECT_EQ(c, nullptr);
  }
  // The current context is unchanged.
  int32_t device = -1;
  ASSERT_EQ(kilnrtGetDevice(&device), KILN_SUCCESS);
  EXPECT_EQ(device, 0);
}

}  // namespace
