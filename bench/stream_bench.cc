// Cost of the stream machinery, each beside a peer measured in the same run:
//  - an empty task through a stream (submit N, then synchronize; ns per task) vs a plain
//    std::function call and vs a textbook mutex + condition-variable work queue with one
//    consumer thread (notify on every push);
//  - event record + kilnrtStreamWaitEvent + synchronize round trip (us) vs a mutex +
//    condition-variable ping-pong between two threads.
// Usage: stream_bench [tasks=1000000] [round_trips=20000] [repetitions=5]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "capi/api_internal.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void check(kilnError e, const char* what) {
  if (e != KILN_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d %s\n", what, e, kilnGetRecentErrMsg());
    std::exit(1);
  }
}

kiln::rt::Stream* internal_stream(kilnrtStream handle) {
  std::shared_lock lock(kiln::rt::runtime_lock());
  auto s = kiln::rt::resolve_stream(handle, "stream_bench");
  return s.ok() ? *s : nullptr;
}

// ns per empty task through a Kiln stream (internal submit, the path every API call takes).
double stream_empty_task_ns(kilnrtStream handle, kiln::rt::Engine engine, long n) {
  kiln::rt::Stream* s = internal_stream(handle);
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) s->submit(engine, [] { return kiln::Status(); });
  check(kilnrtSynchronizeStream(handle), "kilnrtSynchronizeStream");
  return seconds_since(t0) * 1e9 / static_cast<double>(n);
}

// ns per submit alone: the stream's thread is held at a gate meanwhile, so this is the
// caller's side of the cost (what a submitting thread pays per task).
double stream_submit_only_ns(kilnrtStream handle, long n) {
  kiln::rt::Stream* s = internal_stream(handle);
  std::atomic<bool> open{false};
  s->submit(kiln::rt::Engine::kHost, [&open] {
    while (!open.load(std::memory_order_acquire)) std::this_thread::yield();
    return kiln::Status();
  });
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) s->submit(kiln::rt::Engine::kHost, [] { return kiln::Status(); });
  double ns = seconds_since(t0) * 1e9 / static_cast<double>(n);
  open.store(true, std::memory_order_release);
  check(kilnrtSynchronizeStream(handle), "kilnrtSynchronizeStream");
  return ns;
}

// ns per empty callback through the C API (kilnrtLaunchCallback, NO_BLOCK).
double api_callback_ns(kilnrtStream handle, long n) {
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    check(kilnrtLaunchCallback([](void*) {}, nullptr, KILN_CALLBACK_NO_BLOCK, handle),
          "kilnrtLaunchCallback");
  }
  check(kilnrtSynchronizeStream(handle), "kilnrtSynchronizeStream");
  return seconds_since(t0) * 1e9 / static_cast<double>(n);
}

// Peer: calling the same kind of std::function directly.
double plain_function_ns(long n) {
  std::function<kiln::Status()> f = [] { return kiln::Status(); };
  std::atomic<long> sink{0};
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    kiln::Status s = f();
    if (!s.ok()) sink.fetch_add(1, std::memory_order_relaxed);
  }
  double ns = seconds_since(t0) * 1e9 / static_cast<double>(n);
  if (sink.load()) std::printf("?");
  return ns;
}

// Peer: a textbook work queue (mutex + deque + condition variable, notify on each push,
// one consumer thread), N empty std::function tasks, then wait until drained.
double textbook_queue_ns(long n) {
  std::mutex m;
  std::condition_variable work, done;
  std::deque<std::function<kiln::Status()>> q;
  long completed = 0;
  bool stop = false;
  std::thread consumer([&] {
    std::unique_lock lock(m);
    for (;;) {
      work.wait(lock, [&] { return stop || !q.empty(); });
      if (q.empty() && stop) return;
      auto f = std::move(q.front());
      q.pop_front();
      lock.unlock();
      f().ignore_error();
      lock.lock();
      if (++completed == n) done.notify_all();
    }
  });
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    {
      std::lock_guard lock(m);
      q.push_back([] { return kiln::Status(); });
    }
    work.notify_one();
  }
  {
    std::unique_lock lock(m);
    done.wait(lock, [&] { return completed == n; });
  }
  double ns = seconds_since(t0) * 1e9 / static_cast<double>(n);
  {
    std::lock_guard lock(m);
    stop = true;
  }
  work.notify_one();
  consumer.join();
  return ns;
}

// us per: record on A, B waits for it, synchronize B.
double event_round_trip_us(kilnrtStream a, kilnrtStream b, kilnrtEvent e, long n) {
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    check(kilnrtRecordEvent(e, a), "kilnrtRecordEvent");
    check(kilnrtStreamWaitEvent(b, e), "kilnrtStreamWaitEvent");
    check(kilnrtSynchronizeStream(b), "kilnrtSynchronizeStream");
  }
  return seconds_since(t0) * 1e6 / static_cast<double>(n);
}

// Peer: the main thread hands a token to a second thread and waits for it back.
double ping_pong_us(long n) {
  std::mutex m;
  std::condition_variable cv;
  long ping = 0, pong = 0;
  std::thread other([&] {
    std::unique_lock lock(m);
    for (long i = 1; i <= n; ++i) {
      cv.wait(lock, [&] { return ping == i; });
      pong = i;
      cv.notify_all();
    }
  });
  auto t0 = Clock::now();
  {
    std::unique_lock lock(m);
    for (long i = 1; i <= n; ++i) {
      ping = i;
      cv.notify_all();
      cv.wait(lock, [&] { return pong == i; });
    }
  }
  double us = seconds_since(t0) * 1e6 / static_cast<double>(n);
  other.join();
  return us;
}

// Best and median of `reps` runs. The runs of all rows are interleaved round by round,
// so a burst of load from other processes hits Kiln and its peers alike.
struct Row {
  Row(const char* n, std::function<double()> m) : name(n), measure(std::move(m)) {}
  const char* name;
  std::function<double()> measure;
  std::vector<double> samples;
};

void print_rows(const char* title, const char* unit, std::vector<Row>& rows, int reps) {
  for (int r = 0; r < reps; ++r) {
    for (Row& row : rows) row.samples.push_back(row.measure());
  }
  std::printf("%-58s %10s %10s\n", title, (std::string("best ") + unit).c_str(),
              (std::string("median ") + unit).c_str());
  for (Row& row : rows) {
    std::sort(row.samples.begin(), row.samples.end());
    std::printf("%-58s %10.2f %10.2f\n", row.name, row.samples.front(),
                row.samples[row.samples.size() / 2]);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  long tasks = argc > 1 ? std::atol(argv[1]) : 1000000;
  long trips = argc > 2 ? std::atol(argv[2]) : 20000;
  int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  if (tasks <= 0 || trips <= 0 || reps <= 0) {
    std::fprintf(stderr, "usage: stream_bench [tasks>0] [round_trips>0] [repetitions>0]\n");
    return 2;
  }
  check(kilnInit(nullptr), "kilnInit");
  check(kilnrtSetDevice(0), "kilnrtSetDevice");
  kilnrtStream a, b;
  check(kilnrtCreateStream(&a), "kilnrtCreateStream");
  check(kilnrtCreateStream(&b), "kilnrtCreateStream");
  kilnrtEvent e;
  check(kilnrtCreateEvent(&e), "kilnrtCreateEvent");

  // Warm up threads and allocators.
  stream_empty_task_ns(a, kiln::rt::Engine::kHost, tasks / 10 + 1);
  event_round_trip_us(a, b, e, trips / 10 + 1);

  std::printf("stream_bench: %ld tasks, %ld round trips, best and median of %d runs, %u hardware "
              "threads\n\n",
              tasks, trips, reps, std::thread::hardware_concurrency());
  std::vector<Row> task_rows = {
      {"kiln stream, Engine::kHost",
       [&] { return stream_empty_task_ns(a, kiln::rt::Engine::kHost, tasks); }},
      {"kiln stream, Engine::kCompute (engine lock + ComputeScope)",
       [&] { return stream_empty_task_ns(a, kiln::rt::Engine::kCompute, tasks); }},
      {"kilnrtLaunchCallback (C API, NO_BLOCK)", [&] { return api_callback_ns(a, tasks); }},
      {"kiln stream, submit alone (stream thread held back)",
       [&] { return stream_submit_only_ns(a, tasks); }},
      {"peer: mutex+condvar queue, one consumer thread", [&] { return textbook_queue_ns(tasks); }},
      {"peer: direct std::function call", [&] { return plain_function_ns(tasks); }},
  };
  print_rows("empty task (submit N, then synchronize)", "ns", task_rows, reps);
  std::vector<Row> trip_rows = {
      {"kiln record + StreamWaitEvent + SynchronizeStream",
       [&] { return event_round_trip_us(a, b, e, trips); }},
      {"peer: mutex+condvar ping-pong between two threads", [&] { return ping_pong_us(trips); }},
  };
  print_rows("round trip", "us", trip_rows, reps);

  check(kilnrtDestroyEvent(e), "kilnrtDestroyEvent");
  check(kilnrtDestroyStream(a), "kilnrtDestroyStream");
  check(kilnrtDestroyStream(b), "kilnrtDestroyStream");
  check(kilnrtResetDevice(0), "kilnrtResetDevice");
  check(kilnFinalize(), "kilnFinalize");
  return 0;
}
