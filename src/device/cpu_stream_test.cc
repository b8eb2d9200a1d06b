// CpuStream / CpuEvent: in-order execution, cross-stream waits without host waits, CUDA's capture
// semantics, sticky errors, and the delay mode that exposes a missing wait.
#include "device/cpu_stream.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace zero::device {
namespace {

using namespace std::chrono_literals;

// As a CUDA event, a CpuEvent may be destroyed while a wait on its record is still queued (the
// reducer drops a bucket's `done` event once the compute stream waits for it): the wait still
// holds the consumer until the producer gets there. Run under TSan / ASan, a wait that referred to
// the destroyed event is a report.
TEST(CpuStream, EventMayBeDestroyedWhileAWaitOnItIsPending) {
  CpuStream producer("comm", {.max_delay_us = 100, .delay_seed = 5});
  CpuStream consumer("compute", {.max_delay_us = 100, .delay_seed = 6});
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<bool> produced{false}, ran_early{false};
  producer.enqueue([open, &produced] {
    open.wait();
    produced = true;
    return ok_status();
  });
  {
    auto event = std::make_unique<CpuEvent>();
    producer.record(*event);
    consumer.wait(*event);
  }
  consumer.enqueue([&] {
    if (!produced) ran_early = true;
    return ok_status();
  });
  std::this_thread::sleep_for(2ms);
  gate.set_value();
  ASSERT_TRUE(consumer.synchronize().ok());
  ASSERT_TRUE(producer.synchronize().ok());
  EXPECT_FALSE(ran_early);
}

// enqueue_always runs after a failed op (a collective every rank must issue); enqueue does not.
TEST(CpuStream, EnqueueAlwaysRunsAfterAFailure) {
  CpuStream s("comm");
  bool plain = false, always = false;
  s.enqueue([] { return internal_error("broken"); });
  s.enqueue([&] {
    plain = true;
    return ok_status();
  });
  s.enqueue_always([&] { always = true; });
  EXPECT_FALSE(s.synchronize().ok());
  EXPECT_FALSE(plain);
  EXPECT_TRUE(always);
}

TEST(CpuStream, RunsItsQueueInOrderOffTheHostThread) {
  CpuStream s("compute", {.max_delay_us = 200, .delay_seed = 3});
  std::vector<int> order;  // written by the worker only, read after synchronize
  const auto host = std::this_thread::get_id();
  std::atomic<bool> on_host{false};
  for (int i = 0; i < 50; ++i) {
    s.enqueue([&, i] {
      order.push_back(i);
      if (std::this_thread::get_id() == host) on_host = true;
      return ok_status();
    });
  }
  ASSERT_TRUE(s.synchronize().ok());
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_FALSE(on_host);
}

// Producer writes, records; consumer waits on the event (no host wait in between) and reads. With
// random delays on both streams the consumer must still see every value.
TEST(CpuStream, WaitOrdersAnotherStreamsWorkWithoutAHostWait) {
  CpuStream producer("compute", {.max_delay_us = 300, .delay_seed = 11});
  CpuStream consumer("comm", {.max_delay_us = 300, .delay_seed = 12});
  constexpr int kRounds = 40;
  std::vector<int> buffer(kRounds, -1), seen(kRounds, -2);
  std::vector<CpuEvent> ready(kRounds);
  for (int r = 0; r < kRounds; ++r) {
    producer.enqueue([&, r] {
      buffer[static_cast<size_t>(r)] = r * r;
      return ok_status();
    });
    producer.record(ready[static_cast<size_t>(r)]);
    consumer.wait(ready[static_cast<size_t>(r)]);
    consumer.enqueue([&, r] {
      seen[static_cast<size_t>(r)] = buffer[static_cast<size_t>(r)];
      return ok_status();
    });
  }
  ASSERT_TRUE(consumer.synchronize().ok());
  ASSERT_TRUE(producer.synchronize().ok());
  for (int r = 0; r < kRounds; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], r * r);
}

// The same without the wait: the consumer reads before the (slow) producer wrote. This is what
// delay mode is for: a forgotten wait gives a wrong answer instead of passing by luck.
TEST(CpuStream, AMissingWaitIsVisible) {
  CpuStream producer("compute");
  CpuStream consumer("comm");
  std::atomic<int> value{0};
  std::atomic<int> seen{-1};
  producer.enqueue([&] {
    std::this_thread::sleep_for(50ms);
    value = 42;
    return ok_status();
  });
  consumer.enqueue([&] {
    seen = value.load();
    return ok_status();
  });
  ASSERT_TRUE(consumer.synchronize().ok());
  EXPECT_EQ(seen.load(), 0);
  ASSERT_TRUE(producer.synchronize().ok());
  EXPECT_EQ(value.load(), 42);
}

TEST(CpuEvent, NeverRecordedIsCompleteAndWaitCapturesTheRecordAtCallTime) {
  CpuEvent e;
  EXPECT_TRUE(e.query());
  e.synchronize();  // returns at once

  CpuStream a("a"), b("b");
  std::atomic<bool> gate{false};
  a.enqueue([&] {
    while (!gate) std::this_thread::sleep_for(1ms);
    return ok_status();
  });
  a.record(e);
  EXPECT_FALSE(e.query());
  std::atomic<bool> b_ran{false};
  b.wait(e);
  b.enqueue([&] {
    b_ran = true;
    return ok_status();
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(b_ran.load());  // held by the event
  gate = true;
  e.synchronize();
  ASSERT_TRUE(b.synchronize().ok());
  EXPECT_TRUE(b_ran.load());
  EXPECT_TRUE(e.query());
}

TEST(CpuStream, AFailureIsStickyUntilSynchronizeAndLaterWorkIsSkipped) {
  CpuStream s("compute");
  CpuEvent done;
  bool later_ran = false;
  s.enqueue([] { return invalid_argument("bad shard"); });
  s.enqueue([&] {
    later_ran = true;
    return ok_status();
  });
  s.record(done);  // ordering ops still complete: waiters are not stranded
  done.synchronize();
  Status st = s.synchronize();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("bad shard"), std::string::npos);
  EXPECT_FALSE(later_ran);
  EXPECT_TRUE(s.synchronize().ok());  // cleared
}

TEST(CpuStream, DestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    CpuStream s("compute", {.max_delay_us = 100});
    for (int i = 0; i < 20; ++i) {
      s.enqueue([&] {
        ++ran;
        return ok_status();
      });
    }
  }
  EXPECT_EQ(ran.load(), 20);
}

// The host engine's streams (inline_host): each op runs at once on the queueing thread, in program
// order, with the worker's sticky errors; a record completes at once; a wait on another stream's
// event blocks the caller until that stream gets there.
TEST(CpuStream, InlineRunsEachOpAtOnceOnTheCallingThread) {
  CpuStream host("host", {.inline_host = true});
  const std::thread::id me = std::this_thread::get_id();
  std::vector<int> order;
  host.enqueue([&] {
    EXPECT_EQ(std::this_thread::get_id(), me);
    order.push_back(1);
    return ok_status();
  });
  EXPECT_EQ(order, std::vector<int>{1}) << "ran before enqueue returned";
  CpuEvent e;
  host.record(e);
  EXPECT_TRUE(e.query());
  host.enqueue([] { return internal_error("boom"); });
  host.enqueue([&] {
    order.push_back(2);  // skipped: after a failure
    return ok_status();
  });
  host.enqueue_always([&] { order.push_back(3); });
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
  EXPECT_EQ(host.synchronize().message(), "boom");
  EXPECT_TRUE(host.synchronize().ok()) << "cleared";

  CpuStream worker("worker");
  std::atomic<bool> produced{false};
  worker.enqueue([&] {
    std::this_thread::sleep_for(20ms);
    produced = true;
    return ok_status();
  });
  CpuEvent done;
  worker.record(done);
  host.wait(done);
  EXPECT_TRUE(produced) << "the wait held the caller until the worker's record";
}

}  // namespace
}  // namespace zero::device
