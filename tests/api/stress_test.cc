// Stress: 8 threads submit to 4 streams on 2 devices for 10 s (KILN_STRESS_SECONDS
// shortens it), chaining their work across streams with events. Checked afterwards:
// every task ran exactly once, each thread's tasks ran in its submission order on every
// stream, and a value written on one stream was seen by the task waiting for it on
// another (the event is the only thing ordering the two).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

constexpr int kThreads = 8;
constexpr int kStreams = 4;  // streams 0, 1 on device 0; 2, 3 on device 1

std::string last_error() { return kilnGetRecentErrMsg(); }

// Touched only by tasks of one stream, which run one at a time on its thread.
struct StreamState {
  uint64_t tasks_run = 0;
  uint64_t last_seq[kThreads] = {};
  uint64_t order_errors = 0;
};

// One thread's chain: a value written by a task on one stream and checked by a task on
// the next stream after an event wait.
struct Chain {
  uint64_t value = 0;  // plain: the events must order the accesses (TSan checks)
  uint64_t mismatches = 0;
};

struct Task {
  StreamState* stream;
  int thread;
  uint64_t seq;
  Chain* chain;
  enum { kCount, kWrite, kCheck } kind;
  uint64_t token;
  static void run(void* p) {
    auto* t = static_cast<Task*>(p);
    StreamState& s = *t->stream;
    ++s.tasks_run;
    if (t->seq != s.last_seq[t->thread] + 1) ++s.order_errors;
    s.last_seq[t->thread] = t->seq;
    if (t->kind == kWrite) t->chain->value = t->token;
    if (t->kind == kCheck && t->chain->value != t->token) ++t->chain->mismatches;
    delete t;
  }
};

double stress_seconds() {
  const char* v = std::getenv("KILN_STRESS_SECONDS");
  if (v && *v) {
    double s = std::atof(v);
    if (s > 0) return s;
  }
  return 10.0;
}

TEST(StressTest, EightThreadsFourStreamsTwoDevices) {
  ::setenv("KILN_DEVICES", "cpu:2", 1);
  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
  ::unsetenv("KILN_DEVICES");

  kilnrtContext contexts[2];
  kilnrtStream streams[kStreams];
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(kilnrtCreateContext(&contexts[d], d), KILN_SUCCESS) << last_error();
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(kilnrtCreateStream(&streams[2 * d + k]), KILN_SUCCESS) << last_error();
    }
  }
  std::vector<StreamState> state(kStreams);
  std::vector<Chain> chains(kThreads);
  std::vector<std::vector<uint64_t>> submitted(kThreads, std::vector<uint64_t>(kStreams, 0));
  std::vector<uint64_t> checks(kThreads, 0);
  std::atomic<int> api_errors{0};
  std::atomic<bool> stop{false};

  auto worker = [&](int t) {
    // Threads alternate the current context; the handles work from any thread.
    if (kilnrtSetCurrentContext(contexts[t % 2]) != KILN_SUCCESS) ++api_errors;
    std::mt19937 rng(1234 + t);
    kilnrtEvent written = nullptr, checked = nullptr;
    if (kilnrtCreateEvent(&written) != KILN_SUCCESS || kilnrtCreateEvent(&checked) != KILN_SUCCESS) {
      ++api_errors;
      return;
    }
    std::vector<uint64_t> seq(kStreams, 0);
    auto submit = [&](int s, decltype(Task::kind) kind, uint64_t token) {
      auto* task = new Task{&state[s], t, ++seq[s], &chains[t], kind, token};
      auto type = rng() % 4 == 0 ? KILN_CALLBACK_BLOCK : KILN_CALLBACK_NO_BLOCK;
      if (kilnrtLaunchCallback(Task::run, task, type, streams[s]) != KILN_SUCCESS) {
        ++api_errors;
        --seq[s];
        delete task;
        return;
      }
      ++submitted[t][s];
    };
    uint64_t token = 0;
    int prev_check_stream = -1;
    for (uint64_t iter = 0; !stop.load(std::memory_order_relaxed); ++iter) {
      int a = static_cast<int>(rng() % kStreams);
      int b = static_cast<int>(rng() % kStreams);
      ++token;
      // The write must come after the previous check of this chain, which ran on another
      // stream: wait for it.
      if (prev_check_stream >= 0 && kilnrtStreamWaitEvent(streams[a], checked) != KILN_SUCCESS) {
        ++api_errors;
      }
      submit(a, Task::kWrite, token);
      for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
        submit(static_cast<int>(rng() % kStreams), Task::kCount, 0);
      }
      if (kilnrtRecordEvent(written, streams[a]) != KILN_SUCCESS) ++api_errors;
      if (kilnrtStreamWaitEvent(streams[b], written) != KILN_SUCCESS) ++api_errors;
      submit(b, Task::kCheck, token);
      ++checks[t];
      if (kilnrtRecordEvent(checked, streams[b]) != KILN_SUCCESS) ++api_errors;
      prev_check_stream = b;
      // Bound the work in flight; now and then poll instead.
      if (iter % 64 == 63) {
        if (kilnrtSynchronizeEvent(checked) != KILN_SUCCESS) ++api_errors;
      } else if (iter % 16 == 5) {
        kilnrtStreamStatus status;
        if (kilnrtStreamQuery(streams[b], &status) != KILN_SUCCESS) ++api_errors;
      }
    }
    if (kilnrtSynchronizeEvent(checked) != KILN_SUCCESS) ++api_errors;
    if (kilnrtDestroyEvent(written) != KILN_SUCCESS) ++api_errors;
    if (kilnrtDestroyEvent(checked) != KILN_SUCCESS) ++api_errors;
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::duration<double>(stress_seconds()));
  stop = true;
  for (auto& th : threads) th.join();
  for (int s = 0; s < kStreams; ++s) {
    ASSERT_EQ(kilnrtSynchronizeStream(streams[s]), KILN_SUCCESS) << last_error();
  }

  EXPECT_EQ(api_errors.load(), 0) << last_error();
  uint64_t total = 0, total_checks = 0;
  for (int s = 0; s < kStreams; ++s) {
    uint64_t expected = 0;
    for (int t = 0; t < kThreads; ++t) {
      expected += submitted[t][s];
      EXPECT_EQ(state[s].last_seq[t], submitted[t][s]) << "stream " << s << " thread " << t;
    }
    EXPECT_EQ(state[s].tasks_run, expected) << "stream " << s;
    EXPECT_EQ(state[s].order_errors, 0u) << "stream " << s;
    total += expected;
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(chains[t].mismatches, 0u) << "thread " << t;
    EXPECT_GT(checks[t], 0u) << "thread " << t;
    total_checks += checks[t];
  }
  std::printf("stress: %.1f s, %llu tasks, %llu cross-stream checks\n", stress_seconds(),
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(total_checks));
  for (int d = 0; d < 2; ++d) EXPECT_EQ(kilnrtDestroyContext(contexts[d]), KILN_SUCCESS);
  EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
}

}  // namespace
